/*-------------------------------------------------------------------------
 *
 * liveness.c
 *	  Liveness without duplicates (jobguard 1.2): provider policies,
 *	  provider keys, redrive and reconciliation (doc/reference.md,
 *	  "Provider policies", "Provider keys", "Redrive", "Reconciliation").
 *
 * The entry points here check their arguments and the caller's rights,
 * then work through the store_* functions of store.h like every other
 * entry point; their statements are in store_sql.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"

#include "args.h"
#include "errcodes.h"
#include "limits.h"
#include "liveness.h"
#include "metrics.h"
#include "schema_level.h"
#include "security.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_set_provider_policy);
PG_FUNCTION_INFO_V1(jobguard_provider_key);
PG_FUNCTION_INFO_V1(jobguard_redrive_attempt);

/*
 * operators_only: the rule of the operators' functions of 1.2: only the
 * extension's owner (and the roles with its privileges), superusers and
 * the roles jobguard.grant_operator() made operators (and their members)
 * may call them; anyone else gets 42501.
 */
void
operators_only(FunctionCallInfo fcinfo)
{
	Oid			caller = GetUserId();

	if (superuser_arg(caller) || has_privs_of_role(caller, tables_owner_role()))
		return;
	if (scopes_acting_scope(caller) == NULL)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for function jobguard.%s()",
					get_func_name(fcinfo->flinfo->fn_oid)),
			 errdetail("Only operators call it: the owner of jobguard's tables, superusers and the roles of jobguard.grant_operator()."),
			 errhint("An operator role is made with jobguard.grant_operator().")));
}

/*
 * jobguard.set_provider_policy(provider, dedupes_for, max_in_flight,
 *								max_per_second, paused) -> void
 *
 * Sets or replaces what an operator knows of a provider; NULL is "no such
 * promise / no limit", and a policy with all three NULL is no policy (its
 * row goes, unless the provider is paused).  paused (1.3; a 1.2 database
 * declares four arguments): NULL keeps the pause as it is; given with the
 * three values NULL, only the pause changes.  Each given value must be
 * greater than zero (and a number), dedupes_for at most 100 years,
 * max_per_second 0.0001 to 1000000: 22023, nothing written.
 */
Datum
jobguard_set_provider_policy(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		provider = text_arg(fcinfo, 0, "provider", MAX_NAME_CHARS);
	bool		dedupes_null = PG_ARGISNULL(1);
	bool		in_flight_null = PG_ARGISNULL(2);
	bool		per_second_null = PG_ARGISNULL(3);
	Datum		dedupes_for = dedupes_null ? (Datum) 0 : PG_GETARG_DATUM(1);
	Datum		max_in_flight = in_flight_null ? (Datum) 0 : PG_GETARG_DATUM(2);
	Datum		max_per_second = per_second_null ? (Datum) 0 : PG_GETARG_DATUM(3);
	bool		paused_null = PG_NARGS() < 5 || PG_ARGISNULL(4);
	Datum		paused = paused_null ? (Datum) 0 : PG_GETARG_DATUM(4);

	operators_only(fcinfo);
	if (!dedupes_null)
	{
		Interval	zero_interval = {0};

		if (!DatumGetBool(DirectFunctionCall2(interval_gt, dedupes_for,
											  IntervalPGetDatum(&zero_interval))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"dedupes_for\" must be greater than zero or null"),
					 errdetail("It is %s.",
							   DatumGetCString(DirectFunctionCall1(interval_out, dedupes_for)))));
		require_duration(dedupes_for, "dedupes_for");
	}
	if (!in_flight_null && DatumGetInt32(max_in_flight) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"max_in_flight\" must be greater than zero or null"),
				 errdetail("It is %d.", DatumGetInt32(max_in_flight))));
	if (!per_second_null)
	{
		Numeric		n = DatumGetNumeric(max_per_second);
		Datum		zero = DirectFunctionCall1(int4_numeric, Int32GetDatum(0));

		if (numeric_is_nan(n) || numeric_is_inf(n) ||
			!DatumGetBool(DirectFunctionCall2(numeric_gt, max_per_second, zero)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"max_per_second\" must be a finite number greater than zero or null"),
					 errdetail("It is %s.",
							   DatumGetCString(DirectFunctionCall1(numeric_out, max_per_second)))));
		require_rate(max_per_second, "max_per_second");
	}

	store_connect(&caller);
	store_set_provider_policy(provider, dedupes_for, dedupes_null,
							  max_in_flight, in_flight_null,
							  max_per_second, per_second_null,
							  paused, paused_null);
	store_finish(&caller);
	PG_RETURN_VOID();
}

/*
 * jobguard.provider_key(attempt_id) -> text
 *
 * The idempotency key the worker sends the provider for an attempt, for a
 * caller that may read the attempt's job; any other id is JG009, as for
 * every reader (with the DETAIL when it names a job instead).
 */
Datum
jobguard_provider_key(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	Oid			userid = GetUserId();
	char	   *key;
	char	   *scope;

	store_connect(&caller);
	if (!store_provider_key(attempt_id, &key, &scope) ||
		!scopes_allow(userid, SCOPE_READ, scope))
		report_attempt_not_found(attempt_id, userid, SCOPE_READ);
	store_finish(&caller);
	PG_RETURN_DATUM(text_result(key));
}

/*
 * refuse_redrive: JG006 for an attempt that is not redrivable, with the
 * DETAIL saying why, unless the redrive comes from claim(), which passes
 * over such an attempt instead (returns false then).
 */
static bool
refuse_redrive(bool from_claim, int64 attempt_id, const char *detail)
{
	if (from_claim)
		return false;
	ereport(ERROR,
			(errcode(ERRCODE_JG_INVALID_TRANSITION),
			 errmsg("attempt %lld cannot be redriven", (long long) attempt_id),
			 errdetail_internal("%s", detail)));
	return false;
}

/*
 * redrive: redrive an unknown attempt (doc/reference.md, "Redrive"): in
 * the caller's transaction, the attempt becomes cancelled with reason
 * "redriven as attempt <n>" and attempt n begins against the same
 * provider, with the same provider key and the same tries.  Never waits:
 * from redrive_attempt() (from_claim false) another transaction holding
 * the job or the attempt is 55P03 (lock_not_available), and an attempt
 * that is not redrivable is JG006 (JG003 for a job that has ended, JG009
 * for an id the caller may not act on); from claim() each of these
 * returns 0 and the claim passes over it.  worker, timeout: claim's (NULL:
 * none, and the redriven attempt's own timeout).  Returns the new
 * attempt's id.
 */
int64
redrive(int64 attempt_id, const char *scope, Oid userid, bool from_claim,
		Datum worker, bool worker_null, Datum timeout, bool timeout_null,
		TimestampTz started_at)
{
	RedriveRow	row;
	char		reason[64];
	int			job_before;
	int64		new_id;

	if (!store_redrive_read(attempt_id, scope, from_claim, &row))
	{
		if (from_claim)
			return 0;
		report_attempt_not_found(attempt_id, userid, SCOPE_ACT);
	}
	if (row.job_closed)
	{
		if (from_claim)
			return 0;
		ereport(ERROR,
				(errcode(ERRCODE_JG_JOB_CLOSED),
				 errmsg("job %lld is closed: attempt %lld cannot be redriven",
						(long long) row.job_id, (long long) attempt_id),
				 errdetail("The job has succeeded or was cancelled.")));
	}
	if (row.state != ATTEMPT_UNKNOWN)
		return refuse_redrive(from_claim, attempt_id,
							  psprintf("Attempt %lld is %s, not unknown.", (long long) attempt_id,
									   attempt_state_name(row.state)));
	if (!row.dedupes)
		return refuse_redrive(from_claim, attempt_id,
							  psprintf("Provider \"%s\" does not deduplicate: it has no dedupes_for (jobguard.set_provider_policy).",
									   row.provider));
	if (!row.in_window)
		return refuse_redrive(from_claim, attempt_id,
							  psprintf("The window of provider \"%s\" for the attempt's key ended at %s.",
									   row.provider, timestamptz_to_str(row.window_end)));

	/*
	 * The provider's limits (doc/workers.md, "Flow control"): a redrive is
	 * a start (it draws on max_per_second) and takes the stalled attempt's
	 * slot of max_in_flight.  From claim, a provider at a limit passes the
	 * redrive over; from redrive_attempt, the start is refused after it
	 * (JG010), which undoes the cancel too.
	 */
	if (from_claim && !limits_admit_claim(row.provider, 1))
		return 0;
	job_before = stats_gauges_kept() ? store_stored_job_gauge(row.job_id) : GAUGE_NONE;
	snprintf(reason, sizeof(reason), "redriven as attempt %d", row.attempt_no + 1);
	store_cancel_attempt(attempt_id, CStringGetTextDatum(reason));
	new_id = store_redrive_begin(attempt_id, worker, worker_null, timeout, timeout_null,
								 started_at);
	if (from_claim)
		limits_start_done();	/* the next start counts this one */
	else
		limits_admit_begun(new_id);	/* JG010 beyond a provider limit */
	stats_gauge_move(GAUGE_ATTEMPT(row.stored_state), GAUGE_ATTEMPT(ATTEMPT_CANCELLED), 1);
	stats_gauge_move(GAUGE_NONE, GAUGE_ATTEMPT(ATTEMPT_STARTED), 1);
	if (job_before != GAUGE_NONE)
		stats_gauge_move(job_before, store_stored_job_gauge(row.job_id), 1);
	stats_count(STAT_REDRIVES);
	return new_id;
}

/*
 * jobguard.redrive_attempt(attempt_id) -> bigint
 *
 * An operator's or worker's redrive of one unknown attempt; see redrive().
 * Returns the new attempt's id.
 */
Datum
jobguard_redrive_attempt(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	Oid			userid = GetUserId();
	const char *scope = scopes_acting_scope(userid);
	int64		new_id;

	store_connect(&caller);
	new_id = redrive(attempt_id, scope, userid, false, (Datum) 0, true, (Datum) 0, true, 0);
	store_finish(&caller);
	PG_RETURN_INT64(new_id);
}
