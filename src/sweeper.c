/*-------------------------------------------------------------------------
 *
 * sweeper.c
 *	  The timeout sweeper: a background worker per database listed in
 *	  jobguard.database that writes 'unknown' for started attempts past
 *	  their deadline, every jobguard.sweep_interval, in small batches.
 *
 * Its duties are in one table, duties[], each run through one error
 * wrapper (run_duty): the sweep itself, the computation of the claim
 * floor (claim_floor.c), and the purge by retention (jobguard.purge_
 * interval).  To add a duty: a function doing one round of it, a function
 * saying when it is due, and a row in duties[].
 *
 * The derived state is the truth either way (jobguard.attempt_state()
 * treats an overdue started attempt as unknown everywhere); the sweeper
 * only makes the stored state match it, so that overdue attempts are
 * visible to plain SQL and to other tools.  It runs only when jobguard is
 * in shared_preload_libraries, survives errors (it logs them and tries
 * again next interval), stops on SIGTERM, and does nothing in a database
 * where the extension is not installed.  On a hot standby it does not run
 * at all: the postmaster starts it when recovery ends, so a promoted
 * standby starts sweeping within one interval of its promotion, or of the
 * moment the node takes writes (see sweep_batch).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/varlena.h"

#include "claim_floor.h"
#include "launcher.h"
#include "metrics.h"
#include "store.h"
#include "sweeper.h"

/* GUC jobguard.sweep_interval: milliseconds between sweeps. */
static int	sweep_interval_ms = 1000;
/* GUC jobguard.sweep_batch_size: attempts written per transaction. */
static int	sweep_batch_size = 500;

/* GUC jobguard.purge_interval: milliseconds between purges by retention (0: off). */
static int	purge_interval_ms = 0;
/* GUC jobguard.purge_batch_size: jobs looked at per purge transaction. */
static int	purge_batch_size = 1000;

PGDLLEXPORT void jobguard_sweeper_main(Datum main_arg);

/*
 * sweeper_init: define the sweeper's GUCs.  The launcher (launcher.c)
 * starts a sweeper in each database where jobguard is installed.
 */
void
sweeper_init(void)
{
	DefineCustomIntVariable("jobguard.sweep_interval",
							"Time between two sweeps for overdue attempts.",
							NULL, &sweep_interval_ms, 1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("jobguard.sweep_batch_size",
							"Overdue attempts the sweeper marks unknown per transaction.",
							NULL, &sweep_batch_size, 500, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobguard.purge_interval",
							"Time between two purges by the operations' key policy retention (0: never).",
							"The sweeper then removes, batch by batch, the ended jobs of each operation "
							"older than its retention (see jobguard.set_key_policy).",
							&purge_interval_ms, 0, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("jobguard.purge_batch_size",
							"Jobs the sweeper's purge looks at per transaction.",
							NULL, &purge_batch_size, 1000, 1, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	MarkGUCPrefixReserved("jobguard");
}

/*
 * begin_work: start a transaction for one batch of the sweeper's work;
 * false (and the transaction already ended) when there is nothing to do
 * now: jobguard not installed here, or the server takes no writes.  A
 * read-only transaction is not an error but "not now": during recovery
 * (should the worker ever run then), and while a failover manager holds a
 * node with default_transaction_read_only = on, as pg_auto_failover does
 * for a few seconds when it promotes or demotes one.  Writing anyway would
 * log an ERROR every interval.
 */
static bool
begin_work(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
	if (!XactReadOnly && OidIsValid(get_extension_oid("jobguard", true)))
		return true;
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return false;
}

/* end_work: commit the batch begun by begin_work. */
static void
end_work(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);
}

/*
 * sweep_batch: in one transaction, mark up to sweep_batch_size overdue
 * attempts unknown.  Returns how many it marked, or 0 when there is
 * nothing to do now (see begin_work).
 */
static uint64
sweep_batch(void)
{
	SavedIdentity caller;		/* restored by store_finish() */
	uint64		marked;

	if (!begin_work("jobguard: marking overdue attempts unknown"))
		return 0;
	store_connect(&caller);
	marked = store_sweep_overdue(sweep_batch_size);
	store_finish(&caller);
	end_work();
	return marked;
}

/*
 * sweep: mark every overdue attempt unknown, batch after batch.
 */
static void
sweep(MemoryContext round)
{
	while (sweep_batch() >= (uint64) sweep_batch_size)
		CHECK_FOR_INTERRUPTS();
}

/*
 * refresh_claim_floor: compute the claim floor of this database from the
 * table and publish it (see claim_floor.c).  The commits counted before
 * the snapshot tell whether one may have made work runnable that the
 * snapshot does not see.
 */
static void
refresh_claim_floor(MemoryContext round)
{
	uint64		lowerings = claim_floor_lowerings();

	if (begin_work("jobguard: computing the claim floor"))
	{
		SavedIdentity caller;	/* restored by store_finish() */
		int64		floor;
		TimestampTz time_floor;
		ClaimLevels levels;

		store_connect(&caller);
		floor = store_claim_floor(&time_floor, &levels);
		store_finish(&caller);
		end_work();
		claim_floor_publish(floor, time_floor, &levels, lowerings);
	}
}

/*
 * count_blocked: count this database's blocked jobs (an unknown open
 * attempt that cannot be redriven) and publish them for stats(), which
 * then reads no table (metrics.c).  A 1.1 database has none to count.
 */
static void
count_blocked(MemoryContext round)
{
	if (begin_work("jobguard: counting blocked jobs"))
	{
		SavedIdentity caller;	/* restored by store_finish() */
		int64		blocked;
		TimestampTz oldest;
		bool		counted;

		store_connect(&caller);
		counted = store_blocked_counts(&blocked, &oldest);
		store_finish(&caller);
		end_work();
		if (counted)
			stats_blocked_publish(blocked, oldest);
	}
}

/*
 * purge_by_retention: remove each operation's ended jobs older than its
 * key policy's retention, one page of purge_batch_size jobs per
 * transaction, so that no transaction holds a whole purge.  The policies
 * are read into round, which outlives the transactions.
 */
static void
purge_by_retention(MemoryContext round)
{
	SavedIdentity caller;		/* restored by store_finish() */
	char	  **operations;
	TimestampTz *cutoffs;
	int			n = 0;

	if (begin_work("jobguard: reading the key policies' retention"))
	{
		store_connect(&caller);
		n = store_retentions(round, &operations, &cutoffs);
		store_finish(&caller);
		end_work();
	}
	for (int i = 0; i < n; i++)
	{
		int64		after = 0;
		int64		deleted = 0;
		bool		more = true;

		while (more && begin_work("jobguard: purging by retention"))
		{
			store_connect(&caller);
			more = store_purge_page(cutoffs[i], purge_batch_size, operations[i],
									&after, &deleted);
			store_finish(&caller);
			end_work();
			CHECK_FOR_INTERRUPTS();
		}
		if (deleted > 0)
			ereport(LOG,
					(errmsg("jobguard purged %lld jobs of operation \"%s\" older than its retention",
							(long long) deleted, operations[i])));
	}
}

/* When each duty last ran (0: never), and how long its last full run took. */
typedef struct DutyState
{
	TimestampTz last_start;
	TimestampTz last_end;
	long		last_ms;
} DutyState;

/*
 * The duties' schedules.  sweep_due: every round.  claim_floor_due: the
 * computation reads the jobs in flight, those that used every attempt and
 * the dead entries older than the first claimable job; with very many of
 * those it takes long, so it runs again only after ten times its last
 * duration has passed (at most a tenth of the worker's time), whatever
 * the interval.  The count of blocked jobs (reading the open attempts)
 * runs by the same rule.  purge_due: every jobguard.purge_interval from
 * the end of the last purge, when that is not 0.
 */
/* sweep_due: the sweep runs every round. */
static bool
sweep_due(const DutyState *state, TimestampTz now)
{
	return true;
}

/* claim_floor_due: ten times its last duration after it last started. */
static bool
claim_floor_due(const DutyState *state, TimestampTz now)
{
	return TimestampDifferenceExceeds(state->last_start, now,
									  (int) Min(state->last_ms * 10, INT_MAX));
}

/* purge_due: jobguard.purge_interval after the last purge ended, unless 0. */
static bool
purge_due(const DutyState *state, TimestampTz now)
{
	return purge_interval_ms > 0 &&
		TimestampDifferenceExceeds(state->last_end, now, purge_interval_ms);
}

/* One duty of the sweeper: what it is, when it is due, and its work. */
typedef struct SweeperDuty
{
	const char *name;			/* what it does, for a reader */
	bool		(*due) (const DutyState *state, TimestampTz now);
	void		(*run) (MemoryContext round);
} SweeperDuty;

/* Everything the sweeper does, in the order of a round. */
static const SweeperDuty duties[] = {
	{"sweep overdue attempts", sweep_due, sweep},
	{"compute the claim floor", claim_floor_due, refresh_claim_floor},
	{"count the blocked jobs", claim_floor_due, count_blocked},
	{"purge by retention", purge_due, purge_by_retention},
};

/*
 * run_duty: run one duty if it is due.  An error is logged and its
 * transaction aborted; the duty runs again when next due, so a broken
 * duty never takes the worker (or the other duties) down.  round holds
 * what the duty keeps across its transactions, and is reset after it.
 */
static void
run_duty(const SweeperDuty *duty, DutyState *state, MemoryContext round)
{
	MemoryContext cxt = CurrentMemoryContext;
	TimestampTz start = GetCurrentTimestamp();

	if (!duty->due(state, start))
		return;
	state->last_start = start;
	PG_TRY();
	{
		duty->run(round);
		state->last_ms = TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		pgstat_report_activity(STATE_IDLE, NULL);
	}
	PG_END_TRY();
	state->last_end = GetCurrentTimestamp();
	MemoryContextReset(round);
}

/*
 * extension_installed: whether jobguard is installed in this database.
 */
static bool
extension_installed(void)
{
	bool		installed;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	installed = OidIsValid(get_extension_oid("jobguard", true));
	CommitTransactionCommand();
	return installed;
}

/* sweeper_detach: at exit, tell the launcher this sweeper runs no more. */
static void
sweeper_detach(int code, Datum arg)
{
	(void) launcher_worker_running(LAUNCHED_SWEEPER, false);
}

/*
 * jobguard_sweeper_main: the worker's entry point.  Connects to its
 * database (bgw_extra), then sweeps every sweep_interval until SIGTERM.
 */
void
jobguard_sweeper_main(Datum main_arg)
{
	char		dbname[BGW_EXTRALEN];
	DutyState	states[lengthof(duties)] = {{0}};	/* never: all are due */
	MemoryContext round;

	strlcpy(dbname, MyBgworkerEntry->bgw_extra, BGW_EXTRALEN);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(dbname, NULL, 0);

	/* the launcher started this worker to serve, or to look: say which */
	if (!extension_installed())
	{
		launcher_report_extension(false);
		proc_exit(0);
	}
	launcher_report_extension(true);
	if (!launcher_worker_running(LAUNCHED_SWEEPER, true))
		proc_exit(0);			/* another sweeper serves this database */
	before_shmem_exit(sweeper_detach, (Datum) 0);

	ereport(LOG,
			(errmsg("jobguard sweeper started for database \"%s\"", dbname),
			 errdetail("Sweeping every %d ms, %d attempts per transaction.",
					   sweep_interval_ms, sweep_batch_size)));
	round = AllocSetContextCreate(TopMemoryContext, "jobguard sweeper round",
								  ALLOCSET_SMALL_SIZES);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		for (int i = 0; i < (int) lengthof(duties); i++)
			run_duty(&duties[i], &states[i], round);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sweep_interval_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
