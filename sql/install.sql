-- Install hardening: CREATE EXTENSION refuses a schema named jobguard that
-- somebody else owns (the squatted-schema escalation), takes back what
-- ALTER DEFAULT PRIVILEGES would have granted on jobguard's objects, and no
-- SECURITY DEFINER SQL function resolves a table by name when it runs.
-- Each case runs in a database of its own.
SELECT current_database() AS regress_db \gset
CREATE ROLE regress_jg_dbowner;
CREATE ROLE regress_jg_app;
CREATE DATABASE regress_jg_install OWNER regress_jg_dbowner;
\c regress_jg_install

-- the database owner creates the schema before the superuser installs
SET ROLE regress_jg_dbowner;
CREATE SCHEMA jobguard;
RESET ROLE;
-- (no CONTEXT: from PostgreSQL 18 on it also quotes the script's statement)
\set VERBOSITY default
\set SHOW_CONTEXT never
CREATE EXTENSION jobguard;
\set SHOW_CONTEXT errors
\set VERBOSITY terse
SELECT count(*) AS jobguard_objects FROM pg_depend d
  JOIN pg_extension e ON e.oid = d.refobjid WHERE e.extname = 'jobguard';
-- once the schema is the installer's, the install goes through
DROP SCHEMA jobguard;
CREATE EXTENSION jobguard;
SELECT nspowner::regrole AS schema_owner FROM pg_namespace WHERE nspname = 'jobguard';
-- the database owner cannot rename it or create in it
SET ROLE regress_jg_dbowner;
ALTER SCHEMA jobguard RENAME TO jobguard_old;
CREATE VIEW jobguard.attempts_spy AS SELECT 1 AS x;
RESET ROLE;
-- a schema that changed hands after the install is refused by every call
ALTER SCHEMA jobguard OWNER TO regress_jg_dbowner;
SELECT * FROM jobguard.submit('o', 'k', 'op', '{}', 'p');
ALTER SCHEMA jobguard OWNER TO CURRENT_USER;
SELECT created FROM jobguard.submit('o', 'k', 'op', '{}', 'p');
-- no SECURITY DEFINER function of jobguard is SQL resolving names at run
-- time: the only SQL function bodies run as their caller, or are bound to
-- the tables at creation (BEGIN ATOMIC)
SELECT p.proname, p.prosecdef, l.lanname, p.prosqlbody IS NOT NULL AS bound_at_creation
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'jobguard'::regnamespace
   AND (p.prosecdef OR l.lanname = 'sql')
 ORDER BY 1;
\c :regress_db
DROP DATABASE regress_jg_install;

-- default privileges in force for the installer reach none of the new
-- objects: they are taken back, with a WARNING
CREATE DATABASE regress_jg_install;
\c regress_jg_install
ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO regress_jg_app;
ALTER DEFAULT PRIVILEGES GRANT ALL ON SEQUENCES TO regress_jg_app;
ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO regress_jg_app;
ALTER DEFAULT PRIVILEGES GRANT ALL ON SCHEMAS TO regress_jg_app;

\set VERBOSITY default
CREATE EXTENSION jobguard;

\set VERBOSITY terse
SELECT has_table_privilege('regress_jg_app', 'jobguard.jobs', 'UPDATE') AS update_jobs,
	   has_table_privilege('regress_jg_app', 'jobguard.grants', 'INSERT') AS insert_grants,
	   has_sequence_privilege('regress_jg_app', 'jobguard.id_seq', 'USAGE') AS use_ids,
	   has_function_privilege('regress_jg_app', 'jobguard.define_operation(text, jsonb, interval, interval)', 'EXECUTE') AS define_operation,
	   has_function_privilege('regress_jg_app', 'jobguard.certify_provider(text, text, jsonb)', 'EXECUTE') AS certify_provider,
	   has_function_privilege('regress_jg_app', 'jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer)', 'EXECUTE') AS submit,
	   has_function_privilege('regress_jg_app', 'jobguard.purge_batches(interval, integer)', 'EXECUTE') AS purge_batches,
	   has_schema_privilege('regress_jg_app', 'jobguard', 'CREATE') AS create_in_schema;
-- the role gets exactly what a grant function gives, and nothing more
SELECT jobguard.grant_client('regress_jg_app');
SELECT has_function_privilege('regress_jg_app', 'jobguard.submit(text, text, text, jsonb, text, integer, timestamptz, integer)', 'EXECUTE') AS submit,
	   has_function_privilege('regress_jg_app', 'jobguard.define_operation(text, jsonb, interval, interval)', 'EXECUTE') AS define_operation,
	   has_table_privilege('regress_jg_app', 'jobguard.jobs', 'SELECT') AS read_jobs;
SELECT jobguard.revoke_client('regress_jg_app');
\c :regress_db
DROP DATABASE regress_jg_install;
DROP ROLE regress_jg_dbowner, regress_jg_app;
