/*-------------------------------------------------------------------------
 *
 * audit.c
 *	  What an operator did: jobguard.operator_actions (doc/reference.md,
 *	  "What an operator did, and what is owed back").  One row per
 *	  successful call of an operator-only or administrative function that
 *	  changes something: when, who (session_user) and as whom
 *	  (current_user), the function, its target, its arguments by name and
 *	  the reason.
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
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
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
 * What recording a call of one function needs, worked out on its first
 * call in the backend and kept: its name, its arguments' types and names,
 * and the INSERT prepared for them.  A function's OID keeps its signature
 * and argument names (CREATE OR REPLACE cannot change them).
 */
typedef struct AuditedFunction
{
	Oid			fn;				/* hash key */
	Datum		action;			/* its name, as text */
	int			nargs;
	Oid		   *types;			/* of the INSERT's parameters */
	Datum	   *names;			/* of its arguments, as text */
	SPIPlanPtr	plan;
} AuditedFunction;

static HTAB *audited_functions = NULL;

/* The INSERT's parameters before the arguments' pairs. */
#define FIXED_PARAMS 5

/*
 * audited_function: what recording a call of fn needs, from the cache or
 * (the first time) the catalog, its INSERT prepared: $1 role, $2
 * acting_as, $3 action, $4 target, $5 reason, then each argument as its
 * name and its value, $6 and $7 the first.
 */
static AuditedFunction *
audited_function(Oid fn, int nargs)
{
	AuditedFunction *f;
	bool		found;
	HeapTuple	proc;
	Form_pg_proc form;
	Datum		names_datum;
	Datum		modes_datum;
	bool		names_null;
	bool		modes_null;
	char	  **names = NULL;
	int			nnames = 0;
	StringInfoData sql;
	MemoryContext old;
	SPIPlanPtr	plan;

	if (audited_functions == NULL)
	{
		HASHCTL		ctl = {0};

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(AuditedFunction);
		audited_functions = hash_create("jobguard audited functions", 32, &ctl,
										HASH_ELEM | HASH_BLOBS);
	}
	f = hash_search(audited_functions, &fn, HASH_FIND, NULL);
	if (f != NULL && f->plan != NULL && f->nargs == nargs)
		return f;
	if (f != NULL && f->plan != NULL)
		SPI_freeplan(f->plan);	/* called with another number of arguments */

	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(proc))
		elog(ERROR, "jobguard: cache lookup failed for function %u", fn);
	form = (Form_pg_proc) GETSTRUCT(proc);
	if (nargs > form->pronargs)
		elog(ERROR, "jobguard: function %u called with %d arguments, declared with %d",
			 fn, nargs, form->pronargs);
	names_datum = SysCacheGetAttr(PROCOID, proc, Anum_pg_proc_proargnames, &names_null);
	modes_datum = SysCacheGetAttr(PROCOID, proc, Anum_pg_proc_proargmodes, &modes_null);

	/* everything kept lives in TopMemoryContext; a failure leaves no entry */
	f = hash_search(audited_functions, &fn, HASH_ENTER, &found);
	f->plan = NULL;
	old = MemoryContextSwitchTo(TopMemoryContext);
	if (!names_null)
		nnames = get_func_input_arg_names(names_datum,
										  modes_null ? PointerGetDatum(NULL) : modes_datum,
										  &names);
	f->nargs = nargs;
	f->action = CStringGetTextDatum(NameStr(form->proname));
	f->types = palloc(sizeof(Oid) * (FIXED_PARAMS + 2 * nargs));
	f->names = palloc(sizeof(Datum) * (nargs + 1));
	for (int i = 0; i < FIXED_PARAMS; i++)
		f->types[i] = TEXTOID;
	for (int i = 0; i < nargs; i++)
	{
		f->types[FIXED_PARAMS + 2 * i] = TEXTOID;
		f->types[FIXED_PARAMS + 2 * i + 1] = form->proargtypes.values[i];
		f->names[i] = CStringGetTextDatum(i < nnames && names[i][0] != '\0' ? names[i]
										  : psprintf("$%d", i + 1));
	}
	MemoryContextSwitchTo(old);
	ReleaseSysCache(proc);

	initStringInfo(&sql);
	appendStringInfoString(&sql,
						   "INSERT INTO jobguard.operator_actions"
						   " (role, acting_as, action, target, reason, arguments)"
						   " VALUES ($1, $2, $3, $4, $5, pg_catalog.jsonb_build_object(");
	for (int i = 0; i < nargs; i++)
		appendStringInfo(&sql, "%s$%d, $%d", i > 0 ? ", " : "",
						 FIXED_PARAMS + 2 * i + 1, FIXED_PARAMS + 2 * i + 2);
	appendStringInfoString(&sql, "))");
	plan = SPI_prepare(sql.data, FIXED_PARAMS + 2 * nargs, f->types);
	if (plan == NULL)
		elog(ERROR, "jobguard: preparing the record of function %u failed: %s",
			 fn, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "jobguard: keeping the record of function %u failed", fn);
	f->plan = plan;
	return f;
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
	int			nargs = fcinfo->nargs;
	int			nparams = FIXED_PARAMS + 2 * nargs;
	Datum	   *values = palloc(sizeof(Datum) * nparams);
	char	   *nulls = palloc(nparams + 1);
	Datum		role = CStringGetTextDatum(GetUserNameFromId(GetSessionUserId(), false));
	Datum		acting_as = CStringGetTextDatum(GetUserNameFromId(GetUserId(), false));
	char	   *reason = call_reason(fcinfo, reason_arg);
	char	   *target = NULL;
	AuditedFunction *f;
	SavedIdentity saved;
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "jobguard: SPI_connect failed");
	become_tables_owner(&saved);
	f = audited_function(fcinfo->flinfo->fn_oid, nargs);
	if (target_arg != AUDIT_NO_ARG)
		target = arg_text(fcinfo, f->types[FIXED_PARAMS + 2 * target_arg + 1], target_arg);

	memset(nulls, ' ', nparams);
	nulls[nparams] = '\0';
	values[0] = role;
	values[1] = acting_as;
	values[2] = f->action;
	values[3] = target ? CStringGetTextDatum(target) : (Datum) 0;
	nulls[3] = target ? ' ' : 'n';
	values[4] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	nulls[4] = reason ? ' ' : 'n';
	for (int i = 0; i < nargs; i++)
	{
		values[FIXED_PARAMS + 2 * i] = f->names[i];
		values[FIXED_PARAMS + 2 * i + 1] = fcinfo->args[i].value;
		nulls[FIXED_PARAMS + 2 * i + 1] = fcinfo->args[i].isnull ? 'n' : ' ';
	}

	rc = SPI_execute_plan(f->plan, values, nulls, false, 0);
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
