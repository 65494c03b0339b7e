/*-------------------------------------------------------------------------
 *
 * notify_worker.c
 *	  Notifications off the commit path (jobguard in shared_preload_
 *	  libraries): a finishing transaction records its ended jobs in a
 *	  bounded ring in shared memory when it commits, and a background
 *	  worker per database in jobguard.database sends them as
 *	  NOTIFY jobguard_jobs, '<job_id>:<state>' in batches.
 *
 * Why: PostgreSQL's NOTIFY takes one cluster-wide lock from the notifying
 * transaction's pre-commit until its commit record is flushed, so with
 * synchronous_commit on every notifying commit waits for the previous one's
 * WAL flush.  Here only the notifier's own transactions notify; they commit
 * asynchronously (nothing durable is in them), so the lock is held for
 * microseconds and the clients' commits never queue behind it.
 *
 * The ring is written at XACT_EVENT_COMMIT, after the transaction became
 * visible, so a rolled-back transaction (or subtransaction) never notifies
 * and a listener that reads the job on receipt sees the outcome.  When the
 * ring is full the commit does not wait: it records a resync marker, sent
 * as '0:resync', meaning "some notifications were dropped, re-read".  The
 * same commit also wakes every jobguard.await() of its database (a
 * condition variable per database), whether or not jobguard.notify is on.
 * (The claim floor and the wake-ups of claim(wait) are claim_floor.c's.)
 *
 * Without preload, or in a database without a running notifier, job_notify.c
 * calls Async_Notify inside the transaction as before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/async.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "launcher.h"
#include "notify_worker.h"

/* Databases that can have a notifier slot at once. */
#define NOTIFIER_MAX_DATABASES 16
/* Ended jobs a database's ring holds before commits record a resync. */
#define NOTIFIER_RING_SIZE 8192
/* Notifications the notifier sends in one transaction at most. */
#define NOTIFIER_BATCH 1024
/* How long the notifier sleeps when nothing wakes it. */
#define NOTIFIER_IDLE_MS 1000
/*
 * How long the notifier waits after sending a batch before it looks for
 * the next: at a high rate of finishes the next batch gathers what
 * committed meanwhile, so one sending transaction (its xid and commit
 * record) serves many finishes, not one each.  A notification after a
 * quiet moment is sent at once.
 */
#define NOTIFIER_PACE_MS 1
/* Seconds before the postmaster restarts a notifier that exited. */

/* One ended job waiting to be sent. */
typedef struct RingEntry
{
	int64		job_id;
	char		state;			/* 's'ucceeded, 'f'ailed, 'c'ancelled */
} RingEntry;

/* The notifier state of one database. */
typedef struct NotifierSlot
{
	Oid			dbid;
	slock_t		mutex;			/* protects everything below but the cv */
	Latch	   *worker_latch;	/* the running notifier's, or NULL */
	bool		resync;			/* entries were dropped: send '0:resync' */
	uint64		head;			/* entries written so far */
	uint64		tail;			/* entries taken by the notifier so far */
	uint64		dropped;		/* entries dropped on overflow, ever */
	int			in_flight;		/* entries taken by a notifier, not yet sent */
	ConditionVariable finished; /* broadcast when a job of this db ends */
	RingEntry	ring[NOTIFIER_RING_SIZE];
} NotifierSlot;

typedef struct NotifierShared
{
	slock_t		mutex;			/* protects nslots and slot allocation */
	int			nslots;
	NotifierSlot slots[NOTIFIER_MAX_DATABASES];
} NotifierShared;

/* An ended job recorded by this transaction, sent when it commits. */
typedef struct PendingJob
{
	int64		job_id;
	char		state;
	bool		notify;			/* false: only wake await(), send nothing */
	SubTransactionId subid;		/* dropped if this subtransaction aborts */
} PendingJob;

static NotifierShared *notifier_shared = NULL;
static NotifierSlot *my_slot = NULL;

static PendingJob *pending = NULL;
static int	npending = 0;
static int	pending_capacity = 0;
static bool callbacks_registered = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

PGDLLEXPORT void jobguard_notifier_main(Datum main_arg);

/* notifier_shmem_request: reserve the rings (postmaster). */
static void
notifier_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(NotifierShared)));
}

/* notifier_shmem_startup: create or attach to the rings. */
static void
notifier_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	notifier_shared = ShmemInitStruct("jobguard notifier", sizeof(NotifierShared), &found);
	if (!found)
	{
		SpinLockInit(&notifier_shared->mutex);
		notifier_shared->nslots = 0;
		for (int i = 0; i < NOTIFIER_MAX_DATABASES; i++)
		{
			NotifierSlot *slot = &notifier_shared->slots[i];

			slot->dbid = InvalidOid;
			SpinLockInit(&slot->mutex);
			slot->worker_latch = NULL;
			slot->resync = false;
			slot->head = slot->tail = slot->dropped = 0;
			slot->in_flight = 0;
			ConditionVariableInit(&slot->finished);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * database_slot: this database's slot, found or allocated once per
 * backend; NULL without shared memory or when every slot is taken.
 */
static NotifierSlot *
database_slot(void)
{
	if (my_slot != NULL || notifier_shared == NULL || !OidIsValid(MyDatabaseId))
		return my_slot;

	SpinLockAcquire(&notifier_shared->mutex);
	for (int i = 0; i < notifier_shared->nslots; i++)
	{
		if (notifier_shared->slots[i].dbid == MyDatabaseId)
			my_slot = &notifier_shared->slots[i];
	}
	if (my_slot == NULL && notifier_shared->nslots < NOTIFIER_MAX_DATABASES)
	{
		my_slot = &notifier_shared->slots[notifier_shared->nslots++];
		my_slot->dbid = MyDatabaseId;
	}
	SpinLockRelease(&notifier_shared->mutex);
	return my_slot;
}

/*
 * publish_pending: at commit, put this transaction's ended jobs into the
 * ring (or mark a resync when it is full), wake the notifier and every
 * await() of the database.  Runs after the commit is visible; it must not
 * fail, so it only copies into shared memory and sets latches.
 */
static void
publish_pending(void)
{
	NotifierSlot *slot = database_slot();
	Latch	   *latch = NULL;
	bool		any_notify = false;

	if (slot == NULL)
		return;
	SpinLockAcquire(&slot->mutex);
	for (int i = 0; i < npending; i++)
	{
		if (!pending[i].notify)
			continue;
		any_notify = true;
		if (slot->head - slot->tail >= NOTIFIER_RING_SIZE)
		{
			slot->resync = true;
			slot->dropped++;
			continue;
		}
		slot->ring[slot->head % NOTIFIER_RING_SIZE].job_id = pending[i].job_id;
		slot->ring[slot->head % NOTIFIER_RING_SIZE].state = pending[i].state;
		slot->head++;
	}
	latch = slot->worker_latch;
	SpinLockRelease(&slot->mutex);
	if (any_notify && latch != NULL)
		SetLatch(latch);
	ConditionVariableBroadcast(&slot->finished);
}

/* notifier_xact_callback: publish at commit, forget at abort. */
static void
notifier_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (npending > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that ended a jobguard job"),
						 errdetail("Its notification is sent when the transaction commits.")));
			break;
		case XACT_EVENT_COMMIT:
			if (npending > 0)
				publish_pending();
			npending = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			npending = 0;
			break;
		default:
			break;
	}
}

/*
 * notifier_subxact_callback: a committed subtransaction hands its ended
 * jobs to its parent; an aborted one drops them.
 */
static void
notifier_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	int			kept = 0;

	if (event != SUBXACT_EVENT_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB)
		return;
	for (int i = 0; i < npending; i++)
	{
		if (pending[i].subid == mySubid)
		{
			if (event == SUBXACT_EVENT_ABORT_SUB)
				continue;
			pending[i].subid = parentSubid;
		}
		pending[kept++] = pending[i];
	}
	npending = kept;
}

/*
 * notifier_init: while shared_preload_libraries are loaded, reserve the
 * rings (the transaction callbacks are registered per backend on first
 * use).  The launcher (launcher.c) starts a notifier in each database
 * where jobguard is installed.
 */
void
notifier_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = notifier_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = notifier_shmem_startup;
}

/*
 * notifier_record: remember that this transaction ended a job, to publish
 * when it commits.  Returns false when nothing is kept (jobguard not
 * preloaded, or no notifier runs for this database and notify is asked
 * for): the caller then notifies inside the transaction itself.
 */
bool
notifier_record(int64 job_id, char state, bool notify)
{
	NotifierSlot *slot = database_slot();
	bool		running;

	if (slot == NULL)
		return false;
	SpinLockAcquire(&slot->mutex);
	running = slot->worker_latch != NULL;
	SpinLockRelease(&slot->mutex);
	if (notify && !running)
		return false;

	if (!callbacks_registered)
	{
		RegisterXactCallback(notifier_xact_callback, NULL);
		RegisterSubXactCallback(notifier_subxact_callback, NULL);
		callbacks_registered = true;
	}
	if (npending == pending_capacity)
	{
		int			capacity = Max(16, pending_capacity * 2);

		pending = pending == NULL
			? MemoryContextAlloc(TopMemoryContext, capacity * sizeof(PendingJob))
			: repalloc(pending, capacity * sizeof(PendingJob));
		pending_capacity = capacity;
	}
	pending[npending].job_id = job_id;
	pending[npending].state = state;
	pending[npending].notify = notify;
	pending[npending].subid = GetCurrentSubTransactionId();
	npending++;
	return true;
}

/*
 * notifier_await_prepare: get ready to sleep until a job of this database
 * ends.  Returns false without shared memory (the caller polls instead).
 * Call before looking at the job, so that an end committed in between
 * still wakes the sleep.
 */
bool
notifier_await_prepare(void)
{
	NotifierSlot *slot = database_slot();

	if (slot == NULL)
		return false;
	ConditionVariablePrepareToSleep(&slot->finished);
	return true;
}

/*
 * notifier_await_sleep: sleep until a job of this database ends or
 * timeout_ms passes (after notifier_await_prepare).
 */
void
notifier_await_sleep(long timeout_ms)
{
	(void) ConditionVariableTimedSleep(&my_slot->finished, timeout_ms, PG_WAIT_EXTENSION);
}

/* notifier_await_done: stop waiting (after notifier_await_prepare). */
void
notifier_await_done(void)
{
	ConditionVariableCancelSleep();
}

/* state_name: the payload word of a ring entry's state. */
static const char *
state_name(char state)
{
	switch (state)
	{
		case 's':
			return "succeeded";
		case 'f':
			return "failed";
		default:
			return "cancelled";
	}
}

/*
 * send_batch: take up to NOTIFIER_BATCH entries from the ring and send
 * them in one transaction.  Returns how many it took (a resync counts
 * one).  If sending fails the entries are lost, so a resync is recorded.
 */
static int
send_batch(void)
{
	static RingEntry batch[NOTIFIER_BATCH];
	volatile int n = 0;			/* read again after a longjmp */
	volatile bool resync;
	MemoryContext cxt = CurrentMemoryContext;

	SpinLockAcquire(&my_slot->mutex);
	while (n < NOTIFIER_BATCH && my_slot->tail < my_slot->head)
		batch[n++] = my_slot->ring[my_slot->tail++ % NOTIFIER_RING_SIZE];
	resync = my_slot->resync;
	my_slot->resync = false;
	my_slot->in_flight = n;
	SpinLockRelease(&my_slot->mutex);
	if (n == 0 && !resync)
		return 0;

	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		pgstat_report_activity(STATE_RUNNING, "jobguard: sending notifications");
		if (resync)
			Async_Notify(NOTIFIER_CHANNEL, "0:resync");
		for (int i = 0; i < n; i++)
			Async_Notify(NOTIFIER_CHANNEL,
						 psprintf("%lld:%s", (long long) batch[i].job_id,
								  state_name(batch[i].state)));
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, NULL);
		SpinLockAcquire(&my_slot->mutex);
		my_slot->in_flight = 0;
		SpinLockRelease(&my_slot->mutex);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		pgstat_report_activity(STATE_IDLE, NULL);
		SpinLockAcquire(&my_slot->mutex);
		my_slot->resync = true;
		my_slot->dropped += n;
		my_slot->in_flight = 0;
		SpinLockRelease(&my_slot->mutex);
	}
	PG_END_TRY();
	return n + (resync ? 1 : 0);
}

/* detach_notifier: on exit, stop commits from waking a gone notifier. */
static void
detach_notifier(int code, Datum arg)
{
	(void) launcher_worker_running(LAUNCHED_NOTIFIER, false);
	SpinLockAcquire(&my_slot->mutex);
	if (my_slot->worker_latch == MyLatch)
		my_slot->worker_latch = NULL;
	SpinLockRelease(&my_slot->mutex);
}

/*
 * jobguard_notifier_main: the worker's entry point.  Connects to its
 * database (bgw_extra), announces itself in the database's slot, then
 * sends whatever the ring holds each time a commit sets its latch.
 */
void
jobguard_notifier_main(Datum main_arg)
{
	char		dbname[BGW_EXTRALEN];

	strlcpy(dbname, MyBgworkerEntry->bgw_extra, BGW_EXTRALEN);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(dbname, NULL, 0);
	/* nothing durable is sent: never wait for a WAL flush while notifying */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	if (database_slot() == NULL)
	{
		ereport(LOG,
				(errmsg("jobguard notifier for database \"%s\" has no slot; notifications are sent by the committing transactions",
						dbname)));
		proc_exit(0);
	}
	if (!launcher_worker_running(LAUNCHED_NOTIFIER, true))
		proc_exit(0);			/* another notifier serves this database */
	before_shmem_exit(detach_notifier, (Datum) 0);
	SpinLockAcquire(&my_slot->mutex);
	my_slot->worker_latch = MyLatch;
	/* a predecessor that stopped while sending may have lost a batch */
	if (my_slot->in_flight > 0)
	{
		my_slot->resync = true;
		my_slot->dropped += my_slot->in_flight;
		my_slot->in_flight = 0;
	}
	SpinLockRelease(&my_slot->mutex);
	ereport(LOG, (errmsg("jobguard notifier started for database \"%s\"", dbname)));

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (send_batch() > 0)
		{
			/* the pace: commits meanwhile only set the latch, seen next */
			(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 NOTIFIER_PACE_MS, PG_WAIT_EXTENSION);
			continue;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 NOTIFIER_IDLE_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
