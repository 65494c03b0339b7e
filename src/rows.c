/*-------------------------------------------------------------------------
 *
 * rows.c
 *	  The hot path's reads and writes, done through the table access method
 *	  and the indexes directly instead of through SQL statements.
 *
 * submit, begin_attempt and finish_attempt each run one or two statements
 * in the SQL back end.  Through SPI every statement pays for executor
 * start-up, and
 * every INSERT and UPDATE re-reads and re-plans the table's CHECK
 * constraints; that was most of what a call cost.  The functions here do
 * the same reads and writes with the same concurrency rules, without that:
 *
 *  - reads are index look-ups with the snapshot a statement would take
 *    (a fresh one under READ COMMITTED, the transaction's otherwise);
 *  - inserts are speculative insertions, as INSERT ... ON CONFLICT DO
 *    NOTHING makes them, with the arbiter indexes the planner would infer:
 *    a concurrent inserter of the same key is waited for, and a conflict
 *    inserts nothing;
 *  - a write first checks what the executor checks when a statement starts
 *    (CheckValidResultRel: a published table's replica identity);
 *  - updates are conditional, as UPDATE ... WHERE makes them: a row changed
 *    concurrently is locked in its newest version and the condition is
 *    checked again under READ COMMITTED, and is a serialization failure
 *    under REPEATABLE READ and SERIALIZABLE;
 *  - every rule of the table still holds: the columns' defaults, NOT
 *    NULL, the columns' domains, the CHECK constraints (planned once per
 *    backend instead of once per statement, unless they call a user's
 *    function: see TableRules), unique and partial indexes, and the
 *    foreign key from an attempt to its job (its job row is locked FOR KEY
 *    SHARE, as the foreign key's trigger would;
 *    the lock is taken before the insert, and a job deleted meanwhile is
 *    refused as missing, JG008, rather than with the foreign key's 23503).
 *
 * Nothing here decides anything: store_dispatch.c calls these functions
 * (fast_path_backend, store_backend.h) in place of the SQL back end's
 * statements, after rows_usable() (src/rows_catalog.c) said the tables
 * hold nothing these functions would skip, and they return the same
 * answers.  What they know of the tables — OIDs, indexes, attribute
 * numbers, compiled rules — comes from rows_catalog.c too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation_d.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/typcache.h"

#include "fastpath.h"

/* The job column each of a submit's values goes to, by SubmitColumn. */
static const JobColumn submit_job_column[SUBMIT_COLUMN_COUNT] = {SUBMIT_COLUMN_JOB_COLUMNS};
/* Each one's type and role (store_columns.h), by SubmitColumn. */
static const Oid submit_column_type[SUBMIT_COLUMN_COUNT] = {SUBMIT_COLUMN_TYPES};
static const SubmitRole submit_column_role[SUBMIT_COLUMN_COUNT] = {SUBMIT_COLUMN_ROLES};

/*
 * insert_job: store_insert_job() without SQL: INSERT ... ON CONFLICT
 * (scope, owner_id, idempotency_key) DO NOTHING.  As in SQL, the id is
 * drawn from the sequence before the conflict check, so a replay leaves a
 * gap.
 */
static bool
insert_job(const SubmitRequest *req, int64 *job_id)
{
	RowsCatalog *cat = rows_active_catalog();
	const AttrNumber *a = cat->job_att;
	RowWriter	w;
	Snapshot	snap = rows_begin_statement();
	bool		inserted;

	rows_writer_open(&w, cat->jobs, &cat->job_rules, CMD_INSERT);
	rows_new_row_start(&w);
	for (int c = 0; c < SUBMIT_COLUMN_COUNT; c++)
		rows_set(&w, a[submit_job_column[c]], req->values[c], req->nulls[c]);
	/* the schedule: run_at into not_before, the priority */
	if (submit_is_scheduled(req))
	{
		rows_set(&w, a[JOB_NOT_BEFORE], req->run_at, !req->has_run_at);
		rows_set(&w, a[JOB_PRIORITY], Int16GetDatum(req->priority), false);
	}
	/* id, version and created_at (and an unset schedule): the defaults, as in SQL */
	inserted = rows_insert_unless_conflict(&w, cat->jobs_arbiters, snap);
	if (inserted)
		*job_id = DatumGetInt64(w.new_row->tts_values[a[JOB_ID] - 1]);
	rows_writer_close(&w);
	rows_end_statement();
	return inserted;
}

/*
 * insert_jobs: store_insert_jobs() without SQL: one INSERT ... ON CONFLICT
 * DO NOTHING of many rows, as a multi-row INSERT makes it — one writer,
 * one statement snapshot, the rows in order, so that a later row with the
 * key of an earlier one conflicts with it.
 */
static void
insert_jobs(Datum scope, const JobBatch *batch, bool *inserted, int64 *job_ids)
{
	RowsCatalog *cat = rows_active_catalog();
	const AttrNumber *a = cat->job_att;
	RowWriter	w;
	Snapshot	snap = rows_begin_statement();

	rows_writer_open(&w, cat->jobs, &cat->job_rules, CMD_INSERT);
	for (int i = 0; i < batch->count; i++)
	{
		inserted[i] = false;
		if (batch->skip[i])
			continue;
		CHECK_FOR_INTERRUPTS();
		rows_new_row_start(&w);
		for (int c = 0; c < SUBMIT_COLUMN_COUNT; c++)
		{
			if (submit_column_role[c] == SUBMIT_ROLE_SCOPE)
				rows_set(&w, a[submit_job_column[c]], scope, false);
			else if (batch->values[c] == NULL)
				rows_set(&w, a[submit_job_column[c]], (Datum) 0, true);
			else
				rows_set(&w, a[submit_job_column[c]], batch->values[c][i],
						 batch->nulls[c] != NULL && batch->nulls[c][i]);
		}
		if (batch->run_ats != NULL)
			rows_set(&w, a[JOB_NOT_BEFORE], batch->run_ats[i], batch->run_ats_null[i]);
		if (batch->priorities != NULL)
			rows_set(&w, a[JOB_PRIORITY], Int16GetDatum(batch->priorities[i]), false);
		inserted[i] = rows_insert_unless_conflict(&w, cat->jobs_arbiters, snap);
		if (inserted[i])
			job_ids[i] = DatumGetInt64(w.new_row->tts_values[a[JOB_ID] - 1]);
		ResetPerTupleExprContext(w.estate);
	}
	rows_writer_close(&w);
	rows_end_statement();
}

/*
 * requested_max_attempts: the max_attempts a job was submitted with.
 * retry_job raises the stored one, and records in retries (a jsonb array)
 * each raise's max_attempts_before: the first is the request's, which a
 * replay is compared with (as STMT_MATCH_JOB does).
 */
static int32
requested_max_attempts(Datum retries, int32 stored)
{
	Jsonb	   *jb = DatumGetJsonbP(retries);
	JsonbValue *first;
	JsonbValue	field;

	if (!JB_ROOT_IS_ARRAY(jb) ||
		(first = getIthJsonbValueFromContainer(&jb->root, 0)) == NULL ||
		first->type != jbvBinary ||
		getKeyJsonValueFromContainer(first->val.binary.data, "max_attempts_before",
									 strlen("max_attempts_before"), &field) == NULL ||
		field.type != jbvNumeric)
		return stored;
	return DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(field.val.numeric)));
}

/*
 * same_value: whether a stored value equals a request's under the type's
 * "=" (NULL equal to NULL), as STMT_MATCH_JOB compares them.
 */
static bool
same_value(Oid type, Datum stored, bool stored_null, Datum given, bool given_null)
{
	TypeCacheEntry *tc;

	if (stored_null || given_null)
		return stored_null && given_null;
	tc = lookup_type_cache(type, TYPECACHE_EQ_OPR_FINFO);
	if (!OidIsValid(tc->eq_opr_finfo.fn_oid))
		elog(ERROR, "jobguard: type %u has no equality operator", type);
	return DatumGetBool(FunctionCall2Coll(&tc->eq_opr_finfo, DEFAULT_COLLATION_OID,
										  stored, given));
}

/*
 * match_job: store_match_job() without SQL: the job for the key,
 * compared with the request in each COMPARED column with the types'
 * equality.  max_attempts is compared as submitted (requested_max_attempts).
 */
static bool
match_job(const SubmitRequest *req, SubmitMatch *match)
{
	RowsCatalog *cat = rows_active_catalog();
	const AttrNumber *a = cat->job_att;
	Snapshot	snap = rows_begin_statement();
	Relation	jobs = table_open(cat->jobs, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(jobs, NULL);
	Datum		key[3] = {req->values[SUBMIT_SCOPE], req->values[SUBMIT_OWNER_ID],
	req->values[SUBMIT_IDEMPOTENCY_KEY]};
	RegProcedure procs[3] = {F_TEXTEQ, F_TEXTEQ, F_TEXTEQ};
	bool		found;

	found = rows_fetch_by_key(jobs, cat->jobs_owner_key, 3, key, procs,
						 ForwardScanDirection, snap, slot);
	if (found)
	{
		bool		isnull;

		match->job_id = rows_col_int64(slot, a[JOB_ID], &isnull);
		for (int c = 0; c < SUBMIT_COLUMN_COUNT; c++)
		{
			Datum		stored;

			match->same[c] = true;
			if (!submit_role_compared(submit_column_role[c]))
				continue;
			stored = rows_col(slot, a[submit_job_column[c]], &isnull);
			if (submit_column_role[c] == SUBMIT_ROLE_AS_SUBMITTED && !isnull)
			{
				bool		no_retries;
				Datum		retries = rows_col(slot, a[JOB_RETRIES], &no_retries);

				if (!no_retries)
					stored = Int32GetDatum(requested_max_attempts(retries,
																  DatumGetInt32(stored)));
			}
			match->same[c] = same_value(submit_column_type[c], stored, isnull,
										req->values[c], req->nulls[c]);
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	table_close(jobs, NoLock);
	rows_end_statement();
	return found;
}

/*
 * in_scope: whether the job row in slot belongs to scope (NULL: any scope
 * does), as the SQL statements' "j.scope = $n" says.
 */
static bool
in_scope(RowsCatalog *cat, TupleTableSlot *slot, const char *scope)
{
	if (scope == NULL)
		return true;
	return strcmp(rows_col_text(slot, cat->job_att[JOB_SCOPE]), scope) == 0;
}

/*
 * read_job: the job row for begin_attempt's gate, visible to snap; false
 * if there is none in the scope (NULL: any).
 */
static bool
read_job(RowsCatalog *cat, Relation jobs, int64 job_id, const char *scope,
		 Snapshot snap, TupleTableSlot *slot, JobRow *job)
{
	const AttrNumber *a = cat->job_att;
	bool		isnull;
	Datum		d;

	if (!rows_fetch_by_id(jobs, cat->jobs_pkey, job_id, snap, slot) ||
		!in_scope(cat, slot, scope))
		return false;
	job->id = job_id;
	job->operation = rows_col_text(slot, a[JOB_OPERATION]);
	job->provider = rows_col_text(slot, a[JOB_PROVIDER]);
	d = rows_col(slot, a[JOB_MAX_ATTEMPTS], &isnull);
	job->has_max_attempts = !isnull;
	job->max_attempts = isnull ? 0 : DatumGetInt32(d);
	job->version = rows_col_int64(slot, a[JOB_VERSION], &isnull);
	job->completed_by = rows_col_int64(slot, a[JOB_COMPLETED_BY], &isnull);
	job->completed = !isnull;
	(void) rows_col(slot, a[JOB_CANCELLED_AT], &isnull);
	job->cancelled = !isnull;
	return true;
}

/*
 * read_attempt: fill an AttemptRow from a fetched attempts row, with the
 * effective state (started past its deadline is unknown, as
 * jobguard.attempt_state() says).
 */
static void
read_attempt(RowsCatalog *cat, TupleTableSlot *slot, AttemptRow *attempt)
{
	const AttrNumber *a = cat->attempt_att;
	bool		isnull;

	attempt->id = rows_col_int64(slot, a[ATT_ID], &isnull);
	attempt->job_id = rows_col_int64(slot, a[ATT_JOB_ID], &isnull);
	attempt->attempt_no = DatumGetInt32(rows_col(slot, a[ATT_ATTEMPT_NO], &isnull));
	attempt->provider = rows_col_text(slot, a[ATT_PROVIDER]);
	attempt->stored_state = attempt_state_from_name(rows_col_text(slot, a[ATT_STATE]));
	attempt->read_version = rows_col_int64(slot, a[ATT_READ_VERSION], &isnull);
	attempt->deadline = DatumGetTimestampTz(rows_col(slot, a[ATT_DEADLINE], &isnull));
	attempt->attempt_key = rows_col_text(slot, a[ATT_ATTEMPT_KEY]);
	attempt->lost_result = rows_col_varlena_copy(slot, a[ATT_LOST_RESULT], &isnull);
	attempt->state = attempt_effective_state(attempt->stored_state, attempt->deadline,
											 GetCurrentTransactionStartTimestamp());
}

/*
 * current_contract_version: the operation's contract_version in snap, 0
 * when it has none (no version is 0: they come from a sequence from 1).
 */
static int64
current_contract_version(RowsCatalog *cat, const char *operation, Snapshot snap)
{
	Relation	operations = table_open(cat->operations, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(operations, NULL);
	Datum		key[1] = {CStringGetTextDatum(operation)};
	RegProcedure procs[1] = {F_TEXTEQ};
	int64		version = 0;
	bool		isnull;

	if (rows_fetch_by_key(operations, cat->operations_pkey, 1, key, procs,
						  ForwardScanDirection, snap, slot))
		version = rows_col_int64(slot, cat->op_att[OP_CONTRACT_VERSION], &isnull);
	ExecDropSingleTupleTableSlot(slot);
	table_close(operations, NoLock);
	return version;
}

/*
 * is_certified: a certification of provider for operation that counts, in
 * snap, as CERT_LIVE_1_3 of store_sql.c says: not revoked, and (in a 1.3
 * database) earned under the operation's current contract version.
 */
static bool
is_certified(RowsCatalog *cat, const char *operation, const char *provider,
			 Snapshot snap)
{
	Relation	certs = table_open(cat->certifications, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(certs, NULL);
	Datum		key[2] = {CStringGetTextDatum(operation), CStringGetTextDatum(provider)};
	RegProcedure procs[2] = {F_TEXTEQ, F_TEXTEQ};
	bool		certified = false;
	bool		isnull;

	if (rows_fetch_by_key(certs, cat->certifications_pkey, 2, key, procs,
					 ForwardScanDirection, snap, slot))
	{
		(void) rows_col(slot, cat->cert_att[CERT_REVOKED_AT], &isnull);
		certified = isnull;
		if (certified && cat->cert_version_att != InvalidAttrNumber)
		{
			int64		earned_under = rows_col_int64(slot, cat->cert_version_att, &isnull);

			certified = (isnull ? 0 : earned_under) ==
				current_contract_version(cat, operation, snap);
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	table_close(certs, NoLock);
	return certified;
}

/*
 * lock_job_for_key_share: what the attempts → jobs foreign key checks on
 * insert: the job row still exists, locked FOR KEY SHARE so that it cannot
 * be deleted before this transaction ends.  Returns false if it is gone.
 */
static bool
lock_job_for_key_share(Relation jobs, TupleTableSlot *slot, Snapshot snap)
{
	ItemPointerData tid = slot->tts_tid;
	TM_FailureData tmfd;
	int			flags = TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS;
	TM_Result	result;

	if (!IsolationUsesXactSnapshot())
		flags |= TUPLE_LOCK_FLAG_FIND_LAST_VERSION;
	result = table_tuple_lock(jobs, &tid, snap, slot, GetCurrentCommandId(true),
							  LockTupleKeyShare, LockWaitBlock, flags, &tmfd);
	switch (result)
	{
		case TM_Ok:
			return true;
		case TM_Deleted:
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent update")));
			return false;
		case TM_Updated:
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent update")));
			/* following the newest version, READ COMMITTED never gets here */
			break;
		default:
			break;
	}
	elog(ERROR, "jobguard: unexpected result %d locking job row", (int) result);
	return false;
}

/*
 * same_provider_key: the provider key of a new attempt of the job against
 * provider, as STMT_BEGIN_ATTEMPT computes it: the key of the latest
 * attempt against that provider unless it failed, else a new one.  The
 * attempts are read backwards from number last_no, by the unique index on
 * (job_id, attempt_no); usually the first one read decides.
 */
static Datum
same_provider_key(RowsCatalog *cat, Relation attempts, int64 job_id, int32 last_no,
				  const char *provider, Snapshot snap)
{
	const AttrNumber *a = cat->attempt_att;
	RegProcedure procs[2] = {F_INT8EQ, F_INT4EQ};
	TupleTableSlot *slot = table_slot_create(attempts, NULL);
	Datum		result = (Datum) 0;

	for (int32 n = last_no; n >= 1; n--)
	{
		Datum		key[2] = {Int64GetDatum(job_id), Int32GetDatum(n)};
		bool		isnull;
		Datum		found_key;

		if (!rows_fetch_by_key(attempts, cat->attempts_job_attempt_no, 2, key, procs,
							   ForwardScanDirection, snap, slot))
			continue;
		if (strcmp(rows_col_text(slot, a[ATT_PROVIDER]), provider) != 0)
			continue;
		if (attempt_state_from_name(rows_col_text(slot, a[ATT_STATE])) == ATTEMPT_FAILED)
			break;
		found_key = rows_col(slot, a[ATT_PROVIDER_KEY], &isnull);
		if (!isnull)
			result = PointerGetDatum(PG_DETOAST_DATUM_COPY(found_key));
		break;
	}
	ExecDropSingleTupleTableSlot(slot);
	return result != (Datum) 0 ? result : provider_key_new();
}

/*
 * begin_attempt: store_begin_attempt() without SQL, with the same
 * gate: the job open, its latest attempt closed, attempts left, a fallback
 * provider certified; then the insert, decided by the partial unique index
 * on open attempts when two begins race.  Returns the new attempt's id, or
 * 0 when refused.
 */
static int64
begin_attempt(const BeginRequest *req)
{
	RowsCatalog *cat = rows_active_catalog();
	const AttrNumber *a = cat->attempt_att;
	Snapshot	snap = rows_begin_statement();
	Relation	jobs = table_open(cat->jobs, RowShareLock);
	TupleTableSlot *job_slot = table_slot_create(jobs, NULL);
	RowWriter	w;
	JobRow		job;
	int32		last_no = 0;
	int32		last_tries = 0;
	bool		open = true;
	int64		id = 0;

	rows_writer_open(&w, cat->attempts, &cat->attempt_rules, CMD_INSERT);
	if (read_job(cat, jobs, req->job_id, req->scope, snap, job_slot, &job) &&
		!job.completed && !job.cancelled)
	{
		RegProcedure proc = F_INT8EQ;
		Datum		key = Int64GetDatum(req->job_id);
		const char *wanted = req->provider_null ? NULL : TextDatumGetCString(req->provider);

		open = false;
		if (rows_fetch_by_key(w.rel, cat->attempts_job_attempt_no, 1, &key, &proc,
						 BackwardScanDirection, snap, w.old_row))
		{
			bool		isnull;
			AttemptState last_state = attempt_state_from_name(rows_col_text(w.old_row, a[ATT_STATE]));

			last_no = DatumGetInt32(rows_col(w.old_row, a[ATT_ATTEMPT_NO], &isnull));
			last_tries = DatumGetInt32(rows_col(w.old_row, a[ATT_TRIES], &isnull));
			if (isnull)
				last_tries = last_no;	/* 1.1's attempts: every one counted */
			open = attempt_state_is_open(last_state);
		}
		if (!open &&
			(!job.has_max_attempts || last_tries < job.max_attempts) &&
			(wanted == NULL || strcmp(wanted, job.provider) == 0 ||
			 is_certified(cat, job.operation, wanted, snap)) &&
			lock_job_for_key_share(jobs, job_slot, snap))
		{
			Datum		now = req->started_at != 0 ? TimestampTzGetDatum(req->started_at) : rows_now();
			const char *provider = wanted != NULL ? wanted : job.provider;
			Datum		provider_key = same_provider_key(cat, w.rel, req->job_id, last_no,
														 provider, snap);

			rows_new_row_start(&w);
			rows_set(&w, a[ATT_JOB_ID], Int64GetDatum(req->job_id), false);
			rows_set(&w, a[ATT_ATTEMPT_NO], Int32GetDatum(last_no + 1), false);
			rows_set(&w, a[ATT_PROVIDER], req->provider_null ? CStringGetTextDatum(job.provider) : req->provider, false);
			rows_set(&w, a[ATT_STATE], CStringGetTextDatum(attempt_state_name(ATTEMPT_STARTED)), false);
			rows_set(&w, a[ATT_READ_VERSION], Int64GetDatum(job.version), false);
			rows_set(&w, a[ATT_ATTEMPT_KEY], req->attempt_key, req->attempt_key_null);
			rows_set(&w, a[ATT_STARTED_AT], now, false);
			rows_set(&w, a[ATT_DEADLINE], DirectFunctionCall2(timestamptz_pl_interval, now, req->timeout), false);
			rows_set(&w, a[ATT_WORKER], req->worker, req->worker_null);
			rows_set(&w, a[ATT_TIMEOUT], req->timeout, false);
			rows_set(&w, a[ATT_PROVIDER_KEY], provider_key, false);
			rows_set(&w, a[ATT_TRIES], Int32GetDatum(last_tries + 1), false);
			/* id: the column's default, as in SQL */
			if (rows_insert_unless_conflict(&w, NIL, snap))
				id = DatumGetInt64(w.new_row->tts_values[a[ATT_ID] - 1]);
		}
	}
	rows_writer_close(&w);
	ExecDropSingleTupleTableSlot(job_slot);
	table_close(jobs, NoLock);
	rows_end_statement();
	return id;
}

/*
 * read_for_finish: store_read_for_finish() without SQL: the attempt,
 * its job and its operation's contract, in one snapshot, without locks.
 */
static bool
read_for_finish(int64 attempt_id, const char *scope, AttemptRow *attempt, FinishJob *job)
{
	RowsCatalog *cat = rows_active_catalog();
	Snapshot	snap = rows_begin_statement();
	Relation	attempts = table_open(cat->attempts, AccessShareLock);
	Relation	jobs = table_open(cat->jobs, AccessShareLock);
	Relation	operations = table_open(cat->operations, AccessShareLock);
	TupleTableSlot *attempt_slot = table_slot_create(attempts, NULL);
	TupleTableSlot *job_slot = table_slot_create(jobs, NULL);
	TupleTableSlot *op_slot = table_slot_create(operations, NULL);
	bool		found;
	bool		isnull;

	found = rows_fetch_by_id(attempts, cat->attempts_pkey, attempt_id, snap, attempt_slot);
	if (found)
	{
		read_attempt(cat, attempt_slot, attempt);
		/* the foreign key keeps the job; its row is there */
		if (!rows_fetch_by_id(jobs, cat->jobs_pkey, attempt->job_id, snap, job_slot))
			elog(ERROR, "jobguard: job %lld of attempt %lld not found",
				 (long long) attempt->job_id, (long long) attempt_id);
		found = in_scope(cat, job_slot, scope);
	}
	if (found)
	{
		job->operation = rows_col_text(job_slot, cat->job_att[JOB_OPERATION]);
		job->completed_by = rows_col_int64(job_slot, cat->job_att[JOB_COMPLETED_BY], &isnull);
		job->completed = !isnull;
		job->result = rows_col_varlena_copy(job_slot, cat->job_att[JOB_RESULT], &isnull);
		job->has_contract = false;
		job->contract_version = 0;
		job->contract = (Datum) 0;
		{
			Datum		key = CStringGetTextDatum(job->operation);
			RegProcedure proc = F_TEXTEQ;

			if (rows_fetch_by_key(operations, cat->operations_pkey, 1, &key, &proc,
							 ForwardScanDirection, snap, op_slot))
			{
				job->has_contract = true;
				job->contract_version = rows_col_int64(op_slot, cat->op_att[OP_CONTRACT_VERSION], &isnull);
				job->contract = rows_col_varlena_copy(op_slot, cat->op_att[OP_OUTPUT_CONTRACT], &isnull);
			}
		}
	}
	ExecDropSingleTupleTableSlot(op_slot);
	ExecDropSingleTupleTableSlot(job_slot);
	ExecDropSingleTupleTableSlot(attempt_slot);
	table_close(operations, NoLock);
	table_close(jobs, NoLock);
	table_close(attempts, NoLock);
	rows_end_statement();
	return found;
}

/* What the claim and the compare-and-swap compare and write. */
typedef struct ClaimArgs
{
	RowsCatalog *cat;
	const AttemptRow *attempt;
	Datum		result;
	Datum		now;
} ClaimArgs;

/* claim_condition: the attempt is still in the stored state the finish read. */
static bool
claim_condition(RowWriter *w, void *arg)
{
	ClaimArgs  *c = arg;

	return attempt_state_from_name(rows_col_text(w->old_row, c->cat->attempt_att[ATT_STATE])) ==
		c->attempt->stored_state;
}

/* claim_change: state succeeded, finished now. */
static void
claim_change(RowWriter *w, void *arg)
{
	ClaimArgs  *c = arg;

	rows_set(w, c->cat->attempt_att[ATT_STATE],
		CStringGetTextDatum(attempt_state_name(ATTEMPT_SUCCEEDED)), false);
	rows_set(w, c->cat->attempt_att[ATT_FINISHED_AT], c->now, false);
}

/*
 * swap_condition: the compare of the compare-and-swap: the job is at the
 * version the attempt read when it began, and no attempt holds the slot.
 */
static bool
swap_condition(RowWriter *w, void *arg)
{
	ClaimArgs  *c = arg;
	bool		version_null;
	bool		completed_null;
	int64		version = rows_col_int64(w->old_row, c->cat->job_att[JOB_VERSION], &version_null);

	(void) rows_col(w->old_row, c->cat->job_att[JOB_COMPLETED_BY], &completed_null);
	return !version_null && version == c->attempt->read_version && completed_null;
}

/* swap_change: the swap: the result slot taken, the version bumped. */
static void
swap_change(RowWriter *w, void *arg)
{
	ClaimArgs  *c = arg;
	const AttrNumber *a = c->cat->job_att;
	bool		isnull;
	int64		version = rows_col_int64(w->old_row, a[JOB_VERSION], &isnull);

	rows_set(w, a[JOB_RESULT], c->result, false);
	rows_set(w, a[JOB_COMPLETED_BY], Int64GetDatum(c->attempt->id), false);
	rows_set(w, a[JOB_COMPLETED_AT], c->now, false);
	rows_set(w, a[JOB_VERSION], Int64GetDatum(version + 1), false);
}

/*
 * claim_and_swap: store_claim_and_swap() without SQL, in the same
 * order and with the same conditions: claim the attempt if it is still in
 * the state read, then
 *   UPDATE jobs ... WHERE id = $1 AND version = $2 AND completed_by IS NULL
 * as a conditional update of the job row.
 */
static ClaimOutcome
claim_and_swap(const AttemptRow *attempt, Datum result)
{
	RowsCatalog *cat = rows_active_catalog();
	Snapshot	snap = rows_begin_statement();
	ClaimArgs	args = {cat, attempt, result, rows_now()};
	RowWriter	claim;
	RowWriter	swap;
	ClaimOutcome outcome = CLAIM_CHANGED;

	/* one statement updating both tables: both are checked before either */
	rows_writer_open(&claim, cat->attempts, &cat->attempt_rules, CMD_UPDATE);
	rows_writer_open(&swap, cat->jobs, &cat->job_rules, CMD_UPDATE);
	if (rows_update_if(&claim, cat->attempts_pkey, attempt->id, snap,
				  claim_condition, claim_change, &args))
	{
		outcome = CLAIM_LOST;
		if (rows_update_if(&swap, cat->jobs_pkey, attempt->job_id, snap,
					  swap_condition, swap_change, &args))
			outcome = CLAIM_WON;
	}
	rows_writer_close(&swap);
	rows_writer_close(&claim);
	rows_end_statement();
	return outcome;
}

/*
 * The operations store_dispatch.c calls after rows_usable() said yes: each
 * runs its function above with rows_depth raised, so that anything called
 * from within (user code in a default or a constraint) that comes back
 * into jobguard takes the SQL path.
 */
#define ROWS_GUARDED(...) \
	do { \
		rows_depth++; \
		PG_TRY(); \
		{ \
			__VA_ARGS__; \
		} \
		PG_FINALLY(); \
		{ \
			rows_depth--; \
		} \
		PG_END_TRY(); \
	} while (0)

/* fast_insert_job: see insert_job. */
static bool
fast_insert_job(const SubmitRequest *req, int64 *job_id)
{
	volatile bool inserted = false;

	ROWS_GUARDED(inserted = insert_job(req, job_id));
	return inserted;
}

/* fast_insert_jobs: see insert_jobs. */
static void
fast_insert_jobs(Datum scope, const JobBatch *batch, bool *inserted, int64 *job_ids)
{
	ROWS_GUARDED(insert_jobs(scope, batch, inserted, job_ids));
}

/* fast_match_job: see match_job. */
static bool
fast_match_job(const SubmitRequest *req, SubmitMatch *match)
{
	volatile bool found = false;

	ROWS_GUARDED(found = match_job(req, match));
	return found;
}

/* fast_begin_attempt: see begin_attempt. */
static int64
fast_begin_attempt(const BeginRequest *req)
{
	volatile int64 id = 0;

	ROWS_GUARDED(id = begin_attempt(req));
	return id;
}

/* fast_read_for_finish: see read_for_finish. */
static bool
fast_read_for_finish(int64 attempt_id, const char *scope, AttemptRow *attempt,
					 FinishJob *job)
{
	volatile bool found = false;

	ROWS_GUARDED(found = read_for_finish(attempt_id, scope, attempt, job));
	return found;
}

/* fast_claim_and_swap: see claim_and_swap. */
static ClaimOutcome
fast_claim_and_swap(const AttemptRow *attempt, Datum result)
{
	volatile ClaimOutcome outcome = CLAIM_CHANGED;

	ROWS_GUARDED(outcome = claim_and_swap(attempt, result));
	return outcome;
}

/* The fast path's back end of store_backend.h. */
const StoreBackend fast_path_backend = {
	.name = "fast path",
	.insert_job = fast_insert_job,
	.insert_jobs = fast_insert_jobs,
	.match_job = fast_match_job,
	.begin_attempt = fast_begin_attempt,
	.read_for_finish = fast_read_for_finish,
	.claim_and_swap = fast_claim_and_swap,
};
