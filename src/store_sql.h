/*-------------------------------------------------------------------------
 *
 * store_sql.h
 *	  What the files of the SQL back end share (private to
 *	  store_lifecycle.c, store_admin.c and store_sql.c): the statements by
 *	  number, and how to run one and read its result.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_STORE_SQL_H
#define JOBGUARD_STORE_SQL_H

#include "postgres.h"

#include "store_rows.h"

/* The statements; the numbers index statements[] and prepared_plans[]. */
typedef enum StatementId
{
	STMT_INSERT_JOB,
	STMT_INSERT_JOBS,
	STMT_MATCH_JOB,
	STMT_LOCK_JOB,
	STMT_LAST_ATTEMPT,
	STMT_BEGIN_ATTEMPT,
	STMT_PROVIDER_CERTIFIED,
	STMT_LOCK_ATTEMPT,
	STMT_READ_FOR_FINISH,
	STMT_CLAIM_AND_SWAP,
	STMT_WINNER_OF,
	STMT_CLOSE_ATTEMPT,
	STMT_MARK_UNKNOWN,
	STMT_CANCEL_ATTEMPT,
	STMT_CANCEL_JOB,
	STMT_HEARTBEAT,
	STMT_RETRY_POLICY,
	STMT_SET_NOT_BEFORE,
	STMT_CLAIM_CANDIDATES,
	STMT_CLAIMED,
	STMT_CLAIM_FLOOR,
	STMT_JOB_STATE,
	STMT_JOB_OVERVIEW,
	STMT_ID_SCOPES,
	STMT_ATTEMPTS_OF,
	STMT_DEFINE_OPERATION,
	STMT_CERTIFY_PROVIDER,
	STMT_REVOKE_PROVIDER,
	STMT_OPERATION_CONTRACT,
	STMT_FRESH_JOB_STATE,
	STMT_SWEEP_OVERDUE,
	STMT_PURGE_PAGE,
	STMT_STATE_COUNTS,
	STMT_STORED_STATE_COUNTS,
	STMT_STORED_JOB_STATE,
	STMT_INVARIANT_VIOLATIONS,
	STMT_SAME_IDENTITY,
	STMT_REPLACE_ENDED_JOB,
	STMT_INSERT_NEXT_JOB,
	STMT_RETENTIONS,
	STMT_INSERT_JOB_AT,
	STMT_INSERT_JOBS_AT,
	STMT_INSERT_NEXT_JOB_AT,
	STMT_RESCHEDULE,
	STMT_RETRY_JOB,
	STMT_SET_PROVIDER_POLICY,
	STMT_DROP_PROVIDER_POLICY,
	STMT_PROVIDER_KEY,
	STMT_REDRIVE_READ,
	STMT_REDRIVE_READ_SKIP,
	STMT_REDRIVE_BEGIN,
	STMT_REDRIVE_CANDIDATES,
	STMT_CLAIM_UNKNOWN,
	STMT_BLOCKED_COUNTS,
	STMT_LIMITED_PROVIDERS,
	STMT_ANY_DEDUPES,
	STMT_LOCK_POLICY,
	STMT_LOCK_POLICY_SKIP,
	STMT_RECORD_START,
	STMT_COUNT_THROTTLED,
	STMT_PROVIDER_FLOW,
	STMT_CLAIM_CANDIDATES_1_1,
	STMT_MATCH_JOB_1_1,
	STMT_CLAIM_TIME_FLOOR,
	STMT_CERTIFICATION_VERSIONS,
	STMT_SET_FAILOVER,
	STMT_DROP_FAILOVER,
	STMT_COUNT
} StatementId;

/*
 * The columns every attempt query returns, in this order, so that one
 * reader (sql_read_attempt_row) serves all of them: X(position, SQL).
 * ATTEMPT_COLUMNS (store_sql.c) is their SQL, AttemptRowColumn their
 * positions (0-based; SPI's column numbers are one more).
 */
#define ATTEMPT_ROW_COLUMNS(X, SEP) \
	X(AROW_ID, "a.id") SEP \
	X(AROW_JOB_ID, "a.job_id") SEP \
	X(AROW_ATTEMPT_NO, "a.attempt_no") SEP \
	X(AROW_PROVIDER, "a.provider") SEP \
	X(AROW_STORED_STATE, "a.state") SEP \
	X(AROW_STATE, "jobguard.attempt_state(a.state, a.deadline)") SEP \
	X(AROW_READ_VERSION, "a.read_version") SEP \
	X(AROW_DEADLINE, "a.deadline") SEP \
	X(AROW_ATTEMPT_KEY, "a.attempt_key") SEP \
	X(AROW_LOST_RESULT, "a.lost_result")

#define ATTEMPT_ROW_ENUM_(e, sql) e
#define ATTEMPT_ROW_SQL_(e, sql) sql

typedef enum AttemptRowColumn
{
	ATTEMPT_ROW_COLUMNS(ATTEMPT_ROW_ENUM_, STORE_COLUMNS_COMMA),
	ATTEMPT_COLUMN_COUNT		/* how many ATTEMPT_COLUMNS returns */
} AttemptRowColumn;

extern uint64 sql_run(StatementId id, Datum *values, const char *nulls);
extern Datum sql_column_value(int col, bool *isnull);
extern int64 sql_column_int64(int col, bool *isnull);
extern char *sql_column_text(int col);
extern bool sql_column_bool(int col);
extern void sql_read_attempt_row(AttemptRow *attempt);
extern bool sql_insert_next_job(const SubmitRequest *req, int64 previous_job_id,
								int64 *job_id);

#endif							/* JOBGUARD_STORE_SQL_H */
