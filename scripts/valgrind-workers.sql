-- scripts/valgrind-workers.sql: work for jobguard's background workers while
-- the server runs under valgrind (scripts/run-valgrind, preloaded pass).
-- Run in the database the launcher serves: the sweeper must write unknown
-- for overdue attempts, the claim floor must move, the notifier must send
-- the ends of jobs, and a waiting claim must be woken by a submit.  Each
-- step checks that the worker did its part, so the run proves the workers
-- ran (under valgrind) rather than merely existed.
\set ON_ERROR_STOP on
CREATE EXTENSION IF NOT EXISTS jobguard;
SELECT jobguard.stats_reset();

-- the launcher has started this database's sweeper and notifier
DO $$
BEGIN
	FOR i IN 1..600 LOOP
		EXIT WHEN (SELECT count(*) FROM pg_catalog.pg_stat_activity
				   WHERE datname = pg_catalog.current_database()
				   AND backend_type IN ('jobguard sweeper', 'jobguard notifier')) = 2;
		PERFORM pg_catalog.pg_sleep(0.2);
		-- pg_stat_activity is read once per transaction unless cleared
		PERFORM pg_catalog.pg_stat_clear_snapshot();
	END LOOP;
	IF (SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE datname = pg_catalog.current_database()
		AND backend_type IN ('jobguard sweeper', 'jobguard notifier')) <> 2 THEN
		RAISE EXCEPTION 'the sweeper and the notifier did not start';
	END IF;
END $$;

-- jobs, claimed with a short timeout: the sweeper marks them unknown
SELECT count(*) AS submitted FROM jobguard.submit_many(
	ARRAY(SELECT 'owner' FROM generate_series(1, 40)),
	ARRAY(SELECT 'k' || i FROM generate_series(1, 40) AS i),
	ARRAY(SELECT 'op' FROM generate_series(1, 40)),
	ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 40)),
	ARRAY(SELECT 'p' FROM generate_series(1, 40)));
SELECT count(*) AS claimed FROM jobguard.claim('w', timeout => '200 milliseconds', max_jobs => 20);
DO $$
BEGIN
	FOR i IN 1..600 LOOP
		EXIT WHEN (SELECT count(*) FROM jobguard.attempts WHERE state = 'unknown') = 20;
		PERFORM pg_catalog.pg_sleep(0.2);
	END LOOP;
	IF (SELECT count(*) FROM jobguard.attempts WHERE state = 'unknown') <> 20 THEN
		RAISE EXCEPTION 'the sweeper did not mark the overdue attempts unknown';
	END IF;
END $$;
SELECT value > 0 AS sweeper_counted FROM jobguard.stats() WHERE metric = 'sweeper.marked_unknown';

-- the unknown attempts are cancelled, their jobs claimed again and finished:
-- the claim floor is lowered by each commit, and each finish is a
-- notification for the notifier to send
SELECT count(*) AS cancelled FROM jobguard.attempts a,
	LATERAL jobguard.cancel_attempt(a.id, 'valgrind run') WHERE a.state = 'unknown';
LISTEN jobguard_jobs;
SELECT count(*) AS won FROM jobguard.claim('w', max_jobs => 40) c,
	LATERAL jobguard.finish_attempt(c.attempt_id, '{"ok": true}') AS f WHERE f = 'won';
SELECT count(*) AS succeeded FROM jobguard.job_overview WHERE state = 'succeeded';
-- a wait that the notifier's wake-up ends: await of a finished job
SELECT jobguard.await(min(job_id), '5 seconds') IS NOT NULL AS awaited FROM jobguard.job_overview;
SELECT count(*) AS violations FROM jobguard.check_invariants();
