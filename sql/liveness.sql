-- Liveness without duplicates (1.2): provider policies, provider keys,
-- redrive, reconciliation, blocked jobs and their counters.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications,
	jobguard.provider_policy RESTART IDENTITY;
\i sql/include/helpers.sql
-- error_of: SQLSTATE, message and DETAIL, timestamps masked
CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	det text;
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS det = PG_EXCEPTION_DETAIL;
	RETURN SQLSTATE || ': ' || SQLERRM
		|| coalesce(E'\nDETAIL: ' || regexp_replace(nullif(det, ''), '\d{4}-\d\d-\d\d [0-9:.+-]+', '<time>'), '');
END $$;
-- push an attempt into the past: started ago, its deadline at ago + its timeout
CREATE FUNCTION pg_temp.age_attempt(id bigint, ago interval) RETURNS void
LANGUAGE sql AS $$
	UPDATE jobguard.attempts a
	   SET started_at = now() - ago, deadline = now() - ago + (a.deadline - a.started_at)
	 WHERE a.id = age_attempt.id
$$;
-- a counter's change: 1 for one event when counted (preloaded), else NULL
CREATE TABLE pg_temp.counters AS SELECT metric, value FROM jobguard.stats() WHERE false;
CREATE FUNCTION pg_temp.counter_mark() RETURNS void LANGUAGE sql AS $$
	DELETE FROM pg_temp.counters;
	INSERT INTO pg_temp.counters SELECT metric, value FROM jobguard.stats()
	 WHERE metric IN ('redrives', 'reconciled');
$$;
-- stats()'s blocked.jobs once it is n: preloaded, it is the sweeper's last
-- count, so wait for that (up to 30 s); otherwise it is counted at once
CREATE FUNCTION pg_temp.blocked_jobs(n bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	v bigint;
BEGIN
	FOR i IN 1 .. 300 LOOP
		SELECT value INTO v FROM jobguard.stats() WHERE metric = 'blocked.jobs';
		EXIT WHEN v = n;
		PERFORM pg_sleep(0.1);
	END LOOP;
	RETURN v;
END $$;
CREATE FUNCTION pg_temp.counter_delta(name text) RETURNS bigint LANGUAGE sql AS $$
	SELECT s.value - c.value FROM jobguard.stats() s JOIN pg_temp.counters c USING (metric)
	 WHERE s.metric = name
$$;
SET client_min_messages = warning;
CREATE ROLE regress_jg_live_client;
CREATE ROLE regress_jg_live_other;
CREATE ROLE regress_jg_live_ops;
CREATE ROLE regress_jg_live_reader;
SELECT jobguard.grant_client('regress_jg_live_client', 'live');
SELECT jobguard.grant_client('regress_jg_live_other', 'live_other');
SELECT jobguard.grant_operator('regress_jg_live_ops');
SELECT jobguard.grant_reader('regress_jg_live_reader', 'live');
RESET client_min_messages;

---------------------------------------------------------------------------
-- provider policies
---------------------------------------------------------------------------
SELECT jobguard.set_provider_policy('stripe', dedupes_for => '24 hours');
SELECT jobguard.set_provider_policy('mailer', max_in_flight => 4, max_per_second => 2.5);
SELECT provider, dedupes_for, max_in_flight, max_per_second FROM jobguard.provider_policies ORDER BY provider;
-- replaces the whole policy
SELECT jobguard.set_provider_policy('mailer', max_in_flight => 8);
SELECT provider, dedupes_for, max_in_flight, max_per_second FROM jobguard.provider_policies ORDER BY provider;
-- nothing given: no policy
SELECT jobguard.set_provider_policy('mailer');
SELECT provider FROM jobguard.provider_policies ORDER BY provider;
-- bad values: 22023 / 22004, nothing written
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', dedupes_for => '0')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', dedupes_for => '-1 hour')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', max_in_flight => 0)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', max_per_second => 0)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', max_per_second => 'NaN')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', max_per_second => 'Infinity')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy(NULL, max_in_flight => 1)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('', max_in_flight => 1)$$);
SELECT count(*) AS policies FROM jobguard.provider_policy;
-- operators only: an operator may, a client and a reader may not (42501)
SET ROLE regress_jg_live_ops;
SELECT jobguard.set_provider_policy('opsprov', max_in_flight => 3);
SELECT provider, max_in_flight FROM jobguard.provider_policies WHERE provider = 'opsprov';
RESET ROLE;
SET ROLE regress_jg_live_client;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('opsprov', max_in_flight => 9)$$);
SELECT provider, max_in_flight FROM jobguard.provider_policies WHERE provider = 'opsprov';
RESET ROLE;
SET ROLE regress_jg_live_reader;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('opsprov', max_in_flight => 9)$$);
RESET ROLE;
SELECT jobguard.set_provider_policy('opsprov');
-- EXECUTE alone does not make an operator
GRANT EXECUTE ON FUNCTION jobguard.set_provider_policy TO regress_jg_live_client;
SET ROLE regress_jg_live_client;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('opsprov', max_in_flight => 9)$$);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION jobguard.set_provider_policy FROM regress_jg_live_client;
SELECT provider, max_in_flight FROM jobguard.provider_policies WHERE provider = 'opsprov';
SELECT jobguard.set_provider_policy('opsprov');

---------------------------------------------------------------------------
-- provider keys
---------------------------------------------------------------------------
SELECT job_id AS k1 FROM jobguard.submit('alice', 'key-1', 'charge', '{"n": 1}', 'stripe') \gset
SELECT job_id AS k2 FROM jobguard.submit('alice', 'key-2', 'charge', '{"n": 2}', 'stripe') \gset
SELECT jobguard.certify_provider('charge', 'adyen');
SELECT jobguard.begin_attempt(:k1, NULL, '1 minute') AS a1 \gset
SELECT jobguard.begin_attempt(:k2, NULL, '1 minute') AS b1 \gset
-- the format: 32 hex characters; two jobs never share a key
SELECT jobguard.provider_key(:a1) ~ '^[0-9a-f]{32}$' AS hex32,
	   jobguard.provider_key(:a1) <> jobguard.provider_key(:b1) AS jobs_differ;
-- a retry after a cancel against the same provider: the same key
SELECT jobguard.cancel_attempt(:a1, 'stuck');
SELECT jobguard.begin_attempt(:k1, NULL, '1 minute') AS a2 \gset
SELECT jobguard.provider_key(:a2) = jobguard.provider_key(:a1) AS after_cancel_same;
-- another provider gets its own key
SELECT jobguard.cancel_attempt(:a2, 'fall back');
SELECT jobguard.begin_attempt(:k1, 'adyen', '1 minute') AS a3 \gset
SELECT jobguard.provider_key(:a3) <> jobguard.provider_key(:a1) AS other_provider_differs;
-- back to the first provider (after an attempt against another): its key again
SELECT jobguard.cancel_attempt(:a3, 'back');
SELECT jobguard.begin_attempt(:k1, NULL, '1 minute') AS a4 \gset
SELECT jobguard.provider_key(:a4) = jobguard.provider_key(:a1) AS back_same;
-- after a failure: a new key (the provider said no: a new request)
SELECT jobguard.fail_attempt(:a4, 'declined');
SELECT jobguard.begin_attempt(:k1, NULL, '1 minute') AS a5 \gset
SELECT jobguard.provider_key(:a5) <> jobguard.provider_key(:a4) AS after_failed_new;
-- and the failure of stripe does not touch adyen's key
SELECT jobguard.cancel_attempt(:a5, 'again');
SELECT jobguard.begin_attempt(:k1, 'adyen', '1 minute') AS a6 \gset
SELECT jobguard.provider_key(:a6) = jobguard.provider_key(:a3) AS adyen_same;
SELECT attempt_no, provider, state,
	   dense_rank() OVER (ORDER BY min_started) AS key_no, tries
  FROM (SELECT v.*, min(v.started_at) OVER (PARTITION BY v.provider_key) AS min_started
		  FROM jobguard.attempt_overview v WHERE v.job_id = :k1) x
 ORDER BY attempt_no;
-- claim returns the key after deadline, redrive false for a fresh job
SELECT job_id AS k3 FROM jobguard.submit('alice', 'key-3', 'claimed', '{}', 'stripe') \gset
SELECT attempt_id AS c1, provider_key AS c1_key, redrive AS c1_redrive
  FROM jobguard.claim('w1', ARRAY['claimed']) \gset
SELECT jobguard.provider_key(:c1) = :'c1_key' AS key_matches, :'c1_redrive' AS redrive;
SELECT array_agg(attname ORDER BY attnum) AS claim_columns
  FROM (SELECT unnest(proargnames) AS attname, generate_subscripts(proargnames, 1) AS attnum
		  FROM pg_proc WHERE oid = 'jobguard.claim'::regproc) p
 -- 1.2's columns (1.3's providers argument and failover column: sql/failover.sql)
 WHERE attnum > 6 AND attname NOT IN ('providers', 'failover');
-- the CHECK on the format
SELECT pg_temp.sqlstate_of($$UPDATE jobguard.attempts SET provider_key = 'has space' WHERE id = $$ || :c1);
SELECT pg_temp.sqlstate_of($$UPDATE jobguard.attempts SET provider_key = repeat('x', 65) WHERE id = $$ || :c1);
-- provider_key(): readers of the scope; another scope's id is JG009, a job id says so
SELECT pg_temp.sqlstate_of('SELECT jobguard.provider_key(' || :k1 || ')');
SELECT pg_temp.sqlstate_of('SELECT jobguard.provider_key(999999)');
SELECT pg_temp.sqlstate_of('SELECT jobguard.provider_key(NULL)');
SET ROLE regress_jg_live_other;
SELECT pg_temp.sqlstate_of('SELECT jobguard.provider_key(' || :a1 || ')');
RESET ROLE;

---------------------------------------------------------------------------
-- max_attempts: a redrive does not count (tries), a begin does
---------------------------------------------------------------------------
SELECT job_id AS m1 FROM jobguard.submit('alice', 'max-1', 'charge', '{}', 'stripe', 2) \gset
SELECT jobguard.begin_attempt(:m1, NULL, '1 minute') AS m1a \gset
SELECT jobguard.cancel_attempt(:m1a, 'x');
SELECT jobguard.begin_attempt(:m1, NULL, '1 minute') AS m1b \gset
SELECT jobguard.cancel_attempt(:m1b, 'x');
SELECT pg_temp.sqlstate_of('SELECT jobguard.begin_attempt(' || :m1 || ', NULL, ''1 minute'')');
SELECT jobguard.job_state(:m1);

---------------------------------------------------------------------------
-- redrive_attempt
---------------------------------------------------------------------------
SELECT job_id AS r1 FROM jobguard.submit('alice', 'red-1', 'charge', '{"n": 1}', 'stripe') \gset
SELECT jobguard.begin_attempt(:r1, NULL, '1 minute') AS r1a \gset
-- started, not unknown: JG006
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(' || :r1a || ')');
SELECT jobguard.mark_unknown(:r1a);
SELECT pg_temp.counter_mark();
SELECT jobguard.redrive_attempt(:r1a) AS r1b \gset
SELECT pg_temp.counter_delta('redrives') IS NOT DISTINCT FROM
	   (SELECT CASE WHEN value IS NOT NULL THEN 1 END FROM pg_temp.counters WHERE metric = 'redrives') AS counted;
SELECT attempt_no, state, cancel_reason, tries, provider,
	   provider_key = jobguard.provider_key(:r1a) AS same_key, worker
  FROM jobguard.attempt_overview WHERE job_id = :r1 ORDER BY attempt_no;
SELECT jobguard.job_state(:r1);
-- the new attempt's timeout is the redriven one's
SELECT deadline - started_at AS timeout FROM jobguard.attempts WHERE id = :r1b;
-- a started attempt past its deadline is unknown: redrivable
SELECT pg_temp.age_attempt(:r1b, '2 minutes');
SELECT jobguard.redrive_attempt(:r1b) AS r1c \gset
SELECT attempt_no, state, cancel_reason FROM jobguard.attempt_overview WHERE job_id = :r1 ORDER BY attempt_no;
-- a cancelled attempt is not unknown
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(' || :r1a || ')');
-- the redriven attempt's late result still goes through the compare-and-swap
SELECT jobguard.finish_attempt(:r1a, '{"charged": 1}');
SELECT jobguard.finish_attempt(:r1c, '{"charged": 2}') AS redrive_result;
SELECT state, result FROM jobguard.job(:r1);
-- a job that has ended: JG003
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(' || :r1c || ')');

-- a provider that does not deduplicate
SELECT job_id AS r2 FROM jobguard.submit('alice', 'red-2', 'charge', '{"n": 2}', 'mailer') \gset
SELECT jobguard.begin_attempt(:r2, NULL, '1 minute') AS r2a \gset
SELECT jobguard.mark_unknown(:r2a);
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(' || :r2a || ')');
-- ids: none, another scope's, a job's
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(999999)');
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(' || :r2 || ')');
SET ROLE regress_jg_live_other;
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(' || :r2a || ')');
RESET ROLE;
SELECT state FROM jobguard.attempt_overview WHERE attempt_id = :r2a;

-- the window: the key's first use + dedupes_for - max(1 %, 1 minute)
-- stripe: 24 hours, margin 14 min 24 s: open until first use + 23:45:36
SELECT job_id AS w1 FROM jobguard.submit('alice', 'win-1', 'charge', '{"w": 1}', 'stripe') \gset
SELECT jobguard.begin_attempt(:w1, NULL, '1 minute') AS w1a \gset
SELECT pg_temp.age_attempt(:w1a, '23:45:35');
SELECT jobguard.redrive_attempt(:w1a) AS w1b \gset
-- the window runs from the key's first use, not from the last attempt's
SELECT pg_temp.age_attempt(:w1b, '23:45:37');
UPDATE jobguard.attempts SET started_at = now() - interval '23:45:37' WHERE id = :w1a;
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(' || :w1b || ')');
UPDATE jobguard.attempts SET started_at = now() - interval '23:45:30' WHERE id = :w1a;
SELECT pg_temp.age_attempt(:w1b, '1 minute');
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(' || :w1b || ')') AS earliest_use_decides;
-- a short dedupes_for: the margin is a minute (1 % would be 6 seconds)
SELECT jobguard.set_provider_policy('quick', dedupes_for => '10 minutes');
SELECT job_id AS w2 FROM jobguard.submit('alice', 'win-2', 'charge', '{"w": 2}', 'quick') \gset
SELECT jobguard.begin_attempt(:w2, NULL, '1 second') AS w2a \gset
SELECT pg_temp.age_attempt(:w2a, '00:09:01');
SELECT pg_temp.error_of('SELECT jobguard.redrive_attempt(' || :w2a || ')');
SELECT pg_temp.age_attempt(:w2a, '00:08:59');
SELECT jobguard.redrive_attempt(:w2a) > :w2a AS redriven_in_window;

-- max_attempts does not count a redrive
SELECT job_id AS m2 FROM jobguard.submit('alice', 'max-2', 'charge', '{}', 'stripe', 2) \gset
SELECT jobguard.begin_attempt(:m2, NULL, '1 minute') AS m2a \gset
SELECT jobguard.mark_unknown(:m2a);
SELECT jobguard.redrive_attempt(:m2a) AS m2b \gset
SELECT jobguard.fail_attempt(:m2b, 'declined');
SELECT jobguard.job_state(:m2) AS after_redrive_and_failure;
SELECT jobguard.begin_attempt(:m2, NULL, '1 minute') AS m2c \gset
SELECT jobguard.cancel_attempt(:m2c, 'x');
SELECT pg_temp.sqlstate_of('SELECT jobguard.begin_attempt(' || :m2 || ', NULL, ''1 minute'')');
SELECT jobguard.job_state(:m2);
SELECT attempt_no, state, tries FROM jobguard.attempt_overview WHERE job_id = :m2 ORDER BY attempt_no;

---------------------------------------------------------------------------
-- claim hands out redrives
---------------------------------------------------------------------------
SELECT job_id AS c2 FROM jobguard.submit('alice', 'cl-2', 'redrivable', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:c2, NULL, '1 minute') AS c2a \gset
-- unknown for 30 seconds, less than its timeout: not yet
SELECT pg_temp.age_attempt(:c2a, '00:01:30');
SELECT count(*) AS claimed FROM jobguard.claim('w2', ARRAY['redrivable']);
-- unknown for two minutes: redriven by the claim, with the same key
SELECT pg_temp.age_attempt(:c2a, '00:03:00');
SELECT attempt_id AS c2b, attempt_no, provider, provider_key = jobguard.provider_key(:c2a) AS same_key,
	   redrive, deadline - now() <= interval '10 seconds' AS claim_timeout
  FROM jobguard.claim('w2', ARRAY['redrivable'], timeout => '10 seconds') \gset
SELECT :'attempt_no' AS attempt_no, :'same_key' AS same_key, :'redrive' AS redrive, :'claim_timeout' AS claim_timeout;
SELECT attempt_no, state, cancel_reason, worker FROM jobguard.attempt_overview WHERE job_id = :c2 ORDER BY attempt_no;
-- only for a claim that may take the provider and the operation
SELECT pg_temp.age_attempt(:c2b, '00:03:00');
SELECT count(*) AS other_provider FROM jobguard.claim('w2', ARRAY['redrivable'], provider => 'adyen');
SELECT count(*) AS other_operation FROM jobguard.claim('w2', ARRAY['charge-none']);
SELECT redrive, attempt_no FROM jobguard.claim('w2', ARRAY['redrivable'], provider => 'stripe');

---------------------------------------------------------------------------
-- blocked_jobs, claim_unknown, the counters
---------------------------------------------------------------------------
-- start from a known set of open unknown attempts
SELECT count(jobguard.cancel_job(id, 'set aside')) AS set_aside FROM jobguard.jobs
 WHERE completed_by IS NULL AND cancelled_at IS NULL;
SELECT job_id AS u1 FROM jobguard.submit('alice', 'unk-1', 'recon', '{"u": 1}', 'mailer') \gset
SELECT job_id AS u2 FROM jobguard.submit('alice', 'unk-2', 'recon', '{"u": 2}', 'stripe') \gset
SELECT job_id AS u3 FROM jobguard.submit('alice', 'unk-3', 'recon-other', '{"u": 3}', 'mailer') \gset
SELECT job_id AS u4 FROM jobguard.submit('alice', 'unk-4', 'recon', '{"u": 4}', 'mailer') \gset
SELECT jobguard.begin_attempt(:u1, NULL, '1 minute') AS u1a \gset
SELECT jobguard.begin_attempt(:u2, NULL, '1 minute') AS u2a \gset
SELECT jobguard.begin_attempt(:u3, NULL, '1 minute') AS u3a \gset
SELECT jobguard.begin_attempt(:u4, NULL, '1 hour') AS u4a \gset
SELECT pg_temp.age_attempt(:u1a, '00:10:00');	-- unknown for 9 minutes
SELECT pg_temp.age_attempt(:u2a, '00:05:00');	-- unknown for 4 minutes, redrivable
SELECT pg_temp.age_attempt(:u3a, '00:03:00');	-- unknown for 2 minutes
SELECT jobguard.mark_unknown(:u4a);				-- unknown since now
SELECT job_id = :u1 AS u1, job_id = :u2 AS u2, job_id = :u3 AS u3, job_id = :u4 AS u4,
	   scope, operation, provider, attempt_id IS NOT NULL AS has_attempt,
	   provider_key = jobguard.provider_key(attempt_id) AS key,
	   date_trunc('minute', now() - unknown_since) AS unknown_for, redrivable,
	   redrivable_until - (SELECT started_at FROM jobguard.attempts WHERE id = attempt_id) AS window
  FROM jobguard.blocked_jobs ORDER BY job_id;
SELECT pg_temp.blocked_jobs(3) AS blocked_jobs;
SELECT value BETWEEN 540 AND 600 AS oldest_nine_minutes
  FROM jobguard.stats() WHERE metric = 'blocked.oldest_seconds';
-- readers see their scope's blocked jobs; another scope sees none
SET ROLE regress_jg_live_reader;
SELECT count(*) AS reader_sees FROM jobguard.blocked_jobs;
RESET ROLE;
SET ROLE regress_jg_live_other;
SELECT count(*) AS other_sees FROM jobguard.blocked_jobs;
SELECT count(*) AS other_claims FROM jobguard.claim_unknown('r9', max_rows => 10);
RESET ROLE;

-- claim_unknown: longest unknown first, filtered, leased
SELECT attempt_id = :u1a AS first, job_id = :u1 AS job, operation, provider,
	   provider_key = jobguard.provider_key(attempt_id) AS key, params, redrivable
  FROM jobguard.claim_unknown('r1');
-- the lease holds it: the next call gets the next one
SELECT attempt_id = :u2a AS second, redrivable FROM jobguard.claim_unknown('r2');
-- older_than and operations filter; u4 is unknown for less than a minute
SELECT attempt_id = :u3a AS third FROM jobguard.claim_unknown('r3', ARRAY['recon-other'], 5, '1 minute');
SELECT count(*) AS none_left FROM jobguard.claim_unknown('r4', NULL, 5, '1 minute');
SELECT attempt_id = :u4a AS fourth FROM jobguard.claim_unknown('r4', NULL, 5);
SELECT worker, leased_until - now() BETWEEN '20 seconds' AND '30 seconds' AS lease
  FROM jobguard.reconcile_leases ORDER BY attempt_id;
-- a lease that ran out frees the attempt for another reconciler
UPDATE jobguard.reconcile_leases SET leased_until = now() - interval '1 second' WHERE attempt_id = :u1a;
SELECT attempt_id = :u1a AS again, unknown_since IS NOT NULL AS since
  FROM jobguard.claim_unknown('r5', lease => '5 minutes');
SELECT worker, leased_until - now() BETWEEN '4 minutes' AND '5 minutes' AS lease
  FROM jobguard.reconcile_leases WHERE attempt_id = :u1a;
-- bad arguments
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim_unknown(NULL)$$);
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim_unknown('r', max_rows => 0)$$);
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim_unknown('r', older_than => '-1 second')$$);
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim_unknown('r', lease => '0')$$);
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim_unknown('r', lease => '400 days')$$);
-- the reconciler reports: finished (the provider did it) or failed (it did not)
SELECT pg_temp.counter_mark();
SELECT jobguard.finish_attempt(:u1a, '{"found": true}');
SELECT jobguard.fail_attempt(:u3a, 'provider has no such request');
SELECT pg_temp.counter_delta('reconciled') IS NOT DISTINCT FROM
	   (SELECT CASE WHEN value IS NOT NULL THEN 2 END FROM pg_temp.counters WHERE metric = 'reconciled') AS reconciled;
SELECT job_id = :u2 AS u2, job_id = :u4 AS u4 FROM jobguard.blocked_jobs ORDER BY job_id;
SELECT pg_temp.blocked_jobs(1) AS blocked_jobs;
SELECT value < 60 AS oldest_just_now
  FROM jobguard.stats() WHERE metric = 'blocked.oldest_seconds';
SELECT metric FROM jobguard.stats() WHERE metric IN ('redrives', 'reconciled') ORDER BY metric;

-- claim's look for redrives reads the stalled attempts it finds, by id,
-- whatever plan the planner would like: written as a filter, its plan
-- could read every attempt in job order at every claim (a plan made when
-- the tables were small; a session without sorts and bitmap scans makes
-- it here: the claim that finds nothing read some 1,600 pages, now ~60)
\c
SET enable_sort = off;
SET enable_bitmapscan = off;
TRUNCATE jobguard.jobs CASCADE;
SELECT count(*) AS submitted FROM (SELECT jobguard.submit('plan-owner', 'plan-' || i, 'plan-op', '{}', 'stripe')
  FROM generate_series(1, 2000) i) s;
SELECT count(jobguard.finish_attempt(c.attempt_id, '{}')) AS finished
  FROM generate_series(1, 2) r CROSS JOIN LATERAL jobguard.claim('plan-w', max_jobs => 1000) c;
ANALYZE jobguard.jobs, jobguard.attempts;
CREATE FUNCTION pg_temp.claim_pages() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	plan json;
BEGIN
	EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM jobguard.claim('plan-w') INTO plan;
	RETURN (plan -> 0 -> 'Plan' ->> 'Shared Hit Blocks')::bigint
		 + (plan -> 0 -> 'Plan' ->> 'Shared Read Blocks')::bigint;
END $$;
SELECT pg_temp.claim_pages() > 0 AS first_look;
SELECT pg_temp.claim_pages() < 300 AS an_empty_claim_reads_a_few_pages;
RESET enable_sort;
RESET enable_bitmapscan;

-- leave no policy or lease to the suites that follow
SELECT count(jobguard.set_provider_policy(provider)) AS policies_removed FROM jobguard.provider_policies;
TRUNCATE jobguard.reconcile_leases;

-- clean up the roles (they are cluster-wide)
SELECT invariant, count(*) FROM jobguard.check_invariants() GROUP BY 1 ORDER BY 1;
SELECT jobguard.revoke_client(r::regrole)
  FROM unnest(ARRAY['regress_jg_live_client', 'regress_jg_live_other', 'regress_jg_live_ops',
					'regress_jg_live_reader']) r;
DROP ROLE regress_jg_live_client, regress_jg_live_other, regress_jg_live_ops, regress_jg_live_reader;
