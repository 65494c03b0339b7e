/* jobguard_proxy--1.0--1.1.sql: update jobguard_proxy 1.0 to 1.1 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobguard_proxy UPDATE TO '1.1'" to load this file. \quit

---------------------------------------------------------------------------
-- The worker side (jobguard 1.1): claim, heartbeat, retry backoff, batch
-- submit.
---------------------------------------------------------------------------

-- fail_attempt gains retry_in: on the shard of the attempt
DROP FUNCTION jobguard.fail_attempt(bigint, text);

CREATE FUNCTION jobguard.fail_attempt(attempt_id bigint, error text, retry_in interval DEFAULT NULL)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

COMMENT ON FUNCTION jobguard.fail_attempt(bigint, text, interval) IS 'jobguard.fail_attempt on the shard of attempt_id';

CREATE FUNCTION jobguard.heartbeat(attempt_id bigint, extend_by interval DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

COMMENT ON FUNCTION jobguard.heartbeat(bigint, interval) IS 'jobguard.heartbeat on the shard of attempt_id';

-- define_operation gains the retry policy: on every shard
DROP FUNCTION jobguard.define_operation(text, jsonb);
DROP FUNCTION jobguard.define_operation_on_shards(text, jsonb);

CREATE FUNCTION jobguard.define_operation_on_shards(operation text, output_contract jsonb,
													retry_backoff interval, retry_backoff_max interval)
RETURNS SETOF integer
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT 1 FROM jobguard.define_operation(operation, output_contract, retry_backoff, retry_backoff_max);
$$;

CREATE FUNCTION jobguard.define_operation(operation text, output_contract jsonb,
										  retry_backoff interval DEFAULT NULL,
										  retry_backoff_max interval DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT count(*) FROM jobguard.define_operation_on_shards(operation, output_contract,
															 retry_backoff, retry_backoff_max);
END;

COMMENT ON FUNCTION jobguard.define_operation(text, jsonb, interval, interval) IS 'jobguard.define_operation on every shard';

/*
 * claim.  Jobs live on the shards, so a claim runs on one shard: the one a
 * worker names (shard => k: a worker per shard, or a worker pinned to a
 * shard), or — shard NULL — the shards in turn, round robin: each call
 * starts at the next shard (a sequence of the proxy), takes what that shard
 * has, and goes on to the next while it has fewer than max_jobs; with wait
 * > 0 and nothing anywhere, it looks again every 50 ms until wait is over.
 * Each shard's claim commits there at once (PL/Proxy's autocommit), so a
 * claim through the proxy is never rolled back with the proxy's
 * transaction: a worker finds such attempts again by its name
 * (attempt_overview.worker on the shard).
 */
CREATE FUNCTION jobguard.claim_on_shard(shard integer, worker text, operations text[],
										timeout interval, max_jobs integer, provider text,
										wait interval)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz)
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON shard;
	SELECT * FROM jobguard.claim(worker, operations, timeout, max_jobs, provider, wait);
$$;

COMMENT ON FUNCTION jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval) IS 'jobguard.claim on shard number shard';

-- where the next round-robin claim of this proxy starts
CREATE SEQUENCE jobguard.claim_turn;

CREATE FUNCTION jobguard.claim_in_turn(worker_name text, wanted_operations text[],
									   attempt_timeout interval, jobs_wanted integer,
									   via_provider text, wait_for interval, on_shard integer)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	shards integer;
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
		RETURN QUERY SELECT * FROM jobguard.claim_on_shard($7, $1, $2, $3, $4, $5, $6);
		RETURN;
	END IF;
	SELECT count(*) INTO shards
	  FROM pg_foreign_server s, unnest(s.srvoptions) o
	 WHERE s.srvname = 'jobguard_shards' AND o ~ '^p[0-9]+=';
	until := clock_timestamp() + $6;
	LOOP
		start_at := nextval('jobguard.claim_turn') % shards;
		FOR k IN 0 .. shards - 1 LOOP
			RETURN QUERY SELECT * FROM jobguard.claim_on_shard((start_at + k) % shards, $1, $2, $3,
															   $4 - got, $5, '0');
			GET DIAGNOSTICS n = ROW_COUNT;
			got := got + n;
			EXIT WHEN got >= $4;
		END LOOP;
		EXIT WHEN got > 0 OR clock_timestamp() >= until;
		PERFORM pg_sleep(least(0.05, extract(epoch FROM until - clock_timestamp())));
	END LOOP;
END
$$;

COMMENT ON FUNCTION jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer) IS 'what jobguard.claim does on the proxy (its arguments named apart from its result columns, as PL/pgSQL needs)';

CREATE FUNCTION jobguard.claim(worker text,
							   operations text[] DEFAULT NULL,
							   timeout interval DEFAULT '30 seconds',
							   max_jobs integer DEFAULT 1,
							   provider text DEFAULT NULL,
							   wait interval DEFAULT '0',
							   shard integer DEFAULT NULL)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz)
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT * FROM jobguard.claim_in_turn(worker, operations, timeout, max_jobs, provider, wait, shard);
END;

COMMENT ON FUNCTION jobguard.claim(text, text[], interval, integer, text, interval, integer) IS 'jobguard.claim on shard number shard, or (NULL) on the shards in turn until max_jobs are claimed';

/*
 * submit_many, split by owner: each shard gets the requests of its owners
 * (PL/Proxy's SPLIT, routed by route_owner as submit is) in one call, and
 * the rows come back in input order, numbered as in the input.  Arrays of
 * unequal length are refused here, before anything is sent.  Each shard's
 * part commits there on its own.
 */
CREATE FUNCTION jobguard.submit_many_on_shards(ords integer[], owner_ids text[],
											   idempotency_keys text[], operations text[],
											   params jsonb[], providers text[],
											   max_attempts integer[])
RETURNS TABLE (ord integer, job_id bigint, created boolean, sqlstate text, message text)
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	SPLIT ALL;
	RUN ON jobguard.route_owner(owner_ids);
	SELECT (ords)[s.ord] AS ord,
		   s.job_id AS job_id, s.created AS created, s.sqlstate AS sqlstate,
		   replace(s.message, format('of request %s ', s.ord),
				   format('of request %s ', (ords)[s.ord])) AS message
	  FROM jobguard.submit_many(owner_ids, idempotency_keys, operations, params, providers,
								max_attempts) s;
$$;

CREATE FUNCTION jobguard.submit_many(owner_ids text[],
									 idempotency_keys text[],
									 operations text[],
									 params jsonb[],
									 providers text[],
									 max_attempts integer[] DEFAULT NULL)
RETURNS TABLE (ord integer, job_id bigint, created boolean, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n integer := cardinality(owner_ids);
	arg record;
BEGIN
	FOR arg IN SELECT * FROM (VALUES ('owner_ids', array_ndims(owner_ids), cardinality(owner_ids)),
									 ('idempotency_keys', array_ndims(idempotency_keys), cardinality(idempotency_keys)),
									 ('operations', array_ndims(operations), cardinality(operations)),
									 ('params', array_ndims(params), cardinality(params)),
									 ('providers', array_ndims(providers), cardinality(providers)),
									 ('max_attempts', array_ndims(max_attempts), cardinality(max_attempts)))
							   AS a(name, dims, len)
	LOOP
		IF arg.len IS NULL AND arg.name <> 'max_attempts' THEN
			RAISE EXCEPTION 'argument "%" of jobguard.submit_many() must not be null', arg.name
				USING ERRCODE = 'null_value_not_allowed';
		END IF;
		IF arg.dims > 1 THEN
			RAISE EXCEPTION 'argument "%" must be a one-dimensional array', arg.name
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		IF arg.len <> n THEN
			RAISE EXCEPTION 'the arrays of jobguard.submit_many() must all have the same length'
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = format('owner_ids has %s elements, %s %s.', n, arg.name, arg.len);
		END IF;
	END LOOP;
	IF n = 0 THEN
		RETURN;
	END IF;
	RETURN QUERY
		SELECT s.ord, s.job_id, s.created, s.sqlstate, s.message
		  FROM jobguard.submit_many_on_shards(ARRAY(SELECT generate_series(1, n)), owner_ids,
											  idempotency_keys, operations, params, providers,
											  coalesce(max_attempts, array_fill(NULL::integer, ARRAY[n]))) s
		 ORDER BY 1;
END
$$;

COMMENT ON FUNCTION jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]) IS 'jobguard.submit_many, each request on the shard of its owner, rows back in input order';

-- nothing for PUBLIC; grant_client gives the worker side too
REVOKE EXECUTE ON FUNCTION jobguard.fail_attempt(bigint, text, interval),
	jobguard.heartbeat(bigint, interval),
	jobguard.define_operation(text, jsonb, interval, interval),
	jobguard.define_operation_on_shards(text, jsonb, interval, interval),
	jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval),
	jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer),
	jobguard.claim(text, text[], interval, integer, text, interval, integer),
	jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[]),
	jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]) FROM PUBLIC;

/*
 * grant_client: let a role call the jobguard API through the proxy,
 * the worker side included (it needs jobguard.grant_client on every shard
 * too).
 */
CREATE OR REPLACE FUNCTION jobguard.grant_client(role name)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF role IS NULL THEN
		RAISE EXCEPTION 'argument "role" of jobguard.grant_client() must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF to_regrole(quote_ident(role)) IS NULL THEN
		RAISE EXCEPTION 'role "%" does not exist', role USING ERRCODE = 'undefined_object';
	END IF;
	EXECUTE format('GRANT USAGE ON SCHEMA jobguard TO %I', role);
	EXECUTE format('GRANT USAGE ON FOREIGN SERVER jobguard_shards TO %I', role);
	EXECUTE format('GRANT USAGE ON SEQUENCE jobguard.claim_turn TO %I', role);
	EXECUTE format('GRANT EXECUTE ON FUNCTION'
				   ' jobguard.route_owner(text), jobguard.route_id(bigint),'
				   ' jobguard.submit(text, text, text, jsonb, text, integer),'
				   ' jobguard.begin_attempt(bigint, text, interval, text),'
				   ' jobguard.finish_attempt(bigint, jsonb),'
				   ' jobguard.fail_attempt(bigint, text, interval),'
				   ' jobguard.mark_unknown(bigint),'
				   ' jobguard.cancel_attempt(bigint, text),'
				   ' jobguard.cancel_job(bigint, text),'
				   ' jobguard.job_state(bigint), jobguard.job(bigint), jobguard.attempts_of(bigint),'
				   ' jobguard.await(bigint, interval), jobguard.check_result(text, jsonb),'
				   ' jobguard.heartbeat(bigint, interval),'
				   ' jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval),'
				   ' jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer),'
				   ' jobguard.claim(text, text[], interval, integer, text, interval, integer),'
				   ' jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[]),'
				   ' jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]) TO %I', role);
END
$$;
