/*-------------------------------------------------------------------------
 *
 * failover.c
 *	  Failover routes (jobguard 1.3): set_failover, the ordered fallbacks
 *	  of an operation (doc/reference.md, "Failover routes").
 *
 * A route is a row of jobguard.failover; nothing per job is kept.  claim()
 * decides the provider of each job's next attempt in its own candidates
 * statement, from the route and the job's attempts (ROUTE_PROVIDER_SQL of
 * store_sql.c), and jobguard.job_overview.next_provider shows the same
 * choice.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/array.h"
#include "utils/builtins.h"

#include "args.h"
#include "liveness.h"
#include "schema_level.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_set_failover);

/*
 * jobguard.set_failover(operation, providers, after_failures) -> void
 *
 * Operators only (42501).  Sets or replaces the operation's route, or
 * removes it when providers is NULL or '{}'.  The providers: 1 to
 * MAX_PROVIDER_LIST names of 1 to 63 characters, none NULL (22004) and
 * none twice (22023); after_failures at least 1 (22023; NULL is 22004).
 * A refused call writes nothing.
 */
Datum
jobguard_set_failover(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		providers = (Datum) 0;
	bool		remove = PG_ARGISNULL(1);
	int32		after_failures;

	require_schema_1_3("set_failover");
	operators_only(fcinfo);
	if (!remove)
	{
		ArrayType  *array = PG_GETARG_ARRAYTYPE_P(1);

		providers = PointerGetDatum(array);
		/* '{}' (of any dimensions) removes the route, as NULL does */
		remove = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array)) == 0;
		if (!remove)
			(void) require_provider_list(providers, "providers");
	}
	require_arg(fcinfo, 2, "after_failures");
	after_failures = PG_GETARG_INT32(2);
	if (after_failures < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"after_failures\" must be at least 1"),
				 errdetail("It is %d.", after_failures)));

	store_connect(&caller);
	store_set_failover(operation, providers, remove, after_failures);
	store_finish(&caller);
	PG_RETURN_VOID();
}
