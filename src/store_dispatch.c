/*-------------------------------------------------------------------------
 *
 * store_dispatch.c
 *	  The connection a jobguard call works in (store_connect() and
 *	  store_finish()), and the choice of back end for the hot calls.
 *
 * The operations of store_backend.h (submit's insert and replay,
 * submit_many's insert, begin, the finish's read and compare-and-swap)
 * each go to the back end store_ops[] chooses: the fast path of rows.c
 * when rows_usable() says it may serve a call that locks those tables,
 * otherwise the SQL back end of store_lifecycle.c.  Both give the same
 * answers.  Every other store_* call is the SQL back end's alone.
 *
 * Callers bracket their work with store_connect() and store_finish().
 * Values read from a row stay valid until store_finish().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "launcher.h"
#include "store.h"
#include "store_backend.h"
#include "store_sql.h"
#include "subxact.h"

/*
 * store_connect: open the SPI connection a jobguard call works in, and run
 * as the owner of jobguard's tables until store_finish().  The caller's
 * identity is saved in *caller, on the calling function's stack: calls can
 * nest (a default or constraint on the tables may call jobguard), and each
 * must give back exactly the identity it found.
 */
void
store_connect(SavedIdentity *caller)
{
	static bool used_here = false;

	/* the first call of a backend: the launcher may not know jobguard is here */
	if (!used_here)
	{
		used_here = true;
		launcher_database_used();
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "jobguard: SPI_connect failed");
	become_tables_owner(caller);
}

/*
 * store_keep_string: a copy of a string in the caller's memory context, so
 * that it outlives store_finish().
 */
char *
store_keep_string(const char *s)
{
	char	   *copy = SPI_palloc(strlen(s) + 1);

	strcpy(copy, s);
	return copy;
}

/*
 * store_finish: switch back to the identity store_connect() saved and close
 * the connection; values read from rows are freed with it.
 */
void
store_finish(const SavedIdentity *caller)
{
	become_caller_again(caller);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "jobguard: SPI_finish failed");
}

/* One operation of the seam: what it is called and the tables it locks. */
typedef struct StoreOpInfo
{
	const char *name;
	RowsCall	locks;			/* what rows_usable() checks for it */
} StoreOpInfo;

/* The operations of store_backend.h, and what decides their back end. */
static const StoreOpInfo store_ops[STORE_OP_COUNT] = {
	[STORE_OP_INSERT_JOB] = {"insert job", ROWS_SUBMIT},
	[STORE_OP_INSERT_JOBS] = {"insert jobs", ROWS_SUBMIT},
	[STORE_OP_MATCH_JOB] = {"match job", ROWS_SUBMIT},
	[STORE_OP_BEGIN_ATTEMPT] = {"begin attempt", ROWS_BEGIN},
	[STORE_OP_READ_FOR_FINISH] = {"read for finish", ROWS_FINISH},
	[STORE_OP_CLAIM_AND_SWAP] = {"claim and swap", ROWS_FINISH},
};

/*
 * backend_for: the back end that serves op in this call: the fast path
 * when rows_usable() says it may, the SQL statements otherwise.
 */
static const StoreBackend *
backend_for(StoreOp op)
{
	Assert(op >= 0 && op < STORE_OP_COUNT && store_ops[op].name != NULL);
	return rows_usable(store_ops[op].locks) ? &fast_path_backend : &sql_backend;
}

/*
 * Key indexes that ON CONFLICT does not arbitrate.
 *
 * INSERT ... ON CONFLICT takes as arbiters only the valid unique indexes on
 * the key; a unique index on the key that is being built (CREATE UNIQUE
 * INDEX CONCURRENTLY, REINDEX CONCURRENTLY: ready for inserts, not valid
 * yet) checks the key on its own, and the second of two simultaneous
 * inserts of one key then gets 23505 from it instead of finding the first
 * one's job.  When jobs has such an index, or more than one unique index
 * on the key, the inserts of submit run in a subtransaction, and a unique
 * violation raised by an index on the key is what a conflict would have
 * been: nothing inserted, the winner's job read by the caller.  Otherwise
 * (the usual case: one key index) no subtransaction is taken.  What jobs'
 * indexes are is cached per backend and forgotten at any relcache
 * invalidation of jobs, which CREATE INDEX CONCURRENTLY sends at each step.
 */
#define MAX_KEY_INDEXES 16

static Oid	key_jobs_relid = InvalidOid;	/* jobguard.jobs, when known */
static bool key_cache_valid = false;
static bool key_violation_possible = false;
static int	n_key_indexes = 0;
static Oid	key_indexes[MAX_KEY_INDEXES];
static bool key_callback_registered = false;

/* key_cache_invalidate: relcache callback; jobs (or everything) changed. */
static void
key_cache_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == key_jobs_relid)
	{
		/* jobs may have been dropped (DROP EXTENSION): look it up again */
		key_cache_valid = false;
		key_jobs_relid = InvalidOid;
	}
	for (int i = 0; i < n_key_indexes; i++)
		if (key_indexes[i] == relid)
			key_cache_valid = false;
}

/*
 * is_key_index: whether index (open) is unique on exactly scope, owner_id
 * and idempotency_key, in any order, without expressions.
 */
static bool
is_key_index(Relation jobs, Relation index)
{
	Form_pg_index form = index->rd_index;
	AttrNumber	key[3];
	bool		seen[3] = {false, false, false};

	if (!form->indisunique || form->indnkeyatts != 3 ||
		RelationGetIndexExpressions(index) != NIL)
		return false;
	key[0] = get_attnum(RelationGetRelid(jobs), "scope");
	key[1] = get_attnum(RelationGetRelid(jobs), "owner_id");
	key[2] = get_attnum(RelationGetRelid(jobs), "idempotency_key");
	for (int k = 0; k < 3; k++)
	{
		bool		known = false;

		for (int c = 0; c < 3; c++)
			if (form->indkey.values[k] == key[c] && !seen[c])
				seen[c] = known = true;
		if (!known)
			return false;
	}
	return true;
}

/*
 * key_violation_check: whether an insert into jobs may raise 23505 from
 * an index on the key (see above), from the cache or worked out now.  The
 * table is locked as the insert will lock it first, which processes
 * pending invalidations: the answer describes the indexes the insert sees.
 */
static bool
key_violation_check(void)
{
	Relation	jobs;
	List	   *indexes;
	ListCell   *lc;
	int			ready = 0;
	bool		building = false;

	/* a read-only transaction (a standby) gets the insert's own error */
	if (XactReadOnly)
		return false;
	if (!key_callback_registered)
	{
		CacheRegisterRelcacheCallback(key_cache_invalidate, (Datum) 0);
		key_callback_registered = true;
	}
	for (;;)
	{
		Oid			relid;

		if (!OidIsValid(key_jobs_relid))
		{
			Oid			schema = get_namespace_oid("jobguard", true);

			if (!OidIsValid(schema))
				return false;
			key_jobs_relid = get_relname_relid("jobs", schema);
			if (!OidIsValid(key_jobs_relid))
				return false;
			key_cache_valid = false;
		}
		relid = key_jobs_relid;
		/* may process invalidations, which forget what is cached of jobs */
		LockRelationOid(relid, RowExclusiveLock);
		if (key_jobs_relid == relid)
			break;
	}
	if (key_cache_valid)
		return key_violation_possible;

	key_cache_valid = true;
	n_key_indexes = 0;
	jobs = table_open(key_jobs_relid, RowExclusiveLock);
	indexes = RelationGetIndexList(jobs);
	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);

		if (index->rd_index->indisready && is_key_index(jobs, index))
		{
			ready++;
			if (!index->rd_index->indisvalid)
				building = true;
			if (n_key_indexes < MAX_KEY_INDEXES)
				key_indexes[n_key_indexes++] = lfirst_oid(lc);
		}
		index_close(index, AccessShareLock);
	}
	list_free(indexes);
	table_close(jobs, NoLock);
	key_violation_possible = building || ready > 1;
	return key_violation_possible;
}

/*
 * violates_key_index: whether the error is a unique violation raised by
 * one of jobs' indexes on the key.
 */
static bool
violates_key_index(const ErrorData *edata)
{
	Oid			index;

	if (edata->sqlerrcode != ERRCODE_UNIQUE_VIOLATION ||
		edata->schema_name == NULL || edata->table_name == NULL ||
		edata->constraint_name == NULL ||
		strcmp(edata->schema_name, "jobguard") != 0 ||
		strcmp(edata->table_name, "jobs") != 0)
		return false;
	index = get_relname_relid(edata->constraint_name, get_namespace_oid("jobguard", true));
	for (int i = 0; i < n_key_indexes; i++)
		if (key_indexes[i] == index)
			return true;
	return false;
}

/* The inserts key_guarded() runs. */
typedef enum KeyInsert
{
	KEY_INSERT_JOB,
	KEY_INSERT_JOBS,
	KEY_INSERT_NEXT_JOB
} KeyInsert;

/* Their arguments. */
typedef struct KeyInsertArgs
{
	const SubmitRequest *req;	/* insert_job, insert_next_job */
	int64	   *job_id;
	int64		previous_job_id;	/* insert_next_job */
	Datum		scope;			/* insert_jobs */
	const JobBatch *batch;
	bool	   *inserted;
	int64	   *job_ids;
} KeyInsertArgs;

/* one run of key_guarded(): what to insert, with what, and insert_job's answer */
typedef struct KeyInsertRun
{
	KeyInsert	what;
	const KeyInsertArgs *args;
	bool		result;
} KeyInsertRun;

static bool insert_job(const KeyInsertArgs *a);
static void insert_jobs(const KeyInsertArgs *a);

/* key_insert_body: the insert key_guarded() runs, for subxact_run(). */
static void
key_insert_body(void *arg)
{
	KeyInsertRun *run = (KeyInsertRun *) arg;

	if (run->what == KEY_INSERT_JOB)
		run->result = insert_job(run->args);
	else if (run->what == KEY_INSERT_NEXT_JOB)
		run->result = sql_insert_next_job(run->args->req, run->args->previous_job_id,
										  run->args->job_id);
	else
		insert_jobs(run->args);
}

/*
 * key_guarded: run one of submit's inserts in a subtransaction; a unique
 * violation raised by an index on the key rolls it back and returns false
 * (the call then reads the winner's job, as after a conflict).  Any other
 * error goes on, raised again once the subtransaction is rolled back
 * (subxact_run).  Returns true when the insert ran to its end; insert_job's
 * own answer is in *result.
 */
static bool
key_guarded(KeyInsert what, const KeyInsertArgs *a, bool *result)
{
	KeyInsertRun run = {what, a, false};
	ErrorData  *edata = subxact_run(key_insert_body, &run, violates_key_index);

	if (edata != NULL)
	{
		FreeErrorData(edata);
		return false;
	}
	*result = run.result;
	return true;
}

/*
 * store_insert_job: insert a new job in the request's scope unless one
 * exists there for the key.  Returns true and the new id when this call
 * created it.
 * A unique violation on an index of the key that ON CONFLICT does not
 * arbitrate (see key_guarded) counts as a conflict: false.
 */
bool
store_insert_job(const SubmitRequest *req, int64 *job_id)
{
	KeyInsertArgs a = {req, job_id, 0, (Datum) 0, NULL, NULL, NULL};
	bool		inserted = false;

	if (!key_violation_check())
		return insert_job(&a);
	if (!key_guarded(KEY_INSERT_JOB, &a, &inserted))
		return false;
	return inserted;
}

/*
 * store_insert_next_job: insert the job that follows the replaced job
 * previous_job_id under the same key (after_failure 'new_job'); false
 * when a concurrent submit inserted it first, or (see key_guarded) an
 * index of the key that ON CONFLICT does not arbitrate raised a unique
 * violation: the caller reads the winner's job.
 */
bool
store_insert_next_job(const SubmitRequest *req, int64 previous_job_id, int64 *job_id)
{
	KeyInsertArgs a = {req, job_id, previous_job_id, (Datum) 0, NULL, NULL, NULL};
	bool		inserted = false;

	if (!key_violation_check())
		return sql_insert_next_job(req, previous_job_id, job_id);
	if (!key_guarded(KEY_INSERT_NEXT_JOB, &a, &inserted))
		return false;
	return inserted;
}

/* insert_job: store_insert_job() on the back end of the moment, unguarded. */
static bool
insert_job(const KeyInsertArgs *a)
{
	return backend_for(STORE_OP_INSERT_JOB)->insert_job(a->req, a->job_id);
}

/* How often a batch is tried again after a key index's unique violation. */
#define KEY_BATCH_TRIES 3

/*
 * store_insert_jobs: insert the batch's jobs that are not to be skipped,
 * in order, each unless a job exists in the scope for its key (stored, or
 * inserted by an earlier row).  inserted[i] says whether row i created a
 * job, job_ids[i] its id.  One pass of the back end
 * (STMT_INSERT_JOBS, or the fast path's).  A unique violation on an index of the key that ON
 * CONFLICT does not arbitrate (see key_guarded) undoes the pass, which is
 * tried again (the winner of that key has committed: the next pass finds
 * its job); after KEY_BATCH_TRIES passes nothing is inserted here, and the
 * caller submits each row alone, as submit() does.
 */
void
store_insert_jobs(Datum scope, const JobBatch *batch, bool *inserted, int64 *job_ids)
{
	KeyInsertArgs a = {NULL, NULL, 0, scope, batch, inserted, job_ids};
	bool		unused;

	if (!key_violation_check())
	{
		insert_jobs(&a);
		return;
	}
	for (int tries = 0; tries < KEY_BATCH_TRIES; tries++)
		if (key_guarded(KEY_INSERT_JOBS, &a, &unused))
			return;
	for (int i = 0; i < batch->count; i++)
		inserted[i] = false;
}

/* insert_jobs: store_insert_jobs() on the back end of the moment, unguarded. */
static void
insert_jobs(const KeyInsertArgs *a)
{
	backend_for(STORE_OP_INSERT_JOBS)->insert_jobs(a->scope, a->batch, a->inserted, a->job_ids);
}

/*
 * store_match_job: find the job for the request's (scope, owner_id,
 * idempotency_key) and compare it with the request.  Returns false if
 * there is none (it was removed between the insert and this look-up).
 */
bool
store_match_job(const SubmitRequest *req, SubmitMatch *match)
{
	return backend_for(STORE_OP_MATCH_JOB)->match_job(req, match);
}

/*
 * store_begin_attempt: begin the job's next attempt if the gate lets it:
 * the job open, its latest attempt closed, attempts left, a fallback
 * provider certified.  Returns the new attempt's id, or 0 when refused (or
 * no such job in the scope).
 */
int64
store_begin_attempt(const BeginRequest *req)
{
	return backend_for(STORE_OP_BEGIN_ATTEMPT)->begin_attempt(req);
}

/*
 * store_read_for_finish: an attempt with its job and contract, in one
 * snapshot and without a lock; false if there is no such attempt of a job
 * of the scope (NULL: any).
 */
bool
store_read_for_finish(int64 attempt_id, const char *scope, AttemptRow *attempt,
					  FinishJob *job)
{
	return backend_for(STORE_OP_READ_FOR_FINISH)->read_for_finish(attempt_id, scope,
																  attempt, job);
}

/*
 * store_claim_and_swap: claim the attempt (still in the stored state it
 * was read in) and run the compare-and-swap.  CLAIM_CHANGED when the
 * attempt changed since it was read, CLAIM_WON when it took the result
 * slot, CLAIM_LOST when another attempt had it or the job was cancelled.
 */
ClaimOutcome
store_claim_and_swap(const AttemptRow *attempt, Datum result)
{
	return backend_for(STORE_OP_CLAIM_AND_SWAP)->claim_and_swap(attempt, result);
}
