/*-------------------------------------------------------------------------
 *
 * fastpath.h
 *	  What the four files of the fast path share: rows_catalog.c knows
 *	  jobguard's tables (and when that knowledge is stale), rows_rules.c
 *	  compiles their rules, rows_write.c reads and writes rows with them,
 *	  and rows.c builds the operations of store_backend.h from that
 *	  (fast_path_backend).  Nothing outside these four includes it; the
 *	  fast path itself includes only the seam (store_backend.h) and the
 *	  rows it passes (store_rows.h), never the layers above.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_FASTPATH_H
#define JOBGUARD_FASTPATH_H

#include "postgres.h"

#include "nodes/execnodes.h"

#include "store_backend.h"
#include "store_columns.h"
#include "store_rows.h"

/* A column the fast path reads or writes: its name and its base type. */
typedef struct KnownColumn
{
	const char *name;
	Oid			base_type;
} KnownColumn;

/*
 * The columns of the tables, by position in store_columns.h's lists: the
 * attribute numbers rows_catalog.c finds for them are indexed by these.
 */
typedef enum JobColumn
{
	JOBS_COLUMNS(STORE_COLUMN_ENUM)
	JOB_COLUMN_COUNT
} JobColumn;

typedef enum AttemptColumn
{
	ATTEMPTS_COLUMNS(STORE_COLUMN_ENUM)
	ATT_COLUMN_COUNT
} AttemptColumn;

typedef enum OperationColumn
{
	OPERATIONS_COLUMNS(STORE_COLUMN_ENUM)
	OP_COLUMN_COUNT
} OperationColumn;

typedef enum CertificationColumn
{
	CERTIFICATIONS_COLUMNS(STORE_COLUMN_ENUM)
	CERT_COLUMN_COUNT
} CertificationColumn;

/*
 * Compiled expressions of one kind (column defaults or CHECK constraints)
 * of one table, ready to evaluate in econtext.
 */
typedef struct CompiledRules
{
	ExprState **state;			/* defaults: per attribute, NULL if none;
								 * checks: one per constraint */
	ExprContext *econtext;		/* to evaluate them in */
} CompiledRules;

/*
 * The rules of one table that a write applies itself: the default of each
 * column, the domain of each column, and the CHECK constraints.  Nothing
 * is planned when the catalog is built: a table's defaults are compiled
 * when a call first inserts into it and its CHECK constraints when a call
 * first checks a row of it, as the executor plans them only for the table
 * a statement writes.  Rules that call no user-defined function are kept
 * for later calls (planning them again would give the same result);
 * rules that do are planned again for every statement, as the executor
 * does, because planning evaluates an IMMUTABLE function called with
 * constants, and a user's function may be IMMUTABLE in name only.
 */
typedef struct TableRules
{
	int			natts;
	Oid		   *domain_type;	/* per attribute, InvalidOid if no domain */
	void	  **domain_cache;	/* per attribute, domain_check()'s cache */
	int			ncheck;
	char	  **check_name;
	bool		defaults_kept;	/* defaults compiled and kept below */
	CompiledRules defaults;
	bool		checks_kept;	/* checks compiled and kept below */
	CompiledRules checks;
	MemoryContext cxt;			/* where all of this lives */
} TableRules;

/*
 * What this backend knows about jobguard's tables: their OIDs, the indexes
 * used here, the attribute numbers of the columns, and the compiled rules.
 * Rebuilt after a relcache invalidation of one of them (ALTER TABLE,
 * CREATE TRIGGER, DROP EXTENSION, ...), or of a relation, function or type
 * a compiled default or CHECK uses.
 */
typedef struct RowsCatalog
{
	bool		usable;			/* false: the SQL back end must serve */
	const char *unusable_reason;	/* why not, for fast_path_status() */
	bool		incomplete;		/* a table is missing: look again next call */
	Oid			jobs;
	Oid			attempts;
	Oid			operations;
	Oid			certifications;
	Oid			jobs_pkey;
	Oid			jobs_owner_key;
	List	   *jobs_arbiters;	/* ON CONFLICT (owner_id, idempotency_key)'s */
	Oid			attempts_pkey;
	Oid			attempts_job_attempt_no;
	Oid			operations_pkey;
	Oid			certifications_pkey;
	AttrNumber	job_att[JOB_COLUMN_COUNT];
	AttrNumber	attempt_att[ATT_COLUMN_COUNT];
	AttrNumber	op_att[OP_COLUMN_COUNT];
	AttrNumber	cert_att[CERT_COLUMN_COUNT];
	AttrNumber	cert_version_att;	/* certifications.contract_version (1.3);
									 * InvalidAttrNumber in a 1.2 database */
	TableRules	job_rules;
	TableRules	attempt_rules;
} RowsCatalog;

/*
 * How deep calls into rows.c are nested (rows_catalog.c refuses the fast
 * path to a nested call and never rebuilds the catalog while one runs).
 */
extern int	rows_depth;

/* The catalog rows_usable() approved for the running call. */
extern RowsCatalog *rows_active_catalog(void);

/*
 * A table's compiled defaults and CHECK constraints for the statement
 * whose executor state is estate (kept ones, or compiled in estate).
 */
extern void rows_rules_defaults(TableRules *rules, Relation rel, EState *estate,
								CompiledRules *out);
extern void rows_rules_checks(TableRules *rules, Relation rel, EState *estate,
							  CompiledRules *out);


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
	CompiledRules defaults;		/* an insert's: compiled when opened */
	CompiledRules checks;		/* compiled when the first row is checked */
	bool		checks_ready;
} RowWriter;

/* A condition a row must meet to be updated, and the change to make. */
typedef bool (*RowCondition) (RowWriter *w, void *arg);
typedef void (*RowChange) (RowWriter *w, void *arg);

/* rows_rules.c: the tables' rules, compiled */
extern void rows_compile_rules(Relation rel, TableRules *rules);

/* rows_catalog.c: what a kept rule depends on */
extern void rows_catalog_depends_on(List *relids, List *items);

/* rows_write.c: the primitives rows.c builds its calls from */
extern Snapshot rows_begin_statement(void);
extern void rows_end_statement(void);
extern bool rows_fetch_by_key(Relation heap, Oid indexoid, int nkeys, const Datum *values,
							  const RegProcedure *procs, ScanDirection direction,
							  Snapshot snap, TupleTableSlot *slot);
extern bool rows_fetch_by_id(Relation heap, Oid indexoid, int64 id, Snapshot snap,
							 TupleTableSlot *slot);
extern Datum rows_col(TupleTableSlot *slot, AttrNumber att, bool *isnull);
extern int64 rows_col_int64(TupleTableSlot *slot, AttrNumber att, bool *isnull);
extern char *rows_col_text(TupleTableSlot *slot, AttrNumber att);
extern Datum rows_col_varlena_copy(TupleTableSlot *slot, AttrNumber att, bool *isnull);
extern void rows_writer_open(RowWriter *w, Oid relid, TableRules *rules, CmdType cmd);
extern void rows_writer_close(RowWriter *w);
extern void rows_new_row_start(RowWriter *w);
extern void rows_set(RowWriter *w, AttrNumber att, Datum value, bool isnull);
extern bool rows_insert_unless_conflict(RowWriter *w, List *arbiters, Snapshot snap);
extern bool rows_update_if(RowWriter *w, Oid indexoid, int64 id, Snapshot snap,
						   RowCondition condition, RowChange change, void *arg);
extern Datum rows_now(void);

#endif							/* JOBGUARD_FASTPATH_H */
