/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  jobguard's counters, per database in shared memory: the event
 *	  counters (submits created and replayed, key conflicts, gate refusals,
 *	  compare-and-swap wins and losses, contract rejections, attempts the
 *	  sweeper marked unknown, jobs purged) and the state gauges (jobs and
 *	  attempts per state).
 *
 * The counters exist only when jobguard is in shared_preload_libraries
 * (shared memory can only be reserved then); otherwise counting is a no-op,
 * jobguard.stats() shows the event counters as NULL and counts the states
 * with a scan of the tables.
 *
 * Event counters count events as they happen, including those in
 * transactions that later roll back.  The gauges move only when a
 * transaction commits: each call records its changes (a job from pending
 * to running, an attempt from started to succeeded) for the current
 * (sub)transaction, and a transaction callback applies them at commit, so
 * a rollback leaves them as they were.  They count stored states: a
 * started attempt past its deadline counts as started, and its job as
 * running, until the sweeper writes 'unknown' (within
 * jobguard.sweep_interval).
 *
 * Persistence, as pg_stat_statements does it: at a clean shutdown the
 * postmaster writes every database's counters and gauges to
 * pg_stat/jobguard.stat; the next start reads the file and removes it.
 * After a crash or an immediate shutdown there is no file: the event
 * counters start from zero and
 * the gauges of each database are recounted by one scan at the first
 * stats() there (as after DROP and CREATE EXTENSION, or at the first
 * stats() ever).  jobguard.stats_reset() zeroes the event counters and
 * recounts the gauges (for after jobs were loaded other than through
 * jobguard, e.g. by pg_restore).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xact.h"
#include "storage/procarray.h"
#include "catalog/pg_control.h"
#include "commands/extension.h"
#include "common/controldata_utils.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"

#include "store_rows.h"
#include "metrics.h"

/* Databases that can have counters at once; more are not counted. */
#define STATS_MAX_DATABASES 64

/*
 * How many prepared transactions that changed jobs one database tracks
 * (see stats_gauges_settle_prepared); beyond, the gauges are recounted.
 */
#define STATS_MAX_PREPARED 64

/* Where the counters wait from a clean shutdown to the next start. */
#define STATS_DUMP_FILE PGSTAT_STAT_PERMANENT_DIRECTORY "/jobguard.stat"
/* The dump file's first word; changed whenever its layout changes. */
#define STATS_FILE_HEADER 0x4A470103

/* The counters of one database. */
typedef struct DatabaseCounters
{
	Oid			dbid;
	pg_atomic_uint64 counters[STAT_COUNT];
	/* signed counts kept in unsigned atomics (two's complement) */
	pg_atomic_uint64 gauges[GAUGE_COUNT];
	pg_atomic_uint32 gauges_valid;	/* 0 until counted once (or restored) */
	pg_atomic_uint32 extension_oid; /* the installation the gauges count */
	/* prepared transactions that moved gauges (SharedCounters.mutex) */
	int			nprepared;
	TransactionId prepared[STATS_MAX_PREPARED];
} DatabaseCounters;

/* The shared memory area: a slot per database, allocated on first use. */
typedef struct SharedCounters
{
	slock_t		mutex;			/* protects ndatabases and slot allocation */
	int			ndatabases;
	DatabaseCounters databases[STATS_MAX_DATABASES];
} SharedCounters;

/* One database's counters as the dump file holds them. */
typedef struct DumpedDatabase
{
	Oid			dbid;
	bool		gauges_valid;
	Oid			extension_oid;
	uint64		counters[STAT_COUNT];
	uint64		gauges[GAUGE_COUNT];
} DumpedDatabase;

/* The gauge changes of one open (sub)transaction. */
typedef struct GaugeFrame
{
	SubTransactionId subid;
	int64		delta[GAUGE_COUNT];
} GaugeFrame;

static SharedCounters *shared_counters = NULL;
/* This backend's slot (a backend stays in one database). */
static DatabaseCounters *my_counters = NULL;

/* The gauge changes of this transaction, innermost subtransaction last. */
static GaugeFrame *frames = NULL;
static int	nframes = 0;
static int	frames_capacity = 0;

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
	[STAT_SWEPT] = "sweeper.marked_unknown",
	[STAT_PURGED] = "purge.jobs_deleted",
	[STAT_REDRIVES] = "redrives",
	[STAT_RECONCILED] = "reconciled",
};

/* The names of the gauges, in Gauge order. */
static const char *const gauge_names[GAUGE_COUNT] = {
	"jobs.pending", "jobs.running", "jobs.unknown",
	"jobs.succeeded", "jobs.failed", "jobs.cancelled",
	"attempts.started", "attempts.unknown", "attempts.cancelled",
	"attempts.succeeded", "attempts.lost", "attempts.failed",
};

/* stats_shmem_request: reserve the shared memory area (postmaster). */
static void
stats_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(SharedCounters)));
}

/*
 * shut_down_cleanly: whether the control file says the server was shut
 * down with a shutdown checkpoint.  An immediate shutdown (pg_ctl stop -m
 * immediate) also exits the postmaster normally, but is followed by crash
 * recovery, which may not replay every commit the gauges saw (with
 * synchronous_commit off): it counts as a crash.
 */
static bool
shut_down_cleanly(void)
{
	bool		crc_ok;
	ControlFileData *control = get_controlfile(DataDir, &crc_ok);

	return crc_ok && (control->state == DB_SHUTDOWNED ||
					  control->state == DB_SHUTDOWNED_IN_RECOVERY);
}

/*
 * stats_shmem_shutdown: at a clean postmaster shutdown, write every
 * database's counters to STATS_DUMP_FILE, through a temporary file and a
 * rename so that a half-written file is never read.  Nothing is written
 * after a crash (code != 0) or an immediate shutdown: the event counters
 * then start from zero and the gauges are recounted.
 */
static void
stats_shmem_shutdown(int code, Datum arg)
{
	FILE	   *file;
	uint32		header = STATS_FILE_HEADER;
	int32		n;

	if (code != 0 || shared_counters == NULL || !shut_down_cleanly())
		return;
	file = AllocateFile(STATS_DUMP_FILE ".tmp", PG_BINARY_W);
	if (file == NULL)
		goto error;
	n = shared_counters->ndatabases;
	if (fwrite(&header, sizeof(header), 1, file) != 1 ||
		fwrite(&n, sizeof(n), 1, file) != 1)
		goto error;
	for (int i = 0; i < n; i++)
	{
		DatabaseCounters *db = &shared_counters->databases[i];
		DumpedDatabase d;

		memset(&d, 0, sizeof(d));
		d.dbid = db->dbid;
		/* a prepared transaction may still commit after the restart */
		d.gauges_valid = pg_atomic_read_u32(&db->gauges_valid) != 0 &&
			db->nprepared == 0;
		d.extension_oid = pg_atomic_read_u32(&db->extension_oid);
		for (int c = 0; c < STAT_COUNT; c++)
			d.counters[c] = pg_atomic_read_u64(&db->counters[c]);
		for (int g = 0; g < GAUGE_COUNT; g++)
			d.gauges[g] = pg_atomic_read_u64(&db->gauges[g]);
		if (fwrite(&d, sizeof(d), 1, file) != 1)
			goto error;
	}
	if (FreeFile(file))
	{
		file = NULL;
		goto error;
	}
	(void) durable_rename(STATS_DUMP_FILE ".tmp", STATS_DUMP_FILE, LOG);
	return;

error:
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("could not write file \"%s\": %m", STATS_DUMP_FILE ".tmp")));
	if (file)
		FreeFile(file);
	unlink(STATS_DUMP_FILE ".tmp");
}

/*
 * load_dump: restore the counters a clean shutdown left in STATS_DUMP_FILE,
 * then remove the file, so that a crash later cannot bring back stale
 * values.  Without a readable file every counter starts at zero and every
 * gauge is to be recounted.
 */
static void
load_dump(void)
{
	FILE	   *file = AllocateFile(STATS_DUMP_FILE, PG_BINARY_R);
	uint32		header;
	int32		n;

	if (file == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", STATS_DUMP_FILE)));
		return;
	}
	if (fread(&header, sizeof(header), 1, file) != 1 || header != STATS_FILE_HEADER ||
		fread(&n, sizeof(n), 1, file) != 1 || n < 0 || n > STATS_MAX_DATABASES)
		n = 0;
	for (int i = 0; i < n; i++)
	{
		DumpedDatabase d;
		DatabaseCounters *db = &shared_counters->databases[i];

		if (fread(&d, sizeof(d), 1, file) != 1)
		{
			ereport(LOG,
					(errmsg("ignoring the rest of the truncated file \"%s\"", STATS_DUMP_FILE)));
			break;
		}
		db->dbid = d.dbid;
		pg_atomic_write_u32(&db->gauges_valid, d.gauges_valid ? 1 : 0);
		pg_atomic_write_u32(&db->extension_oid, d.extension_oid);
		for (int c = 0; c < STAT_COUNT; c++)
			pg_atomic_write_u64(&db->counters[c], d.counters[c]);
		for (int g = 0; g < GAUGE_COUNT; g++)
			pg_atomic_write_u64(&db->gauges[g], d.gauges[g]);
		shared_counters->ndatabases = i + 1;
	}
	FreeFile(file);
	unlink(STATS_DUMP_FILE);
}

/*
 * stats_shmem_startup: create or attach to the shared memory area.  The
 * postmaster also restores the counters of the last clean shutdown and
 * arranges to save them at the next.
 */
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
			DatabaseCounters *db = &shared_counters->databases[i];

			db->dbid = InvalidOid;
			for (int c = 0; c < STAT_COUNT; c++)
				pg_atomic_init_u64(&db->counters[c], 0);
			for (int g = 0; g < GAUGE_COUNT; g++)
				pg_atomic_init_u64(&db->gauges[g], 0);
			pg_atomic_init_u32(&db->gauges_valid, 0);
			db->nprepared = 0;
			pg_atomic_init_u32(&db->extension_oid, InvalidOid);
		}
	}
	LWLockRelease(AddinShmemInitLock);

	if (!IsUnderPostmaster)
	{
		on_shmem_exit(stats_shmem_shutdown, (Datum) 0);
		if (!found)
			load_dump();
	}
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
	stats_add(counter, 1);
}

/* stats_add: count n events at once in this database (no-op without preload). */
void
stats_add(StatCounter counter, int64 n)
{
	DatabaseCounters *db = database_counters();

	if (db != NULL && n > 0)
		pg_atomic_fetch_add_u64(&db->counters[counter], (uint64) n);
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

/* stats_gauge_name: the metric name of a gauge, e.g. "jobs.running". */
const char *
stats_gauge_name(Gauge gauge)
{
	return gauge_names[gauge];
}

/* stats_reset: set this database's event counters back to zero. */
void
stats_reset(void)
{
	DatabaseCounters *db = database_counters();

	if (db == NULL)
		return;
	for (int c = 0; c < STAT_COUNT; c++)
		pg_atomic_write_u64(&db->counters[c], 0);
}

/*
 * frames_move_gauges: whether this transaction's frames change any gauge.
 */
static bool
frames_move_gauges(void)
{
	for (int f = 0; f < nframes; f++)
		for (int g = 0; g < GAUGE_COUNT; g++)
			if (frames[f].delta[g] != 0)
				return true;
	return false;
}

/*
 * track_prepared: a transaction that changed jobs was prepared: whether
 * COMMIT PREPARED or ROLLBACK PREPARED ends it (in any session, after any
 * restart) is not known here, so its changes are not applied; its id is
 * kept, and once it has ended the gauges are recounted from the tables
 * (stats_gauges_settle_prepared).  With no room left, the gauges are
 * recounted at once and again after every prepared transaction ended.
 */
static void
track_prepared(DatabaseCounters *db)
{
	TransactionId xid = GetTopTransactionIdIfAny();

	SpinLockAcquire(&shared_counters->mutex);
	if (db->nprepared < STATS_MAX_PREPARED && TransactionIdIsValid(xid))
		db->prepared[db->nprepared++] = xid;
	else
		pg_atomic_write_u32(&db->gauges_valid, 0);
	SpinLockRelease(&shared_counters->mutex);
}

/*
 * stats_gauges_settle_prepared: forget the tracked prepared transactions
 * that have ended (committed or rolled back prepared); if any has, the
 * gauges are marked for a recount, which sees their outcome in the tables.
 * Called before the gauges are read.
 */
void
stats_gauges_settle_prepared(void)
{
	DatabaseCounters *db = database_counters();
	TransactionId tracked[STATS_MAX_PREPARED];
	TransactionId ended[STATS_MAX_PREPARED];
	int			n;
	int			nended = 0;

	if (db == NULL)
		return;
	SpinLockAcquire(&shared_counters->mutex);
	n = db->nprepared;
	memcpy(tracked, db->prepared, sizeof(TransactionId) * n);
	SpinLockRelease(&shared_counters->mutex);
	for (int i = 0; i < n; i++)
		if (!TransactionIdIsInProgress(tracked[i]))
			ended[nended++] = tracked[i];
	if (nended == 0)
		return;
	SpinLockAcquire(&shared_counters->mutex);
	for (int i = 0; i < db->nprepared; i++)
		for (int e = 0; e < nended; e++)
			if (TransactionIdEquals(db->prepared[i], ended[e]))
			{
				db->prepared[i--] = db->prepared[--db->nprepared];
				break;
			}
	pg_atomic_write_u32(&db->gauges_valid, 0);
	SpinLockRelease(&shared_counters->mutex);
}

/*
 * stats_xact_callback: at commit, add this transaction's gauge changes to
 * its database's gauges; at abort, forget them; at prepare, leave them
 * unapplied and track the prepared transaction (track_prepared).
 */
static void
stats_xact_callback(XactEvent event, void *arg)
{
	DatabaseCounters *db;

	switch (event)
	{
		case XACT_EVENT_PREPARE:
			db = database_counters();
			if (db != NULL && frames_move_gauges())
				track_prepared(db);
			nframes = 0;
			break;
		case XACT_EVENT_COMMIT:
			db = database_counters();
			if (db != NULL)
				for (int f = 0; f < nframes; f++)
					for (int g = 0; g < GAUGE_COUNT; g++)
						if (frames[f].delta[g] != 0)
							pg_atomic_fetch_add_u64(&db->gauges[g], (uint64) frames[f].delta[g]);
			nframes = 0;
			break;
		case XACT_EVENT_ABORT:
			nframes = 0;
			break;
		default:
			break;
	}
}

/*
 * stats_subxact_callback: a committed subtransaction's changes become its
 * parent's; an aborted one's are dropped.
 */
static void
stats_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	GaugeFrame *child;

	if (nframes == 0 || frames[nframes - 1].subid != mySubid)
		return;
	child = &frames[nframes - 1];
	if (event == SUBXACT_EVENT_ABORT_SUB)
		nframes--;
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		if (nframes >= 2 && frames[nframes - 2].subid == parentSubid)
		{
			for (int g = 0; g < GAUGE_COUNT; g++)
				frames[nframes - 2].delta[g] += child->delta[g];
			nframes--;
		}
		else
			child->subid = parentSubid;
	}
}

/*
 * current_frame: the gauge changes of the current (sub)transaction,
 * started on first use.
 */
static GaugeFrame *
current_frame(void)
{
	static bool callbacks_registered = false;
	SubTransactionId subid = GetCurrentSubTransactionId();

	if (nframes > 0 && frames[nframes - 1].subid == subid)
		return &frames[nframes - 1];
	if (!callbacks_registered)
	{
		RegisterXactCallback(stats_xact_callback, NULL);
		RegisterSubXactCallback(stats_subxact_callback, NULL);
		callbacks_registered = true;
	}
	if (nframes == frames_capacity)
	{
		int			capacity = Max(4, frames_capacity * 2);

		frames = frames == NULL
			? MemoryContextAlloc(TopMemoryContext, capacity * sizeof(GaugeFrame))
			: repalloc(frames, capacity * sizeof(GaugeFrame));
		frames_capacity = capacity;
	}
	memset(&frames[nframes], 0, sizeof(GaugeFrame));
	frames[nframes].subid = subid;
	return &frames[nframes++];
}

/*
 * stats_gauge_move: n jobs or attempts moved from one state to another in
 * this transaction (GAUGE_NONE: created, or deleted).  Applied when the
 * transaction commits; a no-op without preload.
 */
void
stats_gauge_move(int from, int to, int64 n)
{
	GaugeFrame *frame;

	if (from == to || n == 0 || database_counters() == NULL)
		return;
	frame = current_frame();
	if (from != GAUGE_NONE)
		frame->delta[from] -= n;
	if (to != GAUGE_NONE)
		frame->delta[to] += n;
}

/*
 * stats_job_gauge_of: the gauge of a job state name ("running"), or
 * GAUGE_NONE for anything else.
 */
int
stats_job_gauge_of(const char *state)
{
	for (int g = GAUGE_JOBS_PENDING; g <= GAUGE_JOBS_CANCELLED; g++)
		if (strcmp(gauge_names[g] + strlen("jobs."), state) == 0)
			return g;
	return GAUGE_NONE;
}

/* stats_gauges_kept: whether this database has gauges (jobguard preloaded). */
bool
stats_gauges_kept(void)
{
	return database_counters() != NULL;
}

/*
 * stats_gauges_valid: whether this database's gauges can be shown as they
 * are: false without preload, after a crash until recounted, and when the
 * extension was dropped and created again since they were counted.
 */
bool
stats_gauges_valid(void)
{
	DatabaseCounters *db = database_counters();

	return db != NULL && pg_atomic_read_u32(&db->gauges_valid) != 0 &&
		pg_atomic_read_u32(&db->extension_oid) == get_extension_oid("jobguard", true);
}

/*
 * stats_gauges_begin_recount: before a recount scan, note the gauges as
 * they are, so that changes committed during the scan are not lost.
 */
void
stats_gauges_begin_recount(int64 *before)
{
	DatabaseCounters *db = database_counters();

	for (int g = 0; g < GAUGE_COUNT; g++)
		before[g] = db ? (int64) pg_atomic_read_u64(&db->gauges[g]) : 0;
}

/*
 * stats_gauges_end_recount: after the scan that counted `counted`, move
 * each gauge by (counted - before), which keeps the changes committed
 * during the scan, and mark the gauges valid.
 */
void
stats_gauges_end_recount(const int64 *before, const int64 *counted)
{
	DatabaseCounters *db = database_counters();

	if (db == NULL)
		return;
	for (int g = 0; g < GAUGE_COUNT; g++)
		pg_atomic_fetch_add_u64(&db->gauges[g], (uint64) (counted[g] - before[g]));
	pg_atomic_write_u32(&db->extension_oid, get_extension_oid("jobguard", true));
	pg_atomic_write_u32(&db->gauges_valid, 1);
}

/* stats_gauge_read: the value of a gauge in this database (preloaded). */
int64
stats_gauge_read(Gauge gauge)
{
	DatabaseCounters *db = database_counters();

	return db ? (int64) pg_atomic_read_u64(&db->gauges[gauge]) : 0;
}

/*
 * stats_attempts_begun: n attempts began (begin_attempt, or claim): each
 * is a new started attempt, and its job went from pending to running (the
 * gate lets an attempt in only while its job is pending).
 */
void
stats_attempts_begun(int64 n)
{
	stats_gauge_move(GAUGE_NONE, GAUGE_ATTEMPT(ATTEMPT_STARTED), n);
	stats_gauge_move(GAUGE_JOBS_PENDING, GAUGE_JOBS_RUNNING, n);
}
