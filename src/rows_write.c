/*-------------------------------------------------------------------------
 *
 * rows_write.c
 *	  The fast path's primitives: statement snapshots, index look-ups, and
 *	  a RowWriter that inserts and updates rows the way the executor does
 *	  (defaults, domains, NOT NULL, CHECK constraints, speculative
 *	  insertion against the arbiter indexes, conditional updates that
 *	  re-check the newest row version).
 *
 * rows.c builds submit's, begin's and finish's reads and writes out of
 * these; rows_catalog.c knows the tables and compiles their rules.  What
 * the fast path as a whole does, and why, is said at the top of rows.c.
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

#include "fastpath.h"
#include "pg_compat.h"

/*
 * rows_begin_statement: what starting a statement does for its reads: make this
 * transaction's earlier writes visible, and push the snapshot a statement
 * would take.  Pair with rows_end_statement().
 */
Snapshot
rows_begin_statement(void)
{
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	return GetActiveSnapshot();
}

/* rows_end_statement: pop the snapshot of rows_begin_statement(). */
void
rows_end_statement(void)
{
	PopActiveSnapshot();
}

/*
 * rows_fetch_by_key: the row of `heap` that `index` finds for the key values,
 * visible to snap, into slot; false if none.  The keys are the index's
 * first nkeys columns; each is compared with its type's equality under the
 * index's collation.  Backward direction returns the row with the highest
 * remaining index columns first.
 */
bool
rows_fetch_by_key(Relation heap, Oid indexoid, int nkeys, const Datum *values,
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
	scan = jg_index_beginscan(heap, index, snap, nkeys, 0);
	index_rescan(scan, keys, nkeys, NULL, 0);
	found = index_getnext_slot(scan, direction, slot);
	index_endscan(scan);
	index_close(index, NoLock);
	return found;
}

/* rows_fetch_by_id: the row with bigint key `id` through a one-column index. */
bool
rows_fetch_by_id(Relation heap, Oid indexoid, int64 id, Snapshot snap,
			TupleTableSlot *slot)
{
	Datum		value = Int64GetDatum(id);
	RegProcedure proc = F_INT8EQ;

	return rows_fetch_by_key(heap, indexoid, 1, &value, &proc,
						ForwardScanDirection, snap, slot);
}

/* rows_col: a column of a fetched row, by attribute number. */
Datum
rows_col(TupleTableSlot *slot, AttrNumber att, bool *isnull)
{
	return slot_getattr(slot, att, isnull);
}

/* rows_col_int64: a bigint column of a fetched row (0 when NULL). */
int64
rows_col_int64(TupleTableSlot *slot, AttrNumber att, bool *isnull)
{
	Datum		d = slot_getattr(slot, att, isnull);

	return *isnull ? 0 : DatumGetInt64(d);
}

/* rows_col_text: a text column of a fetched row as a C string, or NULL. */
char *
rows_col_text(TupleTableSlot *slot, AttrNumber att)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, att, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* rows_col_varlena_copy: a varlena column detoasted into our memory, or 0. */
Datum
rows_col_varlena_copy(TupleTableSlot *slot, AttrNumber att, bool *isnull)
{
	Datum		d = slot_getattr(slot, att, isnull);

	if (*isnull)
		return (Datum) 0;
	return PointerGetDatum(pg_detoast_datum_copy((struct varlena *) DatumGetPointer(d)));
}


/*
 * rows_writer_open: open a table for the writes of one statement, an INSERT ...
 * ON CONFLICT (CMD_INSERT, speculative insertion ready) or an UPDATE, with
 * what the executor checks when it starts such a statement: that the
 * table may take it (CheckValidResultRel: an UPDATE of a table that
 * publishes updates needs a replica identity) and, for an insert, the
 * plan of the columns' defaults.
 */
void
rows_writer_open(RowWriter *w, Oid relid, TableRules *rules, CmdType cmd)
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
	jg_check_valid_result_rel(w->rri, cmd,
							  cmd == CMD_INSERT ? ONCONFLICT_NOTHING : ONCONFLICT_NONE);
	ExecOpenIndices(w->rri, cmd == CMD_INSERT);
	w->new_row = MakeSingleTupleTableSlot(RelationGetDescr(w->rel), &TTSOpsVirtual);
	w->old_row = table_slot_create(w->rel, NULL);
	w->assigned = palloc0(sizeof(bool) * rules->natts);
	MemoryContextSwitchTo(old);
	w->rules = rules;
	w->checks_ready = false;
	memset(&w->defaults, 0, sizeof(w->defaults));
	if (cmd == CMD_INSERT)
		rows_rules_defaults(rules, w->rel, w->estate, &w->defaults);
}

/* rows_writer_close: release what rows_writer_open() took (the lock stays). */
void
rows_writer_close(RowWriter *w)
{
	ExecDropSingleTupleTableSlot(w->old_row);
	ExecDropSingleTupleTableSlot(w->new_row);
	ExecCloseIndices(w->rri);
	FreeExecutorState(w->estate);
	table_close(w->rel, NoLock);
}

/* rows_new_row_start: an empty row (all NULL, nothing assigned) in new_row. */
void
rows_new_row_start(RowWriter *w)
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

/* rows_set: assign one column of the row being built. */
void
rows_set(RowWriter *w, AttrNumber att, Datum value, bool isnull)
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
	ExprContext *econtext = w->defaults.econtext;
	TupleDesc	desc = RelationGetDescr(w->rel);

	for (int i = 0; i < w->rules->natts; i++)
	{
		ExprState  *state = w->defaults.state[i];
		Form_pg_attribute att = TupleDescAttr(desc, i);
		bool		isnull;
		Datum		value;

		if (w->assigned[i] || state == NULL)
			continue;
		value = ExecEvalExpr(state, econtext, &isnull);
		/* a by-reference value may point into the evaluation's memory,
		 * reset below, or into the compiled constant: keep a copy */
		rows_set(w, i + 1, isnull ? (Datum) 0 :
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

	rows_new_row_start(w);
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
	ExprContext *econtext;

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
	if (rules->ncheck == 0)
		return;
	if (!w->checks_ready)
	{
		rows_rules_checks(rules, w->rel, w->estate, &w->checks);
		w->checks_ready = true;
	}
	econtext = w->checks.econtext;
	econtext->ecxt_scantuple = slot;
	for (int i = 0; i < rules->ncheck; i++)
		if (!ExecCheck(w->checks.state[i], econtext))
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
 * rows_insert_unless_conflict: insert new_row unless it conflicts with a row of
 * an arbiter index (NIL: every unique index), the way INSERT ... ON
 * CONFLICT DO NOTHING does: check, insert speculatively, and start over if
 * a concurrent insert of the same key got in between.  Waits for an
 * uncommitted conflicting row to commit or roll back.  Returns false when
 * a committed row conflicts (nothing was written).
 */
bool
rows_insert_unless_conflict(RowWriter *w, List *arbiters, Snapshot snap)
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
		if (!jg_check_index_constraints(w->rri, w->new_row, w->estate,
										&conflict, arbiters))
		{
			require_visible_conflict(w, &conflict, snap);
			return false;
		}
		/* as in SQL, only an insert takes a transaction id, not a replay */
		token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
		table_tuple_insert_speculative(w->rel, w->new_row,
									   GetCurrentCommandId(true), 0, NULL, token);
		list_free(jg_insert_index_tuples(w->rri, w->new_row, w->estate,
										 false, true, &spec_conflict, arbiters, false));
		table_tuple_complete_speculative(w->rel, w->new_row, token, !spec_conflict);
		SpeculativeInsertionLockRelease(GetCurrentTransactionId());
		if (!spec_conflict)
			return true;
	}
}


/*
 * rows_update_if: UPDATE ... WHERE <key> AND <condition>, for the row that the
 * one-column bigint index finds for id.  The row visible to snap must meet
 * the condition; if it was changed concurrently, READ COMMITTED locks its
 * newest version and checks the condition again (as EvalPlanQual does),
 * the other isolation levels raise a serialization failure.  change()
 * builds the new row in new_row from old_row.  Returns true when updated.
 */
bool
rows_update_if(RowWriter *w, Oid indexoid, int64 id, Snapshot snap,
		  RowCondition condition, RowChange change, void *arg)
{
	CommandId	cid = GetCurrentCommandId(true);
	ItemPointerData tid;

	if (!rows_fetch_by_id(w->rel, indexoid, id, snap, w->old_row) || !condition(w, arg))
		return false;
	tid = w->old_row->tts_tid;
	for (;;)
	{
		TM_FailureData tmfd;
		LockTupleMode lockmode;
		JgUpdateIndexes update_indexes;
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
				if (jg_indexes_to_update(update_indexes))
					list_free(jg_insert_index_tuples(w->rri, w->new_row, w->estate,
													 true, false, NULL, NIL,
													 jg_only_summarizing(update_indexes)));
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

/* rows_now: now(), the start of the transaction, as SQL sees it. */
Datum
rows_now(void)
{
	return TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
}

