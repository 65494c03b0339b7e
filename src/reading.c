/*-------------------------------------------------------------------------
 *
 * reading.c
 *	  The entry points that read a job without changing it: job_state,
 *	  job and attempts_of.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"

#include "args.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_job_state);
PG_FUNCTION_INFO_V1(jobguard_job);
PG_FUNCTION_INFO_V1(jobguard_attempts_of);

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
