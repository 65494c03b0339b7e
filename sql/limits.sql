-- Payload limits: params, result, error and cancel reasons larger than
-- jobguard.max_payload_size (1 MB by default; superusers set it) are
-- refused with 54000 before anything is written; at the limit they pass.
-- submit_many takes at most 10,000 requests.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
\i sql/include/helpers.sql
LOAD 'jobguard';
SHOW jobguard.max_payload_size;
SET jobguard.max_payload_size = '1kB';
-- a jsonb string payload; its size is what pg_column_size() says, less the
-- 4-byte varlena header
CREATE FUNCTION pg_temp.payload(bytes integer) RETURNS jsonb LANGUAGE sql AS $$
	SELECT to_jsonb(repeat('x', bytes))
$$;
-- find the largest string that fits, and show one byte more does not
SELECT max(n) AS largest_string FROM generate_series(900, 1100) n
 WHERE pg_column_size(pg_temp.payload(n)) - 4 <= 1024 \gset
SELECT pg_column_size(pg_temp.payload(:largest_string)) - 4 AS at_limit_bytes;
SELECT job_id AS at_limit, created FROM jobguard.submit('o', 'at-limit', 'op', pg_temp.payload(:largest_string), 'p') \gset
SELECT :'created' AS created_at_limit;
\set VERBOSITY default
SELECT * FROM jobguard.submit('o', 'over-limit', 'op', pg_temp.payload(:largest_string + 1), 'p');
\set VERBOSITY terse
SELECT count(*) AS jobs FROM jobguard.jobs;
-- result: the same limit; nothing changes when it is over
SELECT jobguard.begin_attempt(:at_limit) AS attempt \gset
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.finish_attempt(%s, pg_temp.payload(%s))$$,
								  :attempt, :largest_string + 1)) AS over_limit_result;
SELECT state FROM jobguard.attempts WHERE id = :attempt;
SELECT jobguard.finish_attempt(:attempt, pg_temp.payload(:largest_string));
-- error text: at most 1 kB
SELECT jobguard.begin_attempt(job_id) AS attempt2
  FROM jobguard.submit('o', 'err', 'op', '{}', 'p') \gset
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.fail_attempt(%s, repeat('e', 1025))$$, :attempt2)) AS over_limit_error;
SELECT state FROM jobguard.attempts WHERE id = :attempt2;
SELECT jobguard.fail_attempt(:attempt2, repeat('e', 1024));
-- a cancel reason is a payload too: at most 1 kB, nothing written when over
SELECT jobguard.begin_attempt(job_id) AS attempt3
  FROM jobguard.submit('o', 'reason', 'op', '{}', 'p') \gset
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.cancel_attempt(%s, repeat('r', 1025))$$, :attempt3)) AS over_limit_cancel_attempt;
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.cancel_job(%s, repeat('r', 1025))$$,
								  (SELECT job_id FROM jobguard.attempts WHERE id = :attempt3))) AS over_limit_cancel_job;
SELECT a.state, a.cancel_reason IS NULL AS attempt_reason_unset, j.cancelled_at IS NULL AS job_not_cancelled
  FROM jobguard.attempts a JOIN jobguard.jobs j ON j.id = a.job_id WHERE a.id = :attempt3;
SELECT jobguard.cancel_attempt(:attempt3, repeat('r', 1024));
SELECT jobguard.cancel_job(job_id, repeat('r', 1024)) FROM jobguard.attempts WHERE id = :attempt3;
-- so is claim's list of operations
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim('w', ARRAY(SELECT repeat('o', 60) FROM generate_series(1, 20)))$$) AS over_limit_operations;
-- submit_many takes at most 10,000 requests; one more is refused whole
SELECT pg_temp.sqlstate_of($$SELECT count(*) FROM jobguard.submit_many(
	ARRAY(SELECT 'batch' FROM generate_series(1, 10001)),
	ARRAY(SELECT 'k' || i FROM generate_series(1, 10001) i),
	array_fill('op'::text, ARRAY[10001]),
	array_fill('{}'::jsonb, ARRAY[10001]),
	array_fill('p'::text, ARRAY[10001]))$$) AS over_limit_batch;
SELECT count(*) AS batch_jobs FROM jobguard.jobs WHERE owner_id = 'batch';
SELECT count(*) AS rows, count(*) FILTER (WHERE created) AS created FROM jobguard.submit_many(
	ARRAY(SELECT 'batch' FROM generate_series(1, 10000)),
	ARRAY(SELECT 'k' || i FROM generate_series(1, 10000) i),
	array_fill('op'::text, ARRAY[10000]),
	array_fill('{}'::jsonb, ARRAY[10000]),
	array_fill('p'::text, ARRAY[10000]));
DELETE FROM jobguard.jobs WHERE owner_id = 'batch';
-- only superusers change the limit
CREATE ROLE regress_jg_limits;
SET ROLE regress_jg_limits;
SELECT pg_temp.sqlstate_of($$SET jobguard.max_payload_size = '1GB'$$) AS client_raises_limit;
RESET ROLE;
DROP ROLE regress_jg_limits;
RESET jobguard.max_payload_size;
SELECT count(*) AS violations FROM jobguard.check_invariants();
