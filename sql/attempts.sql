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

-- ids come from one sequence for jobs and attempts: capture each one
SELECT job_id AS job1 FROM jobguard.submit('alice', 'job-1', 'charge', '{"amount": 1}', 'stripe') \gset
SELECT jobguard.job_state(:job1);	-- pending: no attempt yet
SELECT * FROM jobguard.attempts_of(:job1);	-- none yet

-- begin: attempt 1 is started, reads version 1, deadline = start + timeout
SELECT jobguard.begin_attempt(:job1, timeout => '10 minutes') AS a1 \gset
SELECT attempt_no, provider, state, read_version, deadline - started_at AS timeout
  FROM jobguard.attempts_of(:job1);
SELECT jobguard.job_state(:job1);	-- running

-- the gate: no new attempt while one is started
SELECT pg_temp.error_of(format('SELECT jobguard.begin_attempt(%s)', :job1));
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.begin_attempt(%s)', :job1));
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s, 'stripe', '1 minute', 'some-key')$$, :job1));

-- started -> unknown (a caller saw a timeout), unknown -> unknown
SELECT jobguard.mark_unknown(:a1);
SELECT jobguard.mark_unknown(:a1);
SELECT jobguard.job_state(:job1);	-- unknown, not failed
SELECT pg_temp.error_of(format('SELECT jobguard.begin_attempt(%s)', :job1));	-- still closed
-- unknown -> failed opens the gate
SELECT jobguard.fail_attempt(:a1, 'provider answered 502');
SELECT jobguard.job_state(:job1);	-- pending: more attempts may begin
-- started -> failed
SELECT jobguard.begin_attempt(:job1) AS a2 \gset
SELECT jobguard.fail_attempt(:a2, 'card declined');
-- started -> cancelled opens the gate; cancelled -> failed
SELECT jobguard.begin_attempt(:job1) AS a3 \gset
SELECT jobguard.cancel_attempt(:a3, 'operator: stop waiting');
SELECT jobguard.job_state(:job1);	-- pending
SELECT jobguard.fail_attempt(:a3, 'provider reported failure after cancel');
-- unknown -> cancelled
SELECT jobguard.begin_attempt(:job1) AS a4 \gset
SELECT jobguard.mark_unknown(:a4);
SELECT jobguard.cancel_attempt(:a4, 'timed out, failing over');
-- started -> succeeded: the result slot is taken, the version moves on
SELECT jobguard.begin_attempt(:job1) AS a5 \gset
SELECT jobguard.finish_attempt(:a5, '{"charge_id": "ch_1"}');
SELECT job_id, state, version, attempts, completed_by, result FROM jobguard.job(:job1);
-- cancelled -> lost: attempt 4's late result goes through the compare-and-swap and loses
SELECT jobguard.finish_attempt(:a4, '{"charge_id": "ch_late"}');
SELECT * FROM pg_temp.attempts(:job1);
-- the job kept the winner's result
SELECT result, completed_by, version FROM jobguard.jobs WHERE id = :job1;

-- replays: an equal result answers as before and changes nothing
SELECT pg_temp.fingerprint() AS before \gset
SELECT jobguard.finish_attempt(:a5, '{"charge_id": "ch_1"}');
SELECT jobguard.finish_attempt(:a4, '{"charge_id":"ch_late"}');
SELECT pg_temp.fingerprint() = :'before' AS unchanged;
-- a different result is JG007, on the winner and on the loser
SELECT jobguard.finish_attempt(:a5, '{"charge_id": "ch_2"}');
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.finish_attempt(%s, '{"charge_id": "ch_2"}')$$, :a5));
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.finish_attempt(%s, '{}')$$, :a4));
-- a failed attempt cannot report a result: JG006
SELECT jobguard.finish_attempt(:a1, '{"charge_id": "ch_x"}');

-- every transition the state table does not allow is JG006, naming the
-- attempt and its state (attempts 1 to 5 of the first job)
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	(format('SELECT jobguard.mark_unknown(%s)', :a5)),			-- succeeded
	(format('SELECT jobguard.mark_unknown(%s)', :a4)),			-- lost
	(format('SELECT jobguard.mark_unknown(%s)', :a1)),			-- failed
	(format('SELECT jobguard.mark_unknown(%s)', :a3)),			-- failed (after cancel)
	(format($$SELECT jobguard.fail_attempt(%s, 'x')$$, :a5)),		-- succeeded
	(format($$SELECT jobguard.fail_attempt(%s, 'x')$$, :a4)),		-- lost
	(format($$SELECT jobguard.fail_attempt(%s, 'x')$$, :a1)),		-- failed
	(format($$SELECT jobguard.cancel_attempt(%s, 'x')$$, :a5)),	-- succeeded
	(format($$SELECT jobguard.cancel_attempt(%s, 'x')$$, :a4)),	-- lost
	(format($$SELECT jobguard.cancel_attempt(%s, 'x')$$, :a1)),	-- failed
	(format($$SELECT jobguard.finish_attempt(%s, '{}')$$, :a2))	-- failed
  ) AS t(call);
SELECT pg_temp.fingerprint() = :'before' AS refused_calls_wrote_nothing;

-- a cancelled attempt cannot be cancelled again, nor marked unknown
SELECT job_id AS job2 FROM jobguard.submit('alice', 'job-2', 'charge', '{"amount": 2}', 'stripe') \gset
SELECT jobguard.begin_attempt(:job2) AS job2_a1 \gset
SELECT jobguard.cancel_attempt(:job2_a1, 'first cancel');
SELECT jobguard.cancel_attempt(:job2_a1, 'second cancel');
SELECT jobguard.mark_unknown(:job2_a1);
-- cancelled -> succeeded: a late result wins if no one else has
SELECT jobguard.finish_attempt(:job2_a1, '{"charge_id": "late but first"}');
SELECT job_id, state, completed_by, result FROM jobguard.job(:job2);
-- a closed job refuses new attempts: JG003
SELECT jobguard.begin_attempt(:job2);
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.begin_attempt(%s)', :job2));

-- unknown -> succeeded, and a JSON null is a result like any other
SELECT job_id AS job3 FROM jobguard.submit('alice', 'job-3', 'ping', '{}', 'p1') \gset
SELECT jobguard.begin_attempt(:job3) AS job3_a1 \gset
SELECT jobguard.mark_unknown(:job3_a1);
SELECT jobguard.finish_attempt(:job3_a1, 'null');
SELECT state, result, result IS NULL AS sql_null FROM jobguard.job(:job3);

-- deadlines: a started attempt past its deadline IS unknown, before
-- anything writes that down, for every rule and every view
SELECT job_id AS job4 FROM jobguard.submit('alice', 'job-4', 'charge', '{"amount": 4}', 'stripe') \gset
SELECT jobguard.begin_attempt(:job4, timeout => '1 second') AS job4_a1 \gset
SELECT jobguard.job_state(:job4);	-- running
SELECT pg_sleep(1.1);
SELECT jobguard.job_state(:job4) AS job_state,
	   (SELECT state FROM jobguard.job(:job4)) AS job,
	   (SELECT state FROM jobguard.job_overview WHERE job_id = :job4) AS overview,
	   (SELECT state FROM jobguard.attempts_of(:job4)) AS attempt,
	   (SELECT state FROM jobguard.attempts WHERE job_id = :job4) AS stored;
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.begin_attempt(%s)', :job4));	-- the gate treats it as unknown
-- mark_unknown writes down what the deadline already said
SELECT jobguard.mark_unknown(:job4_a1);
SELECT state FROM jobguard.attempts WHERE id = :job4_a1;
-- a timeout is never a failure: the late result still wins
SELECT jobguard.finish_attempt(:job4_a1, '{"charge_id": "slow but fine"}');
SELECT jobguard.job_state(:job4);
-- an overdue started attempt may be cancelled, then a new one begins
SELECT job_id AS job5 FROM jobguard.submit('alice', 'job-5', 'charge', '{"amount": 5}', 'stripe') \gset
SELECT jobguard.begin_attempt(:job5, timeout => '100 milliseconds') AS job5_a1 \gset
SELECT pg_sleep(0.2);
SELECT jobguard.cancel_attempt(:job5_a1, 'deadline passed');
SELECT jobguard.begin_attempt(:job5) AS next_attempt;
SELECT no, state, stored FROM pg_temp.attempts(:job5);

-- attempt_key: a worker retrying its own begin gets its own attempt back
SELECT job_id AS job6 FROM jobguard.submit('alice', 'job-6', 'charge', '{"amount": 6}', 'stripe') \gset
SELECT jobguard.begin_attempt(:job6, attempt_key => 'worker-7:run-1') AS first \gset
SELECT jobguard.begin_attempt(:job6, attempt_key => 'worker-7:run-1') = :first AS replayed;
SELECT jobguard.begin_attempt(:job6, 'stripe', '5 minutes', 'worker-7:run-1') = :first AS replayed_with_provider;
-- another key, no key, or the same key for another provider is refused
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s, attempt_key => 'worker-8:run-1')$$, :job6));
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s)$$, :job6));
SELECT jobguard.certify_provider('charge', 'adyen');
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s, 'adyen', attempt_key => 'worker-7:run-1')$$, :job6));
-- the refused begins created nothing
SELECT count(*) AS attempts_of_job_6 FROM jobguard.attempts WHERE job_id = :job6;
-- once the attempt is closed, the same key begins a new attempt
SELECT jobguard.fail_attempt(:first, 'boom');
SELECT jobguard.begin_attempt(:job6, attempt_key => 'worker-7:run-1') AS new_attempt \gset
SELECT :new_attempt <> :first AS new_attempt;

-- max_attempts: JG005 once used up; the job is then failed
SELECT job_id AS job7 FROM jobguard.submit('alice', 'job-7', 'charge', '{"amount": 7}', 'stripe', 2) \gset
SELECT jobguard.begin_attempt(:job7) AS job7_a1 \gset
SELECT jobguard.fail_attempt(:job7_a1, 'declined');
SELECT jobguard.begin_attempt(:job7) AS job7_a2 \gset
SELECT jobguard.job_state(:job7);	-- running: the last attempt is open
SELECT jobguard.fail_attempt(:job7_a2, 'declined again');
SELECT jobguard.job_state(:job7);	-- failed
SELECT jobguard.begin_attempt(:job7);
-- a failed job may still be cancelled
SELECT jobguard.cancel_job(:job7, 'give up');
SELECT jobguard.job_state(:job7);

-- cancel_job: no new attempts, the version moves on, later results lose
SELECT job_id AS job8 FROM jobguard.submit('alice', 'job-8', 'charge', '{"amount": 8}', 'stripe') \gset
SELECT jobguard.begin_attempt(:job8) AS job8_a1 \gset
SELECT version FROM jobguard.jobs WHERE id = :job8;
SELECT jobguard.cancel_job(:job8, 'customer cancelled the order');
SELECT state, version, cancelled_at IS NOT NULL AS cancelled FROM jobguard.job(:job8);
SELECT cancel_reason FROM jobguard.jobs WHERE id = :job8;
SELECT jobguard.begin_attempt(:job8);
SELECT jobguard.finish_attempt(:job8_a1, '{"charge_id": "too late"}');
SELECT no, state, lost_to, lost_result FROM pg_temp.attempts(:job8);
SELECT result, completed_by FROM jobguard.jobs WHERE id = :job8;
-- cancelling again changes nothing; a succeeded job cannot be cancelled
SELECT jobguard.cancel_job(:job8, 'again');
SELECT version, cancel_reason FROM jobguard.jobs WHERE id = :job8;
SELECT jobguard.cancel_job(:job1, 'too late');
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.cancel_job(%s, 'too late')$$, :job1));

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
-- (on job-6 and its open attempt)
SELECT pg_temp.fingerprint() AS before \gset
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	('SELECT jobguard.begin_attempt(NULL)'),
	(format('SELECT jobguard.begin_attempt(%s, NULL, NULL)', :job6)),
	(format($$SELECT jobguard.begin_attempt(%s, NULL, '0 seconds')$$, :job6)),
	(format($$SELECT jobguard.begin_attempt(%s, NULL, '-1 seconds')$$, :job6)),
	(format($$SELECT jobguard.begin_attempt(%s, '')$$, :job6)),
	(format($$SELECT jobguard.begin_attempt(%s, repeat('p', 64))$$, :job6)),
	(format($$SELECT jobguard.begin_attempt(%s, NULL, '1 minute', '')$$, :job6)),
	(format($$SELECT jobguard.begin_attempt(%s, NULL, '1 minute', repeat('k', 256))$$, :job6)),
	($$SELECT jobguard.finish_attempt(NULL, '{}')$$),
	(format('SELECT jobguard.finish_attempt(%s, NULL)', :new_attempt)),
	($$SELECT jobguard.fail_attempt(NULL, 'x')$$),
	(format('SELECT jobguard.fail_attempt(%s, NULL)', :new_attempt)),
	(format($$SELECT jobguard.fail_attempt(%s, '')$$, :new_attempt)),
	('SELECT jobguard.mark_unknown(NULL)'),
	($$SELECT jobguard.cancel_attempt(NULL, 'x')$$),
	(format('SELECT jobguard.cancel_attempt(%s, NULL)', :new_attempt)),
	(format($$SELECT jobguard.cancel_attempt(%s, '')$$, :new_attempt)),
	($$SELECT jobguard.cancel_job(NULL, 'x')$$),
	(format('SELECT jobguard.cancel_job(%s, NULL)', :job6)),
	('SELECT jobguard.job_state(NULL)'),
	('SELECT jobguard.job(NULL)'),
	('SELECT jobguard.attempts_of(NULL)')
  ) AS t(call);
SELECT jobguard.begin_attempt(:job6, NULL, '0 seconds');
SELECT pg_temp.fingerprint() = :'before' AS refused_calls_wrote_nothing;

-- the tables back the gate up: a second open attempt cannot be inserted
-- even by hand
INSERT INTO jobguard.attempts (job_id, attempt_no, provider, read_version, deadline)
VALUES (:job6, 99, 'stripe', 1, now() + interval '1 minute');

-- a worker's replay also works once its attempt is overdue: it is still open
SELECT job_id AS job9 FROM jobguard.submit('alice', 'job-9', 'charge', '{"amount": 9}', 'stripe') \gset
SELECT jobguard.begin_attempt(:job9, timeout => '100 milliseconds', attempt_key => 'w1') AS job9_first \gset
SELECT pg_sleep(0.2);
SELECT jobguard.begin_attempt(:job9, timeout => '100 milliseconds', attempt_key => 'w1') = :job9_first AS replayed;
SELECT no, state, stored FROM pg_temp.attempts(:job9);

-- the table's own rules back up the state table
\set VERBOSITY terse
UPDATE jobguard.attempts SET state = 'failed' WHERE id = :job9_first;
UPDATE jobguard.attempts SET state = 'finished', error = 'x' WHERE id = :job9_first;
UPDATE jobguard.attempts SET lost_to = :a1 WHERE id = :job9_first;
SELECT state FROM jobguard.attempts WHERE id = :job9_first;
\set VERBOSITY default
