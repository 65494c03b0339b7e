/*-------------------------------------------------------------------------
 *
 * finish.c
 *	  jobguard.finish_attempt(): a provider reports a result.  Replays
 *	  answer as before, a result breaking the operation's contract is
 *	  rejected, and otherwise the compare-and-swap (store_claim_and_swap)
 *	  decides whether this attempt takes the job's one result slot.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/hsearch.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"

#include "args.h"
#include "contract.h"
#include "claim_floor.h"
#include "errcodes.h"
#include "job_notify.h"
#include "transitions.h"
#include "metrics.h"
#include "store.h"
#include "subxact.h"

PG_FUNCTION_INFO_V1(jobguard_finish_attempt);
PG_FUNCTION_INFO_V1(jobguard_finish_many);

/* jsonb_equal: jsonb equality (key order and number spelling ignored). */
static bool
jsonb_equal(Datum a, Datum b)
{
	return DatumGetBool(DirectFunctionCall2(jsonb_eq, a, b));
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
	int			job_before = GAUGE_NONE;

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
		job_before = stats_gauges_kept()
			? store_stored_job_gauge(attempt->job_id) : GAUGE_NONE;
		if (!store_close_attempt(attempt->id, attempt->stored_state, ATTEMPT_FAILED,
								 psprintf("result breaks the output contract of operation \"%s\": %s",
										  job->operation, violation),
								 0, (Datum) 0))
			return NULL;
		stats_count(STAT_CONTRACT_REJECTIONS);
		if (attempt->state == ATTEMPT_UNKNOWN)
			stats_count(STAT_RECONCILED);	/* an unknown attempt ended */
		stats_gauge_move(GAUGE_ATTEMPT(attempt->stored_state), GAUGE_ATTEMPT(ATTEMPT_FAILED), 1);
		if (job_before != GAUGE_NONE)
			stats_gauge_move(job_before, store_stored_job_gauge(attempt->job_id), 1);
		notify_if_job_failed(attempt->job_id);
		claim_work_ready(attempt->job_id);	/* the gate opened */
		return "rejected";
	}

	/*
	 * An open attempt is its job's last, so a win moves the job from
	 * running or unknown; a late result of a closed attempt needs a look.
	 */
	if (attempt->stored_state == ATTEMPT_STARTED)
		job_before = GAUGE_JOBS_RUNNING;
	else if (attempt->stored_state == ATTEMPT_UNKNOWN)
		job_before = GAUGE_JOBS_UNKNOWN;
	else if (stats_gauges_kept())
		job_before = store_stored_job_gauge(attempt->job_id);
	switch (store_claim_and_swap(attempt, result))
	{
		case CLAIM_CHANGED:
			return NULL;
		case CLAIM_WON:
			stats_count(STAT_CAS_WINS);
			if (attempt->state == ATTEMPT_UNKNOWN)
				stats_count(STAT_RECONCILED);	/* an unknown attempt ended */
			stats_gauge_move(GAUGE_ATTEMPT(attempt->stored_state), GAUGE_ATTEMPT(ATTEMPT_SUCCEEDED), 1);
			if (job_before != GAUGE_NONE)
				stats_gauge_move(job_before, GAUGE_JOBS_SUCCEEDED, 1);
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
	if (attempt->state == ATTEMPT_UNKNOWN)
		stats_count(STAT_RECONCILED);	/* an unknown attempt ended */
	/* the job stays as it was: succeeded by another attempt, or cancelled */
	stats_gauge_move(GAUGE_ATTEMPT(attempt->stored_state), GAUGE_ATTEMPT(ATTEMPT_LOST), 1);
	return "lost";
}

/*
 * finish_one: finish an attempt as finish_attempt does, reading it again
 * while it changes concurrently; the outcome ('won', 'lost', 'rejected').
 */
static const char *
finish_one(int64 attempt_id, Datum result, Oid userid, const char *scope)
{
	SavedIdentity caller;		/* restored by store_finish() */
	const char *outcome = NULL;

	require_payload_size(result, "result");
	store_connect(&caller);
	for (int tries = 1; outcome == NULL; tries++)
	{
		AttemptRow	attempt;
		FinishJob	job;

		if (tries > MAX_TRIES)
			report_retries_exhausted("finish attempt", attempt_id);
		if (!store_read_for_finish(attempt_id, scope, &attempt, &job))
			report_attempt_not_found(attempt_id, userid, SCOPE_ACT);
		outcome = finish_once(&attempt, &job, result);
	}
	store_finish(&caller);
	return outcome;
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
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	Datum		result = jsonb_arg(fcinfo, 1, "result");
	Oid			userid = GetUserId();

	PG_RETURN_DATUM(text_result(finish_one(attempt_id, result, userid,
										   scopes_acting_scope(userid))));
}

/*
 * The most elements finish_many takes in one call: each is a
 * subtransaction, and the results are held until the call ends.
 */
#define FINISH_MANY_MAX 10000

/* what finish_many keeps of an element, to answer a repeat of its attempt */
typedef struct FinishedElement
{
	int64		attempt_id;		/* hash key */
	Datum		result;			/* the result the first element carried */
	const char *outcome;		/* its outcome, or NULL for a refusal */
	char	   *sqlstate;		/* the refusal's SQLSTATE */
	char	   *message;		/* and message */
} FinishedElement;

/*
 * refusal_carried: whether finish_many reports an error of finish_attempt
 * as a row (the SQLSTATEs doc/reference.md lists) rather than failing the
 * whole call.
 */
static bool
refusal_carried(const ErrorData *edata)
{
	int			code = edata->sqlerrcode;

	return code == ERRCODE_JG_INVALID_TRANSITION ||
		code == ERRCODE_JG_RESULT_MISMATCH ||
		code == ERRCODE_JG_ATTEMPT_NOT_FOUND ||
		code == ERRCODE_NULL_VALUE_NOT_ALLOWED ||
		code == ERRCODE_PROGRAM_LIMIT_EXCEEDED;
}

/* one element of finish_many, for subxact_run() */
typedef struct FinishElementRun
{
	int64		attempt_id;
	Datum		result;
	Oid			userid;
	const char *scope;
	const char *outcome;
} FinishElementRun;

/* finish_element_body: finish_one() of the element, for subxact_run(). */
static void
finish_element_body(void *arg)
{
	FinishElementRun *run = (FinishElementRun *) arg;

	run->outcome = finish_one(run->attempt_id, run->result, run->userid, run->scope);
}

/*
 * finish_element: one element of finish_many, as finish_attempt would have
 * decided it alone, in a subtransaction: a refusal rolls back whatever the
 * element wrote and comes back in *sqlstate and *message (outcome NULL);
 * any other error ends the whole call, as it would end finish_attempt.
 */
static const char *
finish_element(int64 attempt_id, Datum result, Oid userid, const char *scope,
			   char **sqlstate, char **message)
{
	FinishElementRun run = {attempt_id, result, userid, scope, NULL};
	ErrorData  *edata = subxact_run(finish_element_body, &run, refusal_carried);

	if (edata == NULL)
		return run.outcome;
	*sqlstate = pstrdup(unpack_sql_state(edata->sqlerrcode));
	*message = pstrdup(edata->message);
	FreeErrorData(edata);
	return NULL;
}

/*
 * jobguard.finish_many(attempt_ids bigint[], results jsonb[])
 *   -> (ord, attempt_id, outcome, sqlstate, message) rows
 *
 * Many results in one call, one row per element in input order: each
 * element is decided exactly as finish_attempt would decide it alone
 * (compare-and-swap, contracts, the loser's result kept, the race logged),
 * and a refusal is a row, not an error, that undoes only its own element.
 * An attempt named twice: the first element decides; a later one with an
 * equal result repeats its answer, with another result it is JG007.
 */
Datum
jobguard_finish_many(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *ids_array;
	ArrayType  *results_array;
	Datum	   *ids;
	Datum	   *results;
	bool	   *ids_null;
	bool	   *results_null;
	int			n,
				nresults;
	Oid			userid = GetUserId();
	const char *scope = scopes_acting_scope(userid);
	HTAB	   *seen;
	HASHCTL		ctl;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" of jobguard.finish_many() must not be null",
						PG_ARGISNULL(0) ? "attempt_ids" : "results")));
	ids_array = PG_GETARG_ARRAYTYPE_P(0);
	results_array = PG_GETARG_ARRAYTYPE_P(1);
	if (ARR_NDIM(ids_array) > 1 || ARR_NDIM(results_array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("the arrays of jobguard.finish_many() must have one dimension")));
	deconstruct_array(ids_array, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
					  &ids, &ids_null, &n);
	deconstruct_array(results_array, JSONBOID, -1, false, TYPALIGN_INT,
					  &results, &results_null, &nresults);
	if (n != nresults)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the arrays of jobguard.finish_many() must have the same length"),
				 errdetail("attempt_ids has %d elements, results %d.", n, nresults)));
	if (n > FINISH_MANY_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("jobguard.finish_many() takes at most %d elements in one call", FINISH_MANY_MAX),
				 errdetail("This call has %d.", n)));

	InitMaterializedSRF(fcinfo, 0);
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(FinishedElement);
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("jobguard finish_many", Max(n, 1), &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	for (int i = 0; i < n; i++)
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};
		const char *outcome = NULL;
		char	   *sqlstate = NULL;
		char	   *message = NULL;

		CHECK_FOR_INTERRUPTS();
		values[0] = Int32GetDatum(i + 1);
		values[1] = ids[i];
		nulls[1] = ids_null[i];
		if (ids_null[i] || results_null[i])
		{
			sqlstate = "22004";
			message = psprintf("element %d of jobguard.finish_many()'s %s must not be null",
							   i + 1, ids_null[i] ? "attempt_ids" : "results");
		}
		else
		{
			int64		attempt_id = DatumGetInt64(ids[i]);
			Datum		result = PointerGetDatum(PG_DETOAST_DATUM(results[i]));
			bool		found;
			FinishedElement *earlier = hash_search(seen, &attempt_id, HASH_ENTER, &found);

			if (!found)
			{
				outcome = finish_element(attempt_id, result, userid, scope, &sqlstate, &message);
				earlier->result = result;
				earlier->outcome = outcome;
				earlier->sqlstate = sqlstate;
				earlier->message = message;
			}
			else if (jsonb_equal(earlier->result, result))
			{
				outcome = earlier->outcome;
				sqlstate = earlier->sqlstate;
				message = earlier->message;
			}
			else
			{
				sqlstate = "JG007";
				message = psprintf("attempt %lld is named earlier in this call with a different result",
								   (long long) attempt_id);
			}
		}
		if (outcome != NULL)
			values[2] = text_result(outcome);
		else
			nulls[2] = true;
		if (sqlstate != NULL)
		{
			values[3] = text_result(sqlstate);
			values[4] = text_result(message);
		}
		else
			nulls[3] = nulls[4] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	hash_destroy(seen);
	return (Datum) 0;
}
