/*-------------------------------------------------------------------------
 *
 * store.c
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

#include "executor/spi.h"
#include "utils/builtins.h"

#include "states.h"
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
 * store_insert_job: insert a new job in the scope unless one exists there
 * for the key.  Returns true and the new id when this call created it.
 */
bool
store_insert_job(Datum scope, Datum owner_id, Datum idempotency_key, Datum operation,
				 Datum params, Datum provider,
				 Datum max_attempts, bool max_attempts_null, int64 *job_id)
{
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
 * own.  Only a job of the scope (NULL: any).  Returns the new attempt's
 * id, or 0 when refused (or no such job).
 */
int64
store_begin_attempt(int64 job_id, const char *scope, Datum provider, bool provider_null,
					Datum timeout, Datum attempt_key, bool attempt_key_null)
{
	Datum		values[5] = {Int64GetDatum(job_id), provider, attempt_key, timeout};
	char		nulls[5] = {' ', provider_null ? 'n' : ' ', attempt_key_null ? 'n' : ' ', ' ', ' '};
	bool		isnull;

	values[4] = scope_datum(scope, &nulls[4]);
	if (rows_usable(ROWS_BEGIN))
		return rows_begin_attempt(job_id, scope, provider, provider_null, timeout,
								  attempt_key, attempt_key_null);
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
