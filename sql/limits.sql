-- Payload limits: params, result and error larger than
-- jobguard.max_payload_size (1 MB by default; superusers set it) are
-- refused with 54000 before anything is written; at the limit they pass.
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
-- only superusers change the limit
CREATE ROLE regress_jg_limits;
SET ROLE regress_jg_limits;
SELECT pg_temp.sqlstate_of($$SET jobguard.max_payload_size = '1GB'$$) AS client_raises_limit;
RESET ROLE;
DROP ROLE regress_jg_limits;
RESET jobguard.max_payload_size;
SELECT count(*) AS violations FROM jobguard.check_invariants();
