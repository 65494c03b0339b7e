-- configure_shard: on shard k of n, job and attempt ids are k (mod n), so
-- an id alone names its shard.  Runs last: it ends unsharded again.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
\i sql/include/helpers.sql

SELECT jobguard.configure_shard(2, 4);
SELECT shard_no, shard_count FROM jobguard.shard;
SELECT job_id, job_id % 4 AS shard FROM jobguard.submit('alice', 'k1', 'charge', '{}', 'stripe');
SELECT job_id, job_id % 4 AS shard FROM jobguard.submit('alice', 'k1', 'charge', '{}', 'stripe');
SELECT job_id, job_id % 4 AS shard FROM jobguard.submit('bob', 'k1', 'charge', '{}', 'stripe');
SELECT a, a % 4 AS shard FROM jobguard.begin_attempt(2) a;
SELECT jobguard.fail_attempt((SELECT id FROM jobguard.attempts WHERE job_id = 2), 'declined');
SELECT a, a % 4 AS shard FROM jobguard.begin_attempt(2) a;
SELECT bool_and(id % 4 = 2) AS all_job_ids_on_shard_2 FROM jobguard.jobs;
SELECT bool_and(id % 4 = 2) AS all_attempt_ids_on_shard_2 FROM jobguard.attempts;

-- once jobs exist, another configuration is refused; the same one is not
-- (a shard restored from pg_dump re-applies it to get its id sequence back)
SELECT jobguard.configure_shard(1, 4);
SELECT jobguard.configure_shard(2, 8);
SELECT jobguard.configure_shard(2, 4);
SELECT job_id, job_id % 4 AS shard FROM jobguard.submit('carol', 'k1', 'charge', '{}', 'stripe');

-- bad input
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	('SELECT jobguard.configure_shard(NULL, 4)'),
	('SELECT jobguard.configure_shard(0, NULL)'),
	('SELECT jobguard.configure_shard(0, 3)'),
	('SELECT jobguard.configure_shard(0, 0)'),
	('SELECT jobguard.configure_shard(0, 2048)'),
	('SELECT jobguard.configure_shard(4, 4)'),
	('SELECT jobguard.configure_shard(-1, 4)')
  ) AS t(call);

-- shard 0 never hands out id 0; with no jobs the configuration may change
TRUNCATE jobguard.jobs, jobguard.attempts;
SELECT jobguard.configure_shard(0, 4);
SELECT job_id FROM jobguard.submit('alice', 'k2', 'charge', '{}', 'stripe');
TRUNCATE jobguard.jobs, jobguard.attempts;
SELECT jobguard.configure_shard(0, 1);
SELECT job_id FROM jobguard.submit('alice', 'k3', 'charge', '{}', 'stripe');
SELECT count(*) AS violations FROM jobguard.check_invariants();
