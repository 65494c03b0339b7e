/*-------------------------------------------------------------------------
 *
 * store_columns.h
 *	  The columns of jobguard's tables as the C code knows them: one list
 *	  per table, and the list of the job columns a submit writes.  Every
 *	  enum, name table and statement column list that depends on them is
 *	  generated from these lists (X-macros), so a column is named once.
 *
 * The table lists are in the tables' column order (doc/reference.md,
 * "Tables"); each entry is X(enum name, column name, base type OID).  The
 * fast path (fastpath.h, rows_catalog.c) generates its column enums and
 * its catalog check from them: a table the fast path writes must have
 * exactly these columns, or the fast path steps aside.
 *
 * SUBMIT_COLUMNS lists the job columns submit and submit_many write, in
 * the order of the SQL statements' column lists and $n parameters (its
 * entries are described where it is defined), and SEP is put between
 * entries (a string for SQL text, STORE_COLUMNS_COMMA
 * for C lists).  The type OIDs need catalog/pg_type_d.h where a list is
 * expanded with them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_STORE_COLUMNS_H
#define JOBGUARD_STORE_COLUMNS_H

/* jobguard.jobs */
#define JOBS_COLUMNS(X) \
	X(JOB_ID, "id", INT8OID) \
	X(JOB_OWNER_ID, "owner_id", TEXTOID) \
	X(JOB_IDEMPOTENCY_KEY, "idempotency_key", TEXTOID) \
	X(JOB_OPERATION, "operation", TEXTOID) \
	X(JOB_PARAMS, "params", JSONBOID) \
	X(JOB_PROVIDER, "provider", TEXTOID) \
	X(JOB_MAX_ATTEMPTS, "max_attempts", INT4OID) \
	X(JOB_VERSION, "version", INT8OID) \
	X(JOB_COMPLETED_BY, "completed_by", INT8OID) \
	X(JOB_RESULT, "result", JSONBOID) \
	X(JOB_CREATED_AT, "created_at", TIMESTAMPTZOID) \
	X(JOB_COMPLETED_AT, "completed_at", TIMESTAMPTZOID) \
	X(JOB_CANCELLED_AT, "cancelled_at", TIMESTAMPTZOID) \
	X(JOB_CANCEL_REASON, "cancel_reason", TEXTOID) \
	X(JOB_SCOPE, "scope", TEXTOID) \
	X(JOB_PREVIOUS_JOB_ID, "previous_job_id", INT8OID) \
	X(JOB_REPLACED_AT, "replaced_at", TIMESTAMPTZOID) \
	X(JOB_NOT_BEFORE, "not_before", TIMESTAMPTZOID) \
	X(JOB_PRIORITY, "priority", INT2OID) \
	X(JOB_RETRIES, "retries", JSONBOID)

/* jobguard.attempts */
#define ATTEMPTS_COLUMNS(X) \
	X(ATT_ID, "id", INT8OID) \
	X(ATT_JOB_ID, "job_id", INT8OID) \
	X(ATT_ATTEMPT_NO, "attempt_no", INT4OID) \
	X(ATT_PROVIDER, "provider", TEXTOID) \
	X(ATT_STATE, "state", TEXTOID) \
	X(ATT_READ_VERSION, "read_version", INT8OID) \
	X(ATT_ATTEMPT_KEY, "attempt_key", TEXTOID) \
	X(ATT_STARTED_AT, "started_at", TIMESTAMPTZOID) \
	X(ATT_DEADLINE, "deadline", TIMESTAMPTZOID) \
	X(ATT_FINISHED_AT, "finished_at", TIMESTAMPTZOID) \
	X(ATT_ERROR, "error", TEXTOID) \
	X(ATT_LOST_TO, "lost_to", INT8OID) \
	X(ATT_LOST_RESULT, "lost_result", JSONBOID) \
	X(ATT_CANCELLED_AT, "cancelled_at", TIMESTAMPTZOID) \
	X(ATT_CANCEL_REASON, "cancel_reason", TEXTOID) \
	X(ATT_WORKER, "worker", TEXTOID) \
	X(ATT_TIMEOUT, "timeout", INTERVALOID) \
	X(ATT_PROVIDER_KEY, "provider_key", TEXTOID) \
	X(ATT_TRIES, "tries", INT4OID) \
	X(ATT_UNKNOWN_SINCE, "unknown_since", TIMESTAMPTZOID)

/* The columns of jobguard.operations the fast path reads. */
#define OPERATIONS_COLUMNS(X) \
	X(OP_OPERATION, "operation", TEXTOID) \
	X(OP_OUTPUT_CONTRACT, "output_contract", JSONBOID) \
	X(OP_CONTRACT_VERSION, "contract_version", INT8OID)

/* The columns of jobguard.certifications the fast path reads. */
#define CERTIFICATIONS_COLUMNS(X) \
	X(CERT_OPERATION, "operation", TEXTOID) \
	X(CERT_PROVIDER, "provider", TEXTOID) \
	X(CERT_REVOKED_AT, "revoked_at", TIMESTAMPTZOID)

/*
 * The job columns a submit writes: the request, then the caller's scope
 * (last: submit_many passes it once, beside the other columns' arrays).
 * Each entry is X(enum name, job column enum, column name, type OID, the
 * type OID submit_many passes it as (its array type; the scope's own
 * type), $n, role), the role one of
 *   KEY       it finds the job (with the scope): owner_id, idempotency_key,
 *             fixed (the statements' key conditions and ON CONFLICT name
 *             them, and the fast path's key index);
 *   COMPARED  a replay must equal the stored job in it (else JG001); the
 *             back ends compare it with its type's "=", NULL equal to NULL;
 *   AS_SUBMITTED  max_attempts only: COMPARED, with the value the job was
 *             submitted with (retry_job raises the stored one and keeps
 *             the first in jobs.retries);
 *   SCOPE     the caller's scope, fixed.
 * A new COMPARED column of the request is one entry here (and submit.c
 * takes it): the statements, both back ends, the batch and the comparison
 * follow.  SUBMIT_PARAM_AFTER_1..3 are then one higher each.  A column a
 * submit writes but a replay does not compare would need a role of its
 * own (the schedule, run_at and priority, is passed beside the request
 * instead: see SubmitRequest).
 */
#define SUBMIT_COLUMNS(X, SEP) \
	X(SUBMIT_OWNER_ID, JOB_OWNER_ID, "owner_id", TEXTOID, TEXTARRAYOID, 1, KEY) SEP \
	X(SUBMIT_IDEMPOTENCY_KEY, JOB_IDEMPOTENCY_KEY, "idempotency_key", TEXTOID, TEXTARRAYOID, 2, KEY) SEP \
	X(SUBMIT_OPERATION, JOB_OPERATION, "operation", TEXTOID, TEXTARRAYOID, 3, COMPARED) SEP \
	X(SUBMIT_PARAMS, JOB_PARAMS, "params", JSONBOID, JSONBARRAYOID, 4, COMPARED) SEP \
	X(SUBMIT_PROVIDER, JOB_PROVIDER, "provider", TEXTOID, TEXTARRAYOID, 5, COMPARED) SEP \
	X(SUBMIT_MAX_ATTEMPTS, JOB_MAX_ATTEMPTS, "max_attempts", INT4OID, INT4ARRAYOID, 6, AS_SUBMITTED) SEP \
	X(SUBMIT_SCOPE, JOB_SCOPE, "scope", TEXTOID, TEXTOID, 7, SCOPE)

/*
 * The parameters the submit statements take after the columns above
 * (previous_job_id, submit_many's flags, the schedule), as numbers for
 * SQL text ("$" CppAsString2(SUBMIT_PARAM_AFTER_1)); store_sql.c asserts
 * that they follow the list.
 */
#define SUBMIT_PARAM_AFTER_1 8
#define SUBMIT_PARAM_AFTER_2 9
#define SUBMIT_PARAM_AFTER_3 10

/* A separator for the lists above that expands to a comma. */
#define STORE_COLUMNS_COMMA ,

/* The pieces generated from the lists. */
#define STORE_COLUMN_ENUM(e, name, type) e,
#define SUBMIT_COLUMN_ENUM_(e, col, name, type, atype, n, role) e
#define SUBMIT_COLUMN_NAME_(e, col, name, type, atype, n, role) name
#define SUBMIT_COLUMN_PARAM_(e, col, name, type, atype, n, role) "$" #n
#define SUBMIT_COLUMN_TYPE_(e, col, name, type, atype, n, role) type
#define SUBMIT_COLUMN_JOB_(e, col, name, type, atype, n, role) col
#define SUBMIT_COLUMN_ROLE_(e, col, name, type, atype, n, role) SUBMIT_ROLE_##role
#define SUBMIT_COLUMN_CHECK_(e, col, name, type, atype, n, role) \
	StaticAssertDecl((e) + 1 == (n), "SUBMIT_COLUMNS: " name " is not $" #n);

/* SUBMIT_OWNER_ID, ..., SUBMIT_SCOPE: positions in a SubmitRequest. */
typedef enum SubmitColumn
{
	SUBMIT_COLUMNS(SUBMIT_COLUMN_ENUM_, STORE_COLUMNS_COMMA),
	SUBMIT_COLUMN_COUNT
} SubmitColumn;

/* What a submit column is to a replay (the roles above). */
typedef enum SubmitRole
{
	SUBMIT_ROLE_KEY,
	SUBMIT_ROLE_COMPARED,
	SUBMIT_ROLE_AS_SUBMITTED,
	SUBMIT_ROLE_SCOPE
} SubmitRole;

/* "owner_id, idempotency_key, ..., scope" */
#define SUBMIT_COLUMN_NAMES SUBMIT_COLUMNS(SUBMIT_COLUMN_NAME_, ", ")
/* "$1, $2, ..., $7" */
#define SUBMIT_COLUMN_PARAMS SUBMIT_COLUMNS(SUBMIT_COLUMN_PARAM_, ", ")
/* TEXTOID, TEXTOID, ...: the statements' argument types */
#define SUBMIT_COLUMN_TYPES SUBMIT_COLUMNS(SUBMIT_COLUMN_TYPE_, STORE_COLUMNS_COMMA)
/* JOB_OWNER_ID, ...: the job column of each (fast path only) */
#define SUBMIT_COLUMN_JOB_COLUMNS SUBMIT_COLUMNS(SUBMIT_COLUMN_JOB_, STORE_COLUMNS_COMMA)
/* SUBMIT_ROLE_KEY, ...: the role of each */
#define SUBMIT_COLUMN_ROLES SUBMIT_COLUMNS(SUBMIT_COLUMN_ROLE_, STORE_COLUMNS_COMMA)
/* submit_role_compared: whether a replay must equal the job in the column */
#define submit_role_compared(role) \
	((role) == SUBMIT_ROLE_COMPARED || (role) == SUBMIT_ROLE_AS_SUBMITTED)
/* "owner_id", ...: the name of each, as C strings */
#define SUBMIT_COLUMN_NAME_LIST SUBMIT_COLUMNS(SUBMIT_COLUMN_NAME_, STORE_COLUMNS_COMMA)
/* static assertions that each entry's $n is its position */
#define SUBMIT_COLUMNS_CHECK() SUBMIT_COLUMNS(SUBMIT_COLUMN_CHECK_, )

#endif							/* JOBGUARD_STORE_COLUMNS_H */
