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
				   'jobguard.grant_added_routines()'::pg_catalog.regprocedure])
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
