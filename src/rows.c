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
 * its statements and returns the same answers.  rows_usable() first takes
 * the table locks the statements would take, then checks what it knows of
 * the tables, so a schema change committed while a call waited is seen by
 * that call.  When a table has a trigger or rule jobguard did not create,
 * a column it does not know or of another type, a generated column, or
 * when the transaction is read-only or jobguard.fast_path is off, it says
 * no and store.c runs its SQL: the fast path never skips something a user
 * added, and read-only transactions get the executor's own error.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation_d.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "jobguard.h"

/* GUC jobguard.fast_path: use this file's direct access (default on). */
bool		rows_fast_path = true;

/* A column this file reads or writes: its name and the base type it has. */
typedef struct KnownColumn
{
	const char *name;
	Oid			base_type;
} KnownColumn;

/* The columns of jobguard.jobs this file reads or writes. */
typedef enum JobColumn
{
	JOB_ID,
	JOB_OWNER_ID,
	JOB_IDEMPOTENCY_KEY,
	JOB_OPERATION,
	JOB_PARAMS,
	JOB_PROVIDER,
	JOB_MAX_ATTEMPTS,
	JOB_VERSION,
	JOB_COMPLETED_BY,
	JOB_RESULT,
	JOB_CREATED_AT,
	JOB_COMPLETED_AT,
	JOB_CANCELLED_AT,
	JOB_CANCEL_REASON,
	JOB_COLUMN_COUNT
} JobColumn;

static const KnownColumn job_columns[JOB_COLUMN_COUNT] = {
	{"id", INT8OID}, {"owner_id", TEXTOID}, {"idempotency_key", TEXTOID},
	{"operation", TEXTOID}, {"params", JSONBOID}, {"provider", TEXTOID},
	{"max_attempts", INT4OID}, {"version", INT8OID}, {"completed_by", INT8OID},
	{"result", JSONBOID}, {"created_at", TIMESTAMPTZOID},
	{"completed_at", TIMESTAMPTZOID}, {"cancelled_at", TIMESTAMPTZOID},
	{"cancel_reason", TEXTOID}
};

/* The columns of jobguard.attempts this file reads or writes. */
typedef enum AttemptColumn
{
	ATT_ID,
	ATT_JOB_ID,
	ATT_ATTEMPT_NO,
	ATT_PROVIDER,
	ATT_STATE,
	ATT_READ_VERSION,
	ATT_ATTEMPT_KEY,
	ATT_STARTED_AT,
	ATT_DEADLINE,
	ATT_FINISHED_AT,
	ATT_ERROR,
	ATT_LOST_TO,
	ATT_LOST_RESULT,
	ATT_CANCELLED_AT,
	ATT_CANCEL_REASON,
	ATT_COLUMN_COUNT
} AttemptColumn;

static const KnownColumn attempt_columns[ATT_COLUMN_COUNT] = {
	{"id", INT8OID}, {"job_id", INT8OID}, {"attempt_no", INT4OID},
	{"provider", TEXTOID}, {"state", TEXTOID}, {"read_version", INT8OID},
	{"attempt_key", TEXTOID}, {"started_at", TIMESTAMPTZOID},
	{"deadline", TIMESTAMPTZOID}, {"finished_at", TIMESTAMPTZOID},
	{"error", TEXTOID}, {"lost_to", INT8OID}, {"lost_result", JSONBOID},
	{"cancelled_at", TIMESTAMPTZOID}, {"cancel_reason", TEXTOID}
};

/* The columns of jobguard.operations and jobguard.certifications read here. */
typedef enum OperationColumn
{
	OP_OPERATION,
	OP_OUTPUT_CONTRACT,
	OP_CONTRACT_VERSION,
	OP_COLUMN_COUNT
} OperationColumn;

static const KnownColumn operation_columns[OP_COLUMN_COUNT] = {
	{"operation", TEXTOID}, {"output_contract", JSONBOID},
	{"contract_version", INT8OID}
};

typedef enum CertificationColumn
{
	CERT_OPERATION,
	CERT_PROVIDER,
	CERT_REVOKED_AT,
	CERT_COLUMN_COUNT
} CertificationColumn;

static const KnownColumn certification_columns[CERT_COLUMN_COUNT] = {
	{"operation", TEXTOID}, {"provider", TEXTOID}, {"revoked_at", TIMESTAMPTZOID}
};

/*
 * The rules of one table that a write applies itself, compiled once: the
 * default of each column, the domain of each column, and the CHECK
 * constraints — what the executor rebuilds for every statement.
 */
typedef struct TableRules
{
	int			natts;
	ExprState **default_state;	/* per attribute, NULL if no default */
	Oid		   *domain_type;	/* per attribute, InvalidOid if no domain */
	void	  **domain_cache;	/* per attribute, domain_check()'s cache */
	int			ncheck;
	ExprState **check_state;
	char	  **check_name;
	ExprContext *econtext;		/* long-lived, to evaluate the above in */
} TableRules;

/*
 * What this backend knows about jobguard's tables: their OIDs, the indexes
 * used here, the attribute numbers of the columns, and the compiled rules.
 * Rebuilt after a relcache invalidation of one of them (ALTER TABLE,
 * CREATE TRIGGER, DROP EXTENSION, ...).
 */
typedef struct RowsCatalog
{
	bool		usable;			/* false: store.c must run its SQL */
	const char *unusable_reason;	/* why not, for fast_path_status() */
	bool		incomplete;		/* a table is missing: look again next call */
	Oid			jobs;
	Oid			attempts;
	Oid			operations;
	Oid			certifications;
	Oid			jobs_pkey;
	Oid			jobs_owner_key;
	Oid			attempts_pkey;
	Oid			attempts_job_attempt_no;
	Oid			operations_pkey;
	Oid			certifications_pkey;
	AttrNumber	job_att[JOB_COLUMN_COUNT];
	AttrNumber	attempt_att[ATT_COLUMN_COUNT];
	AttrNumber	op_att[OP_COLUMN_COUNT];
	AttrNumber	cert_att[CERT_COLUMN_COUNT];
	TableRules	job_rules;
	TableRules	attempt_rules;
} RowsCatalog;

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
static int	rows_depth = 0;

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
 * compile_expression: plan an expression as the executor would and
 * compile it into the current (catalog) memory, remembering what it
 * depends on.
 */
static ExprState *
compile_expression(Expr *expr)
{
	List	   *relids = NIL;
	List	   *items = NIL;
	ListCell   *lc;
	Expr	   *planned = expression_planner_with_deps(expr, &relids, &items);

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
	return ExecInitExpr(planned, NULL);
}

/*
 * compile_rules: a table's column defaults, column domains and CHECK
 * constraints, compiled into the catalog's long-lived memory.
 */
static void
compile_rules(Relation rel, TableRules *rules)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;

	rules->natts = desc->natts;
	rules->default_state = palloc0(sizeof(ExprState *) * desc->natts);
	rules->domain_type = palloc0(sizeof(Oid) * desc->natts);
	rules->domain_cache = palloc0(sizeof(void *) * desc->natts);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Node	   *def;

		if (att->attisdropped)
			continue;
		if (get_typtype(att->atttypid) == TYPTYPE_DOMAIN)
			rules->domain_type[i] = att->atttypid;
		def = build_column_default(rel, i + 1);
		if (def != NULL)
			rules->default_state[i] = compile_expression((Expr *) def);
	}
	rules->ncheck = constr ? constr->num_check : 0;
	rules->check_state = palloc0(sizeof(ExprState *) * Max(rules->ncheck, 1));
	rules->check_name = palloc0(sizeof(char *) * Max(rules->ncheck, 1));
	for (int i = 0; i < rules->ncheck; i++)
	{
		Expr	   *expr = stringToNode(constr->check[i].ccbin);

		rules->check_name[i] = pstrdup(constr->check[i].ccname);
		rules->check_state[i] = compile_expression(expr);
	}
	/*
	 * Evaluated in a context that lives as long as the compiled
	 * expressions: some steps (a whole-row reference) keep what they set up
	 * on first use in the context's per-query memory.
	 */
	rules->econtext = CreateStandaloneExprContext();
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
		bool		conkey_null;
		bool		confkey_null;
		Datum		conkey = SysCacheGetAttr(CONSTROID, tuple,
											 Anum_pg_constraint_conkey, &conkey_null);
		Datum		confkey = SysCacheGetAttr(CONSTROID, tuple,
											  Anum_pg_constraint_confkey, &confkey_null);

		if (con->contype == CONSTRAINT_FOREIGN && con->conrelid == attempts &&
			con->confrelid == jobs && !conkey_null && !confkey_null)
		{
			ArrayType  *keys = DatumGetArrayTypeP(conkey);
			ArrayType  *fkeys = DatumGetArrayTypeP(confkey);

			match = ARR_NDIM(keys) == 1 && ARR_DIMS(keys)[0] == 1 &&
				((int16 *) ARR_DATA_PTR(keys))[0] == job_id &&
				ARR_NDIM(fkeys) == 1 && ARR_DIMS(fkeys)[0] == 1 &&
				((int16 *) ARR_DATA_PTR(fkeys))[0] == id;
		}
		ReleaseSysCache(tuple);
	}
	return match;
}

/*
 * foreign_code: why the table's writes must go through the executor — a
 * trigger other than those of the attempts → jobs foreign key, a rule, or
 * forced row security — or NULL when nothing there would be skipped.
 */
static const char *
foreign_code(Relation rel, const RowsCatalog *cat)
{
	const char *name = RelationGetRelationName(rel);

	if (rel->rd_rules != NULL)
		return psprintf("table jobguard.%s has a rule", name);
	if (rel->rd_rel->relispartition)
		return psprintf("table jobguard.%s is a partition", name);
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
 * forced_row_security: a table whose row level security applies even to
 * its owner, whom the SQL statements run as: reads must go through SQL.
 */
static const char *
forced_row_security(Relation rel)
{
	if (rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity)
		return psprintf("table jobguard.%s forces row level security",
						RelationGetRelationName(rel));
	return NULL;
}

/*
 * column_problem: find the attribute numbers of the named columns, or say
 * why the table does not fit this file: a column missing or of another
 * base type; and for a table rows.c writes (all_known), a generated column
 * or one this file does not know of (whose default it would miss).
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
 * index_on: the OID of the table's valid unique index whose key columns
 * are exactly the given attributes (in order), with no predicate or
 * expression; InvalidOid if none.  Finds indexes by what they index, not
 * by name.
 */
static Oid
index_on(Relation rel, int nkeys, const AttrNumber *atts)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = index->rd_index;
		bool		match = form->indisunique && form->indisvalid &&
			form->indimmediate && form->indnkeyatts == nkeys &&
			RelationGetIndexPredicate(index) == NIL &&
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

/* build_catalog: fill *cat from the system catalogs; see RowsCatalog. */
static void
build_catalog(RowsCatalog *cat)
{
	Oid			schema = get_namespace_oid("jobguard", true);
	Relation	jobs,
				attempts,
				operations,
				certifications;
	AttrNumber	keys[2];

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
		problem = foreign_code(jobs, cat);
	if (problem == NULL)
		problem = foreign_code(attempts, cat);
	if (problem == NULL)
		problem = forced_row_security(jobs);
	if (problem == NULL)
		problem = forced_row_security(attempts);
	if (problem == NULL)
		problem = forced_row_security(operations);
	if (problem == NULL)
		problem = forced_row_security(certifications);
	cat->usable = (problem == NULL);
	cat->unusable_reason = problem;
	if (cat->usable)
	{
		keys[0] = cat->job_att[JOB_ID];
		cat->jobs_pkey = index_on(jobs, 1, keys);
		keys[0] = cat->job_att[JOB_OWNER_ID];
		keys[1] = cat->job_att[JOB_IDEMPOTENCY_KEY];
		cat->jobs_owner_key = index_on(jobs, 2, keys);
		keys[0] = cat->attempt_att[ATT_ID];
		cat->attempts_pkey = index_on(attempts, 1, keys);
		keys[0] = cat->attempt_att[ATT_JOB_ID];
		keys[1] = cat->attempt_att[ATT_ATTEMPT_NO];
		cat->attempts_job_attempt_no = index_on(attempts, 2, keys);
		keys[0] = cat->op_att[OP_OPERATION];
		cat->operations_pkey = index_on(operations, 1, keys);
		keys[0] = cat->cert_att[CERT_OPERATION];
		keys[1] = cat->cert_att[CERT_PROVIDER];
		cat->certifications_pkey = index_on(certifications, 2, keys);
		cat->usable = OidIsValid(cat->jobs_pkey) && OidIsValid(cat->jobs_owner_key) &&
			OidIsValid(cat->attempts_pkey) && OidIsValid(cat->attempts_job_attempt_no) &&
			OidIsValid(cat->operations_pkey) && OidIsValid(cat->certifications_pkey);
		if (!cat->usable)
			cat->unusable_reason = "a unique index of jobguard's tables is missing";
	}
	if (cat->usable)
	{
		compile_rules(jobs, &cat->job_rules);
		compile_rules(attempts, &cat->attempt_rules);
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
 * lock_tables: the table locks the SQL statements of a call would take,
 * held to the end of the transaction.  Taking a lock the transaction does
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
 * rows_usable: may store.c use the functions of this file for this call?
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

/* active_catalog: the catalog rows_usable() approved for this call. */
static RowsCatalog *
active_catalog(void)
{
	if (active == NULL)
		elog(ERROR, "jobguard: fast path used without rows_usable()");
	return active;
}

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
	ScanKeyData keys[2];
	IndexScanDesc scan;
	bool		found;

	Assert(nkeys <= 2);
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

/* Reading columns of a fetched row, by attribute number. */
static Datum
col(TupleTableSlot *slot, AttrNumber att, bool *isnull)
{
	return slot_getattr(slot, att, isnull);
}

static int64
col_int64(TupleTableSlot *slot, AttrNumber att, bool *isnull)
{
	Datum		d = slot_getattr(slot, att, isnull);

	return *isnull ? 0 : DatumGetInt64(d);
}

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
 * EState to evaluate defaults, index predicates and CHECK constraints in,
 * a slot for the row being written (with which columns the call assigned)
 * and one for rows read.
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
		/* copied into the call's memory: the evaluation's is reset below */
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
 * messages: the domain of each column written (23514 from the domain; an
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
						 catalog_cxt);
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
 * (owner_id, idempotency_key) DO NOTHING.  As in SQL, the id is drawn from
 * the sequence before the conflict check, so a replay leaves a gap.
 */
static bool
insert_job(Datum owner_id, Datum idempotency_key, Datum operation,
		   Datum params, Datum provider,
		   Datum max_attempts, bool max_attempts_null, int64 *job_id)
{
	RowsCatalog *cat = active_catalog();
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
match_job(Datum owner_id, Datum idempotency_key, Datum operation,
		  Datum params, Datum provider,
		  Datum max_attempts, bool max_attempts_null, SubmitMatch *match)
{
	RowsCatalog *cat = active_catalog();
	const AttrNumber *a = cat->job_att;
	Snapshot	snap = begin_statement();
	Relation	jobs = table_open(cat->jobs, AccessShareLock);
	TupleTableSlot *slot = table_slot_create(jobs, NULL);
	Datum		key[2] = {owner_id, idempotency_key};
	RegProcedure procs[2] = {F_TEXTEQ, F_TEXTEQ};
	bool		found;

	found = fetch_by_key(jobs, cat->jobs_owner_key, 2, key, procs,
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
 * read_job: the job row for begin_attempt's gate, visible to snap; false
 * if there is none.
 */
static bool
read_job(RowsCatalog *cat, Relation jobs, int64 job_id, Snapshot snap,
		 TupleTableSlot *slot, JobRow *job)
{
	const AttrNumber *a = cat->job_att;
	bool		isnull;
	Datum		d;

	if (!fetch_by_id(jobs, cat->jobs_pkey, job_id, snap, slot))
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
						 errmsg("could not serialize access due to concurrent delete")));
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
begin_attempt(int64 job_id, Datum provider, bool provider_null,
			  Datum timeout, Datum attempt_key, bool attempt_key_null)
{
	RowsCatalog *cat = active_catalog();
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
	if (read_job(cat, jobs, job_id, snap, job_slot, &job) &&
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
read_for_finish(int64 attempt_id, AttemptRow *attempt, FinishJob *job)
{
	RowsCatalog *cat = active_catalog();
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
	RowsCatalog *cat = active_catalog();
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
rows_insert_job(Datum owner_id, Datum idempotency_key, Datum operation,
				Datum params, Datum provider,
				Datum max_attempts, bool max_attempts_null, int64 *job_id)
{
	volatile bool inserted = false;

	ROWS_GUARDED(inserted = insert_job(owner_id, idempotency_key, operation, params,
									   provider, max_attempts, max_attempts_null, job_id));
	return inserted;
}

/* rows_match_job: see match_job. */
bool
rows_match_job(Datum owner_id, Datum idempotency_key, Datum operation,
			   Datum params, Datum provider,
			   Datum max_attempts, bool max_attempts_null, SubmitMatch *match)
{
	volatile bool found = false;

	ROWS_GUARDED(found = match_job(owner_id, idempotency_key, operation, params,
								   provider, max_attempts, max_attempts_null, match));
	return found;
}

/* rows_begin_attempt: see begin_attempt. */
int64
rows_begin_attempt(int64 job_id, Datum provider, bool provider_null,
				   Datum timeout, Datum attempt_key, bool attempt_key_null)
{
	volatile int64 id = 0;

	ROWS_GUARDED(id = begin_attempt(job_id, provider, provider_null, timeout,
									attempt_key, attempt_key_null));
	return id;
}

/* rows_read_for_finish: see read_for_finish. */
bool
rows_read_for_finish(int64 attempt_id, AttemptRow *attempt, FinishJob *job)
{
	volatile bool found = false;

	ROWS_GUARDED(found = read_for_finish(attempt_id, attempt, job));
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
