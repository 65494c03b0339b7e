/*-------------------------------------------------------------------------
 *
 * rows_catalog.c
 *	  What the fast path (src/rows.c) knows of jobguard's tables, and
 *	  whether it may run: the tables' OIDs, the unique indexes it reads
 *	  through (and the arbiters of submit's ON CONFLICT), the attribute
 *	  numbers of the columns, and the tables' own rules (column defaults,
 *	  domains, CHECK constraints; compiled by rows_rules.c when a call
 *	  first needs them, and kept unless they call a user's function).
 *
 * The knowledge is cached per backend and marked stale by relcache and
 * syscache invalidations: of the four tables, of relations, functions and
 * types the compiled expressions use.  rows_usable() first takes the table
 * locks the SQL statements of a call would take (which processes pending
 * invalidations), then checks the cache, so a schema change committed
 * while a call waited for its lock is seen by that very call.  Anything
 * the fast path would skip — a trigger or rule someone added, an unknown
 * or generated column, forced row security, a partition — or a read-only
 * transaction, parallel mode, a nested call, or jobguard.fast_path off
 * makes it say no, and store_dispatch.c hands the call to the SQL back end
 * instead.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "nodes/plannodes.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "fastpath.h"

/* GUC jobguard.fast_path: let calls take the fast path (default on). */
bool		rows_fast_path = true;

/* The columns of each table, from store_columns.h's lists. */
#define KNOWN_COLUMN(e, name, type) [e] = {name, type},

static const KnownColumn job_columns[] = {JOBS_COLUMNS(KNOWN_COLUMN)};
static const KnownColumn attempt_columns[] = {ATTEMPTS_COLUMNS(KNOWN_COLUMN)};
static const KnownColumn operation_columns[] = {OPERATIONS_COLUMNS(KNOWN_COLUMN)};
static const KnownColumn certification_columns[] = {CERTIFICATIONS_COLUMNS(KNOWN_COLUMN)};

/* Each name table has an entry per column of its enum, and no more. */
StaticAssertDecl(lengthof(job_columns) == JOB_COLUMN_COUNT,
				 "job_columns and JobColumn disagree");
StaticAssertDecl(lengthof(attempt_columns) == ATT_COLUMN_COUNT,
				 "attempt_columns and AttemptColumn disagree");
StaticAssertDecl(lengthof(operation_columns) == OP_COLUMN_COUNT,
				 "operation_columns and OperationColumn disagree");
StaticAssertDecl(lengthof(certification_columns) == CERT_COLUMN_COUNT,
				 "certification_columns and CertificationColumn disagree");

/* The tables whose invalidation makes the catalog stale. */
#define WATCHED_TABLES 4

/*
 * Other objects the compiled defaults and CHECK constraints depend on:
 * relations (a default's sequence) and functions and types (a function a
 * CHECK calls, which the planner may have inlined).  When there are more
 * than fit, any invalidation of that kind makes the catalog stale.
 */
#define MAX_DEPENDENCIES 64

typedef struct Dependency
{
	int			cache_id;		/* PROCOID or TYPEOID */
	uint32		hash_value;
} Dependency;

static RowsCatalog *catalog = NULL;
static MemoryContext catalog_cxt = NULL;
static bool catalog_valid = false;
static Oid	watched[WATCHED_TABLES];
static Oid	dependent_relids[MAX_DEPENDENCIES];
static int	n_dependent_relids = 0;
static bool dependent_relids_overflow = false;
static Dependency dependencies[MAX_DEPENDENCIES];
static int	n_dependencies = 0;
static bool dependencies_overflow = false;
static bool callback_registered = false;

/*
 * How deep calls into rows.c are nested.  A write runs user code (a
 * default, a CHECK, a domain constraint) that could call jobguard again;
 * such a nested call takes the SQL path and never rebuilds the catalog
 * the outer call is using.
 */
int			rows_depth = 0;

/*
 * The catalog rows_usable() checked under the locks of the current call;
 * the rows_* functions use this one and never rebuild it.
 */
static RowsCatalog *active = NULL;

/*
 * catalog_invalidate: relcache callback.  Only marks the catalog stale; it
 * is rebuilt by rows_usable() at the start of a call, never while one is
 * using it.
 */
static void
catalog_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || dependent_relids_overflow)
		catalog_valid = false;
	for (int i = 0; i < WATCHED_TABLES; i++)
		if (relid == watched[i])
			catalog_valid = false;
	for (int i = 0; i < n_dependent_relids; i++)
		if (relid == dependent_relids[i])
			catalog_valid = false;
}

/*
 * dependency_invalidate: syscache callback for functions and types: the
 * catalog is stale when one its compiled expressions use changed.
 */
static void
dependency_invalidate(Datum arg, int cache_id, uint32 hash_value)
{
	if (hash_value == 0 || dependencies_overflow)
		catalog_valid = false;
	for (int i = 0; i < n_dependencies; i++)
		if (dependencies[i].cache_id == cache_id &&
			dependencies[i].hash_value == hash_value)
			catalog_valid = false;
}

/*
 * rows_catalog_depends_on: remember the relations and syscache entries a
 * kept expression depends on (expression_planner_with_deps), so that a
 * change to any of them marks the catalog stale.
 */
void
rows_catalog_depends_on(List *relids, List *items)
{
	ListCell   *lc;

	foreach(lc, relids)
	{
		if (n_dependent_relids < MAX_DEPENDENCIES)
			dependent_relids[n_dependent_relids++] = lfirst_oid(lc);
		else
			dependent_relids_overflow = true;
	}
	foreach(lc, items)
	{
		PlanInvalItem *item = lfirst(lc);

		if (n_dependencies < MAX_DEPENDENCIES)
		{
			dependencies[n_dependencies].cache_id = item->cacheId;
			dependencies[n_dependencies].hash_value = item->hashValue;
			n_dependencies++;
		}
		else
			dependencies_overflow = true;
	}
}

/*
 * is_job_foreign_key: is this the constraint attempts (job_id) REFERENCES
 * jobs (id), whose triggers rows.c stands in for?
 */
static bool
is_job_foreign_key(Oid constraint, Oid attempts, Oid jobs, AttrNumber job_id,
				   AttrNumber id)
{
	HeapTuple	tuple = SearchSysCache1(CONSTROID, ObjectIdGetDatum(constraint));
	bool		match = false;

	if (HeapTupleIsValid(tuple))
	{
		Form_pg_constraint con = (Form_pg_constraint) GETSTRUCT(tuple);

		if (con->contype == CONSTRAINT_FOREIGN && con->conrelid == attempts &&
			con->confrelid == jobs)
		{
			int			nkeys;
			AttrNumber	conkey[INDEX_MAX_KEYS];
			AttrNumber	confkey[INDEX_MAX_KEYS];

			DeconstructFkConstraintRow(tuple, &nkeys, conkey, confkey,
									   NULL, NULL, NULL, NULL, NULL);
			match = nkeys == 1 && conkey[0] == job_id && confkey[0] == id;
		}
		ReleaseSysCache(tuple);
	}
	return match;
}

/*
 * foreign_code: why the table's writes must go through the executor — a
 * trigger other than those of the attempts → jobs foreign key, or a rule —
 * or NULL when nothing there would be skipped.
 */
static const char *
foreign_code(Relation rel, const RowsCatalog *cat)
{
	const char *name = RelationGetRelationName(rel);

	if (rel->rd_rules != NULL)
		return psprintf("table jobguard.%s has a rule", name);
	if (rel->trigdesc != NULL)
		for (int i = 0; i < rel->trigdesc->numtriggers; i++)
		{
			Trigger    *trigger = &rel->trigdesc->triggers[i];

			if (!trigger->tgisinternal ||
				!is_job_foreign_key(trigger->tgconstraint, cat->attempts, cat->jobs,
									cat->attempt_att[ATT_JOB_ID], cat->job_att[JOB_ID]))
				return psprintf("table jobguard.%s has trigger \"%s\"", name,
								trigger->tgname);
		}
	return NULL;
}

/*
 * table_shape_problem: why reading a table through its own heap and
 * indexes would not see what SQL sees: it is partitioned, a partition, or
 * has inheritance children (whose rows SQL reads too), or its row level
 * security applies even to its owner, whom the SQL statements run as.
 */
static const char *
table_shape_problem(Relation rel)
{
	const char *name = RelationGetRelationName(rel);

	if (rel->rd_rel->relkind != RELKIND_RELATION)
		return psprintf("table jobguard.%s is not a plain table", name);
	if (rel->rd_rel->relispartition)
		return psprintf("table jobguard.%s is a partition", name);
	if (rel->rd_rel->relhassubclass)
		return psprintf("table jobguard.%s has inheritance children", name);
	if (rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity)
		return psprintf("table jobguard.%s forces row level security", name);
	return NULL;
}

/*
 * column_problem: find the attribute numbers of the named columns, or say
 * why the table does not fit the fast path: a column missing or of another
 * base type; and for a table rows.c writes (all_known), a generated column
 * or one the fast path does not know of (whose default it would miss).
 */
static const char *
column_problem(Relation rel, const KnownColumn *columns, int count,
			   AttrNumber *atts, bool all_known)
{
	TupleDesc	desc = RelationGetDescr(rel);
	const char *name = RelationGetRelationName(rel);
	int			live = 0;

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		if (att->attgenerated != '\0' && all_known)
			return psprintf("column \"%s\" of table jobguard.%s is generated",
							NameStr(att->attname), name);
		live++;
	}
	for (int i = 0; i < count; i++)
	{
		atts[i] = get_attnum(RelationGetRelid(rel), columns[i].name);
		if (atts[i] == InvalidAttrNumber)
			return psprintf("table jobguard.%s has no column \"%s\"", name, columns[i].name);
		if (getBaseType(TupleDescAttr(desc, atts[i] - 1)->atttypid) != columns[i].base_type)
			return psprintf("column \"%s\" of table jobguard.%s has another type",
							columns[i].name, name);
	}
	if (all_known && live != count)
		return psprintf("table jobguard.%s has a column jobguard does not know", name);
	return NULL;
}

/*
 * predicate_is_null_test: whether an index predicate is none at all
 * (null_att invalid), or exactly "null_att IS NULL" — the live-jobs index
 * on (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL.
 */
static bool
predicate_is_null_test(List *predicate, AttrNumber null_att)
{
	NullTest   *test;

	if (null_att == InvalidAttrNumber)
		return predicate == NIL;
	if (list_length(predicate) != 1 || !IsA(linitial(predicate), NullTest))
		return false;
	test = (NullTest *) linitial(predicate);
	return test->nulltesttype == IS_NULL && !test->argisrow &&
		IsA(test->arg, Var) && ((Var *) test->arg)->varattno == null_att;
}

/*
 * index_on: the OID of the table's valid unique index whose key columns
 * are exactly the given attributes (in order), with no expression and no
 * predicate (or, when null_att is valid, exactly "null_att IS NULL");
 * InvalidOid if none.  Finds indexes by what they index, not by name.
 */
static Oid
index_on(Relation rel, int nkeys, const AttrNumber *atts, AttrNumber null_att)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = index->rd_index;
		bool		match = index->rd_rel->relkind == RELKIND_INDEX &&
			form->indisunique && form->indisvalid &&
			form->indimmediate && form->indnkeyatts == nkeys &&
			predicate_is_null_test(RelationGetIndexPredicate(index), null_att) &&
			RelationGetIndexExpressions(index) == NIL;

		for (int k = 0; match && k < nkeys; k++)
			match = form->indkey.values[k] == atts[k];
		index_close(index, NoLock);
		if (match)
		{
			found = lfirst_oid(lc);
			break;
		}
	}
	list_free(indexes);
	return found;
}

/*
 * key_arbiters: the indexes INSERT ... ON CONFLICT (scope, owner_id,
 * idempotency_key) WHERE replaced_at IS NULL takes as arbiters (the
 * planner's inference): every valid unique index whose key columns are
 * exactly these three, in any order, without expressions, and either
 * without a predicate or with the one the statement's WHERE implies
 * ("replaced_at IS NULL"), whatever its collation or operator class.  A
 * row conflicting in any of them is a replay, not an error.
 */
static List *
key_arbiters(Relation rel, const AttrNumber *key_atts, AttrNumber replaced_at)
{
	List	   *indexes = RelationGetIndexList(rel);
	List	   *arbiters = NIL;
	ListCell   *lc;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = index->rd_index;
		List	   *predicate = RelationGetIndexPredicate(index);
		bool		match = form->indisunique && form->indisvalid &&
			form->indnkeyatts == 3 &&
			(predicate == NIL || predicate_is_null_test(predicate, replaced_at)) &&
			RelationGetIndexExpressions(index) == NIL;
		bool		seen[3] = {false, false, false};

		for (int k = 0; match && k < form->indnkeyatts; k++)
		{
			AttrNumber	att = form->indkey.values[k];
			bool		known = false;

			for (int c = 0; c < 3; c++)
				if (att == key_atts[c] && !seen[c])
					seen[c] = known = true;
			match = known;
		}
		if (match)
			arbiters = lappend_oid(arbiters, lfirst_oid(lc));
		index_close(index, NoLock);
	}
	list_free(indexes);
	return arbiters;
}

/* build_catalog: fill *cat from the system catalogs; see RowsCatalog. */
static void
build_catalog(RowsCatalog *cat)
{
	Oid			schema = get_namespace_oid("jobguard", true);
	Relation	jobs,
				attempts,
				operations,
				certifications;
	AttrNumber	keys[3];

	const char *problem;

	memset(cat, 0, sizeof(*cat));
	cat->incomplete = true;
	cat->unusable_reason = "jobguard is not installed in this database";
	if (!OidIsValid(schema))
		return;
	cat->jobs = get_relname_relid("jobs", schema);
	cat->attempts = get_relname_relid("attempts", schema);
	cat->operations = get_relname_relid("operations", schema);
	cat->certifications = get_relname_relid("certifications", schema);
	watched[0] = cat->jobs;
	watched[1] = cat->attempts;
	watched[2] = cat->operations;
	watched[3] = cat->certifications;
	for (int i = 0; i < WATCHED_TABLES; i++)
		if (!OidIsValid(watched[i]))
		{
			cat->unusable_reason = "a table of jobguard is missing";
			return;
		}
	cat->incomplete = false;

	jobs = table_open(cat->jobs, AccessShareLock);
	attempts = table_open(cat->attempts, AccessShareLock);
	operations = table_open(cat->operations, AccessShareLock);
	certifications = table_open(cat->certifications, AccessShareLock);

	problem = column_problem(jobs, job_columns, JOB_COLUMN_COUNT, cat->job_att, true);
	if (problem == NULL)
		problem = column_problem(attempts, attempt_columns, ATT_COLUMN_COUNT,
								 cat->attempt_att, true);
	if (problem == NULL)
		problem = column_problem(operations, operation_columns, OP_COLUMN_COUNT,
								 cat->op_att, false);
	if (problem == NULL)
		problem = column_problem(certifications, certification_columns,
								 CERT_COLUMN_COUNT, cat->cert_att, false);
	if (problem == NULL)
	{
		/* 1.3's column, when the database has it: what a certification is earned under */
		cat->cert_version_att = get_attnum(cat->certifications, "contract_version");
		if (cat->cert_version_att != InvalidAttrNumber &&
			getBaseType(TupleDescAttr(RelationGetDescr(certifications),
									  cat->cert_version_att - 1)->atttypid) != INT8OID)
			problem = "column \"contract_version\" of table jobguard.certifications has another type";
	}
	if (problem == NULL)
		problem = foreign_code(jobs, cat);
	if (problem == NULL)
		problem = foreign_code(attempts, cat);
	if (problem == NULL)
		problem = table_shape_problem(jobs);
	if (problem == NULL)
		problem = table_shape_problem(attempts);
	if (problem == NULL)
		problem = table_shape_problem(operations);
	if (problem == NULL)
		problem = table_shape_problem(certifications);
	cat->usable = (problem == NULL);
	cat->unusable_reason = problem;
	if (cat->usable)
	{
		keys[0] = cat->job_att[JOB_ID];
		cat->jobs_pkey = index_on(jobs, 1, keys, InvalidAttrNumber);
		keys[0] = cat->job_att[JOB_SCOPE];
		keys[1] = cat->job_att[JOB_OWNER_ID];
		keys[2] = cat->job_att[JOB_IDEMPOTENCY_KEY];
		cat->jobs_owner_key = index_on(jobs, 3, keys, cat->job_att[JOB_REPLACED_AT]);
		cat->jobs_arbiters = key_arbiters(jobs, keys, cat->job_att[JOB_REPLACED_AT]);
		keys[0] = cat->attempt_att[ATT_ID];
		cat->attempts_pkey = index_on(attempts, 1, keys, InvalidAttrNumber);
		keys[0] = cat->attempt_att[ATT_JOB_ID];
		keys[1] = cat->attempt_att[ATT_ATTEMPT_NO];
		cat->attempts_job_attempt_no = index_on(attempts, 2, keys, InvalidAttrNumber);
		keys[0] = cat->op_att[OP_OPERATION];
		cat->operations_pkey = index_on(operations, 1, keys, InvalidAttrNumber);
		keys[0] = cat->cert_att[CERT_OPERATION];
		keys[1] = cat->cert_att[CERT_PROVIDER];
		cat->certifications_pkey = index_on(certifications, 2, keys, InvalidAttrNumber);
		cat->usable = OidIsValid(cat->jobs_pkey) && OidIsValid(cat->jobs_owner_key) &&
			OidIsValid(cat->attempts_pkey) && OidIsValid(cat->attempts_job_attempt_no) &&
			OidIsValid(cat->operations_pkey) && OidIsValid(cat->certifications_pkey);
		if (!cat->usable)
			cat->unusable_reason = "a unique index of jobguard's tables is missing";
	}
	if (cat->usable)
	{
		rows_compile_rules(jobs, &cat->job_rules);
		rows_compile_rules(attempts, &cat->attempt_rules);
	}

	table_close(certifications, NoLock);
	table_close(operations, NoLock);
	table_close(attempts, NoLock);
	table_close(jobs, NoLock);
}

/*
 * current_catalog: the catalog, rebuilt first if an invalidation made it
 * stale (the old one is freed here).  An invalidation arriving while it is
 * built leaves it marked stale; rows_usable() then builds it again.
 */
static RowsCatalog *
current_catalog(void)
{
	MemoryContext old;
	RowsCatalog *built;

	if (catalog_valid && catalog != NULL)
		return catalog;
	Assert(rows_depth == 0);
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(catalog_invalidate, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, dependency_invalidate, (Datum) 0);
		CacheRegisterSyscacheCallback(TYPEOID, dependency_invalidate, (Datum) 0);
		callback_registered = true;
	}
	catalog = NULL;
	active = NULL;
	if (catalog_cxt != NULL)
	{
		MemoryContextDelete(catalog_cxt);
		catalog_cxt = NULL;
	}
	n_dependent_relids = n_dependencies = 0;
	dependent_relids_overflow = dependencies_overflow = false;
	catalog_cxt = AllocSetContextCreate(CacheMemoryContext, "jobguard rows catalog",
										ALLOCSET_SMALL_SIZES);
	catalog_valid = true;
	old = MemoryContextSwitchTo(catalog_cxt);
	built = palloc(sizeof(RowsCatalog));
	build_catalog(built);
	MemoryContextSwitchTo(old);
	/* a missing table sends no invalidation when it comes back: look again */
	if (built->incomplete)
		catalog_valid = false;
	catalog = built;
	return catalog;
}

/*
 * lock_tables: the table locks the SQL statements of a call take (a
 * finish's read takes the row-exclusive locks its update will need at
 * once), held to the end of the transaction.  Taking a lock the transaction does
 * not hold yet processes pending invalidations, so a catalog still valid
 * afterwards describes the tables as they now are: nobody can change them
 * while the locks are held.
 */
static void
lock_tables(const RowsCatalog *cat, RowsCall call)
{
	switch (call)
	{
		case ROWS_SUBMIT:
			LockRelationOid(cat->jobs, RowExclusiveLock);
			break;
		case ROWS_BEGIN:
			LockRelationOid(cat->attempts, RowExclusiveLock);
			LockRelationOid(cat->jobs, RowShareLock);
			LockRelationOid(cat->certifications, AccessShareLock);
			break;
		case ROWS_FINISH:
			LockRelationOid(cat->attempts, RowExclusiveLock);
			LockRelationOid(cat->jobs, RowExclusiveLock);
			LockRelationOid(cat->operations, AccessShareLock);
			break;
	}
}

/* How often rows_usable() rebuilds a catalog invalidated under it. */
#define CATALOG_TRIES 5

/*
 * rows_usable: may store_dispatch.c use the fast path (src/rows.c) for a
 * call that locks these tables?
 * Yes when jobguard.fast_path is on, the transaction may write (a
 * read-only one gets the executor's error from the SQL instead), and the
 * tables, checked under the call's locks, have nothing rows.c would skip.
 */
bool
rows_usable(RowsCall call)
{
	if (rows_depth > 0)
		return false;
	active = NULL;
	if (!rows_fast_path || XactReadOnly || IsInParallelMode())
		return false;
	/* this transaction's own DDL sends its invalidations now */
	CommandCounterIncrement();
	for (int tries = 0; tries < CATALOG_TRIES; tries++)
	{
		RowsCatalog *cat = current_catalog();

		if (!cat->usable)
			return false;
		lock_tables(cat, call);
		if (catalog_valid)
		{
			active = cat;
			return true;
		}
	}
	return false;
}

/*
 * rows_unusable_reason: why calls would not use the fast path now, or NULL
 * when they would; for jobguard.fast_path_status().  The tables are locked
 * for reading first, so a change committed before is seen.
 */
const char *
rows_unusable_reason(void)
{
	if (!rows_fast_path)
		return "jobguard.fast_path is off";
	if (XactReadOnly)
		return "the transaction is read-only";
	if (IsInParallelMode())
		return "the call runs in parallel mode";
	if (rows_depth > 0)
		return "it is called from within a jobguard call";
	CommandCounterIncrement();
	for (int tries = 0; tries < CATALOG_TRIES; tries++)
	{
		RowsCatalog *cat = current_catalog();

		if (!cat->usable)
			return pstrdup(cat->unusable_reason);
		for (int i = 0; i < WATCHED_TABLES; i++)
			LockRelationOid(watched[i], AccessShareLock);
		if (catalog_valid)
			return NULL;
	}
	return "jobguard's tables keep changing";
}

/* rows_active_catalog: the catalog rows_usable() approved for this call. */
RowsCatalog *
rows_active_catalog(void)
{
	if (active == NULL)
		elog(ERROR, "jobguard: fast path used without rows_usable()");
	return active;
}
