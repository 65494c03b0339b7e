/*-------------------------------------------------------------------------
 *
 * operating.c
 *	  The entry points for running jobguard rather than a job: await,
 *	  purge, stats, stats_reset and fast_path_status.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/snapmgr.h"

#include "args.h"
#include "limits.h"
#include "notify_worker.h"
#include "metrics.h"
#include "schema_level.h"
#include "store.h"
#include "store_backend.h"

/* How long await() sleeps between two looks, at first and at most. */
#define AWAIT_FIRST_SLEEP_MS 2
#define AWAIT_MAX_SLEEP_MS 100
/* How long await() sleeps on the condition variable at most. */
#define AWAIT_SHARED_MAX_SLEEP_MS 1000

PG_FUNCTION_INFO_V1(jobguard_await);
PG_FUNCTION_INFO_V1(jobguard_purge);
PG_FUNCTION_INFO_V1(jobguard_purge_batches);
PG_FUNCTION_INFO_V1(jobguard_stats);
PG_FUNCTION_INFO_V1(jobguard_stats_reset);
PG_FUNCTION_INFO_V1(jobguard_fast_path_status);

/* is_terminal_job_state: succeeded, cancelled and failed never change back. */
static bool
is_terminal_job_state(const char *state)
{
	return strcmp(state, "succeeded") == 0 ||
		strcmp(state, "cancelled") == 0 ||
		strcmp(state, "failed") == 0;
}

/*
 * jobguard.await(job_id, timeout) -> the job's state
 *
 * Waits until the job succeeds, fails or is cancelled, or the timeout
 * passes, and returns the state at that moment.  It looks again with a
 * fresh snapshot each time it wakes.  Preloaded, it sleeps on its
 * database's condition variable, which every commit ending a job
 * broadcasts (notify_worker.c), so it wakes at once; otherwise it polls after
 * short sleeps (2 ms, doubling up to 100 ms) on the process latch.  Either
 * way statement_timeout and cancel interrupt it at once.  A
 * REPEATABLE READ or SERIALIZABLE snapshot could never see the outcome, so
 * those isolation levels are refused.
 */
Datum
jobguard_await(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");
	Interval   *timeout;
	int64		timeout_ms;
	TimestampTz deadline;
	long		sleep_ms = AWAIT_FIRST_SLEEP_MS;
	char	   *state;
	bool		shared;
	char	   *scope;
	Oid			userid = GetUserId();

	require_arg(fcinfo, 1, "timeout");
	timeout = PG_GETARG_INTERVAL_P(1);
	/* a day counts as 24 hours and a month as 30 days, as interval comparison does */
	timeout_ms = timeout->time / 1000 +
		((int64) timeout->month * DAYS_PER_MONTH + timeout->day) * SECS_PER_DAY * 1000;
	if (timeout_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"timeout\" of jobguard.await() must not be negative")));
	require_wait_limit(timeout_ms, "timeout", "await");
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("jobguard.await() cannot run in a %s transaction",
						IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errdetail("Its snapshot could never see the job's outcome."),
				 errhint("Call it in READ COMMITTED, or outside a transaction block.")));

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	shared = notifier_await_prepare();
	for (;;)
	{
		long		remaining_ms;

		store_connect(&caller);
		if (!store_fresh_job_state(job_id, &state, &scope) ||
			!scopes_allow(userid, SCOPE_READ, scope))
			report_job_not_found(job_id, userid, SCOPE_READ);
		store_finish(&caller);

		remaining_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (is_terminal_job_state(state) || remaining_ms <= 0)
			break;
		if (shared)
		{
			/* a safety net of a second, should a wake-up ever be missed */
			notifier_await_sleep(Min(AWAIT_SHARED_MAX_SLEEP_MS, remaining_ms));
			continue;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(sleep_ms, remaining_ms), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		sleep_ms = Min(sleep_ms * 2, AWAIT_MAX_SLEEP_MS);
	}
	if (shared)
		notifier_await_done();
	PG_RETURN_DATUM(text_result(state));
}

/*
 * purge_arguments: check purge's arguments (named after `function` in
 * errors) and return the cut-off: the transaction's start minus
 * older_than.
 */
static TimestampTz
purge_arguments(FunctionCallInfo fcinfo, const char *function, int32 *batch_size)
{
	Interval   *older_than;
	Interval	zero_interval = {0};

	require_arg(fcinfo, 0, "older_than");
	require_arg(fcinfo, 1, "batch_size");
	older_than = PG_GETARG_INTERVAL_P(0);
	*batch_size = PG_GETARG_INT32(1);
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(older_than),
										 IntervalPGetDatum(&zero_interval))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"older_than\" of jobguard.%s() must not be negative", function)));
	require_duration(IntervalPGetDatum(older_than), "older_than");
	if (*batch_size < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"batch_size\" of jobguard.%s() must be at least 1", function),
				 errdetail("It is %d.", *batch_size)));
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
												   TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()),
												   IntervalPGetDatum(older_than)));
}

/*
 * jobguard.purge(older_than, batch_size) -> bigint
 *
 * Deletes jobs that are terminal (succeeded, cancelled, failed) since
 * longer than older_than, with their attempts, batch_size at a time;
 * returns how many jobs it deleted.  older_than NULL applies each
 * operation's key policy retention instead (operations without one are
 * kept).  Jobs with an open attempt are never purged.  After purge an
 * owner's key is free again: jobguard remembers a key for as long as its
 * job exists.  It all happens in the caller's transaction; purge_batches
 * commits page by page instead.
 */
Datum
jobguard_purge(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int32		batch_size;
	TimestampTz cutoff;
	int64		deleted;

	require_tables_owner(fcinfo);

	if (PG_ARGISNULL(0))
	{
		require_arg(fcinfo, 1, "batch_size");
		batch_size = PG_GETARG_INT32(1);
		if (batch_size < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"batch_size\" of jobguard.purge() must be at least 1"),
					 errdetail("It is %d.", batch_size)));
		store_connect(&caller);
		deleted = store_purge_by_retention(batch_size);
		store_finish(&caller);
		PG_RETURN_INT64(deleted);
	}
	cutoff = purge_arguments(fcinfo, "purge", &batch_size);
	store_connect(&caller);
	deleted = store_purge(cutoff, batch_size, NULL);
	store_finish(&caller);
	PG_RETURN_INT64(deleted);
}

/*
 * CALL jobguard.purge_batches(older_than, batch_size)
 *
 * What purge() does, but committing after every page of batch_size jobs,
 * so that no transaction holds more than one page of deleted rows (and
 * their locks) and a long purge can be stopped without losing the pages
 * already done.  After each page it reports progress: a NOTICE, and the
 * query text pg_stat_activity shows for this session.  The cut-off is
 * fixed when the call starts.  Must be CALLed outside a transaction block
 * (it commits); inside one, use purge().
 */
Datum
jobguard_purge_batches(PG_FUNCTION_ARGS)
{
	CallContext *context = (CallContext *) fcinfo->context;
	int32		batch_size;
	TimestampTz cutoff = purge_arguments(fcinfo, "purge_batches", &batch_size);
	int64		after = 0;
	int64		total = 0;
	bool		more = true;

	require_tables_owner(fcinfo);

	if (context == NULL || !IsA(context, CallContext) || context->atomic)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_TERMINATION),
				 errmsg("jobguard.purge_batches() must be called with CALL outside a transaction block"),
				 errdetail("It commits after every batch."),
				 errhint("Inside a transaction, use jobguard.purge().")));

	if (SPI_connect_ext(SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "jobguard: SPI_connect_ext failed");
	for (int batch = 1; more; batch++)
	{
		SavedIdentity caller;	/* restored by store_finish() */
		int64		deleted = 0;

		/* each batch in its own transaction, with its own snapshot */
		PushActiveSnapshot(GetTransactionSnapshot());
		store_connect(&caller);
		more = store_purge_page(cutoff, batch_size, NULL, &after, &deleted);
		store_finish(&caller);
		PopActiveSnapshot();
		total += deleted;
		SPI_commit();

		ereport(NOTICE,
				(errmsg("jobguard.purge_batches: batch %d: %lld jobs deleted, %lld in all",
						batch, (long long) deleted, (long long) total)));
		pgstat_report_activity(STATE_RUNNING,
							   psprintf("CALL jobguard.purge_batches: batch %d committed, %lld jobs deleted so far, at job id %lld",
										batch, (long long) total, (long long) after));
		CHECK_FOR_INTERRUPTS();
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * recount_gauges: count jobs and attempts per stored state with one scan
 * of each table and set this database's gauges from it, keeping what
 * commits during the scan.
 */
static void
recount_gauges(void)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		before[GAUGE_COUNT];
	int64		counted[GAUGE_COUNT] = {0};

	stats_gauges_begin_recount(before);
	store_connect(&caller);
	store_stored_state_counts(counted);
	store_finish(&caller);
	stats_gauges_end_recount(before, counted);
}

/*
 * jobguard.stats() -> (metric, value) rows
 *
 * Jobs and attempts by state, then the event counters of this database.
 * Preloaded, every row comes from shared memory (metrics.c): the state
 * gauges as transactions committed them, read without touching a table
 * (after a crash, the first call recounts them with one scan), and the
 * event counters since the first start or stats_reset(), kept across clean
 * restarts.  Without preload, the states are counted from the tables now
 * (effective states: a started attempt past its deadline is unknown) and
 * the event counters are NULL.
 */
Datum
jobguard_stats(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (stats_gauges_kept())
	{
		/* a prepared transaction that changed jobs and has ended since */
		stats_gauges_settle_prepared();
		if (!stats_gauges_valid())
			recount_gauges();
		for (int g = 0; g < GAUGE_COUNT; g++)
		{
			Datum		values[2];
			bool		nulls[2] = {false, false};

			values[0] = text_result(stats_gauge_name((Gauge) g));
			values[1] = Int64GetDatum(stats_gauge_read((Gauge) g));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	else
	{
		store_connect(&caller);
		store_state_counts(rsinfo);
		store_finish(&caller);
	}

	/*
	 * 1.2: the jobs blocked by an unknown attempt that cannot be redriven.
	 * Preloaded, as the sweeper last counted them (stats() reads no
	 * table); otherwise counted now.  The oldest's age is reckoned now.
	 */
	if (schema_is_1_2())
	{
		int64		blocked = 0;
		TimestampTz oldest = 0;
		bool		found = stats_gauges_kept() && stats_blocked_read(&blocked, &oldest);

		if (!found)
		{
			store_connect(&caller);
			found = store_blocked_counts(&blocked, &oldest);
			store_finish(&caller);
		}
		if (found)
		{
			Datum		values[2];
			bool		nulls[2] = {false, false};
			TimestampTz now = GetCurrentTransactionStartTimestamp();

			values[0] = text_result("blocked.jobs");
			values[1] = Int64GetDatum(blocked);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
			values[0] = text_result("blocked.oldest_seconds");
			values[1] = Int64GetDatum(oldest == 0 || oldest >= now ? 0 :
									  (now - oldest) / USECS_PER_SEC);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}

	for (int c = 0; c < STAT_COUNT; c++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};
		uint64		count;

		/* a 1.1 database's stats() shows 1.1's counters */
		if ((c == STAT_REDRIVES || c == STAT_RECONCILED) && !schema_is_1_2())
			continue;
		values[0] = text_result(stats_counter_name((StatCounter) c));
		if (stats_read((StatCounter) c, &count))
			values[1] = Int64GetDatum((int64) count);
		else
			nulls[1] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	/* per provider with a policy: open attempts, starts throttled */
	limits_put_stats(rsinfo);
	return (Datum) 0;
}

/*
 * jobguard.stats_reset() -> void: zero this database's event counters and,
 * preloaded, recount its state gauges from the tables (one scan).
 */
Datum
jobguard_stats_reset(PG_FUNCTION_ARGS)
{
	require_tables_owner(fcinfo);
	stats_reset();
	if (stats_gauges_kept())
		recount_gauges();
	PG_RETURN_VOID();
}

/*
 * jobguard.fast_path_status() -> 'on' | 'off: <why>'
 *
 * Whether submit, begin_attempt and finish_attempt would write their rows
 * directly right now, and if not, why (a trigger someone added, the
 * setting, a read-only transaction).  Either way the answers are the same;
 * off is slower.
 */
Datum
jobguard_fast_path_status(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	const char *reason;
	char	   *status;

	/* as the tables' owner, who compiles their rules for every call */
	store_connect(&caller);
	reason = rows_unusable_reason();
	status = store_keep_string(reason == NULL ? "on" : psprintf("off: %s", reason));
	store_finish(&caller);
	PG_RETURN_DATUM(text_result(status));
}
