-- Updating in place, to the default version (1.3): a 1.0 database holding
-- jobs in every state and 1.0 grants runs ALTER EXTENSION jobguard UPDATE.
-- Afterwards every job is where it was (in the scope default), the grants
-- are 1.1 grants, new ids are above every old one and never shared by a job
-- and an attempt, and the extension describes exactly what a fresh install
-- describes.  A 1.1 database holding a job updates likewise, and so does a
-- 1.2 one with certifications, a policy and an operator (its
-- certifications are marked with the contract version current at the
-- update).  (A fresh
-- install runs jobguard--1.0.sql and the update scripts in turn, so what
-- this compares is the update path from each older version against the
-- statements CREATE EXTENSION runs.)  The 1.0 database is kept, its tables
-- emptied once its jobs are checked: make test then runs every suite on it.
SELECT current_database() AS regress_db \gset
SET client_min_messages = warning;
DROP DATABASE IF EXISTS regress_jg_update;
DROP DATABASE IF EXISTS regress_jg_fresh;
DROP DATABASE IF EXISTS regress_jg_from_1_1;
DROP DATABASE IF EXISTS regress_jg_from_1_2;
RESET client_min_messages;
DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'regress_upd_client') THEN
		CREATE ROLE regress_upd_client;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'regress_upd_reader') THEN
		CREATE ROLE regress_upd_reader;
	END IF;
END $$;
CREATE DATABASE regress_jg_update;
CREATE DATABASE regress_jg_fresh;
CREATE DATABASE regress_jg_from_1_1;
CREATE DATABASE regress_jg_from_1_2;
\c regress_jg_fresh
CREATE EXTENSION jobguard;
SELECT extversion FROM pg_extension WHERE extname = 'jobguard';
\set ECHO none
\i sql/include/extension_shape.sql
\set ECHO all
SELECT string_agg(line, E'\x1e') AS fresh_shape FROM pg_temp.extension_shape() AS line \gset
\c regress_jg_update
\set ECHO none
\i sql/include/helpers.sql
\set ECHO all
CREATE EXTENSION jobguard VERSION '1.0';
\set ECHO none
\i sql/include/fill_1_0.sql
\set ECHO all
SELECT jobguard.grant_client('regress_upd_client');
SELECT jobguard.grant_reader('regress_upd_reader');
CREATE TABLE before_update AS
SELECT v.job_id, v.state, v.attempts, v.version, v.completed_by, v.params, v.result
  FROM jobguard.job_overview v;

ALTER EXTENSION jobguard UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'jobguard';

-- every job kept its state, params, result and history, in scope default
SELECT v.job_id, v.state, v.scope,
	   (v.state, v.attempts, v.version, v.completed_by, v.params, v.result)
	   IS NOT DISTINCT FROM (b.state, b.attempts, b.version, b.completed_by, b.params, b.result) AS unchanged
  FROM jobguard.job_overview v JOIN before_update b USING (job_id)
 ORDER BY v.job_id;
SELECT count(*) AS violations FROM jobguard.check_invariants();
-- 1.0's client is a client of scope default, its reader reads every scope
SELECT role, kind, scope, payloads FROM jobguard.grants ORDER BY role::text;
SET ROLE regress_upd_client;
SELECT jobguard.caller_scope();
-- a replay of a 1.0 request is still a replay; its running attempt still reports
SELECT job_id, created FROM jobguard.submit('alice', 'running', 'charge', '{"cents": 200}', 'stripe');
SELECT jobguard.finish_attempt(1, '{"charge": "ch_2"}');
SELECT jobguard.job_state(2);
-- the unknown attempt's gate stays closed, the failed job stays failed
SELECT pg_temp.sqlstate_of('SELECT jobguard.begin_attempt(3)') AS unknown_gate,
	   pg_temp.sqlstate_of('SELECT jobguard.begin_attempt(6)') AS failed_job;
RESET ROLE;
SET ROLE regress_upd_reader;
SELECT job_id, state, params IS NOT NULL AS sees_params FROM jobguard.job_overview ORDER BY job_id;
RESET ROLE;

-- new ids continue above every 1.0 id, and jobs and attempts no longer share them
SELECT job_id AS new_job FROM jobguard.submit('carol', 'after-update', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:new_job) AS new_attempt \gset
SELECT :new_job > 7 AND :new_attempt > 7 AND :new_job <> :new_attempt AS above_and_apart;
SELECT jobguard.finish_attempt(:new_job, '{}');
SELECT jobguard.finish_attempt(:new_attempt, '{"charge": "ch_new"}');
SELECT count(*) AS violations FROM jobguard.check_invariants();
DROP TABLE before_update;

-- the updated extension is the fresh one, fact for fact
\set ECHO none
\i sql/include/extension_shape.sql
\set ECHO all
SELECT count(*) > 100 AS described FROM pg_temp.extension_shape();
\set VERBOSITY terse
SELECT 'only after update' AS side, line FROM (
	SELECT line FROM pg_temp.extension_shape() AS line
	EXCEPT SELECT unnest(string_to_array(:'fresh_shape', E'\x1e'))) u
UNION ALL
SELECT 'only when fresh', line FROM (
	SELECT unnest(string_to_array(:'fresh_shape', E'\x1e')) AS line
	EXCEPT SELECT line FROM pg_temp.extension_shape() AS line) f
ORDER BY 1, 2;
-- make test runs the suites again on this database (its third pass).  They
-- start from empty tables, as all but the first empty them themselves: they
-- run on the updated schema, functions, sequence and grants, not on the
-- 1.0 jobs, which the checks above are the test of.  (Kept, those rows
-- would change the ids the first suite shows, and the next suite would
-- delete them.)
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;

-- 1.1 to the default version: a 1.1 database with a finished job and a
-- client keeps both, and then describes what a fresh install describes
\c regress_jg_from_1_1
CREATE EXTENSION jobguard VERSION '1.1';
SELECT jobguard.grant_client('regress_upd_client');
SET ROLE regress_upd_client;
SELECT job_id AS job_1_1 FROM jobguard.submit('dora', 'before-update', 'charge', '{"cents": 900}', 'stripe') \gset
RESET ROLE;
SELECT jobguard.begin_attempt(:job_1_1) AS attempt_1_1 \gset
SELECT jobguard.finish_attempt(:attempt_1_1, '{"charge": "ch_9"}');
-- a 1.1 history for the provider keys the update assigns: cancelled,
-- failed, cancelled against stripe, then adyen, then stripe again
SELECT jobguard.certify_provider('charge', 'adyen');
SELECT job_id AS keyed FROM jobguard.submit('erin', 'keys', 'charge', '{}', 'stripe') \gset
SELECT jobguard.cancel_attempt(jobguard.begin_attempt(:keyed), 'one');
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:keyed), 'two');
SELECT jobguard.cancel_attempt(jobguard.begin_attempt(:keyed), 'three');
SELECT jobguard.cancel_attempt(jobguard.begin_attempt(:keyed, 'adyen'), 'four');
SELECT jobguard.begin_attempt(:keyed) AS keyed_open \gset
CREATE TABLE before_update AS
SELECT v.job_id, v.state, v.scope, v.attempts, v.version, v.completed_by, v.params, v.result
  FROM jobguard.job_overview v;
ALTER EXTENSION jobguard UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'jobguard';
SELECT v.job_id = :job_1_1 AS same_job, v.state,
	   (v.state, v.scope, v.attempts, v.version, v.completed_by, v.params, v.result)
	   IS NOT DISTINCT FROM (b.state, b.scope, b.attempts, b.version, b.completed_by, b.params, b.result) AS unchanged
  FROM jobguard.job_overview v JOIN before_update b USING (job_id);
SELECT role, kind, scope, payloads FROM jobguard.grants ORDER BY role::text;
SET ROLE regress_upd_client;
SELECT job_id = :job_1_1 AS replayed, created
  FROM jobguard.submit('dora', 'before-update', 'charge', '{"cents": 900}', 'stripe');
RESET ROLE;
-- keys by the rule: the same as the latest earlier attempt against the
-- same provider unless that one failed; another job, another key
SELECT a.attempt_no, a.provider, a.state, a.provider_key ~ '^[0-9a-f]{32}$' AS format,
	   dense_rank() OVER (ORDER BY k.first_no) AS key_no, a.tries
  FROM jobguard.attempts a
  JOIN (SELECT provider_key, min(attempt_no) AS first_no FROM jobguard.attempts
		 WHERE job_id = :keyed GROUP BY 1) k USING (provider_key)
 WHERE a.job_id = :keyed ORDER BY a.attempt_no;
SELECT count(DISTINCT provider_key) = count(DISTINCT (job_id, provider_key)) AS keys_apart_across_jobs
  FROM jobguard.attempts;
-- the next attempt against stripe goes on with its key
SELECT jobguard.cancel_attempt(:keyed_open, 'five');
SELECT jobguard.begin_attempt(:keyed) AS keyed_next \gset
SELECT jobguard.provider_key(:keyed_next) = jobguard.provider_key(:keyed_open) AS continues;
-- the 1.1 client may call 1.2's functions (claim was made again) and read its views
SELECT has_function_privilege('regress_upd_client', 'jobguard.claim(text, text[], interval, integer, text, interval, text[])', 'EXECUTE') AS claim,
	   has_function_privilege('regress_upd_client', 'jobguard.redrive_attempt(bigint)', 'EXECUTE') AS redrive,
	   has_function_privilege('regress_upd_client', 'jobguard.claim_unknown(text, text[], integer, interval, interval)', 'EXECUTE') AS claim_unknown,
	   has_function_privilege('regress_upd_client', 'jobguard.provider_key(bigint)', 'EXECUTE') AS provider_key,
	   has_function_privilege('regress_upd_client', 'jobguard.set_provider_policy(text, interval, integer, numeric, boolean)', 'EXECUTE') AS set_policy,
	   has_table_privilege('regress_upd_client', 'jobguard.blocked_jobs', 'SELECT') AS blocked_jobs,
	   has_table_privilege('regress_upd_client', 'jobguard.provider_policies', 'SELECT') AS policies;
SELECT count(*) AS violations FROM jobguard.check_invariants();
SELECT jobguard.revoke_client('regress_upd_client');
DROP TABLE before_update;
\set ECHO none
\i sql/include/extension_shape.sql
\set ECHO all
SELECT 'only after update' AS side, line FROM (
	SELECT line FROM pg_temp.extension_shape() AS line
	EXCEPT SELECT unnest(string_to_array(:'fresh_shape', E'\x1e'))) u
UNION ALL
SELECT 'only when fresh', line FROM (
	SELECT unnest(string_to_array(:'fresh_shape', E'\x1e')) AS line
	EXCEPT SELECT line FROM pg_temp.extension_shape() AS line) f
ORDER BY 1, 2;

-- 1.2 to the default version: certifications earned before are taken as
-- earned under the contract current at the update (one of an operation
-- never defined under none); roles keep their rights and get 1.3's
\c regress_jg_from_1_2
CREATE EXTENSION jobguard VERSION '1.2';
CREATE ROLE regress_upd_operator;
SELECT jobguard.grant_client('regress_upd_client');
SELECT jobguard.grant_operator('regress_upd_operator');
SELECT jobguard.define_operation('charge', '{"type": "object"}');
SELECT jobguard.certify_provider('charge', 'adyen', '{"suite": "green"}');
SELECT jobguard.certify_provider('refund', 'adyen');
SELECT jobguard.set_provider_policy('stripe', dedupes_for => '1 day');
-- a granted role dropped since (DROP OWNED, DROP ROLE) leaves its grant's
-- bare OID: the update forgets that grant and goes on (no violation below)
CREATE ROLE regress_upd_gone;
SELECT jobguard.grant_client('regress_upd_gone');
DROP OWNED BY regress_upd_gone;
DROP ROLE regress_upd_gone;
SET ROLE regress_upd_client;
SELECT job_id AS job_1_2 FROM jobguard.submit('fay', 'before-update', 'charge', '{}', 'stripe') \gset
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:job_1_2), 'declined');
RESET ROLE;
ALTER EXTENSION jobguard UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'jobguard';
SELECT c.operation, c.provider, c.certified, c.stale,
	   c.contract_version IS NOT DISTINCT FROM o.contract_version AS current_version
  FROM jobguard.certification_overview c
  LEFT JOIN jobguard.operations o USING (operation) ORDER BY 1, 2;
SELECT provider, dedupes_for, paused FROM jobguard.provider_policies;
SELECT job_id = :job_1_2 AS same_job, state, next_provider FROM jobguard.job_overview;
-- the operator sets a route and pauses; the client claims through it
SET ROLE regress_upd_operator;
SELECT jobguard.set_failover('charge', '{adyen}');
SELECT jobguard.set_provider_policy('adyen', paused => true);
SELECT jobguard.set_provider_policy('adyen', paused => false);
RESET ROLE;
SET ROLE regress_upd_client;
SELECT operation, providers FROM jobguard.failover_routes;
SELECT job_id = :job_1_2 AS same_job, provider, failover FROM jobguard.claim('w');
RESET ROLE;
SELECT has_function_privilege('regress_upd_client', 'jobguard.set_failover(text, text[], integer)', 'EXECUTE') AS client_routes,
	   has_function_privilege('regress_upd_operator', 'jobguard.set_failover(text, text[], integer)', 'EXECUTE') AS operator_routes,
	   has_table_privilege('regress_upd_reader', 'jobguard.failover_routes', 'SELECT') AS ungranted_reads;
SELECT count(*) AS violations FROM jobguard.check_invariants();
SELECT jobguard.revoke_client('regress_upd_client');
SELECT jobguard.revoke_client('regress_upd_operator');
\set ECHO none
\i sql/include/extension_shape.sql
\set ECHO all
SELECT 'only after update' AS side, line FROM (
	SELECT line FROM pg_temp.extension_shape() AS line
	EXCEPT SELECT unnest(string_to_array(:'fresh_shape', E'\x1e'))) u
UNION ALL
SELECT 'only when fresh', line FROM (
	SELECT unnest(string_to_array(:'fresh_shape', E'\x1e')) AS line
	EXCEPT SELECT line FROM pg_temp.extension_shape() AS line) f
ORDER BY 1, 2;
\c :regress_db
DROP DATABASE regress_jg_fresh;
DROP DATABASE regress_jg_from_1_1;
DROP DATABASE regress_jg_from_1_2;
DROP ROLE regress_upd_operator;
