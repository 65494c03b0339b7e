/*-------------------------------------------------------------------------
 *
 * audit.c
 *	  What an operator did: jobguard.operator_actions (doc/reference.md,
 *	  "Operator actions").  One row per successful call of an operator-only
 *	  or administrative function that changes something: when, who
 *	  (session_user) and as whom (current_user), the function, its target,
 *	  its arguments by name and the reason.
 *
 * The audited C functions are wrapped here: jobguard--1.2--1.3.sql points
 * each SQL function at its jobguard_audited_<name> symbol, which calls the
 * unaudited entry point with the same fcinfo and, once it has returned,
 * records the call.  A 1.2 database served by this library keeps calling
 * the unaudited symbols.  The row is written in the caller's transaction
 * (a call that fails or is rolled back leaves none), as the owner of
 * jobguard's tables: nobody else may write the table, so no caller can
 * forge a row.  The PL/pgSQL administrative functions (grant_*,
 * revoke_client, set_key_policy) write their row themselves (the update
 * script adds the INSERT to their bodies).
 *
 * The reason is the function's own reason argument where it has one and
 * it is not NULL, else the transaction's jobguard.action_reason (a console
 * runs SET LOCAL jobguard.action_reason = '...' before the call), else
 * NULL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "audit.h"
#include "security.h"

/* GUC jobguard.action_reason: why the next operator actions are done. */
static char *action_reason = NULL;

/* The unaudited entry points the wrappers below call. */
extern Datum jobguard_cancel_attempt(PG_FUNCTION_ARGS);
extern Datum jobguard_cancel_job(PG_FUNCTION_ARGS);
extern Datum jobguard_redrive_attempt(PG_FUNCTION_ARGS);
extern Datum jobguard_retry_job(PG_FUNCTION_ARGS);
extern Datum jobguard_reschedule(PG_FUNCTION_ARGS);
extern Datum jobguard_set_provider_policy(PG_FUNCTION_ARGS);
extern Datum jobguard_certify_provider(PG_FUNCTION_ARGS);
extern Datum jobguard_revoke_provider(PG_FUNCTION_ARGS);
extern Datum jobguard_define_operation(PG_FUNCTION_ARGS);
extern Datum jobguard_set_failover(PG_FUNCTION_ARGS);

PG_FUNCTION_INFO_V1(jobguard_audited_cancel_attempt);
PG_FUNCTION_INFO_V1(jobguard_audited_cancel_job);
PG_FUNCTION_INFO_V1(jobguard_audited_redrive_attempt);
PG_FUNCTION_INFO_V1(jobguard_audited_retry_job);
PG_FUNCTION_INFO_V1(jobguard_audited_reschedule);
PG_FUNCTION_INFO_V1(jobguard_audited_set_provider_policy);
PG_FUNCTION_INFO_V1(jobguard_audited_certify_provider);
PG_FUNCTION_INFO_V1(jobguard_audited_revoke_provider);
PG_FUNCTION_INFO_V1(jobguard_audited_define_operation);
PG_FUNCTION_INFO_V1(jobguard_audited_set_failover);

/*
 * audit_init: define jobguard.action_reason (from _PG_init, before the
 * jobguard prefix is reserved, so that SET LOCAL of it is accepted).
 */
void
audit_init(void)
{
	DefineCustomStringVariable("jobguard.action_reason",
							   "Why the operator actions of this transaction or session are done.",
							   "Recorded as the reason in jobguard.operator_actions of the "
							   "operator functions that have no reason argument (SET LOCAL it).",
							   &action_reason, NULL, PGC_USERSET, GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);
}

/*
 * arg_text: an argument of the call as text (its type's output), or NULL
 * when it is NULL or there is no such argument.
 */
static char *
arg_text(FunctionCallInfo fcinfo, Oid argtype, int argno)
{
	Oid			output;
	bool		varlena;

	if (argno < 0 || argno >= fcinfo->nargs || fcinfo->args[argno].isnull)
		return NULL;
	getTypeOutputInfo(argtype, &output, &varlena);
	return OidOutputFunctionCall(output, fcinfo->args[argno].value);
}

/*
 * call_reason: the reason recorded for the call: its reason argument
 * (reason_arg) when it has one that is not NULL, else the non-empty
 * jobguard.action_reason, else NULL.
 */
static char *
call_reason(FunctionCallInfo fcinfo, int reason_arg)
{
	if (reason_arg != AUDIT_NO_ARG && reason_arg < fcinfo->nargs &&
		!fcinfo->args[reason_arg].isnull)
		return TextDatumGetCString(fcinfo->args[reason_arg].value);
	if (action_reason != NULL && action_reason[0] != '\0')
		return action_reason;
	return NULL;
}

/*
 * audit_record: record the call fcinfo has just made successfully in
 * jobguard.operator_actions: the function's name as the action, argument
 * target_arg (AUDIT_NO_ARG: none) as the target, every argument by its
 * name, and the reason (call_reason).  Runs as the tables' owner, in the
 * caller's transaction; the caller's identity is taken before the switch.
 */
void
audit_record(FunctionCallInfo fcinfo, int target_arg, int reason_arg)
{
	Oid			fn = fcinfo->flinfo->fn_oid;
	HeapTuple	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Form_pg_proc form;
	Datum		names_datum;
	Datum		modes_datum;
	bool		names_null;
	bool		modes_null;
	char	  **names = NULL;
	int			nnames = 0;
	int			nargs = fcinfo->nargs;
	int			nparams = 5 + 2 * nargs;
	Oid		   *types = palloc(sizeof(Oid) * nparams);
	Datum	   *values = palloc(sizeof(Datum) * nparams);
	char	   *nulls = palloc(nparams + 1);
	char	   *target;
	char	   *reason;
	StringInfoData sql;
	SavedIdentity saved;
	int			rc;

	if (!HeapTupleIsValid(proc))
		elog(ERROR, "jobguard: cache lookup failed for function %u", fn);
	form = (Form_pg_proc) GETSTRUCT(proc);
	names_datum = SysCacheGetAttr(PROCOID, proc, Anum_pg_proc_proargnames, &names_null);
	modes_datum = SysCacheGetAttr(PROCOID, proc, Anum_pg_proc_proargmodes, &modes_null);
	if (!names_null)
		nnames = get_func_input_arg_names(names_datum,
										  modes_null ? PointerGetDatum(NULL) : modes_datum,
										  &names);
	if (nargs > form->pronargs)
		elog(ERROR, "jobguard: function %u called with %d arguments, declared with %d",
			 fn, nargs, form->pronargs);

	memset(nulls, ' ', nparams);
	nulls[nparams] = '\0';
	/* $1 role, $2 acting_as, $3 action, $4 target, $5 reason */
	types[0] = TEXTOID;
	values[0] = CStringGetTextDatum(GetUserNameFromId(GetSessionUserId(), false));
	types[1] = TEXTOID;
	values[1] = CStringGetTextDatum(GetUserNameFromId(GetUserId(), false));
	types[2] = TEXTOID;
	values[2] = CStringGetTextDatum(NameStr(form->proname));
	types[3] = TEXTOID;
	target = target_arg == AUDIT_NO_ARG ? NULL
		: arg_text(fcinfo, form->proargtypes.values[target_arg], target_arg);
	values[3] = target ? CStringGetTextDatum(target) : (Datum) 0;
	nulls[3] = target ? ' ' : 'n';
	types[4] = TEXTOID;
	reason = call_reason(fcinfo, reason_arg);
	values[4] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	nulls[4] = reason ? ' ' : 'n';

	initStringInfo(&sql);
	appendStringInfoString(&sql,
						   "INSERT INTO jobguard.operator_actions"
						   " (role, acting_as, action, target, reason, arguments)"
						   " VALUES ($1, $2, $3, $4, $5, pg_catalog.jsonb_build_object(");
	for (int i = 0; i < nargs; i++)
	{
		int			k = 5 + 2 * i;	/* $(k+1) its name, $(k+2) its value */
		const char *name = i < nnames && names[i][0] != '\0' ? names[i] : psprintf("$%d", i + 1);

		types[k] = TEXTOID;
		values[k] = CStringGetTextDatum(name);
		types[k + 1] = form->proargtypes.values[i];
		values[k + 1] = fcinfo->args[i].value;
		nulls[k + 1] = fcinfo->args[i].isnull ? 'n' : ' ';
		appendStringInfo(&sql, "%s$%d, $%d", i > 0 ? ", " : "", k + 1, k + 2);
	}
	appendStringInfoString(&sql, "))");
	ReleaseSysCache(proc);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "jobguard: SPI_connect failed");
	become_tables_owner(&saved);
	rc = SPI_execute_with_args(sql.data, nparams, types, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "jobguard: recording an operator action failed: %s",
			 SPI_result_code_string(rc));
	become_caller_again(&saved);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "jobguard: SPI_finish failed");
}

/*
 * audited_call: call the unaudited entry point with the caller's fcinfo,
 * then record the call; returns what the entry point returned.
 */
static Datum
audited_call(FunctionCallInfo fcinfo, PGFunction unaudited, int target_arg, int reason_arg)
{
	Datum		result = unaudited(fcinfo);
	bool		isnull = fcinfo->isnull;

	audit_record(fcinfo, target_arg, reason_arg);
	fcinfo->isnull = isnull;
	return result;
}

/* jobguard.cancel_attempt(attempt_id, reason), recorded: target the attempt. */
Datum
jobguard_audited_cancel_attempt(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_cancel_attempt, 0, 1);
}

/* jobguard.cancel_job(job_id, reason), recorded: target the job. */
Datum
jobguard_audited_cancel_job(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_cancel_job, 0, 1);
}

/* jobguard.redrive_attempt(attempt_id), recorded: target the attempt. */
Datum
jobguard_audited_redrive_attempt(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_redrive_attempt, 0, AUDIT_NO_ARG);
}

/* jobguard.retry_job(job_id, extra_attempts, reason), recorded: the job. */
Datum
jobguard_audited_retry_job(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_retry_job, 0, 2);
}

/* jobguard.reschedule(job_id, run_at, priority), recorded: the job. */
Datum
jobguard_audited_reschedule(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_reschedule, 0, AUDIT_NO_ARG);
}

/* jobguard.set_provider_policy(provider, ...), recorded: the provider. */
Datum
jobguard_audited_set_provider_policy(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_set_provider_policy, 0, AUDIT_NO_ARG);
}

/* jobguard.certify_provider(operation, provider, evidence): the provider. */
Datum
jobguard_audited_certify_provider(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_certify_provider, 1, AUDIT_NO_ARG);
}

/* jobguard.revoke_provider(operation, provider), recorded: the provider. */
Datum
jobguard_audited_revoke_provider(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_revoke_provider, 1, AUDIT_NO_ARG);
}

/* jobguard.define_operation(operation, ...), recorded: the operation. */
Datum
jobguard_audited_define_operation(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_define_operation, 0, AUDIT_NO_ARG);
}

/* jobguard.set_failover(operation, providers, after_failures): the operation. */
Datum
jobguard_audited_set_failover(PG_FUNCTION_ARGS)
{
	return audited_call(fcinfo, jobguard_set_failover, 0, AUDIT_NO_ARG);
}
