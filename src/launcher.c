/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The launcher (jobguard in shared_preload_libraries): one background
 *	  worker, connected to no database, that finds every database where
 *	  jobguard is installed and keeps a sweeper and a notifier running
 *	  there.
 *
 * Why: with one statically registered worker pair per name in
 * jobguard.database, a database the list does not name silently got no
 * sweeper, no notifier, no claim floor; a name that did not exist made
 * its workers exit FATAL and the postmaster start them again every few
 * seconds, forever.  Now jobguard.database is an optional filter (empty:
 * every database), a name that does not exist is one WARNING, and a
 * database gets its workers as soon as jobguard is used there.
 *
 * How: every LAUNCHER_NAP_MS the launcher reads pg_database (a shared
 * catalog, readable without a database connection).  For a database it
 * has not looked into yet, or not for PROBE_AGAIN_MS, it starts the
 * sweeper there; the sweeper's first act is to say whether the extension
 * is installed (launcher_report_extension) and to exit when it is not.
 * Where it is, the launcher also starts the notifier, and starts either
 * again when it stops (the dynamic workers are never restarted by the
 * postmaster).  The first jobguard call in a database the launcher took
 * for one without the extension wakes it (launcher_database_used), so a
 * new installation is served at once.
 *
 * Workers connected to a database keep DROP DATABASE (and ALTER DATABASE
 * RENAME / SET TABLESPACE, and CREATE DATABASE from it as a template) from
 * running, so a utility hook stops them first and holds the database for
 * HOLD_MS, during which the launcher starts nothing there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "launcher.h"
#include "pg_compat.h"

/* databases the launcher keeps track of (the notifier has as many slots) */
#define LAUNCHER_MAX_DATABASES 64
/* how often the launcher looks at pg_database and its workers */
#define LAUNCHER_NAP_MS 1000
/* how long a database without jobguard waits before it is looked into again */
#define PROBE_AGAIN_MS (60 * 1000)
/* how long DROP/RENAME of a database keeps the launcher away from it */
#define HOLD_MS (30 * 1000)
/* seconds before the postmaster restarts a launcher that exited on error */
#define LAUNCHER_RESTART_SECONDS 5

/* what the launcher knows of one database */
typedef struct LauncherDatabase
{
	Oid			dboid;			/* InvalidOid: a free entry */
	char		dbname[NAMEDATALEN];
	int			extension;		/* EXT_UNKNOWN, EXT_ABSENT, EXT_PRESENT */
	TimestampTz probed_at;		/* when the extension was last looked for */
	TimestampTz held_until;		/* start nothing here before this */
	pid_t		worker_pid[LAUNCHED_KINDS]; /* 0: not running */
	bool		used;			/* a jobguard call ran here since the probe */
} LauncherDatabase;

#define EXT_UNKNOWN 0
#define EXT_ABSENT 1
#define EXT_PRESENT 2

typedef struct LauncherShared
{
	slock_t		mutex;
	Latch	   *launcher_latch; /* NULL while no launcher runs */
	LauncherDatabase databases[LAUNCHER_MAX_DATABASES];
} LauncherShared;

static LauncherShared *launcher_shared = NULL;

/* GUC jobguard.database: the databases to serve; empty: every database */
static char *database_filter = NULL;

/* the workers the launcher starts, by kind */
static const char *const kind_function[LAUNCHED_KINDS] = {
	[LAUNCHED_SWEEPER] = "jobguard_sweeper_main",
	[LAUNCHED_NOTIFIER] = "jobguard_notifier_main",
};
static const char *const kind_name[LAUNCHED_KINDS] = {
	[LAUNCHED_SWEEPER] = "jobguard sweeper",
	[LAUNCHED_NOTIFIER] = "jobguard notifier",
};

/* the launcher's own handles of the workers it started */
static BackgroundWorkerHandle *handles[LAUNCHER_MAX_DATABASES][LAUNCHED_KINDS];

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ProcessUtility_hook_type prev_process_utility = NULL;

PGDLLEXPORT void jobguard_launcher_main(Datum main_arg);

/* launcher_shmem_request: reserve the launcher's table (postmaster). */
static void
launcher_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(LauncherShared)));
}

/* launcher_shmem_startup: create or attach to the launcher's table. */
static void
launcher_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	launcher_shared = ShmemInitStruct("jobguard launcher", sizeof(LauncherShared), &found);
	if (!found)
	{
		memset(launcher_shared, 0, sizeof(LauncherShared));
		SpinLockInit(&launcher_shared->mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * find_database: the entry of a database, or NULL; with the mutex held.
 */
static LauncherDatabase *
find_database(Oid dboid)
{
	for (int i = 0; i < LAUNCHER_MAX_DATABASES; i++)
		if (launcher_shared->databases[i].dboid == dboid)
			return &launcher_shared->databases[i];
	return NULL;
}

/*
 * hold_database: keep the launcher away from a database for HOLD_MS and
 * stop the workers it runs there, so that a command needing the database
 * to itself (DROP, RENAME, SET TABLESPACE, use as a template) can run.
 * The command waits up to 5 s for other sessions to leave, which is ample
 * for a worker told to stop.
 */
static void
hold_database(Oid dboid)
{
	LauncherDatabase *db;
	pid_t		pids[LAUNCHED_KINDS] = {0};

	if (launcher_shared == NULL || !OidIsValid(dboid))
		return;
	SpinLockAcquire(&launcher_shared->mutex);
	db = find_database(dboid);
	if (db != NULL)
	{
		db->held_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), HOLD_MS);
		for (int k = 0; k < LAUNCHED_KINDS; k++)
			pids[k] = db->worker_pid[k];
	}
	SpinLockRelease(&launcher_shared->mutex);
	for (int k = 0; k < LAUNCHED_KINDS; k++)
		if (pids[k] != 0)
			(void) kill(pids[k], SIGTERM);
}

/*
 * option_named: the option of a statement's option list with that name,
 * or NULL.
 */
static DefElem *
option_named(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = (DefElem *) lfirst(lc);

		if (strcmp(opt->defname, name) == 0)
			return opt;
	}
	return NULL;
}

/* has_option: whether an option list names that option. */
static bool
has_option(List *options, const char *name)
{
	return option_named(options, name) != NULL;
}

/*
 * template_of: the TEMPLATE option of CREATE DATABASE, or NULL.
 */
static const char *
template_of(CreatedbStmt *stmt)
{
	DefElem    *opt = option_named(stmt->options, "template");

	return opt != NULL && opt->arg != NULL ? defGetString(opt) : NULL;
}

/*
 * launcher_process_utility: before a command that needs a database with
 * no other session in it, stop jobguard's workers there (hold_database);
 * then run the command as it would have run.
 */
static void
launcher_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
						 ProcessUtilityContext context, ParamListInfo params,
						 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	const char *dbname = NULL;

	if (IsA(parsetree, DropdbStmt))
		dbname = ((DropdbStmt *) parsetree)->dbname;
	else if (IsA(parsetree, RenameStmt) &&
			 ((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
		dbname = ((RenameStmt *) parsetree)->subname;
	else if (IsA(parsetree, AlterDatabaseStmt) &&
			 has_option(((AlterDatabaseStmt *) parsetree)->options, "tablespace"))
		dbname = ((AlterDatabaseStmt *) parsetree)->dbname;
	else if (IsA(parsetree, CreatedbStmt))
		dbname = template_of((CreatedbStmt *) parsetree);
	if (dbname != NULL)
	{
		Oid			dboid = get_database_oid(dbname, true);

		/* only a command its caller may run stops the workers */
		if (OidIsValid(dboid) && (superuser() || database_owned_by(dboid, GetUserId())))
			hold_database(dboid);
	}

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
}

/*
 * launcher_init: while shared_preload_libraries are loaded, define
 * jobguard.database, reserve the launcher's table, install the utility
 * hook and register the launcher.
 */
void
launcher_init(void)
{
	BackgroundWorker worker = {0};

	if (!process_shared_preload_libraries_in_progress)
		return;
	DefineCustomStringVariable("jobguard.database",
							   "Databases the jobguard background workers serve (comma-separated; empty: every database where jobguard is installed).",
							   "The launcher starts a sweeper and a notifier in each database that has the "
							   "extension; a name here that names no database is reported once.",
							   &database_filter, "",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = launcher_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = launcher_shmem_startup;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = launcher_process_utility;

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = LAUNCHER_RESTART_SECONDS;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "jobguard");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "jobguard_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "jobguard launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "jobguard launcher");
	RegisterBackgroundWorker(&worker);
}

/*
 * launcher_report_extension: called by a launched sweeper once connected:
 * records whether jobguard is installed in its database, and that it runs.
 */
void
launcher_report_extension(bool installed)
{
	LauncherDatabase *db;

	if (launcher_shared == NULL)
		return;
	SpinLockAcquire(&launcher_shared->mutex);
	db = find_database(MyDatabaseId);
	if (db != NULL)
	{
		db->extension = installed ? EXT_PRESENT : EXT_ABSENT;
		db->probed_at = GetCurrentTimestamp();
		db->used = false;
	}
	SpinLockRelease(&launcher_shared->mutex);
}

/*
 * alive: whether a process of that pid exists.
 */
static bool
alive(pid_t pid)
{
	return pid != 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

/*
 * launcher_worker_running: a launched worker records its pid as it
 * starts (running) and clears it as it exits, for hold_database to stop
 * it and for a restarted launcher to know it runs.  Returns false when
 * another worker of the kind already serves the database (one started by
 * a launcher that has since restarted): the caller then exits.
 */
bool
launcher_worker_running(LaunchedKind kind, bool running)
{
	LauncherDatabase *db;
	bool		may_run = true;

	if (launcher_shared == NULL)
		return true;
	SpinLockAcquire(&launcher_shared->mutex);
	db = find_database(MyDatabaseId);
	if (db != NULL && running)
	{
		if (db->worker_pid[kind] != 0 && db->worker_pid[kind] != MyProcPid &&
			alive(db->worker_pid[kind]))
			may_run = false;
		else
			db->worker_pid[kind] = MyProcPid;
	}
	else if (db != NULL && db->worker_pid[kind] == MyProcPid)
		db->worker_pid[kind] = 0;
	SpinLockRelease(&launcher_shared->mutex);
	return may_run;
}

/*
 * launcher_database_used: a jobguard call ran in this database.  If the
 * launcher took it for a database without jobguard, wake it to look
 * again now rather than at the next probe.  Called once per backend.
 */
void
launcher_database_used(void)
{
	LauncherDatabase *db;
	Latch	   *latch = NULL;

	if (launcher_shared == NULL || !OidIsValid(MyDatabaseId))
		return;
	SpinLockAcquire(&launcher_shared->mutex);
	db = find_database(MyDatabaseId);
	if (db != NULL && db->extension != EXT_PRESENT && !db->used)
	{
		db->used = true;
		latch = launcher_shared->launcher_latch;
	}
	SpinLockRelease(&launcher_shared->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * filter_names: the names in jobguard.database (NIL: every database).
 * A list that does not parse is reported and treated as empty.
 */
static List *
filter_names(void)
{
	char	   *names = pstrdup(database_filter ? database_filter : "");
	List	   *list;

	if (!SplitIdentifierString(names, ',', &list))
	{
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid list syntax in parameter \"jobguard.database\""),
				 errdetail("The jobguard launcher serves every database instead.")));
		return NIL;
	}
	return list;
}

/*
 * name_listed: whether a database name is in the filter list.
 */
static bool
name_listed(List *names, const char *dbname)
{
	ListCell   *lc;

	foreach(lc, names)
		if (strcmp((const char *) lfirst(lc), dbname) == 0)
			return true;
	return false;
}

/*
 * read_databases: the databases that accept connections and are no
 * templates, filtered by jobguard.database, from pg_database.  Each name
 * of the filter that names none is reported once per launcher (warned).
 */
static int
read_databases(Oid *oids, char (*names)[NAMEDATALEN], int max, List *filter,
			   List **warned)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	int			n = 0;
	List	   *seen = NIL;
	ListCell   *lc;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database d = (Form_pg_database) GETSTRUCT(tup);
		const char *name = NameStr(d->datname);

		if (filter != NIL && name_listed(filter, name))
			seen = lappend(seen, pstrdup(name));
		if (!d->datallowconn || d->datistemplate)
			continue;
		if (filter != NIL && !name_listed(filter, name))
			continue;
		if (n == max)
			break;
		oids[n] = d->oid;
		strlcpy(names[n], name, NAMEDATALEN);
		n++;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();

	foreach(lc, filter)
	{
		const char *name = (const char *) lfirst(lc);

		if (name_listed(seen, name) || name_listed(*warned, name))
			continue;
		ereport(WARNING,
				(errcode(ERRCODE_UNDEFINED_DATABASE),
				 errmsg("database \"%s\" named in \"jobguard.database\" does not exist", name),
				 errdetail("jobguard's background workers serve the other databases, and this one "
						   "once it is created; this is not reported again.")));
		*warned = lappend(*warned, MemoryContextStrdup(TopMemoryContext, name));
	}
	return n;
}

/*
 * start_worker: start one worker of a kind in a database; false (with a
 * WARNING, once per database) when no background worker slot is free.
 */
static bool
start_worker(int slot, LaunchedKind kind, const char *dbname)
{
	BackgroundWorker worker = {0};

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "jobguard");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", kind_function[kind]);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s for database %s", kind_name[kind], dbname);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", kind_name[kind]);
	strlcpy(worker.bgw_extra, dbname, BGW_EXTRALEN);
	worker.bgw_notify_pid = MyProcPid;
	if (handles[slot][kind] != NULL)
		pfree(handles[slot][kind]);
	handles[slot][kind] = NULL;
	if (RegisterDynamicBackgroundWorker(&worker, &handles[slot][kind]))
		return true;
	ereport(WARNING,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("no background worker slot is free for the %s of database \"%s\"",
					kind_name[kind], dbname),
			 errhint("Raise max_worker_processes.")));
	return false;
}

/*
 * worker_stopped: whether no worker of a kind serves an entry: the one
 * this launcher started is not running (never started, exited, crashed),
 * and no live worker is recorded there (one a previous launcher started).
 */
static bool
worker_stopped(int slot, LaunchedKind kind, pid_t recorded)
{
	pid_t		pid;

	if (handles[slot][kind] != NULL &&
		GetBackgroundWorkerPid(handles[slot][kind], &pid) != BGWH_STOPPED)
		return false;
	return !alive(recorded);
}

/*
 * serve_databases: one round of the launcher: forget databases that went,
 * take in new ones, and start the workers each database needs now.
 */
static void
serve_databases(List *filter, List **warned)
{
	Oid			oids[LAUNCHER_MAX_DATABASES];
	char		names[LAUNCHER_MAX_DATABASES][NAMEDATALEN];
	int			n = read_databases(oids, names, LAUNCHER_MAX_DATABASES, filter, warned);
	TimestampTz now = GetCurrentTimestamp();

	for (int slot = 0; slot < LAUNCHER_MAX_DATABASES; slot++)
	{
		LauncherDatabase *db = &launcher_shared->databases[slot];
		bool		exists = false;
		bool		start[LAUNCHED_KINDS] = {false};
		pid_t		recorded[LAUNCHED_KINDS];
		char		dbname[NAMEDATALEN];

		for (int i = 0; i < n; i++)
			if (oids[i] == db->dboid)
				exists = true;
		if (OidIsValid(db->dboid) && !exists)
		{
			/* dropped (or no longer listed): its workers stop by themselves */
			SpinLockAcquire(&launcher_shared->mutex);
			db->dboid = InvalidOid;
			SpinLockRelease(&launcher_shared->mutex);
			continue;
		}
		if (!OidIsValid(db->dboid))
			continue;

		SpinLockAcquire(&launcher_shared->mutex);
		strlcpy(dbname, db->dbname, NAMEDATALEN);
		for (int k = 0; k < LAUNCHED_KINDS; k++)
			recorded[k] = db->worker_pid[k];
		if (db->held_until <= now)
		{
			bool		probe_due = db->extension == EXT_UNKNOWN || db->used ||
				TimestampDifferenceExceeds(db->probed_at, now, PROBE_AGAIN_MS);

			start[LAUNCHED_SWEEPER] = db->extension == EXT_PRESENT || probe_due;
			start[LAUNCHED_NOTIFIER] = db->extension == EXT_PRESENT;
			if (probe_due && db->extension != EXT_PRESENT)
				db->extension = EXT_UNKNOWN;
		}
		SpinLockRelease(&launcher_shared->mutex);

		for (int k = 0; k < LAUNCHED_KINDS; k++)
			if (start[k] && worker_stopped(slot, (LaunchedKind) k, recorded[k]))
				(void) start_worker(slot, (LaunchedKind) k, dbname);
	}

	/* databases seen for the first time get an entry (and a probe next round) */
	for (int i = 0; i < n; i++)
	{
		SpinLockAcquire(&launcher_shared->mutex);
		if (find_database(oids[i]) == NULL)
		{
			LauncherDatabase *free_entry = find_database(InvalidOid);

			if (free_entry != NULL)
			{
				memset(free_entry, 0, sizeof(LauncherDatabase));
				free_entry->dboid = oids[i];
				strlcpy(free_entry->dbname, names[i], NAMEDATALEN);
				free_entry->extension = EXT_UNKNOWN;
			}
		}
		SpinLockRelease(&launcher_shared->mutex);
	}
}

/*
 * detach_launcher: at exit, say no launcher runs (nobody sets its latch).
 */
static void
detach_launcher(int code, Datum arg)
{
	SpinLockAcquire(&launcher_shared->mutex);
	launcher_shared->launcher_latch = NULL;
	SpinLockRelease(&launcher_shared->mutex);
}

/*
 * jobguard_launcher_main: the launcher's entry point.  Connected to no
 * database (only shared catalogs can be read), it serves the databases
 * every LAUNCHER_NAP_MS, or at once when a worker it started stops or a
 * database starts using jobguard, until SIGTERM.
 */
void
jobguard_launcher_main(Datum main_arg)
{
	List	   *warned = NIL;
	List	   *filter;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	/*
	 * The table outlives a launcher that exited on an error (not a crash
	 * of the server): the workers it started go on and are recognised by
	 * their recorded pids.
	 */
	SpinLockAcquire(&launcher_shared->mutex);
	launcher_shared->launcher_latch = MyLatch;
	SpinLockRelease(&launcher_shared->mutex);
	before_shmem_exit(detach_launcher, (Datum) 0);
	filter = filter_names();
	ereport(LOG, (errmsg("jobguard launcher started")));

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		serve_databases(filter, &warned);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 LAUNCHER_NAP_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
