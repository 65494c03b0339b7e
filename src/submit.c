/*-------------------------------------------------------------------------
 *
 * submit.c
 *	  jobguard.submit(): one user intent, one job.  The idempotent submit
 *	  inserts first and lets the unique constraint on (scope, owner_id,
 *	  idempotency_key) decide; a replay gets the same job back, a different
 *	  request under the same key is refused (JG001).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "miscadmin.h"

#include "args.h"
#include "errcodes.h"
#include "policies.h"
#include "stats.h"
#include "store.h"

/*
 * How often submit() retries when the job it conflicted with is gone before
 * it could be read (removed by a concurrent purge).
 */
#define SUBMIT_MAX_TRIES 3

PG_FUNCTION_INFO_V1(jobguard_submit);

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
	Datum		scope;
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

	require_payload_size(params, "params");
	if (!max_attempts_null && DatumGetInt32(max_attempts) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"max_attempts\" must be at least 1 or null"),
				 errdetail("It is %d.", DatumGetInt32(max_attempts))));

	/* the caller's application: keys are unique per scope */
	scope = CStringGetTextDatum(scopes_submit_scope(GetUserId()));
	store_connect(&caller);
	for (int tries = 1;; tries++)
	{
		SubmitMatch match;

		if (store_insert_job(scope, owner_id, idempotency_key, operation, params,
							 provider, max_attempts, max_attempts_null, &job_id))
		{
			created = true;
			stats_count(STAT_SUBMITS_CREATED);
			stats_gauge_move(GAUGE_NONE, GAUGE_JOBS_PENDING, 1);
			break;
		}
		if (store_match_job(scope, owner_id, idempotency_key, operation, params,
							provider, max_attempts, max_attempts_null, &match))
		{
			KeyPolicy	policy;
			bool		has_policy = policy_of(TextDatumGetCString(operation), &policy);

			/* with identity keys, other differences in params do not count */
			if (!match.same_params && has_policy && policy.has_identity &&
				match.same_operation)
				match.same_params = store_same_identity(match.job_id, params,
														policy.identity);
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

			/*
			 * after_failure 'new_job': the same request after the job failed
			 * or was cancelled starts a new job, linked to the old one.  The
			 * old job stops being live first (a conditional update that a
			 * concurrent winning finish makes do nothing); the unique index
			 * on live jobs then decides between racing resubmits.
			 */
			if (has_policy && policy.new_job_after_failure)
			{
				SubmitMatch now;

				if (store_replace_ended_job(match.job_id))
				{
					if (store_insert_next_job(scope, owner_id, idempotency_key, operation,
											  params, provider, max_attempts,
											  max_attempts_null, match.job_id, &job_id))
					{
						created = true;
						stats_count(STAT_SUBMITS_CREATED);
						break;
					}
					elog(ERROR, "jobguard: job after replaced job %lld conflicted in its own transaction",
						 (long long) match.job_id);
				}

				/*
				 * Not replaced: the job is not failed or cancelled, or a
				 * racing resubmit replaced it first — then its new job is
				 * the live one, and this call starts over to meet it.
				 */
				if (store_match_job(scope, owner_id, idempotency_key, operation, params,
									provider, max_attempts, max_attempts_null, &now) &&
					now.job_id != match.job_id)
				{
					if (tries >= SUBMIT_MAX_TRIES)
						report_retries_exhausted("submit a new job after job", match.job_id);
					continue;
				}
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
