/*-------------------------------------------------------------------------
 *
 * providers.c
 *	  Operations and the providers certified for them: define_operation
 *	  (an operation's output contract), certify_provider, revoke_provider,
 *	  and check_result, the contract check of finish_attempt on its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"

#include "args.h"
#include "contract.h"
#include "errcodes.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_define_operation);
PG_FUNCTION_INFO_V1(jobguard_certify_provider);
PG_FUNCTION_INFO_V1(jobguard_revoke_provider);
PG_FUNCTION_INFO_V1(jobguard_check_result);

/*
 * require_retry_policy: raise 22023 unless the retry policy makes sense:
 * a backoff greater than zero, and a cap (only with a backoff) no smaller
 * than it, both at most 100 years.  Either may be NULL.
 */
static void
require_retry_policy(Datum backoff, bool backoff_null, Datum max, bool max_null)
{
	Interval	zero_interval = {0};

	if (!backoff_null &&
		!DatumGetBool(DirectFunctionCall2(interval_gt, backoff, IntervalPGetDatum(&zero_interval))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"retry_backoff\" must be greater than zero"),
				 errdetail("It is %s.", DatumGetCString(DirectFunctionCall1(interval_out, backoff)))));
	if (!backoff_null)
		require_duration(backoff, "retry_backoff");
	if (!max_null && backoff_null)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"retry_backoff_max\" needs a retry_backoff"),
				 errhint("Give retry_backoff, the wait after the first failure, as well.")));
	if (!max_null && DatumGetBool(DirectFunctionCall2(interval_lt, max, backoff)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"retry_backoff_max\" must not be less than retry_backoff"),
				 errdetail("retry_backoff is %s, retry_backoff_max %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out, backoff)),
						   DatumGetCString(DirectFunctionCall1(interval_out, max)))));
	if (!max_null)
		require_duration(max, "retry_backoff_max");
}

/*
 * jobguard.define_operation(operation, output_contract, retry_backoff,
 *							 retry_backoff_max) -> void
 *
 * The contract is compiled here only to validate it (22023 naming the
 * keyword and its path); finishes compile it again through the cache.
 * The retry policy (NULL: none) is what fail_attempt() applies when it is
 * given no retry_in: retry_backoff × 2^(n−1) after attempt n failed,
 * capped at retry_backoff_max.
 */
Datum
jobguard_define_operation(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		contract = jsonb_arg(fcinfo, 1, "output_contract");
	bool		backoff_null = PG_NARGS() < 3 || PG_ARGISNULL(2);
	bool		max_null = PG_NARGS() < 4 || PG_ARGISNULL(3);
	Datum		backoff = backoff_null ? (Datum) 0 : PG_GETARG_DATUM(2);
	Datum		max = max_null ? (Datum) 0 : PG_GETARG_DATUM(3);

	require_tables_owner(fcinfo);

	require_retry_policy(backoff, backoff_null, max, max_null);
	(void) contract_compile(TextDatumGetCString(operation),
							DatumGetJsonbP(contract), CurrentMemoryContext);
	store_connect(&caller);
	store_define_operation(operation, contract, backoff, backoff_null, max, max_null);
	store_finish(&caller);
	PG_RETURN_VOID();
}

/* jobguard.certify_provider(operation, provider, evidence) -> void */
Datum
jobguard_certify_provider(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		provider = text_arg(fcinfo, 1, "provider", MAX_NAME_CHARS);
	bool		evidence_null = PG_ARGISNULL(2);
	Datum		evidence = evidence_null ? (Datum) 0 : PG_GETARG_DATUM(2);

	require_tables_owner(fcinfo);

	store_connect(&caller);
	store_certify_provider(operation, provider, evidence, evidence_null);
	store_finish(&caller);
	PG_RETURN_VOID();
}

/*
 * jobguard.revoke_provider(operation, provider) -> void
 *
 * Revoking a provider that holds no certification is an error (JG004), so
 * a misspelt name is noticed rather than silently doing nothing.
 */
Datum
jobguard_revoke_provider(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		provider = text_arg(fcinfo, 1, "provider", MAX_NAME_CHARS);

	require_tables_owner(fcinfo);

	store_connect(&caller);
	if (!store_revoke_provider(operation, provider))
		ereport(ERROR,
				(errcode(ERRCODE_JG_PROVIDER_NOT_CERTIFIED),
				 errmsg("provider \"%s\" is not certified for operation \"%s\"",
						TextDatumGetCString(provider), TextDatumGetCString(operation)),
				 errhint("jobguard.certification_overview lists the certifications.")));
	store_finish(&caller);
	PG_RETURN_VOID();
}

/*
 * jobguard.check_result(operation, result) -> text
 *
 * The first violation of the operation's output contract by a result, or
 * NULL when the result satisfies it (or the operation has no contract).
 * This is the check finish_attempt() applies, offered on its own so that a
 * provider's contract tests can run it before certify_provider().
 */
Datum
jobguard_check_result(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		result = jsonb_arg(fcinfo, 1, "result");
	int64		version;
	Datum		contract;
	char	   *violation = NULL;

	store_connect(&caller);
	if (store_operation_contract(operation, &version, &contract))
		violation = contract_first_violation(contract_cache_get(TextDatumGetCString(operation),
																version, contract),
											 DatumGetJsonbP(result));
	if (violation != NULL)
		violation = store_keep_string(violation);
	store_finish(&caller);
	if (violation == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(violation));
}
