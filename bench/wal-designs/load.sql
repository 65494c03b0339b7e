-- bench/wal-designs/load.sql: :n pending jobs (and their queue rows).
SET search_path = d;
INSERT INTO jobs (owner_id, idempotency_key, operation, params, provider)
SELECT 'owner-' || (i % 100), 'key-' || i, 'charge', jsonb_build_object('i', i), 'stripe'
FROM generate_series(1, :n) i;
\if :{?queue}
INSERT INTO queue (job_id) SELECT id FROM jobs;
\endif
