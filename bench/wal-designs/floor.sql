-- bench/wal-designs/floor.sql: the per-job floor of make bench
-- (bench/node/drain.js): one plain queue table; claim 10 with SKIP LOCKED
-- by one UPDATE, then one UPDATE per job, each its own transaction.
DROP SCHEMA IF EXISTS d CASCADE;
CREATE SCHEMA d;
CREATE TABLE d.floor (id bigserial PRIMARY KEY, params jsonb NOT NULL,
  state text NOT NULL DEFAULT 'pending', worker text, result jsonb,
  created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz, finished_at timestamptz);
CREATE INDEX floor_pending ON d.floor (id) WHERE state = 'pending';
\ir drain-by.sql
CREATE PROCEDURE d.drain_floor() LANGUAGE plpgsql AS $$
BEGIN
  CALL d.drain_by(
    $c$UPDATE d.floor SET state = 'running', worker = 'w', started_at = now()
        WHERE id IN (SELECT f.id FROM d.floor f WHERE f.state = 'pending' ORDER BY f.id LIMIT 10
                     FOR UPDATE SKIP LOCKED)
        RETURNING id$c$,
    $f$UPDATE d.floor SET state = 'done', result = '{}', finished_at = now()
        WHERE id = $1 AND state = 'running'$f$);
END $$;
