/*-------------------------------------------------------------------------
 *
 * args.c
 *	  The argument checks, common refusals and result builders every
 *	  SQL-callable entry point of jobguard uses, written once so that every
 *	  function answers a bad argument in the same words.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/numeric.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "access/detoast.h"

#include "args.h"
#include "store.h"
#include "errcodes.h"
#include "security.h"

/*
 * require_arg: raise 22004 naming the argument if it is NULL.  A NULL
 * owner, key or result is a caller bug, never something to answer with NULL.
 */
void
require_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" of jobguard.%s() must not be null",
						name, get_func_name(fcinfo->flinfo->fn_oid))));
}

/*
 * text_arg: a text argument that must be present and 1 to max_chars
 * characters long; returns it detoasted, as a Datum for store.h.  A text
 * without a length limit of its own (an error, a cancel reason) is a
 * payload: at most jobguard.max_payload_size (54000), checked before it is
 * detoasted.
 */
Datum
text_arg(FunctionCallInfo fcinfo, int argno, const char *name, int max_chars)
{
	text	   *t;
	int			chars;

	require_arg(fcinfo, argno, name);
	if (max_chars == UNLIMITED_CHARS)
		require_payload_size(PG_GETARG_DATUM(argno), name);
	t = PG_GETARG_TEXT_PP(argno);
	chars = pg_mbstrlen_with_len(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	if (max_chars == UNLIMITED_CHARS && chars < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must not be empty", name)));
	if (chars < 1 || chars > max_chars)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be 1 to %d characters long",
						name, max_chars),
				 errdetail("It is %d characters long.", chars)));
	return PointerGetDatum(t);
}

/* optional_text_arg: like text_arg, but NULL is allowed (*isnull set). */
Datum
optional_text_arg(FunctionCallInfo fcinfo, int argno, const char *name,
				  int max_chars, bool *isnull)
{
	*isnull = PG_ARGISNULL(argno);
	if (*isnull)
		return (Datum) 0;
	return text_arg(fcinfo, argno, name, max_chars);
}

/* int64_arg: a required bigint argument (a job or attempt id). */
int64
int64_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	require_arg(fcinfo, argno, name);
	return PG_GETARG_INT64(argno);
}

/* jsonb_arg: a required jsonb argument, detoasted. */
Datum
jsonb_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	require_arg(fcinfo, argno, name);
	return PointerGetDatum(PG_GETARG_JSONB_P(argno));
}

/* GUC jobguard.max_payload_size: the largest params, result or error, in kB. */
int			max_payload_kb = 1024;

/*
 * require_payload_size: refuse (54000) a params, result, error or reason larger
 * than jobguard.max_payload_size, before anything is written: a job's
 * payloads live in its row for as long as the job is kept, and are read
 * back by every replay and every reader.
 */
void
require_payload_size(Datum value, const char *name)
{
	Size		size = toast_raw_datum_size(value) - VARHDRSZ;

	if (size > (Size) max_payload_kb * 1024)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("argument \"%s\" is too large", name),
				 errdetail("It takes %zu bytes; jobguard.max_payload_size allows %d kB.",
						   size, max_payload_kb),
				 errhint("Keep large data elsewhere and pass a reference to it.")));
}

/*
 * require_provider_list: check a text[] of provider names (claim's
 * providers, set_failover's route): one-dimensional, 1 to
 * MAX_PROVIDER_LIST names, each 1 to MAX_NAME_CHARS characters, none NULL
 * (22004) and none twice (22023).  Returns how many it names.
 */
int
require_provider_list(Datum list, const char *name)
{
	ArrayType  *array = DatumGetArrayTypeP(list);
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be a one-dimensional array", name)));
	n = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
	if (n >= 1 && n <= MAX_PROVIDER_LIST)
		deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n < 1 || n > MAX_PROVIDER_LIST)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must name 1 to %d providers", name, MAX_PROVIDER_LIST),
				 errdetail("It names %d.", n)));
	for (int i = 0; i < n; i++)
	{
		char	   *provider;
		int			chars;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s\" must not hold a null provider", name),
					 errdetail("Element %d is null.", i + 1)));
		provider = TextDatumGetCString(elems[i]);
		chars = pg_mbstrlen(provider);
		if (chars < 1 || chars > MAX_NAME_CHARS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("each provider in argument \"%s\" must be 1 to %d characters long",
							name, MAX_NAME_CHARS),
					 errdetail("Element %d is %d characters long.", i + 1, chars)));
		for (int k = 0; k < i; k++)
			if (strcmp(provider, TextDatumGetCString(elems[k])) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("argument \"%s\" names provider \"%s\" twice", name, provider),
						 errdetail("Elements %d and %d are the same.", k + 1, i + 1)));
	}
	return n;
}

/*
 * result_tupdesc: the blessed row descriptor of a function returning a
 * composite, built on the first call of a query and kept in fn_extra, since
 * building it per row costs more than the call itself.
 */
/*
 * require_administrator: the rule of every administrative function, C or
 * PL/pgSQL alike: only a role with the privileges of the owner of
 * jobguard's tables (the extension's owner, its members, superusers) may
 * call it.  EXECUTE granted to another role delegates nothing: the call is
 * refused here (42501), naming the function, rather than lent the owner's
 * rights (the C functions run as the tables' owner) or left to fail on the
 * first table it touches (the PL/pgSQL ones run with the caller's rights).
 */
static void
require_administrator(const char *function)
{
	Oid			caller = GetUserId();

	if (!superuser_arg(caller) && !has_privs_of_role(caller, tables_owner_role()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function jobguard.%s()", function),
				 errdetail("Administrative functions of jobguard run only for the owner of its tables, the roles that have its privileges, and superusers; EXECUTE alone does not delegate them."),
				 errhint("Call it as role \"%s\", or as a member of it.",
						 GetUserNameFromId(tables_owner_role(), false))));
}

/* require_tables_owner: require_administrator() for the C function called. */
void
require_tables_owner(FunctionCallInfo fcinfo)
{
	require_administrator(get_func_name(fcinfo->flinfo->fn_oid));
}

PG_FUNCTION_INFO_V1(jobguard_require_administrator);

/*
 * jobguard.require_administrator(function_name text) -> void
 *
 * require_administrator() for the PL/pgSQL administrative functions, the
 * first thing each of them does, so that both kinds refuse a caller in
 * the same words.  EXECUTE is PUBLIC's: it reads and writes nothing, and
 * tells a caller only what pg_has_role() would.
 */
Datum
jobguard_require_administrator(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"function_name\" must not be null")));
	require_administrator(text_to_cstring(PG_GETARG_TEXT_PP(0)));
	PG_RETURN_VOID();
}

/*
 * require_wait_limit: refuse (22023) a wait longer than MAX_WAIT_MS.  A
 * deadline of now() plus a wait of thousands of years would overflow the
 * timestamp and pass at once: a wait must end when it says, or be refused.
 */
void
require_wait_limit(int64 wait_ms, const char *name, const char *function)
{
	if (wait_ms > MAX_WAIT_MS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" of jobguard.%s() must be at most 366 days", name, function),
				 errhint("Wait in shorter steps, calling again.")));
}

/* max_duration: MAX_DURATION_YEARS as an interval. */
static Interval
max_duration(void)
{
	Interval	max = {0};

	max.month = MAX_DURATION_YEARS * MONTHS_PER_YEAR;
	return max;
}

/*
 * require_duration: refuse (22023) a duration argument longer than
 * MAX_DURATION_YEARS: now() plus such a span would overflow a timestamp in
 * every call that later reads it.  The lower bound is each caller's own.
 */
void
require_duration(Datum value, const char *name)
{
	Interval	max = max_duration();

	if (DatumGetBool(DirectFunctionCall2(interval_gt, value, IntervalPGetDatum(&max))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be at most %d years", name, MAX_DURATION_YEARS),
				 errdetail("It is %s.", DatumGetCString(DirectFunctionCall1(interval_out, value)))));
}

/*
 * duration_capped: span, or MAX_DURATION_YEARS when it is longer (a value
 * stored before require_duration() checked it, or written by hand).
 */
Interval
duration_capped(const Interval *span)
{
	Interval	max = max_duration();

	if (DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(span),
										 IntervalPGetDatum(&max))))
		return max;
	return *span;
}

/*
 * interval_seconds: a span in seconds as a double (a day as 24 hours, a
 * month as 30 days, as interval comparison counts them); never overflows.
 */
double
interval_seconds(const Interval *span)
{
	return (double) span->time / USECS_PER_SEC +
		((double) span->month * DAYS_PER_MONTH + (double) span->day) * SECS_PER_DAY;
}

/*
 * require_rate: refuse (22023) a max_per_second outside MIN_PER_SECOND to
 * MAX_PER_SECOND: below, a float8 underflows (or one start waits for
 * years); above, it overflows.  value is a finite number greater than zero.
 */
void
require_rate(Datum value, const char *name)
{
	Datum		min = DirectFunctionCall3(numeric_in, CStringGetDatum(MIN_PER_SECOND_TEXT),
										  ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	Datum		max = DirectFunctionCall3(numeric_in, CStringGetDatum(MAX_PER_SECOND_TEXT),
										  ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));

	if (DatumGetBool(DirectFunctionCall2(numeric_lt, value, min)) ||
		DatumGetBool(DirectFunctionCall2(numeric_gt, value, max)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be %s to %s", name, MIN_PER_SECOND_TEXT, MAX_PER_SECOND_TEXT),
				 errdetail("It is %s.", DatumGetCString(DirectFunctionCall1(numeric_out, value)))));
}

TupleDesc
result_tupdesc(FunctionCallInfo fcinfo)
{
	TupleDesc	desc = (TupleDesc) fcinfo->flinfo->fn_extra;

	if (desc == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);

		if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "jobguard: function returning a row called in a context that cannot accept one");
		desc = BlessTupleDesc(CreateTupleDescCopy(desc));
		MemoryContextSwitchTo(old);
		fcinfo->flinfo->fn_extra = desc;
	}
	return desc;
}

/* text_result: a text Datum of a C string constant. */
Datum
text_result(const char *s)
{
	return PointerGetDatum(cstring_to_text(s));
}
/*
 * report_job_not_found: raise JG008 for a job id that names no job the
 * caller may use (act on or read).  Job and attempt ids never coincide, so
 * when the number is the id of an attempt the caller may use, DETAIL says
 * so; another scope's job or attempt is answered as if it did not exist.
 * Runs inside store_connect().
 */
pg_noreturn void
report_job_not_found(int64 job_id, Oid caller, ScopeUse use)
{
	char	   *job_scope;
	char	   *attempt_scope;

	store_id_scopes(job_id, &job_scope, &attempt_scope);
	if (attempt_scope != NULL && scopes_allow(caller, use, attempt_scope))
		ereport(ERROR,
				(errcode(ERRCODE_JG_JOB_NOT_FOUND),
				 errmsg("job %lld does not exist", (long long) job_id),
				 errdetail("%lld is the id of an attempt, not of a job.", (long long) job_id),
				 errhint("Pass a job id, as returned by jobguard.submit().")));
	ereport(ERROR,
			(errcode(ERRCODE_JG_JOB_NOT_FOUND),
			 errmsg("job %lld does not exist", (long long) job_id)));
}

/*
 * report_attempt_not_found: raise JG009 for an id that names no attempt
 * the caller may use; DETAIL says when the number is a job id instead.
 */
pg_noreturn void
report_attempt_not_found(int64 attempt_id, Oid caller, ScopeUse use)
{
	char	   *job_scope;
	char	   *attempt_scope;

	store_id_scopes(attempt_id, &job_scope, &attempt_scope);
	if (job_scope != NULL && scopes_allow(caller, use, job_scope))
		ereport(ERROR,
				(errcode(ERRCODE_JG_ATTEMPT_NOT_FOUND),
				 errmsg("attempt %lld does not exist", (long long) attempt_id),
				 errdetail("%lld is the id of a job, not of an attempt.", (long long) attempt_id),
				 errhint("Pass an attempt id, as returned by jobguard.begin_attempt().")));
	ereport(ERROR,
			(errcode(ERRCODE_JG_ATTEMPT_NOT_FOUND),
			 errmsg("attempt %lld does not exist", (long long) attempt_id)));
}

/* report_retries_exhausted: raise a serialization failure (40001) to retry. */
pg_noreturn void
report_retries_exhausted(const char *what, int64 id)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not %s %lld: it kept changing concurrently", what, (long long) id),
			 errhint("Retry the call.")));
}

