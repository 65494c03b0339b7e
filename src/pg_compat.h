/*-------------------------------------------------------------------------
 *
 * pg_compat.h
 *	  Every difference between the PostgreSQL majors jobguard builds
 *	  against (15 to 18), in one place: each call into an API that changed
 *	  goes through a wrapper here, so that the call sites read the same on
 *	  every major and no other file tests PG_VERSION_NUM.
 *
 * The differences (see doc/postgresql-versions.md):
 *	  16: ExecInsertIndexTuples() takes onlySummarizing; table_tuple_update()
 *		  says which indexes need new entries as a TU_UpdateIndexes, not a
 *		  bool.
 *	  17: CheckValidResultRel() takes the MERGE actions.
 *	  18: CheckValidResultRel() also takes the ON CONFLICT action;
 *		  index_beginscan() takes scan instrumentation;
 *		  RelationGetPrimaryKeyIndex() takes deferrable_ok;
 *		  ExecCheckIndexConstraints() takes the id of the row being checked;
 *		  pg_attribute_noreturn() is gone for pg_noreturn, which comes
 *		  before the declaration.
 *	  16: the ownership checks are one object_ownercheck().
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_PG_COMPAT_H
#define JOBGUARD_PG_COMPAT_H

#include "postgres.h"

#include "access/genam.h"
#include "access/tableam.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "catalog/pg_database.h"
#include "utils/acl.h"
#include "utils/relcache.h"

/*
 * pg_noreturn: a function that never returns, written before its
 * declaration (18's spelling; before 18 pg_attribute_noreturn(), which GCC
 * and Clang also accept there).
 */
#ifndef pg_noreturn
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * JgUpdateIndexes: what table_tuple_update() says about the indexes of the
 * updated row: before 16 a bool (every index needs a new entry, or none
 * does: a HOT update), from 16 TU_None, TU_All or TU_Summarizing (only the
 * summarizing indexes, such as BRIN, need one).
 */
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes JgUpdateIndexes;
#else
typedef bool JgUpdateIndexes;
#endif

/* jg_indexes_to_update: whether the update needs new index entries at all. */
static inline bool
jg_indexes_to_update(JgUpdateIndexes update_indexes)
{
#if PG_VERSION_NUM >= 160000
	return update_indexes != TU_None;
#else
	return update_indexes;
#endif
}

/* jg_only_summarizing: whether only the summarizing indexes need entries. */
static inline bool
jg_only_summarizing(JgUpdateIndexes update_indexes)
{
#if PG_VERSION_NUM >= 160000
	return update_indexes == TU_Summarizing;
#else
	return false;
#endif
}

/*
 * jg_check_valid_result_rel: the executor's check that a table may take
 * the statement (CheckValidResultRel), for an INSERT with the ON CONFLICT
 * action given or an UPDATE (ONCONFLICT_NONE); no MERGE.  Before 18 the
 * ON CONFLICT action is not passed (17 checks it only in the minor
 * releases' CheckValidResultRelNew, for DO UPDATE, which jobguard never
 * does).
 */
static inline void
jg_check_valid_result_rel(ResultRelInfo *rri, CmdType cmd, OnConflictAction on_conflict)
{
#if PG_VERSION_NUM >= 180000
	CheckValidResultRel(rri, cmd, on_conflict, NIL);
#elif PG_VERSION_NUM >= 170000
	CheckValidResultRel(rri, cmd, NIL);
#else
	CheckValidResultRel(rri, cmd);
#endif
}

/*
 * jg_insert_index_tuples: ExecInsertIndexTuples(); only_summarizing (16+)
 * limits the new entries to the summarizing indexes, after an update that
 * table_tuple_update() says needs only those.  Before 16 it must be false.
 */
static inline List *
jg_insert_index_tuples(ResultRelInfo *rri, TupleTableSlot *slot, EState *estate,
					   bool update, bool no_dup_err, bool *spec_conflict,
					   List *arbiter_indexes, bool only_summarizing)
{
#if PG_VERSION_NUM >= 160000
	return ExecInsertIndexTuples(rri, slot, estate, update, no_dup_err,
								 spec_conflict, arbiter_indexes, only_summarizing);
#else
	Assert(!only_summarizing);
	return ExecInsertIndexTuples(rri, slot, estate, update, no_dup_err,
								 spec_conflict, arbiter_indexes);
#endif
}

/*
 * jg_check_index_constraints: ExecCheckIndexConstraints() for a row not
 * inserted yet (an INSERT ... ON CONFLICT's pre-check).  18 takes the id
 * of the row being checked, to leave it out; like the executor's pre-check
 * we pass an invalid one, as the row has no id yet.
 */
static inline bool
jg_check_index_constraints(ResultRelInfo *rri, TupleTableSlot *slot, EState *estate,
						   ItemPointer conflict_tid, List *arbiter_indexes)
{
#if PG_VERSION_NUM >= 180000
	ItemPointerData no_row;

	ItemPointerSetInvalid(&no_row);
	return ExecCheckIndexConstraints(rri, slot, estate, conflict_tid, &no_row,
									 arbiter_indexes);
#else
	return ExecCheckIndexConstraints(rri, slot, estate, conflict_tid,
									 arbiter_indexes);
#endif
}

/*
 * jg_index_beginscan: index_beginscan() without instrumentation (18 takes
 * an IndexScanInstrumentation for EXPLAIN ANALYZE; jobguard's look-ups
 * are not part of any plan).
 */
static inline IndexScanDesc
jg_index_beginscan(Relation heap, Relation index, Snapshot snapshot,
				   int nkeys, int norderbys)
{
#if PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, NULL, nkeys, norderbys);
#else
	return index_beginscan(heap, index, snapshot, nkeys, norderbys);
#endif
}

/*
 * jg_primary_key_index: the OID of a table's primary key index (18 asks
 * whether a deferrable one will do; jobguard's primary keys are not
 * deferrable, and a look-up by key wants an immediate one).
 */
static inline Oid
jg_primary_key_index(Relation rel)
{
#if PG_VERSION_NUM >= 180000
	return RelationGetPrimaryKeyIndex(rel, false);
#else
	return RelationGetPrimaryKeyIndex(rel);
#endif
}

/* database_owned_by: whether a role owns a database (16 made the check generic) */
#if PG_VERSION_NUM >= 160000
#define database_owned_by(dboid, roleid) object_ownercheck(DatabaseRelationId, (dboid), (roleid))
#else
#define database_owned_by(dboid, roleid) pg_database_ownercheck((dboid), (roleid))
#endif

#endif							/* JOBGUARD_PG_COMPAT_H */
