/* jobguard_proxy--1.2--1.3.sql: update jobguard_proxy 1.2 to 1.3 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobguard_proxy UPDATE TO '1.3'" to load this file. \quit

/*
 * Failover routes through the proxy (jobguard 1.3, doc/reference.md,
 * "Version 1.3").  A route is configuration, as a contract or a
 * certification is: set_failover sets it on every shard.  Each shard's
 * claim chooses the provider of a job's next attempt by the route and the
 * job's attempts there (a job and its attempts live on one shard), so the
 * proxy's claim only carries the new argument (providers) and column
 * (failover); set_provider_policy carries paused.  The shards must run
 * jobguard 1.3.
 */

CREATE FUNCTION jobguard.set_failover_on_shards(operation text, providers text[], after_failures integer)
RETURNS SETOF integer
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT 1 FROM jobguard.set_failover(operation, providers, after_failures);
$$;

CREATE FUNCTION jobguard.set_failover(operation text, providers text[], after_failures integer DEFAULT 1)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT count(*) FROM jobguard.set_failover_on_shards(operation, providers, after_failures);
END;

COMMENT ON FUNCTION jobguard.set_failover(text, text[], integer) IS 'jobguard.set_failover on every shard';

REVOKE EXECUTE ON FUNCTION jobguard.set_failover_on_shards(text, text[], integer),
	jobguard.set_failover(text, text[], integer) FROM PUBLIC;

/*
 * set_provider_policy gains paused (1.3), the same on every shard (a pause
 * is no limit to divide); the limits are divided as in 1.2.
 */
DROP FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric);
DROP FUNCTION jobguard.set_provider_policy_on_shards(text, interval, integer, numeric);

CREATE FUNCTION jobguard.set_provider_policy_on_shards(provider text, dedupes_for interval,
													   max_in_flight integer,
													   max_per_second numeric, paused boolean)
RETURNS SETOF integer
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT 1 FROM jobguard.set_provider_policy(provider, dedupes_for, max_in_flight, max_per_second, paused);
$$;

CREATE FUNCTION jobguard.set_provider_policy(provider text, dedupes_for interval DEFAULT NULL,
											 max_in_flight integer DEFAULT NULL,
											 max_per_second numeric DEFAULT NULL,
											 paused boolean DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT count(*) FROM jobguard.set_provider_policy_on_shards(provider, dedupes_for,
		CASE WHEN max_in_flight > 0
			 THEN greatest(1, max_in_flight / jobguard.shard_count()) ELSE max_in_flight END,
		CASE WHEN max_per_second > 0
			 THEN trim_scale(max_per_second / jobguard.shard_count()) ELSE max_per_second END,
		paused);
END;

COMMENT ON FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric, boolean) IS 'jobguard.set_provider_policy on every shard, the limits divided among the shards';

REVOKE EXECUTE ON FUNCTION jobguard.set_provider_policy_on_shards(text, interval, integer, numeric, boolean),
	jobguard.set_provider_policy(text, interval, integer, numeric, boolean) FROM PUBLIC;

/*
 * claim takes providers and returns failover in 1.3.  A function's
 * arguments and result cannot change in place, so the three claim
 * functions are made again with them; what they do is 1.1's (doc in
 * jobguard_proxy--1.0--1.1.sql, "claim").
 */
DROP FUNCTION jobguard.claim(text, text[], interval, integer, text, interval, integer);
DROP FUNCTION jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer);
DROP FUNCTION jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval);

CREATE FUNCTION jobguard.claim_on_shard(shard integer, worker text, operations text[],
										timeout interval, max_jobs integer, provider text,
										wait interval, providers text[])
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz,
			   provider_key text, redrive boolean, failover boolean)
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON shard;
	SELECT * FROM jobguard.claim(worker, operations, timeout, max_jobs, provider, wait, providers);
$$;

COMMENT ON FUNCTION jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval, text[]) IS 'jobguard.claim on shard number shard';

CREATE FUNCTION jobguard.claim_in_turn(worker_name text, wanted_operations text[],
									   attempt_timeout interval, jobs_wanted integer,
									   via_provider text, wait_for interval, on_shard integer,
									   via_providers text[])
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz,
			   provider_key text, redrive boolean, failover boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	shards integer := jobguard.shard_count();
	start_at integer;
	got integer := 0;
	n integer;
	until timestamptz;
BEGIN
	IF $6 IS NULL THEN
		RAISE EXCEPTION 'argument "wait" of jobguard.claim() must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF $6 < interval '0' THEN
		RAISE EXCEPTION 'argument "wait" must not be negative'
			USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %s.', $6);
	END IF;
	IF $7 IS NOT NULL THEN
		RETURN QUERY SELECT * FROM jobguard.claim_on_shard($7, $1, $2, $3, $4, $5, $6, $8);
		RETURN;
	END IF;
	until := clock_timestamp() + $6;
	LOOP
		start_at := nextval('jobguard.claim_turn') % shards;
		FOR k IN 0 .. shards - 1 LOOP
			RETURN QUERY SELECT * FROM jobguard.claim_on_shard((start_at + k) % shards, $1, $2, $3,
															   $4 - got, $5, '0', $8);
			GET DIAGNOSTICS n = ROW_COUNT;
			got := got + n;
			EXIT WHEN got >= $4;
		END LOOP;
		EXIT WHEN got > 0 OR clock_timestamp() >= until;
		PERFORM pg_sleep(least(0.05, extract(epoch FROM until - clock_timestamp())));
	END LOOP;
END
$$;

COMMENT ON FUNCTION jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer, text[]) IS 'what jobguard.claim does on the proxy (its arguments named apart from its result columns, as PL/pgSQL needs)';

CREATE FUNCTION jobguard.claim(worker text,
							   operations text[] DEFAULT NULL,
							   timeout interval DEFAULT '30 seconds',
							   max_jobs integer DEFAULT 1,
							   provider text DEFAULT NULL,
							   wait interval DEFAULT '0',
							   shard integer DEFAULT NULL,
							   providers text[] DEFAULT NULL)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz,
			   provider_key text, redrive boolean, failover boolean)
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT * FROM jobguard.claim_in_turn(worker, operations, timeout, max_jobs, provider, wait, shard, providers);
END;

COMMENT ON FUNCTION jobguard.claim(text, text[], interval, integer, text, interval, integer, text[]) IS 'jobguard.claim on shard number shard, or (NULL) on the shards in turn until max_jobs are claimed; providers as on a shard';

REVOKE EXECUTE ON FUNCTION jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval, text[]),
	jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer, text[]),
	jobguard.claim(text, text[], interval, integer, text, interval, integer, text[]) FROM PUBLIC;

/*
 * client_functions: the 1.2 list with claim's 1.3 signatures.
 */
CREATE OR REPLACE FUNCTION jobguard.client_functions()
RETURNS SETOF regprocedure
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT f::regprocedure FROM unnest(ARRAY[
		'jobguard.route_owner(text)', 'jobguard.route_id(bigint)',
		'jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer)',
		'jobguard.begin_attempt(bigint, text, interval, text)',
		'jobguard.finish_attempt(bigint, jsonb)',
		'jobguard.fail_attempt(bigint, text, interval)',
		'jobguard.mark_unknown(bigint)',
		'jobguard.cancel_attempt(bigint, text)',
		'jobguard.cancel_job(bigint, text)',
		'jobguard.job_state(bigint)', 'jobguard.job(bigint)', 'jobguard.attempts_of(bigint)',
		'jobguard.await(bigint, interval)', 'jobguard.check_result(text, jsonb)',
		'jobguard.heartbeat(bigint, interval)',
		'jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval, text[])',
		'jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer, text[])',
		'jobguard.claim(text, text[], interval, integer, text, interval, integer, text[])',
		'jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[])',
		'jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[])',
		'jobguard.reschedule(bigint, timestamptz, integer)',
		'jobguard.finish_many_on_shards(integer[], bigint[], jsonb[])',
		'jobguard.finish_many(bigint[], jsonb[])',
		'jobguard.shard_count()',
		'jobguard.provider_key(bigint)', 'jobguard.redrive_attempt(bigint)',
		'jobguard.claim_unknown_on_shard(integer, text, text[], integer, interval, interval)',
		'jobguard.claim_unknown(text, text[], integer, interval, interval, integer)']) AS f;
$$;


/*
 * The roles grant_client made clients before this update: the claim
 * functions made again here (a dropped function's rights went with it).
 */
DO LANGUAGE plpgsql $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT DISTINCT a.grantee::pg_catalog.regrole::pg_catalog.text AS role
			   FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
			  WHERE p.oid OPERATOR(pg_catalog.=) 'jobguard.begin_attempt(bigint, text, interval, text)'::pg_catalog.regprocedure
				AND a.grantee OPERATOR(pg_catalog.<>) p.proowner AND a.grantee OPERATOR(pg_catalog.<>) 0
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s',
								  (SELECT pg_catalog.string_agg(f::pg_catalog.text, ', ')
									 FROM jobguard.client_functions() AS f), r.role);
	END LOOP;
END
$$;
