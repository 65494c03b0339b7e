/*-------------------------------------------------------------------------
 *
 * schedule.c
 *	  The calls that move a job in claim()'s order or back into it:
 *	  jobguard.reschedule() (a pending job's run time and priority) and
 *	  jobguard.retry_job() (an operator gives a failed job more attempts:
 *	  the dead-letter queue's redrive).  submit's run_at and priority are
 *	  in submit.c; the order itself is STMT_CLAIM_CANDIDATES.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"

#include "args.h"
#include "claim_floor.h"
#include "errcodes.h"
#include "metrics.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_reschedule);
PG_FUNCTION_INFO_V1(jobguard_retry_job);

/* The most attempts one retry_job() may add. */
#define MAX_EXTRA_ATTEMPTS 1000000

/*
 * locked_job_state: lock job_id in the caller's scope (another scope's job
 * is answered as one that does not exist, JG008) and read its derived
 * state under the lock, with a fresh snapshot: no attempt can begin
 * while the lock is held, so a pending job stays pending.
 */
static char *
locked_job_state(int64 job_id, Oid userid, JobRow *job)
{
	char	   *state;

	if (!store_lock_job(job_id, scopes_acting_scope(userid), job))
		report_job_not_found(job_id, userid, SCOPE_ACT);
	if (!store_fresh_job_state(job_id, &state, NULL))
		report_job_not_found(job_id, userid, SCOPE_ACT);
	return state;
}

/*
 * jobguard.reschedule(job_id, run_at, priority) -> void
 *
 * A pending job gets a new run time (claim() leaves it until then; a
 * backoff's not_before is replaced) and/or a new priority; NULL leaves that
 * part as it is.  A job in any other state: JG006, the DETAIL naming it.
 */
Datum
jobguard_reschedule(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");
	bool		run_at_null = PG_ARGISNULL(1);
	Datum		run_at = run_at_null ? (Datum) 0 : PG_GETARG_DATUM(1);
	bool		priority_null = PG_ARGISNULL(2);
	int32		priority = priority_null ? 0 : PG_GETARG_INT32(2);
	Oid			userid = GetUserId();
	JobRow		job;
	char	   *state;

	if (!priority_null && (priority < PG_INT16_MIN || priority > PG_INT16_MAX))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"priority\" must be %d to %d", PG_INT16_MIN, PG_INT16_MAX),
				 errdetail("It is %d.", priority)));
	store_connect(&caller);
	state = locked_job_state(job_id, userid, &job);
	if (strcmp(state, "pending") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_JG_INVALID_TRANSITION),
				 errmsg("job %lld cannot be rescheduled", (long long) job_id),
				 errdetail("The job is %s; only a pending job can be rescheduled.", state)));
	if (!run_at_null || !priority_null)
	{
		store_reschedule(job_id, run_at, run_at_null, (int16) priority, priority_null);
		/* it may be due sooner now: the floors go down to its new run time */
		claim_work_ready_at(job_id, run_at_null ? DT_NOEND : DatumGetTimestampTz(run_at),
							priority_null ? CLAIM_PRIORITY_UNKNOWN : priority);
	}
	store_finish(&caller);
	PG_RETURN_VOID();
}

/*
 * jobguard.retry_job(job_id, extra_attempts, reason) -> void
 *
 * Operators only.  A failed job (its max_attempts used up, no attempt
 * open) gets extra_attempts more and becomes pending under the same id and
 * key, runnable at once; the retry, its reason and the role that asked go
 * to the job's retries column.  Any other state: JG006.
 */
Datum
jobguard_retry_job(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");
	int32		extra;
	bool		reason_null;
	Datum		reason = optional_text_arg(fcinfo, 2, "reason", UNLIMITED_CHARS, &reason_null);
	Oid			userid = GetUserId();
	Datum		retried_by = CStringGetTextDatum(GetUserNameFromId(userid, false));
	JobRow		job;
	char	   *state;
	int			before = GAUGE_NONE;

	require_arg(fcinfo, 1, "extra_attempts");
	extra = PG_GETARG_INT32(1);
	if (extra < 1 || extra > MAX_EXTRA_ATTEMPTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"extra_attempts\" must be 1 to %d", MAX_EXTRA_ATTEMPTS),
				 errdetail("It is %d.", extra)));
	if (scopes_acting_scope(userid) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for jobguard.retry_job()"),
				 errdetail("Only operators may give a failed job more attempts."),
				 errhint("An operator is granted with jobguard.grant_operator().")));
	store_connect(&caller);
	state = locked_job_state(job_id, userid, &job);
	if (strcmp(state, "failed") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_JG_INVALID_TRANSITION),
				 errmsg("job %lld cannot be retried", (long long) job_id),
				 errdetail("The job is %s; only a failed job (its max_attempts used up) can be retried.",
						   state)));
	if ((int64) job.max_attempts + extra > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"extra_attempts\" is too large for job %lld", (long long) job_id),
				 errdetail("max_attempts would be %lld.", (long long) job.max_attempts + extra)));
	if (stats_gauges_kept())
		before = store_stored_job_gauge(job_id);
	store_retry_job(job_id, extra, reason, reason_null, retried_by);
	if (before != GAUGE_NONE)
		stats_gauge_move(before, store_stored_job_gauge(job_id), 1);
	claim_work_ready(job_id);
	store_finish(&caller);
	PG_RETURN_VOID();
}
