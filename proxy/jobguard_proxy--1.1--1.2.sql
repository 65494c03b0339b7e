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
-- Flow control: run_at and priority through submit and submit_many;
-- reschedule and retry_job routed by id.
---------------------------------------------------------------------------

/*
 * submit and submit_many take run_at and priority, as on the shards: the
 * 1.1 functions are replaced (an overload beside them would make every old
 * call ambiguous), and grant_client names the new ones.
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
				   ' jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer),'
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
				   ' jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[],'
				   ' timestamptz[], integer[]),'
				   ' jobguard.reschedule(bigint, timestamptz, integer),'
				   ' jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[]) TO %I', role);
	IF NOT EXISTS (SELECT 1 FROM pg_user_mappings m
				    WHERE m.srvname = 'jobguard_shards' AND m.usename = role) THEN
		RAISE WARNING 'role "%" has no user mapping for server jobguard_shards', role
			USING DETAIL = 'Its calls fail until it has one.',
				  HINT = format('CREATE USER MAPPING FOR %I SERVER jobguard_shards OPTIONS (user ''<shard role>'', password ''...'')', role);
	END IF;
END
$$;

/* the roles grant_client gave the 1.1 functions: the new ones (the
   dropped functions' rights went with them) */
DO LANGUAGE plpgsql $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT DISTINCT a.grantee::pg_catalog.regrole::pg_catalog.text AS role
			   FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
			  WHERE p.oid OPERATOR(pg_catalog.=) 'jobguard.begin_attempt(bigint, text, interval, text)'::pg_catalog.regprocedure
				AND a.grantee OPERATOR(pg_catalog.<>) p.proowner AND a.grantee OPERATOR(pg_catalog.<>) 0
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION'
								  ' jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer),'
								  ' jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[]),'
								  ' jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[], timestamptz[], integer[]),'
								  ' jobguard.reschedule(bigint, timestamptz, integer) TO %s', r.role);
	END LOOP;
END
$$;
