-- bench/wal-designs/one-row.sql: a design outside doc/reference.md's
-- objects, for comparison: one row per job, its attempt's state on the job
-- row (no attempts table), jobguard's key index kept; claim 10 by one
-- UPDATE, then the finish's compare-and-swap on the same row, each its own
-- transaction.  Run after tables.sql (its jobs, at :ff).
DROP TABLE d.attempts;
ALTER TABLE d.jobs ADD COLUMN state text NOT NULL DEFAULT 'pending', ADD COLUMN worker text,
  ADD COLUMN started_at timestamptz, ADD COLUMN deadline timestamptz,
  ADD COLUMN provider_key text, ADD COLUMN tries integer NOT NULL DEFAULT 0;
CREATE INDEX jobs_run_order ON d.jobs (priority, (COALESCE(not_before, created_at)), id) WHERE state = 'pending';
\ir drain-by.sql
CREATE PROCEDURE d.drain_one_row() LANGUAGE plpgsql AS $$
BEGIN
  CALL d.drain_by(
    $c$UPDATE d.jobs SET state = 'started', worker = 'w', started_at = now(),
              deadline = now() + interval '30 s', provider_key = md5(id::text), tries = tries + 1
        WHERE id IN (SELECT j.id FROM d.jobs j WHERE j.state = 'pending'
                      ORDER BY j.priority, COALESCE(j.not_before, j.created_at), j.id LIMIT 10
                     FOR UPDATE SKIP LOCKED)
        RETURNING id$c$,
    $f$UPDATE d.jobs SET state = 'succeeded', result = '{}', completed_by = $1, completed_at = now(),
              version = version + 1
        WHERE id = $1 AND version = 1 AND completed_by IS NULL$f$);
END $$;
