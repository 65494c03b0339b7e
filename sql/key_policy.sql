-- Key policy per operation: identity keys, a new job after a failure,
-- retention; each alone and combined; later calls only; bad input.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications,
	jobguard.policies RESTART IDENTITY;
\i sql/include/helpers.sql
CREATE FUNCTION pg_temp.fingerprint() RETURNS text
LANGUAGE sql AS $$
	SELECT md5(coalesce((SELECT string_agg(j::text, ',' ORDER BY j.id) FROM jobguard.jobs j), '') ||
			   coalesce((SELECT string_agg(p::text, ',' ORDER BY p.operation) FROM jobguard.policies p), ''))
$$;

-- no policy: params are compared whole, as in 1.0
SELECT job_id AS plain FROM jobguard.submit('alice', 'p-1', 'charge', '{"amount": 5, "trace": "a"}', 'stripe') \gset
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'p-1', 'charge', '{"amount": 5, "trace": "b"}', 'stripe')$$);

-- identity: only amount and currency make the request; a fresh trace id
-- or timestamp is a replay, and the job keeps the first request's params
SELECT jobguard.set_key_policy('charge', identity => ARRAY['amount', 'currency']);
SELECT operation, retention, identity, after_failure FROM jobguard.key_policies;
SELECT job_id AS charge, created FROM jobguard.submit('alice', 'c-1', 'charge',
	'{"amount": 5, "currency": "EUR", "trace": "t1", "at": "10:00"}', 'stripe') \gset
SELECT job_id = :charge AS same_job, created
  FROM jobguard.submit('alice', 'c-1', 'charge', '{"amount": 5, "currency": "EUR", "trace": "t2"}', 'stripe');
SELECT params FROM jobguard.job(:charge);
-- a difference in an identity key is still JG001
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'c-1', 'charge', '{"amount": 6, "currency": "EUR"}', 'stripe')$$);
-- absent counts as absent: a request without currency differs from one with it
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'c-1', 'charge', '{"amount": 5}', 'stripe')$$);
-- a JSON null is a value, not an absence
SELECT job_id AS nulls FROM jobguard.submit('alice', 'c-null', 'charge', '{"amount": 5, "currency": null}', 'stripe') \gset
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'c-null', 'charge', '{"amount": 5}', 'stripe')$$) AS absent_vs_null;
SELECT job_id = :nulls AS replay FROM jobguard.submit('alice', 'c-null', 'charge', '{"amount": 5, "currency": null, "x": 1}', 'stripe');
-- nested values and arrays compare whole, as jsonb
SELECT job_id AS nested FROM jobguard.submit('alice', 'c-nested', 'charge',
	'{"amount": {"value": 5, "unit": "cent"}, "currency": ["EUR", "USD"], "trace": 1}', 'stripe') \gset
SELECT job_id = :nested AS replay FROM jobguard.submit('alice', 'c-nested', 'charge',
	'{"currency": ["EUR", "USD"], "amount": {"unit": "cent", "value": 5}, "trace": 2}', 'stripe');
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'c-nested', 'charge',
	'{"amount": {"value": 5, "unit": "cent"}, "currency": ["USD", "EUR"]}', 'stripe')$$) AS array_order;
-- params that are not objects are compared whole
SELECT job_id AS arr FROM jobguard.submit('alice', 'c-array', 'charge', '[1, 2]', 'stripe') \gset
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'c-array', 'charge', '[1, 2, 3]', 'stripe')$$) AS array_params;
-- the rest of the request still has to match
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'c-1', 'charge', '{"amount": 5, "currency": "EUR"}', 'adyen')$$) AS other_provider;

-- after_failure 'keep' (the default): a replay of a failed job returns it
SELECT job_id AS kept FROM jobguard.submit('bob', 'k-1', 'charge', '{"amount": 1, "currency": "EUR"}', 'stripe', 1) \gset
SELECT jobguard.fail_attempt(jobguard.begin_attempt(:kept), 'declined');
SELECT job_id = :kept AS same_job, created, jobguard.job_state(job_id)
  FROM jobguard.submit('bob', 'k-1', 'charge', '{"amount": 1, "currency": "EUR"}', 'stripe', 1);

-- after_failure 'new_job': the same request after a failure starts a new
-- job, linked to the old one, which stays readable
SELECT jobguard.set_key_policy('charge', identity => ARRAY['amount', 'currency'], after_failure => 'new_job');
SELECT job_id AS second, created FROM jobguard.submit('bob', 'k-1', 'charge', '{"amount": 1, "currency": "EUR", "trace": "retry"}', 'stripe', 1) \gset
SELECT :'created' AS created, :second <> :kept AS new_job;
SELECT job_id = :second AS replay, created FROM jobguard.submit('bob', 'k-1', 'charge', '{"amount": 1, "currency": "EUR"}', 'stripe', 1);
SELECT job_id = :kept AS old, state, previous_job_id IS NULL AS first, replaced_at IS NOT NULL AS replaced, version
  FROM jobguard.job_overview WHERE idempotency_key = 'k-1' AND job_id = :kept;
SELECT previous_job_id = :kept AS follows_old, state, version FROM jobguard.job(:second);
SELECT count(*) AS attempts_of_old FROM jobguard.attempts_of(:kept);
-- a different request is still JG001 against the live job
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('bob', 'k-1', 'charge', '{"amount": 2, "currency": "EUR"}', 'stripe', 1)$$);
-- a cancelled job is replaced too; a pending, running or succeeded one never
SELECT jobguard.cancel_job(:second, 'customer asked');
SELECT job_id AS third, created FROM jobguard.submit('bob', 'k-1', 'charge', '{"amount": 1, "currency": "EUR"}', 'stripe', 1) \gset
SELECT :'created' AS created, previous_job_id = :second AS follows_second FROM jobguard.job(:third);
SELECT job_id = :third AS replay, created FROM jobguard.submit('bob', 'k-1', 'charge', '{"amount": 1, "currency": "EUR"}', 'stripe', 1);
SELECT jobguard.begin_attempt(:third) AS third_attempt \gset
SELECT job_id = :third AS replay, created FROM jobguard.submit('bob', 'k-1', 'charge', '{"amount": 1, "currency": "EUR"}', 'stripe', 1);
SELECT jobguard.finish_attempt(:third_attempt, '{"ok": true}');
SELECT job_id = :third AS replay, created FROM jobguard.submit('bob', 'k-1', 'charge', '{"amount": 1, "currency": "EUR"}', 'stripe', 1);
-- a late result of a replaced job's attempt loses: the new job decides
SELECT job_id AS late FROM jobguard.submit('carol', 'l-1', 'charge', '{"amount": 3, "currency": "EUR"}', 'stripe', 1) \gset
SELECT jobguard.begin_attempt(:late) AS late_attempt \gset
SELECT jobguard.cancel_attempt(:late_attempt, 'provider stalled');
SELECT jobguard.job_state(:late);	-- failed: its one attempt is used
SELECT job_id AS after_late, created FROM jobguard.submit('carol', 'l-1', 'charge', '{"amount": 3, "currency": "EUR"}', 'stripe', 1) \gset
SELECT jobguard.finish_attempt(:late_attempt, '{"charge": "ch_late"}');
SELECT state, completed_by FROM jobguard.job(:late);
SELECT state, lost_to, lost_result FROM jobguard.attempts_of(:late);

-- changing a policy applies to later calls only, and never rewrites jobs
SELECT jobguard.set_key_policy('charge', after_failure => 'keep');
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'c-1', 'charge', '{"amount": 5, "currency": "EUR", "trace": "t3"}', 'stripe')$$) AS identity_gone;
SELECT params FROM jobguard.job(:charge);
SELECT count(*) AS jobs_of_bob_k1 FROM jobguard.jobs WHERE idempotency_key = 'k-1';
-- every field at its default is no policy
SELECT jobguard.set_key_policy('charge');
SELECT count(*) AS policies FROM jobguard.key_policies;

-- retention: purge() without a cut-off removes each operation's terminal
-- jobs older than its retention; other operations' jobs stay
SELECT jobguard.set_key_policy('chat', retention => '1 hour');
SELECT jobguard.set_key_policy('charge', retention => '30 days');
SELECT job_id AS old_chat FROM jobguard.submit('dave', 'chat-1', 'chat', '{}', 'llm') \gset
SELECT job_id AS open_chat FROM jobguard.submit('dave', 'chat-2', 'chat', '{}', 'llm') \gset
SELECT jobguard.finish_attempt(jobguard.begin_attempt(:old_chat), '{}');
SELECT jobguard.begin_attempt(:open_chat) AS open_attempt \gset
-- make them two hours old
UPDATE jobguard.jobs SET created_at = created_at - interval '2 hours',
	completed_at = completed_at - interval '2 hours' WHERE operation = 'chat';
UPDATE jobguard.attempts SET started_at = started_at - interval '2 hours' WHERE job_id IN (:old_chat, :open_chat);
SELECT jobguard.purge();
SELECT idempotency_key FROM jobguard.jobs WHERE operation = 'chat' ORDER BY 1;	-- the open one stays
SELECT count(*) > 0 AS charges_kept FROM jobguard.jobs WHERE operation = 'charge';
-- an explicit cut-off still applies to every operation
SELECT jobguard.purge('0 seconds') > 0 AS purged_all_terminal;
SELECT count(*) AS violations FROM jobguard.check_invariants();

-- bad input: 22004 / 22023, nothing written
SELECT pg_temp.fingerprint() AS before \gset
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_key_policy(NULL)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_key_policy('', retention => '1 day')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_key_policy('charge', retention => '-1 day')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_key_policy('charge', retention => '0')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_key_policy('charge', identity => '{}')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_key_policy('charge', identity => ARRAY['amount', NULL])$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_key_policy('charge', identity => ARRAY[''])$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_key_policy('charge', after_failure => 'retry')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_key_policy('charge', after_failure => NULL)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.purge(NULL, 0)$$);
SELECT pg_temp.fingerprint() = :'before' AS nothing_written;
TRUNCATE jobguard.policies;
