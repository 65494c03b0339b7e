/*-------------------------------------------------------------------------
 *
 * jobguard.c
 *	  The SQL-callable functions of jobguard: argument checks, then the
 *	  steps of each call in order, delegating table access to store.c, the
 *	  state rules to states.c and result validation to contract.c.
 *
 * Every function checks all of its arguments before it touches a table, so
 * a refused call writes nothing.  Required arguments that are NULL raise
 * 22004 naming the argument; the functions are not STRICT, which would
 * silently return NULL instead.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/async.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

#include "contract.h"
#include "errcodes.h"
#include "jobguard.h"

PG_MODULE_MAGIC;

/* The channel jobguard notifies when a job succeeds, fails or is cancelled. */
#define JOBS_CHANNEL "jobguard_jobs"

/* GUC jobguard.notify: send NOTIFY jobguard_jobs when a job ends. */
static bool notify_enabled = true;

/* How long await() sleeps between two looks, at first and at most. */
#define AWAIT_FIRST_SLEEP_MS 2
#define AWAIT_MAX_SLEEP_MS 100

/* Longest owner_id, idempotency_key and attempt_key, in characters. */
#define MAX_KEY_CHARS 255
/* Longest operation and provider name, in characters. */
#define MAX_NAME_CHARS 63
/* For text_arg: any length, but not empty (error messages, reasons). */
#define UNLIMITED_CHARS INT_MAX

/*
 * How often submit() retries when the job it conflicted with is gone before
 * it could be read (removed by a concurrent purge).
 */
#define SUBMIT_MAX_TRIES 3

PG_FUNCTION_INFO_V1(jobguard_submit);
PG_FUNCTION_INFO_V1(jobguard_begin_attempt);
PG_FUNCTION_INFO_V1(jobguard_finish_attempt);
PG_FUNCTION_INFO_V1(jobguard_fail_attempt);
PG_FUNCTION_INFO_V1(jobguard_mark_unknown);
PG_FUNCTION_INFO_V1(jobguard_cancel_attempt);
PG_FUNCTION_INFO_V1(jobguard_cancel_job);
PG_FUNCTION_INFO_V1(jobguard_job_state);
PG_FUNCTION_INFO_V1(jobguard_job);
PG_FUNCTION_INFO_V1(jobguard_attempts_of);
PG_FUNCTION_INFO_V1(jobguard_define_operation);
PG_FUNCTION_INFO_V1(jobguard_certify_provider);
PG_FUNCTION_INFO_V1(jobguard_revoke_provider);
PG_FUNCTION_INFO_V1(jobguard_check_result);
PG_FUNCTION_INFO_V1(jobguard_await);
PG_FUNCTION_INFO_V1(jobguard_purge);
PG_FUNCTION_INFO_V1(jobguard_stats);
PG_FUNCTION_INFO_V1(jobguard_stats_reset);
PG_FUNCTION_INFO_V1(jobguard_fast_path_status);

void		_PG_init(void);

/*
 * _PG_init: define the GUCs; when loaded through shared_preload_libraries,
 * also reserve the shared counters and register the sweeper workers.
 * Without preloading everything else works: the derived state is the truth.
 */
void
_PG_init(void)
{
	DefineCustomBoolVariable("jobguard.notify",
							 "Sends NOTIFY jobguard_jobs, '<job_id>:<state>' when a job succeeds, fails or is cancelled.",
							 "Every notification passes through the server's one notification queue; "
							 "turn it off where nobody listens.",
							 &notify_enabled, true, PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("jobguard.fast_path",
							 "Reads and writes the rows of submit, begin_attempt and finish_attempt directly instead of through SQL statements.",
							 "Same rules, same locks, same answers, less work per call; off runs the SQL statements "
							 "(used to check both give the same results).",
							 &rows_fast_path, true, PGC_USERSET, 0, NULL, NULL, NULL);
	sweeper_init();
	if (process_shared_preload_libraries_in_progress)
		stats_init();
}

/*
 * notify_job: NOTIFY jobguard_jobs, '<job_id>:<state>'.  Delivered when the
 * transaction commits, never before, and not at all if it rolls back.
 */
static void
notify_job(int64 job_id, const char *state)
{
	if (!notify_enabled)
		return;
	Async_Notify(JOBS_CHANNEL, psprintf("%lld:%s", (long long) job_id, state));
}

/*
 * notify_if_job_failed: after an attempt failed, notify when that made the
 * job itself failed (its last allowed attempt).
 */
static void
notify_if_job_failed(int64 job_id)
{
	char	   *state;

	if (notify_enabled && store_fresh_job_state(job_id, &state) &&
		strcmp(state, "failed") == 0)
		notify_job(job_id, "failed");
}

/*
 * require_arg: raise 22004 naming the argument if it is NULL.  A NULL
 * owner, key or result is a caller bug, never something to answer with NULL.
 */
static void
require_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" of jobguard.%s() must not be null",
						name, get_func_name(fcinfo->flinfo->fn_oid))));
}

/*
 * text_arg: a text argument that must be present and 1 to max_chars
 * characters long; returns it detoasted, as a Datum for store.c.
 */
static Datum
text_arg(FunctionCallInfo fcinfo, int argno, const char *name, int max_chars)
{
	text	   *t;
	int			chars;

	require_arg(fcinfo, argno, name);
	t = PG_GETARG_TEXT_PP(argno);
	chars = pg_mbstrlen_with_len(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	if (max_chars == UNLIMITED_CHARS && chars < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must not be empty", name)));
	if (chars < 1 || chars > max_chars)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be 1 to %d characters long",
						name, max_chars),
				 errdetail("It is %d characters long.", chars)));
	return PointerGetDatum(t);
}

/* optional_text_arg: like text_arg, but NULL is allowed (*isnull set). */
static Datum
optional_text_arg(FunctionCallInfo fcinfo, int argno, const char *name,
				  int max_chars, bool *isnull)
{
	*isnull = PG_ARGISNULL(argno);
	if (*isnull)
		return (Datum) 0;
	return text_arg(fcinfo, argno, name, max_chars);
}

/* int64_arg: a required bigint argument (a job or attempt id). */
static int64
int64_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	require_arg(fcinfo, argno, name);
	return PG_GETARG_INT64(argno);
}

/* jsonb_arg: a required jsonb argument, detoasted. */
static Datum
jsonb_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	require_arg(fcinfo, argno, name);
	return PointerGetDatum(PG_GETARG_JSONB_P(argno));
}

/* jsonb_equal: jsonb equality (key order and number spelling ignored). */
static bool
jsonb_equal(Datum a, Datum b)
{
	return DatumGetBool(DirectFunctionCall2(jsonb_eq, a, b));
}

/*
 * result_tupdesc: the blessed row descriptor of a function returning a
 * composite, built on the first call of a query and kept in fn_extra, since
 * building it per row costs more than the call itself.
 */
static TupleDesc
result_tupdesc(FunctionCallInfo fcinfo)
{
	TupleDesc	desc = (TupleDesc) fcinfo->flinfo->fn_extra;

	if (desc == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);

		if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "jobguard: function returning a row called in a context that cannot accept one");
		desc = BlessTupleDesc(CreateTupleDescCopy(desc));
		MemoryContextSwitchTo(old);
		fcinfo->flinfo->fn_extra = desc;
	}
	return desc;
}

/* text_result: a text Datum of a C string constant. */
static Datum
text_result(const char *s)
{
	return PointerGetDatum(cstring_to_text(s));
}

/*
 * describe_mismatch: "operation, params and provider" — the parts of a
 * replayed request that differ from the stored job, for JG001's DETAIL.
 */
static char *
describe_mismatch(const SubmitMatch *m)
{
	const char *parts[4];
	int			n = 0;
	StringInfoData buf;

	if (!m->same_operation)
		parts[n++] = "operation";
	if (!m->same_params)
		parts[n++] = "params";
	if (!m->same_provider)
		parts[n++] = "provider";
	if (!m->same_max_attempts)
		parts[n++] = "max_attempts";

	initStringInfo(&buf);
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(&buf, i == n - 1 ? " and " : ", ");
		appendStringInfoString(&buf, parts[i]);
	}
	return buf.data;
}

/*
 * jobguard.submit(owner_id, idempotency_key, operation, params, provider,
 *				   max_attempts) -> (job_id, created)
 *
 * Insert first and let the unique constraint decide; only a conflicting
 * insert reads the existing job and compares the request with it.  Under
 * READ COMMITTED a concurrent duplicate waits for the first inserter and
 * then sees its job; under REPEATABLE READ it gets a serialization failure.
 */
Datum
jobguard_submit(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		owner_id = text_arg(fcinfo, 0, "owner_id", MAX_KEY_CHARS);
	Datum		idempotency_key = text_arg(fcinfo, 1, "idempotency_key", MAX_KEY_CHARS);
	Datum		operation = text_arg(fcinfo, 2, "operation", MAX_NAME_CHARS);
	Datum		params = jsonb_arg(fcinfo, 3, "params");
	Datum		provider = text_arg(fcinfo, 4, "provider", MAX_NAME_CHARS);
	bool		max_attempts_null = PG_ARGISNULL(5);
	Datum		max_attempts = max_attempts_null ? (Datum) 0 : PG_GETARG_DATUM(5);
	TupleDesc	desc = result_tupdesc(fcinfo);
	int64		job_id = 0;
	bool		created = false;
	Datum		columns[2];
	bool		nulls[2] = {false, false};

	if (!max_attempts_null && DatumGetInt32(max_attempts) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"max_attempts\" must be at least 1 or null"),
				 errdetail("It is %d.", DatumGetInt32(max_attempts))));

	store_connect(&caller);
	for (int tries = 1;; tries++)
	{
		SubmitMatch match;

		if (store_insert_job(owner_id, idempotency_key, operation, params,
							 provider, max_attempts, max_attempts_null, &job_id))
		{
			created = true;
			stats_count(STAT_SUBMITS_CREATED);
			break;
		}
		if (store_match_job(owner_id, idempotency_key, operation, params,
							provider, max_attempts, max_attempts_null, &match))
		{
			if (!match.same_operation || !match.same_params ||
				!match.same_provider || !match.same_max_attempts)
			{
				stats_count(STAT_KEY_CONFLICTS);
				ereport(ERROR,
						(errcode(ERRCODE_JG_IDEMPOTENCY_KEY_REUSED),
						 errmsg("idempotency key \"%s\" of owner \"%s\" was already used for a different request",
								TextDatumGetCString(idempotency_key),
								TextDatumGetCString(owner_id)),
						 errdetail("Job %lld was submitted with this key; this request differs in %s.",
								   (long long) match.job_id, describe_mismatch(&match)),
						 errhint("Use a new idempotency key for a new request, or resend the original request unchanged to get job %lld.",
								 (long long) match.job_id)));
			}
			stats_count(STAT_SUBMITS_REPLAYED);
			job_id = match.job_id;
			break;
		}
		if (tries >= SUBMIT_MAX_TRIES)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not submit job for idempotency key \"%s\" of owner \"%s\"",
							TextDatumGetCString(idempotency_key),
							TextDatumGetCString(owner_id)),
					 errdetail("The job for this key was removed concurrently %d times.", tries),
					 errhint("Retry the call.")));
	}
	store_finish(&caller);

	columns[0] = Int64GetDatum(job_id);
	columns[1] = BoolGetDatum(created);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, columns, nulls)));
}

/* report_job_not_found: raise JG008 for a job id that names no job. */
static void
pg_attribute_noreturn()
report_job_not_found(int64 job_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_JG_JOB_NOT_FOUND),
			 errmsg("job %lld does not exist", (long long) job_id)));
}

/* report_attempt_not_found: raise JG009 for an id that names no attempt. */
static void
pg_attribute_noreturn()
report_attempt_not_found(int64 attempt_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_JG_ATTEMPT_NOT_FOUND),
			 errmsg("attempt %lld does not exist", (long long) attempt_id)));
}

/*
 * is_own_begin_replay: true when a begin names the key of the job's open
 * attempt (and no other provider): a worker retrying its own begin after a
 * lost response gets its attempt back instead of JG002.
 */
static bool
is_own_begin_replay(const AttemptRow *last, const char *attempt_key,
					const char *provider)
{
	return attempt_key != NULL &&
		attempt_state_is_open(last->state) &&
		last->attempt_key != NULL &&
		strcmp(last->attempt_key, attempt_key) == 0 &&
		(provider == NULL || strcmp(last->provider, provider) == 0);
}

/*
 * How often begin_attempt() and finish_attempt() try again when a
 * concurrent call changed what they had read (each retry means another
 * call made progress on the same job, so this is never reached in practice).
 */
#define MAX_TRIES 5

/* report_retries_exhausted: raise a serialization failure (40001) to retry. */
static void
pg_attribute_noreturn()
report_retries_exhausted(const char *what, int64 id)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not %s %lld: it kept changing concurrently", what, (long long) id),
			 errhint("Retry the call.")));
}

/*
 * refused_begin: why the gate refused a begin, as the caller-facing error,
 * in the order SPEC.md gives: no job (JG008), closed job (JG003), open
 * attempt (JG002), attempts used up (JG005), fallback not certified
 * (JG004).  A worker retrying its own begin is not refused: its attempt id
 * is returned.  Returns 0 when nothing refuses any more (the begin lost a
 * race that has since resolved): the caller tries again.
 */
static int64
refused_begin(int64 job_id, const char *provider, const char *attempt_key)
{
	JobRow		job;
	AttemptRow	last;
	bool		has_last;

	if (!store_lock_job(job_id, &job))
		report_job_not_found(job_id);
	has_last = store_last_attempt(job_id, &last);
	if (has_last && is_own_begin_replay(&last, attempt_key, provider))
		return last.id;
	require_gate_open(&job, has_last ? &last : NULL);
	require_attempts_left(&job, has_last ? &last : NULL);
	if (provider != NULL && strcmp(provider, job.provider) != 0 &&
		!store_provider_certified(job.operation, provider))
		ereport(ERROR,
				(errcode(ERRCODE_JG_PROVIDER_NOT_CERTIFIED),
				 errmsg("provider \"%s\" is not certified for operation \"%s\"",
						provider, job.operation),
				 errdetail("Job %lld targets provider \"%s\"; a fallback provider must be certified for the job's operation.",
						   (long long) job_id, job.provider),
				 errhint("Certify it with jobguard.certify_provider() once it passes the operation's contract tests.")));
	return 0;
}

/*
 * jobguard.begin_attempt(job_id, provider, timeout, attempt_key) -> bigint
 *
 * One INSERT ... SELECT with the gate in it (the job open, no open attempt,
 * attempts left, a certified fallback); concurrent begins of one job are
 * decided by the partial unique index on open attempts, which makes the
 * second wait for the first and then insert nothing.  Only a refused begin
 * looks further, with the job row locked, to raise the right error (or to
 * return a worker's own attempt).
 */
Datum
jobguard_begin_attempt(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");
	bool		provider_null;
	Datum		provider_arg = optional_text_arg(fcinfo, 1, "provider", MAX_NAME_CHARS, &provider_null);
	Datum		timeout;
	bool		attempt_key_null;
	Datum		attempt_key = optional_text_arg(fcinfo, 3, "attempt_key", MAX_KEY_CHARS, &attempt_key_null);
	int64		attempt_id = 0;
	Interval	zero_interval = {0};

	require_arg(fcinfo, 2, "timeout");
	timeout = PG_GETARG_DATUM(2);
	if (!DatumGetBool(DirectFunctionCall2(interval_gt, timeout,
										  IntervalPGetDatum(&zero_interval))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"timeout\" must be greater than zero"),
				 errdetail("It is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out, timeout)))));

	store_connect(&caller);
	for (int tries = 1; attempt_id == 0; tries++)
	{
		if (tries > MAX_TRIES)
			report_retries_exhausted("begin an attempt of job", job_id);
		attempt_id = store_begin_attempt(job_id, provider_arg, provider_null, timeout,
										 attempt_key, attempt_key_null);
		if (attempt_id == 0)
			attempt_id = refused_begin(job_id,
									   provider_null ? NULL : TextDatumGetCString(provider_arg),
									   attempt_key_null ? NULL : TextDatumGetCString(attempt_key));
	}
	store_finish(&caller);
	PG_RETURN_INT64(attempt_id);
}

/*
 * lock_attempt: lock an attempt row and read it, or raise JG009.  fail,
 * mark_unknown and cancel go through here first, so they run one at a time
 * per attempt; finish_attempt instead writes on condition that the attempt
 * is still in the state it read, and so waits for them too.
 */
static void
lock_attempt(int64 attempt_id, AttemptRow *attempt)
{
	if (!store_lock_attempt(attempt_id, attempt))
		report_attempt_not_found(attempt_id);
}

/*
 * require_same_report: a repeated finish of an attempt that already has an
 * outcome must carry the result it reported before (JG007 otherwise), so a
 * retried call is harmless but a changed result is never taken silently.
 */
static void
require_same_report(const AttemptRow *attempt, Datum earlier, Datum result)
{
	if (!jsonb_equal(earlier, result))
		ereport(ERROR,
				(errcode(ERRCODE_JG_RESULT_MISMATCH),
				 errmsg("attempt %lld of job %lld already reported a different result",
						(long long) attempt->id, (long long) attempt->job_id),
				 errdetail("The attempt %s with its first result; a reported result cannot change.",
						   attempt->state == ATTEMPT_SUCCEEDED ? "won" : "lost")));
}

/*
 * report_lost: the attempt reported after another attempt won (or after
 * the job was cancelled): one LOG line naming job, loser and winner.
 */
static void
report_lost(const AttemptRow *attempt, bool has_winner, int64 winner)
{
	if (has_winner)
		ereport(LOG,
				(errmsg("jobguard: attempt %lld of job %lld lost the race to attempt %lld; its result was discarded",
						(long long) attempt->id, (long long) attempt->job_id,
						(long long) winner)));
	else
		ereport(LOG,
				(errmsg("jobguard: attempt %lld of job %lld reported after the job was cancelled; its result was discarded",
						(long long) attempt->id, (long long) attempt->job_id)));
}

/*
 * finish_once: one try at finishing an attempt read (without a lock) just
 * before.  Returns the outcome, or NULL when the attempt changed
 * concurrently in between and the finish must read it again.
 */
static const char *
finish_once(const AttemptRow *attempt, const FinishJob *job, Datum result)
{
	char	   *violation = NULL;
	int64		winner = 0;
	bool		has_winner;

	/* a replay answers as before, if it carries the same result */
	if (attempt->state == ATTEMPT_SUCCEEDED)
	{
		require_same_report(attempt, job->result, result);
		return "won";
	}
	if (attempt->state == ATTEMPT_LOST)
	{
		require_same_report(attempt, attempt->lost_result, result);
		return "lost";
	}
	require_transition(ACTION_FINISH, attempt);

	if (job->has_contract)
		violation = contract_first_violation(contract_cache_get(job->operation,
																job->contract_version,
																job->contract),
											 DatumGetJsonbP(result));
	if (violation != NULL)
	{
		if (!store_close_attempt(attempt->id, attempt->stored_state, ATTEMPT_FAILED,
								 psprintf("result breaks the output contract of operation \"%s\": %s",
										  job->operation, violation),
								 0, (Datum) 0))
			return NULL;
		stats_count(STAT_CONTRACT_REJECTIONS);
		notify_if_job_failed(attempt->job_id);
		return "rejected";
	}

	switch (store_claim_and_swap(attempt, result))
	{
		case CLAIM_CHANGED:
			return NULL;
		case CLAIM_WON:
			stats_count(STAT_CAS_WINS);
			notify_job(attempt->job_id, "succeeded");
			return "won";
		case CLAIM_LOST:
			break;
	}
	/* claimed as succeeded by this transaction, but the slot was taken */
	has_winner = store_winner_of(attempt->job_id, &winner);
	if (!store_close_attempt(attempt->id, ATTEMPT_SUCCEEDED, ATTEMPT_LOST, NULL,
							 has_winner ? winner : 0, result))
		elog(ERROR, "jobguard: attempt %lld changed under its own lock", (long long) attempt->id);
	report_lost(attempt, has_winner, winner);
	stats_count(STAT_CAS_LOSSES);
	return "lost";
}

/*
 * jobguard.finish_attempt(attempt_id, result) -> 'won' | 'lost' | 'rejected'
 *
 * Reads the attempt with its job and contract, then decides: replays of a
 * finished attempt answer as before; a result that breaks the operation's
 * contract fails the attempt and leaves the slot free; otherwise one
 * statement claims the attempt and runs the compare-and-swap on the job —
 * one updated job row is a win; zero rows means another attempt won (or
 * the job was cancelled), and the result is kept on the attempt only,
 * never on the job.  Every write is conditional on the attempt still being
 * in the state read, so a concurrent finish, fail or cancel of the same
 * attempt makes this one read again rather than overwrite it.
 */
Datum
jobguard_finish_attempt(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	Datum		result = jsonb_arg(fcinfo, 1, "result");
	const char *outcome = NULL;

	store_connect(&caller);
	for (int tries = 1; outcome == NULL; tries++)
	{
		AttemptRow	attempt;
		FinishJob	job;

		if (tries > MAX_TRIES)
			report_retries_exhausted("finish attempt", attempt_id);
		if (!store_read_for_finish(attempt_id, &attempt, &job))
			report_attempt_not_found(attempt_id);
		outcome = finish_once(&attempt, &job, result);
	}
	store_finish(&caller);
	PG_RETURN_DATUM(text_result(outcome));
}

/*
 * jobguard.fail_attempt(attempt_id, error) -> 'failed'
 *
 * The provider reported an error: the attempt is closed and the gate opens.
 * (A timeout is not an error: use mark_unknown.)
 */
Datum
jobguard_fail_attempt(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	Datum		error = text_arg(fcinfo, 1, "error", UNLIMITED_CHARS);
	AttemptRow	attempt;

	store_connect(&caller);
	lock_attempt(attempt_id, &attempt);
	require_transition(ACTION_FAIL, &attempt);
	store_close_attempt(attempt_id, attempt.stored_state, ATTEMPT_FAILED,
						TextDatumGetCString(error), 0, (Datum) 0);
	notify_if_job_failed(attempt.job_id);
	store_finish(&caller);
	PG_RETURN_DATUM(text_result("failed"));
}

/*
 * jobguard.mark_unknown(attempt_id) -> 'unknown'
 *
 * A caller saw a timeout: write down that the outcome is unknown.  The gate
 * stays closed; only a result, a failure or a cancel opens it.
 */
Datum
jobguard_mark_unknown(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	AttemptRow	attempt;

	store_connect(&caller);
	lock_attempt(attempt_id, &attempt);
	require_transition(ACTION_MARK_UNKNOWN, &attempt);
	if (attempt.stored_state != ATTEMPT_UNKNOWN)
		store_mark_unknown(attempt_id);
	store_finish(&caller);
	PG_RETURN_DATUM(text_result("unknown"));
}

/*
 * jobguard.cancel_attempt(attempt_id, reason) -> 'cancelled'
 *
 * An out-of-band decision to stop waiting for an open attempt: the gate
 * opens for a fallback.  The provider may still finish; its result then
 * goes through the compare-and-swap like any other.
 */
Datum
jobguard_cancel_attempt(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	Datum		reason = text_arg(fcinfo, 1, "reason", UNLIMITED_CHARS);
	AttemptRow	attempt;

	store_connect(&caller);
	lock_attempt(attempt_id, &attempt);
	require_transition(ACTION_CANCEL, &attempt);
	store_cancel_attempt(attempt_id, reason);
	store_finish(&caller);
	PG_RETURN_DATUM(text_result("cancelled"));
}

/*
 * jobguard.cancel_job(job_id, reason) -> 'cancelled'
 *
 * Close the job without a result: its version is bumped, so every attempt
 * begun before loses the compare-and-swap, and no new attempt may begin.
 * Cancelling a cancelled job again changes nothing; a succeeded job cannot
 * be cancelled (JG003).
 */
Datum
jobguard_cancel_job(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");
	Datum		reason = text_arg(fcinfo, 1, "reason", UNLIMITED_CHARS);
	JobRow		job;

	store_connect(&caller);
	if (!store_lock_job(job_id, &job))
		report_job_not_found(job_id);
	if (job.completed)
		ereport(ERROR,
				(errcode(ERRCODE_JG_JOB_CLOSED),
				 errmsg("job %lld has already succeeded and cannot be cancelled",
						(long long) job_id),
				 errdetail("Attempt %lld holds its result.", (long long) job.completed_by)));
	if (!job.cancelled)
	{
		store_cancel_job(job_id, reason);
		notify_job(job_id, "cancelled");
	}
	store_finish(&caller);
	PG_RETURN_DATUM(text_result("cancelled"));
}

/* jobguard.job_state(job_id) -> the derived state of the job. */
Datum
jobguard_job_state(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");
	char	   *state;

	store_connect(&caller);
	if (!store_job_state(job_id, &state))
		report_job_not_found(job_id);
	store_finish(&caller);
	PG_RETURN_DATUM(text_result(state));
}

/* jobguard.job(job_id) -> the job's row of job_overview. */
Datum
jobguard_job(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");
	TupleDesc	desc = result_tupdesc(fcinfo);
	MemoryContext caller_cxt = CurrentMemoryContext;
	Datum		row;

	store_connect(&caller);
	if (!store_job_overview(job_id, desc, caller_cxt, &row))
		report_job_not_found(job_id);
	store_finish(&caller);
	PG_RETURN_DATUM(row);
}

/* jobguard.attempts_of(job_id) -> the job's attempts, in order. */
Datum
jobguard_attempts_of(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");

	InitMaterializedSRF(fcinfo, 0);
	store_connect(&caller);
	if (!store_attempts_of(job_id, (ReturnSetInfo *) fcinfo->resultinfo))
		report_job_not_found(job_id);
	store_finish(&caller);
	return (Datum) 0;
}

/*
 * jobguard.define_operation(operation, output_contract) -> void
 *
 * The contract is compiled here only to validate it (22023 naming the
 * keyword and its path); finishes compile it again through the cache.
 */
Datum
jobguard_define_operation(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		contract = jsonb_arg(fcinfo, 1, "output_contract");

	(void) contract_compile(TextDatumGetCString(operation),
							DatumGetJsonbP(contract), CurrentMemoryContext);
	store_connect(&caller);
	store_define_operation(operation, contract);
	store_finish(&caller);
	PG_RETURN_VOID();
}

/* jobguard.certify_provider(operation, provider, evidence) -> void */
Datum
jobguard_certify_provider(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		provider = text_arg(fcinfo, 1, "provider", MAX_NAME_CHARS);
	bool		evidence_null = PG_ARGISNULL(2);
	Datum		evidence = evidence_null ? (Datum) 0 : PG_GETARG_DATUM(2);

	store_connect(&caller);
	store_certify_provider(operation, provider, evidence, evidence_null);
	store_finish(&caller);
	PG_RETURN_VOID();
}

/*
 * jobguard.revoke_provider(operation, provider) -> void
 *
 * Revoking a provider that holds no certification is an error (JG004), so
 * a misspelt name is noticed rather than silently doing nothing.
 */
Datum
jobguard_revoke_provider(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		provider = text_arg(fcinfo, 1, "provider", MAX_NAME_CHARS);

	store_connect(&caller);
	if (!store_revoke_provider(operation, provider))
		ereport(ERROR,
				(errcode(ERRCODE_JG_PROVIDER_NOT_CERTIFIED),
				 errmsg("provider \"%s\" is not certified for operation \"%s\"",
						TextDatumGetCString(provider), TextDatumGetCString(operation)),
				 errhint("jobguard.certification_overview lists the certifications.")));
	store_finish(&caller);
	PG_RETURN_VOID();
}

/*
 * jobguard.check_result(operation, result) -> text
 *
 * The first violation of the operation's output contract by a result, or
 * NULL when the result satisfies it (or the operation has no contract).
 * This is the check finish_attempt() applies, offered on its own so that a
 * provider's contract tests can run it before certify_provider().
 */
Datum
jobguard_check_result(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		result = jsonb_arg(fcinfo, 1, "result");
	int64		version;
	Datum		contract;
	char	   *violation = NULL;

	store_connect(&caller);
	if (store_operation_contract(operation, &version, &contract))
		violation = contract_first_violation(contract_cache_get(TextDatumGetCString(operation),
																version, contract),
											 DatumGetJsonbP(result));
	if (violation != NULL)
		violation = store_keep_string(violation);
	store_finish(&caller);
	if (violation == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(violation));
}

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
 * fresh snapshot after short sleeps (2 ms, doubling up to 100 ms) on the
 * process latch, so statement_timeout and cancel interrupt it at once.  A
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

	require_arg(fcinfo, 1, "timeout");
	timeout = PG_GETARG_INTERVAL_P(1);
	/* a day counts as 24 hours and a month as 30 days, as interval comparison does */
	timeout_ms = timeout->time / 1000 +
		((int64) timeout->month * DAYS_PER_MONTH + timeout->day) * SECS_PER_DAY * 1000;
	if (timeout_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"timeout\" of jobguard.await() must not be negative")));
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("jobguard.await() cannot run in a %s transaction",
						IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errdetail("Its snapshot could never see the job's outcome."),
				 errhint("Call it in READ COMMITTED, or outside a transaction block.")));

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	for (;;)
	{
		long		remaining_ms;

		store_connect(&caller);
		if (!store_fresh_job_state(job_id, &state))
			report_job_not_found(job_id);
		store_finish(&caller);

		remaining_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (is_terminal_job_state(state) || remaining_ms <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(sleep_ms, remaining_ms), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		sleep_ms = Min(sleep_ms * 2, AWAIT_MAX_SLEEP_MS);
	}
	PG_RETURN_DATUM(text_result(state));
}

/*
 * jobguard.purge(older_than, batch_size) -> bigint
 *
 * Deletes jobs that are terminal (succeeded, cancelled, failed) since
 * longer than older_than, with their attempts, batch_size at a time;
 * returns how many jobs it deleted.  Jobs with an open attempt are never
 * purged.  After purge an owner's key is free again: jobguard remembers a
 * key for as long as its job exists.
 */
Datum
jobguard_purge(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Interval   *older_than;
	int32		batch_size;
	Interval	zero_interval = {0};
	TimestampTz cutoff;
	int64		deleted;

	require_arg(fcinfo, 0, "older_than");
	require_arg(fcinfo, 1, "batch_size");
	older_than = PG_GETARG_INTERVAL_P(0);
	batch_size = PG_GETARG_INT32(1);
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(older_than),
										 IntervalPGetDatum(&zero_interval))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"older_than\" of jobguard.purge() must not be negative")));
	if (batch_size < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"batch_size\" of jobguard.purge() must be at least 1"),
				 errdetail("It is %d.", batch_size)));

	cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
													 TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()),
													 IntervalPGetDatum(older_than)));
	store_connect(&caller);
	deleted = store_purge(cutoff, batch_size);
	store_finish(&caller);
	PG_RETURN_INT64(deleted);
}

/*
 * jobguard.stats() -> (metric, value) rows
 *
 * Jobs and attempts by state (counted from the tables now), then the event
 * counters of this database since server start or stats_reset() — NULL
 * when jobguard is not in shared_preload_libraries.
 */
Datum
jobguard_stats(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	store_connect(&caller);
	store_state_counts(rsinfo);
	store_finish(&caller);

	for (int c = 0; c < STAT_COUNT; c++)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};
		uint64		count;

		values[0] = text_result(stats_counter_name((StatCounter) c));
		if (stats_read((StatCounter) c, &count))
			values[1] = Int64GetDatum((int64) count);
		else
			nulls[1] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* jobguard.stats_reset() -> void: zero this database's event counters. */
Datum
jobguard_stats_reset(PG_FUNCTION_ARGS)
{
	stats_reset();
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
