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
 * Nothing yet: 1.2's library serves the 1.1 definitions unchanged.  The
 * additions of 1.2 (see doc/reference.md) come here as they are built.
 * An object created here gets the default privileges the updating role has
 * in force: end the script with the default-privileges pass that ends
 * jobguard--1.0--1.1.sql once it creates any, and REVOKE ... FROM PUBLIC
 * what jobguard's grant functions alone should give.
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
