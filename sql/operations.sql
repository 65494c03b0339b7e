-- Operations: await (also from a second session), NOTIFY is tested in
-- specs/notify.spec, purge and its retention rule, stats.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
\i sql/include/helpers.sql

-- await: a second session waits for a job that this session finishes
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('waiter', format('dbname=%s port=%s host=%s', current_database(),
	current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT job_id FROM jobguard.submit('alice', 'k1', 'charge', '{}', 'stripe');
SELECT jobguard.begin_attempt(1) AS a1 \gset
SELECT dblink_send_query('waiter', $$SELECT jobguard.await(1, '60 seconds'), clock_timestamp()$$);
SELECT pg_sleep(0.3);
SELECT dblink_is_busy('waiter') AS still_waiting;
-- an uncommitted result does not wake it
BEGIN;
SELECT jobguard.finish_attempt(:a1, '{"id": "ch_1"}');
SELECT pg_sleep(0.3);
SELECT dblink_is_busy('waiter') AS still_waiting_before_commit;
COMMIT;
SELECT clock_timestamp() AS committed_at \gset
-- the commit does, at once (it polls every 100 ms at most)
SELECT state, abs(extract(epoch FROM returned_at - :'committed_at')) < 1 AS returned_at_commit
  FROM dblink_get_result('waiter') AS r(state text, returned_at timestamptz);
SELECT * FROM dblink_get_result('waiter') AS r(state text, returned_at timestamptz);
SELECT dblink_disconnect('waiter');

-- a terminal job answers at once; otherwise the timeout returns the state then
SELECT clock_timestamp() AS t0 \gset
SELECT jobguard.await(1, '10 seconds');
SELECT clock_timestamp() - :'t0' < interval '1 second' AS at_once;
SELECT job_id AS k2_job FROM jobguard.submit('alice', 'k2', 'charge', '{}', 'stripe') \gset
SELECT clock_timestamp() AS t0 \gset
SELECT jobguard.await(:k2_job, '300 milliseconds');
SELECT clock_timestamp() - :'t0' >= interval '300 milliseconds' AS waited_the_timeout;
SELECT jobguard.await(:k2_job, '0 seconds');
-- statement_timeout and cancel interrupt it
SET statement_timeout = '200ms';
SELECT jobguard.await(:k2_job, '1 day');
RESET statement_timeout;
-- a REPEATABLE READ snapshot could never see the outcome
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT jobguard.await(:k2_job, '1 second');
ROLLBACK;
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	($$SELECT jobguard.await(NULL, '1 second')$$),
	(format('SELECT jobguard.await(%s, NULL)', :k2_job)),
	(format($$SELECT jobguard.await(%s, '-1 second')$$, :k2_job)),
	($$SELECT jobguard.await(999, '1 second')$$)
  ) AS t(call);

-- purge: terminal jobs older than the cut-off go, with their attempts;
-- anything open, recent or still running stays.  Old jobs are made old
-- by moving their timestamps back, oldest ids first as in real life.
TRUNCATE jobguard.jobs, jobguard.attempts RESTART IDENTITY;
SELECT jobguard.certify_provider('charge', 'adyen');
SELECT job_id AS old_won FROM jobguard.submit('o', 'old-won', 'charge', '{}', 'stripe') \gset
SELECT jobguard.finish_attempt(jobguard.begin_attempt(:old_won), '{"id": 1}');
SELECT job_id AS old_cancelled FROM jobguard.submit('o', 'old-cancelled', 'charge', '{}', 'stripe') \gset
SELECT jobguard.cancel_job(:old_cancelled, 'not needed');
SELECT job_id AS old_failed FROM jobguard.submit('o', 'old-failed', 'charge', '{}', 'stripe', 1) \gset
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:old_failed), 'declined');
SELECT job_id AS old_pending FROM jobguard.submit('o', 'old-pending', 'charge', '{}', 'stripe') \gset
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:old_pending), 'retry later');
-- won by a cancelled attempt while a fallback is still open: not purged
SELECT job_id AS old_open FROM jobguard.submit('o', 'old-open', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:old_open) AS first_attempt \gset
SELECT jobguard.cancel_attempt(:first_attempt, 'slow');
SELECT jobguard.begin_attempt(:old_open, 'adyen');
SELECT jobguard.finish_attempt(:first_attempt, '{"id": 2}');
UPDATE jobguard.jobs SET created_at = created_at - interval '3 days',
	completed_at = completed_at - interval '2 days', cancelled_at = cancelled_at - interval '2 days';
UPDATE jobguard.attempts SET started_at = started_at - interval '3 days',
	deadline = deadline - interval '3 days', finished_at = finished_at - interval '2 days',
	cancelled_at = cancelled_at - interval '2 days';
SELECT job_id AS new_won FROM jobguard.submit('o', 'new-won', 'charge', '{}', 'stripe') \gset
SELECT jobguard.finish_attempt(jobguard.begin_attempt(:new_won), '{"id": 3}');
SELECT job_id, idempotency_key, state FROM jobguard.job_overview ORDER BY job_id;
-- pages of two jobs, to cross several batches
SELECT jobguard.purge('1 day', 2) AS purged;
SELECT job_id, idempotency_key, state FROM jobguard.job_overview ORDER BY job_id;
SELECT count(*) AS orphan_attempts FROM jobguard.attempts a
 WHERE NOT EXISTS (SELECT 1 FROM jobguard.jobs j WHERE j.id = a.job_id);
-- nothing more to purge; a zero cut-off takes the recent terminal job too
SELECT jobguard.purge('1 day') AS purged_again;
SELECT jobguard.purge('0 seconds') AS purged_recent;
SELECT idempotency_key FROM jobguard.jobs ORDER BY id;
-- a purged key is free again: the same request makes a new job
SELECT created, job_id > :new_won AS new_id FROM jobguard.submit('o', 'old-won', 'charge', '{}', 'stripe');
SELECT count(*) AS violations FROM jobguard.check_invariants();
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	('SELECT jobguard.purge(NULL, 0)'),
	($$SELECT jobguard.purge('1 day', NULL)$$),
	($$SELECT jobguard.purge('-1 day')$$),
	($$SELECT jobguard.purge('1 day', 0)$$)
  ) AS t(call);

-- stats: states are counted from the tables; the event counters need
-- shared_preload_libraries (t/003_preloaded.pl tests them) and are NULL here
-- (1.2's blocked.* gauges and redrive counters: the liveness suite)
SELECT * FROM jobguard.stats()
 WHERE metric NOT IN ('blocked.jobs', 'blocked.oldest_seconds', 'redrives', 'reconciled');
SELECT jobguard.stats_reset();

-- purge_batches: the same purge, committed batch by batch with a NOTICE
-- each; it must be CALLed outside a transaction block
SELECT count(*) AS finished FROM generate_series(1, 5) g,
	LATERAL jobguard.submit('pb', g::text, 'charge', '{}', 'stripe') s,
	LATERAL jobguard.finish_attempt(jobguard.begin_attempt(s.job_id), '{"id": 1}');
CALL jobguard.purge_batches('0 seconds', 2);
SELECT count(*) AS left_of_pb FROM jobguard.jobs WHERE owner_id = 'pb';
BEGIN;
CALL jobguard.purge_batches('0 seconds', 2);
ROLLBACK;
CALL jobguard.purge_batches('-1 day', 2);
CALL jobguard.purge_batches('1 day', 0);
