/*-------------------------------------------------------------------------
 *
 * reading.c
 *	  The entry points that read a job without changing it: job_state,
 *	  job and attempts_of, and check_invariants.  Each answers only about
 *	  the scopes the caller may read (scopes.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"

#include "args.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_job_state);
PG_FUNCTION_INFO_V1(jobguard_job);
PG_FUNCTION_INFO_V1(jobguard_attempts_of);
PG_FUNCTION_INFO_V1(jobguard_check_invariants);

/* jobguard.job_state(job_id) -> the derived state of the job. */
Datum
jobguard_job_state(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");
	Oid			userid = GetUserId();
	char	   *state;
	char	   *scope;

	store_connect(&caller);
	if (!store_job_state(job_id, &state, &scope) ||
		!scopes_allow(userid, SCOPE_READ, scope))
		report_job_not_found(job_id, userid, SCOPE_READ);
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
	Oid			userid = GetUserId();
	Datum		row;

	store_connect(&caller);
	if (!store_job_overview(job_id, userid, desc, caller_cxt, &row))
		report_job_not_found(job_id, userid, SCOPE_READ);
	store_finish(&caller);
	PG_RETURN_DATUM(row);
}

/* jobguard.attempts_of(job_id) -> the job's attempts, in order. */
Datum
jobguard_attempts_of(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		job_id = int64_arg(fcinfo, 0, "job_id");
	Oid			userid = GetUserId();

	InitMaterializedSRF(fcinfo, 0);
	store_connect(&caller);
	if (!store_attempts_of(job_id, userid, (ReturnSetInfo *) fcinfo->resultinfo))
		report_job_not_found(job_id, userid, SCOPE_READ);
	store_finish(&caller);
	return (Datum) 0;
}

/*
 * jobguard.check_invariants() -> one row per violated invariant in the
 * scopes the caller may read.  The check itself (invariant_violations(),
 * whose body is bound to the tables at creation) runs as the tables'
 * owner, so that readers can check without reading the tables.
 */
Datum
jobguard_check_invariants(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Oid			userid = GetUserId();

	InitMaterializedSRF(fcinfo, 0);
	store_connect(&caller);
	store_invariant_violations(userid, (ReturnSetInfo *) fcinfo->resultinfo);
	store_finish(&caller);
	return (Datum) 0;
}
