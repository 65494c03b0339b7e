-- A jobguard 1.0 database with jobs in every state, written straight into
-- the 1.0 tables (the library installed is 1.1's, whose functions need the
-- 1.1 schema), for the 1.0 -> 1.1 update test.  Every invariant holds.
-- Ids overlap across the two tables, as 1.0 issued them.
INSERT INTO jobguard.jobs (id, owner_id, idempotency_key, operation, params, provider, max_attempts,
						   version, completed_by, result, completed_at, cancelled_at, cancel_reason)
VALUES
	(1, 'alice', 'pending',   'charge', '{"cents": 100}', 'stripe', NULL, 1, NULL, NULL, NULL, NULL, NULL),
	(2, 'alice', 'running',   'charge', '{"cents": 200}', 'stripe', NULL, 1, NULL, NULL, NULL, NULL, NULL),
	(3, 'alice', 'unknown',   'charge', '{"cents": 300}', 'stripe', NULL, 1, NULL, NULL, NULL, NULL, NULL),
	(4, 'alice', 'succeeded', 'charge', '{"cents": 400}', 'stripe', NULL, 2, 5, '{"charge": "ch_4"}',
	 now() - interval '2 days', NULL, NULL),
	(5, 'bob',   'cancelled', 'charge', '{"cents": 500}', 'stripe', NULL, 2, NULL, NULL, NULL,
	 now() - interval '2 days', 'customer asked'),
	(6, 'bob',   'failed',    'charge', '{"cents": 600}', 'stripe', 1,    1, NULL, NULL, NULL, NULL, NULL),
	(7, 'bob',   'retry',     'charge', '{"cents": 700}', 'stripe', 3,    1, NULL, NULL, NULL, NULL, NULL);

INSERT INTO jobguard.attempts (id, job_id, attempt_no, provider, state, read_version, attempt_key,
							   started_at, deadline, finished_at, error, lost_to, lost_result,
							   cancelled_at, cancel_reason)
VALUES
	(1, 2, 1, 'stripe', 'started',   1, 'w-2', now(), now() + interval '1 hour', NULL, NULL, NULL, NULL, NULL, NULL),
	(2, 3, 1, 'stripe', 'unknown',   1, NULL,  now() - interval '1 hour', now() - interval '30 minutes',
	 NULL, NULL, NULL, NULL, NULL, NULL),
	-- job 4: the primary was cancelled, the fallback won, the primary lost later
	(3, 4, 1, 'stripe', 'lost',      1, NULL,  now() - interval '3 days', now() - interval '3 days',
	 now() - interval '2 days', NULL, 5, '{"charge": "ch_late"}', now() - interval '3 days', 'stalled'),
	(5, 4, 2, 'adyen',  'succeeded', 1, NULL,  now() - interval '3 days', now() - interval '2 days',
	 now() - interval '2 days', NULL, NULL, NULL, NULL, NULL),
	(4, 6, 1, 'stripe', 'failed',    1, NULL,  now() - interval '1 day', now() - interval '1 day',
	 now() - interval '1 day', 'card declined', NULL, NULL, NULL, NULL),
	(6, 7, 1, 'stripe', 'cancelled', 1, NULL,  now() - interval '1 day', now() - interval '1 day',
	 NULL, NULL, NULL, NULL, now() - interval '1 day', 'stalled');

SELECT setval('jobguard.jobs_id_seq', 7), setval('jobguard.attempts_id_seq', 6);

INSERT INTO jobguard.certifications (operation, provider, evidence) VALUES ('charge', 'adyen', '{"suite": "v1"}');
INSERT INTO jobguard.operations (operation, output_contract, contract_version)
VALUES ('charge', '{"type": "object", "required": ["charge"]}', nextval('jobguard.contract_version_seq'));
