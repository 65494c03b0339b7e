-- bench/console/load.sql: the console benchmark's data, written directly
-- into jobguard's tables (the API would take hours for 5 million jobs):
-- :jobs jobs in all, of which :unknown have an unknown attempt (a third
-- each against a provider inside its dedup window, past it, and without
-- one), :failed have failed, the rest succeeded with one won attempt;
-- :lost of the succeeded jobs also have a losing attempt whose result was
-- kept; :actions operator actions.  psql -v jobs=... -v unknown=... -f load.sql
SET synchronous_commit = off;
SET client_min_messages = warning;
\set ok_jobs '(:jobs - :unknown - :failed)'
-- jobs 1..jobs; their first attempts jobs+1..2*jobs; the lost ones after
INSERT INTO jobguard.jobs (id, owner_id, idempotency_key, operation, params, provider, max_attempts,
                           completed_by, result, created_at, completed_at, scope)
SELECT g, 'owner-' || (g % 200000), 'key-' || g, 'charge', jsonb_build_object('amount', g % 10000),
       CASE WHEN g > :ok_jobs AND g <= :ok_jobs + :unknown
            THEN (ARRAY['stripe', 'adyen', 'mailer'])[1 + g % 3] ELSE 'stripe' END,
       CASE WHEN g > :jobs - :failed THEN 1 END,
       CASE WHEN g <= :ok_jobs THEN :jobs + g END,
       CASE WHEN g <= :ok_jobs THEN '{"charge_id": "ch"}'::jsonb END,
       now() - interval '10 days' + g * interval '100 milliseconds',
       CASE WHEN g <= :ok_jobs THEN now() - interval '10 days' + g * interval '100 milliseconds' + interval '2 seconds' END,
       CASE WHEN g % 10 = 0 THEN 'other' ELSE 'shop' END
  FROM generate_series(1, :jobs) g;
INSERT INTO jobguard.attempts (id, job_id, attempt_no, provider, state, read_version, started_at, deadline,
                               finished_at, error, provider_key, tries, unknown_since, timeout)
SELECT :jobs + g, g, 1,
       CASE WHEN g > :ok_jobs AND g <= :ok_jobs + :unknown
            THEN (ARRAY['stripe', 'adyen', 'mailer'])[1 + g % 3] ELSE 'stripe' END,
       CASE WHEN g <= :ok_jobs THEN 'succeeded' WHEN g <= :ok_jobs + :unknown THEN 'unknown' ELSE 'failed' END,
       1,
       CASE WHEN g > :ok_jobs AND g <= :ok_jobs + :unknown THEN now() - (g % 7200) * interval '1 second' - interval '1 minute'
            ELSE now() - interval '10 days' + g * interval '100 milliseconds' END,
       CASE WHEN g > :ok_jobs AND g <= :ok_jobs + :unknown THEN now() - (g % 7200) * interval '1 second' - interval '30 seconds'
            ELSE now() - interval '10 days' + g * interval '100 milliseconds' + interval '30 seconds' END,
       CASE WHEN g <= :ok_jobs OR g > :ok_jobs + :unknown THEN now() - interval '10 days' + g * interval '100 milliseconds' + interval '2 seconds' END,
       CASE WHEN g > :ok_jobs + :unknown THEN 'declined' END,
       md5(g::text), 1,
       CASE WHEN g > :ok_jobs AND g <= :ok_jobs + :unknown THEN now() - (g % 7200) * interval '1 second' - interval '30 seconds' END,
       interval '30 seconds'
  FROM generate_series(1, :jobs) g;
-- the losing attempts: attempt 2 of the first :lost jobs, its result kept
INSERT INTO jobguard.attempts (id, job_id, attempt_no, provider, state, read_version, started_at, deadline,
                               finished_at, lost_to, lost_result, provider_key, tries, timeout)
SELECT 2 * :jobs + g, g * 997 % :ok_jobs + 1, 2, 'stripe', 'lost', 1, now() - interval '1 day', now() - interval '1 day' + interval '30 seconds',
       now() - interval '1 day' + g * interval '1 second', :jobs + (g * 997 % :ok_jobs + 1), '{"charge_id": "ch_twice"}', md5(g::text), 1,
       interval '30 seconds'
  FROM generate_series(1, :lost) g;
INSERT INTO jobguard.operator_actions (role, acting_as, action, target, arguments, reason, at)
SELECT 'olga', 'olga', (ARRAY['cancel_attempt', 'redrive_attempt', 'retry_job', 'mark_refunded'])[1 + g % 4],
       (:jobs + g)::text, jsonb_build_object('attempt_id', :jobs + g), 'benchmark', now() - interval '1 day' + g * interval '1 second'
  FROM generate_series(1, :actions) g;
SELECT pg_catalog.setval('jobguard.id_seq', 3 * :jobs);
SELECT jobguard.set_provider_policy('stripe', dedupes_for => interval '1 day', max_in_flight => 20000);
SELECT jobguard.set_provider_policy('adyen', dedupes_for => interval '1 second');
SELECT jobguard.set_provider_policy('paypal', max_in_flight => 5, paused => true);
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["charge_id"]}');
SELECT jobguard.certify_provider('charge', 'adyen', '{"runner": "benchmark"}');
VACUUM ANALYZE jobguard.jobs, jobguard.attempts, jobguard.operator_actions;
-- the rows above were written past jobguard's counters: recount them, as
-- after any direct write (stats() would otherwise count 5 million jobs at
-- its first call)
SELECT jobguard.stats_reset();
