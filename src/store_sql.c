/*-------------------------------------------------------------------------
 *
 * store_sql.c
 *	  Every SQL statement jobguard runs, each prepared once per backend,
 *	  kept, and run with $n parameters; and the readers of their results.
 *
 * This is the only file that holds SQL.  Every name in it is schema
 * qualified and every operator is spelled OPERATOR(pg_catalog.x), so a
 * caller's search_path cannot redirect anything.  The compare-and-swap that
 * decides which attempt wins a job is STMT_CLAIM_AND_SWAP below.
 *
 * store_lifecycle.c and store_admin.c run these statements for the store_*
 * functions of store.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/plancache.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "args.h"
#include "schema_level.h"
#include "store_sql.h"

/*
 * The most parameters a statement takes: 10, or a submit's columns and the
 * three parameters after them (STMT_INSERT_JOBS_AT, STMT_INSERT_NEXT_JOB_AT).
 */
#define MAX_STATEMENT_ARGS Max(10, SUBMIT_PARAM_AFTER_3)

/*
 * A job's state from the stored attempt states (a started attempt past its
 * deadline still counts as running here): what the state gauges of
 * metrics.c count.  j is the job; the CASE follows jobguard.job_overview.
 */
#define STORED_JOB_STATE_SQL(last_state, last_no) \
	"CASE WHEN j.completed_by IS NOT NULL THEN 'succeeded'" \
	" WHEN j.cancelled_at IS NOT NULL THEN 'cancelled'" \
	" WHEN " last_state " OPERATOR(pg_catalog.=) 'unknown' THEN 'unknown'" \
	" WHEN " last_state " OPERATOR(pg_catalog.=) 'started' THEN 'running'" \
	" WHEN j.max_attempts IS NOT NULL" \
	"  AND COALESCE(" last_no ", 0) OPERATOR(pg_catalog.>=) j.max_attempts THEN 'failed'" \
	" ELSE 'pending' END"

/*
 * What counts an attempt of alias x toward max_attempts: its tries in 1.2
 * (a redrive repeats its predecessor's count; NULL, for an attempt of
 * 1.1 or one inserted by hand, is its attempt_no), attempt_no in a 1.1
 * database (schema_level.c), where every attempt counted.  The statements that
 * compare with max_attempts are written once with T and made in both
 * forms (statements[] and statements_1_1[]).
 */
#define TRIES_1_2(x) "COALESCE(" x ".tries, " x ".attempt_no)"
#define TRIES_1_1(x) x ".attempt_no"
/* How many attempts of job j count toward max_attempts (PURGEABLE_SQL_E). */
#define USED_1_2 "pg_catalog.max(COALESCE(f.tries, f.attempt_no))"
#define USED_1_1 "pg_catalog.count(*)"

/* The last attempt of job j, stored state, number and tries (a LATERAL join). */
#define LAST_ATTEMPT_SQL_T(T) \
	" LEFT JOIN LATERAL (SELECT a.attempt_no, a.state, " T("a") " AS tries FROM jobguard.attempts a" \
	"  WHERE a.job_id OPERATOR(pg_catalog.=) j.id" \
	"  ORDER BY a.attempt_no DESC LIMIT 1) last ON true"

/*
 * A job's derived state and its scope; read with the caller's snapshot or a
 * fresh one.
 */
#define JOB_STATE_SQL \
	"SELECT v.state, v.scope FROM jobguard.job_overview v" \
	" WHERE v.job_id OPERATOR(pg_catalog.=) $1"

/*
 * A job that is terminal (succeeded, cancelled, or failed: max_attempts
 * attempts, none open) since before the cut-off $1, on alias j.  A job with
 * an open attempt is never terminal here, whatever its state: its provider
 * may still report, and that report must find its attempt.
 */
#define PURGEABLE_SQL_E(T) \
	"NOT EXISTS (SELECT 1 FROM jobguard.attempts o" \
	"  WHERE o.job_id OPERATOR(pg_catalog.=) j.id" \
	"  AND o.state OPERATOR(pg_catalog.=) ANY ('{started,unknown}'::pg_catalog.text[]))" \
	" AND COALESCE(j.completed_at, j.cancelled_at," \
	"  (SELECT pg_catalog.max(COALESCE(f.finished_at, f.cancelled_at))" \
	"     FROM jobguard.attempts f WHERE f.job_id OPERATOR(pg_catalog.=) j.id" \
	"   HAVING " T " OPERATOR(pg_catalog.>=) j.max_attempts))" \
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
	bool		whole_tables;	/* reads whole tables: no index-only planning */
	bool		index_order;	/* also planned without sorts or bitmap scans:
								 * read in an index's order, cut short by its
								 * LIMIT */
	bool		latest_snapshot;	/* run with the latest snapshot, whatever
									 * the isolation level */
} StatementDef;

/*
 * A stored max_per_second as float8, clamped to MIN_PER_SECOND_TEXT to
 * MAX_PER_SECOND_TEXT (args.h): a value stored before set_provider_policy()
 * checked the range, or written by hand, would underflow or overflow the
 * cast in every call that reads any provider's limits.  NULL stays NULL.
 */
#define PER_SECOND_SQL \
	"CASE WHEN p.max_per_second IS NULL THEN NULL::pg_catalog.float8" \
	" ELSE LEAST(GREATEST(p.max_per_second, " MIN_PER_SECOND_TEXT "::pg_catalog.numeric)," \
	" " MAX_PER_SECOND_TEXT "::pg_catalog.numeric)::pg_catalog.float8 END"

/*
 * A stored duration read as at most the longest one (args.h); NULL stays
 * NULL (LEAST alone would make it the longest).
 */
#define DURATION_SQL(col) \
	"(CASE WHEN " col " IS NULL THEN NULL ELSE LEAST(" col ", " DURATION_MAX_SQL ") END)"

/*
 * A certification c that counts: in 1.2, one not revoked; in 1.3 also one
 * earned under its operation's current contract_version (NULL on either
 * side read as 0, which no version is: they come from a sequence starting
 * at 1), so that a certification of an operation defined since, or
 * defined again with another contract, is stale.  The statements that
 * read certifications are written once with C and made in both forms
 * (statements[] and statements_1_2[]).
 */
#define CERT_LIVE_1_2 "c.revoked_at IS NULL"
#define CERT_LIVE_1_3 \
	"c.revoked_at IS NULL" \
	" AND COALESCE(c.contract_version, 0) OPERATOR(pg_catalog.=)" \
	"  COALESCE((SELECT cv.contract_version FROM jobguard.operations cv" \
	"   WHERE cv.operation OPERATOR(pg_catalog.=) c.operation), 0)"

/*
 * The provider a claim begins job j's next attempt against, given the
 * job's failover route r (a LEFT JOIN of jobguard.failover; doc/reference.md,
 * "Failover routes") and the claim's provider $4.  With a route: the
 * first provider on it (the own provider, n = 0, then the usable
 * fallbacks in order) against which fewer than r.after_failures of the
 * job's attempts ended failed or cancelled, a redriven one not counted (the
 * next attempt repeats its count of tries: the same request again); none:
 * the last usable one.  A fallback is usable while certified under the
 * current contract and not paused.  Without a route, 1.2's rule: the own
 * provider, or the claim's provider $4 where it is certified and the
 * job's latest attempt was cancelled or failed.  Only evaluated for a
 * job the scan reaches, through the job's attempts by (job_id,
 * attempt_no): jobguard.job_overview.next_provider is the same rule.
 */
#define ROUTE_PROVIDER_SQL \
	"CASE WHEN r.operation IS NULL THEN" \
	" CASE WHEN $4 IS NOT NULL AND $4 OPERATOR(pg_catalog.<>) j.provider" \
	"   AND last.state OPERATOR(pg_catalog.=) ANY ('{cancelled,failed}'::pg_catalog.text[])" \
	"   AND EXISTS (SELECT 1 FROM jobguard.certifications c" \
	"    WHERE c.operation OPERATOR(pg_catalog.=) j.operation" \
	"    AND c.provider OPERATOR(pg_catalog.=) $4" \
	"    AND " CERT_LIVE_1_3 ")" \
	"  THEN $4 ELSE j.provider::pg_catalog.text END" \
	" ELSE (SELECT rp.provider FROM (" \
	"  SELECT j.provider::pg_catalog.text AS provider, 0::pg_catalog.int8 AS n" \
	"  UNION ALL" \
	"  SELECT u.provider, u.n FROM pg_catalog.unnest(r.providers) WITH ORDINALITY AS u(provider, n)" \
	"   WHERE u.provider OPERATOR(pg_catalog.<>) j.provider" \
	"   AND EXISTS (SELECT 1 FROM jobguard.certifications c" \
	"    WHERE c.operation OPERATOR(pg_catalog.=) j.operation" \
	"    AND c.provider OPERATOR(pg_catalog.=) u.provider" \
	"    AND " CERT_LIVE_1_3 ")" \
	"   AND NOT EXISTS (SELECT 1 FROM jobguard.provider_policy pp" \
	"    WHERE pp.provider OPERATOR(pg_catalog.=) u.provider AND pp.paused)) rp" \
	"  CROSS JOIN LATERAL (SELECT (SELECT pg_catalog.count(*) FROM jobguard.attempts f" \
	"    WHERE f.job_id OPERATOR(pg_catalog.=) j.id" \
	"    AND f.provider OPERATOR(pg_catalog.=) rp.provider" \
	"    AND f.state OPERATOR(pg_catalog.=) ANY ('{failed,cancelled}'::pg_catalog.text[])" \
	"    AND NOT EXISTS (SELECT 1 FROM jobguard.attempts nx" \
	"     WHERE nx.job_id OPERATOR(pg_catalog.=) f.job_id" \
	"     AND nx.attempt_no OPERATOR(pg_catalog.=) (f.attempt_no OPERATOR(pg_catalog.+) 1)" \
	"     AND COALESCE(nx.tries, nx.attempt_no) OPERATOR(pg_catalog.=) COALESCE(f.tries, f.attempt_no)))" \
	"   OPERATOR(pg_catalog.<) r.after_failures AS fresh OFFSET 0) fr" \
	"  ORDER BY fr.fresh DESC," \
	"   CASE WHEN fr.fresh THEN rp.n ELSE OPERATOR(pg_catalog.-) rp.n END" \
	"  LIMIT 1) END"

/* The columns every attempt query returns (ATTEMPT_ROW_COLUMNS, store_sql.h). */
#define ATTEMPT_COLUMNS ATTEMPT_ROW_COLUMNS(ATTEMPT_ROW_SQL_, ", ")

/* The job columns a finish needs, in the order read_finish_job reads them. */
#define FINISH_JOB_COLUMNS \
	"j.operation, j.completed_by, j.result, o.contract_version, o.output_contract"

/*
 * The statements of a submit take the request's columns as $1, $2, ... in
 * the order of SUBMIT_COLUMNS (store_columns.h), their column lists,
 * argument types and comparisons generated from it, and what follows them
 * as SUBMIT_PARAM_AFTER_1, _2, _3.
 */
SUBMIT_COLUMNS_CHECK()
StaticAssertDecl(SUBMIT_PARAM_AFTER_1 == SUBMIT_COLUMN_COUNT + 1 &&
				 SUBMIT_PARAM_AFTER_2 == SUBMIT_COLUMN_COUNT + 2 &&
				 SUBMIT_PARAM_AFTER_3 == SUBMIT_COLUMN_COUNT + 3,
				 "SUBMIT_PARAM_AFTER_n: the parameters after the submit columns");
StaticAssertDecl(SUBMIT_SCOPE == SUBMIT_COLUMN_COUNT - 1,
				 "the scope is the last submit column");
#define AFTER_1 "$" CppAsString2(SUBMIT_PARAM_AFTER_1)
#define AFTER_2 "$" CppAsString2(SUBMIT_PARAM_AFTER_2)
#define AFTER_3 "$" CppAsString2(SUBMIT_PARAM_AFTER_3)

/*
 * STMT_INSERT_JOBS's pieces: each request column unnested from its array
 * ($n) as u.c<n>, the scope ($n) given once; the arrays' types.
 */
#define UNNESTED_(e, col, name, type, atype, n, role) UNNESTED_##role(n)
#define UNNESTED_KEY(n) "u.c" #n
#define UNNESTED_COMPARED(n) "u.c" #n
#define UNNESTED_AS_SUBMITTED(n) "u.c" #n
#define UNNESTED_SCOPE(n) "$" #n
#define UNNEST_(e, col, name, type, atype, n, role) UNNEST_##role(n)
#define UNNEST_KEY(n) "pg_catalog.unnest($" #n "), "
#define UNNEST_COMPARED(n) UNNEST_KEY(n)
#define UNNEST_AS_SUBMITTED(n) UNNEST_KEY(n)
#define UNNEST_SCOPE(n) ""
#define UNNEST_ALIAS_(e, col, name, type, atype, n, role) UNNEST_ALIAS_##role(n)
#define UNNEST_ALIAS_KEY(n) "c" #n ", "
#define UNNEST_ALIAS_COMPARED(n) UNNEST_ALIAS_KEY(n)
#define UNNEST_ALIAS_AS_SUBMITTED(n) UNNEST_ALIAS_KEY(n)
#define UNNEST_ALIAS_SCOPE(n) ""
#define ARRAY_TYPE_(e, col, name, type, atype, n, role) atype
/* "u.c1, ..., $7" */
#define INSERT_JOBS_SELECT SUBMIT_COLUMNS(UNNESTED_, ", ")
/* "pg_catalog.unnest($1), ..., " */
#define INSERT_JOBS_UNNEST SUBMIT_COLUMNS(UNNEST_, )
/* "c1, ..., " */
#define INSERT_JOBS_ALIASES SUBMIT_COLUMNS(UNNEST_ALIAS_, )
/* TEXTARRAYOID, ..., TEXTOID */
#define INSERT_JOBS_TYPES SUBMIT_COLUMNS(ARRAY_TYPE_, STORE_COLUMNS_COMMA)

/*
 * STMT_MATCH_JOB's comparisons: one boolean per COMPARED column, in their
 * order, the stored value with the request's ($n) under "=", NULL equal to
 * NULL.  max_attempts (AS_SUBMITTED) as submitted: retry_job raises it,
 * recording the request's first in jobs.retries (read only when the job has
 * a max_attempts, as rows.c reads it); a 1.1 database has no retries.
 */
#define SAME_(name, stored, n) \
	", COALESCE(" stored " OPERATOR(pg_catalog.=) $" #n ", " stored " IS NULL AND $" #n " IS NULL)"
#define COMPARE_(e, col, name, type, atype, n, role) COMPARE_##role(name, n)
#define COMPARE_KEY(name, n) ""
#define COMPARE_SCOPE(name, n) ""
#define COMPARE_COMPARED(name, n) SAME_(name, "j." name, n)
#define COMPARE_AS_SUBMITTED(name, n) \
	SAME_(name, "(CASE WHEN j." name " IS NOT NULL THEN COALESCE((j.retries" \
		  " OPERATOR(pg_catalog.->) 0 OPERATOR(pg_catalog.->>) '" name "_before')::pg_catalog.int4," \
		  " j." name ") END)", n)
#define COMPARE_1_1_(e, col, name, type, atype, n, role) COMPARE_1_1_##role(name, n)
#define COMPARE_1_1_KEY(name, n) ""
#define COMPARE_1_1_SCOPE(name, n) ""
#define COMPARE_1_1_COMPARED(name, n) SAME_(name, "j." name, n)
#define COMPARE_1_1_AS_SUBMITTED(name, n) SAME_(name, "j." name, n)
/* the job of a submit's key (the KEY columns and the scope), not replaced */
#define SCOPE_PARAM_(e, col, name, type, atype, n, role) SCOPE_PARAM_##role(n)
#define SCOPE_PARAM_KEY(n) ""
#define SCOPE_PARAM_COMPARED(n) ""
#define SCOPE_PARAM_AS_SUBMITTED(n) ""
#define SCOPE_PARAM_SCOPE(n) "$" #n
#define MATCH_JOB_FROM \
	" FROM jobguard.jobs j" \
	" WHERE j.scope OPERATOR(pg_catalog.=) " SUBMIT_COLUMNS(SCOPE_PARAM_, ) \
	" AND j.owner_id OPERATOR(pg_catalog.=) $1" \
	" AND j.idempotency_key OPERATOR(pg_catalog.=) $2" \
	" AND j.replaced_at IS NULL"

/*
 * The statements that count attempts toward max_attempts, written once
 * with T, the counting column (TRIES_1_2 or TRIES_1_1; for the purge
 * and the replacement, the count: USED_1_2 or USED_1_1).
 */
#define CLAIM_FLOOR_DEF(T) { \
		"claim floor", \
		"SELECT COALESCE((SELECT j.id FROM jobguard.jobs j" \
		" LEFT JOIN LATERAL (" \
		"  SELECT l.attempt_no, l.state, " T("l") " AS tries FROM jobguard.attempts l" \
		"   WHERE l.job_id OPERATOR(pg_catalog.=) j.id" \
		"   ORDER BY l.attempt_no DESC LIMIT 1) AS last ON true" \
		" WHERE j.completed_by IS NULL AND j.cancelled_at IS NULL" \
		" AND (last.state IS NULL" \
		"   OR last.state OPERATOR(pg_catalog.<>) ALL ('{started,unknown}'::pg_catalog.text[]))" \
		" AND (j.max_attempts IS NULL" \
		"   OR COALESCE(last.tries, 0) OPERATOR(pg_catalog.<) j.max_attempts)" \
		" ORDER BY j.id LIMIT 1)," \
		" (SELECT pg_catalog.max(n.id) FROM jobguard.jobs n), 0)", \
		0, {0}, \
		SPI_OK_SELECT, false \
}

#define PURGE_PAGE_DEF(T) { \
		"purge page", \
		"WITH page AS (" \
		"  SELECT c.id, c.created_at FROM jobguard.jobs c" \
		"   WHERE c.id OPERATOR(pg_catalog.>) $2 ORDER BY c.id LIMIT $3)," \
		" gone AS (" \
		"  DELETE FROM jobguard.jobs AS j USING page" \
		"   WHERE j.id OPERATOR(pg_catalog.=) page.id AND " PURGEABLE_SQL_E(T) \
		"   AND ($4 IS NULL OR j.operation OPERATOR(pg_catalog.=) $4)" \
		"  RETURNING j.id, " STORED_JOB_STATE_SQL("'none'", "NULL::integer") " AS closed_as)" \
		" SELECT (SELECT pg_catalog.max(page.id) FROM page)," \
		"  (SELECT pg_catalog.count(*) FROM gone)," \
		"  (SELECT pg_catalog.max(page.created_at) FROM page)," \
		/* what went, by state, for the gauges: jobs (failed is the rest) */ \
		"  (SELECT pg_catalog.count(*) FROM gone WHERE gone.closed_as OPERATOR(pg_catalog.=) 'succeeded')," \
		"  (SELECT pg_catalog.count(*) FROM gone WHERE gone.closed_as OPERATOR(pg_catalog.=) 'cancelled')," \
		/* and their attempts, as {cancelled,succeeded,lost,failed} */ \
		"  (SELECT pg_catalog.array_agg((SELECT pg_catalog.count(*) FROM jobguard.attempts a" \
		"     WHERE a.job_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT gone.id FROM gone))" \
		"     AND a.state OPERATOR(pg_catalog.=) s.state) ORDER BY s.n)" \
		"    FROM pg_catalog.unnest('{cancelled,succeeded,lost,failed}'::pg_catalog.text[])" \
		"     WITH ORDINALITY AS s(state, n))", \
		4, {TIMESTAMPTZOID, INT8OID, INT4OID, TEXTOID}, \
		SPI_OK_SELECT, false \
}

#define STORED_STATE_COUNTS_DEF(T) { \
		"stored state counts", \
		"SELECT x.metric, COALESCE(c.n, 0) FROM (" \
		" SELECT 1 AS kind, s.n AS ord, 'jobs.' OPERATOR(pg_catalog.||) s.state AS metric, s.state" \
		" FROM pg_catalog.unnest('{pending,running,unknown,succeeded,failed,cancelled}'::pg_catalog.text[])" \
		"  WITH ORDINALITY AS s(state, n)" \
		" UNION ALL" \
		" SELECT 2, s.n, 'attempts.' OPERATOR(pg_catalog.||) s.state, s.state" \
		" FROM pg_catalog.unnest('{started,unknown,cancelled,succeeded,lost,failed}'::pg_catalog.text[])" \
		"  WITH ORDINALITY AS s(state, n)) x" \
		" LEFT JOIN (" \
		"  SELECT 1 AS kind, " STORED_JOB_STATE_SQL("last.state", "last.tries") " AS state," \
		"   pg_catalog.count(*) AS n" \
		"  FROM jobguard.jobs j" LAST_ATTEMPT_SQL_T(T) " GROUP BY 1, 2" \
		"  UNION ALL" \
		"  SELECT 2, a.state, pg_catalog.count(*) FROM jobguard.attempts a GROUP BY 1, 2) c" \
		" ON c.kind OPERATOR(pg_catalog.=) x.kind AND c.state OPERATOR(pg_catalog.=) x.state" \
		" ORDER BY x.kind, x.ord", \
		0, {0}, \
		SPI_OK_SELECT, false, true \
}

#define STORED_JOB_STATE_DEF(T) { \
		"stored job state", \
		"SELECT " STORED_JOB_STATE_SQL("last.state", "last.tries") \
		" FROM jobguard.jobs j" LAST_ATTEMPT_SQL_T(T) \
		" WHERE j.id OPERATOR(pg_catalog.=) $1", \
		1, {INT8OID}, \
		SPI_OK_SELECT, false \
}

#define REPLACE_ENDED_JOB_DEF(T) { \
		"replace ended job", \
		"UPDATE jobguard.jobs AS j" \
		" SET replaced_at = pg_catalog.now(), version = j.version OPERATOR(pg_catalog.+) 1" \
		" WHERE j.id OPERATOR(pg_catalog.=) $1 AND j.replaced_at IS NULL" \
		" AND j.completed_by IS NULL" \
		" AND (j.cancelled_at IS NOT NULL" \
		"  OR (j.max_attempts IS NOT NULL" \
		"   AND NOT EXISTS (SELECT 1 FROM jobguard.attempts o" \
		"    WHERE o.job_id OPERATOR(pg_catalog.=) j.id" \
		"    AND o.state OPERATOR(pg_catalog.=) ANY ('{started,unknown}'::pg_catalog.text[]))" \
		"   AND (SELECT " T " FROM jobguard.attempts f" \
		"    WHERE f.job_id OPERATOR(pg_catalog.=) j.id) OPERATOR(pg_catalog.>=) j.max_attempts))" \
		" RETURNING j.id", \
		1, {INT8OID}, \
		SPI_OK_UPDATE_RETURNING, false \
}

#define LAST_ATTEMPT_DEF(T) { \
		"last attempt", \
		"SELECT " ATTEMPT_COLUMNS ", " T("a") \
		" FROM jobguard.attempts a" \
		" WHERE a.job_id OPERATOR(pg_catalog.=) $1" \
		" ORDER BY a.attempt_no DESC LIMIT 1", \
		1, {INT8OID}, \
		SPI_OK_SELECT, false \
}

/*
 * The sweep: at most $1 started attempts past their deadline, the most
 * overdue first, become unknown.  OVERDUE picks them (the ids, locked
 * SKIP LOCKED); SET_SINCE: 1.2 keeps when each became unknown.
 */
#define SWEEP_OVERDUE_DEF(WITH, OVERDUE, SET_SINCE) { \
		"sweep overdue", \
		"WITH " WITH "swept AS (" \
		" UPDATE jobguard.attempts AS a SET state = 'unknown'" SET_SINCE \
		" WHERE a.id OPERATOR(pg_catalog.=) ANY (ARRAY(" OVERDUE "))" \
		" AND a.state OPERATOR(pg_catalog.=) 'started'" \
		" RETURNING a.job_id)" \
		/*
		 * how many, and how many of their jobs are open (running ->
		 * unknown); each job by its primary key (OFFSET 0: a plan made
		 * while the tables were small would hash the whole jobs table at
		 * every sweep)
		 */ \
		" SELECT pg_catalog.count(*)," \
		"  pg_catalog.count(*) FILTER (WHERE j.completed_by IS NULL AND j.cancelled_at IS NULL)" \
		" FROM swept CROSS JOIN LATERAL (SELECT o.completed_by, o.cancelled_at" \
		"  FROM jobguard.jobs o WHERE o.id OPERATOR(pg_catalog.=) swept.job_id OFFSET 0) j", \
		1, {INT4OID}, \
		SPI_OK_SELECT, false \
	 \
}

/*
 * When the window for redriving attempt a under its key ends (NULL
 * without a policy p that deduplicates): the key's first use plus
 * dedupes_for, less a margin of 1 % of dedupes_for, at least a minute.
 * dedupes_for is read as at most the longest duration (DURATION_SQL): a
 * longer one stored would overflow the timestamp.
 */
#define REDRIVE_WINDOW_END_SQL \
	"((SELECT pg_catalog.min(f.started_at) FROM jobguard.attempts f" \
	"   WHERE f.job_id OPERATOR(pg_catalog.=) a.job_id" \
	"   AND f.provider_key OPERATOR(pg_catalog.=) a.provider_key)" \
	" OPERATOR(pg_catalog.+) " DURATION_SQL("p.dedupes_for") \
	" OPERATOR(pg_catalog.-) GREATEST(" DURATION_SQL("p.dedupes_for") " OPERATOR(pg_catalog.*) 0.01::pg_catalog.float8," \
	"  '1 minute'::pg_catalog.interval))"

/* The attempt a redrive reads and locks; WAIT: NOWAIT or SKIP LOCKED. */
#define REDRIVE_READ_DEF(WAIT) { \
		"redrive read", \
		"SELECT a.job_id, a.attempt_no, a.provider::pg_catalog.text, a.state," \
		" jobguard.attempt_state(a.state, a.deadline), a.provider_key," \
		" j.completed_by IS NOT NULL OR j.cancelled_at IS NOT NULL," \
		" p.dedupes_for IS NOT NULL, " REDRIVE_WINDOW_END_SQL "," \
		" " REDRIVE_WINDOW_END_SQL " OPERATOR(pg_catalog.>) pg_catalog.now()" \
		" FROM jobguard.attempts a" \
		" JOIN jobguard.jobs j ON j.id OPERATOR(pg_catalog.=) a.job_id" \
		" LEFT JOIN jobguard.provider_policy p ON p.provider OPERATOR(pg_catalog.=) a.provider" \
		" WHERE a.id OPERATOR(pg_catalog.=) $1" \
		" AND ($2 IS NULL OR j.scope OPERATOR(pg_catalog.=) $2)" \
		" FOR NO KEY UPDATE OF j " WAIT " FOR UPDATE OF a " WAIT, \
		2, {INT8OID, TEXTOID}, \
		SPI_OK_SELECT, false \
}

/*
 * Begin the job's next attempt in one statement, with the gate in its
 * WHERE: the job is open, its latest attempt is not, attempts are left,
 * and a provider other than the job's own ($2) is certified (C: what
 * counts as a certification).  Two begins
 * racing each other are decided by the partial unique index on open
 * attempts: ON CONFLICT makes the second wait for the first, and do
 * nothing if the first commits (as submit does with a key).  Only a job
 * of scope $5 (NULL: any).  $6 is the claiming worker (NULL for an
 * explicit begin); the timeout is kept for heartbeat().  No row back means refused; the caller then
 * finds out why.
 */
#define BEGIN_ATTEMPT_DEF(C) { \
		"begin attempt", \
		"INSERT INTO jobguard.attempts AS a" \
		" (job_id, attempt_no, provider, state, read_version, attempt_key," \
		"  started_at, deadline, worker, timeout, provider_key, tries)" \
		" SELECT j.id, COALESCE(last.attempt_no, 0) OPERATOR(pg_catalog.+) 1," \
		"  COALESCE($2, j.provider), 'started', j.version, $3," \
		"  COALESCE($7, pg_catalog.now())," \
		"  COALESCE($7, pg_catalog.now()) OPERATOR(pg_catalog.+) $4, $6, $4," \
		/* the provider key: the latest same-provider attempt's, unless it failed */ \
		"  COALESCE((SELECT CASE WHEN p.state OPERATOR(pg_catalog.=) 'failed' THEN NULL" \
		"     ELSE p.provider_key END FROM jobguard.attempts p" \
		"    WHERE p.job_id OPERATOR(pg_catalog.=) j.id" \
		"    AND p.provider OPERATOR(pg_catalog.=) COALESCE($2, j.provider::pg_catalog.text)" \
		"    ORDER BY p.attempt_no DESC LIMIT 1), $8)," \
		"  COALESCE(last.tries, 0) OPERATOR(pg_catalog.+) 1" \
		" FROM jobguard.jobs j" \
		" LEFT JOIN LATERAL (" \
		"  SELECT l.attempt_no, l.state, COALESCE(l.tries, l.attempt_no) AS tries" \
		"   FROM jobguard.attempts l" \
		"   WHERE l.job_id OPERATOR(pg_catalog.=) j.id" \
		"   ORDER BY l.attempt_no DESC LIMIT 1) AS last ON true" \
		" WHERE j.id OPERATOR(pg_catalog.=) $1" \
		" AND ($5 IS NULL OR j.scope OPERATOR(pg_catalog.=) $5)" \
		" AND j.completed_by IS NULL AND j.cancelled_at IS NULL" \
		" AND (last.state IS NULL" \
		"   OR last.state OPERATOR(pg_catalog.<>) ALL ('{started,unknown}'::pg_catalog.text[]))" \
		" AND (j.max_attempts IS NULL" \
		"   OR COALESCE(last.tries, 0) OPERATOR(pg_catalog.<) j.max_attempts)" \
		" AND ($2 IS NULL OR $2 OPERATOR(pg_catalog.=) j.provider" \
		"   OR EXISTS (SELECT 1 FROM jobguard.certifications c" \
		"    WHERE c.operation OPERATOR(pg_catalog.=) j.operation" \
		"    AND c.provider OPERATOR(pg_catalog.=) $2" \
		"    AND " C "))" \
		" ON CONFLICT DO NOTHING" \
		" RETURNING a.id", \
		8, {INT8OID, TEXTOID, TEXTOID, INTERVALOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TEXTOID}, \
		SPI_OK_INSERT_RETURNING, false \
	}

#define PROVIDER_CERTIFIED_DEF(C) { \
		"provider certified", \
		"SELECT 1 FROM jobguard.certifications c" \
		" WHERE c.operation OPERATOR(pg_catalog.=) $1" \
		" AND c.provider OPERATOR(pg_catalog.=) $2" \
		" AND " C, \
		2, {TEXTOID, TEXTOID}, \
		SPI_OK_SELECT, false \
	}

static const StatementDef statements[STMT_COUNT] = {
	/*
	 * The unique constraint decides who creates the job: no look-up first.
	 * A concurrent identical insert waits here until the first commits or
	 * rolls back.
	 */
	[STMT_INSERT_JOB] = {
		"insert job",
		"INSERT INTO jobguard.jobs AS j"
		" (" SUBMIT_COLUMN_NAMES ")"
		" VALUES (" SUBMIT_COLUMN_PARAMS ")"
		" ON CONFLICT (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL DO NOTHING"
		" RETURNING j.id",
		SUBMIT_COLUMN_COUNT, {SUBMIT_COLUMN_TYPES},
		SPI_OK_INSERT_RETURNING, false
	},
	/*
	 * Many jobs in one statement, in input order (AFTER_1: whether each row is
	 * to be inserted, unnested beside the others, so that the statement is
	 * linear in the rows): a later row with the key of an earlier one, or
	 * of a stored job, inserts nothing.  Returns the key of every job
	 * inserted, with its id; the caller matches them to the rows.
	 */
	[STMT_INSERT_JOBS] = {
		"insert jobs",
		"INSERT INTO jobguard.jobs AS j"
		" (" SUBMIT_COLUMN_NAMES ")"
		" SELECT " INSERT_JOBS_SELECT
		" FROM ROWS FROM (" INSERT_JOBS_UNNEST "pg_catalog.unnest(" AFTER_1 "))"
		"  WITH ORDINALITY AS u(" INSERT_JOBS_ALIASES "wanted, n)"
		" WHERE u.wanted"
		" ORDER BY u.n"
		" ON CONFLICT (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL DO NOTHING"
		" RETURNING j.owner_id::pg_catalog.text, j.idempotency_key::pg_catalog.text, j.id",
		SUBMIT_COLUMN_COUNT + 1, {INSERT_JOBS_TYPES, BOOLARRAYOID},
		SPI_OK_INSERT_RETURNING, false
	},
	/* The existing job for a key, and which parts of the request match it. */
	[STMT_MATCH_JOB] = {
		"match job",
		"SELECT j.id" SUBMIT_COLUMNS(COMPARE_, ) MATCH_JOB_FROM,
		SUBMIT_COLUMN_COUNT, {SUBMIT_COLUMN_TYPES},
		SPI_OK_SELECT, false
	},
	/*
	 * Lock the job row against concurrent begins, finishes and cancels.  NO
	 * KEY UPDATE leaves the KEY SHARE lock of the attempts foreign key free.
	 * Only a job of scope $2 (NULL: any): another scope's job is neither
	 * locked nor seen.
	 */
	[STMT_LOCK_JOB] = {
		"lock job",
		"SELECT j.operation, j.provider, j.max_attempts, j.version,"
		" j.completed_by, j.cancelled_at IS NOT NULL"
		" FROM jobguard.jobs j"
		" WHERE j.id OPERATOR(pg_catalog.=) $1"
		" AND ($2 IS NULL OR j.scope OPERATOR(pg_catalog.=) $2)"
		" FOR NO KEY UPDATE",
		2, {INT8OID, TEXTOID},
		SPI_OK_SELECT, false
	},
	/* The latest attempt: the only one that can be open. */
	[STMT_LAST_ATTEMPT] = LAST_ATTEMPT_DEF(TRIES_1_2),
	/* Begin the job's next attempt (BEGIN_ATTEMPT_DEF). */
	[STMT_BEGIN_ATTEMPT] = BEGIN_ATTEMPT_DEF(CERT_LIVE_1_3),
	/* Whether provider $2 is certified for operation $1 (a certification that counts). */
	[STMT_PROVIDER_CERTIFIED] = PROVIDER_CERTIFIED_DEF(CERT_LIVE_1_3),
	/*
	 * Lock one attempt: finishes, fails and cancels of it run one at a time.
	 * Only an attempt of a job of scope $2 (NULL: any).  The job's scope is
	 * a scalar subquery, not an EXISTS: PostgreSQL 18 may plan an EXISTS as
	 * a hashed subplan reading every job of the scope, even with sequential
	 * scans disabled, where a scalar subquery reads the one job by its key.
	 */
	[STMT_LOCK_ATTEMPT] = {
		"lock attempt",
		"SELECT " ATTEMPT_COLUMNS
		" FROM jobguard.attempts a"
		" WHERE a.id OPERATOR(pg_catalog.=) $1"
		" AND ($2 IS NULL OR (SELECT s.scope FROM jobguard.jobs s"
		"  WHERE s.id OPERATOR(pg_catalog.=) a.job_id) OPERATOR(pg_catalog.=) $2)"
		" FOR UPDATE OF a",
		2, {INT8OID, TEXTOID},
		SPI_OK_SELECT, false
	},
	/*
	 * An attempt with its job and the operation's contract, in one snapshot
	 * (one contract, never a mix).  No lock: the finish then claims the
	 * attempt on condition that it is still in the state read here.  Only
	 * an attempt of a job of scope $2 (NULL: any).
	 */
	[STMT_READ_FOR_FINISH] = {
		"read for finish",
		"SELECT " ATTEMPT_COLUMNS ", " FINISH_JOB_COLUMNS
		" FROM jobguard.attempts a"
		" JOIN jobguard.jobs j ON j.id OPERATOR(pg_catalog.=) a.job_id"
		" LEFT JOIN jobguard.operations o"
		"  ON o.operation OPERATOR(pg_catalog.=) j.operation"
		" WHERE a.id OPERATOR(pg_catalog.=) $1"
		" AND ($2 IS NULL OR j.scope OPERATOR(pg_catalog.=) $2)",
		2, {INT8OID, TEXTOID},
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
	/* 1.2 keeps when it became unknown (at most its deadline) */
	[STMT_MARK_UNKNOWN] = {
		"mark unknown",
		"UPDATE jobguard.attempts AS a SET state = 'unknown',"
		" unknown_since = LEAST(pg_catalog.now(), a.deadline)"
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
	/*
	 * Push back the deadline of a started attempt that has not timed out
	 * (the caller checked, holding the attempt's lock): by $2, or by the
	 * attempt's own timeout (for attempts begun before 1.1, which did not
	 * keep it: the span from its start to its deadline).
	 */
	[STMT_HEARTBEAT] = {
		"heartbeat",
		"UPDATE jobguard.attempts AS a"
		" SET deadline = pg_catalog.now() OPERATOR(pg_catalog.+)"
		"  COALESCE($2, " DURATION_SQL("COALESCE(a.timeout, a.deadline OPERATOR(pg_catalog.-) a.started_at)") ")"
		" WHERE a.id OPERATOR(pg_catalog.=) $1"
		" RETURNING a.deadline",
		2, {INT8OID, INTERVALOID},
		SPI_OK_UPDATE_RETURNING, false
	},
	/* The retry policy of the job's operation; no row when it has none. */
	[STMT_RETRY_POLICY] = {
		"retry policy",
		"SELECT o.retry_backoff, o.retry_backoff_max"
		" FROM jobguard.jobs j"
		" JOIN jobguard.operations o ON o.operation OPERATOR(pg_catalog.=) j.operation"
		" WHERE j.id OPERATOR(pg_catalog.=) $1 AND o.retry_backoff IS NOT NULL",
		1, {INT8OID},
		SPI_OK_SELECT, false
	},
	/*
	 * When claim() may begin the job's next attempt: now() + $2, or at once
	 * ($2 NULL).  Written only when it changes, so that a job without a
	 * retry policy is not rewritten by every failure.  "Changes" is IS
	 * DISTINCT FROM written with pg_catalog's = (IS DISTINCT FROM would
	 * find = by name, on the caller's search_path): unequal, or exactly
	 * one side NULL (now() + $2 is NULL just when $2 is).
	 */
	[STMT_SET_NOT_BEFORE] = {
		"set not_before",
		"UPDATE jobguard.jobs AS j"
		" SET not_before = pg_catalog.now() OPERATOR(pg_catalog.+) $2"
		" WHERE j.id OPERATOR(pg_catalog.=) $1"
		" AND NOT COALESCE(j.not_before OPERATOR(pg_catalog.=) (pg_catalog.now() OPERATOR(pg_catalog.+) $2),"
		"  j.not_before IS NULL AND $2 IS NULL)",
		2, {INT8OID, INTERVALOID},
		SPI_OK_UPDATE, false
	},
	/*
	 * The runnable jobs claim() may begin, at most $5, in claim order
	 * (priority, then run time: run_at or a backoff's not_before, else
	 * creation; then id), each
	 * locked so that no other claim takes it: SKIP LOCKED passes over the
	 * jobs a concurrent claim (or finish, or cancel) holds instead of
	 * waiting for them.  Runnable: not succeeded or cancelled (the partial
	 * index jobs_run_order holds just those, in claim order: the priorities
	 * present are walked one index descent each, and in each only the range
	 * already due is read), no open attempt, attempts
	 * left, run time passed ($3), of scope $1 (NULL: any) and of an
	 * operation in $2 (NULL: any), from id $6 on (the claim floor: no job
	 * with a lower id is claimable; see claim_floor()).  Each
	 * comes with the provider its next attempt runs against
	 * (ROUTE_PROVIDER_SQL: its failover route's choice); a provider $4,
	 * or a list of them $10, takes only the jobs whose choice it is, and
	 * the providers this claim found at a limit or paused ($7) are passed
	 * over, never moved further along a route for that.  Then  Then
	 * claim() begins each with the rules of begin_attempt, which check all
	 * of this again under the partial unique index on open attempts.
	 *
	 * Planned once, as index lookups, like the others (see sql_run): a
	 * plan made while the attempts table held a page or two would
	 * otherwise read it whole for every job it passes over once it has
	 * grown; and planning it at every run costs more than running it.
	 */
	[STMT_CLAIM_CANDIDATES] = {
		"claim candidates",
		/* the priorities present among the jobs not succeeded or cancelled */
		"WITH RECURSIVE levels(priority) AS ("
		" SELECT (SELECT p.priority FROM jobguard.jobs p"
		"  WHERE p.completed_by IS NULL AND p.cancelled_at IS NULL"
		"  ORDER BY p.priority LIMIT 1)"
		" UNION ALL"
		" SELECT (SELECT p.priority FROM jobguard.jobs p"
		"  WHERE p.completed_by IS NULL AND p.cancelled_at IS NULL"
		"  AND p.priority OPERATOR(pg_catalog.>) l.priority"
		"  ORDER BY p.priority LIMIT 1)"
		" FROM levels l WHERE l.priority IS NOT NULL)"
		/* in each, the jobs already due, by run time then id */
		" SELECT c.id, c.provider FROM ("
		/* the priorities known to have claimable jobs ($9), else the walk */
		"  SELECT k.priority FROM pg_catalog.unnest($9) AS k(priority) WHERE $9 IS NOT NULL"
		"  UNION ALL SELECT l.priority FROM levels l WHERE $9 IS NULL) lv"
		" CROSS JOIN LATERAL ("
		"SELECT j.id, ch.provider FROM jobguard.jobs j"
		" LEFT JOIN LATERAL ("
		"  SELECT l.attempt_no, l.state, " TRIES_1_2("l") " AS tries FROM jobguard.attempts l"
		"   WHERE l.job_id OPERATOR(pg_catalog.=) j.id"
		"   ORDER BY l.attempt_no DESC LIMIT 1) AS last ON true"
		/* the job's route, by the primary key (a small table) */
		" LEFT JOIN LATERAL (SELECT f.operation, f.providers, f.after_failures"
		"  FROM jobguard.failover f WHERE f.operation OPERATOR(pg_catalog.=) j.operation) AS r ON true"
		/* the provider its next attempt runs against */
		/* OFFSET 0: computed once per job, not once per reference */
		" CROSS JOIN LATERAL (SELECT " ROUTE_PROVIDER_SQL " AS provider OFFSET 0) AS ch"
		" WHERE j.priority OPERATOR(pg_catalog.=) lv.priority"
		" AND j.completed_by IS NULL AND j.cancelled_at IS NULL"
		" AND COALESCE(j.not_before, j.created_at) OPERATOR(pg_catalog.<=) $3"
		/* the time floor: no claimable job runs earlier */
		" AND COALESCE(j.not_before, j.created_at) OPERATOR(pg_catalog.>=) $8"
		" AND ($1 IS NULL OR j.scope OPERATOR(pg_catalog.=) $1)"
		" AND ($2 IS NULL OR j.operation OPERATOR(pg_catalog.=) ANY ($2))"
		" AND (last.state IS NULL"
		"   OR last.state OPERATOR(pg_catalog.<>) ALL ('{started,unknown}'::pg_catalog.text[]))"
		" AND (j.max_attempts IS NULL"
		"   OR COALESCE(last.tries, 0) OPERATOR(pg_catalog.<) j.max_attempts)"
		/* the claim's provider, or one of its providers ($10) */
		" AND ($4 IS NULL OR ch.provider OPERATOR(pg_catalog.=) $4)"
		" AND ($10 IS NULL OR ch.provider OPERATOR(pg_catalog.=) ANY ($10))"
		/* the floor, as a filter: an index condition on id would plan jobs_claim_order */
		" AND (j.id OPERATOR(pg_catalog.+) 0) OPERATOR(pg_catalog.>=) $6"
		/* providers this claim found at a limit */
		" AND ($7 IS NULL OR ch.provider OPERATOR(pg_catalog.<>) ALL ($7))"
		" ORDER BY COALESCE(j.not_before, j.created_at), j.id"
		" LIMIT $5"
		" FOR NO KEY UPDATE OF j SKIP LOCKED) c"
		" LIMIT $5",
		10, {TEXTOID, TEXTARRAYOID, TIMESTAMPTZOID, TEXTOID, INT4OID, INT8OID, TEXTARRAYOID,
		TIMESTAMPTZOID, INT2ARRAYOID, TEXTARRAYOID},
		SPI_OK_SELECT, false, false, true
	},
	/*
	 * What claim() returns for one attempt it began.  One attempt per run,
	 * by its primary key: a generic plan of "a.id = ANY ($1)" made while
	 * the tables were small (say, right after a TRUNCATE) joins them by
	 * hashing, reading both whole at every claim until autovacuum's next
	 * ANALYZE; a lookup by one key plans the same at any size.
	 */
	[STMT_CLAIMED] = {
		"claimed",
		"SELECT a.id, a.job_id, a.attempt_no, j.operation::pg_catalog.text,"
		" a.provider::pg_catalog.text, j.params, a.deadline, a.provider_key,"
		" false, a.provider OPERATOR(pg_catalog.<>) j.provider"
		" FROM jobguard.attempts a"
		" JOIN jobguard.jobs j ON j.id OPERATOR(pg_catalog.=) a.job_id"
		" WHERE a.id OPERATOR(pg_catalog.=) $1",
		1, {INT8OID},
		SPI_OK_SELECT, false
	},
	/*
	 * The claim floor (see claim_floor()): the oldest job not
	 * succeeded or cancelled that has no open attempt and attempts left
	 * (claimable but for the operations, provider and backoff a claim may
	 * name, which change without a commit or are the claim's own).  With
	 * none, the newest job's id: every job made runnable later lowers the
	 * floor when it commits.
	 */
	[STMT_CLAIM_FLOOR] = CLAIM_FLOOR_DEF(TRIES_1_2),
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
	/*
	 * The scope of the job with id $1, and the scope of the job of the
	 * attempt with id $1 (NULL where there is none): whether the id names a
	 * job or an attempt the caller may see.
	 */
	[STMT_ID_SCOPES] = {
		"id scopes",
		"SELECT (SELECT j.scope FROM jobguard.jobs j"
		"  WHERE j.id OPERATOR(pg_catalog.=) $1),"
		" (SELECT s.scope FROM jobguard.attempts a"
		"  JOIN jobguard.jobs s ON s.id OPERATOR(pg_catalog.=) a.job_id"
		"  WHERE a.id OPERATOR(pg_catalog.=) $1)",
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
	/*
	 * 1.3: a definition whose contract is the one in force (equal as
	 * jsonb) carries the certifications earned under it to its new version;
	 * any other makes them stale.  "In force" as the statement's snapshot
	 * saw it: a concurrent definition it waits for leaves the
	 * certifications its own version gave (a certification whose version
	 * moved on meanwhile is not carried: stale rather than trusted).
	 */
	[STMT_DEFINE_OPERATION] = {
		"define operation",
		"WITH old AS ("
		" SELECT o.contract_version, o.output_contract FROM jobguard.operations o"
		"  WHERE o.operation OPERATOR(pg_catalog.=) $1),"
		" def AS ("
		"INSERT INTO jobguard.operations AS o"
		" (operation, output_contract, contract_version, defined_at,"
		"  retry_backoff, retry_backoff_max)"
		" VALUES ($1, $2, pg_catalog.nextval('jobguard.contract_version_seq'),"
		"  pg_catalog.now(), $3, $4)"
		" ON CONFLICT (operation) DO UPDATE"
		" SET output_contract = EXCLUDED.output_contract,"
		"  contract_version = EXCLUDED.contract_version,"
		"  defined_at = EXCLUDED.defined_at,"
		"  retry_backoff = EXCLUDED.retry_backoff,"
		"  retry_backoff_max = EXCLUDED.retry_backoff_max"
		" RETURNING o.contract_version),"
		" carried AS ("
		" UPDATE jobguard.certifications AS c SET contract_version = def.contract_version"
		"  FROM def, old"
		"  WHERE c.operation OPERATOR(pg_catalog.=) $1"
		"  AND c.contract_version OPERATOR(pg_catalog.=) old.contract_version"
		"  AND old.output_contract OPERATOR(pg_catalog.=) $2"
		"  RETURNING 1)"
		" SELECT (SELECT pg_catalog.count(*) FROM carried)",
		4, {TEXTOID, JSONBOID, INTERVALOID, INTERVALOID},
		SPI_OK_SELECT, false
	},
	[STMT_CERTIFY_PROVIDER] = {
		"certify provider",
		"INSERT INTO jobguard.certifications AS c"
		" (operation, provider, evidence, certified_at, revoked_at, contract_version)"
		" VALUES ($1, $2, $3, pg_catalog.now(), NULL,"
		"  (SELECT o.contract_version FROM jobguard.operations o"
		"   WHERE o.operation OPERATOR(pg_catalog.=) $1))"
		" ON CONFLICT (operation, provider) DO UPDATE"
		" SET evidence = EXCLUDED.evidence,"
		"  certified_at = EXCLUDED.certified_at, revoked_at = NULL,"
		"  contract_version = EXCLUDED.contract_version",
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
	 * finish or cancel holds locked right now.  1.2's index of started
	 * attempts leads with the provider (attempts_started): the providers
	 * that have started attempts are walked one index descent each, and in
	 * each the overdue range read.
	 */
	[STMT_SWEEP_OVERDUE] = SWEEP_OVERDUE_DEF(
		"RECURSIVE providers(provider) AS ("
		" SELECT (SELECT s.provider::pg_catalog.text FROM jobguard.attempts s"
		"  WHERE s.state OPERATOR(pg_catalog.=) 'started' ORDER BY s.provider LIMIT 1)"
		" UNION ALL"
		" SELECT (SELECT s.provider::pg_catalog.text FROM jobguard.attempts s"
		"  WHERE s.state OPERATOR(pg_catalog.=) 'started'"
		"  AND s.provider OPERATOR(pg_catalog.>) p.provider ORDER BY s.provider LIMIT 1)"
		" FROM providers p WHERE p.provider IS NOT NULL), ",
		"SELECT o.id FROM providers p CROSS JOIN LATERAL ("
		"  SELECT o.id, o.deadline FROM jobguard.attempts o"
		"  WHERE o.provider OPERATOR(pg_catalog.=) p.provider"
		"  AND o.state OPERATOR(pg_catalog.=) 'started'"
		"  AND o.deadline OPERATOR(pg_catalog.<=) pg_catalog.now()"
		"  ORDER BY o.deadline LIMIT $1 FOR UPDATE SKIP LOCKED) o"
		" ORDER BY o.deadline LIMIT $1",
		", unknown_since = a.deadline"),
	/*
	 * One page of purge: the next $3 jobs after id $2 in id order, and the
	 * terminal ones among them deleted (their attempts go with them).
	 * Returns the page's last id, how many were deleted, and the page's
	 * newest creation time, which tells the caller when to stop.
	 */
	[STMT_PURGE_PAGE] = PURGE_PAGE_DEF(USED_1_2),
	/*
	 * The same counts from the stored states, in one pass over each table:
	 * what the gauges of metrics.c are recounted from.
	 */
	[STMT_STORED_STATE_COUNTS] = STORED_STATE_COUNTS_DEF(TRIES_1_2),
	/* One job's state from the stored states, with a fresh snapshot. */
	[STMT_STORED_JOB_STATE] = STORED_JOB_STATE_DEF(TRIES_1_2),
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
		SPI_OK_SELECT, true, true
	},
	/*
	 * Whether job $1's params and the request's $2 agree on the identity
	 * keys $3: each key absent from both, or present in both with equal
	 * values.  Params that are not both objects must be equal as a whole.
	 */
	[STMT_SAME_IDENTITY] = {
		"same identity",
		"SELECT CASE WHEN pg_catalog.jsonb_typeof(j.params) OPERATOR(pg_catalog.=) 'object'"
		"  AND pg_catalog.jsonb_typeof($2) OPERATOR(pg_catalog.=) 'object'"
		" THEN NOT EXISTS (SELECT 1 FROM pg_catalog.unnest($3) k"
		"  WHERE (j.params OPERATOR(pg_catalog.?) k) OPERATOR(pg_catalog.<>) ($2 OPERATOR(pg_catalog.?) k)"
		"  OR ((j.params OPERATOR(pg_catalog.?) k)"
		"   AND (j.params OPERATOR(pg_catalog.->) k) OPERATOR(pg_catalog.<>) ($2 OPERATOR(pg_catalog.->) k)))"
		" ELSE j.params OPERATOR(pg_catalog.=) $2 END"
		" FROM jobguard.jobs j WHERE j.id OPERATOR(pg_catalog.=) $1",
		3, {INT8OID, JSONBOID, TEXTARRAYOID},
		SPI_OK_SELECT, false
	},
	/*
	 * Replace job $1 if it failed (every allowed attempt used, none open)
	 * or was cancelled, and nothing took its result slot: it stops being
	 * the live job of its key, and its version moves on, so a late result
	 * of one of its attempts loses.  Under READ COMMITTED a concurrent
	 * finish that wins first makes this update nothing.
	 */
	[STMT_REPLACE_ENDED_JOB] = REPLACE_ENDED_JOB_DEF(USED_1_2),
	/* The job that follows replaced job (AFTER_1) under the same key. */
	[STMT_INSERT_NEXT_JOB] = {
		"insert next job",
		"INSERT INTO jobguard.jobs AS j"
		" (" SUBMIT_COLUMN_NAMES ", previous_job_id)"
		" VALUES (" SUBMIT_COLUMN_PARAMS ", " AFTER_1 ")"
		" ON CONFLICT (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL DO NOTHING"
		" RETURNING j.id",
		SUBMIT_COLUMN_COUNT + 1, {SUBMIT_COLUMN_TYPES, INT8OID},
		SPI_OK_INSERT_RETURNING, false
	},
	/* The operations with a retention, for purge() without a cut-off. */
	[STMT_RETENTIONS] = {
		"retentions",
		"SELECT p.operation, pg_catalog.now() OPERATOR(pg_catalog.-) " DURATION_SQL("p.retention")
		" FROM jobguard.policies p WHERE p.retention IS NOT NULL ORDER BY p.operation",
		0, {0},
		SPI_OK_SELECT, false
	},
	/*
	 * Set or replace a provider's policy (set_provider_policy); a policy
	 * with no value at all is removed (STMT_DROP_PROVIDER_POLICY).
	 */
	[STMT_SET_PROVIDER_POLICY] = {
		"set provider policy",
		"INSERT INTO jobguard.provider_policy AS p"
		" (provider, dedupes_for, max_in_flight, max_per_second, paused)"
		" VALUES ($1, $2, $3, $4, COALESCE($5, false))"
		" ON CONFLICT (provider) DO UPDATE"
		" SET dedupes_for = CASE WHEN $6 THEN p.dedupes_for ELSE EXCLUDED.dedupes_for END,"
		"  max_in_flight = CASE WHEN $6 THEN p.max_in_flight ELSE EXCLUDED.max_in_flight END,"
		"  max_per_second = CASE WHEN $6 THEN p.max_per_second ELSE EXCLUDED.max_per_second END,"
		"  paused = COALESCE($5, p.paused), updated_at = pg_catalog.now()",
		6, {TEXTOID, INTERVALOID, INT4OID, NUMERICOID, BOOLOID, BOOLOID},
		SPI_OK_INSERT, false
	},
	/* 1.3: a policy that holds nothing any more (no value, not paused) goes. */
	[STMT_DROP_PROVIDER_POLICY] = {
		"drop provider policy",
		"DELETE FROM jobguard.provider_policy p"
		" WHERE p.provider OPERATOR(pg_catalog.=) $1"
		" AND p.dedupes_for IS NULL AND p.max_in_flight IS NULL AND p.max_per_second IS NULL"
		" AND NOT p.paused",
		1, {TEXTOID},
		SPI_OK_DELETE, false
	},
	/* An attempt's provider key and its job's scope (provider_key()). */
	[STMT_PROVIDER_KEY] = {
		"provider key",
		"SELECT a.provider_key, j.scope FROM jobguard.attempts a"
		" JOIN jobguard.jobs j ON j.id OPERATOR(pg_catalog.=) a.job_id"
		" WHERE a.id OPERATOR(pg_catalog.=) $1",
		1, {INT8OID},
		SPI_OK_SELECT, true
	},
	/*
	 * An attempt for redrive_attempt(), with its job locked against
	 * begins, finishes and cancels (FOR NO KEY UPDATE, as a begin does)
	 * and itself locked (FOR UPDATE, as a finish, fail or cancel does),
	 * without waiting: NOWAIT raises 55P03 when another transaction holds
	 * either (STMT_REDRIVE_READ), SKIP LOCKED returns no row
	 * (STMT_REDRIVE_READ_SKIP, claim's).  Only an attempt of a job of
	 * scope $2 (NULL: any).  The window: the key's first use (the job's
	 * earliest attempt with this key) plus dedupes_for, less the margin
	 * (1 % of dedupes_for, at least a minute).
	 */
	[STMT_REDRIVE_READ] = REDRIVE_READ_DEF("NOWAIT"),
	[STMT_REDRIVE_READ_SKIP] = REDRIVE_READ_DEF("SKIP LOCKED"),
	/*
	 * The redrive's attempt: the next number, the same provider and
	 * provider key, the same tries (not counted again), reading the job's
	 * version now; the timeout given ($3) or the redriven attempt's own.
	 * Run after the redriven attempt was cancelled, in the same
	 * transaction, holding both locks.
	 */
	[STMT_REDRIVE_BEGIN] = {
		"redrive begin",
		"INSERT INTO jobguard.attempts AS n"
		" (job_id, attempt_no, provider, state, read_version, attempt_key,"
		"  started_at, deadline, worker, timeout, provider_key, tries)"
		" SELECT o.job_id, o.attempt_no OPERATOR(pg_catalog.+) 1, o.provider, 'started',"
		"  j.version, NULL, COALESCE($4, pg_catalog.now()),"
		"  COALESCE($4, pg_catalog.now()) OPERATOR(pg_catalog.+)"
		"   COALESCE($3, " DURATION_SQL("COALESCE(o.timeout, o.deadline OPERATOR(pg_catalog.-) o.started_at)") "),"
		"  $2, COALESCE($3, " DURATION_SQL("COALESCE(o.timeout, o.deadline OPERATOR(pg_catalog.-) o.started_at)") "),"
		"  o.provider_key, COALESCE(o.tries, o.attempt_no)"
		" FROM jobguard.attempts o"
		" JOIN jobguard.jobs j ON j.id OPERATOR(pg_catalog.=) o.job_id"
		" WHERE o.id OPERATOR(pg_catalog.=) $1"
		" RETURNING n.id",
		4, {INT8OID, TEXTOID, INTERVALOID, TIMESTAMPTZOID},
		SPI_OK_INSERT_RETURNING, false
	},
	/*
	 * The redrives claim() may hand out, oldest job first, at most $4:
	 * open attempts that are unknown (stored, or started past their
	 * deadline) and have been for at least their own timeout, whose
	 * provider deduplicates and whose key's window is still open, of open
	 * jobs of scope $1 (NULL: any), of an operation in $2 (NULL: any),
	 * against provider $3 (NULL: any).  The jobs are locked SKIP LOCKED,
	 * as claim's candidates: two claims never take one redrive, and
	 * neither waits.  Every claim runs it: it reads only the unknown
	 * attempts of providers that deduplicate and the overdue ones not yet
	 * swept, through partial indexes, never the attempts running.  The
	 * plan is fixed by its shape: those ids drive, and each attempt and
	 * its job are read by primary key (OFFSET 0).  Written as a filter
	 * (a.id = ANY (ARRAY(...))), a generic plan made while the tables
	 * were small read every attempt in job order at every claim (14 ms
	 * per claim after 2,700 jobs: a worker of one job a claim fell
	 * behind at 500 submits a second).
	 */
	[STMT_REDRIVE_CANDIDATES] = {
		"redrive candidates",
		"SELECT a.id FROM pg_catalog.unnest(ARRAY("
		/* stored unknown, of the providers that deduplicate (attempts_unknown) */
		"  SELECT u.id FROM jobguard.provider_policy d"
		"   JOIN jobguard.attempts u ON u.provider OPERATOR(pg_catalog.=) d.provider"
		"   AND u.state OPERATOR(pg_catalog.=) 'unknown'"
		"   WHERE d.dedupes_for IS NOT NULL"
		/* started past the deadline, not yet swept, of the same (attempts_started) */
		"  UNION ALL SELECT o.id FROM jobguard.provider_policy e"
		"   JOIN jobguard.attempts o ON o.provider OPERATOR(pg_catalog.=) e.provider"
		"   AND o.state OPERATOR(pg_catalog.=) 'started'"
		"   AND o.deadline OPERATOR(pg_catalog.<=) pg_catalog.now()"
		"   WHERE e.dedupes_for IS NOT NULL)) AS c(id)"
		" CROSS JOIN LATERAL (SELECT x.id, x.job_id, x.provider, x.state, x.deadline,"
		"  x.unknown_since, x.timeout, x.started_at, x.provider_key"
		"  FROM jobguard.attempts x WHERE x.id OPERATOR(pg_catalog.=) c.id OFFSET 0) a"
		" CROSS JOIN LATERAL (SELECT o.id, o.scope, o.operation, o.completed_by, o.cancelled_at"
		"  FROM jobguard.jobs o WHERE o.id OPERATOR(pg_catalog.=) a.job_id OFFSET 0) j"
		" JOIN jobguard.provider_policy p ON p.provider OPERATOR(pg_catalog.=) a.provider"
		" WHERE jobguard.attempt_state(a.state, a.deadline) OPERATOR(pg_catalog.=) 'unknown'"
		" AND j.completed_by IS NULL AND j.cancelled_at IS NULL"
		" AND ($1 IS NULL OR j.scope OPERATOR(pg_catalog.=) $1)"
		" AND ($2 IS NULL OR j.operation OPERATOR(pg_catalog.=) ANY ($2))"
		" AND ($3 IS NULL OR a.provider OPERATOR(pg_catalog.=) $3)"
		" AND ($5 IS NULL OR a.provider OPERATOR(pg_catalog.=) ANY ($5))"
		" AND p.dedupes_for IS NOT NULL"
		" AND (COALESCE(a.unknown_since, a.deadline) OPERATOR(pg_catalog.+)"
		"  " DURATION_SQL("COALESCE(a.timeout, a.deadline OPERATOR(pg_catalog.-) a.started_at)") ")"
		"  OPERATOR(pg_catalog.<=) pg_catalog.now()"
		" AND " REDRIVE_WINDOW_END_SQL " OPERATOR(pg_catalog.>) pg_catalog.now()"
		" ORDER BY a.job_id"
		" LIMIT $4"
		" FOR NO KEY UPDATE OF j SKIP LOCKED",
		5, {TEXTOID, TEXTARRAYOID, TEXTOID, INT4OID, TEXTARRAYOID},
		SPI_OK_SELECT, false
	},
	/*
	 * Unknown attempts for reconciler $2, longest unknown first, at most
	 * $4, unknown for at least $5, of scope $1 (NULL: any) and operation
	 * in $3 (NULL: any), without a live lease; each gets a lease of $6.
	 * The jobs are locked SKIP LOCKED (as claim's): two reconcilers never
	 * take one at once, and neither waits.  The lease is written only
	 * where none lives, even one committed after this statement's
	 * snapshot (ON CONFLICT ... WHERE sees the newest row): only the
	 * attempts leased here are returned.  Leases that ran out a day ago,
	 * of attempts no longer unknown, are removed on the way.
	 */
	[STMT_CLAIM_UNKNOWN] = {
		"claim unknown",
		"WITH c AS ("
		" SELECT a.id AS attempt_id, a.job_id, j.operation::pg_catalog.text AS operation,"
		"  a.provider::pg_catalog.text AS provider, a.provider_key, j.params,"
		"  COALESCE(a.unknown_since, a.deadline) AS unknown_since,"
		"  COALESCE(" REDRIVE_WINDOW_END_SQL " OPERATOR(pg_catalog.>) pg_catalog.now(), false) AS redrivable"
		" FROM jobguard.attempts a"
		" JOIN jobguard.jobs j ON j.id OPERATOR(pg_catalog.=) a.job_id"
		" LEFT JOIN jobguard.provider_policy p ON p.provider OPERATOR(pg_catalog.=) a.provider"
		" WHERE a.state OPERATOR(pg_catalog.=) ANY ('{started,unknown}'::pg_catalog.text[])"
		" AND jobguard.attempt_state(a.state, a.deadline) OPERATOR(pg_catalog.=) 'unknown'"
		" AND j.completed_by IS NULL AND j.cancelled_at IS NULL"
		" AND ($1 IS NULL OR j.scope OPERATOR(pg_catalog.=) $1)"
		" AND ($3 IS NULL OR j.operation OPERATOR(pg_catalog.=) ANY ($3))"
		" AND COALESCE(a.unknown_since, a.deadline) OPERATOR(pg_catalog.<=)"
		"  (pg_catalog.now() OPERATOR(pg_catalog.-) $5)"
		" AND NOT EXISTS (SELECT 1 FROM jobguard.reconcile_leases l"
		"  WHERE l.attempt_id OPERATOR(pg_catalog.=) a.id"
		"  AND l.leased_until OPERATOR(pg_catalog.>) pg_catalog.now())"
		" ORDER BY COALESCE(a.unknown_since, a.deadline), a.id"
		" LIMIT $4"
		" FOR NO KEY UPDATE OF j SKIP LOCKED),"
		" leased AS ("
		" INSERT INTO jobguard.reconcile_leases AS l (attempt_id, worker, leased_until)"
		" SELECT c.attempt_id, $2, pg_catalog.now() OPERATOR(pg_catalog.+) $6 FROM c"
		" ON CONFLICT (attempt_id) DO UPDATE"
		"  SET worker = EXCLUDED.worker, leased_until = EXCLUDED.leased_until"
		"  WHERE l.leased_until OPERATOR(pg_catalog.<=) pg_catalog.now()"
		" RETURNING l.attempt_id),"
		" gone AS ("
		" DELETE FROM jobguard.reconcile_leases AS g"
		" WHERE g.attempt_id OPERATOR(pg_catalog.=) ANY (ARRAY("
		"  SELECT o.attempt_id FROM jobguard.reconcile_leases o"
		"  WHERE o.leased_until OPERATOR(pg_catalog.<)"
		"   (pg_catalog.now() OPERATOR(pg_catalog.-) '1 day'::pg_catalog.interval)"
		"  AND NOT EXISTS (SELECT 1 FROM jobguard.attempts x"
		"   WHERE x.id OPERATOR(pg_catalog.=) o.attempt_id"
		"   AND x.state OPERATOR(pg_catalog.=) ANY ('{started,unknown}'::pg_catalog.text[]))"
		"  LIMIT 100)))"
		" SELECT c.attempt_id, c.job_id, c.operation, c.provider, c.provider_key, c.params,"
		"  c.unknown_since, c.redrivable"
		" FROM c JOIN leased ON leased.attempt_id OPERATOR(pg_catalog.=) c.attempt_id"
		" ORDER BY c.unknown_since, c.attempt_id",
		6, {TEXTOID, TEXTOID, TEXTARRAYOID, INT4OID, INTERVALOID, INTERVALOID},
		SPI_OK_SELECT, false
	},
	/*
	 * The blocked jobs (unknown, not redrivable): how many, and since when
	 * the oldest is unknown (NULL: none).  The rows of jobguard.blocked_jobs
	 * that are not redrivable, read as that view reads them but with the
	 * window of REDRIVE_WINDOW_END_SQL, whose dedupes_for cannot overflow:
	 * a value stored too long must not break stats() and the sweeper.
	 */
	[STMT_BLOCKED_COUNTS] = {
		"blocked counts",
		"SELECT pg_catalog.count(*), pg_catalog.min(COALESCE(a.unknown_since, a.deadline))"
		" FROM jobguard.attempts a"
		" CROSS JOIN LATERAL (SELECT o.id, o.scope, o.completed_by, o.cancelled_at"
		"  FROM jobguard.jobs o WHERE o.id OPERATOR(pg_catalog.=) a.job_id OFFSET 0) j"
		" LEFT JOIN jobguard.provider_policy p ON p.provider OPERATOR(pg_catalog.=) a.provider"
		" WHERE a.state OPERATOR(pg_catalog.=) ANY ('{started,unknown}'::pg_catalog.text[])"
		" AND jobguard.attempt_state(a.state, a.deadline) OPERATOR(pg_catalog.=) 'unknown'"
		" AND j.completed_by IS NULL AND j.cancelled_at IS NULL"
		" AND jobguard.scope_visible(j.scope)"
		" AND NOT COALESCE(" REDRIVE_WINDOW_END_SQL " OPERATOR(pg_catalog.>) pg_catalog.now(), false)",
		0, {0},
		SPI_OK_SELECT, false
	},
	/* Every violated invariant, with its job's scope (see jobguard.invariant_violations() in jobguard--1.0--1.1.sql). */
	[STMT_INVARIANT_VIOLATIONS] = {
		"invariant violations",
		"SELECT v.invariant, v.job_id, v.attempt_id, v.detail, v.scope"
		" FROM jobguard.invariant_violations() v"
		/* a grant of a dropped role: a restore would give it to another role */
		" UNION ALL"
		" SELECT 'a grant names an existing role', NULL::pg_catalog.int8, NULL::pg_catalog.int8,"
		"  pg_catalog.format('the %s grant of role OID %s, which was dropped', g.kind,"
		"   g.role::pg_catalog.oid), g.scope"
		" FROM jobguard.grants g"
		" WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r"
		"  WHERE r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid)",
		0, {0},
		SPI_OK_SELECT, true, true
	},
	/*
	 * A submit with a schedule (run_at AFTER_1 into not_before, priority AFTER_2):
	 * STMT_INSERT_JOB with the 1.2 columns.  A submit without one uses the
	 * statements above, which name no 1.2 column (a 1.1 database).
	 */
	[STMT_INSERT_JOB_AT] = {
		"insert job at",
		"INSERT INTO jobguard.jobs AS j"
		" (" SUBMIT_COLUMN_NAMES ", not_before, priority)"
		" VALUES (" SUBMIT_COLUMN_PARAMS ", " AFTER_1 ", " AFTER_2 ")"
		" ON CONFLICT (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL DO NOTHING"
		" RETURNING j.id",
		SUBMIT_COLUMN_COUNT + 2, {SUBMIT_COLUMN_TYPES, TIMESTAMPTZOID, INT2OID},
		SPI_OK_INSERT_RETURNING, false
	},
	/* STMT_INSERT_JOBS with run_ats AFTER_2 and priorities AFTER_3 */
	[STMT_INSERT_JOBS_AT] = {
		"insert jobs at",
		"INSERT INTO jobguard.jobs AS j"
		" (" SUBMIT_COLUMN_NAMES ", not_before, priority)"
		" SELECT " INSERT_JOBS_SELECT ", u.ra, COALESCE(u.pri, 0)"
		" FROM ROWS FROM (" INSERT_JOBS_UNNEST "pg_catalog.unnest(" AFTER_1 "),"
		"  pg_catalog.unnest(" AFTER_2 "), pg_catalog.unnest(" AFTER_3 "))"
		"  WITH ORDINALITY AS u(" INSERT_JOBS_ALIASES "wanted, ra, pri, n)"
		" WHERE u.wanted"
		" ORDER BY u.n"
		" ON CONFLICT (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL DO NOTHING"
		" RETURNING j.owner_id::pg_catalog.text, j.idempotency_key::pg_catalog.text, j.id",
		SUBMIT_COLUMN_COUNT + 3, {INSERT_JOBS_TYPES, BOOLARRAYOID, TIMESTAMPTZARRAYOID,
		INT2ARRAYOID},
		SPI_OK_INSERT_RETURNING, false
	},
	/* STMT_INSERT_NEXT_JOB with run_at AFTER_2 and priority AFTER_3 */
	[STMT_INSERT_NEXT_JOB_AT] = {
		"insert next job at",
		"INSERT INTO jobguard.jobs AS j"
		" (" SUBMIT_COLUMN_NAMES ", previous_job_id, not_before, priority)"
		" VALUES (" SUBMIT_COLUMN_PARAMS ", " AFTER_1 ", " AFTER_2 ", " AFTER_3 ")"
		" ON CONFLICT (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL DO NOTHING"
		" RETURNING j.id",
		SUBMIT_COLUMN_COUNT + 3, {SUBMIT_COLUMN_TYPES, INT8OID, TIMESTAMPTZOID, INT2OID},
		SPI_OK_INSERT_RETURNING, false
	},
	/*
	 * reschedule(): a new run time $2 (replacing a backoff's not_before)
	 * and priority $3 of job $1, the caller holding it locked; NULL leaves
	 * that part as it is.
	 */
	[STMT_RESCHEDULE] = {
		"reschedule",
		"UPDATE jobguard.jobs AS j"
		" SET not_before = COALESCE($2, j.not_before), priority = COALESCE($3, j.priority)"
		" WHERE j.id OPERATOR(pg_catalog.=) $1",
		3, {INT8OID, TIMESTAMPTZOID, INT2OID},
		SPI_OK_UPDATE, false
	},
	/*
	 * retry_job(): failed job $1 (locked by the caller) gets $2 more
	 * attempts and may run at once; the retry is recorded in its retries,
	 * with the reason $3 and the role $4 that asked.
	 */
	[STMT_RETRY_JOB] = {
		"retry job",
		"UPDATE jobguard.jobs AS j"
		" SET max_attempts = j.max_attempts OPERATOR(pg_catalog.+) $2, not_before = NULL,"
		" retries = COALESCE(j.retries, '[]'::pg_catalog.jsonb) OPERATOR(pg_catalog.||)"
		"  pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object("
		"   'at', pg_catalog.now(), 'by', $4, 'extra_attempts', $2,"
		"   'max_attempts_before', j.max_attempts, 'reason', $3))"
		" WHERE j.id OPERATOR(pg_catalog.=) $1 AND j.max_attempts IS NOT NULL",
		4, {INT8OID, INT4OID, TEXTOID, TEXTOID},
		SPI_OK_UPDATE, false
	},
	/* The providers that have a limit or are paused (limits.c caches them). */
	[STMT_LIMITED_PROVIDERS] = {
		"limited providers",
		"SELECT p.provider, p.max_in_flight, " PER_SECOND_SQL ", p.paused"
		" FROM jobguard.provider_policy p"
		" WHERE p.max_in_flight IS NOT NULL OR p.max_per_second IS NOT NULL OR p.paused",
		0, {0},
		SPI_OK_SELECT, false
	},
	/*
	 * Whether any provider deduplicates (dedupes_for): only then can an
	 * attempt be redriven, and claim looks for redrives (limits.c keeps
	 * the answer with the limits; 1.3's trigger provider_policy_changed
	 * watches dedupes_for).  1.3 only: a 1.2 database always looks.
	 */
	[STMT_ANY_DEDUPES] = {
		"any dedupes",
		"SELECT EXISTS (SELECT FROM jobguard.provider_policy p"
		" WHERE p.dedupes_for IS NOT NULL)",
		0, {0},
		SPI_OK_SELECT, false
	},
	/*
	 * A provider's limits and token bucket, its row locked until the end of
	 * the transaction: every start against it is decided under this lock,
	 * one at a time (limits.c).  The clock is read after the lock.
	 */
	[STMT_LOCK_POLICY] = {
		"lock policy",
		"SELECT p.max_in_flight, " PER_SECOND_SQL ", p.tokens, p.tokens_at,"
		" pg_catalog.clock_timestamp()"
		" FROM jobguard.provider_policy p"
		" WHERE p.provider OPERATOR(pg_catalog.=) $1"
		" AND (p.max_in_flight IS NOT NULL OR p.max_per_second IS NOT NULL)"
		" FOR NO KEY UPDATE",
		1, {TEXTOID},
		SPI_OK_SELECT, false
	},
	/* The same, for claim: a row another start holds is passed over. */
	[STMT_LOCK_POLICY_SKIP] = {
		"lock policy skip",
		"SELECT p.max_in_flight, " PER_SECOND_SQL ", p.tokens, p.tokens_at,"
		" pg_catalog.clock_timestamp()"
		" FROM jobguard.provider_policy p"
		" WHERE p.provider OPERATOR(pg_catalog.=) $1"
		" AND (p.max_in_flight IS NOT NULL OR p.max_per_second IS NOT NULL)"
		" FOR NO KEY UPDATE SKIP LOCKED",
		1, {TEXTOID},
		SPI_OK_SELECT, false
	},
	/*
	 * A start against provider $1 (its row locked): the bucket holds $2
	 * tokens at $3.  Written at every start against a rate, so that a
	 * REPEATABLE READ start whose snapshot misses a later one fails to lock
	 * the row (could not serialize) instead of drawing from a stale bucket.
	 */
	[STMT_RECORD_START] = {
		"record start",
		"UPDATE jobguard.provider_policy AS p SET tokens = $2, tokens_at = $3"
		" WHERE p.provider OPERATOR(pg_catalog.=) $1",
		3, {TEXTOID, FLOAT8OID, TIMESTAMPTZOID},
		SPI_OK_UPDATE, false
	},
	/* A start claim passed over for provider $1's limit (its row locked). */
	[STMT_COUNT_THROTTLED] = {
		"count throttled",
		"UPDATE jobguard.provider_policy AS p SET throttled = p.throttled OPERATOR(pg_catalog.+) 1"
		" WHERE p.provider OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID},
		SPI_OK_UPDATE, false
	},
	/* Per provider with a limit: open attempts, starts throttled (stats()). */
	[STMT_PROVIDER_FLOW] = {
		"provider flow",
		"SELECT p.provider, (SELECT pg_catalog.count(*) FROM jobguard.attempts a"
		"  WHERE a.provider OPERATOR(pg_catalog.=) p.provider"
		"  AND a.state OPERATOR(pg_catalog.=) ANY ('{started,unknown}'::pg_catalog.text[])), p.throttled"
		" FROM jobguard.provider_policy p"
		" WHERE p.max_in_flight IS NOT NULL OR p.max_per_second IS NOT NULL"
		" ORDER BY p.provider",
		0, {0},
		SPI_OK_SELECT, true
	},
	/*
	 * STMT_CLAIM_CANDIDATES in a database whose objects are still 1.1's
	 * (no jobs.priority): 1.1's order, oldest first ($7 unused: no limits
	 * there).
	 */
	[STMT_CLAIM_CANDIDATES_1_1] = {
		"claim candidates 1.1",
		/* the claim's provider where given (it takes only jobs it may run) */
		"SELECT j.id, COALESCE($4, j.provider::pg_catalog.text) FROM jobguard.jobs j"
		" LEFT JOIN LATERAL ("
		"  SELECT l.attempt_no, l.state FROM jobguard.attempts l"
		"   WHERE l.job_id OPERATOR(pg_catalog.=) j.id"
		"   ORDER BY l.attempt_no DESC LIMIT 1) AS last ON true"
		" WHERE j.completed_by IS NULL AND j.cancelled_at IS NULL"
		" AND ($1 IS NULL OR j.scope OPERATOR(pg_catalog.=) $1)"
		" AND ($2 IS NULL OR j.operation OPERATOR(pg_catalog.=) ANY ($2))"
		" AND (j.not_before IS NULL OR j.not_before OPERATOR(pg_catalog.<=) $3)"
		" AND (last.state IS NULL"
		"   OR last.state OPERATOR(pg_catalog.<>) ALL ('{started,unknown}'::pg_catalog.text[]))"
		" AND (j.max_attempts IS NULL"
		"   OR COALESCE(last.attempt_no, 0) OPERATOR(pg_catalog.<) j.max_attempts)"
		" AND ($4 IS NULL OR j.provider OPERATOR(pg_catalog.=) $4"
		"   OR (last.state OPERATOR(pg_catalog.=) ANY ('{cancelled,failed}'::pg_catalog.text[])"
		"    AND EXISTS (SELECT 1 FROM jobguard.certifications c"
		"     WHERE c.operation OPERATOR(pg_catalog.=) j.operation"
		"     AND c.provider OPERATOR(pg_catalog.=) $4"
		"     AND c.revoked_at IS NULL)))"
		" AND j.id OPERATOR(pg_catalog.>=) $6"
		" AND ($7 IS NULL OR true) AND ($8 IS NULL OR true) AND ($9 IS NULL OR true)"
		" ORDER BY j.id"
		" LIMIT $5"
		" FOR NO KEY UPDATE OF j SKIP LOCKED",
		9, {TEXTOID, TEXTARRAYOID, TIMESTAMPTZOID, TEXTOID, INT4OID, INT8OID, TEXTARRAYOID,
		TIMESTAMPTZOID, INT2ARRAYOID},
		SPI_OK_SELECT, false
	},
	/* STMT_MATCH_JOB in a 1.1 database (no jobs.retries) */
	[STMT_MATCH_JOB_1_1] = {
		"match job 1.1",
		"SELECT j.id" SUBMIT_COLUMNS(COMPARE_1_1_, ) MATCH_JOB_FROM,
		SUBMIT_COLUMN_COUNT, {SUBMIT_COLUMN_TYPES},
		SPI_OK_SELECT, false
	},
	/*
	 * The time floor (claim_time_floor()) and the levels (claim_levels()):
	 * per priority of jobs_run_order (walked as STMT_CLAIM_CANDIDATES walks
	 * it) that has jobs not succeeded or cancelled with no open attempt and
	 * attempts left, the earliest run time among them.
	 */
	[STMT_CLAIM_TIME_FLOOR] = {
		"claim time floor",
		"WITH RECURSIVE levels(priority) AS ("
		" SELECT (SELECT p.priority FROM jobguard.jobs p"
		"  WHERE p.completed_by IS NULL AND p.cancelled_at IS NULL"
		"  ORDER BY p.priority LIMIT 1)"
		" UNION ALL"
		" SELECT (SELECT p.priority FROM jobguard.jobs p"
		"  WHERE p.completed_by IS NULL AND p.cancelled_at IS NULL"
		"  AND p.priority OPERATOR(pg_catalog.>) l.priority"
		"  ORDER BY p.priority LIMIT 1)"
		" FROM levels l WHERE l.priority IS NOT NULL)"
		" SELECT lv.priority, f.t FROM levels lv CROSS JOIN LATERAL ("
		"SELECT COALESCE(j.not_before, j.created_at) AS t FROM jobguard.jobs j"
		" LEFT JOIN LATERAL ("
		"  SELECT l.attempt_no, l.state, " TRIES_1_2("l") " AS tries FROM jobguard.attempts l"
		"   WHERE l.job_id OPERATOR(pg_catalog.=) j.id"
		"   ORDER BY l.attempt_no DESC LIMIT 1) AS last ON true"
		" WHERE j.priority OPERATOR(pg_catalog.=) lv.priority"
		" AND j.completed_by IS NULL AND j.cancelled_at IS NULL"
		" AND (last.state IS NULL"
		"   OR last.state OPERATOR(pg_catalog.<>) ALL ('{started,unknown}'::pg_catalog.text[]))"
		" AND (j.max_attempts IS NULL"
		"   OR COALESCE(last.tries, 0) OPERATOR(pg_catalog.<) j.max_attempts)"
		" ORDER BY COALESCE(j.not_before, j.created_at) LIMIT 1) f",
		0, {0},
		SPI_OK_SELECT, false, false, true
	},
	/*
	 * The contract version of provider $2's live certification for
	 * operation $1, and the operation's current one (a refusal's DETAIL).
	 */
	[STMT_CERTIFICATION_VERSIONS] = {
		"certification versions",
		"SELECT c.contract_version, (SELECT o.contract_version FROM jobguard.operations o"
		"  WHERE o.operation OPERATOR(pg_catalog.=) c.operation)"
		" FROM jobguard.certifications c"
		" WHERE c.operation OPERATOR(pg_catalog.=) $1"
		" AND c.provider OPERATOR(pg_catalog.=) $2"
		" AND c.revoked_at IS NULL",
		2, {TEXTOID, TEXTOID},
		SPI_OK_SELECT, false
	},
	/* Set or replace operation $1's failover route (set_failover). */
	[STMT_SET_FAILOVER] = {
		"set failover",
		"INSERT INTO jobguard.failover AS f (operation, providers, after_failures)"
		" VALUES ($1, $2, $3)"
		" ON CONFLICT (operation) DO UPDATE"
		" SET providers = EXCLUDED.providers, after_failures = EXCLUDED.after_failures,"
		"  updated_at = pg_catalog.now()",
		3, {TEXTOID, TEXTARRAYOID, INT4OID},
		SPI_OK_INSERT, false
	},
	[STMT_DROP_FAILOVER] = {
		"drop failover",
		"DELETE FROM jobguard.failover f WHERE f.operation OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID},
		SPI_OK_DELETE, false
	},
};

/*
 * The 1.1 forms of the statements that name a 1.2 column, run while the
 * database still holds 1.1's objects (schema_is_1_2() false): each says
 * and does exactly what it did in 1.1.  Every other statement is the same
 * at both levels (sql is NULL here).
 */
static const StatementDef statements_1_1[STMT_COUNT] = {
	[STMT_BEGIN_ATTEMPT] = {
		"begin attempt",
		"INSERT INTO jobguard.attempts AS a"
		" (job_id, attempt_no, provider, state, read_version, attempt_key,"
		"  started_at, deadline, worker, timeout)"
		" SELECT j.id, COALESCE(last.attempt_no, 0) OPERATOR(pg_catalog.+) 1,"
		"  COALESCE($2, j.provider), 'started', j.version, $3,"
		"  COALESCE($7, pg_catalog.now()),"
		"  COALESCE($7, pg_catalog.now()) OPERATOR(pg_catalog.+) $4, $6, $4"
		" FROM jobguard.jobs j"
		" LEFT JOIN LATERAL ("
		"  SELECT l.attempt_no, l.state FROM jobguard.attempts l"
		"   WHERE l.job_id OPERATOR(pg_catalog.=) j.id"
		"   ORDER BY l.attempt_no DESC LIMIT 1) AS last ON true"
		" WHERE j.id OPERATOR(pg_catalog.=) $1"
		" AND ($5 IS NULL OR j.scope OPERATOR(pg_catalog.=) $5)"
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
		7, {INT8OID, TEXTOID, TEXTOID, INTERVALOID, TEXTOID, TEXTOID, TIMESTAMPTZOID},
		SPI_OK_INSERT_RETURNING, false
	},
	[STMT_CLAIMED] = {
		"claimed",
		"SELECT a.id, a.job_id, a.attempt_no, j.operation::pg_catalog.text,"
		" a.provider::pg_catalog.text, j.params, a.deadline, NULL::pg_catalog.text,"
		" false, a.provider OPERATOR(pg_catalog.<>) j.provider"
		" FROM jobguard.attempts a"
		" JOIN jobguard.jobs j ON j.id OPERATOR(pg_catalog.=) a.job_id"
		" WHERE a.id OPERATOR(pg_catalog.=) $1",
		1, {INT8OID},
		SPI_OK_SELECT, false
	},
	[STMT_CLAIM_FLOOR] = CLAIM_FLOOR_DEF(TRIES_1_1),
	[STMT_PURGE_PAGE] = PURGE_PAGE_DEF(USED_1_1),
	[STMT_STORED_STATE_COUNTS] = STORED_STATE_COUNTS_DEF(TRIES_1_1),
	[STMT_STORED_JOB_STATE] = STORED_JOB_STATE_DEF(TRIES_1_1),
	[STMT_REPLACE_ENDED_JOB] = REPLACE_ENDED_JOB_DEF(USED_1_1),
	[STMT_LAST_ATTEMPT] = LAST_ATTEMPT_DEF(TRIES_1_1),
	[STMT_MARK_UNKNOWN] = {
		"mark unknown",
		"UPDATE jobguard.attempts AS a SET state = 'unknown'"
		" WHERE a.id OPERATOR(pg_catalog.=) $1",
		1, {INT8OID},
		SPI_OK_UPDATE, false
	},
	/* by deadline, through 1.0's attempts_started_deadline */
	[STMT_SWEEP_OVERDUE] = SWEEP_OVERDUE_DEF("",
		"SELECT o.id FROM jobguard.attempts o"
		" WHERE o.state OPERATOR(pg_catalog.=) 'started'"
		" AND o.deadline OPERATOR(pg_catalog.<=) pg_catalog.now()"
		" ORDER BY o.deadline LIMIT $1 FOR UPDATE SKIP LOCKED", ""),
};

/*
 * The 1.2 forms of the statements that name a 1.3 column, run while the
 * database still holds 1.2's objects (schema_is_1_3() false): each says
 * and does exactly what it did in 1.2 (no routes, no contract version on
 * certifications, no pause).  In a 1.1 database a statement with a 1.1
 * form runs that one; the others run these.
 */
static const StatementDef statements_1_2[STMT_COUNT] = {
	[STMT_BEGIN_ATTEMPT] = BEGIN_ATTEMPT_DEF(CERT_LIVE_1_2),
	[STMT_PROVIDER_CERTIFIED] = PROVIDER_CERTIFIED_DEF(CERT_LIVE_1_2),
	/* 1.2's: no routes, certifications without a contract version */
	[STMT_CLAIM_CANDIDATES] = {
		"claim candidates",
		/* the priorities present among the jobs not succeeded or cancelled */
		"WITH RECURSIVE levels(priority) AS ("
		" SELECT (SELECT p.priority FROM jobguard.jobs p"
		"  WHERE p.completed_by IS NULL AND p.cancelled_at IS NULL"
		"  ORDER BY p.priority LIMIT 1)"
		" UNION ALL"
		" SELECT (SELECT p.priority FROM jobguard.jobs p"
		"  WHERE p.completed_by IS NULL AND p.cancelled_at IS NULL"
		"  AND p.priority OPERATOR(pg_catalog.>) l.priority"
		"  ORDER BY p.priority LIMIT 1)"
		" FROM levels l WHERE l.priority IS NOT NULL)"
		/* in each, the jobs already due, by run time then id */
		" SELECT c.id, c.provider FROM ("
		/* the priorities known to have claimable jobs ($9), else the walk */
		"  SELECT k.priority FROM pg_catalog.unnest($9) AS k(priority) WHERE $9 IS NOT NULL"
		"  UNION ALL SELECT l.priority FROM levels l WHERE $9 IS NULL) lv"
		" CROSS JOIN LATERAL ("
		/* the claim's provider where given (it takes only jobs it may run) */
		"SELECT j.id, COALESCE($4, j.provider::pg_catalog.text) AS provider FROM jobguard.jobs j"
		" LEFT JOIN LATERAL ("
		"  SELECT l.attempt_no, l.state, " TRIES_1_2("l") " AS tries FROM jobguard.attempts l"
		"   WHERE l.job_id OPERATOR(pg_catalog.=) j.id"
		"   ORDER BY l.attempt_no DESC LIMIT 1) AS last ON true"
		" WHERE j.priority OPERATOR(pg_catalog.=) lv.priority"
		" AND j.completed_by IS NULL AND j.cancelled_at IS NULL"
		" AND COALESCE(j.not_before, j.created_at) OPERATOR(pg_catalog.<=) $3"
		/* the time floor: no claimable job runs earlier */
		" AND COALESCE(j.not_before, j.created_at) OPERATOR(pg_catalog.>=) $8"
		" AND ($1 IS NULL OR j.scope OPERATOR(pg_catalog.=) $1)"
		" AND ($2 IS NULL OR j.operation OPERATOR(pg_catalog.=) ANY ($2))"
		" AND (last.state IS NULL"
		"   OR last.state OPERATOR(pg_catalog.<>) ALL ('{started,unknown}'::pg_catalog.text[]))"
		" AND (j.max_attempts IS NULL"
		"   OR COALESCE(last.tries, 0) OPERATOR(pg_catalog.<) j.max_attempts)"
		" AND ($4 IS NULL OR j.provider OPERATOR(pg_catalog.=) $4"
		"   OR (last.state OPERATOR(pg_catalog.=) ANY ('{cancelled,failed}'::pg_catalog.text[])"
		"    AND EXISTS (SELECT 1 FROM jobguard.certifications c"
		"     WHERE c.operation OPERATOR(pg_catalog.=) j.operation"
		"     AND c.provider OPERATOR(pg_catalog.=) $4"
		"     AND c.revoked_at IS NULL)))"
		/* the floor, as a filter: an index condition on id would plan jobs_claim_order */
		" AND (j.id OPERATOR(pg_catalog.+) 0) OPERATOR(pg_catalog.>=) $6"
		/* providers this claim found at a limit */
		" AND ($7 IS NULL OR j.provider OPERATOR(pg_catalog.<>) ALL ($7))"
		" ORDER BY COALESCE(j.not_before, j.created_at), j.id"
		" LIMIT $5"
		" FOR NO KEY UPDATE OF j SKIP LOCKED) c"
		" LIMIT $5",
		9, {TEXTOID, TEXTARRAYOID, TIMESTAMPTZOID, TEXTOID, INT4OID, INT8OID, TEXTARRAYOID,
		TIMESTAMPTZOID, INT2ARRAYOID},
		SPI_OK_SELECT, false, false, true
	},
	[STMT_DEFINE_OPERATION] = {
		"define operation",
		"INSERT INTO jobguard.operations AS o"
		" (operation, output_contract, contract_version, defined_at,"
		"  retry_backoff, retry_backoff_max)"
		" VALUES ($1, $2, pg_catalog.nextval('jobguard.contract_version_seq'),"
		"  pg_catalog.now(), $3, $4)"
		" ON CONFLICT (operation) DO UPDATE"
		" SET output_contract = EXCLUDED.output_contract,"
		"  contract_version = EXCLUDED.contract_version,"
		"  defined_at = EXCLUDED.defined_at,"
		"  retry_backoff = EXCLUDED.retry_backoff,"
		"  retry_backoff_max = EXCLUDED.retry_backoff_max",
		4, {TEXTOID, JSONBOID, INTERVALOID, INTERVALOID},
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
	[STMT_SET_PROVIDER_POLICY] = {
		"set provider policy",
		"INSERT INTO jobguard.provider_policy AS p"
		" (provider, dedupes_for, max_in_flight, max_per_second)"
		" VALUES ($1, $2, $3, $4)"
		" ON CONFLICT (provider) DO UPDATE"
		" SET dedupes_for = EXCLUDED.dedupes_for, max_in_flight = EXCLUDED.max_in_flight,"
		"  max_per_second = EXCLUDED.max_per_second, updated_at = pg_catalog.now()",
		4, {TEXTOID, INTERVALOID, INT4OID, NUMERICOID},
		SPI_OK_INSERT, false
	},
	[STMT_DROP_PROVIDER_POLICY] = {
		"drop provider policy",
		"DELETE FROM jobguard.provider_policy p"
		" WHERE p.provider OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID},
		SPI_OK_DELETE, false
	},
	[STMT_LIMITED_PROVIDERS] = {
		"limited providers",
		"SELECT p.provider, p.max_in_flight, " PER_SECOND_SQL ", false"
		" FROM jobguard.provider_policy p"
		" WHERE p.max_in_flight IS NOT NULL OR p.max_per_second IS NOT NULL",
		0, {0},
		SPI_OK_SELECT, false
	},
};

/*
 * Plans prepared in this backend, kept for its lifetime: [0] of
 * statements[], [1] of statements_1_1[], [2] of statements_1_2[].
 */
static SPIPlanPtr prepared_plans[3][STMT_COUNT];

/*
 * statement_level: which form of a statement this call runs: 1 (the 1.1
 * form) when it has one and the database is still on 1.1, else 2 (the 1.2
 * form) when it has one and the database is not yet on 1.3, else 0.
 */
static int
statement_level(StatementId id)
{
	if (statements_1_1[id].sql != NULL && !schema_is_1_2())
		return 1;
	if (statements_1_2[id].sql != NULL && !schema_is_1_3())
		return 2;
	return 0;
}

/* statement_def: the form of a statement at a level. */
static const StatementDef *
statement_def(StatementId id, int level)
{
	return level == 1 ? &statements_1_1[id] : level == 2 ? &statements_1_2[id] : &statements[id];
}

/*
 * prepared_plan: the kept plan of a statement, prepared on first use.  The
 * plan cache re-plans it by itself when a table it uses changes (even a
 * DROP and CREATE EXTENSION), so it is never prepared twice.
 */
static SPIPlanPtr
prepared_plan(StatementId id, int level)
{
	if (prepared_plans[level][id] == NULL)
	{
		const StatementDef *def = statement_def(id, level);
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
		prepared_plans[level][id] = plan;
	}
	return prepared_plans[level][id];
}

/*
 * The generation (CachedPlanSource.generation) of the plan that
 * plan_for_index_lookups() made of each statement, 0 before it made one.
 */
static int	planned_generation[3][STMT_COUNT];

/*
 * plan_for_index_lookups: make sure the plan cache holds a plan of the
 * statement made as index lookups joined by nested loops and without JIT,
 * planning it now if it needs (re)planning; sql_run() then runs that plan.
 *
 * Why: the plan cache plans a statement once, and again after an ANALYZE
 * of its tables, for the tables' sizes then.  Made while a table held a
 * page or two (a new installation, right after a TRUNCATE), a plan reads
 * it whole or merge-joins through a whole index, and keeps doing so as the
 * table grows until autovacuum's next ANALYZE; every statement that reads
 * rows by key is better served by index lookups at any size.  And JIT
 * never pays for a few rows, though an estimate can pass jit_above_cost (a
 * partial index expected to be read whole, cut short by LIMIT): compiling
 * then costs ~7 ms at every run, twenty times the statement.
 *
 * Only the planning sees these settings, not the statement's run (a user's
 * trigger firing in it plans as the user's settings say); and a plan still
 * valid is not looked at again, so a run costs what it did.  Fetching the
 * plan takes the statement's locks, so invalidations arrive now rather than
 * in the run.  Should one arrive there anyway (between the look and the
 * run), the run re-plans with the session's settings: the next call sees a
 * plan it did not make and prepares the statement afresh.
 */
static void
plan_for_index_lookups(StatementId id, int level)
{
	static const char *const off[] = {"enable_seqscan", "enable_hashjoin",
	"enable_mergejoin", "jit"};
	static const char *const unordered[] = {"enable_sort", "enable_bitmapscan"};
	CachedPlanSource *source = linitial(SPI_plan_get_plan_sources(prepared_plan(id, level)));
	CachedPlan *cplan;
	int			guc_level;

	if (source->gplan != NULL && source->gplan->is_valid)
	{
		if (source->is_valid && source->generation == planned_generation[level][id])
			return;				/* ours, and still good */
		if (source->generation != planned_generation[level][id])
		{
			/* made in a run, with the session's settings: start afresh */
			SPI_freeplan(prepared_plans[level][id]);
			prepared_plans[level][id] = NULL;
			source = linitial(SPI_plan_get_plan_sources(prepared_plan(id, level)));
		}
	}
	guc_level = NewGUCNestLevel();
	for (int i = 0; i < (int) lengthof(off); i++)
		(void) set_config_option(off[i], "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
	/*
	 * A statement taking the first rows in an index's order: a generic
	 * plan's estimates (few rows pass the filters) would sort a bitmap
	 * scan's rows instead, reading every runnable job for one.
	 */
	if (statement_def(id, level)->index_order)
		for (int i = 0; i < (int) lengthof(unordered); i++)
			(void) set_config_option(unordered[i], "off", PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_LOCAL, true, 0, false);
	cplan = SPI_plan_get_cached_plan(prepared_plans[level][id]);
	if (cplan != NULL)
		ReleaseCachedPlan(cplan, CurrentResourceOwner);
	AtEOXact_GUC(true, guc_level);
	planned_generation[level][id] = source->generation;
}

/*
 * sql_run: execute a statement with its parameters and check its result code.
 * Returns the number of rows it returned or changed; the rows are in
 * SPI_tuptable.  nulls is NULL when no parameter is NULL.
 */
uint64
sql_run(StatementId id, Datum *values, const char *nulls)
{
	int			level = statement_level(id);
	const StatementDef *def = statement_def(id, level);
	int			rc;

	/*
	 * No setting may change in a parallel plan (a read function called in
	 * one): the statement runs the plan it has, or one made with the
	 * session's settings, which the next call outside replaces.
	 */
	if (!def->whole_tables && !IsInParallelMode())
		plan_for_index_lookups(id, level);
	if (def->latest_snapshot)
		rc = SPI_execute_snapshot(prepared_plan(id, level), values, nulls, GetLatestSnapshot(),
								  InvalidSnapshot, def->read_only, false, 0);
	else
		rc = SPI_execute_plan(prepared_plan(id, level), values, nulls, def->read_only, 0);
	if (rc != def->expected_rc)
		elog(ERROR, "jobguard: statement \"%s\" returned %s",
			 def->name, SPI_result_code_string(rc));
	return SPI_processed;
}

/* sql_column_value: column col (1-based) of row 0 of the last result. */
Datum
sql_column_value(int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, isnull);
}

/* sql_column_int64: a bigint column of row 0 that may be NULL (then 0). */
int64
sql_column_int64(int col, bool *isnull)
{
	Datum		d = sql_column_value(col, isnull);

	return *isnull ? 0 : DatumGetInt64(d);
}

/* sql_column_text: a text column of row 0 as a C string, or NULL. */
char *
sql_column_text(int col)
{
	bool		isnull;
	Datum		d = sql_column_value(col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* sql_column_bool: a boolean column of row 0 that is never NULL. */
bool
sql_column_bool(int col)
{
	bool		isnull;
	Datum		d = sql_column_value(col, &isnull);

	return !isnull && DatumGetBool(d);
}

/* sql_read_attempt_row: fill an AttemptRow from row 0 (ATTEMPT_COLUMNS). */
void
sql_read_attempt_row(AttemptRow *attempt)
{
	bool		isnull;

	attempt->id = sql_column_int64(AROW_ID + 1, &isnull);
	attempt->job_id = sql_column_int64(AROW_JOB_ID + 1, &isnull);
	attempt->attempt_no = DatumGetInt32(sql_column_value(AROW_ATTEMPT_NO + 1, &isnull));
	attempt->provider = sql_column_text(AROW_PROVIDER + 1);
	attempt->stored_state = attempt_state_from_name(sql_column_text(AROW_STORED_STATE + 1));
	attempt->state = attempt_state_from_name(sql_column_text(AROW_STATE + 1));
	attempt->read_version = sql_column_int64(AROW_READ_VERSION + 1, &isnull);
	attempt->deadline = DatumGetTimestampTz(sql_column_value(AROW_DEADLINE + 1, &isnull));
	attempt->attempt_key = sql_column_text(AROW_ATTEMPT_KEY + 1);
	attempt->lost_result = sql_column_value(AROW_LOST_RESULT + 1, &isnull);
	if (isnull)
		attempt->lost_result = (Datum) 0;
}
