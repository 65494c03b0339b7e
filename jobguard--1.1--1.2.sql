/* jobguard--1.1--1.2.sql: update jobguard 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobguard UPDATE TO '1.2'" to load this file. \quit

/*
 * What 1.2 adds to the SQL of 1.1.  CREATE EXTENSION jobguard runs
 * jobguard--1.0.sql, jobguard--1.0--1.1.sql and then this script, and
 * ALTER EXTENSION jobguard UPDATE on a 1.1 database runs this script alone:
 * each 1.2 object is written here once, and sql/update.sql proves that a
 * fresh install and a database updated from 1.0 or from 1.1 describe the
 * same extension, fact for fact.
 *
 * The 1.2 library also serves a 1.1 database that has not run this
 * script yet (doc/reference.md, "Versions and updating").  An object
 * created here gets the default privileges the updating role has in
 * force: the pass at the end takes them back, and a function a client
 * should call is given by grant_added_routines() below.
 */

/*
 * A grant outlives its role: DROP OWNED BY r; DROP ROLE r leaves r's row
 * in jobguard.grants holding a bare OID (no role can be a member of it, so
 * it grants nothing here).  pg_dump writes a regrole it cannot name as that
 * number, and a restore would give the grant to whichever role has the
 * OID in the target cluster.  So a dump takes only the grants of roles
 * that exist, the update forgets those of roles already dropped, and
 * check_invariants() names any left (doc/security.md).
 */
DELETE FROM jobguard.grants g
 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
				   WHERE r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid);
SELECT pg_catalog.pg_extension_config_dump('jobguard.grants',
	'WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_roles r'
	' WHERE r.oid OPERATOR(pg_catalog.=) jobguard.grants.role::pg_catalog.oid)');

---------------------------------------------------------------------------
-- Batch finish.
---------------------------------------------------------------------------

/*
 * finish_many: many results in one call, each element decided exactly as
 * finish_attempt would decide it alone; a refusal (JG006, JG007, JG009,
 * 22004, 54000) is a row that undoes only its element (doc/reference.md).
 */
CREATE FUNCTION jobguard.finish_many(attempt_ids bigint[], results jsonb[])
RETURNS TABLE (ord integer, attempt_id bigint, outcome text, sqlstate text, message text)
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'jobguard_finish_many';

COMMENT ON FUNCTION jobguard.finish_many(bigint[], jsonb[]) IS 'report many results in one call: one row per element, as finish_attempt would have answered it';

REVOKE ALL ON FUNCTION jobguard.finish_many(bigint[], jsonb[]) FROM PUBLIC;

---------------------------------------------------------------------------
-- Liveness: provider keys, provider policies, redrive, reconciliation
---------------------------------------------------------------------------

/*
 * What an operator knows about a provider (doc/reference.md, "Provider
 * policies").  dedupes_for: the provider honours its idempotency key for
 * at least this long after the key's first use (it makes redrive
 * possible).  max_in_flight, max_per_second: limits on the attempts
 * against it.  NULL: no such promise, no limit.  Read by claim, begin and
 * redrive; written only by set_provider_policy().
 */
CREATE TABLE jobguard.provider_policy (
	provider		text PRIMARY KEY,
	dedupes_for		interval CHECK (dedupes_for > interval '0'),
	max_in_flight	integer CHECK (max_in_flight > 0),
	max_per_second	numeric CHECK (max_per_second > 0),
	updated_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT provider_policy_provider_length CHECK (pg_catalog.char_length(provider) BETWEEN 1 AND 63)
);

COMMENT ON TABLE jobguard.provider_policy IS 'per provider: how long it deduplicates by key (dedupes_for), and its limits';

SELECT pg_catalog.pg_extension_config_dump('jobguard.provider_policy', '');

-- The provider policies, for psql.
CREATE VIEW jobguard.provider_policies AS
SELECT p.provider, p.dedupes_for, p.max_in_flight, p.max_per_second, p.updated_at
  FROM jobguard.provider_policy p;

COMMENT ON VIEW jobguard.provider_policies IS 'the policy of each provider that has one: dedupes_for, max_in_flight, max_per_second';

/*
 * set_provider_policy: set (or replace) a provider's policy; all three
 * NULL removes it.  Operators only (42501 for others); a value not greater
 * than zero is 22023 and writes nothing.
 */
CREATE FUNCTION jobguard.set_provider_policy(provider text, dedupes_for interval DEFAULT NULL,
											 max_in_flight integer DEFAULT NULL,
											 max_per_second numeric DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'jobguard_set_provider_policy';

COMMENT ON FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric) IS 'set what a provider promises (dedupes_for) and its limits (max_in_flight, max_per_second); operators only';

REVOKE ALL ON FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric) FROM PUBLIC;

/*
 * Provider keys (doc/reference.md, "Provider keys").  An attempt's
 * provider_key is what the worker sends the provider as its idempotency
 * key: the key of the job's latest earlier attempt against the same
 * provider, unless that attempt failed, else a new random one (32 hex
 * characters from a strong random source, made by the library on both
 * back ends).  tries: the attempts counted toward max_attempts up to and
 * including this one; a redrive repeats its predecessor's count, since it
 * is the same request again.  NULL (the attempts of 1.1, a row written by
 * hand) counts as attempt_no: every attempt counted before redrives.
 *
 * The attempts of 1.1 get their keys by the same rule: one key per job,
 * provider and number of failed attempts against that provider before,
 * an md5 of those and of a random seed drawn once by this update (so two
 * databases updated apart never share a key).  1.1 had no redrives: their
 * tries stay NULL, that is their attempt_no.
 */
ALTER TABLE jobguard.attempts ADD COLUMN provider_key text;
ALTER TABLE jobguard.attempts ADD COLUMN tries integer;
ALTER TABLE jobguard.attempts ADD COLUMN unknown_since timestamptz;

WITH seed AS MATERIALIZED (SELECT pg_catalog.gen_random_uuid()::pg_catalog.text AS s)
UPDATE jobguard.attempts AS a
   SET provider_key = pg_catalog.md5(seed.s OPERATOR(pg_catalog.||) ':'
			OPERATOR(pg_catalog.||) a.job_id::pg_catalog.text OPERATOR(pg_catalog.||) ':'
			OPERATOR(pg_catalog.||) a.provider::pg_catalog.text OPERATOR(pg_catalog.||) ':'
			OPERATOR(pg_catalog.||) (SELECT pg_catalog.count(*) FROM jobguard.attempts f
									  WHERE f.job_id OPERATOR(pg_catalog.=) a.job_id
										AND f.provider OPERATOR(pg_catalog.=) a.provider
										AND f.attempt_no OPERATOR(pg_catalog.<) a.attempt_no
										AND f.state OPERATOR(pg_catalog.=) 'failed')::pg_catalog.text)
  FROM seed;

-- both back ends write both columns; the default serves a row written by hand
ALTER TABLE jobguard.attempts ALTER COLUMN provider_key
	SET DEFAULT pg_catalog.replace(pg_catalog.gen_random_uuid()::pg_catalog.text, '-', '');
ALTER TABLE jobguard.attempts ALTER COLUMN provider_key SET NOT NULL;
ALTER TABLE jobguard.attempts ADD CONSTRAINT attempts_provider_key_format
	CHECK (provider_key ~ '^[A-Za-z0-9_-]{1,64}$');
ALTER TABLE jobguard.attempts ADD CONSTRAINT attempts_tries_range
	CHECK (tries BETWEEN 1 AND attempt_no);

/*
 * The unknown attempts by provider: what claim() looks through for
 * redrives at every call (only the providers that deduplicate), so that
 * it never reads the attempts still running.
 */
CREATE INDEX attempts_unknown
	ON jobguard.attempts (provider, deadline)
	WHERE state = 'unknown';

COMMENT ON COLUMN jobguard.attempts.provider_key IS 'the idempotency key the worker sends the provider: the same for a retry, a redrive or a new attempt after a cancel against the same provider';
COMMENT ON COLUMN jobguard.attempts.unknown_since IS 'when the attempt became unknown (mark_unknown, or its deadline when swept); NULL: at its deadline';
COMMENT ON COLUMN jobguard.attempts.tries IS 'attempts counted toward max_attempts up to and including this one (a redrive is not counted again); NULL: attempt_no';

/*
 * Every job with its derived state: 'failed' when the attempts counted
 * toward max_attempts (tries) are used up.  Otherwise as in 1.1.
 */
CREATE OR REPLACE VIEW jobguard.job_overview WITH (security_barrier) AS
SELECT j.id AS job_id,
	   j.owner_id,
	   j.idempotency_key,
	   j.operation,
	   j.provider,
	   CASE WHEN jobguard.payloads_visible(j.scope) THEN j.params END AS params,
	   j.max_attempts,
	   CASE
		   WHEN j.completed_by IS NOT NULL THEN 'succeeded'
		   WHEN j.cancelled_at IS NOT NULL THEN 'cancelled'
		   WHEN last.state = 'unknown' THEN 'unknown'
		   WHEN last.state = 'started' THEN 'running'
		   WHEN j.max_attempts IS NOT NULL
				AND COALESCE(last.tries, 0) >= j.max_attempts THEN 'failed'
		   ELSE 'pending'
	   END AS state,
	   j.version,
	   COALESCE(last.attempt_no, 0) AS attempts,
	   j.completed_by,
	   CASE WHEN jobguard.payloads_visible(j.scope) THEN j.result END AS result,
	   j.created_at,
	   j.completed_at,
	   j.cancelled_at,
	   j.scope,
	   j.previous_job_id,
	   j.replaced_at
  FROM jobguard.jobs j
  LEFT JOIN LATERAL (
	   SELECT a.attempt_no, COALESCE(a.tries, a.attempt_no) AS tries,
			  jobguard.attempt_state(a.state, a.deadline) AS state
		 FROM jobguard.attempts a
		WHERE a.job_id = j.id
		ORDER BY a.attempt_no DESC
		LIMIT 1) last ON true
 WHERE jobguard.scope_visible(j.scope);

-- Every attempt with its effective state; provider_key and tries appended.
CREATE OR REPLACE VIEW jobguard.attempt_overview WITH (security_barrier) AS
SELECT a.id AS attempt_id,
	   a.job_id,
	   a.attempt_no,
	   a.provider,
	   jobguard.attempt_state(a.state, a.deadline) AS state,
	   a.read_version,
	   a.attempt_key,
	   a.started_at,
	   a.deadline,
	   a.finished_at,
	   CASE WHEN jobguard.payloads_visible(j.scope) THEN a.error END AS error,
	   a.lost_to,
	   CASE WHEN jobguard.payloads_visible(j.scope) THEN a.lost_result END AS lost_result,
	   a.cancelled_at,
	   a.cancel_reason,
	   a.worker,
	   a.provider_key,
	   a.tries,
	   a.unknown_since
  FROM jobguard.attempts a
  JOIN jobguard.jobs j ON j.id = a.job_id
 WHERE jobguard.scope_visible(j.scope);

/*
 * provider_key: the provider key of an attempt the caller may read
 * (JG009 for any other id, as for every reader).
 */
CREATE FUNCTION jobguard.provider_key(attempt_id bigint)
RETURNS text
LANGUAGE C STABLE
AS 'MODULE_PATHNAME', 'jobguard_provider_key';

COMMENT ON FUNCTION jobguard.provider_key(bigint) IS 'the idempotency key to send the provider for an attempt';

REVOKE ALL ON FUNCTION jobguard.provider_key(bigint) FROM PUBLIC;

/*
 * claim returns, after deadline, the attempt's provider_key and whether
 * it is a redrive of a stalled attempt (same key, same provider).  The
 * library builds its rows for the declared result, so a 1.1 database's
 * seven-column claim keeps working until it is updated.
 */
DROP FUNCTION jobguard.claim(text, text[], interval, integer, text, interval);

CREATE FUNCTION jobguard.claim(worker text,
							   operations text[] DEFAULT NULL,
							   timeout interval DEFAULT '30 seconds',
							   max_jobs integer DEFAULT 1,
							   provider text DEFAULT NULL,
							   wait interval DEFAULT '0')
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz,
			   provider_key text, redrive boolean)
AS 'MODULE_PATHNAME', 'jobguard_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.claim(text, text[], interval, integer, text, interval) IS 'begin an attempt on each of up to max_jobs runnable jobs (redrives of stalled attempts first, then oldest first), and return them with their provider keys';

REVOKE ALL ON FUNCTION jobguard.claim(text, text[], interval, integer, text, interval) FROM PUBLIC;

/*
 * redrive_attempt: an unknown attempt re-asked of the same provider under
 * the same key, while the provider still deduplicates it: in one
 * transaction the attempt is cancelled ("redriven as attempt <n>") and
 * attempt n begins.  JG006 with a DETAIL when it is not redrivable; never
 * waits (55P03 when another transaction holds the job or the attempt).
 */
CREATE FUNCTION jobguard.redrive_attempt(attempt_id bigint)
RETURNS bigint
LANGUAGE C VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'jobguard_redrive_attempt';

COMMENT ON FUNCTION jobguard.redrive_attempt(bigint) IS 'cancel an unknown attempt and begin the same request again against the same provider under the same provider key; returns the new attempt id';

REVOKE ALL ON FUNCTION jobguard.redrive_attempt(bigint) FROM PUBLIC;

/*
 * Reconciliation (doc/reference.md, "Reconciliation"): claim_unknown()
 * leases unknown attempts to reconcilers.  A lease is a row here, not a
 * column of jobguard.attempts: it changes at every reconciler's pass and
 * says nothing about the attempt's history, so it stays out of the table
 * that every begin and finish writes (no new row versions there, nothing
 * the fast path must know).  No foreign key either (its triggers would
 * make the fast path step aside): claim_unknown() removes the leases that
 * ran out a day ago of attempts no longer unknown.  Not dumped: a lease
 * is worth its seconds, and a restored database starts with none.
 */
CREATE TABLE jobguard.reconcile_leases (
	attempt_id		bigint PRIMARY KEY,
	worker			jobguard.key_text NOT NULL,
	leased_until	timestamptz NOT NULL
);

COMMENT ON TABLE jobguard.reconcile_leases IS 'which reconciler holds an unknown attempt (claim_unknown), and until when';

/*
 * The jobs whose open attempt is unknown, in the scopes the caller may
 * read: since when, and whether (and until when) claim() or
 * redrive_attempt() may redrive it.  Jobs not redrivable are "blocked"
 * (stats(): blocked.jobs, blocked.oldest_seconds).
 */
CREATE VIEW jobguard.blocked_jobs WITH (security_barrier) AS
SELECT j.id AS job_id,
	   j.scope,
	   j.operation,
	   a.provider,
	   a.id AS attempt_id,
	   a.provider_key,
	   COALESCE(a.unknown_since, a.deadline) AS unknown_since,
	   COALESCE(w.window_end > now(), false) AS redrivable,
	   w.window_end AS redrivable_until
  FROM jobguard.attempts a
  -- from the open attempts to their jobs by the primary key, never
  -- through the indexes of the jobs not yet ended: they can hold many more
  -- entries (a backlog, or the dead entries a long transaction keeps), and
  -- the sweeper counts this view every round (OFFSET 0 keeps the planner
  -- from turning the join round, and the job's conditions out of the
  -- look-up, where they would let it choose those partial indexes)
  CROSS JOIN LATERAL (
	   SELECT o.id, o.scope, o.operation, o.completed_by, o.cancelled_at
		 FROM jobguard.jobs o
		WHERE o.id = a.job_id
	   OFFSET 0) j
  LEFT JOIN jobguard.provider_policy p ON p.provider = a.provider
  LEFT JOIN LATERAL (
	   SELECT min(f.started_at) + p.dedupes_for
			  - greatest(p.dedupes_for * 0.01::float8, interval '1 minute') AS window_end
		 FROM jobguard.attempts f
		WHERE f.job_id = a.job_id AND f.provider_key = a.provider_key) w ON true
 WHERE a.state IN ('started', 'unknown')
   AND jobguard.attempt_state(a.state, a.deadline) = 'unknown'
   AND j.completed_by IS NULL AND j.cancelled_at IS NULL
   AND jobguard.scope_visible(j.scope);

COMMENT ON VIEW jobguard.blocked_jobs IS 'jobs whose open attempt is unknown, with whether and until when they can be redriven';

CREATE FUNCTION jobguard.claim_unknown(worker text, operations text[] DEFAULT NULL,
									   max_rows integer DEFAULT 1,
									   older_than interval DEFAULT '0',
									   lease interval DEFAULT '30 seconds')
RETURNS TABLE (attempt_id bigint, job_id bigint, operation text, provider text,
			   provider_key text, params jsonb, unknown_since timestamptz, redrivable boolean)
LANGUAGE C VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'jobguard_claim_unknown';

COMMENT ON FUNCTION jobguard.claim_unknown(text, text[], integer, interval, interval) IS 'lease unknown attempts to a reconciler, longest unknown first: no other reconciler gets them while the lease lasts';

REVOKE ALL ON FUNCTION jobguard.claim_unknown(text, text[], integer, interval, interval) FROM PUBLIC;


---------------------------------------------------------------------------
-- Flow control: scheduling, priority, limits, retry_job
---------------------------------------------------------------------------

/*
 * A job's priority (lower runs first); its run_at is the existing
 * not_before.  A constant default: no table rewrite.
 */
ALTER TABLE jobguard.jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0;

COMMENT ON COLUMN jobguard.jobs.priority IS 'claim order: lower runs first (submit''s priority, reschedule)';

/*
 * jobs_run_order: claim()'s order over the jobs not yet succeeded or
 * cancelled: priority, then the time the job may run (run_at, or a
 * backoff's not_before, else its creation), then id.  claim() walks the
 * priorities present and, in each, the range of jobs already due: jobs
 * scheduled later are never read.  jobs_claim_order (by id) stays for
 * the claim floor.
 */
CREATE INDEX jobs_run_order
	ON jobguard.jobs (priority, (COALESCE(not_before, created_at)), id)
	WHERE completed_by IS NULL AND cancelled_at IS NULL;

COMMENT ON INDEX jobguard.jobs_run_order IS 'jobs not yet succeeded or cancelled, in claim order: priority, run time, id';

/*
 * What operators' retry_job gave a failed job, and why: one element per
 * retry ({"at", "by", "extra_attempts", "max_attempts_before", "reason"}),
 * kept on the job (and purged with it); NULL until the first.
 */
ALTER TABLE jobguard.jobs ADD COLUMN retries jsonb;

COMMENT ON COLUMN jobguard.jobs.retries IS 'retry_job''s record: when, by whom, how many attempts added, and why';

/*
 * Limits (max_in_flight, max_per_second of jobguard.provider_policy),
 * enforced on every begin by src/limits.c: the starts against a provider
 * are decided one at a time, the open attempts against it counted (by the
 * indexes below), and the token bucket of max_per_second kept in its
 * policy row, locked by each start against a rate (tokens at
 * tokens_at; NULL: full).  throttled counts the starts claim passed over
 * for a limit.  Backends cache which providers have limits; a change of
 * the limits (not of the bucket) tells them to read them again.
 */
ALTER TABLE jobguard.provider_policy
	ADD COLUMN tokens double precision,
	ADD COLUMN tokens_at timestamptz,
	ADD COLUMN throttled bigint NOT NULL DEFAULT 0;

/*
 * The started attempts by provider, then deadline, in place of 1.0's
 * attempts_started_deadline (by deadline alone): max_in_flight counts a
 * provider's open attempts through this index and attempts_unknown, and
 * the sweep walks the providers in it for the overdue ones.  One index
 * where two (by deadline, and open ones by provider) would cost every
 * begin and claim a second index entry.
 */
DROP INDEX jobguard.attempts_started_deadline;

CREATE INDEX attempts_started
	ON jobguard.attempts (provider, deadline)
	WHERE state = 'started';

COMMENT ON INDEX jobguard.attempts_started IS 'started attempts by provider and deadline: what the sweep walks and max_in_flight counts (with attempts_unknown)';

CREATE TRIGGER provider_policy_changed
	AFTER INSERT OR DELETE OR TRUNCATE OR UPDATE OF provider, max_in_flight, max_per_second
	ON jobguard.provider_policy
	FOR EACH STATEMENT EXECUTE FUNCTION jobguard.table_changed();

/*
 * submit and submit_many take run_at and priority.  The new arguments
 * trail the old ones with defaults, so the functions are replaced (an
 * overload beside the old ones would make every old call ambiguous): a
 * call with the old arguments means what it meant.  The 1.1 definitions
 * call the same C functions, which take what they are given.
 */
DROP FUNCTION jobguard.submit(text, text, text, jsonb, text, integer);
CREATE FUNCTION jobguard.submit(owner_id text,
								idempotency_key text,
								operation text,
								params jsonb,
								provider text,
								max_attempts integer DEFAULT NULL,
								run_at timestamptz DEFAULT NULL,
								priority integer DEFAULT 0,
								OUT job_id bigint,
								OUT created boolean)
RETURNS record
AS 'MODULE_PATHNAME', 'jobguard_submit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer) IS 'create the job for (owner_id, idempotency_key), or return the existing one for the same request; run_at and priority are not part of the request';

DROP FUNCTION jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]);
CREATE FUNCTION jobguard.submit_many(owner_ids text[],
									 idempotency_keys text[],
									 operations text[],
									 params jsonb[],
									 providers text[],
									 max_attempts integer[] DEFAULT NULL,
									 run_ats timestamptz[] DEFAULT NULL,
									 priorities integer[] DEFAULT NULL)
RETURNS TABLE (ord integer, job_id bigint, created boolean, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'jobguard_submit_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[]) IS 'submit many requests in one call: one row per request, in input order, refused ones with their SQLSTATE and message';

/*
 * reschedule: move a pending job's run time and priority (NULL: leave
 * that part as it is).  A new run_at replaces a backoff's not_before.
 */
CREATE FUNCTION jobguard.reschedule(job_id bigint, run_at timestamptz DEFAULT NULL,
									priority integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobguard_reschedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.reschedule(bigint, timestamptz, integer) IS 'move a pending job: a new run time (replacing a backoff), a new priority';

/*
 * retry_job: an operator gives a failed job (its max_attempts used up)
 * extra_attempts more; it is pending again under the same id and key.
 */
CREATE FUNCTION jobguard.retry_job(job_id bigint, extra_attempts integer DEFAULT 1,
								   reason text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobguard_retry_job'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.retry_job(bigint, integer, text) IS 'operators: give a failed job more attempts; it is pending again under the same id and key (recorded in jobs.retries)';

REVOKE ALL ON FUNCTION jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer),
	jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[]),
	jobguard.reschedule(bigint, timestamptz, integer),
	jobguard.retry_job(bigint, integer, text) FROM PUBLIC;

/*
 * apply_grant names the functions it grants by signature: the new
 * submit and submit_many in place of 1.1's.
 */
CREATE OR REPLACE FUNCTION jobguard.apply_grant(role regrole, kind text, scope text, payloads boolean, caller text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF role IS NULL THEN
		RAISE EXCEPTION 'argument "role" of jobguard.%() must not be null', caller
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF scope IS NOT NULL AND char_length(scope) NOT BETWEEN 1 AND 63 THEN
		RAISE EXCEPTION 'scope must be 1 to 63 characters long'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('It is %s characters long.', char_length(scope));
	END IF;
	IF payloads IS NULL THEN
		RAISE EXCEPTION 'argument "payloads" of jobguard.%() must not be null', caller
			USING ERRCODE = 'null_value_not_allowed';
	END IF;

	-- one grant change at a time: concurrent GRANTs and REVOKEs on the same
	-- objects would fail with "tuple concurrently updated"
	LOCK TABLE jobguard.grants IN SHARE ROW EXCLUSIVE MODE;
	PERFORM jobguard.take_back(role);
	EXECUTE format('GRANT USAGE ON SCHEMA jobguard TO %s', role);
	EXECUTE format('GRANT SELECT ON jobguard.job_overview, jobguard.attempt_overview,'
				   ' jobguard.certification_overview, jobguard.key_policies,'
				   ' jobguard.shard_overview TO %s', role);
	EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.attempt_state(text, timestamptz),'
				   ' jobguard.job_state(bigint), jobguard.job(bigint), jobguard.attempts_of(bigint),'
				   ' jobguard.check_result(text, jsonb), jobguard.check_invariants(),'
				   ' jobguard.await(bigint, interval), jobguard.stats(),'
				   ' jobguard.fast_path_status(), jobguard.caller_scope(),'
				   ' jobguard.scope_visible(text), jobguard.payloads_visible(text) TO %s', role);
	IF kind IN ('client', 'operator') THEN
		EXECUTE format('GRANT EXECUTE ON FUNCTION'
					   ' jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer),'
					   ' jobguard.begin_attempt(bigint, text, interval, text),'
					   ' jobguard.finish_attempt(bigint, jsonb),'
					   ' jobguard.fail_attempt(bigint, text, interval),'
					   ' jobguard.mark_unknown(bigint),'
					   ' jobguard.cancel_attempt(bigint, text),'
					   ' jobguard.cancel_job(bigint, text),'
					   ' jobguard.heartbeat(bigint, interval),'
					   ' jobguard.claim(text, text[], interval, integer, text, interval),'
					   ' jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[],'
					   ' timestamptz[], integer[]) TO %s', role);
	END IF;
	INSERT INTO jobguard.grants AS g (role, kind, scope, payloads)
	VALUES (role, kind, scope, payloads)
	ON CONFLICT ON CONSTRAINT grants_pkey DO UPDATE
		SET kind = EXCLUDED.kind, scope = EXCLUDED.scope, payloads = EXCLUDED.payloads,
			granted_at = now();
END
$$;

---------------------------------------------------------------------------
-- One rule for the administrative functions, C and PL/pgSQL.
---------------------------------------------------------------------------

/*
 * require_administrator: the administrators' rule (doc/security.md): 42501
 * naming the function unless the caller has the privileges of the owner
 * of jobguard's tables, or is a superuser.  The PL/pgSQL administrative
 * functions call it first, so that EXECUTE granted on one of them is
 * refused as the C ones refuse it, not on the first table it touches.
 * PUBLIC may call it: it reads and writes nothing.
 */
CREATE FUNCTION jobguard.require_administrator(function_name text)
RETURNS void
AS 'MODULE_PATHNAME', 'jobguard_require_administrator'
LANGUAGE C STABLE PARALLEL SAFE;

COMMENT ON FUNCTION jobguard.require_administrator(text) IS 'raise 42501 naming the function unless the caller may administer jobguard (the PL/pgSQL administrative functions call it first)';

GRANT EXECUTE ON FUNCTION jobguard.require_administrator(text) TO PUBLIC;

/*
 * The PL/pgSQL administrative functions of 1.1 call it first.  Each is
 * redefined from its own definition (pg_get_functiondef) with the call
 * added on the line of the BEGIN of its body, so that the bodies stay
 * written once, in the scripts that made them, and the line numbers their
 * errors' CONTEXT names stay those of 1.1.
 */
DO LANGUAGE plpgsql $$
DECLARE
	f regprocedure;
	def text;
	patched text;
BEGIN
	FOREACH f IN ARRAY ARRAY['jobguard.configure_shard(integer, integer)',
							 'jobguard.set_key_policy(text, interval, text[], text)',
							 'jobguard.grant_client(regrole, text)',
							 'jobguard.grant_reader(regrole, text, boolean)',
							 'jobguard.grant_operator(regrole)',
							 'jobguard.revoke_client(regrole)']::regprocedure[]
	LOOP
		def := pg_catalog.pg_get_functiondef(f);
		patched := pg_catalog.regexp_replace(def, E'\nBEGIN\n',
			pg_catalog.format(E'\nBEGIN PERFORM jobguard.require_administrator(%L);\n',
							  (SELECT p.proname FROM pg_catalog.pg_proc p WHERE p.oid = f)));
		IF patched = def THEN
			RAISE EXCEPTION 'jobguard update: no BEGIN line in the body of %', f;
		END IF;
		EXECUTE patched;
	END LOOP;
END
$$;

/*
 * grant_flow_routines: when a role becomes (or stays) a client or an
 * operator, give it reschedule; an operator also retry_job.
 */
CREATE FUNCTION jobguard.grant_flow_routines()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF NEW.kind IN ('client', 'operator') THEN
		EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.reschedule(bigint, timestamptz, integer) TO %s',
					   NEW.role);
	END IF;
	IF NEW.kind = 'operator' THEN
		EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.retry_job(bigint, integer, text) TO %s',
					   NEW.role);
	END IF;
	RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION jobguard.grant_flow_routines() FROM PUBLIC;

CREATE TRIGGER grants_flow_routines
	AFTER INSERT OR UPDATE ON jobguard.grants
	FOR EACH ROW EXECUTE FUNCTION jobguard.grant_flow_routines();


---------------------------------------------------------------------------
-- The rights 1.2's functions add to the grant functions' (1.1's
-- apply_grant lists the 1.1 functions; a trigger on jobguard.grants gives
-- the later ones, so that apply_grant is not written again per release).
---------------------------------------------------------------------------

/*
 * grant_added_routines: when a role becomes (or stays) a client or an
 * operator, give it EXECUTE on the functions added since 1.1.  take_back
 * revokes every function of the schema, these included.
 */
CREATE FUNCTION jobguard.grant_added_routines()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	EXECUTE format('GRANT SELECT ON jobguard.provider_policies, jobguard.blocked_jobs TO %s', NEW.role);
	EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.provider_key(bigint) TO %s', NEW.role);
	IF NEW.kind IN ('client', 'operator') THEN
		EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.finish_many(bigint[], jsonb[]),'
					   ' jobguard.redrive_attempt(bigint),'
					   ' jobguard.claim_unknown(text, text[], integer, interval, interval) TO %s',
					   NEW.role);
	END IF;
	IF NEW.kind = 'operator' THEN
		EXECUTE format('GRANT EXECUTE ON FUNCTION'
					   ' jobguard.set_provider_policy(text, interval, integer, numeric) TO %s',
					   NEW.role);
	END IF;
	RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION jobguard.grant_added_routines() FROM PUBLIC;

CREATE TRIGGER grants_added_routines
	AFTER INSERT OR UPDATE ON jobguard.grants
	FOR EACH ROW EXECUTE FUNCTION jobguard.grant_added_routines();

/*
 * The functions this script creates got the default privileges in force
 * for the updating role: take every such right back (as the end of
 * jobguard--1.0--1.1.sql does for its objects, and with its WARNING), then
 * give the clients and operators of the updated database what the trigger
 * gives new ones.
 */
DO LANGUAGE plpgsql $$
DECLARE
	g record;
	taken text[] := '{}';
BEGIN
	FOR g IN
		SELECT p.oid::pg_catalog.regprocedure AS routine,
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END AS grantee
		  FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
		 WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
				   'jobguard.finish_many(bigint[], jsonb[])'::pg_catalog.regprocedure,
				   'jobguard.set_provider_policy(text, interval, integer, numeric)'::pg_catalog.regprocedure,
				   'jobguard.provider_key(bigint)'::pg_catalog.regprocedure,
				   'jobguard.redrive_attempt(bigint)'::pg_catalog.regprocedure,
				   'jobguard.claim_unknown(text, text[], integer, interval, interval)'::pg_catalog.regprocedure,
				   'jobguard.claim(text, text[], interval, integer, text, interval)'::pg_catalog.regprocedure,
				   'jobguard.grant_added_routines()'::pg_catalog.regprocedure,
				   -- flow control
				   'jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer)'::pg_catalog.regprocedure,
				   'jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[])'::pg_catalog.regprocedure,
				   'jobguard.reschedule(bigint, timestamptz, integer)'::pg_catalog.regprocedure,
				   'jobguard.retry_job(bigint, integer, text)'::pg_catalog.regprocedure,
				   'jobguard.grant_flow_routines()'::pg_catalog.regprocedure])
		   AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM %s', g.routine, g.grantee);
		IF g.grantee <> 'PUBLIC' AND NOT g.grantee = ANY (taken) THEN
			taken := taken || g.grantee;
		END IF;
	END LOOP;
	-- and the tables and views of this script
	FOR g IN
		SELECT c.oid::pg_catalog.regclass AS rel,
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END AS grantee
		  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
		 WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
				   'jobguard.provider_policy'::pg_catalog.regclass,
				   'jobguard.provider_policies'::pg_catalog.regclass,
				   'jobguard.reconcile_leases'::pg_catalog.regclass,
				   'jobguard.blocked_jobs'::pg_catalog.regclass])
		   AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s', g.rel, g.grantee);
		IF g.grantee <> 'PUBLIC' AND NOT g.grantee = ANY (taken) THEN
			taken := taken || g.grantee;
		END IF;
	END LOOP;
	-- said once: a fresh install's jobguard--1.0--1.1.sql (the same
	-- transaction made jobguard.grants) has said it already
	IF pg_catalog.cardinality(taken) > 0 AND NOT EXISTS (
		SELECT 1 FROM pg_catalog.pg_class c
		 WHERE c.oid OPERATOR(pg_catalog.=) 'jobguard.grants'::pg_catalog.regclass
		   AND c.xmin OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id()::pg_catalog.xid) THEN
		RAISE WARNING 'jobguard revoked the rights that default privileges gave % on its objects',
			pg_catalog.array_to_string(taken, ', ')
			USING DETAIL = 'Only jobguard.grant_client(), grant_reader() and grant_operator() give rights on jobguard.';
	END IF;
	FOR g IN SELECT gr.role FROM jobguard.grants gr WHERE gr.kind IN ('client', 'operator')
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION jobguard.finish_many(bigint[], jsonb[]) TO %s',
								  g.role);
	END LOOP;
	FOR g IN SELECT gr.role, gr.kind FROM jobguard.grants gr
	LOOP
		EXECUTE pg_catalog.format('GRANT SELECT ON jobguard.provider_policies, jobguard.blocked_jobs TO %s',
								  g.role);
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION jobguard.provider_key(bigint) TO %s', g.role);
		IF g.kind OPERATOR(pg_catalog.=) ANY ('{client,operator}'::pg_catalog.text[]) THEN
			-- claim was made again above, without the rights it had
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION'
									  ' jobguard.claim(text, text[], interval, integer, text, interval),'
									  ' jobguard.redrive_attempt(bigint),'
									  ' jobguard.claim_unknown(text, text[], integer, interval, interval) TO %s',
									  g.role);
		END IF;
		IF g.kind OPERATOR(pg_catalog.=) 'operator' THEN
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION'
									  ' jobguard.set_provider_policy(text, interval, integer, numeric) TO %s',
									  g.role);
		END IF;
	END LOOP;
END
$$;

/*
 * Flow control: the clients and operators granted before this update get
 * what apply_grant gives them now (after the pass above, which takes back
 * every right on the routines this script made).
 */
DO LANGUAGE plpgsql $$
DECLARE
	g record;
BEGIN
	FOR g IN SELECT gr.role, gr.kind FROM jobguard.grants gr
			  WHERE gr.kind IN ('client', 'operator')
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION'
								  ' jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer),'
								  ' jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[],'
								  ' timestamptz[], integer[]),'
								  ' jobguard.reschedule(bigint, timestamptz, integer) TO %s', g.role);
		IF g.kind = 'operator' THEN
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION jobguard.retry_job(bigint, integer, text) TO %s',
									  g.role);
		END IF;
	END LOOP;
END
$$;
