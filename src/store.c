/*-------------------------------------------------------------------------
 *
 * store.c
 *	  Table access for jobguard: every SQL statement jobguard runs, each
 *	  prepared once per backend, kept, and run with $n parameters.
 *
 * This is the only file that holds SQL.  Every name in it is schema
 * qualified and every operator is spelled OPERATOR(pg_catalog.x), so a
 * caller's search_path cannot redirect anything.  The compare-and-swap that
 * decides which attempt wins a job is STMT_CLAIM_AND_SWAP below.
 *
 * Callers bracket their work with store_connect() and store_finish().
 * Values read from a row stay valid until store_finish().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "jobguard.h"

/* The statements; the numbers index statements[] and prepared_plans[]. */
typedef enum StatementId
{
	STMT_INSERT_JOB,
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
	STMT_JOB_STATE,
	STMT_JOB_OVERVIEW,
	STMT_JOB_EXISTS,
	STMT_ATTEMPTS_OF,
	STMT_DEFINE_OPERATION,
	STMT_CERTIFY_PROVIDER,
	STMT_REVOKE_PROVIDER,
	STMT_OPERATION_CONTRACT,
	STMT_FRESH_JOB_STATE,
	STMT_SWEEP_OVERDUE,
	STMT_PURGE_PAGE,
	STMT_STATE_COUNTS,
	STMT_COUNT
} StatementId;

#define MAX_STATEMENT_ARGS 8

/* A job's derived state; read with the caller's snapshot or a fresh one. */
#define JOB_STATE_SQL \
	"SELECT v.state FROM jobguard.job_overview v" \
	" WHERE v.job_id OPERATOR(pg_catalog.=) $1"

/*
 * A job that is terminal (succeeded, cancelled, or failed: max_attempts
 * attempts, none open) since before the cut-off $1, on alias j.  A job with
 * an open attempt is never terminal here, whatever its state: its provider
 * may still report, and that report must find its attempt.
 */
#define PURGEABLE_SQL \
	"NOT EXISTS (SELECT 1 FROM jobguard.attempts o" \
	"  WHERE o.job_id OPERATOR(pg_catalog.=) j.id" \
	"  AND o.state OPERATOR(pg_catalog.=) ANY ('{started,unknown}'::pg_catalog.text[]))" \
	" AND COALESCE(j.completed_at, j.cancelled_at," \
	"  (SELECT pg_catalog.max(COALESCE(f.finished_at, f.cancelled_at))" \
	"     FROM jobguard.attempts f WHERE f.job_id OPERATOR(pg_catalog.=) j.id" \
	"   HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>=) j.max_attempts))" \
	"  OPERATOR(pg_catalog.<) $1"

/* One statement: its text, argument types, and the SPI result it must give. */
typedef struct StatementDef
{
	const char *name;
	const char *sql;
	int			nargs;
	Oid			argtypes[MAX_STATEMENT_ARGS];
	int			expected_rc;
	bool		read_only;		/* run with the caller's snapshot */
} StatementDef;

/*
 * The columns every attempt query returns, in this order, so that one
 * reader (read_attempt_row) serves all of them.
 */
#define ATTEMPT_COLUMNS \
	"a.id, a.job_id, a.attempt_no, a.provider, a.state," \
	" jobguard.attempt_state(a.state, a.deadline)," \
	" a.read_version, a.deadline, a.attempt_key, a.lost_result"
#define ATTEMPT_COLUMN_COUNT 10

/* The job columns a finish needs, in the order read_finish_job reads them. */
#define FINISH_JOB_COLUMNS \
	"j.operation, j.completed_by, j.result, o.contract_version, o.output_contract"

static const StatementDef statements[STMT_COUNT] = {
	/*
	 * The unique constraint decides who creates the job: no look-up first.
	 * A concurrent identical insert waits here until the first commits or
	 * rolls back.
	 */
	[STMT_INSERT_JOB] = {
		"insert job",
		"INSERT INTO jobguard.jobs AS j"
		" (owner_id, idempotency_key, operation, params, provider, max_attempts)"
		" VALUES ($1, $2, $3, $4, $5, $6)"
		" ON CONFLICT (owner_id, idempotency_key) DO NOTHING"
		" RETURNING j.id",
		6, {TEXTOID, TEXTOID, TEXTOID, JSONBOID, TEXTOID, INT4OID},
		SPI_OK_INSERT_RETURNING, false
	},
	/* The existing job for a key, and which parts of the request match it. */
	[STMT_MATCH_JOB] = {
		"match job",
		"SELECT j.id,"
		" j.operation OPERATOR(pg_catalog.=) $3,"
		" j.params OPERATOR(pg_catalog.=) $4,"
		" j.provider OPERATOR(pg_catalog.=) $5,"
		" COALESCE(j.max_attempts OPERATOR(pg_catalog.=) $6,"
		"          j.max_attempts IS NULL AND $6 IS NULL)"
		" FROM jobguard.jobs j"
		" WHERE j.owner_id OPERATOR(pg_catalog.=) $1"
		" AND j.idempotency_key OPERATOR(pg_catalog.=) $2",
		6, {TEXTOID, TEXTOID, TEXTOID, JSONBOID, TEXTOID, INT4OID},
		SPI_OK_SELECT, false
	},
	/*
	 * Lock the job row against concurrent begins, finishes and cancels.  NO
	 * KEY UPDATE leaves the KEY SHARE lock of the attempts foreign key free.
	 */
	[STMT_LOCK_JOB] = {
		"lock job",
		"SELECT j.operation, j.provider, j.max_attempts, j.version,"
		" j.completed_by, j.cancelled_at IS NOT NULL"
		" FROM jobguard.jobs j"
		" WHERE j.id OPERATOR(pg_catalog.=) $1"
		" FOR NO KEY UPDATE",
		1, {INT8OID},
		SPI_OK_SELECT, false
	},
	/* The latest attempt: the only one that can be open. */
	[STMT_LAST_ATTEMPT] = {
		"last attempt",
		"SELECT " ATTEMPT_COLUMNS
		" FROM jobguard.attempts a"
		" WHERE a.job_id OPERATOR(pg_catalog.=) $1"
		" ORDER BY a.attempt_no DESC LIMIT 1",
		1, {INT8OID},
		SPI_OK_SELECT, false
	},
	/*
	 * Begin the job's next attempt in one statement, with the gate in its
	 * WHERE: the job is open, its latest attempt is not, attempts are left,
	 * and a provider other than the job's own ($2) is certified.  Two begins
	 * racing each other are decided by the partial unique index on open
	 * attempts: ON CONFLICT makes the second wait for the first, and do
	 * nothing if the first commits (as submit does with a key).  No row back
	 * means refused; the caller then finds out why.
	 */
	[STMT_BEGIN_ATTEMPT] = {
		"begin attempt",
		"INSERT INTO jobguard.attempts AS a"
		" (job_id, attempt_no, provider, state, read_version, attempt_key,"
		"  started_at, deadline)"
		" SELECT j.id, COALESCE(last.attempt_no, 0) OPERATOR(pg_catalog.+) 1,"
		"  COALESCE($2, j.provider), 'started', j.version, $3,"
		"  pg_catalog.now(), pg_catalog.now() OPERATOR(pg_catalog.+) $4"
		" FROM jobguard.jobs j"
		" LEFT JOIN LATERAL ("
		"  SELECT l.attempt_no, l.state FROM jobguard.attempts l"
		"   WHERE l.job_id OPERATOR(pg_catalog.=) j.id"
		"   ORDER BY l.attempt_no DESC LIMIT 1) AS last ON true"
		" WHERE j.id OPERATOR(pg_catalog.=) $1"
		" AND j.completed_by IS NULL AND j.cancelled_at IS NULL"
		" AND (last.state IS NULL"
		"   OR last.state OPERATOR(pg_catalog.<>) ALL ('{started,unknown}'::pg_catalog.text[]))"
		" AND (j.max_attempts IS NULL"
		"   OR COALESCE(last.attempt_no, 0) OPERATOR(pg_catalog.<) j.max_attempts)"
		" AND ($2 IS NULL OR $2 OPERATOR(pg_catalog.=) j.provider"
		"   OR EXISTS (SELECT 1 FROM jobguard.certifications c"
		"    WHERE c.operation OPERATOR(pg_catalog.=) j.operation"
		"    AND c.provider OPERATOR(pg_catalog.=) $2"
		"    AND c.revoked_at IS NULL))"
		" ON CONFLICT DO NOTHING"
		" RETURNING a.id",
		4, {INT8OID, TEXTOID, TEXTOID, INTERVALOID},
		SPI_OK_INSERT_RETURNING, false
	},
	[STMT_PROVIDER_CERTIFIED] = {
		"provider certified",
		"SELECT 1 FROM jobguard.certifications c"
		" WHERE c.operation OPERATOR(pg_catalog.=) $1"
		" AND c.provider OPERATOR(pg_catalog.=) $2"
		" AND c.revoked_at IS NULL",
		2, {TEXTOID, TEXTOID},
		SPI_OK_SELECT, false
	},
	/* Lock one attempt: finishes, fails and cancels of it run one at a time. */
	[STMT_LOCK_ATTEMPT] = {
		"lock attempt",
		"SELECT " ATTEMPT_COLUMNS
		" FROM jobguard.attempts a"
		" WHERE a.id OPERATOR(pg_catalog.=) $1"
		" FOR UPDATE",
		1, {INT8OID},
		SPI_OK_SELECT, false
	},
	/*
	 * An attempt with its job and the operation's contract, in one snapshot
	 * (one contract, never a mix).  No lock: the finish then claims the
	 * attempt on condition that it is still in the state read here.
	 */
	[STMT_READ_FOR_FINISH] = {
		"read for finish",
		"SELECT " ATTEMPT_COLUMNS ", " FINISH_JOB_COLUMNS
		" FROM jobguard.attempts a"
		" JOIN jobguard.jobs j ON j.id OPERATOR(pg_catalog.=) a.job_id"
		" LEFT JOIN jobguard.operations o"
		"  ON o.operation OPERATOR(pg_catalog.=) j.operation"
		" WHERE a.id OPERATOR(pg_catalog.=) $1",
		1, {INT8OID},
		SPI_OK_SELECT, false
	},
	/*
	 * Claim the attempt and run the compare-and-swap, in one statement.
	 * "claimed" marks the attempt succeeded, but only if it is still in the
	 * state the finish read ($5) — a concurrent finish, fail or cancel makes
	 * it wait, then update nothing.  "won" is the compare-and-swap proper:
	 * one UPDATE of the job row that takes the result slot only if no other
	 * attempt has and the job is still at the version the attempt read when
	 * it began (a cancel bumps it); under READ COMMITTED a concurrent winner
	 * makes it wait, re-check the new row version and update nothing.
	 * Returns (claimed, won) counts; a claimed attempt that did not win is
	 * marked lost by the caller in the same transaction.
	 */
	[STMT_CLAIM_AND_SWAP] = {
		"claim and compare-and-swap",
		"WITH claimed AS ("
		" UPDATE jobguard.attempts AS a"
		" SET state = 'succeeded', finished_at = pg_catalog.now()"
		" WHERE a.id OPERATOR(pg_catalog.=) $3 AND a.state OPERATOR(pg_catalog.=) $5"
		" RETURNING a.id),"
		" won AS ("
		" UPDATE jobguard.jobs AS j"
		" SET result = $4, completed_by = $3, completed_at = pg_catalog.now(),"
		"  version = j.version OPERATOR(pg_catalog.+) 1"
		" WHERE j.id OPERATOR(pg_catalog.=) $1"
		" AND j.version OPERATOR(pg_catalog.=) $2"
		" AND j.completed_by IS NULL"
		" AND EXISTS (SELECT 1 FROM claimed)"
		" RETURNING j.id)"
		" SELECT (SELECT pg_catalog.count(*) FROM claimed),"
		"  (SELECT pg_catalog.count(*) FROM won)",
		5, {INT8OID, INT8OID, INT8OID, JSONBOID, TEXTOID},
		SPI_OK_SELECT, false
	},
	[STMT_WINNER_OF] = {
		"winner of",
		"SELECT j.completed_by FROM jobguard.jobs j"
		" WHERE j.id OPERATOR(pg_catalog.=) $1",
		1, {INT8OID},
		SPI_OK_SELECT, false
	},
	/*
	 * An attempt's outcome (lost or failed), written only while the
	 * attempt is still in state $6: a finish that read the attempt without
	 * a lock must not overwrite what a concurrent call decided meanwhile.
	 */
	[STMT_CLOSE_ATTEMPT] = {
		"close attempt",
		"UPDATE jobguard.attempts AS a"
		" SET state = $2, finished_at = pg_catalog.now(), error = $3,"
		"  lost_to = $4, lost_result = $5"
		" WHERE a.id OPERATOR(pg_catalog.=) $1"
		" AND a.state OPERATOR(pg_catalog.=) $6",
		6, {INT8OID, TEXTOID, TEXTOID, INT8OID, JSONBOID, TEXTOID},
		SPI_OK_UPDATE, false
	},
	[STMT_MARK_UNKNOWN] = {
		"mark unknown",
		"UPDATE jobguard.attempts AS a SET state = 'unknown'"
		" WHERE a.id OPERATOR(pg_catalog.=) $1",
		1, {INT8OID},
		SPI_OK_UPDATE, false
	},
	[STMT_CANCEL_ATTEMPT] = {
		"cancel attempt",
		"UPDATE jobguard.attempts AS a"
		" SET state = 'cancelled', cancelled_at = pg_catalog.now(), cancel_reason = $2"
		" WHERE a.id OPERATOR(pg_catalog.=) $1",
		2, {INT8OID, TEXTOID},
		SPI_OK_UPDATE, false
	},
	/* Cancelling bumps the version, so every attempt begun before loses. */
	[STMT_CANCEL_JOB] = {
		"cancel job",
		"UPDATE jobguard.jobs AS j"
		" SET cancelled_at = pg_catalog.now(), cancel_reason = $2,"
		"  version = j.version OPERATOR(pg_catalog.+) 1"
		" WHERE j.id OPERATOR(pg_catalog.=) $1",
		2, {INT8OID, TEXTOID},
		SPI_OK_UPDATE, false
	},
	[STMT_JOB_STATE] = {
		"job state",
		JOB_STATE_SQL,
		1, {INT8OID},
		SPI_OK_SELECT, true
	},
	[STMT_JOB_OVERVIEW] = {
		"job overview",
		"SELECT v.* FROM jobguard.job_overview v"
		" WHERE v.job_id OPERATOR(pg_catalog.=) $1",
		1, {INT8OID},
		SPI_OK_SELECT, true
	},
	[STMT_JOB_EXISTS] = {
		"job exists",
		"SELECT 1 FROM jobguard.jobs j WHERE j.id OPERATOR(pg_catalog.=) $1",
		1, {INT8OID},
		SPI_OK_SELECT, true
	},
	[STMT_ATTEMPTS_OF] = {
		"attempts of",
		"SELECT v.* FROM jobguard.attempt_overview v"
		" WHERE v.job_id OPERATOR(pg_catalog.=) $1"
		" ORDER BY v.attempt_no",
		1, {INT8OID},
		SPI_OK_SELECT, true
	},
	/* Every definition takes a fresh version, so caches see the change. */
	[STMT_DEFINE_OPERATION] = {
		"define operation",
		"INSERT INTO jobguard.operations AS o"
		" (operation, output_contract, contract_version, defined_at)"
		" VALUES ($1, $2, pg_catalog.nextval('jobguard.contract_version_seq'),"
		"  pg_catalog.now())"
		" ON CONFLICT (operation) DO UPDATE"
		" SET output_contract = EXCLUDED.output_contract,"
		"  contract_version = EXCLUDED.contract_version,"
		"  defined_at = EXCLUDED.defined_at",
		2, {TEXTOID, JSONBOID},
		SPI_OK_INSERT, false
	},
	[STMT_CERTIFY_PROVIDER] = {
		"certify provider",
		"INSERT INTO jobguard.certifications AS c"
		" (operation, provider, evidence, certified_at, revoked_at)"
		" VALUES ($1, $2, $3, pg_catalog.now(), NULL)"
		" ON CONFLICT (operation, provider) DO UPDATE"
		" SET evidence = EXCLUDED.evidence,"
		"  certified_at = EXCLUDED.certified_at, revoked_at = NULL",
		3, {TEXTOID, TEXTOID, JSONBOID},
		SPI_OK_INSERT, false
	},
	[STMT_REVOKE_PROVIDER] = {
		"revoke provider",
		"UPDATE jobguard.certifications AS c SET revoked_at = pg_catalog.now()"
		" WHERE c.operation OPERATOR(pg_catalog.=) $1"
		" AND c.provider OPERATOR(pg_catalog.=) $2"
		" AND c.revoked_at IS NULL",
		2, {TEXTOID, TEXTOID},
		SPI_OK_UPDATE, false
	},
	[STMT_OPERATION_CONTRACT] = {
		"operation contract",
		"SELECT o.contract_version, o.output_contract FROM jobguard.operations o"
		" WHERE o.operation OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID},
		SPI_OK_SELECT, true
	},
	/* The same as STMT_JOB_STATE, but with a fresh snapshot each time. */
	[STMT_FRESH_JOB_STATE] = {
		"fresh job state",
		JOB_STATE_SQL,
		1, {INT8OID},
		SPI_OK_SELECT, false
	},
	/*
	 * Overdue started attempts, oldest deadline first, skipping any that a
	 * finish or cancel holds locked right now.
	 */
	[STMT_SWEEP_OVERDUE] = {
		"sweep overdue",
		"UPDATE jobguard.attempts AS a SET state = 'unknown'"
		" WHERE a.id OPERATOR(pg_catalog.=) ANY (ARRAY("
		"  SELECT o.id FROM jobguard.attempts o"
		"   WHERE o.state OPERATOR(pg_catalog.=) 'started'"
		"   AND o.deadline OPERATOR(pg_catalog.<=) pg_catalog.now()"
		"   ORDER BY o.deadline LIMIT $1 FOR UPDATE SKIP LOCKED))"
		" AND a.state OPERATOR(pg_catalog.=) 'started'",
		1, {INT4OID},
		SPI_OK_UPDATE, false
	},
	/*
	 * One page of purge: the next $3 jobs after id $2 in id order, and the
	 * terminal ones among them deleted (their attempts go with them).
	 * Returns the page's last id, how many were deleted, and the page's
	 * newest creation time, which tells the caller when to stop.
	 */
	[STMT_PURGE_PAGE] = {
		"purge page",
		"WITH page AS ("
		"  SELECT c.id, c.created_at FROM jobguard.jobs c"
		"   WHERE c.id OPERATOR(pg_catalog.>) $2 ORDER BY c.id LIMIT $3),"
		" gone AS ("
		"  DELETE FROM jobguard.jobs AS j USING page"
		"   WHERE j.id OPERATOR(pg_catalog.=) page.id AND " PURGEABLE_SQL
		"  RETURNING j.id)"
		" SELECT (SELECT pg_catalog.max(page.id) FROM page),"
		"  (SELECT pg_catalog.count(*) FROM gone),"
		"  (SELECT pg_catalog.max(page.created_at) FROM page)",
		3, {TIMESTAMPTZOID, INT8OID, INT4OID},
		SPI_OK_SELECT, false
	},
	/* How many jobs and attempts are in each state, zeros included. */
	[STMT_STATE_COUNTS] = {
		"state counts",
		"SELECT x.metric, x.value FROM ("
		" SELECT 1 AS kind, s.n, 'jobs.' OPERATOR(pg_catalog.||) s.state AS metric,"
		"  (SELECT pg_catalog.count(*) FROM jobguard.job_overview v"
		"    WHERE v.state OPERATOR(pg_catalog.=) s.state) AS value"
		" FROM pg_catalog.unnest('{pending,running,unknown,succeeded,failed,cancelled}'::pg_catalog.text[])"
		"  WITH ORDINALITY AS s(state, n)"
		" UNION ALL"
		" SELECT 2, s.n, 'attempts.' OPERATOR(pg_catalog.||) s.state,"
		"  (SELECT pg_catalog.count(*) FROM jobguard.attempt_overview v"
		"    WHERE v.state OPERATOR(pg_catalog.=) s.state)"
		" FROM pg_catalog.unnest('{started,unknown,cancelled,succeeded,lost,failed}'::pg_catalog.text[])"
		"  WITH ORDINALITY AS s(state, n)) x"
		" ORDER BY x.kind, x.n",
		0, {0},
		SPI_OK_SELECT, true
	},
};

/* Plans prepared in this backend, kept for its lifetime. */
static SPIPlanPtr prepared_plans[STMT_COUNT];

/*
 * prepared_plan: the kept plan of a statement, prepared on first use.  The
 * plan cache re-plans it by itself when a table it uses changes (even a
 * DROP and CREATE EXTENSION), so it is never prepared twice.
 */
static SPIPlanPtr
prepared_plan(StatementId id)
{
	if (prepared_plans[id] == NULL)
	{
		const StatementDef *def = &statements[id];
		SPIPlanPtr	plan;

		/*
		 * Generic plans: every statement here is a key lookup whose best
		 * plan does not depend on the values, and a custom plan could pick
		 * a partial index by a parameter's value (say, the index of started
		 * attempts for state = 'started') that turns a lookup by id into a
		 * scan.  It also spares re-planning on the first executions.
		 */
		plan = SPI_prepare_cursor(def->sql, def->nargs, (Oid *) def->argtypes,
								  CURSOR_OPT_GENERIC_PLAN);
		if (plan == NULL)
			elog(ERROR, "jobguard: could not prepare statement \"%s\": %s",
				 def->name, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "jobguard: could not keep statement \"%s\"", def->name);
		prepared_plans[id] = plan;
	}
	return prepared_plans[id];
}

/*
 * run: execute a statement with its parameters and check its result code.
 * Returns the number of rows it returned or changed; the rows are in
 * SPI_tuptable.  nulls is NULL when no parameter is NULL.
 */
static uint64
run(StatementId id, Datum *values, const char *nulls)
{
	const StatementDef *def = &statements[id];
	int			rc;

	rc = SPI_execute_plan(prepared_plan(id), values, nulls, def->read_only, 0);
	if (rc != def->expected_rc)
		elog(ERROR, "jobguard: statement \"%s\" returned %s",
			 def->name, SPI_result_code_string(rc));
	return SPI_processed;
}

/* column_value: column col (1-based) of row 0 of the last result. */
static Datum
column_value(int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, isnull);
}

/* column_int64: a bigint column of row 0 that may be NULL (then 0). */
static int64
column_int64(int col, bool *isnull)
{
	Datum		d = column_value(col, isnull);

	return *isnull ? 0 : DatumGetInt64(d);
}

/* column_text: a text column of row 0 as a C string, or NULL. */
static char *
column_text(int col)
{
	bool		isnull;
	Datum		d = column_value(col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* column_bool: a boolean column of row 0 that is never NULL. */
static bool
column_bool(int col)
{
	bool		isnull;
	Datum		d = column_value(col, &isnull);

	return !isnull && DatumGetBool(d);
}

/* read_attempt_row: fill an AttemptRow from row 0 (ATTEMPT_COLUMNS). */
static void
read_attempt_row(AttemptRow *attempt)
{
	bool		isnull;

	attempt->id = column_int64(1, &isnull);
	attempt->job_id = column_int64(2, &isnull);
	attempt->attempt_no = DatumGetInt32(column_value(3, &isnull));
	attempt->provider = column_text(4);
	attempt->stored_state = attempt_state_from_name(column_text(5));
	attempt->state = attempt_state_from_name(column_text(6));
	attempt->read_version = column_int64(7, &isnull);
	attempt->deadline = DatumGetTimestampTz(column_value(8, &isnull));
	attempt->attempt_key = column_text(9);
	attempt->lost_result = column_value(10, &isnull);
	if (isnull)
		attempt->lost_result = (Datum) 0;
}

/*
 * store_connect: open the SPI connection a jobguard call works in, and run
 * as the owner of jobguard's tables until store_finish().  The caller's
 * identity is saved in *caller, on the calling function's stack: calls can
 * nest (a default or constraint on the tables may call jobguard), and each
 * must give back exactly the identity it found.
 */
void
store_connect(SavedIdentity *caller)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "jobguard: SPI_connect failed");
	become_tables_owner(caller);
}

/*
 * store_keep_string: a copy of a string in the caller's memory context, so
 * that it outlives store_finish().
 */
char *
store_keep_string(const char *s)
{
	char	   *copy = SPI_palloc(strlen(s) + 1);

	strcpy(copy, s);
	return copy;
}

/*
 * store_finish: switch back to the identity store_connect() saved and close
 * the connection; values read from rows are freed with it.
 */
void
store_finish(const SavedIdentity *caller)
{
	become_caller_again(caller);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "jobguard: SPI_finish failed");
}

/*
 * store_insert_job: insert a new job unless one exists for the key.
 * Returns true and the new id when this call created it.
 */
bool
store_insert_job(Datum owner_id, Datum idempotency_key, Datum operation,
				 Datum params, Datum provider,
				 Datum max_attempts, bool max_attempts_null, int64 *job_id)
{
	Datum		values[6] = {owner_id, idempotency_key, operation, params,
	provider, max_attempts};
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', max_attempts_null ? 'n' : ' '};
	bool		isnull;

	if (rows_usable(ROWS_SUBMIT))
		return rows_insert_job(owner_id, idempotency_key, operation, params,
							   provider, max_attempts, max_attempts_null, job_id);
	if (run(STMT_INSERT_JOB, values, nulls) == 0)
		return false;
	*job_id = column_int64(1, &isnull);
	return true;
}

/*
 * store_match_job: find the job for (owner_id, idempotency_key) and compare
 * it with the request.  Returns false if there is none (it was removed
 * between the insert and this look-up).
 */
bool
store_match_job(Datum owner_id, Datum idempotency_key, Datum operation,
				Datum params, Datum provider,
				Datum max_attempts, bool max_attempts_null, SubmitMatch *match)
{
	Datum		values[6] = {owner_id, idempotency_key, operation, params,
	provider, max_attempts};
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', max_attempts_null ? 'n' : ' '};
	bool		isnull;

	if (rows_usable(ROWS_SUBMIT))
		return rows_match_job(owner_id, idempotency_key, operation, params,
							  provider, max_attempts, max_attempts_null, match);
	if (run(STMT_MATCH_JOB, values, nulls) == 0)
		return false;
	match->job_id = column_int64(1, &isnull);
	match->same_operation = column_bool(2);
	match->same_params = column_bool(3);
	match->same_provider = column_bool(4);
	match->same_max_attempts = column_bool(5);
	return true;
}

/* store_lock_job: lock a job row and read it; false if there is none. */
bool
store_lock_job(int64 job_id, JobRow *job)
{
	Datum		values[1] = {Int64GetDatum(job_id)};
	bool		isnull;
	Datum		d;

	if (run(STMT_LOCK_JOB, values, NULL) == 0)
		return false;
	job->id = job_id;
	job->operation = column_text(1);
	job->provider = column_text(2);
	d = column_value(3, &isnull);
	job->has_max_attempts = !isnull;
	job->max_attempts = isnull ? 0 : DatumGetInt32(d);
	job->version = column_int64(4, &isnull);
	job->completed_by = column_int64(5, &isnull);
	job->completed = !isnull;
	job->cancelled = column_bool(6);
	return true;
}

/* store_last_attempt: the job's latest attempt; false if it has none. */
bool
store_last_attempt(int64 job_id, AttemptRow *attempt)
{
	Datum		values[1] = {Int64GetDatum(job_id)};

	if (run(STMT_LAST_ATTEMPT, values, NULL) == 0)
		return false;
	read_attempt_row(attempt);
	return true;
}

/*
 * store_begin_attempt: begin the job's next attempt if the gate lets it
 * (see STMT_BEGIN_ATTEMPT); provider NULL means the job's own.  Returns the
 * new attempt's id, or 0 when refused (or no such job).
 */
int64
store_begin_attempt(int64 job_id, Datum provider, bool provider_null,
					Datum timeout, Datum attempt_key, bool attempt_key_null)
{
	Datum		values[4] = {Int64GetDatum(job_id), provider, attempt_key, timeout};
	char		nulls[4] = {' ', provider_null ? 'n' : ' ', attempt_key_null ? 'n' : ' ', ' '};
	bool		isnull;

	if (rows_usable(ROWS_BEGIN))
		return rows_begin_attempt(job_id, provider, provider_null, timeout,
								  attempt_key, attempt_key_null);
	if (run(STMT_BEGIN_ATTEMPT, values, nulls) == 0)
		return 0;
	return column_int64(1, &isnull);
}

/* store_provider_certified: is the provider certified for the operation? */
bool
store_provider_certified(const char *operation, const char *provider)
{
	Datum		values[2] = {CStringGetTextDatum(operation),
	CStringGetTextDatum(provider)};

	return run(STMT_PROVIDER_CERTIFIED, values, NULL) > 0;
}

/* store_lock_attempt: lock an attempt row and read it; false if none. */
bool
store_lock_attempt(int64 attempt_id, AttemptRow *attempt)
{
	Datum		values[1] = {Int64GetDatum(attempt_id)};

	if (run(STMT_LOCK_ATTEMPT, values, NULL) == 0)
		return false;
	read_attempt_row(attempt);
	return true;
}

/* read_finish_job: fill a FinishJob from row 0, FINISH_JOB_COLUMNS at first_col. */
static void
read_finish_job(int first_col, FinishJob *job)
{
	bool		isnull;

	job->operation = column_text(first_col);
	job->completed_by = column_int64(first_col + 1, &isnull);
	job->completed = !isnull;
	job->result = column_value(first_col + 2, &isnull);
	job->contract_version = column_int64(first_col + 3, &isnull);
	job->has_contract = !isnull;
	job->contract = column_value(first_col + 4, &isnull);
}

/*
 * store_read_for_finish: an attempt with its job and contract, in one
 * snapshot and without a lock; false if there is no such attempt.
 */
bool
store_read_for_finish(int64 attempt_id, AttemptRow *attempt, FinishJob *job)
{
	Datum		values[1] = {Int64GetDatum(attempt_id)};

	if (rows_usable(ROWS_FINISH))
		return rows_read_for_finish(attempt_id, attempt, job);
	if (run(STMT_READ_FOR_FINISH, values, NULL) == 0)
		return false;
	read_attempt_row(attempt);
	read_finish_job(ATTEMPT_COLUMN_COUNT + 1, job);
	return true;
}

/*
 * store_claim_and_swap: claim the attempt (still in stored state
 * read_state) and run the compare-and-swap.  Returns CLAIM_CHANGED when
 * the attempt changed since it was read, CLAIM_WON when it took the result
 * slot (and is succeeded), CLAIM_LOST when another attempt had it or the
 * job was cancelled (the attempt must then be marked lost).
 */
ClaimOutcome
store_claim_and_swap(const AttemptRow *attempt, Datum result)
{
	Datum		values[5] = {Int64GetDatum(attempt->job_id),
		Int64GetDatum(attempt->read_version), Int64GetDatum(attempt->id), result,
	CStringGetTextDatum(attempt_state_name(attempt->stored_state))};
	bool		isnull;

	if (rows_usable(ROWS_FINISH))
		return rows_claim_and_swap(attempt, result);
	run(STMT_CLAIM_AND_SWAP, values, NULL);
	if (column_int64(1, &isnull) == 0)
		return CLAIM_CHANGED;
	return column_int64(2, &isnull) == 1 ? CLAIM_WON : CLAIM_LOST;
}

/*
 * store_winner_of: the attempt holding the job's result slot, read with a
 * fresh snapshot after a lost compare-and-swap.  False when the slot is
 * empty (the job was cancelled).
 */
bool
store_winner_of(int64 job_id, int64 *winner)
{
	Datum		values[1] = {Int64GetDatum(job_id)};
	bool		isnull = true;

	if (run(STMT_WINNER_OF, values, NULL) > 0)
		*winner = column_int64(1, &isnull);
	return !isnull;
}

/*
 * store_close_attempt: write an attempt's outcome — failed with error, or
 * lost with lost_to (0 for none) and lost_result — if it is still in stored
 * state `from`.  Returns false when it is not (it changed concurrently).
 */
bool
store_close_attempt(int64 attempt_id, AttemptState from, AttemptState to,
					const char *error, int64 lost_to, Datum lost_result)
{
	Datum		values[6] = {Int64GetDatum(attempt_id),
		CStringGetTextDatum(attempt_state_name(to)),
		error ? CStringGetTextDatum(error) : (Datum) 0,
		Int64GetDatum(lost_to), lost_result,
	CStringGetTextDatum(attempt_state_name(from))};
	char		nulls[6] = {' ', ' ', error ? ' ' : 'n', lost_to ? ' ' : 'n',
	lost_result ? ' ' : 'n', ' '};

	return run(STMT_CLOSE_ATTEMPT, values, nulls) == 1;
}

/* store_mark_unknown: write down that an attempt's outcome is unknown. */
void
store_mark_unknown(int64 attempt_id)
{
	Datum		values[1] = {Int64GetDatum(attempt_id)};

	run(STMT_MARK_UNKNOWN, values, NULL);
}

/* store_cancel_attempt: stop waiting for an attempt, with the reason. */
void
store_cancel_attempt(int64 attempt_id, Datum reason)
{
	Datum		values[2] = {Int64GetDatum(attempt_id), reason};

	run(STMT_CANCEL_ATTEMPT, values, NULL);
}

/* store_cancel_job: cancel a job and bump its version. */
void
store_cancel_job(int64 job_id, Datum reason)
{
	Datum		values[2] = {Int64GetDatum(job_id), reason};

	run(STMT_CANCEL_JOB, values, NULL);
}

/*
 * store_job_state: the derived state of a job (from job_overview), kept
 * so that it outlives store_finish().
 */
bool
store_job_state(int64 job_id, char **state)
{
	Datum		values[1] = {Int64GetDatum(job_id)};
	char	   *s;

	if (run(STMT_JOB_STATE, values, NULL) == 0)
		return false;
	s = column_text(1);
	*state = store_keep_string(s);
	return true;
}

/*
 * store_job_overview: the job_overview row of a job, formed with the
 * function's result descriptor in the caller's memory context.
 */
bool
store_job_overview(int64 job_id, TupleDesc desc, MemoryContext cxt, Datum *row)
{
	Datum		values[1] = {Int64GetDatum(job_id)};
	Datum	   *columns;
	bool	   *nulls;
	MemoryContext old;

	if (run(STMT_JOB_OVERVIEW, values, NULL) == 0)
		return false;
	if (SPI_tuptable->tupdesc->natts != desc->natts)
		elog(ERROR, "jobguard: job_overview has %d columns, jobguard.job() returns %d",
			 SPI_tuptable->tupdesc->natts, desc->natts);

	columns = palloc(desc->natts * sizeof(Datum));
	nulls = palloc(desc->natts * sizeof(bool));
	heap_deform_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, columns, nulls);

	old = MemoryContextSwitchTo(cxt);
	*row = HeapTupleGetDatum(heap_form_tuple(desc, columns, nulls));
	MemoryContextSwitchTo(old);
	return true;
}

/*
 * store_attempts_of: put the job's attempts, in order, into the
 * materialized result set.  False if the job does not exist.
 */
bool
store_attempts_of(int64 job_id, ReturnSetInfo *rsinfo)
{
	Datum		values[1] = {Int64GetDatum(job_id)};
	uint64		n;

	n = run(STMT_ATTEMPTS_OF, values, NULL);
	if (n == 0)
		return run(STMT_JOB_EXISTS, values, NULL) > 0;
	for (uint64 i = 0; i < n; i++)
		tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
	return true;
}

/* store_define_operation: set or replace an operation's output contract. */
void
store_define_operation(Datum operation, Datum contract)
{
	Datum		values[2] = {operation, contract};

	run(STMT_DEFINE_OPERATION, values, NULL);
}

/* store_certify_provider: certify a provider, or renew its certification. */
void
store_certify_provider(Datum operation, Datum provider,
					   Datum evidence, bool evidence_null)
{
	Datum		values[3] = {operation, provider, evidence};
	char		nulls[3] = {' ', ' ', evidence_null ? 'n' : ' '};

	run(STMT_CERTIFY_PROVIDER, values, nulls);
}

/* store_revoke_provider: revoke a certification; false if none was active. */
bool
store_revoke_provider(Datum operation, Datum provider)
{
	Datum		values[2] = {operation, provider};

	return run(STMT_REVOKE_PROVIDER, values, NULL) > 0;
}

/*
 * store_operation_contract: the output contract of an operation and its
 * version; false when the operation has none.
 */
bool
store_operation_contract(Datum operation, int64 *version, Datum *contract)
{
	Datum		values[1] = {operation};
	bool		isnull;

	if (run(STMT_OPERATION_CONTRACT, values, NULL) == 0)
		return false;
	*version = column_int64(1, &isnull);
	*contract = column_value(2, &isnull);
	return true;
}

/*
 * store_fresh_job_state: a job's derived state read with a fresh snapshot,
 * so that it sees what this call wrote and what other sessions committed
 * meanwhile (a waiting call needs both).
 */
bool
store_fresh_job_state(int64 job_id, char **state)
{
	Datum		values[1] = {Int64GetDatum(job_id)};

	if (run(STMT_FRESH_JOB_STATE, values, NULL) == 0)
		return false;
	*state = store_keep_string(column_text(1));
	return true;
}

/* store_sweep_overdue: mark up to batch_size overdue attempts unknown. */
uint64
store_sweep_overdue(int batch_size)
{
	Datum		values[1] = {Int32GetDatum(batch_size)};

	return run(STMT_SWEEP_OVERDUE, values, NULL);
}

/*
 * store_purge: delete jobs terminal since before cutoff, with their
 * attempts, a page of batch_size jobs at a time in id order.  Ids grow with
 * creation time, so the scan stops at the first page created after the
 * cut-off: a job created later cannot have ended earlier.  Returns how
 * many jobs were deleted.
 */
int64
store_purge(TimestampTz cutoff, int batch_size)
{
	int64		after = 0;
	int64		deleted = 0;

	for (;;)
	{
		Datum		values[3] = {TimestampTzGetDatum(cutoff), Int64GetDatum(after),
		Int32GetDatum(batch_size)};
		bool		isnull;
		TimestampTz newest;

		run(STMT_PURGE_PAGE, values, NULL);
		after = column_int64(1, &isnull);
		if (isnull)
			break;				/* no jobs after this page */
		deleted += column_int64(2, &isnull);
		newest = DatumGetTimestampTz(column_value(3, &isnull));
		if (newest >= cutoff)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	return deleted;
}

/*
 * store_state_counts: put a (metric, value) row per job and attempt state
 * into the materialized result set.
 */
void
store_state_counts(ReturnSetInfo *rsinfo)
{
	uint64		n = run(STMT_STATE_COUNTS, NULL, NULL);

	for (uint64 i = 0; i < n; i++)
		tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
}
