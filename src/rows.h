/*-------------------------------------------------------------------------
 *
 * rows.h
 *	  What the two files of the fast path share: src/rows_catalog.c knows
 *	  jobguard's tables (and when that knowledge is stale), src/rows.c reads
 *	  and writes their rows with it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_ROWS_H
#define JOBGUARD_ROWS_H

#include "postgres.h"

#include "nodes/execnodes.h"

#include "states.h"
#include "store.h"

/* A column the fast path reads or writes: its name and its base type. */
typedef struct KnownColumn
{
	const char *name;
	Oid			base_type;
} KnownColumn;

/* The columns of jobguard.jobs the fast path reads or writes. */
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
	JOB_SCOPE,
	JOB_PREVIOUS_JOB_ID,
	JOB_REPLACED_AT,
	JOB_COLUMN_COUNT
} JobColumn;

/* The columns of jobguard.attempts the fast path reads or writes. */
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

/* The columns of jobguard.operations and jobguard.certifications read here. */
typedef enum OperationColumn
{
	OP_OPERATION,
	OP_OUTPUT_CONTRACT,
	OP_CONTRACT_VERSION,
	OP_COLUMN_COUNT
} OperationColumn;

typedef enum CertificationColumn
{
	CERT_OPERATION,
	CERT_PROVIDER,
	CERT_REVOKED_AT,
	CERT_COLUMN_COUNT
} CertificationColumn;

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

/*
 * How deep calls into rows.c are nested (rows_catalog.c refuses the fast
 * path to a nested call and never rebuilds the catalog while one runs).
 */
extern int	rows_depth;

/* The catalog rows_usable() approved for the running call. */
extern RowsCatalog *rows_active_catalog(void);

#endif							/* JOBGUARD_ROWS_H */
