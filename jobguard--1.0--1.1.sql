/* jobguard--1.0--1.1.sql: update jobguard 1.0 to 1.1 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobguard UPDATE TO '1.1'" to load this file. \quit

/*
 * The schema must belong to the extension's owner (see jobguard--1.0.sql):
 * a 1.0 installed into a schema somebody else had created is refused here
 * too, before anything runs with the owner's rights.
 */
DO LANGUAGE plpgsql $$
DECLARE
	schema_owner name;
	tables_owner name;
BEGIN
	SELECT r.rolname INTO schema_owner
	  FROM pg_catalog.pg_namespace n
	  JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
	 WHERE n.nspname OPERATOR(pg_catalog.=) 'jobguard';
	SELECT r.rolname INTO tables_owner
	  FROM pg_catalog.pg_class c
	  JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) c.relowner
	 WHERE c.oid OPERATOR(pg_catalog.=) 'jobguard.jobs'::pg_catalog.regclass;
	IF schema_owner OPERATOR(pg_catalog.<>) tables_owner THEN
		RAISE EXCEPTION 'schema "jobguard" is owned by role "%", not by the extension''s owner "%"',
			schema_owner, tables_owner
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = 'Whoever owns the schema could replace jobguard''s objects under their names.',
				  HINT = 'Give the schema to the extension''s owner (ALTER SCHEMA jobguard OWNER TO ...) and update again.';
	END IF;
END
$$;

/*
 * Who held which 1.0 grant: clients could submit, readers only read.  Kept
 * here while the functions are replaced, then given again as 1.1 grants in
 * the scope default (readers: every scope, payloads included, as in 1.0).
 * When 1.0's objects were made by this very transaction, this is a fresh
 * install (CREATE EXTENSION jobguard runs jobguard--1.0.sql and then this
 * script): no grant function has run yet, and whatever rights the objects
 * carry came from default privileges, which the pass below takes back.
 */
CREATE TABLE jobguard.update_1_0_grants AS
SELECT a.grantee::pg_catalog.regrole AS role,
	   pg_catalog.bool_or(p.proname OPERATOR(pg_catalog.=) 'submit') AS client
  FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
 WHERE p.pronamespace OPERATOR(pg_catalog.=) 'jobguard'::pg_catalog.regnamespace
   AND p.proname OPERATOR(pg_catalog.=) ANY ('{submit,job_state}'::pg_catalog.name[])
   AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
   AND a.grantee OPERATOR(pg_catalog.<>) 0
   AND p.xmin OPERATOR(pg_catalog.<>) pg_catalog.pg_current_xact_id()::pg_catalog.xid
 GROUP BY a.grantee;

---------------------------------------------------------------------------
-- One id sequence for jobs and attempts.
---------------------------------------------------------------------------

/*
 * Job and attempt ids come from one sequence, so a job id is never also an
 * attempt id: a call given the wrong kind of id finds nothing, and says
 * which kind the number is, instead of acting on an unrelated row.  Ids
 * issued by 1.0 stay as they were; the sequence continues above all of
 * them, keeping a sharded database's ids on its shard.
 */
CREATE SEQUENCE jobguard.id_seq;

COMMENT ON SEQUENCE jobguard.id_seq IS 'ids of jobs and attempts alike: no number is both';

DO LANGUAGE plpgsql $$
DECLARE
	next_id bigint;
	this_shard integer := 0;
	shards integer := 1;
BEGIN
	SELECT coalesce(max(x.id), 0) + 1 INTO next_id
	  FROM (SELECT max(j.id) AS id FROM jobguard.jobs j
			UNION ALL SELECT max(a.id) FROM jobguard.attempts a
			UNION ALL SELECT s.last_value FROM jobguard.jobs_id_seq s WHERE s.is_called
			UNION ALL SELECT s.last_value FROM jobguard.attempts_id_seq s WHERE s.is_called) x;
	SELECT s.shard_no, s.shard_count INTO this_shard, shards FROM jobguard.shard s;
	IF NOT FOUND THEN
		this_shard := 0;
		shards := 1;
	END IF;
	-- the first id above all of them whose remainder is this shard's number
	next_id := next_id + ((this_shard - next_id % shards) + shards) % shards;
	EXECUTE format('ALTER SEQUENCE jobguard.id_seq INCREMENT BY %s MINVALUE 1 RESTART WITH %s',
				   shards, next_id);
END
$$;

ALTER TABLE jobguard.jobs ALTER COLUMN id SET DEFAULT pg_catalog.nextval('jobguard.id_seq');
ALTER TABLE jobguard.attempts ALTER COLUMN id SET DEFAULT pg_catalog.nextval('jobguard.id_seq');
ALTER EXTENSION jobguard DROP SEQUENCE jobguard.jobs_id_seq;
ALTER EXTENSION jobguard DROP SEQUENCE jobguard.attempts_id_seq;
DROP SEQUENCE jobguard.jobs_id_seq;
DROP SEQUENCE jobguard.attempts_id_seq;
-- TRUNCATE jobguard.jobs ... RESTART IDENTITY starts the ids again
ALTER SEQUENCE jobguard.id_seq OWNED BY jobguard.jobs.id;

/*
 * configure_shard: make this database shard shard_no of shard_count.  Safe
 * before any job exists; refused (55000) once jobs exist, unless it is the
 * configuration already in force — re-applying that is how a shard restored
 * from pg_dump gets its id sequences back (pg_dump keeps their values, not
 * their increments).
 */
CREATE OR REPLACE FUNCTION jobguard.configure_shard(shard_no integer, shard_count integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	current_config jobguard.shard;
	next_id bigint;
BEGIN
	IF shard_no IS NULL OR shard_count IS NULL THEN
		RAISE EXCEPTION 'argument "%" of jobguard.configure_shard() must not be null',
			CASE WHEN shard_no IS NULL THEN 'shard_no' ELSE 'shard_count' END
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF shard_count NOT BETWEEN 1 AND 1024 OR (shard_count & (shard_count - 1)) <> 0 THEN
		RAISE EXCEPTION 'shard_count must be a power of two from 1 to 1024'
			USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %s.', shard_count);
	END IF;
	IF shard_no < 0 OR shard_no >= shard_count THEN
		RAISE EXCEPTION 'shard_no must be from 0 to %', shard_count - 1
			USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %s.', shard_no);
	END IF;

	-- no job or attempt may be created while the sequences change
	LOCK TABLE jobguard.jobs, jobguard.attempts IN EXCLUSIVE MODE;
	SELECT * INTO current_config FROM jobguard.shard;
	IF EXISTS (SELECT 1 FROM jobguard.jobs)
	   AND (current_config.shard_no IS DISTINCT FROM shard_no
			OR current_config.shard_count IS DISTINCT FROM shard_count) THEN
		RAISE EXCEPTION 'cannot change the shard configuration of a database that holds jobs'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = format('It is configured as %s.',
								  CASE WHEN current_config.shard_count IS NULL THEN 'an unsharded database'
									   ELSE format('shard %s of %s', current_config.shard_no,
												   current_config.shard_count) END),
				  HINT = 'Configure shards before the first job is submitted.';
	END IF;

	-- the id sequence (jobs and attempts share it) continues at the first
	-- id above every id given so far whose remainder is this shard's number
	SELECT coalesce(max(x.id), 0) + 1 INTO next_id
	  FROM (SELECT max(j.id) AS id FROM jobguard.jobs j
			UNION ALL SELECT max(a.id) FROM jobguard.attempts a) x;
	next_id := next_id + ((shard_no - next_id % shard_count) + shard_count) % shard_count;
	EXECUTE format('ALTER SEQUENCE jobguard.id_seq INCREMENT BY %s MINVALUE 1 RESTART WITH %s',
				   shard_count, next_id);

	INSERT INTO jobguard.shard (shard_no, shard_count)
	VALUES (shard_no, shard_count)
	ON CONFLICT (singleton) DO UPDATE
		SET shard_no = EXCLUDED.shard_no, shard_count = EXCLUDED.shard_count,
			configured_at = pg_catalog.now();
END
$$;

COMMENT ON FUNCTION jobguard.configure_shard(integer, integer) IS 'make this database shard shard_no of shard_count: ids then encode the shard (id % shard_count = shard_no)';

/*
 * The shard configuration for every role jobguard granted anything: the
 * PL/Proxy proxy checks each shard's place with it (jobguard_proxy's
 * check_shards()), connected as a client role that has no rights on the
 * tables.  It holds no job data.
 */
CREATE VIEW jobguard.shard_overview AS
SELECT s.shard_no, s.shard_count, s.configured_at
  FROM jobguard.shard s;

COMMENT ON VIEW jobguard.shard_overview IS 'this database''s shard number and the deployment''s shard count, for every granted role';

---------------------------------------------------------------------------
-- Scopes: every job belongs to one client application.
---------------------------------------------------------------------------

-- jobs submitted under 1.0 belong to the scope default
ALTER TABLE jobguard.jobs ADD COLUMN scope jobguard.name_text NOT NULL DEFAULT 'default';
ALTER TABLE jobguard.jobs ADD COLUMN previous_job_id bigint;
ALTER TABLE jobguard.jobs ADD COLUMN replaced_at timestamptz;
ALTER TABLE jobguard.jobs DROP CONSTRAINT jobs_owner_key_unique;

/*
 * One live job per (scope, owner_id, idempotency_key).  A job is live until
 * a resubmit under a key policy with after_failure 'new_job' replaces it
 * (replaced_at): the new job links back with previous_job_id.  The index is
 * still the only judge of a double-click: submit inserts against it.
 */
CREATE UNIQUE INDEX jobs_live_key ON jobguard.jobs (scope, owner_id, idempotency_key)
	WHERE replaced_at IS NULL;

COMMENT ON INDEX jobguard.jobs_live_key IS 'one live job per (scope, owner_id, idempotency_key)';
COMMENT ON TABLE jobguard.jobs IS 'one row per (scope, owner_id, idempotency_key): what the owner wants, and its single result slot';

/*
 * Who may do what, by scope.  A scope is one client application: its jobs
 * are invisible to the others.  A role is a client of one scope (it acts on
 * and reads that scope's jobs), a reader of one scope or of all (payloads
 * or not), or an operator (acts on and reads every scope).  Roles that are
 * members of a role named here act with its rights.  Written only by the
 * grant functions below; the trigger tells every backend's cache.
 */
CREATE TABLE jobguard.grants (
	role			regrole PRIMARY KEY,
	kind			text NOT NULL,
	scope			text,
	payloads		boolean NOT NULL,
	granted_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT grants_kind CHECK (kind IN ('client', 'reader', 'operator')),
	CONSTRAINT grants_scope_length CHECK (pg_catalog.char_length(scope) BETWEEN 1 AND 63),
	CONSTRAINT grants_client_has_scope CHECK (kind <> 'client' OR (scope IS NOT NULL AND payloads)),
	CONSTRAINT grants_operator_everywhere CHECK (kind <> 'operator' OR (scope IS NULL AND payloads))
);

COMMENT ON TABLE jobguard.grants IS 'clients (one scope), readers (one scope or all) and operators (every scope)';

CREATE FUNCTION jobguard.table_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobguard_table_changed'
LANGUAGE C;

COMMENT ON FUNCTION jobguard.table_changed() IS 'trigger: tell every backend that the table changed, so that what it cached from it is read again';

CREATE TRIGGER grants_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON jobguard.grants
	FOR EACH STATEMENT EXECUTE FUNCTION jobguard.table_changed();

/*
 * The caller's rights by scope, from jobguard.grants and the caller's role
 * memberships (cached per backend).  The views filter and mask with them;
 * the C functions apply the same rules to every id they are given.
 */
CREATE FUNCTION jobguard.caller_scope()
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_caller_scope'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.caller_scope() IS 'the scope the calling role submits jobs in (default when it is no scope''s client)';

CREATE FUNCTION jobguard.scope_visible(scope text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobguard_scope_visible'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.scope_visible(text) IS 'whether the calling role may read the jobs of a scope';

CREATE FUNCTION jobguard.payloads_visible(scope text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobguard_payloads_visible'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.payloads_visible(text) IS 'whether the calling role may read params, results and errors of a scope''s jobs';

/*
 * Every attempt with its effective state, for inspection: only those of the
 * scopes the caller may read, payloads (error, lost_result) only where it
 * may read them.  security_barrier: a caller's own functions in a WHERE
 * clause never see the rows filtered out.
 */
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
	   a.cancel_reason
  FROM jobguard.attempts a
  JOIN jobguard.jobs j ON j.id = a.job_id
 WHERE jobguard.scope_visible(j.scope);

COMMENT ON VIEW jobguard.attempt_overview IS 'every attempt of the scopes the caller may read, with its effective state (started past deadline shows as unknown)';

/*
 * Every job with its derived state.  The state is computed here and only
 * here (job_state() and job() read this view): succeeded, cancelled, then the
 * latest attempt decides (an open attempt is always the latest one, because
 * a new attempt can only begin once the previous one is closed).  Only the
 * jobs of the scopes the caller may read; params and result only where it
 * may read payloads.
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
				AND COALESCE(last.attempt_no, 0) >= j.max_attempts THEN 'failed'
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
	   SELECT a.attempt_no, jobguard.attempt_state(a.state, a.deadline) AS state
		 FROM jobguard.attempts a
		WHERE a.job_id = j.id
		ORDER BY a.attempt_no DESC
		LIMIT 1) last ON true
 WHERE jobguard.scope_visible(j.scope);

COMMENT ON VIEW jobguard.job_overview IS 'every job of the scopes the caller may read, with its derived state, for psql inspection';

DROP FUNCTION jobguard.check_invariants();

/*
 * One row per violated invariant, with the scope of its job; no rows means
 * every guarantee holds.  A BEGIN ATOMIC body is parsed once, when the
 * extension is created: it refers to the tables themselves, not to their
 * names, so nothing created later under those names can stand in for them.
 * Only the tables' owner runs it: check_invariants() below runs it on a
 * caller's behalf and keeps the rows of the scopes the caller may read.
 */
CREATE FUNCTION jobguard.invariant_violations()
RETURNS TABLE (invariant text, job_id bigint, attempt_id bigint, detail text, scope text)
LANGUAGE sql STABLE
BEGIN ATOMIC
	SELECT 'one live job per key', min(j.id), NULL::bigint,
		   format('%s live jobs for owner %L and key %L', count(*), j.owner_id, j.idempotency_key),
		   j.scope::text
	  FROM jobguard.jobs j
	 WHERE j.replaced_at IS NULL
	 GROUP BY j.scope, j.owner_id, j.idempotency_key
	HAVING count(*) > 1
	UNION ALL
	SELECT 'at most one open attempt per job', a.job_id, min(a.id),
		   format('%s open attempts', count(*)), min(j.scope)
	  FROM jobguard.attempts a
	  JOIN jobguard.jobs j ON j.id = a.job_id
	 WHERE a.state IN ('started', 'unknown')
	 GROUP BY a.job_id
	HAVING count(*) > 1
	UNION ALL
	SELECT 'completed_by is a succeeded attempt of the job', j.id, j.completed_by,
		   CASE WHEN a.id IS NULL THEN 'no such attempt of this job'
				ELSE format('the attempt is %s', a.state) END,
		   j.scope
	  FROM jobguard.jobs j
	  LEFT JOIN jobguard.attempts a ON a.id = j.completed_by AND a.job_id = j.id
	 WHERE j.completed_by IS NOT NULL AND (a.id IS NULL OR a.state <> 'succeeded')
	UNION ALL
	SELECT 'a succeeded attempt holds the result slot', a.job_id, a.id,
		   format('the job''s completed_by is %s', coalesce(j.completed_by::text, 'empty')),
		   j.scope
	  FROM jobguard.attempts a
	  JOIN jobguard.jobs j ON j.id = a.job_id
	 WHERE a.state = 'succeeded' AND j.completed_by IS DISTINCT FROM a.id
	UNION ALL
	SELECT 'version matches the history', j.id, NULL,
		   format('version %s, expected %s', j.version, x.expected), j.scope
	  FROM jobguard.jobs j,
		   LATERAL (SELECT 1 + (j.completed_by IS NOT NULL)::int
					  + (j.cancelled_at IS NOT NULL)::int
					  + (j.replaced_at IS NOT NULL)::int AS expected) x
	 WHERE j.version <> x.expected
	UNION ALL
	SELECT 'attempts read a version the job had', a.job_id, a.id,
		   format('read_version %s, job version %s', a.read_version, j.version), j.scope
	  FROM jobguard.attempts a
	  JOIN jobguard.jobs j ON j.id = a.job_id
	 WHERE a.read_version > j.version
	UNION ALL
	SELECT 'attempts are numbered 1, 2, ... per job', a.job_id, NULL,
		   format('%s attempts, numbered up to %s', count(*), max(a.attempt_no)), min(j.scope)
	  FROM jobguard.attempts a
	  JOIN jobguard.jobs j ON j.id = a.job_id
	 GROUP BY a.job_id
	HAVING count(*) <> max(a.attempt_no)
	UNION ALL
	SELECT 'a lost attempt lost to the winner', a.job_id, a.id,
		   format('lost_to %s, the job''s completed_by %s', a.lost_to,
				  coalesce(j.completed_by::text, 'empty')),
		   j.scope
	  FROM jobguard.attempts a
	  JOIN jobguard.jobs j ON j.id = a.job_id
	 WHERE a.state = 'lost' AND a.lost_to IS DISTINCT FROM j.completed_by
	UNION ALL
	SELECT 'a new job after a failure follows a replaced job of its key', n.id, NULL,
		   CASE WHEN p.replaced_at IS NULL THEN format('previous job %s was not replaced', p.id)
				WHEN p.completed_by IS NOT NULL THEN format('previous job %s succeeded', p.id)
				ELSE format('previous job %s has another key', p.id) END,
		   n.scope
	  FROM jobguard.jobs n
	  JOIN jobguard.jobs p ON p.id = n.previous_job_id	-- (a purged one is gone)
	 WHERE (p.replaced_at IS NULL OR p.completed_by IS NOT NULL
			OR (p.scope, p.owner_id, p.idempotency_key) IS DISTINCT FROM (n.scope, n.owner_id, n.idempotency_key))
	ORDER BY 1, 2, 3;
END;

COMMENT ON FUNCTION jobguard.invariant_violations() IS 'every violated invariant of jobguard, in every scope (the tables'' owner only)';

/*
 * check_invariants: the violations in the scopes the caller may read.  Runs
 * invariant_violations() as the tables' owner, so that readers can check
 * without reading the tables.
 */
CREATE FUNCTION jobguard.check_invariants()
RETURNS TABLE (invariant text, job_id bigint, attempt_id bigint, detail text)
AS 'MODULE_PATHNAME', 'jobguard_check_invariants'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.check_invariants() IS 'one row per violated invariant of jobguard; no rows means all guarantees hold';

---------------------------------------------------------------------------
-- Key policy per operation: retention, identity, a fresh job after failure.
---------------------------------------------------------------------------

/*
 * What the idempotency key of an operation's jobs promises.  retention:
 * terminal jobs older than it are removed by purge() called without a
 * cut-off (NULL: kept until purged explicitly).  identity: the top-level
 * params keys that make two requests the same request (NULL: all of
 * params).  after_failure: 'keep' replays a failed or cancelled job as it
 * is; 'new_job' lets the same request start a new job, linked to the old
 * one.  A policy applies to the calls made after it is set; it never
 * rewrites stored jobs.
 */
CREATE TABLE jobguard.policies (
	operation		text PRIMARY KEY,
	retention		interval,
	identity		text[],
	after_failure	text NOT NULL DEFAULT 'keep',
	set_at			timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT policies_operation_length CHECK (pg_catalog.char_length(operation) BETWEEN 1 AND 63),
	CONSTRAINT policies_retention_positive CHECK (retention > '0'::interval),
	CONSTRAINT policies_identity_keys CHECK (pg_catalog.cardinality(identity) > 0),
	CONSTRAINT policies_after_failure CHECK (after_failure IN ('keep', 'new_job'))
);

COMMENT ON TABLE jobguard.policies IS 'key policy per operation: retention, identity keys, after_failure';

-- submit caches the policies per backend (src/policies.c)
CREATE TRIGGER policies_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON jobguard.policies
	FOR EACH STATEMENT EXECUTE FUNCTION jobguard.table_changed();

-- The key policies, for psql.
CREATE VIEW jobguard.key_policies AS
SELECT p.operation, p.retention, p.identity, p.after_failure, p.set_at
  FROM jobguard.policies p;

COMMENT ON VIEW jobguard.key_policies IS 'the key policy of each operation that has one';

/*
 * set_key_policy: set (or replace) an operation's key policy.  Bad input
 * is 22004 / 22023 and writes nothing.  A policy with every field at its
 * default is no policy: the row is removed.
 */
CREATE FUNCTION jobguard.set_key_policy(operation text, retention interval DEFAULT NULL,
										identity text[] DEFAULT NULL,
										after_failure text DEFAULT 'keep')
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF operation IS NULL OR after_failure IS NULL THEN
		RAISE EXCEPTION 'argument "%" of jobguard.set_key_policy() must not be null',
			CASE WHEN operation IS NULL THEN 'operation' ELSE 'after_failure' END
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF char_length(operation) NOT BETWEEN 1 AND 63 THEN
		RAISE EXCEPTION 'argument "operation" must be 1 to 63 characters long'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('It is %s characters long.', char_length(operation));
	END IF;
	IF retention <= '0'::interval THEN
		RAISE EXCEPTION 'argument "retention" must be greater than zero or null'
			USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %s.', retention);
	END IF;
	IF identity IS NOT NULL AND (cardinality(identity) = 0 OR array_position(identity, NULL) IS NOT NULL
								 OR EXISTS (SELECT 1 FROM unnest(identity) k WHERE k = '')) THEN
		RAISE EXCEPTION 'argument "identity" must name at least one key, and no empty or null key'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Pass NULL to compare the whole params.';
	END IF;
	IF after_failure NOT IN ('keep', 'new_job') THEN
		RAISE EXCEPTION 'argument "after_failure" must be keep or new_job'
			USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %L.', after_failure);
	END IF;
	IF retention IS NULL AND identity IS NULL AND after_failure = 'keep' THEN
		DELETE FROM jobguard.policies p WHERE p.operation = set_key_policy.operation;
		RETURN;
	END IF;
	INSERT INTO jobguard.policies AS p (operation, retention, identity, after_failure)
	VALUES (operation, retention, identity, after_failure)
	ON CONFLICT ON CONSTRAINT policies_pkey DO UPDATE
		SET retention = EXCLUDED.retention, identity = EXCLUDED.identity,
			after_failure = EXCLUDED.after_failure, set_at = now();
END
$$;

COMMENT ON FUNCTION jobguard.set_key_policy(text, interval, text[], text) IS 'set the key policy of an operation: retention, identity keys, after_failure (keep or new_job)';

-- purge() without a cut-off applies each operation's retention
CREATE OR REPLACE FUNCTION jobguard.purge(older_than interval DEFAULT NULL, batch_size integer DEFAULT 1000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobguard_purge'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.purge(interval, integer) IS 'delete jobs terminal for longer than older_than (NULL: each operation''s retention), with their attempts; their keys can be used again';

---------------------------------------------------------------------------
-- Grants by scope.
---------------------------------------------------------------------------

DROP FUNCTION jobguard.grant_client(name);
DROP FUNCTION jobguard.grant_reader(name);
DROP FUNCTION jobguard.revoke_client(name);
DROP FUNCTION jobguard.require_role(name, text);

/*
 * apply_grant: make a role a client, reader or operator (the one kind it
 * has from now on): take back whatever jobguard granted it before, grant
 * what the kind needs, and record the kind and scope in jobguard.grants,
 * which the functions and views consult on every call.  NULL role: 22004;
 * a scope that is empty or over 63 characters: 22023.
 */
CREATE FUNCTION jobguard.apply_grant(role regrole, kind text, scope text, payloads boolean, caller text)
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
					   ' jobguard.submit(text, text, text, jsonb, text, integer),'
					   ' jobguard.begin_attempt(bigint, text, interval, text),'
					   ' jobguard.finish_attempt(bigint, jsonb),'
					   ' jobguard.fail_attempt(bigint, text, interval),'
					   ' jobguard.mark_unknown(bigint),'
					   ' jobguard.cancel_attempt(bigint, text),'
					   ' jobguard.cancel_job(bigint, text),'
					   ' jobguard.heartbeat(bigint, interval),'
					   ' jobguard.claim(text, text[], interval, integer, text, interval),'
					   ' jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]) TO %s', role);
	END IF;
	INSERT INTO jobguard.grants AS g (role, kind, scope, payloads)
	VALUES (role, kind, scope, payloads)
	ON CONFLICT ON CONSTRAINT grants_pkey DO UPDATE
		SET kind = EXCLUDED.kind, scope = EXCLUDED.scope, payloads = EXCLUDED.payloads,
			granted_at = now();
END
$$;

/*
 * take_back: revoke from a role everything jobguard's grant functions give,
 * and forget its grant.
 */
CREATE FUNCTION jobguard.take_back(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	LOCK TABLE jobguard.grants IN SHARE ROW EXCLUSIVE MODE;
	EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobguard FROM %s', role);
	EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA jobguard FROM %s', role);
	EXECUTE format('REVOKE USAGE ON SCHEMA jobguard FROM %s', role);
	DELETE FROM jobguard.grants g WHERE g.role = take_back.role;
END
$$;

/*
 * grant_client: make a role a client application of a scope (NULL: a scope
 * named after the role): it submits, runs and reads that scope's jobs and
 * sees no other scope's.  Roles that are members of it act in its scope.
 */
CREATE FUNCTION jobguard.grant_client(role regrole, scope text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM jobguard.apply_grant(role, 'client',
								 coalesce(scope, (SELECT r.rolname::text FROM pg_roles r
												   WHERE r.oid = role)),
								 true, 'grant_client');
END
$$;

COMMENT ON FUNCTION jobguard.grant_client(regrole, text) IS 'let a role call the jobguard API for the jobs of one scope (default: named after the role)';

/*
 * grant_reader: let a role inspect jobguard from psql (views and reading
 * functions), for one scope or all (NULL); params, results and errors stay
 * NULL in what it reads unless payloads.  It cannot change anything.
 */
CREATE FUNCTION jobguard.grant_reader(role regrole, scope text DEFAULT NULL,
									  payloads boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM jobguard.apply_grant(role, 'reader', scope, payloads, 'grant_reader');
END
$$;

COMMENT ON FUNCTION jobguard.grant_reader(regrole, text, boolean) IS 'let a role read the jobs of one scope or all (NULL), with or without payloads';

/*
 * grant_operator: let a role act on and read the jobs of every scope
 * (supervisors, an HTTP service's admin side).  Jobs it submits go to the
 * scope default.
 */
CREATE FUNCTION jobguard.grant_operator(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM jobguard.apply_grant(role, 'operator', NULL, true, 'grant_operator');
END
$$;

COMMENT ON FUNCTION jobguard.grant_operator(regrole) IS 'let a role act on and read the jobs of every scope';

/* revoke_client: take back everything a grant function gave a role. */
CREATE FUNCTION jobguard.revoke_client(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF role IS NULL THEN
		RAISE EXCEPTION 'argument "role" of jobguard.revoke_client() must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM jobguard.take_back(role);
END
$$;

COMMENT ON FUNCTION jobguard.revoke_client(regrole) IS 'take back what grant_client, grant_reader or grant_operator gave a role';

/* The grant functions themselves are the owner's alone. */
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA jobguard FROM PUBLIC;

-- take back 1.0's grants here; they are given again, as 1.1 grants, last
SELECT jobguard.take_back(g.role) FROM jobguard.update_1_0_grants g;

---------------------------------------------------------------------------
-- The worker side: claim, heartbeat, retry backoff, batch submit.
---------------------------------------------------------------------------

-- appended at the end of each table
ALTER TABLE jobguard.jobs ADD COLUMN not_before timestamptz;
ALTER TABLE jobguard.attempts ADD COLUMN worker jobguard.key_text;
ALTER TABLE jobguard.attempts ADD COLUMN timeout interval;
ALTER TABLE jobguard.operations ADD COLUMN retry_backoff interval;
ALTER TABLE jobguard.operations ADD COLUMN retry_backoff_max interval;
ALTER TABLE jobguard.operations ADD CONSTRAINT operations_retry_policy CHECK (
		(retry_backoff IS NULL OR retry_backoff > interval '0')
		AND (retry_backoff_max IS NULL
			 OR (retry_backoff IS NOT NULL AND retry_backoff_max >= retry_backoff)));

/*
 * The jobs claim() looks at, oldest first: those not yet succeeded or
 * cancelled.  A job leaves the index when it succeeds or is cancelled, so
 * it stays as small as the work not yet done, however many finished jobs
 * the table holds, and a claim costs the same at millions of jobs as at
 * none.  (A job that used up its max_attempts stays until purged.)
 */
CREATE INDEX jobs_claim_order
	ON jobguard.jobs (id)
	WHERE completed_by IS NULL AND cancelled_at IS NULL;

COMMENT ON INDEX jobguard.jobs_claim_order IS 'jobs not yet succeeded or cancelled, oldest first: what claim() scans';

/*
 * Every attempt with its effective state, for inspection; worker (who
 * claimed it) appended at the end.
 */
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
	   a.worker
  FROM jobguard.attempts a
  JOIN jobguard.jobs j ON j.id = a.job_id
 WHERE jobguard.scope_visible(j.scope);

COMMENT ON VIEW jobguard.attempt_overview IS 'every attempt of the scopes the caller may read, with its effective state (started past deadline shows as unknown)';

-- fail_attempt gains retry_in, define_operation the retry policy
DROP FUNCTION jobguard.fail_attempt(bigint, text);
DROP FUNCTION jobguard.define_operation(text, jsonb);

CREATE FUNCTION jobguard.fail_attempt(attempt_id bigint, error text, retry_in interval DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_fail_attempt'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.fail_attempt(bigint, text, interval) IS 'report that an attempt failed; opens the gate for the next one, which claim() begins no sooner than retry_in (or the operation''s backoff) from now';

CREATE FUNCTION jobguard.heartbeat(attempt_id bigint, extend_by interval DEFAULT NULL)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'jobguard_heartbeat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.heartbeat(bigint, interval) IS 'push back the deadline of a started attempt that has not timed out; returns the new deadline';

CREATE FUNCTION jobguard.claim(worker text,
							   operations text[] DEFAULT NULL,
							   timeout interval DEFAULT '30 seconds',
							   max_jobs integer DEFAULT 1,
							   provider text DEFAULT NULL,
							   wait interval DEFAULT '0')
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz)
AS 'MODULE_PATHNAME', 'jobguard_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.claim(text, text[], interval, integer, text, interval) IS 'begin an attempt on each of up to max_jobs runnable jobs, oldest first, and return them';

CREATE FUNCTION jobguard.submit_many(owner_ids text[],
									 idempotency_keys text[],
									 operations text[],
									 params jsonb[],
									 providers text[],
									 max_attempts integer[] DEFAULT NULL)
RETURNS TABLE (ord integer, job_id bigint, created boolean, sqlstate text, message text)
AS 'MODULE_PATHNAME', 'jobguard_submit_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]) IS 'submit many requests in one call: one row per request, in input order, refused ones with their SQLSTATE and message';

CREATE FUNCTION jobguard.define_operation(operation text, output_contract jsonb,
										  retry_backoff interval DEFAULT NULL,
										  retry_backoff_max interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobguard_define_operation'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.define_operation(text, jsonb, interval, interval) IS 'set or replace the output contract of an operation, and its retry backoff (retry_backoff doubling per failed attempt, up to retry_backoff_max)';

-- created after the schema-wide REVOKE above: nothing for PUBLIC here either
REVOKE EXECUTE ON FUNCTION jobguard.fail_attempt(bigint, text, interval),
	jobguard.heartbeat(bigint, interval),
	jobguard.claim(text, text[], interval, integer, text, interval),
	jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]),
	jobguard.define_operation(text, jsonb, interval, interval) FROM PUBLIC;

---------------------------------------------------------------------------
-- pg_dump keeps the user data of the new table and sequence.
---------------------------------------------------------------------------

SELECT pg_catalog.pg_extension_config_dump('jobguard.id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.grants', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.policies', '');

---------------------------------------------------------------------------
-- Operations at scale (issue 17): purge in batches, with progress.
---------------------------------------------------------------------------

CREATE PROCEDURE jobguard.purge_batches(older_than interval, batch_size integer DEFAULT 10000)
LANGUAGE C
AS 'MODULE_PATHNAME', 'jobguard_purge_batches';

COMMENT ON PROCEDURE jobguard.purge_batches(interval, integer) IS 'purge() committing after every batch, with a NOTICE and pg_stat_activity progress per batch; CALL it outside a transaction block';

REVOKE ALL ON PROCEDURE jobguard.purge_batches(interval, integer) FROM PUBLIC;

---------------------------------------------------------------------------
-- Default privileges do not reach jobguard's objects.
---------------------------------------------------------------------------

/*
 * ALTER DEFAULT PRIVILEGES in force for the installing role granted rights
 * on the new schema, tables and functions to other roles as they were
 * created: a client role could then write the tables directly or define
 * contracts.  Take every such grant back and say so (a WARNING: CREATE
 * EXTENSION does not show a script's NOTICEs).  Rights are given only by
 * the grant functions above.
 */
DO LANGUAGE plpgsql $$
DECLARE
	g record;
	taken text[] := '{}';
BEGIN
	FOR g IN
		SELECT format('REVOKE ALL ON SCHEMA jobguard FROM %s', a.grantee::regrole) AS stmt,
			   a.grantee::regrole::text AS grantee
		  FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
		 WHERE n.nspname = 'jobguard' AND a.grantee <> n.nspowner AND a.grantee <> 0
		UNION ALL
		SELECT format('REVOKE ALL ON %s %s FROM %s',
					  CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
					  c.oid::regclass, CASE WHEN a.grantee = 0 THEN 'PUBLIC'
										   ELSE a.grantee::regrole::text END),
			   CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
		  FROM pg_catalog.pg_class c
		  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace,
			   pg_catalog.aclexplode(c.relacl) a
		 WHERE n.nspname = 'jobguard' AND a.grantee <> c.relowner
		UNION ALL
		SELECT format('REVOKE ALL ON ROUTINE %s FROM %s', p.oid::regprocedure,
					  CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END),
			   CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
		  FROM pg_catalog.pg_proc p
		  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace,
			   pg_catalog.aclexplode(p.proacl) a
		 WHERE n.nspname = 'jobguard' AND a.grantee <> p.proowner
		UNION ALL
		SELECT format('REVOKE ALL ON TYPE %s FROM %s', t.oid::regtype, a.grantee::regrole),
			   a.grantee::regrole::text
		  FROM pg_catalog.pg_type t
		  JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace,
			   pg_catalog.aclexplode(t.typacl) a
		 WHERE n.nspname = 'jobguard' AND a.grantee <> t.typowner AND a.grantee <> 0
	LOOP
		EXECUTE g.stmt;
		IF NOT g.grantee = ANY (taken) THEN
			taken := taken || g.grantee;
		END IF;
	END LOOP;
	IF cardinality(taken) > 0 THEN
		RAISE WARNING 'jobguard revoked the rights that default privileges gave % on its objects',
			array_to_string(taken, ', ')
			USING DETAIL = 'Only jobguard.grant_client(), grant_reader() and grant_operator() give rights on jobguard.';
	END IF;
END
$$;

---------------------------------------------------------------------------
-- 1.0's grants, given again in scopes.
---------------------------------------------------------------------------

-- 1.0's clients become clients of the scope default, its readers readers
-- of every scope with payloads
SELECT jobguard.apply_grant(g.role, CASE WHEN g.client THEN 'client' ELSE 'reader' END,
							CASE WHEN g.client THEN 'default' END, true, 'update')
  FROM jobguard.update_1_0_grants g;
DROP TABLE jobguard.update_1_0_grants;
