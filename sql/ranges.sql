-- Ranges: every number an operator or a client gives jobguard is checked
-- at the call (22023, naming the argument and its range, nothing
-- written), and no value already stored (written before these checks, or
-- into the tables by hand) breaks a call that does not use it.  Durations
-- are at most 100 years; max_per_second is 0.0001 to 1000000.
\i sql/include/helpers.sql
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
DELETE FROM jobguard.provider_policy;
SELECT jobguard.define_operation('rng', '{}');
SELECT job_id AS job FROM jobguard.submit('rng', 'k1', 'rng', '{}', 'rng_p') \gset
SELECT jobguard.begin_attempt(:job) AS attempt \gset

-- out of range at the call: refused, nothing written
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	($$SELECT jobguard.set_provider_policy('rng_p', max_per_second => 1e-400)$$),
	($$SELECT jobguard.set_provider_policy('rng_p', max_per_second => 1e400)$$),
	($$SELECT jobguard.set_provider_policy('rng_p', max_per_second => 0.00009)$$),
	($$SELECT jobguard.set_provider_policy('rng_p', max_per_second => 1000001)$$),
	($$SELECT jobguard.set_provider_policy('rng_p', dedupes_for => '178000000 years')$$),
	($$SELECT jobguard.set_provider_policy('rng_p', dedupes_for => '100 years 1 second')$$),
	($$SELECT jobguard.define_operation('rng2', '{}', retry_backoff => '101 years')$$),
	($$SELECT jobguard.define_operation('rng2', '{}', retry_backoff => '1 day', retry_backoff_max => '101 years')$$),
	($$SELECT jobguard.fail_attempt(2, 'x', retry_in => '101 years')$$),
	($$SELECT jobguard.begin_attempt(1, timeout => '101 years')$$),
	($$SELECT jobguard.heartbeat(2, '101 years')$$),
	($$SELECT jobguard.claim('w', timeout => '101 years')$$),
	($$SELECT jobguard.claim_unknown('w', older_than => '101 years')$$),
	($$SELECT jobguard.claim_unknown('w', lease => '101 years')$$),
	($$SELECT jobguard.purge('101 years')$$),
	($$CALL jobguard.purge_batches('101 years', 10)$$)
  ) AS t(call);
SELECT count(*) AS provider_policies FROM jobguard.provider_policy;
SELECT count(*) AS operations FROM jobguard.operations WHERE operation = 'rng2';
SELECT state FROM jobguard.attempts_of(:job);

-- the widest values in range are taken, and work
SELECT jobguard.set_provider_policy('rng_wide', dedupes_for => '100 years', max_per_second => 0.0001);
SELECT jobguard.set_provider_policy('rng_fast', max_per_second => 1000000);
SELECT jobguard.define_operation('rng_slow', '{}', retry_backoff => '100 years', retry_backoff_max => '100 years');
SELECT jobguard.heartbeat(:attempt, '100 years') > pg_catalog.now() + interval '99 years' AS far;
SELECT jobguard.fail_attempt(:attempt, 'declined', retry_in => '100 years');
SELECT (jobguard.job(:job)).state;

-- values stored by hand, beyond every range: each call that does not use
-- them still works, and those that do use them work as with the widest
-- value in range
UPDATE jobguard.provider_policy SET max_per_second = 1e-400 WHERE provider = 'rng_wide';
INSERT INTO jobguard.provider_policy (provider, dedupes_for, max_per_second)
	VALUES ('rng_huge', '178000000 years', 1e400);
UPDATE jobguard.operations SET retry_backoff = '1 day', retry_backoff_max = '178000000 years' WHERE operation = 'rng';
SELECT job_id AS job2 FROM jobguard.submit('rng', 'k2', 'rng', '{}', 'rng_other') \gset
SELECT jobguard.begin_attempt(:job2) IS NOT NULL AS begun;
SELECT count(*) FROM jobguard.claim('w', ARRAY['rng']);
SELECT count(*) FROM jobguard.claim_unknown('w', ARRAY['rng']);
-- an unknown attempt against the provider whose dedupes_for is stored too
-- long: claim_unknown() redrives it (its window read as 100 years)
SELECT job_id AS job_u FROM jobguard.submit('rng', 'ku', 'rng', '{}', 'rng_huge') \gset
SELECT jobguard.mark_unknown(jobguard.begin_attempt(:job_u, timeout => '1 millisecond'));
SELECT pg_catalog.pg_sleep(0.05);
SELECT job_id = :job_u AS this_job, redrivable FROM jobguard.claim_unknown('w', ARRAY['rng']);
SELECT count(*) > 0 AS stats FROM jobguard.stats();
SELECT metric, value FROM jobguard.stats() WHERE metric LIKE 'provider.rng%' ORDER BY metric;
-- a rate below the range is read as the slowest in range: the HINT's wait is
-- what that rate gives, never a negative number
SELECT job_id AS job3 FROM jobguard.submit('rng', 'k3', 'rng', '{}', 'rng_wide') \gset
SELECT jobguard.begin_attempt(:job3) IS NOT NULL AS first_start;
SELECT job_id AS job4 FROM jobguard.submit('rng', 'k4', 'rng', '{}', 'rng_wide') \gset
CREATE FUNCTION pg_temp.busy_hint(job bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	st text; hin text;
BEGIN
	PERFORM jobguard.begin_attempt(job);
	RETURN 'begun';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, hin = PG_EXCEPTION_HINT;
	RETURN st || ': ' || hin;
END $$;
SELECT h ~ '^JG010: Retry in [0-9]+ ms\.$' AS hint_ok,
	   substring(h FROM 'Retry in ([0-9]+) ms')::bigint BETWEEN 9000000 AND 10000001 AS slowest_rate_wait
  FROM pg_temp.busy_hint(:job4) h;
-- an attempt's own timeout stored too long: a heartbeat without extend_by
-- extends it by the longest duration
UPDATE jobguard.attempts SET timeout = '178000000 years' WHERE job_id = :job3 RETURNING id AS long_attempt \gset
SELECT jobguard.heartbeat(:long_attempt)
	   BETWEEN pg_catalog.now() + interval '99 years' AND pg_catalog.now() + interval '100 years' AS extended;
-- backoff: attempt 32 with retry_backoff '1 day', max '2 days' waits 2 days
SELECT jobguard.define_operation('rng_b', '{}');
UPDATE jobguard.operations SET retry_backoff = '1 day', retry_backoff_max = '2 days' WHERE operation = 'rng_b';
SELECT job_id AS job2 FROM jobguard.submit('rng', 'k5', 'rng_b', '{}', 'rng_other', max_attempts => 40) \gset
SELECT set_config('regress_jg.job2', :'job2', false) IS NOT NULL AS noted;
DO $$
DECLARE
	a bigint;
BEGIN
	FOR i IN 1..33 LOOP
		UPDATE jobguard.jobs SET not_before = NULL WHERE id = current_setting('regress_jg.job2')::bigint;
		a := jobguard.begin_attempt(current_setting('regress_jg.job2')::bigint);
		PERFORM jobguard.fail_attempt(a, 'declined');
	END LOOP;
END $$;
SELECT count(*) AS attempts, max(attempt_no) AS last FROM jobguard.attempts WHERE job_id = :job2;
SELECT not_before - pg_catalog.now() BETWEEN interval '47 hours' AND interval '2 days' AS capped
  FROM jobguard.jobs WHERE id = :job2;
-- a stored backoff beyond the range waits the longest in range
UPDATE jobguard.operations SET retry_backoff = '178000000 years', retry_backoff_max = NULL WHERE operation = 'rng_b';
UPDATE jobguard.jobs SET not_before = NULL WHERE id = :job2;
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:job2), 'declined');
SELECT not_before BETWEEN pg_catalog.now() + interval '99 years' AND pg_catalog.now() + interval '100 years' AS longest
  FROM jobguard.jobs WHERE id = :job2;
SELECT count(*) AS violations FROM jobguard.check_invariants();
DELETE FROM jobguard.provider_policy;
-- a trigger function called as a function is the caller's error (39P01), not an internal one
\set VERBOSITY sqlstate
SELECT jobguard.table_changed();
\set VERBOSITY default
