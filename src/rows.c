/*-------------------------------------------------------------------------
 *
 * rows.c
 *	  The hot path's reads and writes, done through the table access method
 *	  and the indexes directly instead of through SQL statements.
 *
 * submit, begin_attempt and finish_attempt each run one or two statements
 * in store.c.  Through SPI every statement pays for executor start-up, and
 * every INSERT and UPDATE re-reads and re-plans the table's CHECK
 * constraints; that was most of what a call cost.  The functions here do
 * the same reads and writes with the same concurrency rules, without that:
 *
 *  - reads are index look-ups with the snapshot a statement would take
 *    (a fresh one under READ COMMITTED, the transaction's otherwise);
 *  - inserts are speculative insertions, as INSERT ... ON CONFLICT DO
 *    NOTHING makes them: a concurrent inserter of the same key is waited
 *    for, and a conflict inserts nothing;
 *  - updates are conditional, as UPDATE ... WHERE makes them: a row changed
 *    concurrently is locked in its newest version and the condition is
 *    checked again under READ COMMITTED, and is a serialization failure
 *    under REPEATABLE READ and SERIALIZABLE;
 *  - every rule of the table still holds: the columns' defaults, NOT
 *    NULL, the columns' domains, the CHECK constraints (defaults and checks
 *    compiled once per backend instead of once per statement), unique and
 *    partial indexes, and the foreign key from an attempt to its job (its
 *    job row is locked FOR KEY SHARE, as the foreign key's trigger would;
 *    the lock is taken before the insert, and a job deleted meanwhile is
 *    refused as missing, JG008, rather than with the foreign key's 23503).
 *
 * Nothing here decides anything: store.c calls these functions in place of
 * its statements, after rows_usable() (src/rows_catalog.c) said the tables
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
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "rows.h"

/*
 * begin_statement: what starting a statement does for its reads: make this
 * transaction's earlier writes visible, and push the snapshot a statement
 * would take.  Pair with end_statement().
 */
static Snapshot
begin_statement(void)
{
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	return GetActiveSnapshot();
}

/* end_statement: pop the snapshot of begin_statement(). */
static void
end_statement(void)
{
	PopActiveSnapshot();
}

/*
 * fetch_by_key: the row of `heap` that `index` finds for the key values,
 * visible to snap, into slot; false if none.  The keys are the index's
 * first nkeys columns; each is compared with its type's equality under the
 * index's collation.  Backward direction returns the row with the highest
 * remaining index columns first.
 */
static bool
fetch_by_key(Relation heap, Oid indexoid, int nkeys, const Datum *values,
			 const RegProcedure *procs, ScanDirection direction,
			 Snapshot snap, TupleTableSlot *slot)
{
	Relation	index = index_open(indexoid, AccessShareLock);
	ScanKeyData keys[3];
	IndexScanDesc scan;
	bool		found;

	if (nkeys > (int) lengthof(keys))
		elog(ERROR, "jobguard: index look-up with %d keys", nkeys);
	for (int i = 0; i < nkeys; i++)
		ScanKeyEntryInitialize(&keys[i], 0, i + 1, BTEqualStrategyNumber,
							   InvalidOid, index->rd_indcollation[i],
							   procs[i], values[i]);
	scan = index_beginscan(heap, index, snap, nkeys, 0);
	index_rescan(scan, keys, nkeys, NULL, 0);
	found = index_getnext_slot(scan, direction, slot);
	index_endscan(scan);
	index_close(index, NoLock);
	return found;
}

/* fetch_by_id: the row with bigint key `id` through a one-column index. */
static bool
fetch_by_id(Relation heap, Oid indexoid, int64 id, Snapshot snap,
			TupleTableSlot *slot)
{
	Datum		value = Int64GetDatum(id);
	RegProcedure proc = F_INT8EQ;

	return fetch_by_key(heap, indexoid, 1, &value, &proc,
						ForwardScanDirection, snap, slot);
}

/* col: a column of a fetched row, by attribute number. */
static Datum
col(TupleTableSlot *slot, AttrNumber att, bool *isnull)
{
	return slot_getattr(slot, att, isnull);
}

/* col_int64: a bigint column of a fetched row (0 when NULL). */
static int64
col_int64(TupleTableSlot *slot, AttrNumber att, bool *isnull)
{
	Datum		d = slot_getattr(slot, att, isnull);

	return *isnull ? 0 : DatumGetInt64(d);
}

/* col_text: a text column of a fetched row as a C string, or NULL. */
static char *
col_text(TupleTableSlot *slot, AttrNumber att)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, att, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* col_varlena_copy: a varlena column detoasted into our memory, or 0. */
static Datum
col_varlena_copy(TupleTableSlot *slot, AttrNumber att, bool *isnull)
{
	Datum		d = slot_getattr(slot, att, isnull);

	if (*isnull)
		return (Datum) 0;
	return PointerGetDatum(pg_detoast_datum_copy((struct varlena *) DatumGetPointer(d)));
}

/*
 * A table opened for writing: its ResultRelInfo with the indexes open, an
 * EState to evaluate index predicates in (defaults and CHECK constraints
 * use their rules' own long-lived context), a slot for the row being
 * written (with which columns the call assigned) and one for rows read.
 */
typedef struct RowWriter
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *new_row;
	TupleTableSlot *old_row;
	bool	   *assigned;
	TableRules *rules;
} RowWriter;

/* writer_open: open a table for writes (speculative: ON CONFLICT ready). */
static void
writer_open(RowWriter *w, Oid relid, TableRules *rules, bool speculative)
{
	MemoryContext old;

	w->rel = table_open(relid, RowExclusiveLock);
	/* rows_usable() checked the catalog under this lock: it cannot differ */
	if (rules->natts != RelationGetDescr(w->rel)->natts)
		elog(ERROR, "jobguard: cached description of \"%s\" is out of date",
			 RelationGetRelationName(w->rel));
	w->estate = CreateExecutorState();
	old = MemoryContextSwitchTo(w->estate->es_query_cxt);
	w->rri = makeNode(ResultRelInfo);
	/* no range table: index inserts then treat all key columns as unchanged */
	InitResultRelInfo(w->rri, w->rel, 0, NULL, 0);
	ExecOpenIndices(w->rri, speculative);
	w->new_row = MakeSingleTupleTableSlot(RelationGetDescr(w->rel), &TTSOpsVirtual);
	w->old_row = table_slot_create(w->rel, NULL);
	w->assigned = palloc0(sizeof(bool) * rules->natts);
	MemoryContextSwitchTo(old);
	w->rules = rules;
}

/* writer_close: release what writer_open() took (the lock stays). */
static void
writer_close(RowWriter *w)
{
	ExecDropSingleTupleTableSlot(w->old_row);
	ExecDropSingleTupleTableSlot(w->new_row);
	ExecCloseIndices(w->rri);
	FreeExecutorState(w->estate);
	table_close(w->rel, NoLock);
}

/* new_row_start: an empty row (all NULL, nothing assigned) in new_row. */
static void
new_row_start(RowWriter *w)
{
	TupleTableSlot *slot = w->new_row;

	ExecClearTuple(slot);
	for (int i = 0; i < w->rules->natts; i++)
	{
		slot->tts_values[i] = (Datum) 0;
		slot->tts_isnull[i] = true;
		w->assigned[i] = false;
	}
}

/* set: assign one column of the row being built. */
static void
set(RowWriter *w, AttrNumber att, Datum value, bool isnull)
{
	w->new_row->tts_values[att - 1] = value;
	w->new_row->tts_isnull[att - 1] = isnull;
	w->assigned[att - 1] = true;
}

/*
 * new_row_defaults: the table's default for every column the insert did
 * not assign, as INSERT fills them in (the id from its sequence, version 1,
 * now(), and whatever a column's DEFAULT says).
 */
static void
new_row_defaults(RowWriter *w)
{
	ExprContext *econtext = w->rules->econtext;
	TupleDesc	desc = RelationGetDescr(w->rel);

	for (int i = 0; i < w->rules->natts; i++)
	{
		ExprState  *state = w->rules->default_state[i];
		Form_pg_attribute att = TupleDescAttr(desc, i);
		bool		isnull;
		Datum		value;

		if (w->assigned[i] || state == NULL)
			continue;
		value = ExecEvalExpr(state, econtext, &isnull);
		/* a by-reference value may point into the evaluation's memory,
		 * reset below, or into the compiled constant: keep a copy */
		set(w, i + 1, isnull ? (Datum) 0 :
			datumCopy(value, att->attbyval, att->attlen), isnull);
	}
	ResetExprContext(econtext);
}

/*
 * new_row_from_old: the updated row starts as a copy of old_row (dropped
 * columns NULL, as UPDATE writes them); the caller then sets the changes.
 */
static void
new_row_from_old(RowWriter *w)
{
	TupleDesc	desc = RelationGetDescr(w->rel);

	new_row_start(w);
	slot_getallattrs(w->old_row);
	for (int i = 0; i < w->rules->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped)
		{
			w->new_row->tts_values[i] = w->old_row->tts_values[i];
			w->new_row->tts_isnull[i] = w->old_row->tts_isnull[i];
		}
}

/*
 * check_row: the table's own rules on the row about to be written (stored
 * in new_row), in the executor's order and with its error codes and
 * messages: the domain of each column written (the domain's own error; an
 * UPDATE coerces only the columns it assigns), NOT NULL (23502), CHECK
 * constraints (23514).  (The executor's "Failing row contains" detail is
 * not repeated.)
 */
static void
check_row(RowWriter *w, bool is_update)
{
	TupleTableSlot *slot = w->new_row;
	TupleDesc	desc = slot->tts_tupleDescriptor;
	TableRules *rules = w->rules;
	ExprContext *econtext = rules->econtext;

	/* a CHECK may read tableoid, which the executor sets first */
	slot->tts_tableOid = RelationGetRelid(w->rel);
	for (int i = 0; i < desc->natts; i++)
		if (OidIsValid(rules->domain_type[i]) && (!is_update || w->assigned[i]))
			domain_check(slot->tts_values[i], slot->tts_isnull[i],
						 rules->domain_type[i], &rules->domain_cache[i],
						 rules->cxt);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attnotnull && slot->tts_isnull[i])
			ereport(ERROR,
					(errcode(ERRCODE_NOT_NULL_VIOLATION),
					 errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
							NameStr(att->attname), RelationGetRelationName(w->rel)),
					 errtablecol(w->rel, i + 1)));
	}
	econtext->ecxt_scantuple = slot;
	for (int i = 0; i < rules->ncheck; i++)
		if (!ExecCheck(rules->check_state[i], econtext))
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("new row for relation \"%s\" violates check constraint \"%s\"",
							RelationGetRelationName(w->rel), rules->check_name[i]),
					 errtableconstraint(w->rel, rules->check_name[i])));
	ResetExprContext(econtext);
}

/*
 * require_visible_conflict: under REPEATABLE READ and SERIALIZABLE, a
 * conflicting row this transaction cannot see is a serialization failure,
 * exactly as INSERT ... ON CONFLICT DO NOTHING reports it.
 */
static void
require_visible_conflict(RowWriter *w, ItemPointer tid, Snapshot snap)
{
	if (!IsolationUsesXactSnapshot())
		return;
	if (!table_tuple_fetch_row_version(w->rel, tid, SnapshotAny, w->old_row))
		elog(ERROR, "jobguard: failed to fetch conflicting row");
	if (!table_tuple_satisfies_snapshot(w->rel, w->old_row, snap))
	{
		bool		isnull;
		TransactionId xmin = DatumGetTransactionId(slot_getsysattr(w->old_row,
																   MinTransactionIdAttributeNumber,
																   &isnull));

		if (!TransactionIdIsCurrentTransactionId(xmin))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
	}
	ExecClearTuple(w->old_row);
}

/*
 * insert_unless_conflict: insert new_row unless it conflicts with a row of
 * an arbiter index (NIL: every unique index), the way INSERT ... ON
 * CONFLICT DO NOTHING does: check, insert speculatively, and start over if
 * a concurrent insert of the same key got in between.  Waits for an
 * uncommitted conflicting row to commit or roll back.  Returns false when
 * a committed row conflicts (nothing was written).
 */
static bool
insert_unless_conflict(RowWriter *w, List *arbiters, Snapshot snap)
{
	new_row_defaults(w);
	ExecStoreVirtualTuple(w->new_row);
	check_row(w, false);
	for (;;)
	{
		ItemPointerData conflict;
		uint32		token;
		bool		spec_conflict = false;

		CHECK_FOR_INTERRUPTS();
		if (!ExecCheckIndexConstraints(w->rri, w->new_row, w->estate,
									   &conflict, arbiters))
		{
			require_visible_conflict(w, &conflict, snap);
			return false;
		}
		/* as in SQL, only an insert takes a transaction id, not a replay */
		token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
		table_tuple_insert_speculative(w->rel, w->new_row,
									   GetCurrentCommandId(true), 0, NULL, token);
		list_free(ExecInsertIndexTuples(w->rri, w->new_row, w->estate,
										false, true, &spec_conflict, arbiters));
		table_tuple_complete_speculative(w->rel, w->new_row, token, !spec_conflict);
		SpeculativeInsertionLockRelease(GetCurrentTransactionId());
		if (!spec_conflict)
			return true;
	}
}

/* A condition a row must meet to be updated, and the change to make. */
typedef bool (*RowCondition) (RowWriter *w, void *arg);
typedef void (*RowChange) (RowWriter *w, void *arg);

/*
 * update_if: UPDATE ... WHERE <key> AND <condition>, for the row that the
 * one-column bigint index finds for id.  The row visible to snap must meet
 * the condition; if it was changed concurrently, READ COMMITTED locks its
 * newest version and checks the condition again (as EvalPlanQual does),
 * the other isolation levels raise a serialization failure.  change()
 * builds the new row in new_row from old_row.  Returns true when updated.
 */
static bool
update_if(RowWriter *w, Oid indexoid, int64 id, Snapshot snap,
		  RowCondition condition, RowChange change, void *arg)
{
	CommandId	cid = GetCurrentCommandId(true);
	ItemPointerData tid;

	if (!fetch_by_id(w->rel, indexoid, id, snap, w->old_row) || !condition(w, arg))
		return false;
	tid = w->old_row->tts_tid;
	for (;;)
	{
		TM_FailureData tmfd;
		LockTupleMode lockmode;
		bool		update_indexes;
		TM_Result	result;

		new_row_from_old(w);
		change(w, arg);
		ExecStoreVirtualTuple(w->new_row);
		check_row(w, true);

		result = table_tuple_update(w->rel, &tid, w->new_row, cid, snap,
									InvalidSnapshot, true, &tmfd,
									&lockmode, &update_indexes);
		switch (result)
		{
			case TM_Ok:
				/* no key column ever changes here: index inserts get that hint */
				if (update_indexes)
					list_free(ExecInsertIndexTuples(w->rri, w->new_row, w->estate,
													true, false, NULL, NIL));
				return true;
			case TM_Updated:
				if (IsolationUsesXactSnapshot())
					ereport(ERROR,
							(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
							 errmsg("could not serialize access due to concurrent update")));
				result = table_tuple_lock(w->rel, &tid, snap, w->old_row, cid,
										  lockmode, LockWaitBlock,
										  TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
				if (result == TM_Deleted)
					return false;
				if (result != TM_Ok)
					elog(ERROR, "jobguard: unexpected result %d locking a row of \"%s\"",
						 (int) result, RelationGetRelationName(w->rel));
				if (!condition(w, arg))
					return false;
				tid = w->old_row->tts_tid;
				continue;
			case TM_Deleted:
				if (IsolationUsesXactSnapshot())
					ereport(ERROR,
							(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
							 errmsg("could not serialize access due to concurrent delete")));
				return false;
			default:
				elog(ERROR, "jobguard: unexpected result %d updating a row of \"%s\"",
					 (int) result, RelationGetRelationName(w->rel));
		}
	}
}

/* now_timestamp: now(), the start of the transaction, as SQL sees it. */
static Datum
now_timestamp(void)
{
	return TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
}

/*
 * insert_job: store_insert_job() without SQL: INSERT ... ON CONFLICT
 * (scope, owner_id, idempotency_key) DO NOTHING.  As in SQL, the id is
 * drawn from the sequence before the conflict check, so a replay leaves a
 * gap.
 */
static bool
insert_job(Datum scope, Datum owner_id, Datum idempotency_key, Datum operation,
		   Datum params, Datum provider,
		   Datum max_attempts, bool max_attempts_null, int64 *job_id)
{
	RowsCatalog *cat = rows_active_catalog();
	const AttrNumber *a = cat->job_att;
	RowWriter	w;
	Snapshot	snap = begin_statement();
	List	   *arbiters = list_make1_oid(cat->jobs_owner_key);
	bool		inserted;

	writer_open(&w, cat->jobs, &cat->job_rules, true);
	new_row_start(&w);
	set(&w, a[JOB_OWNER_ID], owner_id, false);
	set(&w, a[JOB_IDEMPOTENCY_KEY], idempotency_key, false);
	set(&w, a[JOB_OPERATION], operation, false);
	set(&w, a[JOB_PARAMS], params, false);
	set(&w, a[JOB_PROVIDER], provider, false);
	set(&w, a[JOB_MAX_ATTEMPTS], max_attempts, max_attempts_null);
	set(&w, a[JOB_SCOPE], scope, false);
	/* id, version and created_at: the columns' defaults, as in SQL */
	inserted = insert_unless_conflict(&w, arbiters, snap);
	if (inserted)
		*job_id = DatumGetInt64(w.new_row->tts_values[a[JOB_ID] - 1]);
	writer_close(&w);
	end_statement();
	return inserted;
}

/*
 * match_job: store_match_job() without SQL: the job for the key,
 * compared with the request column by column with the types' equality.
 */
static bool
match_job(Datum scope, Datum owner_id, Datum idempotency_key, Datum operation,
		  Datum params, Datum provider,
		  Datum max_attempts, bool max_attempts_null, SubmitMatch *match)
{
	RowsCatalog *cat = rows_active_catalog();
	const AttrNumber *a = cat->job_att;
	Snapshot	snap = begin_statement();
	Relation	jobs = table_open(cat->jobs, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(jobs, NULL);
	Datum		key[3] = {scope, owner_id, idempotency_key};
	RegProcedure procs[3] = {F_TEXTEQ, F_TEXTEQ, F_TEXTEQ};
	bool		found;

	found = fetch_by_key(jobs, cat->jobs_owner_key, 3, key, procs,
						 ForwardScanDirection, snap, slot);
	if (found)
	{
		bool		isnull;
		Datum		stored_max;

		match->job_id = col_int64(slot, a[JOB_ID], &isnull);
		match->same_operation = DatumGetBool(DirectFunctionCall2Coll(texteq, DEFAULT_COLLATION_OID,
																	 col(slot, a[JOB_OPERATION], &isnull),
																	 operation));
		match->same_params = DatumGetBool(DirectFunctionCall2(jsonb_eq,
															  col(slot, a[JOB_PARAMS], &isnull),
															  params));
		match->same_provider = DatumGetBool(DirectFunctionCall2Coll(texteq, DEFAULT_COLLATION_OID,
																	col(slot, a[JOB_PROVIDER], &isnull),
																	provider));
		stored_max = col(slot, a[JOB_MAX_ATTEMPTS], &isnull);
		match->same_max_attempts = isnull ? max_attempts_null :
			(!max_attempts_null && DatumGetInt32(stored_max) == DatumGetInt32(max_attempts));
	}
	ExecDropSingleTupleTableSlot(slot);
	table_close(jobs, NoLock);
	end_statement();
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
	return strcmp(col_text(slot, cat->job_att[JOB_SCOPE]), scope) == 0;
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

	if (!fetch_by_id(jobs, cat->jobs_pkey, job_id, snap, slot) ||
		!in_scope(cat, slot, scope))
		return false;
	job->id = job_id;
	job->operation = col_text(slot, a[JOB_OPERATION]);
	job->provider = col_text(slot, a[JOB_PROVIDER]);
	d = col(slot, a[JOB_MAX_ATTEMPTS], &isnull);
	job->has_max_attempts = !isnull;
	job->max_attempts = isnull ? 0 : DatumGetInt32(d);
	job->version = col_int64(slot, a[JOB_VERSION], &isnull);
	job->completed_by = col_int64(slot, a[JOB_COMPLETED_BY], &isnull);
	job->completed = !isnull;
	(void) col(slot, a[JOB_CANCELLED_AT], &isnull);
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

	attempt->id = col_int64(slot, a[ATT_ID], &isnull);
	attempt->job_id = col_int64(slot, a[ATT_JOB_ID], &isnull);
	attempt->attempt_no = DatumGetInt32(col(slot, a[ATT_ATTEMPT_NO], &isnull));
	attempt->provider = col_text(slot, a[ATT_PROVIDER]);
	attempt->stored_state = attempt_state_from_name(col_text(slot, a[ATT_STATE]));
	attempt->read_version = col_int64(slot, a[ATT_READ_VERSION], &isnull);
	attempt->deadline = DatumGetTimestampTz(col(slot, a[ATT_DEADLINE], &isnull));
	attempt->attempt_key = col_text(slot, a[ATT_ATTEMPT_KEY]);
	attempt->lost_result = col_varlena_copy(slot, a[ATT_LOST_RESULT], &isnull);
	attempt->state = attempt->stored_state;
	if (attempt->stored_state == ATTEMPT_STARTED &&
		attempt->deadline <= GetCurrentTransactionStartTimestamp())
		attempt->state = ATTEMPT_UNKNOWN;
}

/* is_certified: a live certification of provider for operation, in snap. */
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

	if (fetch_by_key(certs, cat->certifications_pkey, 2, key, procs,
					 ForwardScanDirection, snap, slot))
	{
		(void) col(slot, cat->cert_att[CERT_REVOKED_AT], &isnull);
		certified = isnull;
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
 * begin_attempt: store_begin_attempt() without SQL, with the same
 * gate: the job open, its latest attempt closed, attempts left, a fallback
 * provider certified; then the insert, decided by the partial unique index
 * on open attempts when two begins race.  Returns the new attempt's id, or
 * 0 when refused.
 */
static int64
begin_attempt(int64 job_id, const char *scope, Datum provider, bool provider_null,
			  Datum timeout, Datum attempt_key, bool attempt_key_null)
{
	RowsCatalog *cat = rows_active_catalog();
	const AttrNumber *a = cat->attempt_att;
	Snapshot	snap = begin_statement();
	Relation	jobs = table_open(cat->jobs, RowShareLock);
	TupleTableSlot *job_slot = table_slot_create(jobs, NULL);
	RowWriter	w;
	JobRow		job;
	int32		last_no = 0;
	bool		open = true;
	int64		id = 0;

	writer_open(&w, cat->attempts, &cat->attempt_rules, true);
	if (read_job(cat, jobs, job_id, scope, snap, job_slot, &job) &&
		!job.completed && !job.cancelled)
	{
		RegProcedure proc = F_INT8EQ;
		Datum		key = Int64GetDatum(job_id);
		const char *wanted = provider_null ? NULL : TextDatumGetCString(provider);

		open = false;
		if (fetch_by_key(w.rel, cat->attempts_job_attempt_no, 1, &key, &proc,
						 BackwardScanDirection, snap, w.old_row))
		{
			bool		isnull;
			AttemptState last_state = attempt_state_from_name(col_text(w.old_row, a[ATT_STATE]));

			last_no = DatumGetInt32(col(w.old_row, a[ATT_ATTEMPT_NO], &isnull));
			open = attempt_state_is_open(last_state);
		}
		if (!open &&
			(!job.has_max_attempts || last_no < job.max_attempts) &&
			(wanted == NULL || strcmp(wanted, job.provider) == 0 ||
			 is_certified(cat, job.operation, wanted, snap)) &&
			lock_job_for_key_share(jobs, job_slot, snap))
		{
			Datum		now = now_timestamp();

			new_row_start(&w);
			set(&w, a[ATT_JOB_ID], Int64GetDatum(job_id), false);
			set(&w, a[ATT_ATTEMPT_NO], Int32GetDatum(last_no + 1), false);
			set(&w, a[ATT_PROVIDER], provider_null ? CStringGetTextDatum(job.provider) : provider, false);
			set(&w, a[ATT_STATE], CStringGetTextDatum(attempt_state_name(ATTEMPT_STARTED)), false);
			set(&w, a[ATT_READ_VERSION], Int64GetDatum(job.version), false);
			set(&w, a[ATT_ATTEMPT_KEY], attempt_key, attempt_key_null);
			set(&w, a[ATT_STARTED_AT], now, false);
			set(&w, a[ATT_DEADLINE], DirectFunctionCall2(timestamptz_pl_interval, now, timeout), false);
			/* id: the column's default, as in SQL */
			if (insert_unless_conflict(&w, NIL, snap))
				id = DatumGetInt64(w.new_row->tts_values[a[ATT_ID] - 1]);
		}
	}
	writer_close(&w);
	ExecDropSingleTupleTableSlot(job_slot);
	table_close(jobs, NoLock);
	end_statement();
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
	Snapshot	snap = begin_statement();
	Relation	attempts = table_open(cat->attempts, AccessShareLock);
	Relation	jobs = table_open(cat->jobs, AccessShareLock);
	Relation	operations = table_open(cat->operations, AccessShareLock);
	TupleTableSlot *attempt_slot = table_slot_create(attempts, NULL);
	TupleTableSlot *job_slot = table_slot_create(jobs, NULL);
	TupleTableSlot *op_slot = table_slot_create(operations, NULL);
	bool		found;
	bool		isnull;

	found = fetch_by_id(attempts, cat->attempts_pkey, attempt_id, snap, attempt_slot);
	if (found)
	{
		read_attempt(cat, attempt_slot, attempt);
		/* the foreign key keeps the job; its row is there */
		if (!fetch_by_id(jobs, cat->jobs_pkey, attempt->job_id, snap, job_slot))
			elog(ERROR, "jobguard: job %lld of attempt %lld not found",
				 (long long) attempt->job_id, (long long) attempt_id);
		found = in_scope(cat, job_slot, scope);
	}
	if (found)
	{
		job->operation = col_text(job_slot, cat->job_att[JOB_OPERATION]);
		job->completed_by = col_int64(job_slot, cat->job_att[JOB_COMPLETED_BY], &isnull);
		job->completed = !isnull;
		job->result = col_varlena_copy(job_slot, cat->job_att[JOB_RESULT], &isnull);
		job->has_contract = false;
		job->contract_version = 0;
		job->contract = (Datum) 0;
		{
			Datum		key = CStringGetTextDatum(job->operation);
			RegProcedure proc = F_TEXTEQ;

			if (fetch_by_key(operations, cat->operations_pkey, 1, &key, &proc,
							 ForwardScanDirection, snap, op_slot))
			{
				job->has_contract = true;
				job->contract_version = col_int64(op_slot, cat->op_att[OP_CONTRACT_VERSION], &isnull);
				job->contract = col_varlena_copy(op_slot, cat->op_att[OP_OUTPUT_CONTRACT], &isnull);
			}
		}
	}
	ExecDropSingleTupleTableSlot(op_slot);
	ExecDropSingleTupleTableSlot(job_slot);
	ExecDropSingleTupleTableSlot(attempt_slot);
	table_close(operations, NoLock);
	table_close(jobs, NoLock);
	table_close(attempts, NoLock);
	end_statement();
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

	return attempt_state_from_name(col_text(w->old_row, c->cat->attempt_att[ATT_STATE])) ==
		c->attempt->stored_state;
}

/* claim_change: state succeeded, finished now. */
static void
claim_change(RowWriter *w, void *arg)
{
	ClaimArgs  *c = arg;

	set(w, c->cat->attempt_att[ATT_STATE],
		CStringGetTextDatum(attempt_state_name(ATTEMPT_SUCCEEDED)), false);
	set(w, c->cat->attempt_att[ATT_FINISHED_AT], c->now, false);
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
	int64		version = col_int64(w->old_row, c->cat->job_att[JOB_VERSION], &version_null);

	(void) col(w->old_row, c->cat->job_att[JOB_COMPLETED_BY], &completed_null);
	return !version_null && version == c->attempt->read_version && completed_null;
}

/* swap_change: the swap: the result slot taken, the version bumped. */
static void
swap_change(RowWriter *w, void *arg)
{
	ClaimArgs  *c = arg;
	const AttrNumber *a = c->cat->job_att;
	bool		isnull;
	int64		version = col_int64(w->old_row, a[JOB_VERSION], &isnull);

	set(w, a[JOB_RESULT], c->result, false);
	set(w, a[JOB_COMPLETED_BY], Int64GetDatum(c->attempt->id), false);
	set(w, a[JOB_COMPLETED_AT], c->now, false);
	set(w, a[JOB_VERSION], Int64GetDatum(version + 1), false);
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
	Snapshot	snap = begin_statement();
	ClaimArgs	args = {cat, attempt, result, now_timestamp()};
	RowWriter	w;
	ClaimOutcome outcome = CLAIM_CHANGED;

	writer_open(&w, cat->attempts, &cat->attempt_rules, false);
	if (update_if(&w, cat->attempts_pkey, attempt->id, snap,
				  claim_condition, claim_change, &args))
		outcome = CLAIM_LOST;
	writer_close(&w);
	if (outcome == CLAIM_LOST)
	{
		writer_open(&w, cat->jobs, &cat->job_rules, false);
		if (update_if(&w, cat->jobs_pkey, attempt->job_id, snap,
					  swap_condition, swap_change, &args))
			outcome = CLAIM_WON;
		writer_close(&w);
	}
	end_statement();
	return outcome;
}

/*
 * The entry points store.c calls after rows_usable() said yes: each runs
 * its function above with rows_depth raised, so that anything called from
 * within (user code in a default or a constraint) that comes back into
 * jobguard takes the SQL path.
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

/* rows_insert_job: see insert_job. */
bool
rows_insert_job(Datum scope, Datum owner_id, Datum idempotency_key, Datum operation,
				Datum params, Datum provider,
				Datum max_attempts, bool max_attempts_null, int64 *job_id)
{
	volatile bool inserted = false;

	ROWS_GUARDED(inserted = insert_job(scope, owner_id, idempotency_key, operation, params,
									   provider, max_attempts, max_attempts_null, job_id));
	return inserted;
}

/* rows_match_job: see match_job. */
bool
rows_match_job(Datum scope, Datum owner_id, Datum idempotency_key, Datum operation,
			   Datum params, Datum provider,
			   Datum max_attempts, bool max_attempts_null, SubmitMatch *match)
{
	volatile bool found = false;

	ROWS_GUARDED(found = match_job(scope, owner_id, idempotency_key, operation, params,
								   provider, max_attempts, max_attempts_null, match));
	return found;
}

/* rows_begin_attempt: see begin_attempt. */
int64
rows_begin_attempt(int64 job_id, const char *scope, Datum provider, bool provider_null,
				   Datum timeout, Datum attempt_key, bool attempt_key_null)
{
	volatile int64 id = 0;

	ROWS_GUARDED(id = begin_attempt(job_id, scope, provider, provider_null, timeout,
									attempt_key, attempt_key_null));
	return id;
}

/* rows_read_for_finish: see read_for_finish. */
bool
rows_read_for_finish(int64 attempt_id, const char *scope, AttemptRow *attempt,
					 FinishJob *job)
{
	volatile bool found = false;

	ROWS_GUARDED(found = read_for_finish(attempt_id, scope, attempt, job));
	return found;
}

/* rows_claim_and_swap: see claim_and_swap. */
ClaimOutcome
rows_claim_and_swap(const AttemptRow *attempt, Datum result)
{
	volatile ClaimOutcome outcome = CLAIM_CHANGED;

	ROWS_GUARDED(outcome = claim_and_swap(attempt, result));
	return outcome;
}
