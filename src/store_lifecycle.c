/*-------------------------------------------------------------------------
 *
 * store_lifecycle.c
 *	  The SQL back end of a job's life: sql_backend, the operations of
 *	  store_backend.h done with the statements of store_sql.c (submit's
 *	  insert and replay, submit_many's insert, the attempt gate, the
 *	  finish's read and compare-and-swap), and the calls only SQL serves:
 *	  the replacement of an ended job, the locks and reads of the gate and
 *	  of fail/cancel, the closing writes, heartbeat, retry backoff, and
 *	  claim's candidates and rows.
 *
 * Every function runs inside store_connect() (store_dispatch.c); what it
 * reads stays valid until store_finish().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "schema_level.h"
#include "claim_floor.h"
#include "limits.h"
#include "store.h"
#include "store_backend.h"
#include "store_sql.h"

/*
 * scope_datum: a scope as a text parameter; NULL (any scope) as a NULL one.
 */
static Datum
scope_datum(const char *scope, char *null_flag)
{
	*null_flag = scope == NULL ? 'n' : ' ';
	return scope == NULL ? (Datum) 0 : CStringGetTextDatum(scope);
}

/* The role of each submit column (store_columns.h), by SubmitColumn. */
static const SubmitRole submit_column_role[SUBMIT_COLUMN_COUNT] = {SUBMIT_COLUMN_ROLES};

/*
 * submit_nulls: the SPI nulls of a submit request's values (in the order
 * of SUBMIT_COLUMNS, as the statements take them).
 */
static void
submit_nulls(const SubmitRequest *req, char *nulls)
{
	for (int c = 0; c < SUBMIT_COLUMN_COUNT; c++)
		nulls[c] = req->nulls[c] ? 'n' : ' ';
}

/*
 * sql_insert_job: insert a new job in the scope unless one exists there
 * for the key.  Returns true and the new id when this call created it.
 */
static bool
sql_insert_job(const SubmitRequest *req, int64 *job_id)
{
	char		nulls[SUBMIT_COLUMN_COUNT];
	bool		isnull;

	submit_nulls(req, nulls);
	if (submit_is_scheduled(req))
	{
		Datum		values[SUBMIT_COLUMN_COUNT + 2];
		char		nulls_at[SUBMIT_COLUMN_COUNT + 2];

		memcpy(values, req->values, sizeof(req->values));
		memcpy(nulls_at, nulls, sizeof(nulls));
		values[SUBMIT_COLUMN_COUNT] = req->run_at;
		nulls_at[SUBMIT_COLUMN_COUNT] = req->has_run_at ? ' ' : 'n';
		values[SUBMIT_COLUMN_COUNT + 1] = Int16GetDatum(req->priority);
		nulls_at[SUBMIT_COLUMN_COUNT + 1] = ' ';
		if (sql_run(STMT_INSERT_JOB_AT, values, nulls_at) == 0)
			return false;
	}
	else if (sql_run(STMT_INSERT_JOB, (Datum *) req->values, nulls) == 0)
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

/*
 * sql_insert_jobs: insert the batch's jobs that are not to be skipped,
 * in order, each unless a job exists in the scope for its key (stored, or
 * inserted by an earlier row).  inserted[i] says whether row i created a
 * job, job_ids[i] its id.  One statement (STMT_INSERT_JOBS): the arrays by
 * SubmitColumn, the scope, then whether each row is to be inserted.
 */
static void
sql_insert_jobs(Datum scope, const JobBatch *batch, bool *inserted, int64 *job_ids)
{
	Datum		values[SUBMIT_COLUMN_COUNT + 3];
	char		nulls[SUBMIT_COLUMN_COUNT + 3];
	Datum	   *wanted = palloc(sizeof(Datum) * Max(batch->count, 1));
	bool		scheduled = batch_is_scheduled(batch);
	uint64		n;
	int			row = 0;

	memset(nulls, ' ', sizeof(nulls));
	for (int i = 0; i < batch->count; i++)
	{
		inserted[i] = false;
		wanted[i] = BoolGetDatum(!batch->skip[i]);
	}
	for (int c = 0; c < SUBMIT_COLUMN_COUNT; c++)
	{
		values[c] = batch->arrays[c];
		if (values[c] == (Datum) 0)
			nulls[c] = 'n';
	}
	values[SUBMIT_SCOPE] = scope;
	nulls[SUBMIT_SCOPE] = ' ';
	/* beside the rows, whether each is to be inserted (linear: no = ANY) */
	values[SUBMIT_COLUMN_COUNT] = PointerGetDatum(construct_array(wanted, batch->count, BOOLOID,
																  sizeof(bool), true,
																  TYPALIGN_CHAR));
	/* a schedule: the 1.2 statement, the run times and priorities beside */
	if (scheduled)
	{
		values[SUBMIT_COLUMN_COUNT + 1] = batch->run_at_array;
		nulls[SUBMIT_COLUMN_COUNT + 1] = batch->run_at_array == (Datum) 0 ? 'n' : ' ';
		values[SUBMIT_COLUMN_COUNT + 2] = batch->priority_array;
		nulls[SUBMIT_COLUMN_COUNT + 2] = batch->priority_array == (Datum) 0 ? 'n' : ' ';
	}
	n = sql_run(scheduled ? STMT_INSERT_JOBS_AT : STMT_INSERT_JOBS, values, nulls);

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
			   (batch->skip[row] ||
				!same_text(batch->values[SUBMIT_OWNER_ID][row], owner_id) ||
				!same_text(batch->values[SUBMIT_IDEMPOTENCY_KEY][row], key)))
			row++;
		if (row == batch->count)
			elog(ERROR, "jobguard: an inserted job matches no request of the batch");
		inserted[row] = true;
		job_ids[row] = DatumGetInt64(SPI_getbinval(tuple, desc, 3, &isnull));
		row++;
	}
}

/*
 * sql_match_job: find the job for (scope, owner_id, idempotency_key) and
 * compare it with the request.  Returns false if there is none (it was
 * removed between the insert and this look-up).
 */
static bool
sql_match_job(const SubmitRequest *req, SubmitMatch *match)
{
	char		nulls[SUBMIT_COLUMN_COUNT];
	bool		isnull;

	submit_nulls(req, nulls);
	if (sql_run(schema_is_1_2() ? STMT_MATCH_JOB : STMT_MATCH_JOB_1_1,
				(Datum *) req->values, nulls) == 0)
		return false;
	match->job_id = sql_column_int64(1, &isnull);
	/* then one column per COMPARED column, in their order */
	for (int c = 0, column = 2; c < SUBMIT_COLUMN_COUNT; c++)
		match->same[c] = !submit_role_compared(submit_column_role[c]) ||
			sql_column_bool(column++);
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
 * sql_insert_next_job: insert the job that follows a replaced one under
 * the same key; false when a concurrent submit inserted it first.  A rare
 * write: the SQL path serves it on both back ends (store_insert_next_job
 * guards it against the unique violations of a key index being built).
 */
bool
sql_insert_next_job(const SubmitRequest *req, int64 previous_job_id, int64 *job_id)
{
	Datum		values[SUBMIT_COLUMN_COUNT + 3];
	char		nulls[SUBMIT_COLUMN_COUNT + 3];
	bool		isnull;

	memcpy(values, req->values, sizeof(req->values));
	values[SUBMIT_COLUMN_COUNT] = Int64GetDatum(previous_job_id);
	submit_nulls(req, nulls);
	nulls[SUBMIT_COLUMN_COUNT] = ' ';
	/* the new job takes this request's schedule */
	values[SUBMIT_COLUMN_COUNT + 1] = req->run_at;
	nulls[SUBMIT_COLUMN_COUNT + 1] = req->has_run_at ? ' ' : 'n';
	values[SUBMIT_COLUMN_COUNT + 2] = Int16GetDatum(req->priority);
	nulls[SUBMIT_COLUMN_COUNT + 2] = ' ';
	if (sql_run(submit_is_scheduled(req) ? STMT_INSERT_NEXT_JOB_AT : STMT_INSERT_NEXT_JOB,
				values, nulls) == 0)
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

/*
 * store_last_attempt: the job's latest attempt, with its tries; false if
 * it has none.
 */
bool
store_last_attempt(int64 job_id, AttemptRow *attempt)
{
	Datum		values[1] = {Int64GetDatum(job_id)};

	bool		isnull;

	if (sql_run(STMT_LAST_ATTEMPT, values, NULL) == 0)
		return false;
	sql_read_attempt_row(attempt);
	/* after the attempt row: its tries (1.1: its attempt_no) */
	attempt->tries = DatumGetInt32(sql_column_value(ATTEMPT_COLUMN_COUNT + 1, &isnull));
	return true;
}

/*
 * sql_begin_attempt: begin the job's next attempt if the gate lets it
 * (see STMT_BEGIN_ATTEMPT in store_sql.c); provider NULL means the job's
 * own.  Only a job of the scope (NULL: any).  worker: who claimed it (NULL
 * for an explicit begin).  started_at: when it begins, 0 for now() (a
 * claim that waited for work begins when the work came, not when its
 * transaction started, so that its deadline is a whole timeout away).
 * Returns the new attempt's id, or 0 when refused (or no such job).
 */
static int64
sql_begin_attempt(const BeginRequest *req)
{
	Datum		values[8] = {Int64GetDatum(req->job_id), req->provider, req->attempt_key,
		req->timeout, (Datum) 0, req->worker, TimestampTzGetDatum(req->started_at),
	provider_key_new()};
	char		nulls[8] = {' ', req->provider_null ? 'n' : ' ',
		req->attempt_key_null ? 'n' : ' ', ' ', ' ', req->worker_null ? 'n' : ' ',
	req->started_at == 0 ? 'n' : ' ', ' '};
	bool		isnull;

	values[4] = scope_datum(req->scope, &nulls[4]);
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
 * sql_read_for_finish: an attempt with its job and contract, in one
 * snapshot and without a lock; false if there is no such attempt of a job
 * of the scope (NULL: any).
 */
static bool
sql_read_for_finish(int64 attempt_id, const char *scope, AttemptRow *attempt,
					FinishJob *job)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	values[0] = Int64GetDatum(attempt_id);
	values[1] = scope_datum(scope, &nulls[1]);
	if (sql_run(STMT_READ_FOR_FINISH, values, nulls) == 0)
		return false;
	sql_read_attempt_row(attempt);
	read_finish_job(ATTEMPT_COLUMN_COUNT + 1, job);
	return true;
}

/*
 * sql_claim_and_swap: claim the attempt (still in stored state
 * read_state) and run the compare-and-swap.  Returns CLAIM_CHANGED when
 * the attempt changed since it was read, CLAIM_WON when it took the result
 * slot (and is succeeded), CLAIM_LOST when another attempt had it or the
 * job was cancelled (the attempt must then be marked lost).
 */
static ClaimOutcome
sql_claim_and_swap(const AttemptRow *attempt, Datum result)
{
	Datum		values[5] = {Int64GetDatum(attempt->job_id),
		Int64GetDatum(attempt->read_version), Int64GetDatum(attempt->id), result,
	CStringGetTextDatum(attempt_state_name(attempt->stored_state))};
	bool		isnull;

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
 * (NULL: any) with ids from from_id on and run times from from_time on
 * (the claim floors), in claim order (levels: the priorities to walk, an
 * int2[], 0 to find them in the index), skipping those
 * locked by anyone else and those of the providers in pass_over (a text[],
 * 0: none) (see STMT_CLAIM_CANDIDATES); their ids go to ids[] and their
 * own providers to providers[] (in the caller's context), the count is
 * returned.  operations NULL: any operation; provider NULL and provider_list
 * 0: any provider.  providers[] gets the provider each job's next attempt
 * runs against (its route's choice; in a 1.2 or 1.1 database the
 * job's own, or the claim's provider where 1.2's rule lets it take the job).
 */
int
store_claim_candidates(const char *scope, Datum operations, bool operations_null,
					   TimestampTz now, Datum provider, bool provider_null,
					   Datum provider_list, int max_jobs, int64 from_id,
					   TimestampTz from_time, Datum levels, Datum pass_over,
					   int64 *ids, char **providers)
{
	Datum		values[10] = {(Datum) 0, operations, TimestampTzGetDatum(now), provider,
		Int32GetDatum(max_jobs), Int64GetDatum(from_id), pass_over, TimestampTzGetDatum(from_time),
	levels, provider_list};
	char		nulls[10] = {' ', operations_null ? 'n' : ' ', ' ', provider_null ? 'n' : ' ', ' ', ' ',
		pass_over == (Datum) 0 ? 'n' : ' ', ' ', levels == (Datum) 0 ? 'n' : ' ',
	provider_list == (Datum) 0 ? 'n' : ' '};
	uint64		n;

	values[0] = scope_datum(scope, &nulls[0]);
	n = sql_run(schema_is_1_2() ? STMT_CLAIM_CANDIDATES : STMT_CLAIM_CANDIDATES_1_1,
				values, nulls);
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
											 1, &isnull));
		providers[i] = store_keep_string(SPI_getvalue(SPI_tuptable->vals[i],
													  SPI_tuptable->tupdesc, 2));
	}
	return (int) n;
}

/*
 * store_claim_floor: the id from which claims need to search for runnable
 * jobs (see STMT_CLAIM_FLOOR), from the current snapshot; *time_floor the
 * run time from which they need to search each priority
 * (STMT_CLAIM_TIME_FLOOR; no runnable job: DT_NOEND, every commit that
 * makes one runnable lowers it) and *levels the priorities that have
 * runnable jobs.
 */
int64
store_claim_floor(TimestampTz *time_floor, ClaimLevels *levels)
{
	bool		isnull;
	int64		floor;
	Datum		t;

	sql_run(STMT_CLAIM_FLOOR, NULL, NULL);
	floor = sql_column_int64(1, &isnull);
	*time_floor = DT_NOBEGIN;	/* a 1.1 database: no time floor */
	levels->n = -1;
	if (schema_is_1_2())
	{
		uint64		n = sql_run(STMT_CLAIM_TIME_FLOOR, NULL, NULL);

		*time_floor = DT_NOEND;
		levels->n = 0;
		for (uint64 i = 0; i < n; i++)
		{
			HeapTuple	tuple = SPI_tuptable->vals[i];

			t = SPI_getbinval(tuple, SPI_tuptable->tupdesc, 2, &isnull);
			if (!isnull && DatumGetTimestampTz(t) < *time_floor)
				*time_floor = DatumGetTimestampTz(t);
			claim_levels_add(levels, DatumGetInt16(SPI_getbinval(tuple, SPI_tuptable->tupdesc,
																 1, &isnull)));
		}
	}
	return floor;
}

/*
 * The columns of claim()'s rows: those of 1.1, then 1.2's provider_key
 * and redrive.  A 1.1 database's claim() is declared with the first seven.
 */
#define CLAIMED_COLUMNS_1_1 7
#define CLAIMED_COLUMNS_1_2 9
#define CLAIMED_COLUMNS 10
/* The column of CLAIMED_COLUMNS that says whether a row is a redrive. */
#define CLAIMED_REDRIVE_COLUMN 8

/* One row claim() returns, with the job it is for. */
typedef struct ClaimedRow
{
	int64		job_id;
	Datum		values[CLAIMED_COLUMNS];
	bool		nulls[CLAIMED_COLUMNS];
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
 * (ids, count of them; redrives[i]: whether ids[i] is a redrive), oldest
 * job first, into the materialized result.  The rows are built for the
 * function's declared result, its first 7, its first 9 or all 10 columns
 * (a 1.1 database declares 7, a 1.2 one 9: no failover column).
 */
void
store_put_claimed(const int64 *ids, const bool *redrives, int count, ReturnSetInfo *rsinfo)
{
	ClaimedRow *rows = palloc(sizeof(ClaimedRow) * count);
	int			natts = rsinfo->setDesc->natts;
	int			n = 0;

	if (natts != CLAIMED_COLUMNS_1_1 && natts != CLAIMED_COLUMNS_1_2 && natts != CLAIMED_COLUMNS)
		elog(ERROR, "jobguard: claim() declared with %d columns", natts);
	for (int i = 0; i < count; i++)
	{
		Datum		values[1] = {Int64GetDatum(ids[i])};
		bool		isnull;

		if (sql_run(STMT_CLAIMED, values, NULL) == 0)
			continue;
		rows[n].job_id = sql_column_int64(2, &isnull);
		heap_deform_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
						  rows[n].values, rows[n].nulls);
		rows[n].values[CLAIMED_REDRIVE_COLUMN] = BoolGetDatum(redrives[i]);
		rows[n].nulls[CLAIMED_REDRIVE_COLUMN] = false;
		n++;
	}
	qsort(rows, n, sizeof(ClaimedRow), claimed_row_order);
	for (int i = 0; i < n; i++)
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 rows[i].values, rows[i].nulls);
	pfree(rows);
}

/*
 * store_redrive_read: read an attempt for a redrive, locking its job and
 * itself without waiting (see STMT_REDRIVE_READ): skip_locked false raises
 * 55P03 when another transaction holds either, true returns false as for
 * an attempt that does not exist (or not in the scope).
 */
bool
store_redrive_read(int64 attempt_id, const char *scope, bool skip_locked, RedriveRow *row)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	bool		isnull;
	Datum		end;

	values[0] = Int64GetDatum(attempt_id);
	values[1] = scope_datum(scope, &nulls[1]);
	if (sql_run(skip_locked ? STMT_REDRIVE_READ_SKIP : STMT_REDRIVE_READ, values, nulls) == 0)
		return false;
	row->job_id = sql_column_int64(1, &isnull);
	row->attempt_no = DatumGetInt32(sql_column_value(2, &isnull));
	row->provider = sql_column_text(3);
	row->stored_state = attempt_state_from_name(sql_column_text(4));
	row->state = attempt_state_from_name(sql_column_text(5));
	row->provider_key = sql_column_text(6);
	row->job_closed = sql_column_bool(7);
	row->dedupes = sql_column_bool(8);
	end = sql_column_value(9, &isnull);
	row->window_end = isnull ? 0 : DatumGetTimestampTz(end);
	row->in_window = sql_column_bool(10);
	return true;
}

/*
 * store_redrive_begin: the redrive's new attempt after attempt_id (see
 * STMT_REDRIVE_BEGIN); worker and timeout NULL: none, and the redriven
 * attempt's own timeout.  started_at 0: now().  Returns its id.
 */
int64
store_redrive_begin(int64 attempt_id, Datum worker, bool worker_null,
					Datum timeout, bool timeout_null, TimestampTz started_at)
{
	Datum		values[4] = {Int64GetDatum(attempt_id), worker, timeout,
	TimestampTzGetDatum(started_at)};
	char		nulls[4] = {' ', worker_null ? 'n' : ' ', timeout_null ? 'n' : ' ',
	started_at == 0 ? 'n' : ' '};
	bool		isnull;

	if (sql_run(STMT_REDRIVE_BEGIN, values, nulls) != 1)
		elog(ERROR, "jobguard: redrive of attempt %lld began no attempt", (long long) attempt_id);
	return sql_column_int64(1, &isnull);
}

/*
 * store_redrive_candidates: the attempts claim() may redrive (see
 * STMT_REDRIVE_CANDIDATES), their jobs locked; returns how many, at most
 * max_rows, into attempt_ids.  provider_list: a text[] the attempts'
 * providers must be in, 0: any.
 */
int
store_redrive_candidates(const char *scope, Datum operations, bool operations_null,
						 Datum provider, bool provider_null, Datum provider_list,
						 int max_rows, int64 *attempt_ids)
{
	Datum		values[5] = {(Datum) 0, operations, provider, Int32GetDatum(max_rows),
	provider_list};
	char		nulls[5] = {' ', operations_null ? 'n' : ' ', provider_null ? 'n' : ' ', ' ',
	provider_list == (Datum) 0 ? 'n' : ' '};
	uint64		n;

	values[0] = scope_datum(scope, &nulls[0]);
	n = sql_run(STMT_REDRIVE_CANDIDATES, values, nulls);
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		attempt_ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
													 SPI_tuptable->tupdesc, 1, &isnull));
	}
	return (int) n;
}

/*
 * store_claim_unknown: lease unknown attempts to a reconciler and put
 * their rows into the materialized result (see STMT_CLAIM_UNKNOWN).
 */
void
store_claim_unknown(const char *scope, Datum worker, Datum operations,
					bool operations_null, int max_rows, Datum older_than,
					Datum lease, ReturnSetInfo *rsinfo)
{
	Datum		values[6] = {(Datum) 0, worker, operations, Int32GetDatum(max_rows),
	older_than, lease};
	char		nulls[6] = {' ', ' ', operations_null ? 'n' : ' ', ' ', ' ', ' '};
	uint64		n;

	values[0] = scope_datum(scope, &nulls[0]);
	n = sql_run(STMT_CLAIM_UNKNOWN, values, nulls);
	for (uint64 i = 0; i < n; i++)
		tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
}

/*
 * store_blocked_counts: how many jobs are blocked (open attempt unknown,
 * not redrivable) and since when the oldest is unknown (0: none); false in
 * a 1.1 database, which has no such counts.
 */
bool
store_blocked_counts(int64 *blocked, TimestampTz *oldest)
{
	bool		isnull;
	Datum		since;

	if (!schema_is_1_2())
		return false;
	sql_run(STMT_BLOCKED_COUNTS, NULL, NULL);
	*blocked = sql_column_int64(1, &isnull);
	since = sql_column_value(2, &isnull);
	*oldest = isnull ? 0 : DatumGetTimestampTz(since);
	return true;
}

/* The SQL back end of store_backend.h. */
const StoreBackend sql_backend = {
	.name = "sql",
	.insert_job = sql_insert_job,
	.insert_jobs = sql_insert_jobs,
	.match_job = sql_match_job,
	.begin_attempt = sql_begin_attempt,
	.read_for_finish = sql_read_for_finish,
	.claim_and_swap = sql_claim_and_swap,
};

/*
 * store_reschedule: a new run time (into not_before) and priority of a job
 * the caller holds locked; a NULL part is left as it is.
 */
void
store_reschedule(int64 job_id, Datum run_at, bool run_at_null, int16 priority,
				 bool priority_null)
{
	Datum		values[3] = {Int64GetDatum(job_id), run_at, Int16GetDatum(priority)};
	char		nulls[3] = {' ', run_at_null ? 'n' : ' ', priority_null ? 'n' : ' '};

	sql_run(STMT_RESCHEDULE, values, nulls);
}

/*
 * store_retry_job: a failed job the caller holds locked gets extra more
 * attempts and may run at once; the retry is recorded in its retries.
 */
void
store_retry_job(int64 job_id, int32 extra, Datum reason, bool reason_null, Datum retried_by)
{
	Datum		values[4] = {Int64GetDatum(job_id), Int32GetDatum(extra), reason, retried_by};
	char		nulls[4] = {' ', ' ', reason_null ? 'n' : ' ', ' '};

	if (sql_run(STMT_RETRY_JOB, values, nulls) != 1)
		elog(ERROR, "jobguard: job %lld vanished under its lock", (long long) job_id);
}

/*
 * store_limited_providers: the providers that have a limit or are paused,
 * and their limits (tokens not read), in memory the caller's context owns (outlives
 * the store connection); *count of them.
 */
char	  **
store_limited_providers(int *count, ProviderLimits **limits)
{
	uint64		n = sql_run(STMT_LIMITED_PROVIDERS, NULL, NULL);
	char	  **names = SPI_palloc(sizeof(char *) * Max(n, 1));

	*limits = SPI_palloc(sizeof(ProviderLimits) * Max(n, 1));
	for (uint64 i = 0; i < n; i++)
	{
		char	   *name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		bool		isnull;
		Datum		d;

		names[i] = SPI_palloc(strlen(name) + 1);
		strcpy(names[i], name);
		memset(&(*limits)[i], 0, sizeof(ProviderLimits));
		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull);
		(*limits)[i].max_in_flight = isnull ? 0 : DatumGetInt32(d);
		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3, &isnull);
		(*limits)[i].max_per_second = isnull ? 0 : DatumGetFloat8(d);
		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4, &isnull);
		(*limits)[i].paused = !isnull && DatumGetBool(d);
	}
	*count = (int) n;
	return names;
}

/* store_any_dedupes: whether any provider deduplicates (STMT_ANY_DEDUPES, 1.3). */
bool
store_any_dedupes(void)
{
	sql_run(STMT_ANY_DEDUPES, NULL, NULL);
	return sql_column_bool(1);
}

/*
 * store_lock_policy: lock provider's policy row (skip_locked: unless
 * another transaction holds it) and read its limits; false when there is
 * no row with a limit, or (skip_locked) it is held.
 */
bool
store_lock_policy(const char *provider, bool skip_locked, ProviderLimits *limits)
{
	Datum		values[1] = {CStringGetTextDatum(provider)};
	bool		isnull;
	Datum		d;

	if (sql_run(skip_locked ? STMT_LOCK_POLICY_SKIP : STMT_LOCK_POLICY, values, NULL) == 0)
		return false;
	d = sql_column_value(1, &isnull);
	limits->max_in_flight = isnull ? 0 : DatumGetInt32(d);
	d = sql_column_value(2, &isnull);
	limits->max_per_second = isnull ? 0 : DatumGetFloat8(d);
	d = sql_column_value(3, &isnull);
	limits->has_tokens = !isnull;
	limits->tokens = isnull ? 0 : DatumGetFloat8(d);
	d = sql_column_value(4, &isnull);
	limits->tokens_at = isnull ? 0 : DatumGetTimestampTz(d);
	limits->has_tokens &= !isnull;
	limits->now = DatumGetTimestampTz(sql_column_value(5, &isnull));
	return true;
}

/* store_record_start: a start against provider: its bucket now. */
void
store_record_start(const char *provider, double tokens, TimestampTz at)
{
	Datum		values[3] = {CStringGetTextDatum(provider), Float8GetDatum(tokens),
	TimestampTzGetDatum(at)};

	sql_run(STMT_RECORD_START, values, NULL);
}

/* store_count_throttled: claim passed over a start for provider's limit. */
void
store_count_throttled(const char *provider)
{
	Datum		values[1] = {CStringGetTextDatum(provider)};

	sql_run(STMT_COUNT_THROTTLED, values, NULL);
}

/*
 * store_provider_flow: stats()'s rows provider.<name>.in_flight and
 * provider.<name>.throttled for every provider with a policy.
 */
void
store_provider_flow(ReturnSetInfo *rsinfo)
{
	uint64		n = sql_run(STMT_PROVIDER_FLOW, NULL, NULL);

	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *name = SPI_getvalue(tuple, desc, 1);
		bool		isnull;
		Datum		values[2];
		bool		nulls[2] = {false, false};

		values[0] = CStringGetTextDatum(psprintf("provider.%s.in_flight", name));
		values[1] = SPI_getbinval(tuple, desc, 2, &isnull);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		values[0] = CStringGetTextDatum(psprintf("provider.%s.throttled", name));
		values[1] = SPI_getbinval(tuple, desc, 3, &isnull);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}
