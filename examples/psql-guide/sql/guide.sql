-- The queries of examples/psql-guide.md, run against a small story so that
-- the guide shows real output and never goes stale.  check-guide.js checks
-- that every SQL block of the guide is in this file and every output block
-- in expected/guide.out.
\set VERBOSITY terse
\pset null '(null)'

-- the story (quiet): four jobs
\o /dev/null
SELECT jobguard.certify_provider('charge', 'backup-psp');
-- 1: alice's checkout; main-psp stalls, fails over, the late answer loses
SELECT job_id AS alice FROM jobguard.submit('alice', 'checkout-42', 'charge', '{"amount": 1999}', 'main-psp') \gset
SELECT jobguard.begin_attempt(:alice) AS first \gset
SELECT jobguard.fail_attempt(:first, 'main-psp: 502 Bad Gateway');
SELECT jobguard.begin_attempt(:alice) AS stalled \gset
SELECT jobguard.mark_unknown(:stalled);
SELECT jobguard.cancel_attempt(:stalled, 'no answer for 30 s, failing over');
SELECT jobguard.begin_attempt(:alice, 'backup-psp') AS fallback \gset
SELECT jobguard.finish_attempt(:fallback, '{"charge_id": "bk_7"}');
SELECT jobguard.finish_attempt(:stalled, '{"charge_id": "mn_7"}');
-- 2: bob's order is cancelled by support; the provider answers anyway
SELECT job_id AS bob FROM jobguard.submit('bob', 'order-9', 'charge', '{"amount": 500}', 'main-psp') \gset
SELECT jobguard.begin_attempt(:bob) AS charging \gset
SELECT jobguard.cancel_job(:bob, 'customer called support');
SELECT jobguard.finish_attempt(:charging, '{"charge_id": "mn_8"}');
-- 3: carol's order, its attempt's deadline has passed (nobody wrote it down)
SELECT job_id AS carol FROM jobguard.submit('carol', 'order-1', 'charge', '{"amount": 250}', 'main-psp') \gset
SELECT jobguard.begin_attempt(:carol, timeout => '10 milliseconds');
-- 4: dave's order, a worker saw the timeout and marked it unknown
SELECT job_id AS dave FROM jobguard.submit('dave', 'order-3', 'charge', '{"amount": 75}', 'main-psp') \gset
SELECT jobguard.begin_attempt(:dave, timeout => '1 hour') AS waiting \gset
SELECT jobguard.mark_unknown(:waiting);
SELECT pg_sleep(0.1);
-- every query below runs as a reader of every scope, with payloads, and nothing else
SET client_min_messages = warning;
DROP ROLE IF EXISTS jobguard_guide_reader;
RESET client_min_messages;
CREATE ROLE jobguard_guide_reader;
SELECT jobguard.grant_reader('jobguard_guide_reader', payloads => true);
\o
SET ROLE jobguard_guide_reader;

-- find a job by owner and key
SELECT job_id, state, provider, params, attempts, completed_by, result
  FROM jobguard.job_overview
 WHERE owner_id = 'alice' AND idempotency_key = 'checkout-42';

-- its attempts, in order
SELECT attempt_no, attempt_id, provider, state, error, lost_to, cancel_reason
  FROM jobguard.attempts_of((SELECT job_id FROM jobguard.job_overview
                              WHERE owner_id = 'alice' AND idempotency_key = 'checkout-42'));

-- every lost race of the last hour, with what the loser did
SELECT l.job_id, j.owner_id, j.idempotency_key,
       l.attempt_id AS loser, l.provider AS loser_provider, l.lost_result,
       l.lost_to AS winner, w.provider AS winner_provider
  FROM jobguard.attempt_overview l
  JOIN jobguard.job_overview j ON j.job_id = l.job_id
  LEFT JOIN jobguard.attempt_overview w ON w.attempt_id = l.lost_to
 WHERE l.state = 'lost'
   AND l.finished_at > now() - interval '1 hour'
 ORDER BY l.finished_at;

-- stuck: attempts that are unknown (marked, or started past their deadline)
SELECT o.attempt_id, o.job_id, j.owner_id, o.provider, o.state,
       o.deadline < now() AS past_deadline
  FROM jobguard.attempt_overview o
  JOIN jobguard.job_overview j ON j.job_id = o.job_id
 WHERE o.state = 'unknown'
 ORDER BY o.attempt_id;

-- the jobs that wait on them
SELECT job_id, owner_id, state, attempts
  FROM jobguard.job_overview
 WHERE state = 'unknown'
 ORDER BY job_id;

-- (clean up the reader role: roles outlive the test database)
RESET ROLE;
DROP OWNED BY jobguard_guide_reader;
DROP ROLE jobguard_guide_reader;
