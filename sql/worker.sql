-- The worker side (1.1): claim (the gate, backoff, failover after a cancel,
-- the operations filter, max_jobs, the worker column, scopes), heartbeat
-- (in time, too late), the backoff arithmetic, submit_many's outcomes, and
-- the ids of the other kind.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
-- the whole error, its timestamps masked so that the output is stable
CREATE FUNCTION public.jg_wk_error_of(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	st text; msg text; det text; hin text;
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		det = PG_EXCEPTION_DETAIL, hin = PG_EXCEPTION_HINT;
	RETURN st || ': ' || msg
		|| coalesce(E'\nDETAIL: ' || regexp_replace(nullif(det, ''), '\d{4}-\d\d-\d\d [0-9:.+-]+', '<time>', 'g'), '')
		|| coalesce(E'\nHINT: ' || regexp_replace(nullif(hin, ''), '\d{4}-\d\d-\d\d [0-9:.+-]+', '<time>', 'g'), '');
END $$;
GRANT EXECUTE ON FUNCTION public.jg_wk_error_of(text) TO PUBLIC;
-- what claim returned, without the deadline (its own column is checked apart)
CREATE FUNCTION pg_temp.claimed(worker text, operations text[] DEFAULT NULL,
								max_jobs integer DEFAULT 1, provider text DEFAULT NULL,
								timeout interval DEFAULT '30 seconds')
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline_ok boolean)
LANGUAGE sql AS $$
	SELECT c.attempt_id, c.job_id, c.attempt_no, c.operation, c.provider, c.params,
		   c.deadline = now() + timeout
	  FROM jobguard.claim(worker, operations, timeout, max_jobs, provider) c
$$;

---------------------------------------------------------------------------
-- claim: oldest runnable first, max_jobs, the worker recorded
---------------------------------------------------------------------------
SELECT * FROM pg_temp.claimed('w1');			-- nothing to do: no rows, no error
SELECT job_id AS j1 FROM jobguard.submit('alice', 'k1', 'charge', '{"n": 1}', 'stripe') \gset
SELECT job_id AS j2 FROM jobguard.submit('alice', 'k2', 'charge', '{"n": 2}', 'stripe', 2) \gset
SELECT job_id AS j3 FROM jobguard.submit('bob', 'k3', 'mail', '{"n": 3}', 'smtp') \gset
SELECT * FROM pg_temp.claimed('w1');			-- the oldest: j1
SELECT * FROM pg_temp.claimed('w2', max_jobs => 10);	-- the others, oldest first
SELECT * FROM pg_temp.claimed('w3', max_jobs => 10);	-- every job has an open attempt
-- the worker is recorded: a restarted worker finds its own open attempts
SELECT job_id, attempt_no, worker, state FROM jobguard.attempt_overview ORDER BY attempt_id;
SELECT attempt_id, job_id FROM jobguard.attempt_overview
 WHERE worker = 'w2' AND state IN ('started', 'unknown') ORDER BY attempt_id;
-- an explicit begin records no worker
SELECT job_id AS j4 FROM jobguard.submit('carol', 'k4', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:j4) AS a4 \gset
SELECT worker IS NULL AS no_worker FROM jobguard.attempt_overview WHERE attempt_id = :a4;

---------------------------------------------------------------------------
-- claim: the gate
---------------------------------------------------------------------------
-- succeeded and cancelled jobs are never claimed
SELECT jobguard.finish_attempt(attempt_id, '{"ok": true}') FROM jobguard.attempt_overview WHERE job_id = :j1;
SELECT jobguard.cancel_job(:j3, 'not wanted');
-- a failed attempt opens the gate (no retry policy: at once) ...
SELECT jobguard.fail_attempt(attempt_id, 'declined') FROM jobguard.attempt_overview WHERE job_id = :j2;
SELECT job_id, attempt_no, provider FROM pg_temp.claimed('w1', max_jobs => 10);
-- ... until max_attempts are used up: j2 is failed, not runnable
SELECT jobguard.fail_attempt(attempt_id, 'declined again') FROM jobguard.attempt_overview
 WHERE job_id = :j2 AND attempt_no = 2;
SELECT jobguard.job_state(:j2) AS j2_state;
SELECT * FROM pg_temp.claimed('w1', max_jobs => 10);
-- an attempt past its deadline is unknown and still blocks the gate
SELECT job_id AS j5 FROM jobguard.submit('dave', 'k5', 'charge', '{}', 'stripe') \gset
SELECT attempt_id AS a5 FROM pg_temp.claimed('w1', timeout => '1 millisecond') \gset
SELECT pg_sleep(0.01);
SELECT jobguard.job_state(:j5) AS j5_state;
SELECT * FROM pg_temp.claimed('w1', max_jobs => 10);
-- a cancelled attempt opens the gate again
SELECT jobguard.cancel_attempt(:a5, 'provider went quiet');
SELECT job_id, attempt_no FROM pg_temp.claimed('w1', max_jobs => 10);
SELECT count(*) AS violations FROM jobguard.check_invariants();

---------------------------------------------------------------------------
-- claim: the operations filter
---------------------------------------------------------------------------
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
SELECT job_id FROM jobguard.submit('o', 'a1', 'charge', '{}', 'stripe');
SELECT job_id FROM jobguard.submit('o', 'a2', 'mail', '{}', 'smtp');
SELECT job_id FROM jobguard.submit('o', 'a3', 'sms', '{}', 'twilio');
SELECT job_id, operation FROM pg_temp.claimed('w', operations => '{mail,sms}', max_jobs => 10);
SELECT job_id, operation FROM pg_temp.claimed('w', operations => '{refund}', max_jobs => 10);
SELECT job_id, operation FROM pg_temp.claimed('w', operations => '{}', max_jobs => 10);
SELECT job_id, operation FROM pg_temp.claimed('w', max_jobs => 10);

---------------------------------------------------------------------------
-- claim: a provider runs its own jobs, and fails over only where certified
-- and only after the job's last attempt was cancelled or failed
---------------------------------------------------------------------------
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
SELECT job_id AS f1 FROM jobguard.submit('o', 'f1', 'charge', '{}', 'stripe') \gset
SELECT job_id AS f2 FROM jobguard.submit('o', 'f2', 'charge', '{}', 'stripe') \gset
SELECT job_id AS f3 FROM jobguard.submit('o', 'f3', 'charge', '{}', 'adyen') \gset
-- adyen takes only its own job
SELECT job_id, provider FROM pg_temp.claimed('w-adyen', provider => 'adyen', max_jobs => 10);
-- stripe's attempts: f1 is cancelled, f2 fails
SELECT attempt_id AS s1 FROM pg_temp.claimed('w-stripe', provider => 'stripe') \gset
SELECT attempt_id AS s2 FROM pg_temp.claimed('w-stripe', provider => 'stripe') \gset
SELECT jobguard.cancel_attempt(:s1, 'stripe is down');
SELECT jobguard.fail_attempt(:s2, 'stripe said 500');
-- not certified: adyen takes nothing
SELECT job_id, provider FROM pg_temp.claimed('w-adyen', provider => 'adyen', max_jobs => 10);
-- certified: adyen takes both, as attempt 2, against itself
SELECT jobguard.certify_provider('charge', 'adyen', '{"suite": "green"}');
SELECT job_id, attempt_no, provider FROM pg_temp.claimed('w-adyen', provider => 'adyen', max_jobs => 10);
-- a job that never ran is its own provider's, certified or not
SELECT job_id AS f4 FROM jobguard.submit('o', 'f4', 'charge', '{}', 'stripe') \gset
SELECT job_id, provider FROM pg_temp.claimed('w-adyen', provider => 'adyen', max_jobs => 10);
SELECT job_id, provider FROM pg_temp.claimed('w-any', max_jobs => 10);
-- revoked: no more failover
SELECT jobguard.fail_attempt(attempt_id, 'declined') FROM jobguard.attempt_overview
 WHERE job_id = :f4 AND state = 'started';
SELECT jobguard.revoke_provider('charge', 'adyen');
SELECT job_id, provider FROM pg_temp.claimed('w-adyen', provider => 'adyen', max_jobs => 10);
SELECT job_id, attempt_no, provider FROM pg_temp.claimed('w-stripe', provider => 'stripe');
SELECT count(*) AS violations FROM jobguard.check_invariants();

---------------------------------------------------------------------------
-- claim: its arguments
---------------------------------------------------------------------------
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim(NULL)$$) AS null_worker;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim('')$$) AS empty_worker;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim(repeat('w', 256))$$) AS long_worker;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim('w', max_jobs => 0)$$) AS no_jobs;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim('w', max_jobs => 1001)$$) AS too_many_jobs;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim('w', max_jobs => NULL)$$) AS null_jobs;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim('w', timeout => '0')$$) AS zero_timeout;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim('w', wait => '-1 second')$$) AS negative_wait;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim('w', provider => '')$$) AS empty_provider;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim('w', operations => '{{a},{b}}')$$) AS two_dims;
-- waiting needs a fresh snapshot per look
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.claim('w', wait => '1 second')$$) AS wait_in_rr;
SELECT count(*) AS no_wait_in_rr FROM jobguard.claim('w', max_jobs => 10);
ROLLBACK;
-- waiting with nothing to do: no rows after the wait
SELECT count(*) AS after_wait FROM jobguard.claim('w', wait => '20 milliseconds');

---------------------------------------------------------------------------
-- retry backoff
---------------------------------------------------------------------------
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
SELECT jobguard.define_operation('flaky', '{}', retry_backoff => '1 second',
								 retry_backoff_max => '3 seconds');
SELECT operation, retry_backoff, retry_backoff_max FROM jobguard.operations;
SELECT job_id AS b1 FROM jobguard.submit('o', 'b1', 'flaky', '{}', 'p') \gset
-- attempt n failed: 1 s × 2^(n−1), capped at 3 s; an explicit begin is
-- not held back by not_before (an explicit decision)
SELECT attempt_id AS ba FROM pg_temp.claimed('w') \gset
BEGIN;
SELECT jobguard.fail_attempt(:ba, 'timeout upstream');
SELECT not_before - now() AS wait_1 FROM jobguard.jobs WHERE id = :b1;
COMMIT;
SELECT count(*) AS claimed_in_backoff FROM jobguard.claim('w');
SELECT jobguard.begin_attempt(:b1) AS ba \gset
BEGIN;
SELECT jobguard.fail_attempt(:ba, 'timeout upstream');
SELECT not_before - now() AS wait_2 FROM jobguard.jobs WHERE id = :b1;
COMMIT;
SELECT jobguard.begin_attempt(:b1) AS ba \gset
BEGIN;
SELECT jobguard.fail_attempt(:ba, 'timeout upstream');
SELECT not_before - now() AS wait_3_capped FROM jobguard.jobs WHERE id = :b1;
COMMIT;
-- retry_in overrides the policy
SELECT jobguard.begin_attempt(:b1) AS ba \gset
BEGIN;
SELECT jobguard.fail_attempt(:ba, 'rate limited', retry_in => '90 seconds');
SELECT not_before - now() AS retry_in FROM jobguard.jobs WHERE id = :b1;
COMMIT;
-- a short backoff runs out, and claim takes the job again
SELECT jobguard.begin_attempt(:b1) AS ba \gset
SELECT jobguard.fail_attempt(:ba, 'blip', retry_in => '500 milliseconds');
SELECT count(*) AS claimed_too_soon FROM jobguard.claim('w');
SELECT pg_sleep(0.6);
SELECT job_id, attempt_no FROM pg_temp.claimed('w');
-- claim(wait => ...) waits for a backoff to run out
SELECT jobguard.fail_attempt(attempt_id, 'blip', retry_in => '50 milliseconds')
  FROM jobguard.attempt_overview WHERE job_id = :b1 AND state = 'started';
SELECT job_id, attempt_no FROM jobguard.claim('w', wait => '5 seconds');
-- a huge attempt number stays within range: the cap
BEGIN;
UPDATE jobguard.attempts SET attempt_no = 200 WHERE job_id = :b1 AND state = 'started';
SELECT jobguard.fail_attempt(attempt_id, 'again') FROM jobguard.attempt_overview
 WHERE job_id = :b1 AND state = 'started';
SELECT not_before - now() AS wait_200 FROM jobguard.jobs WHERE id = :b1;
ROLLBACK;
-- no policy: at once (and an earlier backoff is cleared)
SELECT jobguard.define_operation('flaky', '{}');	-- the 1.0 call: no policy
SELECT operation, retry_backoff, retry_backoff_max FROM jobguard.operations;
BEGIN;
SELECT jobguard.fail_attempt(attempt_id, 'again') FROM jobguard.attempt_overview
 WHERE job_id = :b1 AND state = 'started';
SELECT not_before FROM jobguard.jobs WHERE id = :b1;
COMMIT;
-- an uncapped policy doubles on
SELECT jobguard.define_operation('flaky', '{}', '1 minute');
SELECT jobguard.begin_attempt(:b1) AS ba \gset
BEGIN;
SELECT jobguard.fail_attempt(:ba, 'again');
SELECT not_before - now() AS wait_uncapped FROM jobguard.jobs WHERE id = :b1;
COMMIT;
-- the policy's and retry_in's arguments
SELECT public.jg_wk_error_of($$SELECT jobguard.define_operation('x', '{}', '0')$$) AS zero_backoff;
SELECT public.jg_wk_error_of($$SELECT jobguard.define_operation('x', '{}', NULL, '1 minute')$$) AS max_alone;
SELECT public.jg_wk_error_of($$SELECT jobguard.define_operation('x', '{}', '1 minute', '1 second')$$) AS max_below;
SELECT public.jg_wk_error_of($$SELECT jobguard.fail_attempt(1, 'x', '-1 second')$$) AS negative_retry_in;
SELECT count(*) AS violations FROM jobguard.check_invariants();

---------------------------------------------------------------------------
-- heartbeat
---------------------------------------------------------------------------
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
SELECT job_id AS h1 FROM jobguard.submit('o', 'h1', 'render', '{}', 'p') \gset
SELECT attempt_id AS ha FROM jobguard.claim('w', timeout => '5 minutes') \gset
-- in time: the deadline moves to now() + extend_by, or the attempt's own timeout
BEGIN;
SELECT jobguard.heartbeat(:ha, '1 hour') - now() AS extended_by;
SELECT deadline - now() AS deadline_in FROM jobguard.attempt_overview WHERE attempt_id = :ha;
COMMIT;
BEGIN;
SELECT jobguard.heartbeat(:ha) - now() AS extended_by_own_timeout;
COMMIT;
-- too late: past its deadline the attempt is unknown and stays so
SELECT job_id AS h2 FROM jobguard.submit('o', 'h2', 'render', '{}', 'p') \gset
SELECT attempt_id AS hb FROM jobguard.claim('w', timeout => '1 millisecond') \gset
SELECT pg_sleep(0.01);
SELECT public.jg_wk_error_of(format('SELECT jobguard.heartbeat(%s)', :hb)) AS too_late;
SELECT state FROM jobguard.attempt_overview WHERE attempt_id = :hb;
-- only a started attempt: finished, cancelled, marked unknown
SELECT jobguard.finish_attempt(:ha, '{"frames": 24}');
SELECT public.jg_wk_error_of(format('SELECT jobguard.heartbeat(%s)', :ha)) AS succeeded;
SELECT jobguard.cancel_attempt(:hb, 'gave up');
SELECT public.jg_wk_error_of(format('SELECT jobguard.heartbeat(%s)', :hb)) AS cancelled;
-- arguments and ids
SELECT public.jg_wk_error_of(format('SELECT jobguard.heartbeat(%s, ''0'')', :ha)) AS zero_extension;
SELECT public.jg_wk_error_of('SELECT jobguard.heartbeat(NULL)') AS null_id;
SELECT public.jg_wk_error_of('SELECT jobguard.heartbeat(424242)') AS missing;
SELECT public.jg_wk_error_of(format('SELECT jobguard.heartbeat(%s)', :h1)) AS job_id_given;

---------------------------------------------------------------------------
-- ids that cannot be confused, and the timeout passed as provider
---------------------------------------------------------------------------
SELECT job_id AS i1 FROM jobguard.submit('o', 'i1', 'render', '{}', 'p') \gset
SELECT jobguard.begin_attempt(:i1) AS ia \gset
SELECT :ia <> :i1 AS distinct_ids;
SELECT public.jg_wk_error_of(format('SELECT jobguard.finish_attempt(%s, ''{}'')', :i1)) AS job_as_attempt;
SELECT public.jg_wk_error_of(format('SELECT jobguard.cancel_job(%s, ''x'')', :ia)) AS attempt_as_job;
SELECT jobguard.fail_attempt(:ia, 'boom');
-- the gate is open: '10 seconds' reads as the provider, and says so
SELECT public.jg_wk_error_of(format('SELECT jobguard.begin_attempt(%s, ''10 seconds'')', :i1)) AS timeout_as_provider;
SELECT public.jg_wk_error_of(format('SELECT jobguard.begin_attempt(%s, ''backup'')', :i1)) AS plain_provider;

---------------------------------------------------------------------------
-- submit_many
---------------------------------------------------------------------------
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
SELECT job_id AS existing FROM jobguard.submit('erin', 'old', 'charge', '{"amount": 5}', 'stripe') \gset
SELECT * FROM jobguard.submit_many(
	ARRAY['erin', 'erin', 'erin', 'erin', 'erin', NULL, 'erin', 'erin', 'erin', 'erin', 'erin'],
	ARRAY['n1', 'n2', 'n1', 'n1', 'old', 'n3', '', 'n4', 'n5', 'old', 'n6'],
	ARRAY['charge', 'charge', 'charge', 'charge', 'charge', 'charge', 'charge', 'charge',
		  'charge', 'charge', repeat('x', 64)],
	ARRAY['{"amount": 1}', '{"amount": 2}', '{"amount": 1}', '{"amount": 9}',
		  '{"amount": 6}', '{}', '{}', NULL, '{}', '{"amount": 5}', '{}']::jsonb[],
	ARRAY['stripe', 'stripe', 'stripe', 'stripe', 'stripe', 'stripe', 'stripe', 'stripe',
		  'stripe', 'stripe', 'stripe'],
	ARRAY[NULL, 3, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL]);
-- what it wrote: only the created jobs; the existing one untouched
SELECT job_id, idempotency_key, params, max_attempts FROM jobguard.job_overview ORDER BY job_id;
-- the same batch again: replays and the same refusals
SELECT ord, job_id, created, sqlstate FROM jobguard.submit_many(
	ARRAY['erin', 'erin'], ARRAY['n1', 'n2'], ARRAY['charge', 'charge'],
	ARRAY['{"amount": 1}', '{"amount": 2}']::jsonb[], ARRAY['stripe', 'stripe'], ARRAY[NULL, 3]);
-- max_attempts differs from the stored job: JG001
SELECT ord, job_id, created, sqlstate, message FROM jobguard.submit_many(
	ARRAY['erin'], ARRAY['n2'], ARRAY['charge'], ARRAY['{"amount": 2}']::jsonb[], ARRAY['stripe']);
-- an empty batch
SELECT count(*) AS empty_batch FROM jobguard.submit_many('{}', '{}', '{}', '{}', '{}');
-- whole-call refusals
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.submit_many(ARRAY['a'], ARRAY['k', 'l'],
	ARRAY['op'], ARRAY['{}']::jsonb[], ARRAY['p'])$$) AS unequal;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.submit_many(ARRAY['a'], ARRAY['k'],
	ARRAY['op'], ARRAY['{}']::jsonb[], ARRAY['p'], ARRAY[1, 2])$$) AS unequal_max_attempts;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.submit_many(ARRAY['a'], NULL,
	ARRAY['op'], ARRAY['{}']::jsonb[], ARRAY['p'])$$) AS null_array;
SELECT public.jg_wk_error_of($$SELECT * FROM jobguard.submit_many(ARRAY[['a']], ARRAY[['k']],
	ARRAY[['op']], ARRAY[['{}']]::jsonb[], ARRAY[['p']])$$) AS two_dims;
SELECT count(*) AS jobs FROM jobguard.jobs;
SELECT count(*) AS violations FROM jobguard.check_invariants();

---------------------------------------------------------------------------
-- scopes: claim, heartbeat and submit_many act in the caller's scope only
---------------------------------------------------------------------------
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
CREATE ROLE regress_jg_wk_shop;
CREATE ROLE regress_jg_wk_blog;
SELECT jobguard.grant_client('regress_jg_wk_shop', 'wk_shop');
SELECT jobguard.grant_client('regress_jg_wk_blog', 'wk_blog');
SET ROLE regress_jg_wk_shop;
SELECT ord, job_id, created FROM jobguard.submit_many(ARRAY['u', 'u'], ARRAY['s1', 's2'],
	ARRAY['charge', 'charge'], ARRAY['{}', '{}']::jsonb[], ARRAY['stripe', 'stripe']);
RESET ROLE;
SET ROLE regress_jg_wk_blog;
-- the same keys in another scope: new jobs, no JG001
SELECT ord, job_id, created, sqlstate FROM jobguard.submit_many(ARRAY['u'], ARRAY['s1'],
	ARRAY['publish'], ARRAY['{}']::jsonb[], ARRAY['wp']);
-- the blog's worker sees only the blog's job
SELECT job_id, operation FROM jobguard.claim('blog-worker', max_jobs => 10);
SELECT attempt_id AS blog_attempt FROM jobguard.attempt_overview \gset
RESET ROLE;
SET ROLE regress_jg_wk_shop;
SELECT job_id, operation, provider FROM jobguard.claim('shop-worker');
-- another scope's attempt is answered as one that does not exist
SELECT replace(public.jg_wk_error_of(format('SELECT jobguard.heartbeat(%s)', :blog_attempt)),
			   :'blog_attempt', '<id>') AS other_scope;
SELECT replace(public.jg_wk_error_of('SELECT jobguard.heartbeat(424242)'), '424242', '<id>') AS missing;
RESET ROLE;
-- an operator claims in every scope
SELECT job_id AS s3 FROM jobguard.submit('u', 's3', 'charge', '{}', 'stripe') \gset
SET ROLE regress_jg_wk_blog;
SELECT count(*) AS blog_sees_default FROM jobguard.claim('blog-worker', max_jobs => 10);
RESET ROLE;
SELECT job_id, scope FROM jobguard.claim('ops-worker', max_jobs => 10) c
  JOIN jobguard.jobs j ON j.id = c.job_id;
SELECT count(*) AS violations FROM jobguard.check_invariants();
SELECT jobguard.revoke_client(r::regrole) FROM unnest(ARRAY['regress_jg_wk_shop', 'regress_jg_wk_blog']) r;
DROP ROLE regress_jg_wk_shop, regress_jg_wk_blog;
DROP FUNCTION public.jg_wk_error_of(text);

-- a claim that waited for work begins its attempt when the work came, not
-- when its transaction started: the deadline is a whole timeout away
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT dblink_connect('waiter', format('dbname=%s port=%s host=%s', current_database(),
	current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1)));
-- (a timeout of 30 s, and the submit only once the claim is seen waiting:
-- the test must hold on a server 50 times slower, as under valgrind)
SELECT dblink_send_query('waiter', $$
	SELECT c.deadline > clock_timestamp() AS deadline_ahead,
		   c.deadline - now() > interval '31 seconds' AS later_than_the_transaction
	  FROM jobguard.claim('late-worker', ARRAY['late_op'], timeout => '30 seconds',
						  wait => '120 seconds') c$$);
DO $$
BEGIN
	FOR i IN 1..1200 LOOP
		EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity
						   WHERE query LIKE '%claim(''late-worker''%' AND state = 'active'
						   AND wait_event_type = 'Extension' AND pid <> pg_backend_pid());
		PERFORM pg_sleep(0.05);
	END LOOP;
END $$;
SELECT pg_sleep(1.5);
SELECT created FROM jobguard.submit('olga', 'late-1', 'late_op', '{}', 'p');
SELECT * FROM dblink_get_result('waiter') AS t(deadline_ahead boolean, later_than_the_transaction boolean);
SELECT dblink_disconnect('waiter');
