-- A unique index on the key that is not the only one: submit and
-- submit_many then run their inserts in a subtransaction, so that a unique
-- violation from a key index that ON CONFLICT does not arbitrate reads the
-- winner's job (t/005 races it).  Every other error ends that
-- subtransaction too and is raised as it was: the session, its
-- transaction block and its savepoints are as they would be without it.
\set VERBOSITY terse
TRUNCATE jobguard.jobs, jobguard.attempts RESTART IDENTITY;
CREATE UNIQUE INDEX jobs_key_again ON jobguard.jobs (scope, owner_id, idempotency_key)
  WHERE replaced_at IS NULL;
ALTER TABLE jobguard.jobs ADD CONSTRAINT no_forbidden CHECK (NOT params ? 'forbidden') NOT VALID;
SELECT job_id, created FROM jobguard.submit('ki', 'k1', 'op', '{}', 'p');
SELECT job_id, created FROM jobguard.submit('ki', 'k1', 'op', '{}', 'p');
-- another error, outside a transaction block: raised, and the next
-- statement runs
SELECT jobguard.submit('ki', 'k2', 'op', '{"forbidden": 1}', 'p');
SELECT count(*) AS jobs FROM jobguard.jobs WHERE owner_id = 'ki';
SELECT * FROM jobguard.submit_many(ARRAY['ki', 'ki'], ARRAY['k3', 'k4'], ARRAY['op', 'op'],
	ARRAY['{}', '{"forbidden": 1}']::jsonb[], ARRAY['p', 'p']);
SELECT count(*) AS jobs FROM jobguard.jobs WHERE owner_id = 'ki';
-- inside one, with a savepoint: ROLLBACK TO undoes exactly the failed call
BEGIN;
SELECT job_id, created FROM jobguard.submit('ki', 'k5', 'op', '{}', 'p');
SAVEPOINT before_error;
SELECT jobguard.submit('ki', 'k6', 'op', '{"forbidden": 1}', 'p');
ROLLBACK TO before_error;
SELECT job_id, created FROM jobguard.submit('ki', 'k5', 'op', '{}', 'p');
SELECT * FROM jobguard.submit_many(ARRAY['ki', 'ki', 'ki'], ARRAY['k7', 'k1', 'k7'],
	ARRAY['op', 'op', 'op'], ARRAY['{}', '{}', '{"other": 1}']::jsonb[], ARRAY['p', 'p', 'p']);
COMMIT;
-- and an error ends the transaction block as usual
BEGIN;
SELECT jobguard.submit('ki', 'k8', 'op', '{"forbidden": 1}', 'p');
SELECT 1;
ROLLBACK;
SELECT idempotency_key, version FROM jobguard.jobs WHERE owner_id = 'ki' ORDER BY id;
SELECT count(*) AS violations FROM jobguard.check_invariants();
ALTER TABLE jobguard.jobs DROP CONSTRAINT no_forbidden;
DROP INDEX jobguard.jobs_key_again;
