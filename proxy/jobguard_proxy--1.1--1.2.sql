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
		'jobguard.submit(text, text, text, jsonb, text, integer)',
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
		'jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[])',
		'jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[])',
		'jobguard.finish_many_on_shards(integer[], bigint[], jsonb[])',
		'jobguard.finish_many(bigint[], jsonb[])']) AS f;
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
