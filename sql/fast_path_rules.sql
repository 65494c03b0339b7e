-- Whatever the executor checks for the statement the fast path stands in
-- for, the fast path checks too, or steps aside: each case below is run on
-- both paths in turn, and both must answer alike.  (Each failed on the fast
-- path before it was fixed; see issue 14.)
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
\i sql/include/helpers.sql
SET jobguard.fast_path = on;
SELECT jobguard.fast_path_status();

-- 1. A second unique index on the key is an arbiter of INSERT ... ON
-- CONFLICT (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL
-- too: a key conflicting in it alone (here, the same key in other case) is
-- no 23505 on either path.
CREATE COLLATION case_insensitive (provider = icu, locale = 'und-u-ks-level2',
								   deterministic = false);
CREATE UNIQUE INDEX jobs_key_any_case
	ON jobguard.jobs (idempotency_key COLLATE case_insensitive, owner_id, scope)
	WHERE replaced_at IS NULL;
SELECT jobguard.fast_path_status();
SELECT job_id, created FROM jobguard.submit('alice', 'k1', 'charge', '{}', 'stripe');
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'K1', 'charge', '{}', 'stripe')$$)
	AS fast_path;
SET jobguard.fast_path = off;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'K1', 'charge', '{}', 'stripe')$$)
	AS sql_path;
SET jobguard.fast_path = on;
SELECT count(*) AS alice_jobs FROM jobguard.jobs WHERE owner_id = 'alice';
DROP INDEX jobguard.jobs_key_any_case;
DROP COLLATION case_insensitive;

-- 2. A publication that publishes updates: an update of a table without a
-- replica identity, or whose column list leaves out the replica identity,
-- is refused before anything is written, on both paths
SET client_min_messages = error;	-- the warning depends on wal_level
CREATE PUBLICATION jobs_pub FOR TABLE jobguard.jobs, jobguard.attempts;
RESET client_min_messages;
SELECT job_id AS bob_job1 FROM jobguard.submit('bob', 'k1', 'charge', '{}', 'stripe') \gset
SELECT job_id AS bob_job2 FROM jobguard.submit('bob', 'k2', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:bob_job1) AS bob_attempt1 \gset
SELECT jobguard.begin_attempt(:bob_job2) AS bob_attempt2 \gset
ALTER TABLE jobguard.jobs REPLICA IDENTITY NOTHING;
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.finish_attempt(%s, %L)', :bob_attempt1, '{"id": 1}'))
	AS fast_path;
SET jobguard.fast_path = off;
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.finish_attempt(%s, %L)', :bob_attempt2, '{"id": 1}'))
	AS sql_path;
SET jobguard.fast_path = on;
ALTER TABLE jobguard.jobs REPLICA IDENTITY DEFAULT;
ALTER PUBLICATION jobs_pub SET TABLE jobguard.jobs (owner_id, result), jobguard.attempts;
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.finish_attempt(%s, %L)', :bob_attempt1, '{"id": 1}'))
	AS fast_path;
SET jobguard.fast_path = off;
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.finish_attempt(%s, %L)', :bob_attempt2, '{"id": 1}'))
	AS sql_path;
SET jobguard.fast_path = on;
SELECT id, jobguard.job_state(job_id), state FROM jobguard.attempts
 WHERE id IN (:bob_attempt1, :bob_attempt2) ORDER BY id;
-- inserts need no replica identity
SELECT created FROM jobguard.submit('bob', 'k3', 'charge', '{}', 'stripe');
DROP PUBLICATION jobs_pub;
SELECT jobguard.finish_attempt(:bob_attempt1, '{"id": 1}');
SELECT jobguard.finish_attempt(:bob_attempt2, '{"id": 1}');

-- 3. A CHECK calling a function that claims to be IMMUTABLE but reads a
-- table: planned for every statement, as the executor plans it, so a
-- change to the table is seen by the next call of this very backend
CREATE TABLE banned_operations (operation text);
CREATE FUNCTION public.refunds_banned() RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	RETURN EXISTS (SELECT 1 FROM banned_operations WHERE operation = 'refund');
END $$;
ALTER TABLE jobguard.jobs ADD CONSTRAINT refunds_allowed
	CHECK (operation <> 'refund' OR NOT public.refunds_banned()) NOT VALID;
SELECT created FROM jobguard.submit('carol', 'k1', 'refund', '{}', 'stripe');
INSERT INTO banned_operations VALUES ('refund');
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('carol', 'k2', 'refund', '{}', 'stripe')$$)
	AS fast_path;
SET jobguard.fast_path = off;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('carol', 'k2', 'refund', '{}', 'stripe')$$)
	AS sql_path;
SET jobguard.fast_path = on;
DELETE FROM banned_operations;
SELECT created FROM jobguard.submit('carol', 'k2', 'refund', '{}', 'stripe');
ALTER TABLE jobguard.jobs DROP CONSTRAINT refunds_allowed;
DROP FUNCTION public.refunds_banned();
DROP TABLE banned_operations;

-- 4. A NOT VALID CHECK on attempts that fails when it is planned: only a
-- call that writes a row of attempts plans it and fails; submit and
-- fast_path_status() do not touch it
SELECT job_id AS dave_job FROM jobguard.submit('dave', 'k1', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:dave_job) AS dave_attempt \gset
ALTER TABLE jobguard.attempts ADD CONSTRAINT broken CHECK (attempt_no > 1 / 0) NOT VALID;
SELECT jobguard.fast_path_status();
SELECT created FROM jobguard.submit('dave', 'k2', 'charge', '{}', 'stripe');
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.finish_attempt(%s, %L)', :dave_attempt, '{"id": 1}'))
	AS fast_path;
SET jobguard.fast_path = off;
SELECT created FROM jobguard.submit('dave', 'k3', 'charge', '{}', 'stripe');
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.finish_attempt(%s, %L)', :dave_attempt, '{"id": 1}'))
	AS sql_path;
SET jobguard.fast_path = on;
-- a begin that writes a row plans it, on both paths
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s)$$, id)) AS fast_path
  FROM jobguard.jobs WHERE owner_id = 'dave' AND idempotency_key = 'k2';
SET jobguard.fast_path = off;
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s)$$, id)) AS sql_path
  FROM jobguard.jobs WHERE owner_id = 'dave' AND idempotency_key = 'k3';
SET jobguard.fast_path = on;
-- a begin that the gate refuses writes no row, so plans no CHECK
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s)$$, :dave_job)) AS refused;
SET jobguard.fast_path = off;
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s)$$, :dave_job)) AS refused;
SET jobguard.fast_path = on;
ALTER TABLE jobguard.attempts DROP CONSTRAINT broken;
SELECT jobguard.finish_attempt(:dave_attempt, '{"id": 1}');

SELECT jobguard.fast_path_status();
SELECT * FROM jobguard.check_invariants();
