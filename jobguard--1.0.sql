/*
 * jobguard--1.0.sql: the tables, views and functions of jobguard 1.0.
 *
 * The only full script.  CREATE EXTENSION jobguard runs it and then the
 * update scripts in order (jobguard--1.0--1.1.sql, jobguard--1.1--1.2.sql):
 * a fresh install and a database updated in place run the same statements,
 * and each version's changes are written once, in its update script.
 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION jobguard" to load this file. \quit

/*
 * The schema must be the installer's own.  CREATE EXTENSION reuses a schema
 * named jobguard that already exists; whoever owns it could later rename it
 * and put objects of their own under the name, to be run by the functions
 * of the extension with its owner's rights.  Refuse such a schema, before
 * anything is created: every install starts here (CREATE EXTENSION jobguard
 * runs this script, then the update scripts up to the default version).
 */
DO LANGUAGE plpgsql $$
DECLARE
	schema_owner name;
BEGIN
	SELECT r.rolname INTO schema_owner
	  FROM pg_catalog.pg_namespace n
	  JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
	 WHERE n.nspname OPERATOR(pg_catalog.=) 'jobguard';
	IF schema_owner OPERATOR(pg_catalog.<>) CURRENT_USER THEN
		RAISE EXCEPTION 'schema "jobguard" already exists and is owned by role "%"', schema_owner
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = 'jobguard installs only into a schema that the installing role owns.',
				  HINT = 'Drop the schema (or give it to the installing role) before CREATE EXTENSION jobguard.';
	END IF;
END
$$;

/*
 * Single-column rules live in domains rather than table CHECKs: PostgreSQL
 * caches a domain's compiled check per backend, while every table CHECK is
 * re-read and re-planned by every INSERT and UPDATE (a quarter of the cost
 * of a write here).  The functions check the same limits first, with
 * friendlier messages; these are the database's backstop.
 */
CREATE DOMAIN jobguard.key_text AS text
	CONSTRAINT key_text_length CHECK (pg_catalog.char_length(VALUE) BETWEEN 1 AND 255);
COMMENT ON DOMAIN jobguard.key_text IS 'owner ids, idempotency keys: 1 to 255 characters';
CREATE DOMAIN jobguard.name_text AS text
	CONSTRAINT name_text_length CHECK (pg_catalog.char_length(VALUE) BETWEEN 1 AND 63);
COMMENT ON DOMAIN jobguard.name_text IS 'operation and provider names: 1 to 63 characters';
CREATE DOMAIN jobguard.positive_count AS integer
	CONSTRAINT positive_count_positive CHECK (VALUE >= 1);
COMMENT ON DOMAIN jobguard.positive_count IS 'max_attempts and attempt numbers: 1 or more';

/*
 * A job is the durable record of what an owner wants.  The unique
 * constraint on (owner_id, idempotency_key) is what makes a double-click one
 * job: submit() relies on it instead of checking first.  version and the
 * result slot (completed_by, result, completed_at) are written only by the
 * compare-and-swap in finish_attempt() and by cancel_job().  fillfactor
 * leaves room so that the finishing UPDATE, which touches no indexed column,
 * can stay on the same page (a HOT update).
 */
CREATE TABLE jobguard.jobs (
	id				bigserial PRIMARY KEY,
	owner_id		jobguard.key_text NOT NULL,
	idempotency_key jobguard.key_text NOT NULL,
	operation		jobguard.name_text NOT NULL,
	params			jsonb NOT NULL,
	provider		jobguard.name_text NOT NULL,
	max_attempts	jobguard.positive_count,
	version			bigint NOT NULL DEFAULT 1,
	completed_by	bigint,
	result			jsonb,
	created_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	completed_at	timestamptz,
	cancelled_at	timestamptz,
	cancel_reason	text,
	CONSTRAINT jobs_owner_key_unique UNIQUE (owner_id, idempotency_key),
	CONSTRAINT jobs_consistent CHECK (
		(completed_by IS NULL) = (completed_at IS NULL)
		AND (completed_by IS NULL) = (result IS NULL)
		AND (cancelled_at IS NULL) = (cancel_reason IS NULL)
		AND (completed_by IS NULL OR cancelled_at IS NULL))
) WITH (fillfactor = 85);

COMMENT ON TABLE jobguard.jobs IS 'one row per (owner_id, idempotency_key): what the owner wants, and its single result slot';

/*
 * An attempt is one try at a job against one provider.  attempt_no counts
 * 1, 2, ... per job.  The partial unique index is the gate's enforcer: at
 * most one open (started or unknown) attempt per job, whatever happens in
 * code.  begin_attempt() inserts with ON CONFLICT DO NOTHING, so a racing
 * begin waits for the other and then gets JG002, never a unique violation.
 */
CREATE TABLE jobguard.attempts (
	id				bigserial PRIMARY KEY,
	job_id			bigint NOT NULL REFERENCES jobguard.jobs (id) ON DELETE CASCADE,
	attempt_no		jobguard.positive_count NOT NULL,
	provider		jobguard.name_text NOT NULL,
	state			text NOT NULL DEFAULT 'started',
	read_version	bigint NOT NULL,
	attempt_key		jobguard.key_text,
	started_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	deadline		timestamptz NOT NULL,
	finished_at		timestamptz,
	error			text,
	lost_to			bigint,
	lost_result		jsonb,
	cancelled_at	timestamptz,
	cancel_reason	text,
	CONSTRAINT attempts_job_attempt_no_unique UNIQUE (job_id, attempt_no),
	CONSTRAINT attempts_consistent CHECK (
		state IN ('started', 'unknown', 'cancelled', 'succeeded', 'lost', 'failed')
		AND (state = 'failed') = (error IS NOT NULL)
		AND (state = 'lost') = (lost_result IS NOT NULL)
		AND (lost_to IS NULL OR state = 'lost')
		AND (cancelled_at IS NULL) = (cancel_reason IS NULL))
);

CREATE UNIQUE INDEX attempts_one_open_per_job
	ON jobguard.attempts (job_id)
	WHERE state IN ('started', 'unknown');

/*
 * Started attempts by deadline: lets the sweeper find overdue attempts
 * without scanning the table.
 */
CREATE INDEX attempts_started_deadline
	ON jobguard.attempts (deadline)
	WHERE state = 'started';

COMMENT ON TABLE jobguard.attempts IS 'tries at a job, one per provider call; at most one open (started or unknown) per job';
COMMENT ON INDEX jobguard.attempts_one_open_per_job IS 'the gate: at most one open attempt per job';

/*
 * Operations with an output contract.  contract_version comes from one
 * sequence for all operations, so a value is never reused: backends cache
 * compiled contracts by (operation, contract_version) and a redefinition is
 * seen by the next finish that reads the row.
 */
CREATE SEQUENCE jobguard.contract_version_seq;

CREATE TABLE jobguard.operations (
	operation		text PRIMARY KEY,
	output_contract jsonb NOT NULL,
	contract_version bigint NOT NULL,
	defined_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT operations_operation_length CHECK (pg_catalog.char_length(operation) BETWEEN 1 AND 63)
);

COMMENT ON TABLE jobguard.operations IS 'output contracts: what a result of an operation must look like';

/*
 * Providers certified as fallbacks for an operation, with the evidence.  A
 * revoked certification keeps its row (revoked_at set) so that the history
 * of who was trusted, when and why stays readable.
 */
CREATE TABLE jobguard.certifications (
	operation		text NOT NULL,
	provider		text NOT NULL,
	evidence		jsonb,
	certified_at	timestamptz NOT NULL DEFAULT pg_catalog.now(),
	revoked_at		timestamptz,
	PRIMARY KEY (operation, provider),
	CONSTRAINT certifications_operation_length CHECK (pg_catalog.char_length(operation) BETWEEN 1 AND 63),
	CONSTRAINT certifications_provider_length CHECK (pg_catalog.char_length(provider) BETWEEN 1 AND 63)
);

COMMENT ON TABLE jobguard.certifications IS 'providers proven to honour an operation''s contract (revoked_at NULL = certified)';

/*
 * The state of an attempt as every rule sees it: a started attempt whose
 * deadline has passed is unknown, before anything writes that down.  This is
 * the one place that rule is written; the views and the C code both call it.
 */
CREATE FUNCTION jobguard.attempt_state(state text, deadline timestamptz)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN state = 'started' AND deadline <= pg_catalog.now()
			THEN 'unknown' ELSE state END;

COMMENT ON FUNCTION jobguard.attempt_state(text, timestamptz) IS 'effective attempt state: started past its deadline is unknown';

-- Every attempt with its effective state, for inspection.
CREATE VIEW jobguard.attempt_overview AS
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
	   a.error,
	   a.lost_to,
	   a.lost_result,
	   a.cancelled_at,
	   a.cancel_reason
  FROM jobguard.attempts a;

COMMENT ON VIEW jobguard.attempt_overview IS 'every attempt with its effective state (started past deadline shows as unknown)';

/*
 * Every job with its derived state.  The state is computed here and only
 * here (job_state() and job() read this view): succeeded, cancelled, then the
 * latest attempt decides (an open attempt is always the latest one, because
 * a new attempt can only begin once the previous one is closed).
 */
CREATE VIEW jobguard.job_overview AS
SELECT j.id AS job_id,
	   j.owner_id,
	   j.idempotency_key,
	   j.operation,
	   j.provider,
	   j.params,
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
	   j.result,
	   j.created_at,
	   j.completed_at,
	   j.cancelled_at
  FROM jobguard.jobs j
  LEFT JOIN LATERAL (
	   SELECT a.attempt_no, jobguard.attempt_state(a.state, a.deadline) AS state
		 FROM jobguard.attempts a
		WHERE a.job_id = j.id
		ORDER BY a.attempt_no DESC
		LIMIT 1) last ON true;

COMMENT ON VIEW jobguard.job_overview IS 'every job with its derived state, for psql inspection';

-- Providers and their certification status per operation.
CREATE VIEW jobguard.certification_overview AS
SELECT c.operation,
	   c.provider,
	   c.revoked_at IS NULL AS certified,
	   c.evidence,
	   c.certified_at,
	   c.revoked_at,
	   o.output_contract IS NOT NULL AS operation_has_contract
  FROM jobguard.certifications c
  LEFT JOIN jobguard.operations o ON o.operation = c.operation;

COMMENT ON VIEW jobguard.certification_overview IS 'which providers are certified for which operation, since when, with what evidence';

---------------------------------------------------------------------------
-- Writing functions: the only doors to the tables.
---------------------------------------------------------------------------

CREATE FUNCTION jobguard.submit(owner_id text,
								idempotency_key text,
								operation text,
								params jsonb,
								provider text,
								max_attempts integer DEFAULT NULL,
								OUT job_id bigint,
								OUT created boolean)
RETURNS record
AS 'MODULE_PATHNAME', 'jobguard_submit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.submit(text, text, text, jsonb, text, integer) IS 'create the job for (owner_id, idempotency_key), or return the existing one for the same request';

CREATE FUNCTION jobguard.begin_attempt(job_id bigint,
									   provider text DEFAULT NULL,
									   timeout interval DEFAULT '30 seconds',
									   attempt_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobguard_begin_attempt'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.begin_attempt(bigint, text, interval, text) IS 'start the next attempt of a job, unless one is still open';

CREATE FUNCTION jobguard.finish_attempt(attempt_id bigint, result jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_finish_attempt'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.finish_attempt(bigint, jsonb) IS 'report a result: won, lost (another attempt won) or rejected (breaks the output contract)';

CREATE FUNCTION jobguard.fail_attempt(attempt_id bigint, error text)
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_fail_attempt'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.fail_attempt(bigint, text) IS 'report that an attempt failed; opens the gate for the next one';

CREATE FUNCTION jobguard.mark_unknown(attempt_id bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_mark_unknown'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.mark_unknown(bigint) IS 'record that a caller saw a timeout: the attempt is unknown, not failed';

CREATE FUNCTION jobguard.cancel_attempt(attempt_id bigint, reason text)
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_cancel_attempt'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.cancel_attempt(bigint, text) IS 'stop waiting for an open attempt (out of band); its late result still goes through the compare-and-swap';

CREATE FUNCTION jobguard.cancel_job(job_id bigint, reason text)
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_cancel_job'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.cancel_job(bigint, text) IS 'cancel a job: no new attempts, later results lose';

CREATE FUNCTION jobguard.define_operation(operation text, output_contract jsonb)
RETURNS void
AS 'MODULE_PATHNAME', 'jobguard_define_operation'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.define_operation(text, jsonb) IS 'set or replace the output contract of an operation';

CREATE FUNCTION jobguard.certify_provider(operation text, provider text, evidence jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobguard_certify_provider'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.certify_provider(text, text, jsonb) IS 'record that a provider passed its contract tests for an operation';

CREATE FUNCTION jobguard.revoke_provider(operation text, provider text)
RETURNS void
AS 'MODULE_PATHNAME', 'jobguard_revoke_provider'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.revoke_provider(text, text) IS 'withdraw a provider''s certification for an operation';

---------------------------------------------------------------------------
-- Reading functions.
---------------------------------------------------------------------------

CREATE FUNCTION jobguard.check_result(operation text, result jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_check_result'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.check_result(text, jsonb) IS 'the first violation of the operation''s output contract by a result, or NULL; run it in a provider''s contract tests';

CREATE FUNCTION jobguard.job_state(job_id bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_job_state'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.job_state(bigint) IS 'the derived state of a job: pending, running, unknown, succeeded, failed or cancelled';

CREATE FUNCTION jobguard.job(job_id bigint)
RETURNS jobguard.job_overview
AS 'MODULE_PATHNAME', 'jobguard_job'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.job(bigint) IS 'one job with its derived state';

CREATE FUNCTION jobguard.attempts_of(job_id bigint)
RETURNS SETOF jobguard.attempt_overview
AS 'MODULE_PATHNAME', 'jobguard_attempts_of'
LANGUAGE C STABLE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.attempts_of(bigint) IS 'the attempts of one job, in order';

---------------------------------------------------------------------------
-- Operations: waiting, retention, counters.
---------------------------------------------------------------------------

CREATE FUNCTION jobguard.await(job_id bigint, timeout interval)
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_await'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.await(bigint, interval) IS 'wait until the job succeeds, fails or is cancelled, or the timeout passes; returns its state';

CREATE FUNCTION jobguard.purge(older_than interval, batch_size integer DEFAULT 1000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobguard_purge'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.purge(interval, integer) IS 'delete jobs terminal for longer than older_than, with their attempts; their keys can be used again';

CREATE FUNCTION jobguard.stats(OUT metric text, OUT value bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'jobguard_stats'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.stats() IS 'jobs and attempts by state, and event counters since start or stats_reset() (NULL unless preloaded)';

CREATE FUNCTION jobguard.stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'jobguard_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.stats_reset() IS 'set this database''s jobguard event counters back to zero';

CREATE FUNCTION jobguard.fast_path_status()
RETURNS text
AS 'MODULE_PATHNAME', 'jobguard_fast_path_status'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION jobguard.fast_path_status() IS 'on, or off and why: whether submit, begin_attempt and finish_attempt write their rows directly (see jobguard.fast_path)';

---------------------------------------------------------------------------
-- Sharding: ids that name their shard.
---------------------------------------------------------------------------

/*
 * This database's place among the shards of a deployment (one row, or none
 * for an unsharded database).  On shard k of n, job and attempt ids are
 * k, k + n, k + 2n, ... (with n instead of 0 for shard 0), so id % n names
 * the shard of any job or attempt and a call carrying only an id can be
 * routed.
 */
CREATE TABLE jobguard.shard (
	singleton		boolean PRIMARY KEY DEFAULT true CHECK (singleton),
	shard_no		integer NOT NULL,
	shard_count		integer NOT NULL,
	configured_at	timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT shard_count_power_of_two
		CHECK (shard_count BETWEEN 1 AND 1024 AND (shard_count & (shard_count - 1)) = 0),
	CONSTRAINT shard_no_in_range CHECK (shard_no >= 0 AND shard_no < shard_count)
);

COMMENT ON TABLE jobguard.shard IS 'this database''s shard number and the deployment''s shard count';

/*
 * configure_shard: make this database shard shard_no of shard_count.  Safe
 * before any job exists; refused (55000) once jobs exist, unless it is the
 * configuration already in force — re-applying that is how a shard restored
 * from pg_dump gets its id sequences back (pg_dump keeps their values, not
 * their increments).
 */
CREATE FUNCTION jobguard.configure_shard(shard_no integer, shard_count integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	current_config jobguard.shard;
	seq text;
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

	-- each sequence continues at the first id above every id it has given
	-- whose remainder is this shard's number
	FOREACH seq IN ARRAY ARRAY['jobs', 'attempts'] LOOP
		EXECUTE format('SELECT coalesce(max(id), 0) + 1 FROM jobguard.%I', seq) INTO next_id;
		next_id := next_id + ((shard_no - next_id % shard_count) + shard_count) % shard_count;
		EXECUTE format('ALTER SEQUENCE jobguard.%I INCREMENT BY %s MINVALUE 1 RESTART WITH %s',
					   seq || '_id_seq', shard_count, next_id);
	END LOOP;

	INSERT INTO jobguard.shard (shard_no, shard_count)
	VALUES (shard_no, shard_count)
	ON CONFLICT (singleton) DO UPDATE
		SET shard_no = EXCLUDED.shard_no, shard_count = EXCLUDED.shard_count,
			configured_at = pg_catalog.now();
END
$$;

COMMENT ON FUNCTION jobguard.configure_shard(integer, integer) IS 'make this database shard shard_no of shard_count: ids then encode the shard (id % shard_count = shard_no)';

---------------------------------------------------------------------------
-- Invariants, checked on demand (after a crash, a restore, an upgrade).
---------------------------------------------------------------------------

/*
 * One row per violated invariant; no rows means every guarantee holds.
 * SECURITY DEFINER so that operators with a reader grant can run it without
 * being able to read the tables directly.
 */
CREATE FUNCTION jobguard.check_invariants()
RETURNS TABLE (invariant text, job_id bigint, attempt_id bigint, detail text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT 'one job per key', min(j.id), NULL::bigint,
		   format('%s jobs for owner %L and key %L', count(*), j.owner_id, j.idempotency_key)
	  FROM jobguard.jobs j
	 GROUP BY j.owner_id, j.idempotency_key
	HAVING count(*) > 1
	UNION ALL
	SELECT 'at most one open attempt per job', a.job_id, min(a.id),
		   format('%s open attempts', count(*))
	  FROM jobguard.attempts a
	 WHERE a.state IN ('started', 'unknown')
	 GROUP BY a.job_id
	HAVING count(*) > 1
	UNION ALL
	SELECT 'completed_by is a succeeded attempt of the job', j.id, j.completed_by,
		   CASE WHEN a.id IS NULL THEN 'no such attempt of this job'
				ELSE format('the attempt is %s', a.state) END
	  FROM jobguard.jobs j
	  LEFT JOIN jobguard.attempts a ON a.id = j.completed_by AND a.job_id = j.id
	 WHERE j.completed_by IS NOT NULL AND (a.id IS NULL OR a.state <> 'succeeded')
	UNION ALL
	SELECT 'a succeeded attempt holds the result slot', a.job_id, a.id,
		   format('the job''s completed_by is %s', coalesce(j.completed_by::text, 'empty'))
	  FROM jobguard.attempts a
	  JOIN jobguard.jobs j ON j.id = a.job_id
	 WHERE a.state = 'succeeded' AND j.completed_by IS DISTINCT FROM a.id
	UNION ALL
	SELECT 'version matches the history', j.id, NULL,
		   format('version %s, expected %s', j.version, x.expected)
	  FROM jobguard.jobs j,
		   LATERAL (SELECT 1 + (j.completed_by IS NOT NULL)::int
					  + (j.cancelled_at IS NOT NULL)::int AS expected) x
	 WHERE j.version <> x.expected
	UNION ALL
	SELECT 'attempts read a version the job had', a.job_id, a.id,
		   format('read_version %s, job version %s', a.read_version, j.version)
	  FROM jobguard.attempts a
	  JOIN jobguard.jobs j ON j.id = a.job_id
	 WHERE a.read_version > j.version
	UNION ALL
	SELECT 'attempts are numbered 1, 2, ... per job', a.job_id, NULL,
		   format('%s attempts, numbered up to %s', count(*), max(a.attempt_no))
	  FROM jobguard.attempts a
	 GROUP BY a.job_id
	HAVING count(*) <> max(a.attempt_no)
	UNION ALL
	SELECT 'a lost attempt lost to the winner', a.job_id, a.id,
		   format('lost_to %s, the job''s completed_by %s', a.lost_to,
				  coalesce(j.completed_by::text, 'empty'))
	  FROM jobguard.attempts a
	  JOIN jobguard.jobs j ON j.id = a.job_id
	 WHERE a.state = 'lost' AND a.lost_to IS DISTINCT FROM j.completed_by
	ORDER BY 1, 2, 3
$$;

COMMENT ON FUNCTION jobguard.check_invariants() IS 'one row per violated invariant of jobguard; no rows means all guarantees hold';

---------------------------------------------------------------------------
-- Privileges: the functions are the only door to the tables.
---------------------------------------------------------------------------

/*
 * Nothing is granted to PUBLIC: not the tables (their owner's alone; the C
 * functions switch to that owner around table access), not EXECUTE on the
 * functions.  The grant functions below give a role exactly what it needs.
 */
REVOKE ALL ON ALL TABLES IN SCHEMA jobguard FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA jobguard FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA jobguard FROM PUBLIC;

/*
 * require_role: the checks every grant function makes on its argument: not
 * NULL (22004), and an existing role (42704).
 */
CREATE FUNCTION jobguard.require_role(role name, caller text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF role IS NULL THEN
		RAISE EXCEPTION 'argument "role" of jobguard.%() must not be null', caller
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF pg_catalog.to_regrole(pg_catalog.quote_ident(role)) IS NULL THEN
		RAISE EXCEPTION 'role "%" does not exist', role USING ERRCODE = 'undefined_object';
	END IF;
END
$$;

/*
 * grant_reader: what an operator needs to inspect jobguard from psql: the
 * views and the reading functions.  It cannot change anything.
 */
CREATE FUNCTION jobguard.grant_reader(role name)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM jobguard.require_role(role, 'grant_reader');
	EXECUTE format('GRANT USAGE ON SCHEMA jobguard TO %I', role);
	EXECUTE format('GRANT SELECT ON jobguard.job_overview, jobguard.attempt_overview,'
				   ' jobguard.certification_overview TO %I', role);
	EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.attempt_state(text, timestamptz),'
				   ' jobguard.job_state(bigint), jobguard.job(bigint), jobguard.attempts_of(bigint),'
				   ' jobguard.check_result(text, jsonb), jobguard.check_invariants(),'
				   ' jobguard.await(bigint, interval), jobguard.stats(),'
				   ' jobguard.fast_path_status() TO %I', role);
END
$$;

COMMENT ON FUNCTION jobguard.grant_reader(name) IS 'let a role inspect jobguard (views and reading functions), read-only';

/*
 * grant_client: what an application role needs: everything of a reader,
 * plus the calls that submit and run jobs.  Defining contracts and
 * certifying providers stay with the extension's owner (or whoever it
 * grants them to explicitly).
 */
CREATE FUNCTION jobguard.grant_client(role name)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM jobguard.require_role(role, 'grant_client');
	PERFORM jobguard.grant_reader(role);
	EXECUTE format('GRANT EXECUTE ON FUNCTION'
				   ' jobguard.submit(text, text, text, jsonb, text, integer),'
				   ' jobguard.begin_attempt(bigint, text, interval, text),'
				   ' jobguard.finish_attempt(bigint, jsonb),'
				   ' jobguard.fail_attempt(bigint, text),'
				   ' jobguard.mark_unknown(bigint),'
				   ' jobguard.cancel_attempt(bigint, text),'
				   ' jobguard.cancel_job(bigint, text) TO %I', role);
END
$$;

COMMENT ON FUNCTION jobguard.grant_client(name) IS 'let an application role call the jobguard API and read its jobs';

/* revoke_client: take back everything grant_client or grant_reader gave. */
CREATE FUNCTION jobguard.revoke_client(role name)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM jobguard.require_role(role, 'revoke_client');
	EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobguard FROM %I', role);
	EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA jobguard FROM %I', role);
	EXECUTE format('REVOKE USAGE ON SCHEMA jobguard FROM %I', role);
END
$$;

COMMENT ON FUNCTION jobguard.revoke_client(name) IS 'take back what grant_client or grant_reader gave a role';

/* The grant functions themselves are the owner's alone. */
REVOKE EXECUTE ON FUNCTION jobguard.require_role(name, text), jobguard.grant_reader(name),
	jobguard.grant_client(name), jobguard.revoke_client(name),
	jobguard.configure_shard(integer, integer) FROM PUBLIC;

---------------------------------------------------------------------------
-- pg_dump keeps the user data of these tables and sequences.
---------------------------------------------------------------------------

SELECT pg_catalog.pg_extension_config_dump('jobguard.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.jobs_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.attempts', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.attempts_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.operations', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.contract_version_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.certifications', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.shard', '');
