-- Flow control (1.2): submit's run_at and priority (not part of the
-- request), claim's order (priority, run time, id), run_at respected by
-- claim and not by begin_attempt, reschedule and retry_job in every job
-- state, and the provider limits (max_in_flight, max_per_second).
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
-- an error as SQLSTATE, message, DETAIL and HINT (times masked)
CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text
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
-- the stored schedule of a job: priority, and whether it waits (and how long)
CREATE FUNCTION pg_temp.schedule_of(id bigint)
RETURNS TABLE (priority smallint, waits boolean, max_attempts integer)
LANGUAGE sql AS $$
	SELECT j.priority, j.not_before > now(), j.max_attempts
	  FROM jobguard.jobs j WHERE j.id = schedule_of.id
$$;
-- which jobs claim hands out, in the order it takes them (one per call)
CREATE FUNCTION pg_temp.claim_order(n integer, worker text DEFAULT 'w')
RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
	j bigint;
BEGIN
	FOR i IN 1..n LOOP
		SELECT c.job_id INTO j FROM jobguard.claim(worker) c;
		EXIT WHEN j IS NULL;
		RETURN NEXT j;
		j := NULL;
	END LOOP;
END $$;

---------------------------------------------------------------------------
-- submit: run_at and priority are stored, not part of the request
---------------------------------------------------------------------------
SELECT job_id AS j1 FROM jobguard.submit('o', 'a1', 'op', '{}', 'p') \gset
SELECT job_id AS j2 FROM jobguard.submit('o', 'a2', 'op', '{}', 'p', priority => -5) \gset
SELECT job_id AS j3 FROM jobguard.submit('o', 'a3', 'op', '{}', 'p', run_at => now() + interval '1 hour') \gset
SELECT job_id AS j4 FROM jobguard.submit('o', 'a4', 'op', '{}', 'p', 3, NULL, 7) \gset
SELECT job_id AS j5 FROM jobguard.submit('o', 'a5', 'op', '{}', 'p', run_at => now() - interval '1 hour') \gset
SELECT * FROM pg_temp.schedule_of(:j1);
SELECT * FROM pg_temp.schedule_of(:j2);
SELECT * FROM pg_temp.schedule_of(:j3);
SELECT * FROM pg_temp.schedule_of(:j4);
-- a replay with another run_at or priority is a replay and changes nothing
SELECT job_id = :j2 AS same, created FROM jobguard.submit('o', 'a2', 'op', '{}', 'p', priority => 9);
SELECT job_id = :j3 AS same, created FROM jobguard.submit('o', 'a3', 'op', '{}', 'p', run_at => now() + interval '5 hours', priority => 3);
SELECT job_id = :j1 AS same, created FROM jobguard.submit('o', 'a1', 'op', '{}', 'p', NULL, now() + interval '1 day', 1);
SELECT * FROM pg_temp.schedule_of(:j2);
SELECT * FROM pg_temp.schedule_of(:j3);
SELECT * FROM pg_temp.schedule_of(:j1);
-- but another request under the key is still JG001
SELECT pg_temp.error_of($$SELECT jobguard.submit('o', 'a2', 'op', '{"x": 1}', 'p', priority => -5)$$);
-- a priority must fit a smallint (22023, nothing written)
SELECT pg_temp.error_of($$SELECT jobguard.submit('o', 'a6', 'op', '{}', 'p', priority => 32768)$$);
SELECT pg_temp.error_of($$SELECT jobguard.submit('o', 'a6', 'op', '{}', 'p', priority => -32769)$$);
SELECT count(*) FROM jobguard.jobs WHERE idempotency_key = 'a6';
SELECT job_id > 0 AS ok FROM jobguard.submit('o', 'a6', 'op', '{}', 'p', priority => -32768);
SELECT job_id > 0 AS ok FROM jobguard.submit('o', 'a7', 'op', '{}', 'p', priority => 32767);
SELECT idempotency_key, priority FROM jobguard.jobs WHERE idempotency_key IN ('a6', 'a7') ORDER BY 1;
-- NULL priority is the default
SELECT job_id AS j8 FROM jobguard.submit('o', 'a8', 'op', '{}', 'p', priority => NULL) \gset
SELECT * FROM pg_temp.schedule_of(:j8);

---------------------------------------------------------------------------
-- claim: priority, then run time (run_at, else creation), then id;
-- run_at held back only by claim
---------------------------------------------------------------------------
-- a6 (-32768), a2 (-5), a5 (run_at an hour ago), a8, a4 (7), a7 (32767);
-- a1 and a3 wait
SELECT o.n, j.idempotency_key
  FROM pg_temp.claim_order(10) WITH ORDINALITY AS o(job_id, n)
  JOIN jobguard.jobs j ON j.id = o.job_id ORDER BY o.n;
-- explicit begin_attempt does not wait for run_at (as with a backoff)
SELECT jobguard.begin_attempt(:j3) > 0 AS begun;
SELECT state FROM jobguard.job_overview WHERE job_id = :j3;

---------------------------------------------------------------------------
-- submit_many: run_ats and priorities, per row
---------------------------------------------------------------------------
TRUNCATE jobguard.jobs, jobguard.attempts RESTART IDENTITY;
SELECT * FROM jobguard.submit_many('{o,o,o,o}', '{b1,b2,b3,b4}', '{op,op,op,op}',
	'{"{}","{}","{}","{}"}', '{p,p,p,p}', NULL,
	ARRAY[NULL, now() + interval '1 hour', NULL, NULL]::timestamptz[], '{1,2,70000,NULL}');
SELECT idempotency_key, priority, not_before > now() AS waits FROM jobguard.jobs ORDER BY id;
-- replays in a batch: other schedules change nothing
SELECT ord, created FROM jobguard.submit_many('{o,o}', '{b1,b2}', '{op,op}', '{"{}","{}"}', '{p,p}',
	NULL, ARRAY[now() + interval '3 hours', NULL]::timestamptz[], '{-3,-4}');
SELECT idempotency_key, priority, not_before > now() AS waits FROM jobguard.jobs ORDER BY id;
-- only one schedule array, and the old six arguments
SELECT ord, created FROM jobguard.submit_many('{o}', '{b5}', '{op}', '{"{}"}', '{p}', NULL, NULL, '{4}');
SELECT ord, created FROM jobguard.submit_many('{o}', '{b6}', '{op}', '{"{}"}', '{p}', NULL,
	ARRAY[now() + interval '1 hour']::timestamptz[]);
SELECT ord, created FROM jobguard.submit_many('{o}', '{b7}', '{op}', '{"{}"}', '{p}');
SELECT idempotency_key, priority, not_before > now() AS waits FROM jobguard.jobs WHERE id > 3 ORDER BY id;
-- arrays of another length refuse the call
SELECT pg_temp.error_of($$SELECT * FROM jobguard.submit_many('{o}', '{b9}', '{op}', '{"{}"}', '{p}', NULL, NULL, '{1,2}')$$);
SELECT pg_temp.error_of($$SELECT * FROM jobguard.submit_many('{o}', '{b9}', '{op}', '{"{}"}', '{p}', NULL, '{}'::timestamptz[])$$);
-- claim order over the batch: b5 (4) is last of the runnable ones
SELECT j.idempotency_key
  FROM pg_temp.claim_order(10) WITH ORDINALITY AS o(job_id, n)
  JOIN jobguard.jobs j ON j.id = o.job_id ORDER BY o.n;

---------------------------------------------------------------------------
-- reschedule: pending jobs only
---------------------------------------------------------------------------
TRUNCATE jobguard.jobs, jobguard.attempts RESTART IDENTITY;
SELECT job_id AS pend FROM jobguard.submit('o', 'r1', 'op', '{}', 'p') \gset
SELECT job_id AS later FROM jobguard.submit('o', 'r2', 'op', '{}', 'p', run_at => now() + interval '1 day') \gset
SELECT job_id AS run FROM jobguard.submit('o', 'r3', 'op', '{}', 'p') \gset
SELECT job_id AS unk FROM jobguard.submit('o', 'r4', 'op', '{}', 'p') \gset
SELECT job_id AS done FROM jobguard.submit('o', 'r5', 'op', '{}', 'p') \gset
SELECT job_id AS fail FROM jobguard.submit('o', 'r6', 'op', '{}', 'p', 1) \gset
SELECT job_id AS canc FROM jobguard.submit('o', 'r7', 'op', '{}', 'p') \gset
SELECT job_id AS back FROM jobguard.submit('o', 'r8', 'op', '{}', 'p') \gset
SELECT jobguard.begin_attempt(:run) AS run_a \gset
SELECT jobguard.mark_unknown(jobguard.begin_attempt(:unk));
SELECT jobguard.finish_attempt(jobguard.begin_attempt(:done), '{}');
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:fail), 'no');
SELECT jobguard.cancel_job(:canc, 'changed my mind');
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:back), 'later', interval '1 day');
SELECT job_id, state FROM jobguard.job_overview ORDER BY job_id;
-- pending: new priority, new run time; NULL leaves a part as it is
SELECT jobguard.reschedule(:pend, priority => 12);
SELECT * FROM pg_temp.schedule_of(:pend);
SELECT jobguard.reschedule(:pend, now() + interval '2 hours');
SELECT * FROM pg_temp.schedule_of(:pend);
SELECT jobguard.reschedule(:pend);
SELECT * FROM pg_temp.schedule_of(:pend);
-- a waiting job made due now; a backoff's not_before replaced
SELECT jobguard.reschedule(:later, now());
SELECT jobguard.reschedule(:back, now() - interval '1 second');
SELECT * FROM pg_temp.schedule_of(:back);
SELECT j.idempotency_key FROM pg_temp.claim_order(10) o JOIN jobguard.jobs j ON j.id = o ORDER BY j.id;
-- every other state: JG006, its DETAIL naming the state
SELECT pg_temp.error_of(format('SELECT jobguard.reschedule(%s, priority => 1)', :run));
SELECT pg_temp.error_of(format('SELECT jobguard.reschedule(%s, priority => 1)', :unk));
SELECT pg_temp.error_of(format('SELECT jobguard.reschedule(%s, priority => 1)', :done));
SELECT pg_temp.error_of(format('SELECT jobguard.reschedule(%s, priority => 1)', :fail));
SELECT pg_temp.error_of(format('SELECT jobguard.reschedule(%s, priority => 1)', :canc));
-- a job that does not exist, a NULL id, a priority out of range
SELECT pg_temp.error_of('SELECT jobguard.reschedule(999999, priority => 1)');
SELECT pg_temp.error_of('SELECT jobguard.reschedule(NULL, priority => 1)');
SELECT pg_temp.error_of(format('SELECT jobguard.reschedule(%s, priority => 40000)', :pend));
SELECT priority FROM jobguard.jobs WHERE id IN (:run, :unk, :done, :fail, :canc) ORDER BY id;

---------------------------------------------------------------------------
-- retry_job: failed jobs only, operators only
---------------------------------------------------------------------------
SELECT job_id AS fail2 FROM jobguard.submit('o', 'r9', 'op', '{}', 'p', 2) \gset
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:fail2), 'no', interval '1 day');
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:fail2), 'no again', interval '1 day');
SELECT state, attempts, max_attempts FROM jobguard.job_overview WHERE job_id = :fail2;
SELECT jobguard.retry_job(:fail2, 2, 'provider fixed their outage');
SELECT state, attempts, max_attempts FROM jobguard.job_overview WHERE job_id = :fail2;
SELECT r->>'by' AS by, r->'extra_attempts' AS extra, r->'max_attempts_before' AS before,
	   r->>'reason' AS reason, (r->>'at')::timestamptz <= now() AS at
  FROM jobguard.jobs j, jsonb_array_elements(j.retries) r WHERE j.id = :fail2;
-- pending under the same id and key, runnable at once (the backoff is
-- gone); a replay is compared with max_attempts as submitted
SELECT job_id = :fail2 AS same, created FROM jobguard.submit('o', 'r9', 'op', '{}', 'p', 2);
SELECT pg_temp.error_of(format('SELECT jobguard.submit(%L, %L, %L, %L, %L, 4)', 'o', 'r9', 'op', '{}', 'p'));
SELECT ord, created, sqlstate FROM jobguard.submit_many('{o,o}', '{r9,r9}', '{op,op}', '{"{}","{}"}', '{p,p}', '{2,4}');
SELECT count(*) FROM jobguard.claim('w') c WHERE c.job_id = :fail2 AND c.attempt_no = 3;
-- the default is one more attempt, and the reason may be NULL
SELECT jobguard.retry_job(:fail);
SELECT state, attempts, max_attempts FROM jobguard.job_overview WHERE job_id = :fail;
SELECT jsonb_array_length(retries), retries->0->'reason' FROM jobguard.jobs WHERE id = :fail;
-- every other state: JG006
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s)', :pend));
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s)', :run));
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s)', :unk));
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s)', :done));
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s)', :canc));
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s)', :fail2));
-- bad arguments: nothing written
SELECT pg_temp.error_of('SELECT jobguard.retry_job(999999)');
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s, 0)', :fail));
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s, NULL)', :fail));
SELECT count(*) FROM jobguard.jobs WHERE retries IS NOT NULL;
-- clients may reschedule but not retry; another scope's job does not exist for them
CREATE ROLE regress_jg_flow_client;
CREATE ROLE regress_jg_flow_other;
CREATE ROLE regress_jg_flow_op;
SELECT jobguard.grant_client('regress_jg_flow_client', 'flow_shop');
SELECT jobguard.grant_client('regress_jg_flow_other', 'flow_blog');
SELECT jobguard.grant_operator('regress_jg_flow_op');
SET ROLE regress_jg_flow_client;
SELECT job_id AS mine FROM jobguard.submit('o', 's1', 'op', '{}', 'p', 1, priority => 2) \gset
SELECT jobguard.reschedule(:mine, priority => 3);
SELECT pg_temp.error_of(format('SELECT jobguard.reschedule(%s, priority => 1)', :pend));
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s)', :fail));
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:mine), 'no');
RESET ROLE;
-- EXECUTE granted by hand does not make a client an operator
GRANT EXECUTE ON FUNCTION jobguard.retry_job(bigint, integer, text) TO regress_jg_flow_client;
SET ROLE regress_jg_flow_client;
SELECT pg_temp.error_of(format('SELECT jobguard.retry_job(%s)', :mine));
RESET ROLE;
SET ROLE regress_jg_flow_other;
SELECT pg_temp.error_of(format('SELECT jobguard.reschedule(%s, priority => 1)', :mine));
RESET ROLE;
SET ROLE regress_jg_flow_op;
SELECT jobguard.retry_job(:mine, 1, 'operator says so');
SELECT jobguard.reschedule(:mine, priority => -1);
RESET ROLE;
SELECT priority, scope, retries->0->>'by' AS by FROM jobguard.jobs WHERE id = :mine;
SELECT state FROM jobguard.job_overview WHERE job_id = :mine;
SELECT jobguard.revoke_client('regress_jg_flow_client');
SELECT jobguard.revoke_client('regress_jg_flow_other');
SELECT jobguard.revoke_client('regress_jg_flow_op');
DROP ROLE regress_jg_flow_client;
DROP ROLE regress_jg_flow_other;
DROP ROLE regress_jg_flow_op;

---------------------------------------------------------------------------
-- limits: max_in_flight (open = started or unknown)
---------------------------------------------------------------------------
TRUNCATE jobguard.jobs, jobguard.attempts RESTART IDENTITY;
SELECT jobguard.set_provider_policy('busy', max_in_flight => 2);
SELECT job_id AS l1 FROM jobguard.submit('o', 'l1', 'op', '{}', 'busy') \gset
SELECT job_id AS l2 FROM jobguard.submit('o', 'l2', 'op', '{}', 'busy') \gset
SELECT job_id AS l3 FROM jobguard.submit('o', 'l3', 'op', '{}', 'busy') \gset
SELECT job_id AS l4 FROM jobguard.submit('o', 'l4', 'op', '{}', 'busy') \gset
SELECT job_id AS f1 FROM jobguard.submit('o', 'f1', 'op', '{}', 'free') \gset
SELECT jobguard.begin_attempt(:l1) AS a1 \gset
SELECT jobguard.mark_unknown(jobguard.begin_attempt(:l2));
-- the third open attempt: JG010, nothing written
SELECT pg_temp.error_of(format('SELECT jobguard.begin_attempt(%s)', :l3));
SELECT count(*) AS attempts_of_l3 FROM jobguard.attempts WHERE job_id = :l3;
-- claim passes over the provider at its limit (no wait, no error) and
-- takes the others; the start it passed over is counted
SELECT job_id = :f1 AS free_job, provider FROM jobguard.claim('w', max_jobs => 10);
SELECT metric, value FROM jobguard.stats() WHERE metric ~ '^provider\.(busy|spare|slow)\.' ORDER BY metric;
-- a slot opens when an attempt ends: the next start takes it
SELECT jobguard.finish_attempt(:a1, '{}');
SELECT job_id = :l3 AS l3, provider FROM jobguard.claim('w', max_jobs => 10);
SELECT pg_temp.error_of(format('SELECT jobguard.begin_attempt(%s)', :l4));
-- a failover to another provider draws on that provider's limits
SELECT jobguard.certify_provider('op', 'spare', '{}');
SELECT jobguard.set_provider_policy('spare', max_in_flight => 1);
SELECT jobguard.begin_attempt(:l4, 'spare') > 0 AS began_on_spare;
SELECT job_id AS l5 FROM jobguard.submit('o', 'l5', 'op', '{}', 'spare') \gset
SELECT pg_temp.error_of(format('SELECT jobguard.begin_attempt(%s)', :l5));
-- without a limit any more (the backends' caches follow)
SELECT job_id AS l6 FROM jobguard.submit('o', 'l6', 'op', '{}', 'busy') \gset
SELECT pg_temp.error_of(format('SELECT jobguard.begin_attempt(%s)', :l6));
SELECT jobguard.set_provider_policy('busy');
SELECT jobguard.begin_attempt(:l6) > 0 AS began_unlimited;
SELECT metric, value FROM jobguard.stats() WHERE metric ~ '^provider\.(busy|spare|slow)\.' ORDER BY metric;

---------------------------------------------------------------------------
-- limits: max_per_second (a bucket of one second's worth, at least one)
---------------------------------------------------------------------------
SELECT jobguard.set_provider_policy('slow', max_per_second => 0.001);
SELECT job_id AS s1 FROM jobguard.submit('o', 'sl1', 'op', '{}', 'slow') \gset
SELECT job_id AS s2 FROM jobguard.submit('o', 'sl2', 'op', '{}', 'slow') \gset
SELECT job_id AS s3 FROM jobguard.submit('o', 'sl3', 'op', '{}', 'slow') \gset
SELECT jobguard.finish_attempt(jobguard.begin_attempt(:s1), '{}');
-- the next start: JG010 with a HINT of when to retry (about 1000 s)
SELECT pg_temp.error_of(format('SELECT jobguard.begin_attempt(%s)', :s2)) AS e \gset
SELECT regexp_replace(:'e', 'Retry in \d+ ms', 'Retry in <n> ms') AS error,
	   (regexp_match(:'e', 'Retry in (\d+) ms'))[1]::bigint BETWEEN 990000 AND 1000001 AS about_1000_s;
SELECT count(*) FROM jobguard.attempts WHERE job_id = :s2;
SELECT count(*) AS claimed FROM jobguard.claim('w', ARRAY['op'], max_jobs => 10) c WHERE c.provider = 'slow';
SELECT metric, value FROM jobguard.stats() WHERE metric LIKE 'provider.slow.%' ORDER BY metric;
-- a faster rate: the bucket holds one second's worth
SELECT jobguard.set_provider_policy('slow', max_per_second => 1000);
SELECT jobguard.begin_attempt(:s2) > 0 AS began;
SELECT jobguard.set_provider_policy('slow');
SELECT jobguard.set_provider_policy('spare');

---------------------------------------------------------------------------
-- limits and redrive: a redrive is a start (it draws on max_per_second)
-- and takes the stalled attempt's slot of max_in_flight
---------------------------------------------------------------------------
SELECT jobguard.set_provider_policy('dedup', dedupes_for => '1 day', max_in_flight => 1,
									max_per_second => 0.001);
SELECT job_id AS d1 FROM jobguard.submit('o', 'dd1', 'op', '{}', 'dedup') \gset
-- it uses the bucket's one start, and stalls: unknown, for longer than
-- its own timeout (what claim waits before it repeats a request)
SELECT jobguard.begin_attempt(:d1, timeout => '1 millisecond') AS d1a \gset
SELECT jobguard.mark_unknown(:d1a);
SELECT pg_sleep(0.05);
SELECT regexp_replace(pg_temp.error_of(format('SELECT jobguard.redrive_attempt(%s)', :d1a)),
					  'Retry in \d+ ms', 'Retry in <n> ms') AS redrive_beyond_the_rate;
-- refused and undone: the stalled attempt is still unknown, nothing new began
SELECT attempt_no, state FROM jobguard.attempt_overview WHERE job_id = :d1 ORDER BY attempt_no;
-- claim passes the redrive over, never erring
SELECT count(*) AS claimed FROM jobguard.claim('w', ARRAY['op'], provider => 'dedup', max_jobs => 5);
SELECT value AS throttled FROM jobguard.stats() WHERE metric = 'provider.dedup.throttled';
-- a faster rate: max_in_flight 1 is full with the stalled attempt, whose
-- slot the redrive takes
SELECT jobguard.set_provider_policy('dedup', dedupes_for => '1 day', max_in_flight => 1,
									max_per_second => 1000);
SELECT jobguard.redrive_attempt(:d1a) > :d1a AS redriven_in_its_slot;
-- (the redrive has the stalled attempt's timeout of 1 ms: open, whichever)
SELECT attempt_no, state IN ('started', 'unknown') AS open, cancel_reason
  FROM jobguard.attempt_overview WHERE job_id = :d1 ORDER BY attempt_no;
SELECT jobguard.set_provider_policy('dedup');
