/*-------------------------------------------------------------------------
 *
 * attempts.c
 *	  The entry points that open and close attempts outside a finish:
 *	  begin_attempt (the gate: one open attempt per job, attempts left, a
 *	  certified fallback), fail_attempt, mark_unknown, cancel_attempt and
 *	  cancel_job.  finish_attempt, the compare-and-swap, is in finish.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgrprotos.h"

#include "args.h"
#include "limits.h"
#include "errcodes.h"
#include "claim_floor.h"
#include "job_notify.h"
#include "transitions.h"
#include "metrics.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_begin_attempt);
PG_FUNCTION_INFO_V1(jobguard_fail_attempt);
PG_FUNCTION_INFO_V1(jobguard_mark_unknown);
PG_FUNCTION_INFO_V1(jobguard_cancel_attempt);
PG_FUNCTION_INFO_V1(jobguard_cancel_job);

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
 * looks_like_interval: whether a provider name reads as an interval ('10
 * seconds', '1 min', 'PT30S'), i.e. a timeout passed as the second
 * argument by mistake.  Uses the interval parser's own decoding, which
 * reports failure instead of raising an error.
 */
static bool
looks_like_interval(const char *s)
{
	char		workbuf[256];
	char	   *field[MAXDATEFIELDS];
	int			ftype[MAXDATEFIELDS];
	int			nf;
	int			dtype;
	struct pg_itm_in itm;

	if (strlen(s) >= sizeof(workbuf) / 2)
		return false;
	/* a bare number is more likely a provider called "2" than a timeout */
	if (strspn(s, "0123456789") == strlen(s))
		return false;
	if (ParseDateTime(s, workbuf, sizeof(workbuf), field, ftype, MAXDATEFIELDS, &nf) == 0 &&
		DecodeInterval(field, ftype, nf, INTERVAL_FULL_RANGE, &dtype, &itm) == 0)
		return true;
	return DecodeISO8601Interval(unconstify(char *, s), &dtype, &itm) == 0;
}

/*
 * refused_begin: why the gate refused a begin, as the caller-facing error,
 * in the order of doc/reference.md ("Attempts"): no job (JG008), closed
 * job (JG003), open attempt (JG002), attempts used up (JG005), fallback
 * not certified, or certified under a contract since changed (JG004; a
 * pause, JG010, is limits_admit_begun()'s).  A worker retrying its own begin is not refused: its attempt id
 * is returned.  Returns 0 when nothing refuses any more (the begin lost a
 * race that has since resolved): the caller tries again.
 */
static int64
refused_begin(int64 job_id, const char *scope, Oid userid, const char *provider,
			  const char *attempt_key)
{
	JobRow		job;
	AttemptRow	last;
	bool		has_last;

	if (!store_lock_job(job_id, scope, &job))
		report_job_not_found(job_id, userid, SCOPE_ACT);
	has_last = store_last_attempt(job_id, &last);
	if (has_last && is_own_begin_replay(&last, attempt_key, provider))
		return last.id;
	require_gate_open(&job, has_last ? &last : NULL);
	require_attempts_left(&job, has_last ? &last : NULL);
	if (provider != NULL && strcmp(provider, job.provider) != 0 &&
		!store_provider_certified(job.operation, provider))
	{
		int64		certified_under;
		int64		current;
		bool		certified_null;
		bool		current_null;

		/* certified, but under a contract that has changed since (1.3) */
		if (store_certification_versions(job.operation, provider,
										 &certified_under, &certified_null,
										 &current, &current_null))
			ereport(ERROR,
					(errcode(ERRCODE_JG_PROVIDER_NOT_CERTIFIED),
					 errmsg("provider \"%s\" is not certified for operation \"%s\"",
							provider, job.operation),
					 errdetail("Its certification is stale: it was earned under %s, and the operation's contract is now %s.",
							   certified_null ? "no contract" :
							   psprintf("contract version " INT64_FORMAT, certified_under),
							   current_null ? "gone" :
							   psprintf("version " INT64_FORMAT, current)),
					 errhint("Certify it again once it passes the operation's current contract (jobguard.certify_provider()).")));
		ereport(ERROR,
				(errcode(ERRCODE_JG_PROVIDER_NOT_CERTIFIED),
				 errmsg("provider \"%s\" is not certified for operation \"%s\"",
						provider, job.operation),
				 errdetail("Job %lld targets provider \"%s\"; a fallback provider must be certified for the job's operation.",
						   (long long) job_id, job.provider),
				 looks_like_interval(provider) ?
				 errhint("\"%s\" reads as a time span: the timeout is begin_attempt's third argument (timeout => '%s').",
						 provider, provider) :
				 errhint("Certify it with jobguard.certify_provider() once it passes the operation's contract tests.")));
	}
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
	Oid			userid = GetUserId();
	const char *scope = scopes_acting_scope(userid);

	require_arg(fcinfo, 2, "timeout");
	timeout = PG_GETARG_DATUM(2);
	if (!DatumGetBool(DirectFunctionCall2(interval_gt, timeout,
										  IntervalPGetDatum(&zero_interval))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"timeout\" must be greater than zero"),
				 errdetail("It is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out, timeout)))));
	require_duration(timeout, "timeout");

	store_connect(&caller);
	for (int tries = 1; attempt_id == 0; tries++)
	{
		BeginRequest req = {
			.job_id = job_id, .scope = scope,
			.provider = provider_arg, .provider_null = provider_null,
			.timeout = timeout,
			.attempt_key = attempt_key, .attempt_key_null = attempt_key_null,
			.worker = (Datum) 0, .worker_null = true,
			.started_at = 0,
		};

		if (tries > MAX_TRIES)
			report_retries_exhausted("begin an attempt of job", job_id);
		attempt_id = store_begin_attempt(&req);
		if (attempt_id != 0)
		{
			limits_admit_begun(attempt_id);	/* JG010 beyond a provider limit */
			stats_attempts_begun(1);	/* the gate let it in: the job was pending */
		}
		else
			attempt_id = refused_begin(job_id, scope, userid,
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
lock_attempt(int64 attempt_id, Oid userid, AttemptRow *attempt)
{
	if (!store_lock_attempt(attempt_id, scopes_acting_scope(userid), attempt))
		report_attempt_not_found(attempt_id, userid, SCOPE_ACT);
}

/*
 * The most doublings of an operation's retry_backoff: 2^31 times the
 * backoff is decades for a backoff of a second, and keeps the product of
 * an uncapped policy far from overflowing.
 */
#define MAX_BACKOFF_DOUBLINGS 31

/*
 * backoff_delay: how long after a failure of attempt number attempt_no
 * claim() waits before it begins the next: retry_backoff × 2^(n−1),
 * capped at retry_backoff_max.  Returns NULL when the job's operation has
 * no retry policy (the next attempt may begin at once).
 */
static Interval *
backoff_delay(int64 job_id, int32 attempt_no)
{
	Interval	backoff;
	Interval	max;
	bool		max_null;
	int			doublings = Min(Max(attempt_no - 1, 0), MAX_BACKOFF_DOUBLINGS);
	Interval   *delay;

	if (!store_retry_policy(job_id, &backoff, &max, &max_null))
		return NULL;
	/*
	 * Capped before it is multiplied: the cap is retry_backoff_max, and
	 * never more than the longest duration (a value stored before that was
	 * checked); the product, compared in seconds as a double, is made only
	 * when it is below the cap, so no multiplication overflows.
	 */
	if (max_null)
	{
		memset(&max, 0, sizeof(max));
		max.month = MAX_DURATION_YEARS * MONTHS_PER_YEAR;
	}
	else
		max = duration_capped(&max);
	delay = palloc(sizeof(Interval));
	if (interval_seconds(&backoff) * ldexp(1.0, doublings) >= interval_seconds(&max))
		*delay = max;
	else
	{
		*delay = *DatumGetIntervalP(DirectFunctionCall2(interval_mul, IntervalPGetDatum(&backoff),
														Float8GetDatum(ldexp(1.0, doublings))));
		if (DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(delay),
											 IntervalPGetDatum(&max))))
			*delay = max;
	}
	return delay;
}

/*
 * job_gauge_before: the state gauge a job counts in before this call
 * changes it; GAUGE_NONE when counters are not kept (no read then).
 */
static int
job_gauge_before(int64 job_id)
{
	return stats_gauges_kept() ? store_stored_job_gauge(job_id) : GAUGE_NONE;
}

/*
 * count_job_moved: after this call changed a job (or its attempts), move
 * it from the gauge it counted in before to the one it counts in now.
 */
static void
count_job_moved(int64 job_id, int before)
{
	if (before != GAUGE_NONE)
		stats_gauge_move(before, store_stored_job_gauge(job_id), 1);
}

/*
 * jobguard.fail_attempt(attempt_id, error, retry_in) -> 'failed'
 *
 * The provider reported an error: the attempt is closed and the gate opens.
 * (A timeout is not an error: use mark_unknown.)  claim() begins the job's
 * next attempt no sooner than retry_in from now, or — retry_in NULL — than
 * the operation's retry backoff says (at once when it has none); an
 * explicit begin_attempt() is not held back.
 */
Datum
jobguard_fail_attempt(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	Datum		error = text_arg(fcinfo, 1, "error", UNLIMITED_CHARS);
	Interval   *retry_in = PG_NARGS() < 3 || PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2);
	Interval	zero_interval = {0};
	Oid			userid = GetUserId();
	AttemptRow	attempt;
	int			job_before;

	require_payload_size(error, "error");
	if (retry_in != NULL &&
		DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(retry_in),
										 IntervalPGetDatum(&zero_interval))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"retry_in\" must not be negative"),
				 errdetail("It is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(retry_in))))));
	if (retry_in != NULL)
		require_duration(IntervalPGetDatum(retry_in), "retry_in");

	store_connect(&caller);
	lock_attempt(attempt_id, userid, &attempt);
	require_transition(ACTION_FAIL, &attempt);
	job_before = job_gauge_before(attempt.job_id);
	store_close_attempt(attempt_id, attempt.stored_state, ATTEMPT_FAILED,
						TextDatumGetCString(error), 0, (Datum) 0);
	store_set_not_before(attempt.job_id,
						 retry_in != NULL ? retry_in : backoff_delay(attempt.job_id, attempt.attempt_no));
	stats_gauge_move(GAUGE_ATTEMPT(attempt.stored_state), GAUGE_ATTEMPT(ATTEMPT_FAILED), 1);
	if (attempt.state == ATTEMPT_UNKNOWN)
		stats_count(STAT_RECONCILED);	/* an unknown attempt ended */
	count_job_moved(attempt.job_id, job_before);
	notify_if_job_failed(attempt.job_id);
	claim_work_ready(attempt.job_id);	/* the gate opened: a claim may take it */
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
	Oid			userid = GetUserId();
	AttemptRow	attempt;

	store_connect(&caller);
	lock_attempt(attempt_id, userid, &attempt);
	require_transition(ACTION_MARK_UNKNOWN, &attempt);
	if (attempt.stored_state != ATTEMPT_UNKNOWN)
	{
		int			job_before = job_gauge_before(attempt.job_id);

		store_mark_unknown(attempt_id);
		stats_gauge_move(GAUGE_ATTEMPT(attempt.stored_state), GAUGE_ATTEMPT(ATTEMPT_UNKNOWN), 1);
		count_job_moved(attempt.job_id, job_before);
	}
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
	Oid			userid = GetUserId();
	AttemptRow	attempt;
	int			job_before;

	store_connect(&caller);
	lock_attempt(attempt_id, userid, &attempt);
	require_transition(ACTION_CANCEL, &attempt);
	job_before = job_gauge_before(attempt.job_id);
	store_cancel_attempt(attempt_id, reason);
	claim_work_ready(attempt.job_id);	/* the gate opened: a claim may take it */
	stats_gauge_move(GAUGE_ATTEMPT(attempt.stored_state), GAUGE_ATTEMPT(ATTEMPT_CANCELLED), 1);
	count_job_moved(attempt.job_id, job_before);
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
	Oid			userid = GetUserId();
	const char *scope = scopes_acting_scope(userid);
	JobRow		job;

	store_connect(&caller);
	if (!store_lock_job(job_id, scope, &job))
		report_job_not_found(job_id, userid, SCOPE_ACT);
	if (job.completed)
		ereport(ERROR,
				(errcode(ERRCODE_JG_JOB_CLOSED),
				 errmsg("job %lld has already succeeded and cannot be cancelled",
						(long long) job_id),
				 errdetail("Attempt %lld holds its result.", (long long) job.completed_by)));
	if (!job.cancelled)
	{
		int			job_before = job_gauge_before(job_id);

		store_cancel_job(job_id, reason);
		count_job_moved(job_id, job_before);
		notify_job(job_id, "cancelled");
	}
	store_finish(&caller);
	PG_RETURN_DATUM(text_result("cancelled"));
}
