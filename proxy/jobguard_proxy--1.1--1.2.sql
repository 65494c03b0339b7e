/* jobguard_proxy--1.1--1.2.sql: update jobguard_proxy 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobguard_proxy UPDATE TO '1.2'" to load this file. \quit

/*
 * A client chooses nothing on the shards.  PL/Proxy needs USAGE on the
 * foreign server jobguard_shards for every role that calls through it, and
 * USAGE lets a role create, alter and drop its own user mapping: a client
 * could point its mapping at another shard role (ALTER USER MAPPING FOR
 * CURRENT_USER ... OPTIONS (SET user 'postgres')) and run on every shard
 * as whatever that role may do where the shards trust it.  This event
 * trigger refuses (42501) every CREATE and ALTER USER MAPPING on
 * jobguard_shards by a role that does not have the privileges of the
 * server's owner (superusers do): the server's owner alone decides which
 * shard role a proxy role runs as.  A client may still drop its own
 * mapping, which only takes its access away.
 */
CREATE FUNCTION jobguard.guard_user_mappings()
RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	command record;
	mapped_role text;
BEGIN
	FOR command IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
		IF command.classid = 'pg_catalog.pg_user_mapping'::regclass THEN
			SELECT m.usename INTO mapped_role
			  FROM pg_user_mappings m
			  JOIN pg_foreign_server s ON s.oid OPERATOR(pg_catalog.=) m.srvid
			 WHERE m.umid OPERATOR(pg_catalog.=) command.objid
			   AND s.srvname OPERATOR(pg_catalog.=) 'jobguard_shards'
			   AND NOT pg_has_role(current_user, s.srvowner, 'USAGE');
			IF FOUND THEN
				RAISE EXCEPTION 'only the owner of server jobguard_shards may create or alter its user mappings'
					USING ERRCODE = 'insufficient_privilege',
						  DETAIL = format('Role %I tried to %s the user mapping for %s.', current_user,
										  lower(split_part(command.command_tag, ' ', 1)), mapped_role),
						  HINT = 'A proxy role runs on the shards as the shard role its user mapping names, which the server''s owner sets.';
			END IF;
		END IF;
	END LOOP;
END
$$;

COMMENT ON FUNCTION jobguard.guard_user_mappings() IS 'event trigger: only the owner of server jobguard_shards creates or alters its user mappings';

CREATE EVENT TRIGGER jobguard_shards_user_mappings ON ddl_command_end
	WHEN TAG IN ('CREATE USER MAPPING', 'ALTER USER MAPPING')
	EXECUTE FUNCTION jobguard.guard_user_mappings();

REVOKE ALL ON FUNCTION jobguard.guard_user_mappings() FROM PUBLIC;

---------------------------------------------------------------------------
-- finish_many (jobguard 1.2): a batch of results, each on its attempt's shard
---------------------------------------------------------------------------

/*
 * finish_many, split by attempt: each shard gets the elements whose
 * attempts it holds (PL/Proxy's SPLIT, routed by route_id as
 * finish_attempt is) in one call, and the rows come back numbered as in
 * the input, element numbers in messages too.  The same attempt twice in
 * one call goes to the same shard, in input order, so the first still
 * decides.  Each shard's part commits there on its own.
 */
CREATE FUNCTION jobguard.finish_many_on_shards(ords integer[], attempt_ids bigint[],
											   results jsonb[])
RETURNS TABLE (ord integer, attempt_id bigint, outcome text, sqlstate text, message text)
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	SPLIT ALL;
	RUN ON jobguard.route_id(attempt_ids);
	SELECT (ords)[s.ord] AS ord,
		   s.attempt_id AS attempt_id, s.outcome AS outcome, s.sqlstate AS sqlstate,
		   replace(s.message, format('element %s of', s.ord),
				   format('element %s of', (ords)[s.ord])) AS message
	  FROM jobguard.finish_many(attempt_ids, results) s;
$$;

/*
 * finish_many on the proxy: the arrays checked here as the shards check
 * them (22004, 2202E, 22023, 54000), before anything is sent, then split
 * by shard; the rows back in input order.  An element without an attempt
 * id has no shard: its refusal row (22004, the shards' words) is made
 * here.
 */
CREATE FUNCTION jobguard.finish_many(attempt_ids bigint[], results jsonb[])
RETURNS TABLE (ord integer, attempt_id bigint, outcome text, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n integer := cardinality(attempt_ids);
	routed integer[];
BEGIN
	IF attempt_ids IS NULL OR results IS NULL THEN
		RAISE EXCEPTION 'argument "%" of jobguard.finish_many() must not be null',
			CASE WHEN attempt_ids IS NULL THEN 'attempt_ids' ELSE 'results' END
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF array_ndims(attempt_ids) > 1 OR array_ndims(results) > 1 THEN
		RAISE EXCEPTION 'the arrays of jobguard.finish_many() must have one dimension'
			USING ERRCODE = 'array_subscript_error';
	END IF;
	IF cardinality(results) <> n THEN
		RAISE EXCEPTION 'the arrays of jobguard.finish_many() must have the same length'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('attempt_ids has %s elements, results %s.', n, cardinality(results));
	END IF;
	IF n > 10000 THEN
		RAISE EXCEPTION 'jobguard.finish_many() takes at most 10000 elements in one call'
			USING ERRCODE = 'program_limit_exceeded', DETAIL = format('This call has %s.', n);
	END IF;
	routed := ARRAY(SELECT i FROM generate_series(1, n) AS i WHERE attempt_ids[i] IS NOT NULL);
	RETURN QUERY
		SELECT r.ord, r.attempt_id, r.outcome, r.sqlstate, r.message
		  FROM (SELECT s.ord, s.attempt_id, s.outcome, s.sqlstate, s.message
				  FROM jobguard.finish_many_on_shards(routed,
													  ARRAY(SELECT attempt_ids[i] FROM unnest(routed) AS i),
													  ARRAY(SELECT results[i] FROM unnest(routed) AS i)) s
				 WHERE cardinality(routed) > 0
				UNION ALL
				SELECT i, NULL::bigint, NULL::text, '22004'::text,
					   format('element %s of jobguard.finish_many()''s attempt_ids must not be null', i)
				  FROM generate_series(1, n) AS i
				 WHERE attempt_ids[i] IS NULL) r
		 ORDER BY 1;
END
$$;

COMMENT ON FUNCTION jobguard.finish_many(bigint[], jsonb[]) IS 'jobguard.finish_many, each result on the shard of its attempt, rows back in input order';

REVOKE EXECUTE ON FUNCTION jobguard.finish_many_on_shards(integer[], bigint[], jsonb[]),
	jobguard.finish_many(bigint[], jsonb[]) FROM PUBLIC;

/*
 * client_functions: the functions grant_client grants, in one list: the
 * API and the worker side.  A later version that adds a client function
 * replaces this list (CREATE OR REPLACE), not grant_client.
 */
CREATE FUNCTION jobguard.client_functions()
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
		'jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval)',
		'jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer)',
		'jobguard.claim(text, text[], interval, integer, text, interval, integer)',
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

COMMENT ON FUNCTION jobguard.client_functions() IS 'the functions jobguard.grant_client() grants a proxy role';

/*
 * grant_client: what an application role needs on the proxy: the
 * functions of client_functions(), the foreign server, the claim turn;
 * jobguard.grant_client() must have made its mapped shard role a client on
 * every shard.  Warns when the role has no user mapping yet: its calls
 * fail until it has one.
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
	EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I',
				   (SELECT string_agg(f::text, ', ') FROM jobguard.client_functions() AS f), role);
	IF NOT EXISTS (SELECT 1 FROM pg_user_mappings m
				    WHERE m.srvname = 'jobguard_shards' AND m.usename = role) THEN
		RAISE WARNING 'role "%" has no user mapping for server jobguard_shards', role
			USING DETAIL = 'Its calls fail until it has one.',
				  HINT = format('CREATE USER MAPPING FOR %I SERVER jobguard_shards OPTIONS (user ''<shard role>'', password ''...'')', role);
	END IF;
END
$$;

REVOKE ALL ON FUNCTION jobguard.client_functions() FROM PUBLIC;

---------------------------------------------------------------------------
-- Liveness (jobguard 1.2): provider keys, redrive, reconciliation, policies
---------------------------------------------------------------------------

/*
 * claim returns two more columns in 1.2: the attempt's provider_key and
 * whether the row is a redrive.  A function's result cannot change in
 * place, so the three claim functions are made again with them; what they
 * do is 1.1's (doc in jobguard_proxy--1.0--1.1.sql, "claim").
 */
DROP FUNCTION jobguard.claim(text, text[], interval, integer, text, interval, integer);
DROP FUNCTION jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer);
DROP FUNCTION jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval);

CREATE FUNCTION jobguard.claim_on_shard(shard integer, worker text, operations text[],
										timeout interval, max_jobs integer, provider text,
										wait interval)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz,
			   provider_key text, redrive boolean)
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON shard;
	SELECT * FROM jobguard.claim(worker, operations, timeout, max_jobs, provider, wait);
$$;

COMMENT ON FUNCTION jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval) IS 'jobguard.claim on shard number shard';

/*
 * shard_count: how many shards configure_proxy gave jobguard_shards (its
 * p0, p1, ... options).
 */
CREATE FUNCTION jobguard.shard_count()
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT count(*)::integer
	  FROM pg_foreign_server s, unnest(s.srvoptions) o
	 WHERE s.srvname = 'jobguard_shards' AND o ~ '^p[0-9]+=';
$$;

CREATE FUNCTION jobguard.claim_in_turn(worker_name text, wanted_operations text[],
									   attempt_timeout interval, jobs_wanted integer,
									   via_provider text, wait_for interval, on_shard integer)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz,
			   provider_key text, redrive boolean)
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
		RETURN QUERY SELECT * FROM jobguard.claim_on_shard($7, $1, $2, $3, $4, $5, $6);
		RETURN;
	END IF;
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
			   provider text, params jsonb, deadline timestamptz,
			   provider_key text, redrive boolean)
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT * FROM jobguard.claim_in_turn(worker, operations, timeout, max_jobs, provider, wait, shard);
END;

COMMENT ON FUNCTION jobguard.claim(text, text[], interval, integer, text, interval, integer) IS 'jobguard.claim on shard number shard, or (NULL) on the shards in turn until max_jobs are claimed';

-- an attempt's provider key and its redrive: on the attempt's shard
CREATE FUNCTION jobguard.provider_key(attempt_id bigint)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

COMMENT ON FUNCTION jobguard.provider_key(bigint) IS 'jobguard.provider_key on the shard of attempt_id';

CREATE FUNCTION jobguard.redrive_attempt(attempt_id bigint)
RETURNS bigint
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

COMMENT ON FUNCTION jobguard.redrive_attempt(bigint) IS 'jobguard.redrive_attempt on the shard of attempt_id';

/*
 * claim_unknown: unknown attempts live on the shards, so a reconciler
 * leases them from one shard (shard => k) or from the shards in turn,
 * starting at the next one (claim's turn), until it has max_rows.  Each
 * shard's lease commits there at once, as claim's attempts do.
 */
CREATE FUNCTION jobguard.claim_unknown_on_shard(shard integer, worker text, operations text[],
												max_rows integer, older_than interval,
												lease interval)
RETURNS TABLE (attempt_id bigint, job_id bigint, operation text, provider text,
			   provider_key text, params jsonb, unknown_since timestamptz, redrivable boolean)
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON shard;
	SELECT * FROM jobguard.claim_unknown(worker, operations, max_rows, older_than, lease);
$$;

CREATE FUNCTION jobguard.claim_unknown(worker text, operations text[] DEFAULT NULL,
									   max_rows integer DEFAULT 1,
									   older_than interval DEFAULT '0',
									   lease interval DEFAULT '30 seconds',
									   shard integer DEFAULT NULL)
RETURNS TABLE (attempt_id bigint, job_id bigint, operation text, provider text,
			   provider_key text, params jsonb, unknown_since timestamptz, redrivable boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	shards integer := jobguard.shard_count();
	start_at integer;
	got integer := 0;
	n integer;
BEGIN
	IF $6 IS NOT NULL THEN
		RETURN QUERY SELECT * FROM jobguard.claim_unknown_on_shard($6, $1, $2, $3, $4, $5);
		RETURN;
	END IF;
	start_at := nextval('jobguard.claim_turn') % shards;
	FOR k IN 0 .. shards - 1 LOOP
		RETURN QUERY SELECT * FROM jobguard.claim_unknown_on_shard((start_at + k) % shards, $1, $2,
																   $3 - got, $4, $5);
		GET DIAGNOSTICS n = ROW_COUNT;
		got := got + n;
		-- a bad argument is refused by the first shard; max_rows NULL or
		-- below 1 never gets here
		EXIT WHEN got >= $3;
	END LOOP;
END
$$;

COMMENT ON FUNCTION jobguard.claim_unknown(text, text[], integer, interval, interval, integer) IS 'jobguard.claim_unknown on shard number shard, or (NULL) on the shards in turn until max_rows are leased';

/*
 * set_provider_policy on every shard.  A provider's limits are kept by
 * each shard for its own attempts, so the proxy divides them: with n
 * shards each gets max_in_flight / n (rounded down, at least 1) and
 * max_per_second / n, and the sum over the shards never exceeds the
 * limit set (unless max_in_flight < n, where each shard still gets 1).
 * dedupes_for is the provider's promise and is the same everywhere.
 */
CREATE FUNCTION jobguard.set_provider_policy_on_shards(provider text, dedupes_for interval,
													   max_in_flight integer,
													   max_per_second numeric)
RETURNS SETOF integer
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT 1 FROM jobguard.set_provider_policy(provider, dedupes_for, max_in_flight, max_per_second);
$$;

CREATE FUNCTION jobguard.set_provider_policy(provider text, dedupes_for interval DEFAULT NULL,
											 max_in_flight integer DEFAULT NULL,
											 max_per_second numeric DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT count(*) FROM jobguard.set_provider_policy_on_shards(provider, dedupes_for,
		CASE WHEN max_in_flight > 0
			 THEN greatest(1, max_in_flight / jobguard.shard_count()) ELSE max_in_flight END,
		CASE WHEN max_per_second > 0
			 THEN trim_scale(max_per_second / jobguard.shard_count()) ELSE max_per_second END);
END;

COMMENT ON FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric) IS 'jobguard.set_provider_policy on every shard, the limits divided among the shards';

REVOKE EXECUTE ON FUNCTION jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval),
	jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer),
	jobguard.claim(text, text[], interval, integer, text, interval, integer),
	jobguard.shard_count(),
	jobguard.provider_key(bigint),
	jobguard.redrive_attempt(bigint),
	jobguard.claim_unknown_on_shard(integer, text, text[], integer, interval, interval),
	jobguard.claim_unknown(text, text[], integer, interval, interval, integer),
	jobguard.set_provider_policy_on_shards(text, interval, integer, numeric),
	jobguard.set_provider_policy(text, interval, integer, numeric) FROM PUBLIC;

---------------------------------------------------------------------------
-- Flow control: run_at and priority through submit and submit_many;
-- reschedule and retry_job routed by id.
---------------------------------------------------------------------------

/*
 * submit and submit_many take run_at and priority, as on the shards: the
 * 1.1 functions are replaced (an overload beside them would make every old
 * call ambiguous), and client_functions() names the new ones.
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
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_owner(owner_id);
$$;

COMMENT ON FUNCTION jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer) IS 'jobguard.submit on the shard of owner_id';

DROP FUNCTION jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]);
DROP FUNCTION jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[]);

/* submit_many's requests of each shard's owners, in one call per shard */
CREATE FUNCTION jobguard.submit_many_on_shards(ords integer[], owner_ids text[],
											   idempotency_keys text[], operations text[],
											   params jsonb[], providers text[],
											   max_attempts integer[], run_ats timestamptz[],
											   priorities integer[])
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
								max_attempts, run_ats, priorities) s;
$$;

CREATE FUNCTION jobguard.submit_many(owner_ids text[],
									 idempotency_keys text[],
									 operations text[],
									 params jsonb[],
									 providers text[],
									 max_attempts integer[] DEFAULT NULL,
									 run_ats timestamptz[] DEFAULT NULL,
									 priorities integer[] DEFAULT NULL)
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
									 ('max_attempts', array_ndims(max_attempts), cardinality(max_attempts)),
									 ('run_ats', array_ndims(run_ats), cardinality(run_ats)),
									 ('priorities', array_ndims(priorities), cardinality(priorities)))
							   AS a(name, dims, len)
	LOOP
		IF arg.len IS NULL AND arg.name NOT IN ('max_attempts', 'run_ats', 'priorities') THEN
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
											  coalesce(max_attempts, array_fill(NULL::integer, ARRAY[n])),
											  coalesce(run_ats, array_fill(NULL::timestamptz, ARRAY[n])),
											  coalesce(priorities, array_fill(NULL::integer, ARRAY[n]))) s
		 ORDER BY 1;
END
$$;

COMMENT ON FUNCTION jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[]) IS 'jobguard.submit_many, each request on the shard of its owner, rows back in input order';

CREATE FUNCTION jobguard.reschedule(job_id bigint, run_at timestamptz DEFAULT NULL,
									priority integer DEFAULT NULL)
RETURNS void
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(job_id);
$$;

COMMENT ON FUNCTION jobguard.reschedule(bigint, timestamptz, integer) IS 'jobguard.reschedule on the shard of job_id';

/* operators only on the shard (the mapped role must be one there) */
CREATE FUNCTION jobguard.retry_job(job_id bigint, extra_attempts integer DEFAULT 1,
								   reason text DEFAULT NULL)
RETURNS void
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(job_id);
$$;

COMMENT ON FUNCTION jobguard.retry_job(bigint, integer, text) IS 'jobguard.retry_job on the shard of job_id';

REVOKE EXECUTE ON FUNCTION jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer),
	jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[]),
	jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[]),
	jobguard.reschedule(bigint, timestamptz, integer),
	jobguard.retry_job(bigint, integer, text) FROM PUBLIC;

/*
 * The roles grant_client made clients before this update: the functions
 * of client_functions(), those this update made and those it made again
 * (a dropped function's rights went with it).
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
