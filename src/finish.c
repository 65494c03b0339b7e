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

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"

#include "args.h"
#include "contract.h"
#include "notify_worker.h"
#include "errcodes.h"
#include "job_notify.h"
#include "transitions.h"
#include "metrics.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_finish_attempt);

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
		stats_gauge_move(GAUGE_ATTEMPT(attempt->stored_state), GAUGE_ATTEMPT(ATTEMPT_FAILED), 1);
		if (job_before != GAUGE_NONE)
			stats_gauge_move(job_before, store_stored_job_gauge(attempt->job_id), 1);
		notify_if_job_failed(attempt->job_id);
		notifier_work_ready(attempt->job_id);	/* the gate opened */
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
	/* the job stays as it was: succeeded by another attempt, or cancelled */
	stats_gauge_move(GAUGE_ATTEMPT(attempt->stored_state), GAUGE_ATTEMPT(ATTEMPT_LOST), 1);
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
	Oid			userid = GetUserId();
	const char *scope = scopes_acting_scope(userid);

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
	PG_RETURN_DATUM(text_result(outcome));
}
