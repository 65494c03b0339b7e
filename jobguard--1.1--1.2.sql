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
 * enforced on every begin by src/limits.c: the provider's policy row is
 * locked, the open attempts against it counted (by the index below), and
 * the token bucket of max_per_second kept in the row itself (tokens at
 * tokens_at; NULL: full).  throttled counts the starts claim passed over
 * for a limit.  Backends cache which providers have limits; a change of
 * the limits (not of the bucket) tells them to read them again.
 */
ALTER TABLE jobguard.provider_policy
	ADD COLUMN tokens double precision,
	ADD COLUMN tokens_at timestamptz,
	ADD COLUMN throttled bigint NOT NULL DEFAULT 0;

CREATE INDEX attempts_open_by_provider
	ON jobguard.attempts (provider)
	WHERE state IN ('started', 'unknown');

COMMENT ON INDEX jobguard.attempts_open_by_provider IS 'open attempts (started or unknown) per provider: what max_in_flight counts';

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
	EXECUTE format('GRANT SELECT ON jobguard.provider_policies TO %s', NEW.role);
	IF NEW.kind IN ('client', 'operator') THEN
		EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.finish_many(bigint[], jsonb[]) TO %s',
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
				   'jobguard.provider_policies'::pg_catalog.regclass])
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
		EXECUTE pg_catalog.format('GRANT SELECT ON jobguard.provider_policies TO %s', g.role);
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
