/*-------------------------------------------------------------------------
 *
 * store_dispatch.c
 *	  The SQL back end of store.h for the calls that write a job's life:
 *	  the connection a call works in, submit's insert and replay, the
 *	  attempt gate, the finish's read and compare-and-swap, and the closing
 *	  writes (fail, mark unknown, cancel).
 *
 * The hot calls (insert and match of submit, begin, the finish's read and
 * compare-and-swap) go to the fast path of rows.c when rows_usable() says
 * so; otherwise, and for everything else, the statements of store_sql.c
 * run.  Both give the same answers.
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

#include "transitions.h"
#include "store.h"
#include "store_sql.h"

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

/*
 * scope_datum: a scope as a text parameter; NULL (any scope) as a NULL one.
 */
static Datum
scope_datum(const char *scope, char *null_flag)
{
	*null_flag = scope == NULL ? 'n' : ' ';
	return scope == NULL ? (Datum) 0 : CStringGetTextDatum(scope);
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
	KEY_INSERT_JOBS
} KeyInsert;

/* Their arguments. */
typedef struct KeyInsertArgs
{
	Datum		scope,
				owner_id,
				idempotency_key,
				operation,
				params,
				provider,
				max_attempts;
	bool		max_attempts_null;
	int64	   *job_id;
	const JobBatch *batch;
	bool	   *inserted;
	int64	   *job_ids;
} KeyInsertArgs;

static bool insert_job(const KeyInsertArgs *a);
static void insert_jobs(const KeyInsertArgs *a);

/*
 * key_guarded: run one of submit's inserts in a subtransaction; a unique
 * violation raised by an index on the key rolls it back and returns false
 * (the call then reads the winner's job, as after a conflict).  Any other
 * error goes on, raised again once the subtransaction is rolled back.  Returns true when the insert ran to its end; insert_job's
 * own answer is in *result.
 */
static bool
key_guarded(KeyInsert what, const KeyInsertArgs *a, bool *result)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool done = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		if (what == KEY_INSERT_JOB)
			*result = insert_job(a);
		else
			insert_jobs(a);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		done = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/*
		 * The subtransaction ends here whatever the error: rethrown with it
		 * still open, the error would leave the client's transaction inside
		 * an aborted subtransaction it never began.
		 */
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (!violates_key_index(edata))
			ReThrowError(edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	return done;
}

/*
 * store_insert_job: insert a new job in the scope unless one exists there
 * for the key.  Returns true and the new id when this call created it.
 * A unique violation on an index of the key that ON CONFLICT does not
 * arbitrate (see key_guarded) counts as a conflict: false.
 */
bool
store_insert_job(Datum scope, Datum owner_id, Datum idempotency_key, Datum operation,
				 Datum params, Datum provider,
				 Datum max_attempts, bool max_attempts_null, int64 *job_id)
{
	KeyInsertArgs a = {scope, owner_id, idempotency_key, operation, params,
	provider, max_attempts, max_attempts_null, job_id, NULL, NULL, NULL};
	bool		inserted = false;

	if (!key_violation_check())
		return insert_job(&a);
	if (!key_guarded(KEY_INSERT_JOB, &a, &inserted))
		return false;
	return inserted;
}

/* insert_job: store_insert_job() on either path, unguarded. */
static bool
insert_job(const KeyInsertArgs *ka)
{
	Datum		scope = ka->scope,
				owner_id = ka->owner_id,
				idempotency_key = ka->idempotency_key,
				operation = ka->operation,
				params = ka->params,
				provider = ka->provider,
				max_attempts = ka->max_attempts;
	bool		max_attempts_null = ka->max_attempts_null;
	int64	   *job_id = ka->job_id;
	Datum		values[7] = {owner_id, idempotency_key, operation, params,
	provider, max_attempts, scope};
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', max_attempts_null ? 'n' : ' ', ' '};
	bool		isnull;

	if (rows_usable(ROWS_SUBMIT))
		return rows_insert_job(scope, owner_id, idempotency_key, operation, params,
							   provider, max_attempts, max_attempts_null, job_id);
	if (sql_run(STMT_INSERT_JOB, values, nulls) == 0)
		return false;
	*job_id = sql_column_int64(1, &isnull);
	return true;
}

/* same_text: whether two text Datums hold the same bytes. */
static bool
same_text(Datum a, Datum b)
{
	text	   *ta = DatumGetTextPP(a);
	text	   *tb = DatumGetTextPP(b);

	return VARSIZE_ANY_EXHDR(ta) == VARSIZE_ANY_EXHDR(tb) &&
		memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), VARSIZE_ANY_EXHDR(ta)) == 0;
}

/* How often a batch is tried again after a key index's unique violation. */
#define KEY_BATCH_TRIES 3

/*
 * store_insert_jobs: insert the batch's jobs that are not to be skipped,
 * in order, each unless a job exists in the scope for its key (stored, or
 * inserted by an earlier row).  inserted[i] says whether row i created a
 * job, job_ids[i] its id.  One statement (STMT_INSERT_JOBS), or one pass
 * of the fast path.  A unique violation on an index of the key that ON
 * CONFLICT does not arbitrate (see key_guarded) undoes the pass, which is
 * tried again (the winner of that key has committed: the next pass finds
 * its job); after KEY_BATCH_TRIES passes nothing is inserted here, and the
 * caller submits each row alone, as submit() does.
 */
void
store_insert_jobs(Datum scope, const JobBatch *batch, bool *inserted, int64 *job_ids)
{
	KeyInsertArgs a = {scope, 0, 0, 0, 0, 0, 0, false, NULL, batch, inserted, job_ids};
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

/* insert_jobs: store_insert_jobs() on either path, unguarded. */
static void
insert_jobs(const KeyInsertArgs *ka)
{
	Datum		scope = ka->scope;
	const JobBatch *batch = ka->batch;
	bool	   *inserted = ka->inserted;
	int64	   *job_ids = ka->job_ids;
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Datum	   *wanted = palloc(sizeof(Datum) * Max(batch->count, 1));
	uint64		n;
	int			row = 0;

	if (rows_usable(ROWS_SUBMIT))
	{
		rows_insert_jobs(scope, batch, inserted, job_ids);
		return;
	}
	for (int i = 0; i < batch->count; i++)
	{
		inserted[i] = false;
		wanted[i] = BoolGetDatum(!batch->skip[i]);
	}
	memcpy(values, batch->arrays, sizeof(Datum) * 6);
	if (batch->arrays[5] == (Datum) 0)
		nulls[5] = 'n';
	values[6] = scope;
	values[7] = PointerGetDatum(construct_array(wanted, batch->count, BOOLOID, sizeof(bool),
												true, TYPALIGN_CHAR));
	n = sql_run(STMT_INSERT_JOBS, values, nulls);

	/*
	 * RETURNING gives the inserted rows in the order they were inserted,
	 * the input order: match each to the next row with its key.
	 */
	for (uint64 r = 0; r < n; r++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		owner_id = SPI_getbinval(tuple, desc, 1, &isnull);
		Datum		key = SPI_getbinval(tuple, desc, 2, &isnull);

		while (row < batch->count &&
			   (batch->skip[row] || !same_text(batch->owner_ids[row], owner_id) ||
				!same_text(batch->idempotency_keys[row], key)))
			row++;
		if (row == batch->count)
			elog(ERROR, "jobguard: an inserted job matches no request of the batch");
		inserted[row] = true;
		job_ids[row] = DatumGetInt64(SPI_getbinval(tuple, desc, 3, &isnull));
		row++;
	}
}

/*
 * store_match_job: find the job for (scope, owner_id, idempotency_key) and
 * compare it with the request.  Returns false if there is none (it was
 * removed between the insert and this look-up).
 */
bool
store_match_job(Datum scope, Datum owner_id, Datum idempotency_key, Datum operation,
				Datum params, Datum provider,
				Datum max_attempts, bool max_attempts_null, SubmitMatch *match)
{
	Datum		values[7] = {owner_id, idempotency_key, operation, params,
	provider, max_attempts, scope};
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', max_attempts_null ? 'n' : ' ', ' '};
	bool		isnull;

	if (rows_usable(ROWS_SUBMIT))
		return rows_match_job(scope, owner_id, idempotency_key, operation, params,
							  provider, max_attempts, max_attempts_null, match);
	if (sql_run(STMT_MATCH_JOB, values, nulls) == 0)
		return false;
	match->job_id = sql_column_int64(1, &isnull);
	match->same_operation = sql_column_bool(2);
	match->same_params = sql_column_bool(3);
	match->same_provider = sql_column_bool(4);
	match->same_max_attempts = sql_column_bool(5);
	return true;
}

/*
 * store_same_identity: whether job_id's stored params and a request's
 * params agree on the identity keys (see STMT_SAME_IDENTITY).
 */
bool
store_same_identity(int64 job_id, Datum params, Datum identity)
{
	Datum		values[3] = {Int64GetDatum(job_id), params, identity};

	if (sql_run(STMT_SAME_IDENTITY, values, NULL) == 0)
		return false;
	return sql_column_bool(1);
}

/*
 * store_replace_ended_job: stop a failed or cancelled job from being the
 * live job of its key (see STMT_REPLACE_ENDED_JOB); false when it is not
 * failed or cancelled (any more), or was replaced already.
 */
bool
store_replace_ended_job(int64 job_id)
{
	Datum		values[1] = {Int64GetDatum(job_id)};

	return sql_run(STMT_REPLACE_ENDED_JOB, values, NULL) == 1;
}

/*
 * store_insert_next_job: insert the job that follows a replaced one under
 * the same key; false when a concurrent submit inserted it first.  A rare
 * write: the SQL path serves it on both back ends.
 */
bool
store_insert_next_job(Datum scope, Datum owner_id, Datum idempotency_key,
					  Datum operation, Datum params, Datum provider,
					  Datum max_attempts, bool max_attempts_null,
					  int64 previous_job_id, int64 *job_id)
{
	Datum		values[8] = {owner_id, idempotency_key, operation, params,
	provider, max_attempts, scope, Int64GetDatum(previous_job_id)};
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', max_attempts_null ? 'n' : ' ', ' ', ' '};
	bool		isnull;

	if (sql_run(STMT_INSERT_NEXT_JOB, values, nulls) == 0)
		return false;
	*job_id = sql_column_int64(1, &isnull);
	return true;
}

/*
 * store_lock_job: lock a job row of the scope (NULL: any) and read it;
 * false if there is none.
 */
bool
store_lock_job(int64 job_id, const char *scope, JobRow *job)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	bool		isnull;
	Datum		d;

	values[0] = Int64GetDatum(job_id);
	values[1] = scope_datum(scope, &nulls[1]);
	if (sql_run(STMT_LOCK_JOB, values, nulls) == 0)
		return false;
	job->id = job_id;
	job->operation = sql_column_text(1);
	job->provider = sql_column_text(2);
	d = sql_column_value(3, &isnull);
	job->has_max_attempts = !isnull;
	job->max_attempts = isnull ? 0 : DatumGetInt32(d);
	job->version = sql_column_int64(4, &isnull);
	job->completed_by = sql_column_int64(5, &isnull);
	job->completed = !isnull;
	job->cancelled = sql_column_bool(6);
	return true;
}

/* store_last_attempt: the job's latest attempt; false if it has none. */
bool
store_last_attempt(int64 job_id, AttemptRow *attempt)
{
	Datum		values[1] = {Int64GetDatum(job_id)};

	if (sql_run(STMT_LAST_ATTEMPT, values, NULL) == 0)
		return false;
	sql_read_attempt_row(attempt);
	return true;
}

/*
 * store_begin_attempt: begin the job's next attempt if the gate lets it
 * (see STMT_BEGIN_ATTEMPT in store_sql.c); provider NULL means the job's
 * own.  Only a job of the scope (NULL: any).  worker: who claimed it (NULL
 * for an explicit begin).  started_at: when it begins, 0 for now() (a
 * claim that waited for work begins when the work came, not when its
 * transaction started, so that its deadline is a whole timeout away).
 * Returns the new attempt's id, or 0 when refused (or no such job).
 */
int64
store_begin_attempt(int64 job_id, const char *scope, Datum provider, bool provider_null,
					Datum timeout, Datum attempt_key, bool attempt_key_null,
					Datum worker, bool worker_null, TimestampTz started_at)
{
	Datum		values[7] = {Int64GetDatum(job_id), provider, attempt_key, timeout,
	(Datum) 0, worker, TimestampTzGetDatum(started_at)};
	char		nulls[7] = {' ', provider_null ? 'n' : ' ', attempt_key_null ? 'n' : ' ', ' ', ' ',
	worker_null ? 'n' : ' ', started_at == 0 ? 'n' : ' '};
	bool		isnull;

	values[4] = scope_datum(scope, &nulls[4]);
	if (rows_usable(ROWS_BEGIN))
		return rows_begin_attempt(job_id, scope, provider, provider_null, timeout,
								  attempt_key, attempt_key_null, worker, worker_null,
								  started_at);
	if (sql_run(STMT_BEGIN_ATTEMPT, values, nulls) == 0)
		return 0;
	return sql_column_int64(1, &isnull);
}

/* store_provider_certified: is the provider certified for the operation? */
bool
store_provider_certified(const char *operation, const char *provider)
{
	Datum		values[2] = {CStringGetTextDatum(operation),
	CStringGetTextDatum(provider)};

	return sql_run(STMT_PROVIDER_CERTIFIED, values, NULL) > 0;
}

/*
 * store_lock_attempt: lock an attempt row of a job of the scope (NULL: any)
 * and read it; false if none.
 */
bool
store_lock_attempt(int64 attempt_id, const char *scope, AttemptRow *attempt)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	values[0] = Int64GetDatum(attempt_id);
	values[1] = scope_datum(scope, &nulls[1]);
	if (sql_run(STMT_LOCK_ATTEMPT, values, nulls) == 0)
		return false;
	sql_read_attempt_row(attempt);
	return true;
}

/* read_finish_job: fill a FinishJob from row 0, FINISH_JOB_COLUMNS at first_col. */
static void
read_finish_job(int first_col, FinishJob *job)
{
	bool		isnull;

	job->operation = sql_column_text(first_col);
	job->completed_by = sql_column_int64(first_col + 1, &isnull);
	job->completed = !isnull;
	job->result = sql_column_value(first_col + 2, &isnull);
	job->contract_version = sql_column_int64(first_col + 3, &isnull);
	job->has_contract = !isnull;
	job->contract = sql_column_value(first_col + 4, &isnull);
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
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	values[0] = Int64GetDatum(attempt_id);
	values[1] = scope_datum(scope, &nulls[1]);
	if (rows_usable(ROWS_FINISH))
		return rows_read_for_finish(attempt_id, scope, attempt, job);
	if (sql_run(STMT_READ_FOR_FINISH, values, nulls) == 0)
		return false;
	sql_read_attempt_row(attempt);
	read_finish_job(ATTEMPT_COLUMN_COUNT + 1, job);
	return true;
}

/*
 * store_claim_and_swap: claim the attempt (still in stored state
 * read_state) and run the compare-and-swap.  Returns CLAIM_CHANGED when
 * the attempt changed since it was read, CLAIM_WON when it took the result
 * slot (and is succeeded), CLAIM_LOST when another attempt had it or the
 * job was cancelled (the attempt must then be marked lost).
 */
ClaimOutcome
store_claim_and_swap(const AttemptRow *attempt, Datum result)
{
	Datum		values[5] = {Int64GetDatum(attempt->job_id),
		Int64GetDatum(attempt->read_version), Int64GetDatum(attempt->id), result,
	CStringGetTextDatum(attempt_state_name(attempt->stored_state))};
	bool		isnull;

	if (rows_usable(ROWS_FINISH))
		return rows_claim_and_swap(attempt, result);
	sql_run(STMT_CLAIM_AND_SWAP, values, NULL);
	if (sql_column_int64(1, &isnull) == 0)
		return CLAIM_CHANGED;
	return sql_column_int64(2, &isnull) == 1 ? CLAIM_WON : CLAIM_LOST;
}

/*
 * store_winner_of: the attempt holding the job's result slot, read with a
 * fresh snapshot after a lost compare-and-swap.  False when the slot is
 * empty (the job was cancelled).
 */
bool
store_winner_of(int64 job_id, int64 *winner)
{
	Datum		values[1] = {Int64GetDatum(job_id)};
	bool		isnull = true;

	if (sql_run(STMT_WINNER_OF, values, NULL) > 0)
		*winner = sql_column_int64(1, &isnull);
	return !isnull;
}

/*
 * store_close_attempt: write an attempt's outcome — failed with error, or
 * lost with lost_to (0 for none) and lost_result — if it is still in stored
 * state `from`.  Returns false when it is not (it changed concurrently).
 */
bool
store_close_attempt(int64 attempt_id, AttemptState from, AttemptState to,
					const char *error, int64 lost_to, Datum lost_result)
{
	Datum		values[6] = {Int64GetDatum(attempt_id),
		CStringGetTextDatum(attempt_state_name(to)),
		error ? CStringGetTextDatum(error) : (Datum) 0,
		Int64GetDatum(lost_to), lost_result,
	CStringGetTextDatum(attempt_state_name(from))};
	char		nulls[6] = {' ', ' ', error ? ' ' : 'n', lost_to ? ' ' : 'n',
	lost_result ? ' ' : 'n', ' '};

	return sql_run(STMT_CLOSE_ATTEMPT, values, nulls) == 1;
}

/* store_mark_unknown: write down that an attempt's outcome is unknown. */
void
store_mark_unknown(int64 attempt_id)
{
	Datum		values[1] = {Int64GetDatum(attempt_id)};

	sql_run(STMT_MARK_UNKNOWN, values, NULL);
}

/* store_cancel_attempt: stop waiting for an attempt, with the reason. */
void
store_cancel_attempt(int64 attempt_id, Datum reason)
{
	Datum		values[2] = {Int64GetDatum(attempt_id), reason};

	sql_run(STMT_CANCEL_ATTEMPT, values, NULL);
}

/* store_cancel_job: cancel a job and bump its version. */
void
store_cancel_job(int64 job_id, Datum reason)
{
	Datum		values[2] = {Int64GetDatum(job_id), reason};

	sql_run(STMT_CANCEL_JOB, values, NULL);
}

/*
 * store_heartbeat: push back the deadline of an attempt the caller holds
 * locked, by extend_by (NULL: the attempt's own timeout); returns the new
 * deadline.
 */
TimestampTz
store_heartbeat(int64 attempt_id, Datum extend_by, bool extend_by_null)
{
	Datum		values[2] = {Int64GetDatum(attempt_id), extend_by};
	char		nulls[2] = {' ', extend_by_null ? 'n' : ' '};
	bool		isnull;

	if (sql_run(STMT_HEARTBEAT, values, nulls) != 1)
		elog(ERROR, "jobguard: attempt %lld vanished under its lock", (long long) attempt_id);
	return DatumGetTimestampTz(sql_column_value(1, &isnull));
}

/*
 * store_retry_policy: the retry backoff of the job's operation (*max NULL
 * when uncapped: max_null set); false when the operation has none.
 */
bool
store_retry_policy(int64 job_id, Interval *backoff, Interval *max, bool *max_null)
{
	Datum		values[1] = {Int64GetDatum(job_id)};
	bool		isnull;
	Datum		d;

	if (sql_run(STMT_RETRY_POLICY, values, NULL) == 0)
		return false;
	*backoff = *DatumGetIntervalP(sql_column_value(1, &isnull));
	d = sql_column_value(2, max_null);
	if (!*max_null)
		*max = *DatumGetIntervalP(d);
	return true;
}

/*
 * store_set_not_before: claim() begins the job's next attempt no sooner
 * than now() + delay (delay NULL: at once).
 */
void
store_set_not_before(int64 job_id, const Interval *delay)
{
	Datum		values[2] = {Int64GetDatum(job_id), PointerGetDatum(delay)};
	char		nulls[2] = {' ', delay == NULL ? 'n' : ' '};

	sql_run(STMT_SET_NOT_BEFORE, values, nulls);
}

/*
 * store_claim_candidates: lock up to max_jobs runnable jobs of the scope
 * (NULL: any) with ids from from_id on, oldest first, skipping those
 * locked by anyone else (see
 * STMT_CLAIM_CANDIDATES); their ids go to ids[], the count is returned.
 * operations NULL: any operation; provider NULL: each job's own.
 */
int
store_claim_candidates(const char *scope, Datum operations, bool operations_null,
					   TimestampTz now, Datum provider, bool provider_null,
					   int max_jobs, int64 from_id, int64 *ids)
{
	Datum		values[6] = {(Datum) 0, operations, TimestampTzGetDatum(now), provider,
	Int32GetDatum(max_jobs), Int64GetDatum(from_id)};
	char		nulls[6] = {' ', operations_null ? 'n' : ' ', ' ', provider_null ? 'n' : ' ', ' ', ' '};
	uint64		n;

	values[0] = scope_datum(scope, &nulls[0]);
	n = sql_run(STMT_CLAIM_CANDIDATES, values, nulls);
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
											 1, &isnull));
	}
	return (int) n;
}

/*
 * store_claim_floor: the id from which claims need to search for runnable
 * jobs (see STMT_CLAIM_FLOOR), from the current snapshot.
 */
int64
store_claim_floor(void)
{
	bool		isnull;

	sql_run(STMT_CLAIM_FLOOR, NULL, NULL);
	return sql_column_int64(1, &isnull);
}

/* One row claim() returns, with the job it is for. */
typedef struct ClaimedRow
{
	int64		job_id;
	HeapTuple	tuple;
} ClaimedRow;

/* claimed_row_order: qsort order of claimed rows, oldest job first. */
static int
claimed_row_order(const void *a, const void *b)
{
	int64		ja = ((const ClaimedRow *) a)->job_id;
	int64		jb = ((const ClaimedRow *) b)->job_id;

	return ja < jb ? -1 : ja > jb;
}

/*
 * store_put_claimed: the rows claim() returns for the attempts begun
 * (ids, count of them), oldest job first, into the materialized result.
 */
void
store_put_claimed(const int64 *ids, int count, ReturnSetInfo *rsinfo)
{
	ClaimedRow *rows = palloc(sizeof(ClaimedRow) * count);
	int			n = 0;

	for (int i = 0; i < count; i++)
	{
		Datum		values[1] = {Int64GetDatum(ids[i])};
		bool		isnull;

		if (sql_run(STMT_CLAIMED, values, NULL) == 0)
			continue;
		rows[n].job_id = sql_column_int64(2, &isnull);
		rows[n].tuple = SPI_tuptable->vals[0];
		n++;
	}
	qsort(rows, n, sizeof(ClaimedRow), claimed_row_order);
	for (int i = 0; i < n; i++)
		tuplestore_puttuple(rsinfo->setResult, rows[i].tuple);
	pfree(rows);
}
