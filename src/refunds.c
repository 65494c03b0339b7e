/*-------------------------------------------------------------------------
 *
 * refunds.c
 *	  What is owed back: jobguard.mark_refunded() records that the result
 *	  an attempt kept after losing the compare-and-swap (attempts.
 *	  lost_result: perhaps money the provider took twice) was settled
 *	  (doc/reference.md, "What an operator did, and what is owed back").
 *
 * The records are rows of jobguard.refunds, a table of their own (the
 * fast path writes attempts' tuples by column number, so attempts gains no
 * column), with no foreign key to attempts (its triggers would send every
 * write of attempts through the executor): a record outlives the purge of
 * its attempt, as jobguard.operator_actions does.  jobguard.lost_results
 * shows the lost results with their refunds.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "args.h"
#include "audit.h"
#include "errcodes.h"
#include "scopes.h"
#include "security.h"
#include "store.h"

PG_FUNCTION_INFO_V1(jobguard_mark_refunded);

/* The longest refund reference, in characters. */
#define MAX_REFERENCE_CHARS 255

/*
 * The attempt, locked against a purge (FOR KEY SHARE): its job, its
 * effective state and whether it kept a lost result.
 */
#define LOCK_ATTEMPT_SQL \
	"SELECT a.job_id, jobguard.attempt_state(a.state, a.deadline), " \
	"       a.lost_result IS NOT NULL" \
	"  FROM jobguard.attempts a" \
	" WHERE a.id OPERATOR(pg_catalog.=) $1" \
	"   FOR KEY SHARE OF a"

/* The refund record, unless the attempt has one already. */
#define INSERT_REFUND_SQL \
	"INSERT INTO jobguard.refunds AS r (attempt_id, reference, refunded_by)" \
	" VALUES ($1, $2, $3)" \
	" ON CONFLICT ON CONSTRAINT refunds_pkey DO NOTHING"

/* The attempt's refund record, and whether it has the reference given. */
#define READ_REFUND_SQL \
	"SELECT r.reference OPERATOR(pg_catalog.=) $2, r.reference" \
	"  FROM jobguard.refunds r" \
	" WHERE r.attempt_id OPERATOR(pg_catalog.=) $1"

/*
 * require_operator: operators only, the rule of the operators' functions:
 * the owner of jobguard's tables (and the roles with its privileges),
 * superusers and the roles of jobguard.grant_operator(); anyone else 42501.
 */
static void
require_operator(Oid caller)
{
	if (superuser_arg(caller) || has_privs_of_role(caller, tables_owner_role()))
		return;
	if (scopes_acting_scope(caller) == NULL)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for function jobguard.mark_refunded()"),
			 errdetail("Only operators call it: the owner of jobguard's tables, superusers and the roles of jobguard.grant_operator()."),
			 errhint("An operator role is made with jobguard.grant_operator().")));
}

/*
 * jobguard.mark_refunded(attempt_id, reference) -> void
 *
 * Operators only.  Records that the lost result of an attempt was settled,
 * under the operator's reference (a refund's id at the provider, a ticket).
 * The same reference again changes nothing; another one is JG007; an
 * attempt that kept no lost result is JG006; an id that names no attempt
 * is JG009.  NULL arguments are 22004, an empty or overlong reference
 * 22023.  Every successful call is recorded in jobguard.operator_actions.
 */
Datum
jobguard_mark_refunded(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	Datum		reference = text_arg(fcinfo, 1, "reference", MAX_REFERENCE_CHARS);
	Oid			userid = GetUserId();
	Datum		refunded_by = CStringGetTextDatum(GetUserNameFromId(userid, false));
	Oid			types[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3] = {Int64GetDatum(attempt_id), reference, refunded_by};
	bool		isnull;
	int64		job_id;
	char	   *state;
	bool		lost;
	int			rc;

	require_operator(userid);
	store_connect(&caller);

	rc = SPI_execute_with_args(LOCK_ATTEMPT_SQL, 1, types, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "jobguard: reading attempt %lld failed: %s",
			 (long long) attempt_id, SPI_result_code_string(rc));
	if (SPI_processed == 0)
		report_attempt_not_found(attempt_id, userid, SCOPE_ACT);
	job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	lost = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	if (!lost)
		ereport(ERROR,
				(errcode(ERRCODE_JG_INVALID_TRANSITION),
				 errmsg("attempt %lld of job %lld cannot be marked refunded: it is %s",
						(long long) attempt_id, (long long) job_id, state),
				 errdetail("Only an attempt whose result lost the compare-and-swap (a lost attempt) keeps a result that may be owed back."),
				 errhint("jobguard.lost_results lists them.")));

	rc = SPI_execute_with_args(INSERT_REFUND_SQL, 3, types, values, NULL, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "jobguard: recording the refund of attempt %lld failed: %s",
			 (long long) attempt_id, SPI_result_code_string(rc));
	if (SPI_processed == 0)
	{
		/* refunded before: by the same reference, nothing to do */
		rc = SPI_execute_with_args(READ_REFUND_SQL, 2, types, values, NULL, false, 0);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "jobguard: reading the refund of attempt %lld failed: %s",
				 (long long) attempt_id, SPI_result_code_string(rc));
		if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_JG_RESULT_MISMATCH),
					 errmsg("attempt %lld of job %lld was already marked refunded with another reference",
							(long long) attempt_id, (long long) job_id),
					 errdetail("Its refund reference is \"%s\"; a refund's reference cannot change.",
							   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2))));
	}
	store_finish(&caller);
	audit_record(fcinfo, 0, AUDIT_NO_ARG);
	PG_RETURN_VOID();
}
