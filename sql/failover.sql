-- Failover routes, certifications bound to the contract, pausing a
-- provider (jobguard 1.3; doc/reference.md, "Version 1.3").  A job's route
-- is its own provider, then its operation's fallbacks; claim() begins each
-- attempt against the first provider on the route that fewer than
-- after_failures of the job's attempts ended failed or cancelled against
-- and that is usable (the own provider always, a fallback while certified
-- under the current contract and not paused), else the last usable one.
-- job_overview.next_provider shows the same choice.  Every case runs on
-- both back ends (make test runs this suite with jobguard.fast_path on and
-- off): begin_attempt's certification check is the fast path's there.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications,
	jobguard.provider_policy, jobguard.failover RESTART IDENTITY;
-- contract versions shown in DETAILs: from a known number on
ALTER SEQUENCE jobguard.contract_version_seq RESTART WITH 100;
\i sql/include/helpers.sql
\set VERBOSITY terse

-- the provider claim would choose for a job, and what it shows
CREATE FUNCTION pg_temp.next(job bigint) RETURNS text LANGUAGE sql AS $$
	SELECT v.next_provider FROM jobguard.job_overview v WHERE v.job_id = job
$$;
-- claim one attempt (any provider unless given), as "provider/failover"
CREATE FUNCTION pg_temp.take(p text DEFAULT NULL, ps text[] DEFAULT NULL) RETURNS text
LANGUAGE sql AS $$
	SELECT COALESCE(string_agg(c.job_id || ':' || c.provider || CASE WHEN c.failover THEN '/failover' ELSE '' END, ' '), 'nothing')
	  FROM jobguard.claim('w', NULL, '1 minute', 10, p, '0', ps) c
$$;
-- the latest attempt of a job
CREATE FUNCTION pg_temp.last_attempt(job bigint) RETURNS bigint LANGUAGE sql AS $$
	SELECT a.id FROM jobguard.attempts a WHERE a.job_id = job ORDER BY a.attempt_no DESC LIMIT 1
$$;
-- the attempts of a job: provider, state, and which key (1 = the first key used)
CREATE FUNCTION pg_temp.history(job bigint)
RETURNS TABLE (attempt_no integer, provider text, state text, key_no bigint, tries integer)
LANGUAGE sql AS $$
	SELECT a.attempt_no, a.provider, a.state, dense_rank() OVER (ORDER BY k.first_no), a.tries
	  FROM jobguard.attempts a
	  JOIN (SELECT provider_key, min(attempt_no) AS first_no FROM jobguard.attempts
			 WHERE job_id = job GROUP BY 1) k USING (provider_key)
	 WHERE a.job_id = job ORDER BY a.attempt_no
$$;

---------------------------------------------------------------------------
-- set_failover and failover_routes
---------------------------------------------------------------------------
SELECT jobguard.define_operation('charge', '{"type": "object"}');
SELECT jobguard.set_failover('charge', '{adyen,braintree}');
SELECT * FROM jobguard.failover_routes;
SELECT jobguard.set_failover('charge', '{braintree,adyen}', 3);
SELECT * FROM jobguard.failover_routes;
-- NULL and '{}' remove it
SELECT jobguard.set_failover('charge', NULL);
SELECT count(*) AS routes FROM jobguard.failover_routes;
SELECT jobguard.set_failover('charge', '{adyen}');
SELECT jobguard.set_failover('charge', '{}');
SELECT count(*) AS routes FROM jobguard.failover_routes;
-- bad input: a clear error, nothing written
SELECT jobguard.set_failover('charge', '{adyen}');
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover(NULL, '{adyen}')$$) AS no_operation;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover('', '{adyen}')$$) AS empty_operation;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover('charge', '{adyen,NULL}')$$) AS null_provider;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover('charge', '{adyen,""}')$$) AS empty_provider;
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.set_failover(%L, ARRAY[%L])', 'charge', repeat('p', 64))) AS long_provider;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover('charge', '{adyen,braintree,adyen}')$$) AS twice;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover('charge', '{{adyen},{braintree}}')$$) AS two_dimensions;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover('charge', '{braintree}', 0)$$) AS zero_failures;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover('charge', '{braintree}', NULL)$$) AS null_failures;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover('charge', ARRAY(SELECT 'p' || n FROM generate_series(1, 65) n))$$) AS too_many;
SELECT * FROM jobguard.failover_routes;
-- operators only
CREATE ROLE regress_fo_client;
SELECT jobguard.grant_client('regress_fo_client');
SET ROLE regress_fo_client;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_failover('charge', '{braintree}')$$) AS client_sets_route;
SELECT operation, providers FROM jobguard.failover_routes;
RESET ROLE;
SELECT jobguard.set_failover('charge', NULL);

---------------------------------------------------------------------------
-- the route rule
---------------------------------------------------------------------------
SELECT jobguard.certify_provider('charge', 'adyen', '{"suite": "green"}');
SELECT jobguard.certify_provider('charge', 'braintree');
SELECT jobguard.set_failover('charge', '{adyen,braintree}');

-- each failure moves the job one provider on; the last one keeps it
SELECT job_id AS j1 FROM jobguard.submit('o', 'j1', 'charge', '{}', 'stripe') \gset
SELECT pg_temp.next(:j1) AS next_provider;
SELECT pg_temp.take() AS claimed;
SELECT pg_temp.next(:j1) AS while_running;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j1), 'declined');
SELECT pg_temp.next(:j1) AS after_one_failure;
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j1), 'declined');
SELECT pg_temp.next(:j1) AS after_two;
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j1), 'declined');
-- none left: the last usable one, until max_attempts ends the job
SELECT pg_temp.next(:j1) AS none_left;
SELECT pg_temp.take() AS claimed;
-- a fallback gets its own key; one that failed gets a new one
SELECT * FROM pg_temp.history(:j1);
SELECT jobguard.finish_attempt(pg_temp.last_attempt(:j1), '{"ok": true}');
SELECT pg_temp.next(:j1) AS succeeded;

-- after_failures 2: two failures against each before moving on
SELECT jobguard.set_failover('charge', '{adyen,braintree}', 2);
SELECT job_id AS j2 FROM jobguard.submit('o', 'j2', 'charge', '{}', 'stripe') \gset
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j2), 'declined');
SELECT pg_temp.next(:j2) AS after_one;
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j2), 'declined');
SELECT pg_temp.next(:j2) AS after_two;
-- a cancelled attempt counts as a failure against its provider
SELECT pg_temp.take() AS claimed;
SELECT jobguard.cancel_attempt(pg_temp.last_attempt(:j2), 'operator stopped it');
SELECT pg_temp.next(:j2) AS after_a_cancel;
-- a cancel keeps the key: the provider may have the request
SELECT * FROM pg_temp.history(:j2);
SELECT jobguard.cancel_job(:j2, 'done here');

-- a redriven attempt is the same request again: not counted
SELECT jobguard.set_provider_policy('stripe', dedupes_for => '1 day');
SELECT job_id AS j3 FROM jobguard.submit('o', 'j3', 'charge', '{}', 'stripe') \gset
SELECT pg_temp.take() AS claimed;
SELECT jobguard.mark_unknown(pg_temp.last_attempt(:j3));
-- unknown never fails over: the gate stays closed, nothing to claim
SELECT pg_temp.next(:j3) AS while_unknown;
SELECT pg_temp.take() AS claimed;
SELECT jobguard.redrive_attempt(pg_temp.last_attempt(:j3)) > 0 AS redriven;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j3), 'declined');
-- one failure against stripe, not two: it stays on stripe
SELECT pg_temp.next(:j3) AS after_redrive_and_failure;
SELECT * FROM pg_temp.history(:j3);
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j3), 'declined');
SELECT pg_temp.next(:j3) AS after_second_failure;
SELECT jobguard.cancel_job(:j3, 'done here');
SELECT jobguard.set_provider_policy('stripe');

-- a fallback equal to the job's own provider is skipped
SELECT jobguard.set_failover('charge', '{stripe,adyen}');
SELECT job_id AS j4 FROM jobguard.submit('o', 'j4', 'charge', '{}', 'stripe') \gset
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j4), 'declined');
SELECT pg_temp.next(:j4) AS skips_itself;
-- a job of a fallback's own: its route starts with adyen
SELECT job_id AS j5 FROM jobguard.submit('o', 'j5', 'charge', '{}', 'adyen') \gset
SELECT pg_temp.next(:j5) AS own_adyen;
SELECT pg_temp.take('adyen') AS adyen_worker;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j5), 'declined');
-- stripe is not certified for charge: no fallback for this job
SELECT pg_temp.next(:j5) AS stays_on_adyen;
SELECT jobguard.certify_provider('charge', 'stripe');
SELECT pg_temp.next(:j5) AS on_to_stripe;

-- claim(provider => p) and claim(providers => ...) take only the jobs
-- whose route chooses them: j5 is stripe's now, j4 runs on adyen
SELECT pg_temp.take('braintree') AS braintree_worker;
SELECT pg_temp.take(NULL, '{adyen}') AS adyen_list;
SELECT pg_temp.take(NULL, '{braintree,stripe}') AS stripe_or_braintree;
SELECT jobguard.revoke_provider('charge', 'stripe');
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim('w', provider => 'adyen', providers => '{adyen}')$$) AS both_given;
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim('w', providers => '{adyen,NULL}')$$) AS null_in_list;
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim('w', providers => '{}')$$) AS empty_list;
SELECT pg_temp.sqlstate_of($$SELECT * FROM jobguard.claim('w', providers => '{adyen,adyen}')$$) AS twice_in_list;
SELECT jobguard.cancel_job(:j4, 'done here'), jobguard.cancel_job(:j5, 'done here');

-- stale, revoked and paused fallbacks are skipped
SELECT jobguard.set_failover('charge', '{adyen,braintree}');
SELECT job_id AS j6 FROM jobguard.submit('o', 'j6', 'charge', '{}', 'stripe') \gset
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j6), 'declined');
SELECT pg_temp.next(:j6) AS to_adyen;
SELECT jobguard.set_provider_policy('adyen', paused => true);
SELECT pg_temp.next(:j6) AS adyen_paused;
SELECT jobguard.set_provider_policy('adyen', paused => false);
SELECT jobguard.revoke_provider('charge', 'adyen');
SELECT pg_temp.next(:j6) AS adyen_revoked;
SELECT jobguard.certify_provider('charge', 'adyen');
SELECT pg_temp.next(:j6) AS adyen_certified_again;
-- the same contract defined again keeps every certification
SELECT jobguard.define_operation('charge', '{"type": "object"}');
SELECT provider, certified, stale, contract_version FROM jobguard.certification_overview ORDER BY provider;
SELECT pg_temp.next(:j6) AS same_contract;
-- another contract makes them stale: the rows stay, and count no more
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"]}');
SELECT provider, certified, stale, contract_version, revoked_at IS NULL AS not_revoked
  FROM jobguard.certification_overview ORDER BY provider;
-- with no fallback usable the own provider is the last usable one
SELECT pg_temp.next(:j6) AS all_stale;
-- braintree earns it again under the new contract
SELECT jobguard.certify_provider('charge', 'braintree', '{"runner": "test"}');
SELECT provider, certified, stale, contract_version FROM jobguard.certification_overview ORDER BY provider;
SELECT pg_temp.next(:j6) AS braintree_current;
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j6), 'declined');
-- a return to a provider: stripe's attempt failed, so a new key there
SELECT jobguard.revoke_provider('charge', 'braintree');
SELECT pg_temp.next(:j6) AS back_to_stripe;
SELECT pg_temp.take() AS claimed;
SELECT * FROM pg_temp.history(:j6);
SELECT jobguard.cancel_job(:j6, 'done here');

-- a return after a cancel keeps the provider's key
SELECT jobguard.certify_provider('charge', 'adyen');
SELECT job_id AS j7 FROM jobguard.submit('o', 'j7', 'charge', '{}', 'stripe') \gset
SELECT pg_temp.take() AS claimed;
SELECT jobguard.cancel_attempt(pg_temp.last_attempt(:j7), 'stuck');
SELECT pg_temp.take() AS claimed;
SELECT jobguard.cancel_attempt(pg_temp.last_attempt(:j7), 'stuck too');
-- adyen revoked: stripe is the last usable provider again
SELECT jobguard.revoke_provider('charge', 'adyen');
SELECT pg_temp.next(:j7) AS back_to_stripe;
SELECT pg_temp.take() AS claimed;
SELECT * FROM pg_temp.history(:j7);
SELECT jobguard.cancel_job(:j7, 'done here');

-- the own provider is always usable: paused, its jobs are passed over
-- (they stay runnable), never moved along the route for that
SELECT jobguard.certify_provider('charge', 'adyen');
SELECT jobguard.set_provider_policy('stripe', paused => true);
SELECT job_id AS j8 FROM jobguard.submit('o', 'j8', 'charge', '{}', 'stripe') \gset
SELECT pg_temp.next(:j8) AS own_paused;
SELECT pg_temp.take() AS claimed;
SELECT jobguard.job_state(:j8) AS still;
SELECT jobguard.set_provider_policy('stripe', paused => false);
SELECT pg_temp.take() AS claimed;
SELECT jobguard.cancel_job(:j8, 'done here');

-- a chosen fallback at its limit: the job is passed over, never moved on
-- to braintree for that
SELECT jobguard.certify_provider('charge', 'worldpay');
SELECT jobguard.certify_provider('charge', 'braintree');
SELECT jobguard.set_failover('charge', '{worldpay,braintree}');
SELECT jobguard.set_provider_policy('worldpay', max_in_flight => 1);
SELECT job_id AS busy FROM jobguard.submit('o', 'busy', 'charge', '{}', 'worldpay') \gset
SELECT jobguard.begin_attempt(:busy) AS busy_attempt \gset
SELECT job_id AS j12 FROM jobguard.submit('o', 'j12', 'charge', '{}', 'stripe') \gset
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j12), 'declined');
SELECT pg_temp.next(:j12) AS chosen;
SELECT pg_temp.take() AS at_limit;
SELECT pg_temp.next(:j12) AS still_chosen;
-- the slot freed, it fails over to worldpay
SELECT jobguard.finish_attempt(:busy_attempt, '{"id": "ch_1"}');
SELECT pg_temp.take() AS claimed;
SELECT jobguard.cancel_job(:j12, 'done here');
SELECT jobguard.set_provider_policy('worldpay');
SELECT jobguard.revoke_provider('charge', 'braintree');
SELECT jobguard.set_failover('charge', '{adyen,braintree}');

-- no route: 1.2's rule (a worker of a certified fallback takes a job
-- whose latest attempt failed; a claim without a provider, the own one)
SELECT jobguard.set_failover('charge', NULL);
SELECT job_id AS j9 FROM jobguard.submit('o', 'j9', 'charge', '{}', 'stripe') \gset
SELECT pg_temp.take() AS claimed;
SELECT jobguard.fail_attempt(pg_temp.last_attempt(:j9), 'declined');
SELECT pg_temp.next(:j9) AS no_route;
SELECT pg_temp.take('adyen') AS adyen_worker;
SELECT jobguard.cancel_job(:j9, 'done here');

---------------------------------------------------------------------------
-- refusals: JG004 for a stale certification, JG010 for a paused provider
---------------------------------------------------------------------------
SELECT job_id AS j10 FROM jobguard.submit('o', 'j10', 'charge', '{}', 'stripe') \gset
\set VERBOSITY default
-- adyen is certified under the current contract: this attempt begins
SELECT jobguard.begin_attempt(:j10, 'adyen') > 0 AS begun_on_adyen;
SELECT jobguard.cancel_attempt(pg_temp.last_attempt(:j10), 'again');
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["charge"]}');
SELECT jobguard.begin_attempt(:j10, 'adyen');
-- an operation never defined: certified under no contract; defined, stale
SELECT jobguard.certify_provider('refund', 'adyen');
SELECT job_id AS j11 FROM jobguard.submit('o', 'j11', 'refund', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:j11, 'adyen') > 0 AS begun_without_contract;
SELECT jobguard.cancel_attempt(pg_temp.last_attempt(:j11), 'again');
SELECT jobguard.define_operation('refund', '{}');
SELECT jobguard.begin_attempt(:j11, 'adyen');
-- a paused provider: no begin, no redrive; its open attempts run on
SELECT jobguard.set_provider_policy('stripe', dedupes_for => '1 day');
SELECT jobguard.begin_attempt(:j10) AS open_attempt \gset
SELECT jobguard.set_provider_policy('stripe', paused => true);
SELECT provider, dedupes_for, max_in_flight, max_per_second, paused FROM jobguard.provider_policies;
SELECT jobguard.heartbeat(:open_attempt) > now() AS heartbeat_goes_on;
SELECT jobguard.mark_unknown(:open_attempt);
SELECT jobguard.redrive_attempt(:open_attempt);
SELECT jobguard.fail_attempt(:open_attempt, 'the provider said no');
SELECT jobguard.begin_attempt(:j10);
\set VERBOSITY terse
SELECT state, provider FROM jobguard.attempt_overview WHERE job_id = :j10 ORDER BY attempt_no;

---------------------------------------------------------------------------
-- set_provider_policy's pause
---------------------------------------------------------------------------
-- 1.2's call with no values clears the values and keeps the pause
SELECT jobguard.set_provider_policy('stripe');
SELECT provider, dedupes_for, paused FROM jobguard.provider_policies;
SELECT jobguard.set_provider_policy('stripe', max_in_flight => 5);
SELECT provider, max_in_flight, paused FROM jobguard.provider_policies;
-- unpaused with no value left: no policy
SELECT jobguard.set_provider_policy('stripe', paused => false);
SELECT provider, max_in_flight, paused FROM jobguard.provider_policies;
SELECT jobguard.set_provider_policy('stripe');
SELECT count(*) AS policies FROM jobguard.provider_policies;
SELECT jobguard.set_provider_policy('stripe', paused => true);
SELECT jobguard.set_provider_policy('stripe', paused => false);
SELECT count(*) AS policies FROM jobguard.provider_policies;
SET ROLE regress_fo_client;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('stripe', paused => true)$$) AS client_pauses;
SELECT count(*) AS readable FROM jobguard.provider_policies;
RESET ROLE;

SELECT count(*) AS violations FROM jobguard.check_invariants();
SELECT jobguard.revoke_client('regress_fo_client');
DROP ROLE regress_fo_client;
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications,
	jobguard.provider_policy, jobguard.failover RESTART IDENTITY;
