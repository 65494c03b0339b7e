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
