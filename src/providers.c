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
 * jobguard.define_operation(operation, output_contract) -> void
 *
 * The contract is compiled here only to validate it (22023 naming the
 * keyword and its path); finishes compile it again through the cache.
 */
Datum
jobguard_define_operation(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		operation = text_arg(fcinfo, 0, "operation", MAX_NAME_CHARS);
	Datum		contract = jsonb_arg(fcinfo, 1, "output_contract");

	(void) contract_compile(TextDatumGetCString(operation),
							DatumGetJsonbP(contract), CurrentMemoryContext);
	store_connect(&caller);
	store_define_operation(operation, contract);
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
