/*-------------------------------------------------------------------------
 *
 * store_admin.c
 *	  The SQL back end of store.h for everything but a job's hot path:
 *	  reading jobs and attempts, defining operations and certifying
 *	  providers, and the upkeep of sweep, purge and stats.
 *
 * None of these has a fast path: they run the statements of store_sql.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "schema_level.h"
#include "scopes.h"
#include "store.h"
#include "metrics.h"
#include "store_sql.h"

/*
 * store_job_state: the derived state of a job (from job_overview) and its
 * scope, kept so that they outlive store_finish().
 */
bool
store_job_state(int64 job_id, char **state, char **scope)
{
	Datum		values[1] = {Int64GetDatum(job_id)};

	if (sql_run(STMT_JOB_STATE, values, NULL) == 0)
		return false;
	*state = store_keep_string(sql_column_text(1));
	if (scope != NULL)
		*scope = store_keep_string(sql_column_text(2));
	return true;
}

/*
 * null_column: set the named column of a row being formed to NULL (a
 * payload the reader may not see).
 */
static void
null_column(TupleDesc desc, const char *name, Datum *columns, bool *nulls)
{
	int			col = SPI_fnumber(desc, name);

	if (col <= 0)
		elog(ERROR, "jobguard: column \"%s\" not found", name);
	columns[col - 1] = (Datum) 0;
	nulls[col - 1] = true;
}

/*
 * store_job_overview: the job_overview row of a job, formed with the
 * function's result descriptor in the caller's memory context; false when
 * there is no such job the reader may read.  params and result are NULL
 * unless the reader may read the scope's payloads.
 */
bool
store_job_overview(int64 job_id, Oid reader, TupleDesc desc, MemoryContext cxt,
				   Datum *row)
{
	Datum		values[1] = {Int64GetDatum(job_id)};
	Datum	   *columns;
	bool	   *nulls;
	bool		payloads;
	char	   *scope;
	MemoryContext old;

	if (sql_run(STMT_JOB_OVERVIEW, values, NULL) == 0)
		return false;
	if (SPI_tuptable->tupdesc->natts != desc->natts)
		elog(ERROR, "jobguard: job_overview has %d columns, jobguard.job() returns %d",
			 SPI_tuptable->tupdesc->natts, desc->natts);
	scope = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
						 SPI_fnumber(SPI_tuptable->tupdesc, "scope"));
	if (scope == NULL || !scopes_may_read(reader, scope, &payloads))
		return false;

	columns = palloc(desc->natts * sizeof(Datum));
	nulls = palloc(desc->natts * sizeof(bool));
	heap_deform_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, columns, nulls);
	if (!payloads)
	{
		null_column(SPI_tuptable->tupdesc, "params", columns, nulls);
		null_column(SPI_tuptable->tupdesc, "result", columns, nulls);
	}

	old = MemoryContextSwitchTo(cxt);
	*row = HeapTupleGetDatum(heap_form_tuple(desc, columns, nulls));
	MemoryContextSwitchTo(old);
	return true;
}

/*
 * store_attempts_of: put the job's attempts, in order, into the
 * materialized result set.  False if there is no such job the reader may
 * read; error and lost_result are NULL unless it may read payloads.
 */
bool
store_attempts_of(int64 job_id, Oid reader, ReturnSetInfo *rsinfo)
{
	Datum		values[1] = {Int64GetDatum(job_id)};
	char	   *job_scope;
	char	   *attempt_scope;
	bool		payloads;
	uint64		n;

	store_id_scopes(job_id, &job_scope, &attempt_scope);
	if (job_scope == NULL || !scopes_may_read(reader, job_scope, &payloads))
		return false;
	n = sql_run(STMT_ATTEMPTS_OF, values, NULL);
	for (uint64 i = 0; i < n; i++)
	{
		TupleDesc	desc = SPI_tuptable->tupdesc;
		Datum	   *columns;
		bool	   *nulls;
		HeapTuple	tuple;

		if (payloads)
		{
			tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
			continue;
		}
		columns = palloc(desc->natts * sizeof(Datum));
		nulls = palloc(desc->natts * sizeof(bool));
		heap_deform_tuple(SPI_tuptable->vals[i], desc, columns, nulls);
		null_column(desc, "error", columns, nulls);
		null_column(desc, "lost_result", columns, nulls);
		tuple = heap_form_tuple(desc, columns, nulls);
		tuplestore_puttuple(rsinfo->setResult, tuple);
	}
	return true;
}

/*
 * store_id_scopes: the scope of the job whose id is id, and the scope of
 * the job of the attempt whose id is id (NULL where there is none), kept
 * to outlive store_finish().
 */
void
store_id_scopes(int64 id, char **job_scope, char **attempt_scope)
{
	Datum		values[1] = {Int64GetDatum(id)};
	char	   *s;

	sql_run(STMT_ID_SCOPES, values, NULL);
	s = sql_column_text(1);
	*job_scope = s ? store_keep_string(s) : NULL;
	s = sql_column_text(2);
	*attempt_scope = s ? store_keep_string(s) : NULL;
}

/*
 * store_define_operation: set or replace an operation's output contract
 * and its retry policy (either part of the policy may be NULL).
 */
void
store_define_operation(Datum operation, Datum contract,
					   Datum retry_backoff, bool retry_backoff_null,
					   Datum retry_backoff_max, bool retry_backoff_max_null)
{
	Datum		values[4] = {operation, contract, retry_backoff, retry_backoff_max};
	char		nulls[4] = {' ', ' ', retry_backoff_null ? 'n' : ' ',
	retry_backoff_max_null ? 'n' : ' '};

	sql_run(STMT_DEFINE_OPERATION, values, nulls);
}

/*
 * store_set_provider_policy: set or replace a provider's policy.  paused
 * NULL keeps the pause as it is; paused given with no value at all
 * changes only the pause (the values stay).  A policy left with no value
 * and not paused is removed.  In a 1.2 database (no pause) 1.2's rule:
 * the values replaced, and with none the policy removed.
 */
void
store_set_provider_policy(Datum provider, Datum dedupes_for, bool dedupes_null,
						  Datum max_in_flight, bool in_flight_null,
						  Datum max_per_second, bool per_second_null,
						  Datum paused, bool paused_null)
{
	bool		no_values = dedupes_null && in_flight_null && per_second_null;
	Datum		values[6] = {provider, dedupes_for, max_in_flight, max_per_second, paused,
	BoolGetDatum(no_values && !paused_null)};
	char		nulls[6] = {' ', dedupes_null ? 'n' : ' ', in_flight_null ? 'n' : ' ',
	per_second_null ? 'n' : ' ', paused_null ? 'n' : ' ', ' '};

	if (!schema_is_1_3())
		sql_run(no_values ? STMT_DROP_PROVIDER_POLICY : STMT_SET_PROVIDER_POLICY, values, nulls);
	else
	{
		sql_run(STMT_SET_PROVIDER_POLICY, values, nulls);
		sql_run(STMT_DROP_PROVIDER_POLICY, values, NULL);
	}
}

/*
 * store_certification_versions: the contract version a provider's live
 * (not revoked) certification for an operation was earned under, and the
 * operation's current one (either NULL: none); false when there is no
 * live certification.  Only asked to explain a refusal (JG004).
 */
bool
store_certification_versions(const char *operation, const char *provider,
							 int64 *certified_under, bool *certified_null,
							 int64 *current, bool *current_null)
{
	Datum		values[2] = {CStringGetTextDatum(operation), CStringGetTextDatum(provider)};

	if (!schema_is_1_3() || sql_run(STMT_CERTIFICATION_VERSIONS, values, NULL) == 0)
		return false;
	*certified_under = sql_column_int64(1, certified_null);
	*current = sql_column_int64(2, current_null);
	return true;
}

/*
 * store_set_failover: set or replace an operation's failover route
 * (providers, a text[]), or remove it.
 */
void
store_set_failover(Datum operation, Datum providers, bool remove, int32 after_failures)
{
	Datum		values[3] = {operation, providers, Int32GetDatum(after_failures)};

	if (remove)
		sql_run(STMT_DROP_FAILOVER, values, NULL);
	else
		sql_run(STMT_SET_FAILOVER, values, NULL);
}

/*
 * store_provider_key: an attempt's provider key and its job's scope (in
 * the caller's context: they outlive store_finish()); false when there is
 * no such attempt.
 */
bool
store_provider_key(int64 attempt_id, char **provider_key, char **scope)
{
	Datum		values[1] = {Int64GetDatum(attempt_id)};

	if (sql_run(STMT_PROVIDER_KEY, values, NULL) == 0)
		return false;
	*provider_key = store_keep_string(sql_column_text(1));
	*scope = store_keep_string(sql_column_text(2));
	return true;
}

/* store_certify_provider: certify a provider, or renew its certification. */
void
store_certify_provider(Datum operation, Datum provider,
					   Datum evidence, bool evidence_null)
{
	Datum		values[3] = {operation, provider, evidence};
	char		nulls[3] = {' ', ' ', evidence_null ? 'n' : ' '};

	sql_run(STMT_CERTIFY_PROVIDER, values, nulls);
}

/* store_revoke_provider: revoke a certification; false if none was active. */
bool
store_revoke_provider(Datum operation, Datum provider)
{
	Datum		values[2] = {operation, provider};

	return sql_run(STMT_REVOKE_PROVIDER, values, NULL) > 0;
}

/*
 * store_operation_contract: the output contract of an operation and its
 * version; false when the operation has none.
 */
bool
store_operation_contract(Datum operation, int64 *version, Datum *contract)
{
	Datum		values[1] = {operation};
	bool		isnull;

	if (sql_run(STMT_OPERATION_CONTRACT, values, NULL) == 0)
		return false;
	*version = sql_column_int64(1, &isnull);
	*contract = sql_column_value(2, &isnull);
	return true;
}

/*
 * store_fresh_job_state: a job's derived state (and scope) read with a fresh snapshot,
 * so that it sees what this call wrote and what other sessions committed
 * meanwhile (a waiting call needs both).
 */
bool
store_fresh_job_state(int64 job_id, char **state, char **scope)
{
	Datum		values[1] = {Int64GetDatum(job_id)};

	if (sql_run(STMT_FRESH_JOB_STATE, values, NULL) == 0)
		return false;
	*state = store_keep_string(sql_column_text(1));
	if (scope != NULL)
		*scope = store_keep_string(sql_column_text(2));
	return true;
}

/*
 * store_sweep_overdue: mark up to batch_size overdue attempts unknown, and
 * move the state gauges with them (their open jobs go from running to
 * unknown).  Returns how many it marked.
 */
uint64
store_sweep_overdue(int batch_size)
{
	Datum		values[1] = {Int32GetDatum(batch_size)};
	bool		isnull;
	int64		marked;
	int64		open_jobs;

	sql_run(STMT_SWEEP_OVERDUE, values, NULL);
	marked = sql_column_int64(1, &isnull);
	open_jobs = sql_column_int64(2, &isnull);
	stats_gauge_move(GAUGE_ATTEMPT(ATTEMPT_STARTED), GAUGE_ATTEMPT(ATTEMPT_UNKNOWN), marked);
	stats_gauge_move(GAUGE_JOBS_RUNNING, GAUGE_JOBS_UNKNOWN, open_jobs);
	stats_add(STAT_SWEPT, marked);
	return (uint64) marked;
}

/*
 * count_purged: move the state gauges for one purged page: its deleted
 * jobs by state (columns 2, 4, 5: all, succeeded, cancelled; failed is
 * the rest) and their attempts (column 6: cancelled, succeeded, lost,
 * failed).
 */
static void
count_purged(int64 deleted)
{
	static const AttemptState attempt_states[4] = {ATTEMPT_CANCELLED, ATTEMPT_SUCCEEDED,
	ATTEMPT_LOST, ATTEMPT_FAILED};
	bool		isnull;
	int64		succeeded = sql_column_int64(4, &isnull);
	int64		cancelled = sql_column_int64(5, &isnull);
	Datum		counts = sql_column_value(6, &isnull);

	stats_gauge_move(GAUGE_JOBS_SUCCEEDED, GAUGE_NONE, succeeded);
	stats_gauge_move(GAUGE_JOBS_CANCELLED, GAUGE_NONE, cancelled);
	stats_gauge_move(GAUGE_JOBS_FAILED, GAUGE_NONE, deleted - succeeded - cancelled);
	stats_add(STAT_PURGED, deleted);
	if (!isnull)
	{
		Datum	   *elems;
		bool	   *nulls;
		int			n;

		deconstruct_array(DatumGetArrayTypeP(counts), INT8OID, 8, FLOAT8PASSBYVAL,
						  TYPALIGN_DOUBLE, &elems, &nulls, &n);
		for (int i = 0; i < n && i < 4; i++)
			if (!nulls[i])
				stats_gauge_move(GAUGE_ATTEMPT(attempt_states[i]), GAUGE_NONE,
								 DatumGetInt64(elems[i]));
	}
}

/*
 * store_purge_page: one page of purge: look at the next batch_size jobs
 * after id *after, in id order, and delete the ones terminal since before
 * cutoff (of operation only, when it is not NULL), with their attempts.  Advances *after to the page's last id and
 * adds what it deleted to *deleted.  Returns false when there is nothing
 * more to look at: no job after this page, or the page holds a job created
 * after the cut-off (ids grow with creation time, and a job created later
 * cannot have ended earlier).
 */
bool
store_purge_page(TimestampTz cutoff, int batch_size, const char *operation,
				 int64 *after, int64 *deleted)
{
	Datum		values[4] = {TimestampTzGetDatum(cutoff), Int64GetDatum(*after),
		Int32GetDatum(batch_size), operation ? CStringGetTextDatum(operation) : (Datum) 0};
	char		nulls[4] = {' ', ' ', ' ', operation ? ' ' : 'n'};
	bool		isnull;
	int64		last;
	int64		gone;

	sql_run(STMT_PURGE_PAGE, values, nulls);
	last = sql_column_int64(1, &isnull);
	if (isnull)
		return false;			/* no jobs after this page */
	*after = last;
	gone = sql_column_int64(2, &isnull);
	if (gone > 0)
	{
		*deleted += gone;
		count_purged(gone);
	}
	return DatumGetTimestampTz(sql_column_value(3, &isnull)) < cutoff;
}

/*
 * store_purge: delete jobs terminal since before cutoff, with their
 * attempts, page after page of batch_size jobs (store_purge_page).  Only
 * jobs of operation, when it is not NULL.  Returns how many jobs were
 * deleted.
 */
int64
store_purge(TimestampTz cutoff, int batch_size, const char *operation)
{
	int64		after = 0;
	int64		deleted = 0;

	while (store_purge_page(cutoff, batch_size, operation, &after, &deleted))
		CHECK_FOR_INTERRUPTS();
	return deleted;
}

/*
 * store_stored_state_counts: count jobs and attempts per stored state, in
 * Gauge order, with one scan of each table (a gauge recount).
 */
void
store_stored_state_counts(int64 *counts)
{
	uint64		n = sql_run(STMT_STORED_STATE_COUNTS, NULL, NULL);

	for (uint64 i = 0; i < n && i < GAUGE_COUNT; i++)
	{
		bool		isnull;

		counts[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
												2, &isnull));
	}
}

/*
 * store_stored_job_state: a job's state from the stored attempt states (a
 * started attempt past its deadline still counts as running), with a fresh
 * snapshot; false when the job does not exist.  This is the rule of
 * STORED_JOB_STATE_SQL (store_sql.c), which the suite derived_states
 * checks against jobguard.job_overview's.
 */
bool
store_stored_job_state(int64 job_id, char **state)
{
	Datum		values[1] = {Int64GetDatum(job_id)};

	if (sql_run(STMT_STORED_JOB_STATE, values, NULL) == 0)
		return false;
	*state = sql_column_text(1);
	return true;
}

/*
 * store_stored_job_gauge: the gauge a job counts in right now (its state
 * from the stored states, fresh snapshot), or GAUGE_NONE when it does not
 * exist.
 */
int
store_stored_job_gauge(int64 job_id)
{
	char	   *state;

	if (!store_stored_job_state(job_id, &state))
		return GAUGE_NONE;
	return stats_job_gauge_of(state);
}

/*
 * store_retentions: the operations whose key policy has a retention, and
 * the cut-off of each now (now() - retention), allocated in memory context
 * into so that they may outlive the transaction.  Returns how many.
 */
int
store_retentions(MemoryContext into, char ***operations, TimestampTz **cutoffs)
{
	uint64		n = sql_run(STMT_RETENTIONS, NULL, NULL);

	*operations = MemoryContextAlloc(into, sizeof(char *) * (n + 1));
	*cutoffs = MemoryContextAlloc(into, sizeof(TimestampTz) * (n + 1));
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		(*operations)[i] = MemoryContextStrdup(into, SPI_getvalue(SPI_tuptable->vals[i],
																  SPI_tuptable->tupdesc, 1));
		(*cutoffs)[i] = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, 2, &isnull));
	}
	return (int) n;
}

/*
 * store_purge_by_retention: purge each operation's terminal jobs older
 * than its key policy's retention.  Returns how many jobs were deleted.
 */
int64
store_purge_by_retention(int batch_size)
{
	char	  **operations;
	TimestampTz *cutoffs;
	int			n = store_retentions(CurrentMemoryContext, &operations, &cutoffs);
	int64		deleted = 0;

	for (int i = 0; i < n; i++)
		deleted += store_purge(cutoffs[i], batch_size, operations[i]);
	return deleted;
}

/*
 * store_state_counts: put a (metric, value) row per job and attempt state
 * into the materialized result set.
 */
void
store_state_counts(ReturnSetInfo *rsinfo)
{
	uint64		n = sql_run(STMT_STATE_COUNTS, NULL, NULL);

	for (uint64 i = 0; i < n; i++)
		tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
}

/*
 * store_invariant_violations: the violated invariants of the jobs in the
 * scopes the reader may read (invariant_violations() without its scope
 * column), into the materialized result set.
 */
void
store_invariant_violations(Oid reader, ReturnSetInfo *rsinfo)
{
	uint64		n = sql_run(STMT_INVARIANT_VIOLATIONS, NULL, NULL);

	for (uint64 i = 0; i < n; i++)
	{
		Datum		columns[5];
		bool		nulls[5];

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, columns, nulls);
		if (!nulls[4] &&
			!scopes_allow(reader, SCOPE_READ, TextDatumGetCString(columns[4])))
			continue;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, columns, nulls);
	}
}
