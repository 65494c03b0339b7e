-- bench/wal-designs/floor.sql: the per-job floor of make bench
-- (bench/node/drain.js): one plain queue table, claim 10 with SKIP LOCKED
-- by one UPDATE, then one UPDATE per job, each its own transaction; :n jobs.
DROP SCHEMA IF EXISTS d CASCADE;
CREATE SCHEMA d;
CREATE TABLE d.floor (id bigserial PRIMARY KEY, params jsonb NOT NULL,
  state text NOT NULL DEFAULT 'pending', worker text, result jsonb,
  created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz, finished_at timestamptz);
CREATE INDEX floor_pending ON d.floor (id) WHERE state = 'pending';
CREATE PROCEDURE d.drain_floor() LANGUAGE plpgsql AS $$
DECLARE
  ids bigint[];
  i bigint;
BEGIN
  LOOP
    WITH c AS (UPDATE d.floor SET state = 'running', worker = 'w', started_at = now()
                WHERE id IN (SELECT f.id FROM d.floor f WHERE f.state = 'pending' ORDER BY f.id LIMIT 10
                             FOR UPDATE SKIP LOCKED)
                RETURNING id)
    SELECT array_agg(id) INTO ids FROM c;
    COMMIT;
    EXIT WHEN ids IS NULL;
    FOREACH i IN ARRAY ids LOOP
      UPDATE d.floor SET state = 'done', result = '{}', finished_at = now() WHERE id = i AND state = 'running';
      COMMIT;
    END LOOP;
  END LOOP;
END $$;
