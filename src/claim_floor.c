/*-------------------------------------------------------------------------
 *
 * claim_floor.c
 *	  The claim floor and the claim wake-ups, per database in shared memory
 *	  (jobguard in shared_preload_libraries).
 *
 * The claim floor is the lowest job id a claim needs to look at: no job
 * with a lower id is claimable, short of work committed this very moment.
 * Why: the index of jobs not yet succeeded or cancelled (jobs_claim_order)
 * keeps the entries of jobs that finished, dead, until VACUUM removes them,
 * and they are all older than the jobs still to do.  Searched from its
 * start, a claim steps over every job finished since the last vacuum —
 * on a table of millions, autovacuum comes every 20 % of it, and a claim
 * took 13 ms reading 15 MB of dead entries.  The sweeper computes the
 * floor from the table every jobguard.sweep_interval (the oldest job that
 * is neither done nor has an open attempt or every attempt used:
 * STMT_CLAIM_FLOOR), and every commit that makes a job runnable lowers it
 * to that job at once, so a claim starts its search where the work is.
 * claim's order is by priority and run time (jobs_run_order) since 1.2:
 * there the time floor bounds each priority's search the same way
 * (claim_time_floor(), computed with STMT_CLAIM_TIME_FLOOR).
 *
 * The same commit wakes the claims waiting for work in its database
 * (claim(wait => ...)), through a condition variable per database.
 * Without preload there is no shared memory: the floor is 0 (search from
 * the start) and waiting claims poll.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "claim_floor.h"

/* Databases that can have a claim slot at once. */
#define CLAIM_MAX_DATABASES 16

/* The claim floor and wake-up of one database. */
typedef struct ClaimSlot
{
	Oid			dbid;
	slock_t		mutex;			/* protects claim_floor and floor_lowerings */
	ConditionVariable runnable; /* broadcast when work may have become
								 * runnable here (claim(wait)) */
	int64		claim_floor;	/* no claimable job has a lower id (0: not
								 * known); see claim_floor() */
	TimestampTz time_floor;		/* no claimable job has an earlier run time
								 * (DT_NOBEGIN: not known) */
	ClaimLevels levels;			/* the priorities with claimable jobs */
	uint64		floor_lowerings;	/* commits that made work runnable */
} ClaimSlot;

typedef struct ClaimShared
{
	slock_t		mutex;			/* protects nslots and slot allocation */
	int			nslots;
	ClaimSlot	slots[CLAIM_MAX_DATABASES];
} ClaimShared;

static ClaimShared *claim_shared = NULL;
static ClaimSlot *my_slot = NULL;

/*
 * This transaction made work runnable: wake claim(wait) at commit, and
 * lower the claim floor to runnable_from, the lowest id it made runnable.
 */
static bool work_pending = false;
static int64 runnable_from = PG_INT64_MAX;
static TimestampTz runnable_at = DT_NOEND;	/* the earliest run time it made
											 * runnable */
static ClaimLevels runnable_levels = {0};	/* the priorities it made runnable */
static bool callback_registered = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* claim_shmem_request: reserve the slots (postmaster). */
static void
claim_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(ClaimShared)));
}

/* claim_shmem_startup: create or attach to the slots. */
static void
claim_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	claim_shared = ShmemInitStruct("jobguard claim floor", sizeof(ClaimShared), &found);
	if (!found)
	{
		SpinLockInit(&claim_shared->mutex);
		claim_shared->nslots = 0;
		for (int i = 0; i < CLAIM_MAX_DATABASES; i++)
		{
			ClaimSlot  *slot = &claim_shared->slots[i];

			slot->dbid = InvalidOid;
			SpinLockInit(&slot->mutex);
			ConditionVariableInit(&slot->runnable);
			slot->claim_floor = 0;
			slot->time_floor = DT_NOBEGIN;
			slot->levels.n = -1;
			slot->floor_lowerings = 0;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * claim_floor_init: while shared_preload_libraries are loaded, reserve the
 * slots in shared memory.
 */
void
claim_floor_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = claim_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = claim_shmem_startup;
}

/*
 * database_slot: this database's slot, found or allocated once per
 * backend; NULL without shared memory or when every slot is taken.
 */
static ClaimSlot *
database_slot(void)
{
	if (my_slot != NULL || claim_shared == NULL || !OidIsValid(MyDatabaseId))
		return my_slot;

	SpinLockAcquire(&claim_shared->mutex);
	for (int i = 0; i < claim_shared->nslots; i++)
	{
		if (claim_shared->slots[i].dbid == MyDatabaseId)
			my_slot = &claim_shared->slots[i];
	}
	if (my_slot == NULL && claim_shared->nslots < CLAIM_MAX_DATABASES)
	{
		my_slot = &claim_shared->slots[claim_shared->nslots++];
		my_slot->dbid = MyDatabaseId;
	}
	SpinLockRelease(&claim_shared->mutex);
	return my_slot;
}

/*
 * lower_claim_floor: a commit made job from_id (and maybe later ones)
 * runnable: no claim may pass over it, so the floor goes down to it; and
 * the count of lowerings moves on, whether the floor moved or not, so that
 * a floor computed from a snapshot that did not see this commit is not
 * published over it (claim_floor_publish).  Runs after the commit is
 * visible.
 */
/*
 * claim_levels_add: add a priority to a set of levels (kept ascending);
 * CLAIM_PRIORITY_UNKNOWN, or one too many, makes the set unknown.
 */
void
claim_levels_add(ClaimLevels *levels, int priority)
{
	int			i;

	if (levels->n < 0)
		return;
	if (priority == CLAIM_PRIORITY_UNKNOWN)
	{
		levels->n = -1;
		return;
	}
	for (i = 0; i < levels->n && levels->priority[i] < priority; i++)
		;
	if (i < levels->n && levels->priority[i] == priority)
		return;
	if (levels->n == CLAIM_MAX_LEVELS)
	{
		levels->n = -1;
		return;
	}
	memmove(&levels->priority[i + 1], &levels->priority[i],
			sizeof(int16) * (levels->n - i));
	levels->priority[i] = (int16) priority;
	levels->n++;
}

/* levels_merge: add every level of from to into (unknown stays unknown). */
static void
levels_merge(ClaimLevels *into, const ClaimLevels *from)
{
	if (from->n < 0)
		into->n = -1;
	for (int i = 0; i < from->n && into->n >= 0; i++)
		claim_levels_add(into, from->priority[i]);
}

static void
lower_claim_floor(ClaimSlot *slot, int64 from_id, TimestampTz from_time)
{
	SpinLockAcquire(&slot->mutex);
	levels_merge(&slot->levels, &runnable_levels);
	if (slot->claim_floor > from_id)
		slot->claim_floor = from_id;
	if (slot->time_floor > from_time)
		slot->time_floor = from_time;
	slot->floor_lowerings++;
	SpinLockRelease(&slot->mutex);
}

/*
 * claim_xact_callback: at commit, lower the floor and wake the waiting
 * claims if this transaction made work runnable; forget it at abort.
 */
static void
claim_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			if (work_pending && my_slot != NULL)
			{
				lower_claim_floor(my_slot, runnable_from, runnable_at);
				ConditionVariableBroadcast(&my_slot->runnable);
			}
			work_pending = false;
			runnable_from = PG_INT64_MAX;
			runnable_at = DT_NOEND;
			runnable_levels.n = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			work_pending = false;
			runnable_from = PG_INT64_MAX;
			runnable_at = DT_NOEND;
			runnable_levels.n = 0;
			break;
		default:
			break;
	}
}

/*
 * claim_work_ready: this transaction made job job_id runnable (a new job,
 * an attempt failed or cancelled): when it commits, wake the claims
 * waiting in this database and lower the claim floor to the job.  A no-op
 * without shared memory (claims poll and search from the start then).  A
 * rolled-back subtransaction may leave a wake-up behind: a waiting claim
 * then looks once more and finds nothing, and the floor is lower than it
 * need be until the next computation, both harmless.
 */
void
claim_work_ready(int64 job_id)
{
	claim_work_ready_at(job_id, DT_NOBEGIN, CLAIM_PRIORITY_UNKNOWN);
}

/*
 * claim_work_ready_at: claim_work_ready() of a job whose run time (run_at,
 * not_before, else its creation) and priority are known: the time floor
 * goes down to it, not to the beginning of time, and the priority joins
 * the known levels (CLAIM_PRIORITY_UNKNOWN: they are not known any more).
 */
void
claim_work_ready_at(int64 job_id, TimestampTz run_time, int priority)
{
	if (database_slot() == NULL)
		return;
	if (!callback_registered)
	{
		RegisterXactCallback(claim_xact_callback, NULL);
		callback_registered = true;
	}
	work_pending = true;
	runnable_from = Min(runnable_from, job_id);
	runnable_at = Min(runnable_at, run_time);
	claim_levels_add(&runnable_levels, priority);
}

/*
 * claim_levels: the priorities that have claimable jobs in this database
 * (false when not known): claim walks them in jobs_run_order without
 * looking for them there, where the dead entries of finished jobs lie at
 * the start of each priority.
 */
bool
claim_levels(ClaimLevels *levels)
{
	ClaimSlot  *slot = database_slot();

	if (slot == NULL)
		return false;
	SpinLockAcquire(&slot->mutex);
	*levels = slot->levels;
	SpinLockRelease(&slot->mutex);
	return levels->n >= 0;
}

/*
 * claim_floor: the lowest job id a claim in this database needs to look
 * at (see the top of this file); 0 when not known: without shared memory,
 * or until the sweeper of this database has computed it.
 */
int64
claim_floor(void)
{
	ClaimSlot  *slot = database_slot();
	int64		floor;

	if (slot == NULL)
		return 0;
	SpinLockAcquire(&slot->mutex);
	floor = slot->claim_floor;
	SpinLockRelease(&slot->mutex);
	return floor;
}

/*
 * claim_time_floor: the earliest run time a claim in this database needs
 * to look at, in each priority of claim's order (jobs_run_order): no
 * claimable job's run time is earlier, short of work committed this very
 * moment.  The successor of the id floor for that order: the entries of
 * finished jobs, dead until VACUUM, are the earliest of each priority.
 * DT_NOBEGIN when not known (without shared memory, before the sweeper
 * computed it, or after a commit made runnable a job whose run time it
 * did not say).
 */
TimestampTz
claim_time_floor(void)
{
	ClaimSlot  *slot = database_slot();
	TimestampTz floor;

	if (slot == NULL)
		return DT_NOBEGIN;
	SpinLockAcquire(&slot->mutex);
	floor = slot->time_floor;
	SpinLockRelease(&slot->mutex);
	return floor;
}

/*
 * claim_floor_lowerings: how many commits have made work runnable in this
 * database so far; read before taking the snapshot that computes a new
 * floor, and given back to claim_floor_publish().
 */
uint64
claim_floor_lowerings(void)
{
	ClaimSlot  *slot = database_slot();
	uint64		n;

	if (slot == NULL)
		return 0;
	SpinLockAcquire(&slot->mutex);
	n = slot->floor_lowerings;
	SpinLockRelease(&slot->mutex);
	return n;
}

/*
 * claim_floor_publish: the sweeper computed floor from a snapshot taken
 * after reading lowerings_before.  Publish it, unless a commit made work
 * runnable since: that commit may be invisible to the snapshot, so the
 * floor then only goes down (the next computation raises it).
 */
void
claim_floor_publish(int64 floor, TimestampTz time_floor, const ClaimLevels *levels,
					uint64 lowerings_before)
{
	ClaimSlot  *slot = database_slot();

	if (slot == NULL)
		return;
	SpinLockAcquire(&slot->mutex);
	if (slot->floor_lowerings == lowerings_before)
	{
		slot->claim_floor = floor;
		slot->time_floor = time_floor;
		slot->levels = *levels;
	}
	else
	{
		levels_merge(&slot->levels, levels);
		if (slot->claim_floor > floor)
			slot->claim_floor = floor;
		if (slot->time_floor > time_floor)
			slot->time_floor = time_floor;
	}
	SpinLockRelease(&slot->mutex);
}

/*
 * claim_wait_prepare: get ready to sleep until work may have become
 * runnable in this database; false without shared memory (the caller
 * polls).  Call before looking for work, so that work committed in
 * between still wakes the sleep.
 */
bool
claim_wait_prepare(void)
{
	ClaimSlot  *slot = database_slot();

	if (slot == NULL)
		return false;
	ConditionVariablePrepareToSleep(&slot->runnable);
	return true;
}

/*
 * claim_wait_sleep: sleep until work may have become runnable here, or
 * timeout_ms passes (after claim_wait_prepare).
 */
void
claim_wait_sleep(long timeout_ms)
{
	(void) ConditionVariableTimedSleep(&my_slot->runnable, timeout_ms, PG_WAIT_EXTENSION);
}

/* claim_wait_done: stop waiting (after claim_wait_prepare). */
void
claim_wait_done(void)
{
	ConditionVariableCancelSleep();
}
