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
#include "schema_level.h"
#include "security.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_set_provider_policy);

/*
 * require_operator: the rule of the operators' functions of 1.2: only the
 * extension's owner (and the roles with its privileges), superusers and
 * the roles jobguard.grant_operator() made operators (and their members)
 * may call them; anyone else gets 42501.
 */
static void
require_operator(FunctionCallInfo fcinfo)
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
 *								max_per_second) -> void
 *
 * Sets or replaces what an operator knows of a provider; NULL is "no such
 * promise / no limit", and a policy with all three NULL is no policy (its
 * row goes).  Each given value must be greater than zero (and a number):
 * 22023, nothing written.
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

	require_operator(fcinfo);
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
	}

	store_connect(&caller);
	store_set_provider_policy(provider, dedupes_for, dedupes_null,
							  max_in_flight, in_flight_null,
							  max_per_second, per_second_null);
	store_finish(&caller);
	PG_RETURN_VOID();
}
