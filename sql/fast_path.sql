-- The fast path (src/rows.c): submit, begin_attempt and finish_attempt
-- write their rows without SQL statements.  They must keep every rule of
-- the tables, step aside for anything a user added, and leave rows that
-- read exactly as the SQL path's.  (The whole regression and isolation
-- suites also run a second time with jobguard.fast_path = off.)
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
\i sql/include/helpers.sql
-- this file is about the fast path: on here even when the suites run with it off
SET jobguard.fast_path = on;
SELECT jobguard.fast_path_status();

-- the rows a lifecycle writes: every column, defaults included
SELECT * FROM jobguard.submit('alice', 'k1', 'charge', '{"amount": 1}', 'stripe', 3);
SELECT jobguard.begin_attempt(1, NULL, '30 seconds', 'w-1') AS k1_attempt \gset
SELECT jobguard.finish_attempt(:k1_attempt, '{"id": "ch_1"}');
SELECT id, owner_id, idempotency_key, operation, params, provider, max_attempts,
	   version, completed_by, result, created_at > now() - interval '1 minute' AS created_recently,
	   completed_at IS NOT NULL AS completed, cancelled_at, cancel_reason
  FROM jobguard.jobs;
SELECT id, job_id, attempt_no, provider, state, read_version, attempt_key,
	   deadline - started_at AS timeout, finished_at IS NOT NULL AS finished,
	   error, lost_to, lost_result
  FROM jobguard.attempts;

-- the same lifecycle through the SQL statements gives the same rows
SET jobguard.fast_path = off;
SELECT jobguard.fast_path_status();
SELECT * FROM jobguard.submit('alice', 'k2', 'charge', '{"amount": 1}', 'stripe', 3);
SELECT id AS k2_job FROM jobguard.jobs WHERE owner_id = 'alice' AND idempotency_key = 'k2' \gset
SELECT jobguard.begin_attempt(:k2_job, NULL, '30 seconds', 'w-1') AS k2_attempt \gset
SELECT jobguard.finish_attempt(:k2_attempt, '{"id": "ch_1"}');
SET jobguard.fast_path = on;
SELECT count(DISTINCT (j.operation, j.params, j.provider, j.max_attempts, j.version,
					   j.result, a.state, a.read_version, a.attempt_key,
					   a.deadline - a.started_at)) AS distinct_lifecycles
  FROM jobguard.jobs j JOIN jobguard.attempts a ON a.job_id = j.id;

-- a user's trigger on the tables: the fast path steps aside, so it fires
CREATE TABLE submitted_log (job_id bigint, owner_id text);
CREATE FUNCTION log_submit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO submitted_log VALUES (NEW.id, NEW.owner_id);
	RETURN NEW;
END $$;
CREATE TRIGGER log_submit AFTER INSERT ON jobguard.jobs
	FOR EACH ROW EXECUTE FUNCTION log_submit();
SELECT jobguard.fast_path_status();
SELECT job_id, created FROM jobguard.submit('bob', 'k1', 'charge', '{}', 'stripe');
SELECT job_id, created FROM jobguard.submit('bob', 'k1', 'charge', '{}', 'stripe');
SELECT * FROM submitted_log;
DROP TRIGGER log_submit ON jobguard.jobs;
SELECT jobguard.fast_path_status();
SELECT job_id, created FROM jobguard.submit('bob', 'k2', 'charge', '{}', 'stripe');
SELECT count(*) AS logged FROM submitted_log;

-- a CHECK constraint added to the table holds on the fast path too: same
-- SQLSTATE and message as the executor's, and nothing is written
ALTER TABLE jobguard.jobs ADD CONSTRAINT params_have_amount
	CHECK (operation <> 'charge' OR params ? 'amount') NOT VALID;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('carol', 'k1', 'charge', '{}', 'stripe')$$);
SET jobguard.fast_path = off;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('carol', 'k1', 'charge', '{}', 'stripe')$$);
SET jobguard.fast_path = on;
SELECT job_id, created FROM jobguard.submit('carol', 'k1', 'charge', '{"amount": 5}', 'stripe');
SELECT count(*) AS carol_jobs FROM jobguard.jobs WHERE owner_id = 'carol';
ALTER TABLE jobguard.jobs DROP CONSTRAINT params_have_amount;

-- and on an update: a rule on results applies to the compare-and-swap
ALTER TABLE jobguard.jobs ADD CONSTRAINT results_are_objects
	CHECK (jsonb_typeof(result) = 'object') NOT VALID;
SELECT id AS bob_k2 FROM jobguard.jobs WHERE owner_id = 'bob' AND idempotency_key = 'k2' \gset
SELECT jobguard.begin_attempt(:bob_k2) AS bob_k2_attempt \gset
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.finish_attempt(%s, '[1, 2]')$$, :bob_k2_attempt));
SELECT jobguard.job_state(:bob_k2), (SELECT state FROM jobguard.attempts WHERE id = :bob_k2_attempt);
SELECT jobguard.finish_attempt(:bob_k2_attempt, '{"id": "ch_5"}');
ALTER TABLE jobguard.jobs DROP CONSTRAINT results_are_objects;

-- a column added to a table the fast path does not know: SQL takes over,
-- so the column's default is filled in
ALTER TABLE jobguard.attempts ADD COLUMN region text DEFAULT 'eu';
SELECT jobguard.fast_path_status();
SELECT job_id AS dave_job FROM jobguard.submit('dave', 'k1', 'charge', '{"amount": 7}', 'stripe') \gset
SELECT jobguard.begin_attempt(:dave_job) AS dave_attempt \gset
SELECT job_id = :dave_job AS of_dave_job, region FROM jobguard.attempts WHERE id = :dave_attempt;
ALTER TABLE jobguard.attempts DROP COLUMN region;
-- with the column dropped again, the fast path is back
SELECT jobguard.fast_path_status();
SELECT jobguard.finish_attempt(:dave_attempt, '{"id": "ch_7"}');
SELECT jobguard.job_state(:dave_job);

-- a CHECK reading the whole row, or tableoid, works call after call
CREATE FUNCTION public.job_has_params(j jobguard.jobs) RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN RETURN j.params IS NOT NULL; END $$;
ALTER TABLE jobguard.jobs ADD CONSTRAINT whole_row CHECK (public.job_has_params(jobs)) NOT VALID;
ALTER TABLE jobguard.jobs ADD CONSTRAINT right_table CHECK (tableoid = 'jobguard.jobs'::regclass) NOT VALID;
SELECT g, s.created
  FROM generate_series(1, 3) g,
	   LATERAL jobguard.submit('frank', 'k' || g, 'charge', '{"amount": 1}', 'stripe') s;
ALTER TABLE jobguard.jobs DROP CONSTRAINT whole_row, DROP CONSTRAINT right_table;
DROP FUNCTION public.job_has_params(jobguard.jobs);

-- a function a CHECK calls is replaced: the next call uses the new one
CREATE FUNCTION public.params_ok(p jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$ SELECT true $$;
ALTER TABLE jobguard.jobs ADD CONSTRAINT params_ok CHECK (public.params_ok(params)) NOT VALID;
SELECT created FROM jobguard.submit('frank', 'k4', 'charge', '{}', 'stripe');
CREATE OR REPLACE FUNCTION public.params_ok(p jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$ SELECT p ? 'amount' $$;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('frank', 'k5', 'charge', '{}', 'stripe')$$);
ALTER TABLE jobguard.jobs DROP CONSTRAINT params_ok;
DROP FUNCTION public.params_ok(jsonb);

-- a replayed submit writes nothing, so it takes no transaction id (its
-- commit needs no WAL flush), on either path
BEGIN;
SELECT created FROM jobguard.submit('frank', 'k1', 'charge', '{"amount": 1}', 'stripe');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_on_fast_path;
COMMIT;
SET jobguard.fast_path = off;
BEGIN;
SELECT created FROM jobguard.submit('frank', 'k1', 'charge', '{"amount": 1}', 'stripe');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_on_sql_path;
COMMIT;
SET jobguard.fast_path = on;
-- a new one does
BEGIN;
SELECT created FROM jobguard.submit('frank', 'k9', 'charge', '{"amount": 1}', 'stripe');
SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS xid_for_an_insert;
COMMIT;

-- defaults come from the table, as INSERT takes them
ALTER TABLE jobguard.jobs ALTER created_at SET DEFAULT '2001-02-03 04:05:06+00';
SELECT job_id AS erin_job FROM jobguard.submit('erin', 'k1', 'charge', '{"amount": 1}', 'stripe') \gset
SELECT created_at = '2001-02-03 04:05:06+00' AS from_the_default
  FROM jobguard.jobs WHERE id = :erin_job;
ALTER TABLE jobguard.jobs ALTER created_at SET DEFAULT pg_catalog.now();

-- a read-only transaction cannot write through either path
BEGIN READ ONLY;
SELECT jobguard.fast_path_status();
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('erin', 'k2', 'charge', '{"amount": 1}', 'stripe')$$);
COMMIT;
SELECT count(*) AS erin_jobs FROM jobguard.jobs WHERE owner_id = 'erin';

SELECT * FROM jobguard.check_invariants();
DROP TABLE submitted_log;
DROP FUNCTION log_submit();
