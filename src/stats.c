/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  jobguard's event counters: submits created and replayed, key
 *	  conflicts, gate refusals, compare-and-swap wins and losses, contract
 *	  rejections — per database, in shared memory.
 *
 * The counters exist only when jobguard is in shared_preload_libraries
 * (shared memory can only be reserved then); otherwise counting is a no-op
 * and jobguard.stats() shows them as NULL.  They count events as they
 * happen, including those in transactions that later roll back, and start
 * from zero at server start or jobguard.stats_reset().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "stats.h"

/* Databases that can have counters at once; more are not counted. */
#define STATS_MAX_DATABASES 64

/* The counters of one database. */
typedef struct DatabaseCounters
{
	Oid			dbid;
	pg_atomic_uint64 counters[STAT_COUNT];
} DatabaseCounters;

/* The shared memory area: a slot per database, allocated on first use. */
typedef struct SharedCounters
{
	slock_t		mutex;			/* protects ndatabases and slot allocation */
	int			ndatabases;
	DatabaseCounters databases[STATS_MAX_DATABASES];
} SharedCounters;

static SharedCounters *shared_counters = NULL;
/* This backend's slot (a backend stays in one database). */
static DatabaseCounters *my_counters = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* The names stats() shows, in StatCounter order. */
static const char *const counter_names[STAT_COUNT] = {
	[STAT_SUBMITS_CREATED] = "submits.created",
	[STAT_SUBMITS_REPLAYED] = "submits.replayed",
	[STAT_KEY_CONFLICTS] = "submits.key_conflicts",
	[STAT_GATE_REFUSALS] = "attempts.refused_in_flight",
	[STAT_CAS_WINS] = "finishes.won",
	[STAT_CAS_LOSSES] = "finishes.lost",
	[STAT_CONTRACT_REJECTIONS] = "finishes.rejected",
};

/* stats_shmem_request: reserve the shared memory area (postmaster). */
static void
stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(SharedCounters)));
}

/* stats_shmem_startup: create or attach to the shared memory area. */
static void
stats_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared_counters = ShmemInitStruct("jobguard counters", sizeof(SharedCounters), &found);
	if (!found)
	{
		SpinLockInit(&shared_counters->mutex);
		shared_counters->ndatabases = 0;
		for (int i = 0; i < STATS_MAX_DATABASES; i++)
		{
			shared_counters->databases[i].dbid = InvalidOid;
			for (int c = 0; c < STAT_COUNT; c++)
				pg_atomic_init_u64(&shared_counters->databases[i].counters[c], 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * stats_init: install the shared memory hooks.  Called from _PG_init only
 * while shared_preload_libraries are loaded.
 */
void
stats_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = stats_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = stats_shmem_startup;
}

/*
 * database_counters: this database's slot, found or allocated once per
 * backend; NULL without shared memory or when every slot is taken.
 */
static DatabaseCounters *
database_counters(void)
{
	if (my_counters != NULL || shared_counters == NULL || !OidIsValid(MyDatabaseId))
		return my_counters;

	SpinLockAcquire(&shared_counters->mutex);
	for (int i = 0; i < shared_counters->ndatabases; i++)
	{
		if (shared_counters->databases[i].dbid == MyDatabaseId)
			my_counters = &shared_counters->databases[i];
	}
	if (my_counters == NULL && shared_counters->ndatabases < STATS_MAX_DATABASES)
	{
		my_counters = &shared_counters->databases[shared_counters->ndatabases++];
		my_counters->dbid = MyDatabaseId;
	}
	SpinLockRelease(&shared_counters->mutex);
	return my_counters;
}

/* stats_count: count one event in this database (no-op without preload). */
void
stats_count(StatCounter counter)
{
	DatabaseCounters *db = database_counters();

	if (db != NULL)
		pg_atomic_fetch_add_u64(&db->counters[counter], 1);
}

/*
 * stats_read: the value of a counter in this database.  Returns false
 * when counters are not kept (jobguard not preloaded).
 */
bool
stats_read(StatCounter counter, uint64 *value)
{
	DatabaseCounters *db = database_counters();

	if (db == NULL)
		return false;
	*value = pg_atomic_read_u64(&db->counters[counter]);
	return true;
}

/* stats_counter_name: the metric name of a counter, e.g. "finishes.won". */
const char *
stats_counter_name(StatCounter counter)
{
	return counter_names[counter];
}

/* stats_reset: set this database's counters back to zero. */
void
stats_reset(void)
{
	DatabaseCounters *db = database_counters();

	if (db == NULL)
		return;
	for (int c = 0; c < STAT_COUNT; c++)
		pg_atomic_write_u64(&db->counters[c], 0);
}
