-- Attempts: every transition of the state table, every refusal with its
-- SQLSTATE, deadlines, attempt_key replay, idempotent finish, cancel_job.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
\i sql/include/helpers.sql
-- the whole error, with the deadline timestamp masked so the output is stable
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
		|| E'\nDETAIL: ' || regexp_replace(det, '\d{4}-\d\d-\d\d [0-9:.+-]+', '<deadline>')
		|| E'\nHINT: ' || hin;
END $$;
-- states of a job's attempts, stored and effective, in order
CREATE FUNCTION pg_temp.attempts(job bigint)
RETURNS TABLE (no integer, id bigint, provider text, state text, stored text,
			   read_version bigint, lost_to bigint, lost_result jsonb, error text)
LANGUAGE sql AS $$
	SELECT v.attempt_no, v.attempt_id, v.provider, v.state, a.state, v.read_version,
		   v.lost_to, v.lost_result, v.error
	  FROM jobguard.attempts_of(job) v JOIN jobguard.attempts a ON a.id = v.attempt_id
$$;
-- a fingerprint of everything jobguard stores, to show refused calls write nothing
CREATE FUNCTION pg_temp.fingerprint() RETURNS text
LANGUAGE sql AS $$
	SELECT md5(coalesce((SELECT string_agg(j::text, ',' ORDER BY j.id) FROM jobguard.jobs j), '') ||
			   coalesce((SELECT string_agg(a::text, ',' ORDER BY a.id) FROM jobguard.attempts a), ''))
$$;

SELECT job_id FROM jobguard.submit('alice', 'job-1', 'charge', '{"amount": 1}', 'stripe');
SELECT jobguard.job_state(1);	-- pending: no attempt yet
SELECT * FROM jobguard.attempts_of(1);	-- none yet

-- begin: attempt 1 is started, reads version 1, deadline = start + timeout
SELECT jobguard.begin_attempt(1, timeout => '10 minutes');
SELECT attempt_no, provider, state, read_version, deadline - started_at AS timeout
  FROM jobguard.attempts_of(1);
SELECT jobguard.job_state(1);	-- running

-- the gate: no new attempt while one is started
SELECT pg_temp.error_of('SELECT jobguard.begin_attempt(1)');
SELECT pg_temp.sqlstate_of('SELECT jobguard.begin_attempt(1)');
SELECT pg_temp.sqlstate_of($$SELECT jobguard.begin_attempt(1, 'stripe', '1 minute', 'some-key')$$);

-- started -> unknown (a caller saw a timeout), unknown -> unknown
SELECT jobguard.mark_unknown(1);
SELECT jobguard.mark_unknown(1);
SELECT jobguard.job_state(1);	-- unknown, not failed
SELECT pg_temp.error_of('SELECT jobguard.begin_attempt(1)');	-- still closed
-- unknown -> failed opens the gate
SELECT jobguard.fail_attempt(1, 'provider answered 502');
SELECT jobguard.job_state(1);	-- pending: more attempts may begin
-- started -> failed
SELECT jobguard.begin_attempt(1);
SELECT jobguard.fail_attempt(2, 'card declined');
-- started -> cancelled opens the gate; cancelled -> failed
SELECT jobguard.begin_attempt(1);
SELECT jobguard.cancel_attempt(3, 'operator: stop waiting');
SELECT jobguard.job_state(1);	-- pending
SELECT jobguard.fail_attempt(3, 'provider reported failure after cancel');
-- unknown -> cancelled
SELECT jobguard.begin_attempt(1);
SELECT jobguard.mark_unknown(4);
SELECT jobguard.cancel_attempt(4, 'timed out, failing over');
-- started -> succeeded: the result slot is taken, the version moves on
SELECT jobguard.begin_attempt(1);
SELECT jobguard.finish_attempt(5, '{"charge_id": "ch_1"}');
SELECT job_id, state, version, attempts, completed_by, result FROM jobguard.job(1);
-- cancelled -> lost: attempt 4's late result goes through the compare-and-swap and loses
SELECT jobguard.finish_attempt(4, '{"charge_id": "ch_late"}');
SELECT * FROM pg_temp.attempts(1);
-- the job kept the winner's result
SELECT result, completed_by, version FROM jobguard.jobs WHERE id = 1;

-- replays: an equal result answers as before and changes nothing
SELECT pg_temp.fingerprint() AS before \gset
SELECT jobguard.finish_attempt(5, '{"charge_id": "ch_1"}');
SELECT jobguard.finish_attempt(4, '{"charge_id":"ch_late"}');
SELECT pg_temp.fingerprint() = :'before' AS unchanged;
-- a different result is JG007, on the winner and on the loser
SELECT jobguard.finish_attempt(5, '{"charge_id": "ch_2"}');
SELECT pg_temp.sqlstate_of($$SELECT jobguard.finish_attempt(5, '{"charge_id": "ch_2"}')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.finish_attempt(4, '{}')$$);
-- a failed attempt cannot report a result: JG006
SELECT jobguard.finish_attempt(1, '{"charge_id": "ch_x"}');

-- every transition the state table does not allow is JG006, naming the
-- attempt and its state
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	('SELECT jobguard.mark_unknown(5)'),			-- succeeded
	('SELECT jobguard.mark_unknown(4)'),			-- lost
	('SELECT jobguard.mark_unknown(1)'),			-- failed
	('SELECT jobguard.mark_unknown(3)'),			-- failed (after cancel)
	($$SELECT jobguard.fail_attempt(5, 'x')$$),		-- succeeded
	($$SELECT jobguard.fail_attempt(4, 'x')$$),		-- lost
	($$SELECT jobguard.fail_attempt(1, 'x')$$),		-- failed
	($$SELECT jobguard.cancel_attempt(5, 'x')$$),	-- succeeded
	($$SELECT jobguard.cancel_attempt(4, 'x')$$),	-- lost
	($$SELECT jobguard.cancel_attempt(1, 'x')$$),	-- failed
	($$SELECT jobguard.finish_attempt(2, '{}')$$)	-- failed
  ) AS t(call);
SELECT pg_temp.fingerprint() = :'before' AS refused_calls_wrote_nothing;

-- a cancelled attempt cannot be cancelled again, nor marked unknown
SELECT job_id FROM jobguard.submit('alice', 'job-2', 'charge', '{"amount": 2}', 'stripe');
SELECT jobguard.begin_attempt(2);
SELECT jobguard.cancel_attempt(6, 'first cancel');
SELECT jobguard.cancel_attempt(6, 'second cancel');
SELECT jobguard.mark_unknown(6);
-- cancelled -> succeeded: a late result wins if no one else has
SELECT jobguard.finish_attempt(6, '{"charge_id": "late but first"}');
SELECT job_id, state, completed_by, result FROM jobguard.job(2);
-- a closed job refuses new attempts: JG003
SELECT jobguard.begin_attempt(2);
SELECT pg_temp.sqlstate_of('SELECT jobguard.begin_attempt(2)');

-- unknown -> succeeded, and a JSON null is a result like any other
SELECT job_id FROM jobguard.submit('alice', 'job-3', 'ping', '{}', 'p1');
SELECT jobguard.begin_attempt(3);
SELECT jobguard.mark_unknown(7);
SELECT jobguard.finish_attempt(7, 'null');
SELECT state, result, result IS NULL AS sql_null FROM jobguard.job(3);

-- deadlines: a started attempt past its deadline IS unknown, before
-- anything writes that down, for every rule and every view
SELECT job_id FROM jobguard.submit('alice', 'job-4', 'charge', '{"amount": 4}', 'stripe');
SELECT jobguard.begin_attempt(4, timeout => '1 second');
SELECT jobguard.job_state(4);	-- running
SELECT pg_sleep(1.1);
SELECT jobguard.job_state(4) AS job_state,
	   (SELECT state FROM jobguard.job(4)) AS job,
	   (SELECT state FROM jobguard.job_overview WHERE job_id = 4) AS overview,
	   (SELECT state FROM jobguard.attempts_of(4)) AS attempt,
	   (SELECT state FROM jobguard.attempts WHERE job_id = 4) AS stored;
SELECT pg_temp.sqlstate_of('SELECT jobguard.begin_attempt(4)');	-- the gate treats it as unknown
-- mark_unknown writes down what the deadline already said
SELECT jobguard.mark_unknown(8);
SELECT state FROM jobguard.attempts WHERE id = 8;
-- a timeout is never a failure: the late result still wins
SELECT jobguard.finish_attempt(8, '{"charge_id": "slow but fine"}');
SELECT jobguard.job_state(4);
-- an overdue started attempt may be cancelled, then a new one begins
SELECT job_id FROM jobguard.submit('alice', 'job-5', 'charge', '{"amount": 5}', 'stripe');
SELECT jobguard.begin_attempt(5, timeout => '100 milliseconds');
SELECT pg_sleep(0.2);
SELECT jobguard.cancel_attempt(9, 'deadline passed');
SELECT jobguard.begin_attempt(5) AS next_attempt;
SELECT no, state, stored FROM pg_temp.attempts(5);

-- attempt_key: a worker retrying its own begin gets its own attempt back
SELECT job_id FROM jobguard.submit('alice', 'job-6', 'charge', '{"amount": 6}', 'stripe');
SELECT jobguard.begin_attempt(6, attempt_key => 'worker-7:run-1') AS first;
SELECT jobguard.begin_attempt(6, attempt_key => 'worker-7:run-1') AS replayed;
SELECT jobguard.begin_attempt(6, 'stripe', '5 minutes', 'worker-7:run-1') AS replayed_with_provider;
-- another key, no key, or the same key for another provider is refused
SELECT pg_temp.sqlstate_of($$SELECT jobguard.begin_attempt(6, attempt_key => 'worker-8:run-1')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.begin_attempt(6)$$);
SELECT jobguard.certify_provider('charge', 'adyen');
SELECT pg_temp.sqlstate_of($$SELECT jobguard.begin_attempt(6, 'adyen', attempt_key => 'worker-7:run-1')$$);
-- the refused begins created nothing
SELECT count(*) AS attempts_of_job_6 FROM jobguard.attempts WHERE job_id = 6;
-- once the attempt is closed, the same key begins a new attempt
SELECT jobguard.fail_attempt(11, 'boom');
SELECT jobguard.begin_attempt(6, attempt_key => 'worker-7:run-1') AS new_attempt;

-- max_attempts: JG005 once used up; the job is then failed
SELECT job_id FROM jobguard.submit('alice', 'job-7', 'charge', '{"amount": 7}', 'stripe', 2);
SELECT jobguard.begin_attempt(7);
SELECT jobguard.fail_attempt(13, 'declined');
SELECT jobguard.begin_attempt(7);
SELECT jobguard.job_state(7);	-- running: the last attempt is open
SELECT jobguard.fail_attempt(14, 'declined again');
SELECT jobguard.job_state(7);	-- failed
SELECT jobguard.begin_attempt(7);
-- a failed job may still be cancelled
SELECT jobguard.cancel_job(7, 'give up');
SELECT jobguard.job_state(7);

-- cancel_job: no new attempts, the version moves on, later results lose
SELECT job_id FROM jobguard.submit('alice', 'job-8', 'charge', '{"amount": 8}', 'stripe');
SELECT jobguard.begin_attempt(8);
SELECT version FROM jobguard.jobs WHERE id = 8;
SELECT jobguard.cancel_job(8, 'customer cancelled the order');
SELECT state, version, cancelled_at IS NOT NULL AS cancelled FROM jobguard.job(8);
SELECT cancel_reason FROM jobguard.jobs WHERE id = 8;
SELECT jobguard.begin_attempt(8);
SELECT jobguard.finish_attempt(15, '{"charge_id": "too late"}');
SELECT no, state, lost_to, lost_result FROM pg_temp.attempts(8);
SELECT result, completed_by FROM jobguard.jobs WHERE id = 8;
-- cancelling again changes nothing; a succeeded job cannot be cancelled
SELECT jobguard.cancel_job(8, 'again');
SELECT version, cancel_reason FROM jobguard.jobs WHERE id = 8;
SELECT jobguard.cancel_job(1, 'too late');
SELECT pg_temp.sqlstate_of($$SELECT jobguard.cancel_job(1, 'too late')$$);

-- every job state, side by side
SELECT job_id, idempotency_key, state, version, attempts, completed_by
  FROM jobguard.job_overview ORDER BY job_id;

-- unknown ids: JG008 for jobs, JG009 for attempts
SELECT jobguard.begin_attempt(999);
SELECT jobguard.finish_attempt(999, '{}');
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	('SELECT jobguard.begin_attempt(999)'),
	($$SELECT jobguard.cancel_job(999, 'x')$$),
	('SELECT jobguard.job_state(999)'),
	('SELECT jobguard.job(999)'),
	('SELECT jobguard.attempts_of(999)'),
	($$SELECT jobguard.finish_attempt(999, '{}')$$),
	($$SELECT jobguard.fail_attempt(999, 'x')$$),
	('SELECT jobguard.mark_unknown(999)'),
	($$SELECT jobguard.cancel_attempt(999, 'x')$$)
  ) AS t(call);

-- bad input: 22004 for NULL, 22023 for empty, too long or out of range
SELECT pg_temp.fingerprint() AS before \gset
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	('SELECT jobguard.begin_attempt(NULL)'),
	('SELECT jobguard.begin_attempt(6, NULL, NULL)'),
	($$SELECT jobguard.begin_attempt(6, NULL, '0 seconds')$$),
	($$SELECT jobguard.begin_attempt(6, NULL, '-1 seconds')$$),
	($$SELECT jobguard.begin_attempt(6, '')$$),
	($$SELECT jobguard.begin_attempt(6, repeat('p', 64))$$),
	($$SELECT jobguard.begin_attempt(6, NULL, '1 minute', '')$$),
	($$SELECT jobguard.begin_attempt(6, NULL, '1 minute', repeat('k', 256))$$),
	($$SELECT jobguard.finish_attempt(NULL, '{}')$$),
	('SELECT jobguard.finish_attempt(16, NULL)'),
	($$SELECT jobguard.fail_attempt(NULL, 'x')$$),
	('SELECT jobguard.fail_attempt(16, NULL)'),
	($$SELECT jobguard.fail_attempt(16, '')$$),
	('SELECT jobguard.mark_unknown(NULL)'),
	($$SELECT jobguard.cancel_attempt(NULL, 'x')$$),
	('SELECT jobguard.cancel_attempt(16, NULL)'),
	($$SELECT jobguard.cancel_attempt(16, '')$$),
	($$SELECT jobguard.cancel_job(NULL, 'x')$$),
	('SELECT jobguard.cancel_job(6, NULL)'),
	('SELECT jobguard.job_state(NULL)'),
	('SELECT jobguard.job(NULL)'),
	('SELECT jobguard.attempts_of(NULL)')
  ) AS t(call);
SELECT jobguard.begin_attempt(6, NULL, '0 seconds');
SELECT pg_temp.fingerprint() = :'before' AS refused_calls_wrote_nothing;

-- the tables back the gate up: a second open attempt cannot be inserted
-- even by hand
INSERT INTO jobguard.attempts (job_id, attempt_no, provider, read_version, deadline)
VALUES (6, 99, 'stripe', 1, now() + interval '1 minute');

-- a worker's replay also works once its attempt is overdue: it is still open
SELECT job_id FROM jobguard.submit('alice', 'job-9', 'charge', '{"amount": 9}', 'stripe');
SELECT jobguard.begin_attempt(9, timeout => '100 milliseconds', attempt_key => 'w1') AS first;
SELECT pg_sleep(0.2);
SELECT jobguard.begin_attempt(9, timeout => '100 milliseconds', attempt_key => 'w1') AS replayed;
SELECT no, state, stored FROM pg_temp.attempts(9);

-- the table's own rules back up the state table
\set VERBOSITY terse
UPDATE jobguard.attempts SET state = 'failed' WHERE id = 17;
UPDATE jobguard.attempts SET state = 'finished', error = 'x' WHERE id = 17;
UPDATE jobguard.attempts SET lost_to = 1 WHERE id = 17;
SELECT state FROM jobguard.attempts WHERE id = 17;
\set VERBOSITY default
