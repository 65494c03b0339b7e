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

#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "miscadmin.h"

#include "args.h"
#include "errcodes.h"
#include "claim_floor.h"
#include "policies.h"
#include "metrics.h"
#include "store.h"

/*
 * How often submit() retries when the job it conflicted with is gone before
 * it could be read (removed by a concurrent purge).
 */
#define SUBMIT_MAX_TRIES 3

/*
 * The most requests one submit_many() call takes (54000 beyond): a call is
 * one transaction and one result set, linear in its rows on either path;
 * this bounds what one call may hold (doc/reference.md).
 */
#define MAX_BATCH_ROWS 10000

PG_FUNCTION_INFO_V1(jobguard_submit);
PG_FUNCTION_INFO_V1(jobguard_submit_many);

/* The name and the role of each submit column (store_columns.h). */
static const char *const submit_column_name[SUBMIT_COLUMN_COUNT] = {SUBMIT_COLUMN_NAME_LIST};
static const SubmitRole submit_column_role[SUBMIT_COLUMN_COUNT] = {SUBMIT_COLUMN_ROLES};

/* same_request: whether a replay equals the stored job in every compared column. */
static bool
same_request(const SubmitMatch *m)
{
	for (int c = 0; c < SUBMIT_COLUMN_COUNT; c++)
		if (!m->same[c])
			return false;
	return true;
}

/*
 * describe_mismatch: "operation, params and provider" — the parts of a
 * replayed request that differ from the stored job, for JG001's DETAIL.
 */
static char *
describe_mismatch(const SubmitMatch *m)
{
	const char *parts[SUBMIT_COLUMN_COUNT];
	int			n = 0;
	StringInfoData buf;

	for (int c = 0; c < SUBMIT_COLUMN_COUNT; c++)
		if (submit_role_compared(submit_column_role[c]) && !m->same[c])
			parts[n++] = submit_column_name[c];

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
 * A submit's schedule (run_at, priority): written when the job is made,
 * never compared with a stored job, so a replay with another schedule is
 * still a replay and changes nothing.
 */
typedef struct SubmitSchedule
{
	bool		has_run_at;
	Datum		run_at;
	int16		priority;
} SubmitSchedule;

/*
 * priority_value: a priority argument (or element) checked to fit a
 * smallint, -32768..32767 (22023 beyond); what names it for the message.
 */
static int16
priority_value(int32 priority, const char *what)
{
	if (priority < PG_INT16_MIN || priority > PG_INT16_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be %d to %d", what, PG_INT16_MIN, PG_INT16_MAX),
				 errdetail("It is %d.", priority)));
	return (int16) priority;
}

/*
 * schedule_args: submit's run_at (argument argno) and priority (argno + 1)
 * into *schedule; absent (a 1.1 definition of the function calls with
 * fewer arguments) or NULL: at once, priority 0.
 */
static void
schedule_args(FunctionCallInfo fcinfo, int argno, SubmitSchedule *schedule)
{
	schedule->has_run_at = PG_NARGS() > argno && !PG_ARGISNULL(argno);
	schedule->run_at = schedule->has_run_at ? PG_GETARG_DATUM(argno) : (Datum) 0;
	schedule->priority = 0;
	if (PG_NARGS() > argno + 1 && !PG_ARGISNULL(argno + 1))
		schedule->priority = priority_value(PG_GETARG_INT32(argno + 1),
											"argument \"priority\"");
}

/*
 * submit_run_time: when a new job may first run: its run_at, else its
 * creation (created_at is now(), the transaction's start).
 */
static TimestampTz
submit_run_time(const SubmitRequest *req)
{
	return req->has_run_at ? DatumGetTimestampTz(req->run_at) :
		GetCurrentTransactionStartTimestamp();
}

/* What submitting one request came to. */
typedef enum SubmitOutcome
{
	SUBMIT_CREATED,				/* a new job */
	SUBMIT_REPLAYED,			/* the same request again: the existing job */
	SUBMIT_KEY_REUSED			/* a different request under the key: JG001 */
} SubmitOutcome;

/*
 * submit_one: submit one request in the scope, inside store_connect().
 * Inserts first and lets the unique constraint decide; only a conflicting
 * insert reads the existing job and compares the request with it (into
 * *match).  *job_id is the new or existing job.  Under READ COMMITTED a
 * concurrent duplicate waits for the first inserter and then sees its job;
 * under REPEATABLE READ it gets a serialization failure.
 */
static SubmitOutcome
submit_one(Datum scope, const Datum *values, const bool *nulls,
		   const SubmitSchedule *schedule, int64 *job_id, SubmitMatch *match)
{
	SubmitRequest req = {
		.has_run_at = schedule->has_run_at,
		.run_at = schedule->run_at,
		.priority = schedule->priority,
	};
	Datum		operation = values[SUBMIT_OPERATION];
	Datum		params = values[SUBMIT_PARAMS];

	memcpy(req.values, values, sizeof(req.values));
	memcpy(req.nulls, nulls, sizeof(req.nulls));
	req.values[SUBMIT_SCOPE] = scope;
	req.nulls[SUBMIT_SCOPE] = false;

	for (int tries = 1;; tries++)
	{
		if (store_insert_job(&req, job_id))
		{
			stats_count(STAT_SUBMITS_CREATED);
			stats_gauge_move(GAUGE_NONE, GAUGE_JOBS_PENDING, 1);
			claim_work_ready_at(*job_id, submit_run_time(&req), req.priority);
			return SUBMIT_CREATED;
		}
		if (store_match_job(&req, match))
		{
			KeyPolicy	policy;
			bool		has_policy = policy_of(TextDatumGetCString(operation), &policy);

			*job_id = match->job_id;
			/* with identity keys, other differences in params do not count */
			if (!match->same[SUBMIT_PARAMS] && has_policy && policy.has_identity &&
				match->same[SUBMIT_OPERATION])
				match->same[SUBMIT_PARAMS] = store_same_identity(match->job_id, params,
																 policy.identity);
			if (!same_request(match))
			{
				stats_count(STAT_KEY_CONFLICTS);
				return SUBMIT_KEY_REUSED;
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

				if (store_replace_ended_job(match->job_id))
				{
					if (store_insert_next_job(&req, match->job_id, job_id))
					{
						stats_count(STAT_SUBMITS_CREATED);
						stats_gauge_move(GAUGE_NONE, GAUGE_JOBS_PENDING, 1);
						claim_work_ready_at(*job_id, submit_run_time(&req), req.priority);
						return SUBMIT_CREATED;
					}
					/*
					 * Another submit's job holds the key (a unique
					 * violation of a key index being built): start over
					 * to meet it.
					 */
					if (tries >= SUBMIT_MAX_TRIES)
						report_retries_exhausted("submit a new job after job", match->job_id);
					continue;
				}

				/*
				 * Not replaced: the job is not failed or cancelled, or a
				 * racing resubmit replaced it first — then its new job is
				 * the live one, and this call starts over to meet it.
				 */
				if (store_match_job(&req, &now) &&
					now.job_id != match->job_id)
				{
					if (tries >= SUBMIT_MAX_TRIES)
						report_retries_exhausted("submit a new job after job", match->job_id);
					continue;
				}
			}
			stats_count(STAT_SUBMITS_REPLAYED);
			return SUBMIT_REPLAYED;
		}
		if (tries >= SUBMIT_MAX_TRIES)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not submit job for idempotency key \"%s\" of owner \"%s\"",
							TextDatumGetCString(values[SUBMIT_IDEMPOTENCY_KEY]),
							TextDatumGetCString(values[SUBMIT_OWNER_ID])),
					 errdetail("The job for this key was removed concurrently %d times.", tries),
					 errhint("Retry the call.")));
	}
}

/* key_reused_message: JG001's message, for submit's error and submit_many's row. */
static char *
key_reused_message(Datum owner_id, Datum idempotency_key)
{
	return psprintf("idempotency key \"%s\" of owner \"%s\" was already used for a different request",
					TextDatumGetCString(idempotency_key), TextDatumGetCString(owner_id));
}

/*
 * jobguard.submit(owner_id, idempotency_key, operation, params, provider,
 *				   max_attempts, run_at, priority) -> (job_id, created)
 *
 * One request: see submit_one().  run_at and priority (absent when the
 * 1.1 definition calls) are the new job's schedule, not part of the
 * request.  A different request under the key is
 * JG001, naming the existing job.
 */
Datum
jobguard_submit(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		scope;
	Datum		values[SUBMIT_COLUMN_COUNT] = {0};
	bool		value_nulls[SUBMIT_COLUMN_COUNT] = {0};
	SubmitSchedule schedule;
	TupleDesc	desc = result_tupdesc(fcinfo);
	int64		job_id = 0;
	SubmitOutcome outcome;
	SubmitMatch match;
	Datum		columns[2];
	bool		nulls[2] = {false, false};

	/* the arguments checked in order: the first bad one is the error */
	values[SUBMIT_OWNER_ID] = text_arg(fcinfo, 0, "owner_id", MAX_KEY_CHARS);
	values[SUBMIT_IDEMPOTENCY_KEY] = text_arg(fcinfo, 1, "idempotency_key", MAX_KEY_CHARS);
	values[SUBMIT_OPERATION] = text_arg(fcinfo, 2, "operation", MAX_NAME_CHARS);
	values[SUBMIT_PARAMS] = jsonb_arg(fcinfo, 3, "params");
	values[SUBMIT_PROVIDER] = text_arg(fcinfo, 4, "provider", MAX_NAME_CHARS);
	value_nulls[SUBMIT_MAX_ATTEMPTS] = PG_ARGISNULL(5);
	if (!value_nulls[SUBMIT_MAX_ATTEMPTS])
		values[SUBMIT_MAX_ATTEMPTS] = PG_GETARG_DATUM(5);
	require_payload_size(values[SUBMIT_PARAMS], "params");
	if (!value_nulls[SUBMIT_MAX_ATTEMPTS] && DatumGetInt32(values[SUBMIT_MAX_ATTEMPTS]) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"max_attempts\" must be at least 1 or null"),
				 errdetail("It is %d.", DatumGetInt32(values[SUBMIT_MAX_ATTEMPTS]))));
	schedule_args(fcinfo, 6, &schedule);

	/* the caller's application: keys are unique per scope */
	scope = CStringGetTextDatum(scopes_submit_scope(GetUserId()));
	store_connect(&caller);
	outcome = submit_one(scope, values, value_nulls, &schedule, &job_id, &match);
	if (outcome == SUBMIT_KEY_REUSED)
		ereport(ERROR,
				(errcode(ERRCODE_JG_IDEMPOTENCY_KEY_REUSED),
				 errmsg_internal("%s", key_reused_message(values[SUBMIT_OWNER_ID],
														  values[SUBMIT_IDEMPOTENCY_KEY])),
				 errdetail("Job %lld was submitted with this key; this request differs in %s.",
						   (long long) match.job_id, describe_mismatch(&match)),
				 errhint("Use a new idempotency key for a new request, or resend the original request unchanged to get job %lld.",
						 (long long) match.job_id)));
	store_finish(&caller);

	columns[0] = Int64GetDatum(job_id);
	columns[1] = BoolGetDatum(outcome == SUBMIT_CREATED);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, columns, nulls)));
}

/* One column of submit_many's input: its elements, and which are NULL. */
typedef struct BatchColumn
{
	const char *name;			/* the request field, for messages */
	const char *argname;		/* the argument */
	Datum	   *values;
	bool	   *nulls;
	int			count;
} BatchColumn;

/*
 * batch_column: deconstruct array argument argno (NULL: 22004 for the
 * whole call, unless optional; then every element is NULL).  Arrays of
 * more than one dimension are refused (22023).
 */
static void
batch_column(FunctionCallInfo fcinfo, int argno, const char *argname,
			 const char *field, Oid elemtype, bool optional, BatchColumn *column)
{
	ArrayType  *array;
	int16		typlen;
	bool		typbyval;
	char		typalign;

	column->name = field;
	column->argname = argname;
	column->values = NULL;
	column->nulls = NULL;
	column->count = -1;			/* not given: as long as the others */
	if (optional && (PG_NARGS() <= argno || PG_ARGISNULL(argno)))
		return;
	require_arg(fcinfo, argno, argname);
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must be a one-dimensional array", argname)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(array, elemtype, typlen, typbyval, typalign,
					  &column->values, &column->nulls, &column->count);
}

/*
 * batch_row_problem: why request i of a batch would be refused before it
 * reaches the table — a NULL field (22004) or one out of range (22023) —
 * as the message of its row, or NULL when it may be submitted.
 */
static char *
batch_row_problem(const BatchColumn *columns, const int *max_chars, int ncolumns,
				  int i, int *sqlstate)
{
	for (int c = 0; c < ncolumns; c++)
	{
		if (columns[c].nulls[i])
		{
			*sqlstate = ERRCODE_NULL_VALUE_NOT_ALLOWED;
			return psprintf("%s of request %d must not be null", columns[c].name, i + 1);
		}
		if (max_chars[c] > 0)
		{
			text	   *t = DatumGetTextPP(columns[c].values[i]);
			int			chars = pg_mbstrlen_with_len(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));

			if (chars < 1 || chars > max_chars[c])
			{
				*sqlstate = ERRCODE_INVALID_PARAMETER_VALUE;
				return psprintf("%s of request %d must be 1 to %d characters long (it is %d)",
								columns[c].name, i + 1, max_chars[c], chars);
			}
		}
	}
	return NULL;
}

/*
 * jobguard.submit_many(owner_ids, idempotency_keys, operations, params,
 *						providers, max_attempts, run_ats, priorities)
 *   -> TABLE (ord, job_id, created, sqlstate, message)
 *
 * Many requests in one call, each with the outcome submit() would have
 * given it, one row per request in input order: created, replayed, or
 * refused (22004, 22023, 54000, JG001 with the existing job's id), a refused
 * request writing nothing and not stopping the others.  The requests that
 * pass their checks are inserted in one pass, in order, insert-first as
 * submit() does (store_insert_jobs); only those that found a job under
 * their key go on as submit() would (submit_one: compare, key policy) — so
 * a later request with a key used earlier in the same call finds that
 * job: equal, a replay; different, JG001.  Arrays of unequal length refuse
 * the whole call (22023).
 */
Datum
jobguard_submit_many(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SavedIdentity caller;		/* restored by store_finish() */
	BatchColumn columns[8];
	BatchColumn *run_ats = &columns[6];
	BatchColumn *priorities = &columns[7];
	int16	   *priority_values = NULL;
	const int	max_chars[5] = {MAX_KEY_CHARS, MAX_KEY_CHARS, MAX_NAME_CHARS, 0, MAX_NAME_CHARS};
	BatchColumn *max_attempts = &columns[5];
	int			count;
	Datum		scope;
	MemoryContext row_cxt;
	JobBatch	batch;
	bool	   *skip;
	int		   *sqlstates;
	char	  **messages;
	bool	   *attempts_null;
	Datum	   *attempts;
	bool	   *inserted;
	int64	   *job_ids;

	batch_column(fcinfo, 0, "owner_ids", "owner_id", TEXTOID, false, &columns[0]);
	batch_column(fcinfo, 1, "idempotency_keys", "idempotency_key", TEXTOID, false, &columns[1]);
	batch_column(fcinfo, 2, "operations", "operation", TEXTOID, false, &columns[2]);
	batch_column(fcinfo, 3, "params", "params", JSONBOID, false, &columns[3]);
	batch_column(fcinfo, 4, "providers", "provider", TEXTOID, false, &columns[4]);
	batch_column(fcinfo, 5, "max_attempts", "max_attempts", INT4OID, true, &columns[5]);
	/* the schedule (absent under the 1.1 definition) */
	batch_column(fcinfo, 6, "run_ats", "run_at", TIMESTAMPTZOID, true, &columns[6]);
	batch_column(fcinfo, 7, "priorities", "priority", INT4OID, true, &columns[7]);
	count = columns[0].count;
	if (count > MAX_BATCH_ROWS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("jobguard.submit_many() takes at most %d requests", MAX_BATCH_ROWS),
				 errdetail("It was given %d.", count),
				 errhint("Submit them in several calls.")));
	for (int c = 1; c < 8; c++)
		if (columns[c].count != count && !(c >= 5 && columns[c].count == -1))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the arrays of jobguard.submit_many() must all have the same length"),
					 errdetail("owner_ids has %d elements, %s %d.", count,
							   columns[c].argname, columns[c].count)));

	/* first, which requests are refused before they reach the table */
	skip = palloc0(sizeof(bool) * Max(count, 1));
	sqlstates = palloc0(sizeof(int) * Max(count, 1));
	messages = palloc0(sizeof(char *) * Max(count, 1));
	attempts_null = palloc(sizeof(bool) * Max(count, 1));
	attempts = palloc0(sizeof(Datum) * Max(count, 1));
	if (priorities->count != -1)
		priority_values = palloc0(sizeof(int16) * Max(count, 1));
	for (int i = 0; i < count; i++)
	{
		attempts_null[i] = max_attempts->count == -1 || max_attempts->nulls[i];
		if (!attempts_null[i])
			attempts[i] = max_attempts->values[i];
		messages[i] = batch_row_problem(columns, max_chars, 5, i, &sqlstates[i]);
		if (messages[i] == NULL &&
			toast_raw_datum_size(columns[3].values[i]) - VARHDRSZ > (Size) max_payload_kb * 1024)
		{
			sqlstates[i] = ERRCODE_PROGRAM_LIMIT_EXCEEDED;
			messages[i] = psprintf("params of request %d is too large (it takes %zu bytes; jobguard.max_payload_size allows %d kB)",
								   i + 1, toast_raw_datum_size(columns[3].values[i]) - VARHDRSZ,
								   max_payload_kb);
		}
		if (messages[i] == NULL && !attempts_null[i] && DatumGetInt32(attempts[i]) < 1)
		{
			sqlstates[i] = ERRCODE_INVALID_PARAMETER_VALUE;
			messages[i] = psprintf("max_attempts of request %d must be at least 1 or null (it is %d)",
								   i + 1, DatumGetInt32(attempts[i]));
		}
		if (messages[i] == NULL && priority_values != NULL && !priorities->nulls[i])
		{
			int32		priority = DatumGetInt32(priorities->values[i]);

			if (priority < PG_INT16_MIN || priority > PG_INT16_MAX)
			{
				sqlstates[i] = ERRCODE_INVALID_PARAMETER_VALUE;
				messages[i] = psprintf("priority of request %d must be %d to %d (it is %d)",
									   i + 1, PG_INT16_MIN, PG_INT16_MAX, priority);
			}
			else
				priority_values[i] = (int16) priority;
		}
		skip[i] = messages[i] != NULL;
	}
	memset(&batch, 0, sizeof(batch));
	batch.count = count;
	/* the request columns: submit_many's arguments 0 to 5 are SubmitColumns */
	StaticAssertStmt(SUBMIT_OWNER_ID == 0 && SUBMIT_IDEMPOTENCY_KEY == 1 &&
					 SUBMIT_OPERATION == 2 && SUBMIT_PARAMS == 3 &&
					 SUBMIT_PROVIDER == 4 && SUBMIT_MAX_ATTEMPTS == 5,
					 "submit_many's first arguments are the submit columns");
	for (int c = 0; c <= SUBMIT_MAX_ATTEMPTS; c++)
	{
		batch.values[c] = columns[c].values;
		batch.nulls[c] = columns[c].nulls;
		batch.arrays[c] = columns[c].count == -1 ? (Datum) 0 : PG_GETARG_DATUM(c);
	}
	batch.values[SUBMIT_MAX_ATTEMPTS] = attempts;
	batch.nulls[SUBMIT_MAX_ATTEMPTS] = attempts_null;
	batch.skip = skip;
	batch.run_ats = run_ats->count == -1 ? NULL : run_ats->values;
	batch.run_ats_null = run_ats->count == -1 ? NULL : run_ats->nulls;
	batch.run_at_array = run_ats->count == -1 ? (Datum) 0 : PG_GETARG_DATUM(6);
	batch.priorities = priority_values;
	batch.priority_array = (Datum) 0;
	if (priority_values != NULL)
	{
		Datum	   *elems = palloc(sizeof(Datum) * Max(count, 1));

		for (int i = 0; i < count; i++)
			elems[i] = Int16GetDatum(priority_values[i]);
		batch.priority_array = PointerGetDatum(construct_array(elems, count, INT2OID,
															   sizeof(int16), true,
															   TYPALIGN_SHORT));
	}

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	scope = CStringGetTextDatum(scopes_submit_scope(GetUserId()));
	inserted = palloc(sizeof(bool) * Max(count, 1));
	job_ids = palloc0(sizeof(int64) * Max(count, 1));
	store_connect(&caller);

	/* then every other request in one pass; those that found a job go on as submit() */
	store_insert_jobs(scope, &batch, inserted, job_ids);
	row_cxt = AllocSetContextCreate(CurrentMemoryContext, "jobguard submit_many row",
									ALLOCSET_DEFAULT_SIZES);
	for (int i = 0; i < count; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(row_cxt);
		Datum		row[5] = {Int32GetDatum(i + 1), (Datum) 0, BoolGetDatum(false)};
		bool		row_nulls[5] = {false, true, false, true, true};
		int			sqlstate = sqlstates[i];
		char	   *message = messages[i];

		if (!skip[i])
		{
			SubmitOutcome outcome = SUBMIT_CREATED;
			SubmitMatch match;
			int64		job_id = job_ids[i];

			if (inserted[i])
			{
				stats_count(STAT_SUBMITS_CREATED);
				stats_gauge_move(GAUGE_NONE, GAUGE_JOBS_PENDING, 1);
				claim_work_ready_at(job_ids[i],
									batch.run_ats != NULL && !batch.run_ats_null[i] ?
									DatumGetTimestampTz(batch.run_ats[i]) :
									GetCurrentTransactionStartTimestamp(),
									priority_values != NULL ? priority_values[i] : 0);
			}
			else
			{
				/*
				 * a job has the key: what submit() would answer, in a
				 * connection of its own, so that what its statements
				 * return is freed with the row instead of at the end of
				 * the call (memory stays flat however many rows replay)
				 */
				SavedIdentity row_caller;
				SubmitSchedule schedule = {0};
				Datum		values[SUBMIT_COLUMN_COUNT] = {0};
				bool		value_nulls[SUBMIT_COLUMN_COUNT] = {0};

				for (int c = 0; c < SUBMIT_COLUMN_COUNT; c++)
					if (batch.values[c] != NULL)
					{
						values[c] = batch.values[c][i];
						value_nulls[c] = batch.nulls[c] != NULL && batch.nulls[c][i];
					}
				if (batch.run_ats != NULL && !batch.run_ats_null[i])
				{
					schedule.has_run_at = true;
					schedule.run_at = batch.run_ats[i];
				}
				if (priority_values != NULL)
					schedule.priority = priority_values[i];
				store_connect(&row_caller);
				outcome = submit_one(scope, values, value_nulls, &schedule, &job_id, &match);
				store_finish(&row_caller);
			}
			row[1] = Int64GetDatum(job_id);
			row_nulls[1] = false;
			row[2] = BoolGetDatum(outcome == SUBMIT_CREATED);
			if (outcome == SUBMIT_KEY_REUSED)
			{
				sqlstate = ERRCODE_JG_IDEMPOTENCY_KEY_REUSED;
				message = psprintf("%s: job %lld was submitted with this key; this request differs in %s",
								   key_reused_message(columns[0].values[i], columns[1].values[i]),
								   (long long) job_id, describe_mismatch(&match));
			}
		}
		if (message != NULL)
		{
			row[3] = CStringGetTextDatum(unpack_sql_state(sqlstate));
			row[4] = CStringGetTextDatum(message);
			row_nulls[3] = row_nulls[4] = false;
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, row_nulls);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_cxt);
	}
	store_finish(&caller);
	return (Datum) 0;
}
