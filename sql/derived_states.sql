-- The rules derived from stored columns exist once in SQL and once in C.
-- Each pair must agree over every combination of its inputs:
--  * an attempt's effective state: jobguard.attempt_state() (SQL) and
--    attempt_effective_state() (C, the fast path's);
--  * a job's state: jobguard.job_overview's CASE, and the same CASE over
--    stored attempt states that the state gauges use (STORED_JOB_STATE_SQL).
-- The C forms are reached through functions no SQL script creates.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
CREATE SCHEMA derived_check;
CREATE FUNCTION derived_check.c_attempt_state(text, timestamptz) RETURNS text
	LANGUAGE c STRICT AS '$libdir/jobguard', 'jobguard_c_attempt_state';
CREATE FUNCTION derived_check.c_stored_job_state(bigint) RETURNS text
	LANGUAGE c STRICT AS '$libdir/jobguard', 'jobguard_c_stored_job_state';

-- 1. The effective attempt state: every stored state, with deadlines well
-- before, just before, at, just after and well after now().
BEGIN;
CREATE TEMP TABLE attempt_case AS
SELECT s.state, d.label, now() + d.offset_by AS deadline
  FROM unnest('{started,unknown,cancelled,succeeded,lost,failed}'::text[]) AS s(state),
	   (VALUES ('an hour ago', interval '-1 hour'), ('a microsecond ago', interval '-1 microsecond'),
			   ('now', interval '0'), ('in a microsecond', interval '1 microsecond'),
			   ('in an hour', interval '1 hour')) AS d(label, offset_by);
SELECT count(*) AS combinations,
	   count(*) FILTER (WHERE jobguard.attempt_state(state, deadline)
						IS NOT DISTINCT FROM derived_check.c_attempt_state(state, deadline)) AS agree
  FROM attempt_case;
-- where the rule changes the state (the same on both sides, or listed twice)
SELECT state, label, jobguard.attempt_state(state, deadline) AS sql_form,
	   derived_check.c_attempt_state(state, deadline) AS c_form
  FROM attempt_case
 WHERE jobguard.attempt_state(state, deadline) IS DISTINCT FROM state
	OR derived_check.c_attempt_state(state, deadline) IS DISTINCT FROM state
 ORDER BY deadline;
ROLLBACK;

-- 2. The job state: a job open, succeeded or cancelled; its last attempt
-- none or in each state (deadline ahead, so stored and effective agree);
-- max_attempts none, used up by that attempt, or not yet.
BEGIN;
CREATE TEMP TABLE job_case AS
SELECT (row_number() OVER ())::bigint AS id, j.job, a.last, m.max_attempts
  FROM (VALUES ('open'), ('succeeded'), ('cancelled')) AS j(job),
	   unnest('{none,started,unknown,cancelled,succeeded,lost,failed}'::text[]) AS a(last),
	   (VALUES (NULL::integer), (1), (2)) AS m(max_attempts);
INSERT INTO jobguard.jobs (id, owner_id, idempotency_key, operation, params, provider,
						   max_attempts, completed_by, result, completed_at,
						   cancelled_at, cancel_reason)
SELECT id, 'derived', 'key ' || id, 'charge', '{}', 'stripe', max_attempts,
	   CASE WHEN job = 'succeeded' THEN 1000 + id END,
	   CASE WHEN job = 'succeeded' THEN '{}'::jsonb END,
	   CASE WHEN job = 'succeeded' THEN now() END,
	   CASE WHEN job = 'cancelled' THEN now() END,
	   CASE WHEN job = 'cancelled' THEN 'test' END
  FROM job_case;
INSERT INTO jobguard.attempts (id, job_id, attempt_no, provider, state, read_version,
							   deadline, error, lost_result)
SELECT 1000 + id, id, 1, 'stripe', last, 1, now() + interval '1 hour',
	   CASE WHEN last = 'failed' THEN 'it broke' END,
	   CASE WHEN last = 'lost' THEN '{}'::jsonb END
  FROM job_case WHERE last <> 'none';
SELECT count(*) AS combinations,
	   count(*) FILTER (WHERE v.state IS NOT DISTINCT FROM derived_check.c_stored_job_state(c.id))
		   AS agree
  FROM job_case c LEFT JOIN jobguard.job_overview v ON v.job_id = c.id;
-- every job state is reached
SELECT v.state, count(*) AS jobs
  FROM job_case c JOIN jobguard.job_overview v ON v.job_id = c.id
 GROUP BY v.state ORDER BY v.state;
-- the disagreements, if any
SELECT c.job, c.last, c.max_attempts, v.state AS sql_form,
	   derived_check.c_stored_job_state(c.id) AS c_form
  FROM job_case c LEFT JOIN jobguard.job_overview v ON v.job_id = c.id
 WHERE v.state IS DISTINCT FROM derived_check.c_stored_job_state(c.id)
 ORDER BY c.id;

-- The one deliberate difference: past its deadline a started attempt is
-- unknown to the view (effective state) and still running to the gauges
-- (stored state) until the sweeper writes it down.
UPDATE jobguard.attempts SET deadline = now() - interval '1 second' WHERE state = 'started';
SELECT c.job, c.last, c.max_attempts, v.state AS sql_form,
	   derived_check.c_stored_job_state(c.id) AS c_form
  FROM job_case c JOIN jobguard.job_overview v ON v.job_id = c.id
 WHERE v.state IS DISTINCT FROM derived_check.c_stored_job_state(c.id)
 ORDER BY c.id;
ROLLBACK;

SELECT derived_check.c_stored_job_state(1) AS no_such_job;
DROP SCHEMA derived_check CASCADE;
