-- bench/wal-designs/drain.sql: d.drain(use_queue), a drain in one session
-- with jobguard's commits: claim 10 (the job rows locked, or the queue rows
-- deleted, and an attempt inserted for each, ON CONFLICT DO NOTHING as the
-- gate decides), commit; then each finish on its own: the attempt
-- succeeded, the compare-and-swap of its job, commit.
SET search_path = d;
CREATE OR REPLACE PROCEDURE drain(use_queue boolean) LANGUAGE plpgsql AS $$
DECLARE
  ids bigint[];
  a record;
BEGIN
  LOOP
    IF use_queue THEN
      WITH c AS (DELETE FROM d.queue WHERE job_id IN (
                   SELECT q.job_id FROM d.queue q ORDER BY q.priority, q.run_at, q.job_id
                    LIMIT 10 FOR UPDATE SKIP LOCKED) RETURNING job_id),
           ins AS (INSERT INTO d.attempts (job_id, attempt_no, provider, state, read_version, deadline, worker, timeout, provider_key, tries)
                   SELECT j.id, 1, j.provider, 'started', j.version, now() + interval '30 s', 'w', interval '30 s', md5(j.id::text), 1
                     FROM c JOIN d.jobs j ON j.id = c.job_id
                   ON CONFLICT DO NOTHING RETURNING id)
      SELECT array_agg(id) INTO ids FROM ins;
    ELSE
      WITH c AS (SELECT j.id, j.provider, j.version FROM d.jobs j
                  WHERE j.completed_by IS NULL AND j.cancelled_at IS NULL AND j.replaced_at IS NULL
                    AND NOT EXISTS (SELECT 1 FROM d.attempts o WHERE o.job_id = j.id AND o.state IN ('started', 'unknown'))
                  ORDER BY j.priority, COALESCE(j.not_before, j.created_at), j.id
                  LIMIT 10 FOR NO KEY UPDATE SKIP LOCKED),
           ins AS (INSERT INTO d.attempts (job_id, attempt_no, provider, state, read_version, deadline, worker, timeout, provider_key, tries)
                   SELECT c.id, 1, c.provider, 'started', c.version, now() + interval '30 s', 'w', interval '30 s', md5(c.id::text), 1
                     FROM c ON CONFLICT DO NOTHING RETURNING id)
      SELECT array_agg(id) INTO ids FROM ins;
    END IF;
    COMMIT;
    EXIT WHEN ids IS NULL;
    FOR a IN SELECT t.id, t.job_id, t.read_version FROM d.attempts t WHERE t.id = ANY (ids) LOOP
      UPDATE d.attempts SET state = 'succeeded', finished_at = now() WHERE id = a.id AND state = 'started';
      UPDATE d.jobs SET result = '{}', completed_by = a.id, completed_at = now(), version = version + 1
       WHERE id = a.job_id AND version = a.read_version AND completed_by IS NULL;
      COMMIT;
    END LOOP;
  END LOOP;
END $$;
