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
	IF NEW.kind IN ('client', 'operator') THEN
		EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.finish_many(bigint[], jsonb[]) TO %s',
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
				   'jobguard.grant_added_routines()'::pg_catalog.regprocedure])
		   AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM %s', g.routine, g.grantee);
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
END
$$;
