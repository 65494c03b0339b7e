-- Liveness without duplicates (1.2): provider policies, provider keys,
-- redrive, reconciliation, blocked jobs and their counters.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications,
	jobguard.provider_policy RESTART IDENTITY;
\i sql/include/helpers.sql
SET client_min_messages = warning;
CREATE ROLE regress_jg_live_client;
CREATE ROLE regress_jg_live_other;
CREATE ROLE regress_jg_live_ops;
CREATE ROLE regress_jg_live_reader;
SELECT jobguard.grant_client('regress_jg_live_client', 'live');
SELECT jobguard.grant_client('regress_jg_live_other', 'live_other');
SELECT jobguard.grant_operator('regress_jg_live_ops');
SELECT jobguard.grant_reader('regress_jg_live_reader', 'live');
RESET client_min_messages;

---------------------------------------------------------------------------
-- provider policies
---------------------------------------------------------------------------
SELECT jobguard.set_provider_policy('stripe', dedupes_for => '24 hours');
SELECT jobguard.set_provider_policy('mailer', max_in_flight => 4, max_per_second => 2.5);
SELECT provider, dedupes_for, max_in_flight, max_per_second FROM jobguard.provider_policies ORDER BY provider;
-- replaces the whole policy
SELECT jobguard.set_provider_policy('mailer', max_in_flight => 8);
SELECT provider, dedupes_for, max_in_flight, max_per_second FROM jobguard.provider_policies ORDER BY provider;
-- nothing given: no policy
SELECT jobguard.set_provider_policy('mailer');
SELECT provider FROM jobguard.provider_policies ORDER BY provider;
-- bad values: 22023 / 22004, nothing written
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', dedupes_for => '0')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', dedupes_for => '-1 hour')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', max_in_flight => 0)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', max_per_second => 0)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', max_per_second => 'NaN')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('x', max_per_second => 'Infinity')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy(NULL, max_in_flight => 1)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('', max_in_flight => 1)$$);
SELECT count(*) AS policies FROM jobguard.provider_policy;
-- operators only: an operator may, a client and a reader may not (42501)
SET ROLE regress_jg_live_ops;
SELECT jobguard.set_provider_policy('opsprov', max_in_flight => 3);
SELECT provider, max_in_flight FROM jobguard.provider_policies WHERE provider = 'opsprov';
RESET ROLE;
SET ROLE regress_jg_live_client;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('opsprov', max_in_flight => 9)$$);
SELECT provider, max_in_flight FROM jobguard.provider_policies WHERE provider = 'opsprov';
RESET ROLE;
SET ROLE regress_jg_live_reader;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('opsprov', max_in_flight => 9)$$);
RESET ROLE;
SELECT jobguard.set_provider_policy('opsprov');
-- EXECUTE alone does not make an operator
GRANT EXECUTE ON FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric) TO regress_jg_live_client;
SET ROLE regress_jg_live_client;
SELECT pg_temp.sqlstate_of($$SELECT jobguard.set_provider_policy('opsprov', max_in_flight => 9)$$);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric) FROM regress_jg_live_client;
SELECT provider, max_in_flight FROM jobguard.provider_policies WHERE provider = 'opsprov';
SELECT jobguard.set_provider_policy('opsprov');

---------------------------------------------------------------------------
-- provider keys
---------------------------------------------------------------------------
SELECT job_id AS k1 FROM jobguard.submit('alice', 'key-1', 'charge', '{"n": 1}', 'stripe') \gset
SELECT job_id AS k2 FROM jobguard.submit('alice', 'key-2', 'charge', '{"n": 2}', 'stripe') \gset
SELECT jobguard.certify_provider('charge', 'adyen');
SELECT jobguard.begin_attempt(:k1, NULL, '1 minute') AS a1 \gset
SELECT jobguard.begin_attempt(:k2, NULL, '1 minute') AS b1 \gset
-- the format: 32 hex characters; two jobs never share a key
SELECT jobguard.provider_key(:a1) ~ '^[0-9a-f]{32}$' AS hex32,
	   jobguard.provider_key(:a1) <> jobguard.provider_key(:b1) AS jobs_differ;
-- a retry after a cancel against the same provider: the same key
SELECT jobguard.cancel_attempt(:a1, 'stuck');
SELECT jobguard.begin_attempt(:k1, NULL, '1 minute') AS a2 \gset
SELECT jobguard.provider_key(:a2) = jobguard.provider_key(:a1) AS after_cancel_same;
-- another provider gets its own key
SELECT jobguard.cancel_attempt(:a2, 'fall back');
SELECT jobguard.begin_attempt(:k1, 'adyen', '1 minute') AS a3 \gset
SELECT jobguard.provider_key(:a3) <> jobguard.provider_key(:a1) AS other_provider_differs;
-- back to the first provider (after an attempt against another): its key again
SELECT jobguard.cancel_attempt(:a3, 'back');
SELECT jobguard.begin_attempt(:k1, NULL, '1 minute') AS a4 \gset
SELECT jobguard.provider_key(:a4) = jobguard.provider_key(:a1) AS back_same;
-- after a failure: a new key (the provider said no: a new request)
SELECT jobguard.fail_attempt(:a4, 'declined');
SELECT jobguard.begin_attempt(:k1, NULL, '1 minute') AS a5 \gset
SELECT jobguard.provider_key(:a5) <> jobguard.provider_key(:a4) AS after_failed_new;
-- and the failure of stripe does not touch adyen's key
SELECT jobguard.cancel_attempt(:a5, 'again');
SELECT jobguard.begin_attempt(:k1, 'adyen', '1 minute') AS a6 \gset
SELECT jobguard.provider_key(:a6) = jobguard.provider_key(:a3) AS adyen_same;
SELECT attempt_no, provider, state,
	   dense_rank() OVER (ORDER BY min_started) AS key_no, tries
  FROM (SELECT v.*, min(v.started_at) OVER (PARTITION BY v.provider_key) AS min_started
		  FROM jobguard.attempt_overview v WHERE v.job_id = :k1) x
 ORDER BY attempt_no;
-- claim returns the key after deadline, redrive false for a fresh job
SELECT job_id AS k3 FROM jobguard.submit('alice', 'key-3', 'claimed', '{}', 'stripe') \gset
SELECT attempt_id AS c1, provider_key AS c1_key, redrive AS c1_redrive
  FROM jobguard.claim('w1', ARRAY['claimed']) \gset
SELECT jobguard.provider_key(:c1) = :'c1_key' AS key_matches, :'c1_redrive' AS redrive;
SELECT array_agg(attname ORDER BY attnum) AS claim_columns
  FROM (SELECT unnest(proargnames) AS attname, generate_subscripts(proargnames, 1) AS attnum
		  FROM pg_proc WHERE oid = 'jobguard.claim(text, text[], interval, integer, text, interval)'::regprocedure) p
 WHERE attnum > 6;
-- the CHECK on the format
SELECT pg_temp.sqlstate_of($$UPDATE jobguard.attempts SET provider_key = 'has space' WHERE id = $$ || :c1);
SELECT pg_temp.sqlstate_of($$UPDATE jobguard.attempts SET provider_key = repeat('x', 65) WHERE id = $$ || :c1);
-- provider_key(): readers of the scope; another scope's id is JG009, a job id says so
SELECT pg_temp.sqlstate_of('SELECT jobguard.provider_key(' || :k1 || ')');
SELECT pg_temp.sqlstate_of('SELECT jobguard.provider_key(999999)');
SELECT pg_temp.sqlstate_of('SELECT jobguard.provider_key(NULL)');
SET ROLE regress_jg_live_other;
SELECT pg_temp.sqlstate_of('SELECT jobguard.provider_key(' || :a1 || ')');
RESET ROLE;

---------------------------------------------------------------------------
-- max_attempts: a redrive does not count (tries), a begin does
---------------------------------------------------------------------------
SELECT job_id AS m1 FROM jobguard.submit('alice', 'max-1', 'charge', '{}', 'stripe', 2) \gset
SELECT jobguard.begin_attempt(:m1, NULL, '1 minute') AS m1a \gset
SELECT jobguard.cancel_attempt(:m1a, 'x');
SELECT jobguard.begin_attempt(:m1, NULL, '1 minute') AS m1b \gset
SELECT jobguard.cancel_attempt(:m1b, 'x');
SELECT pg_temp.sqlstate_of('SELECT jobguard.begin_attempt(' || :m1 || ', NULL, ''1 minute'')');
SELECT jobguard.job_state(:m1);

-- clean up the roles (they are cluster-wide)
SELECT count(*) AS violations FROM jobguard.check_invariants();
SELECT jobguard.revoke_client(r::regrole)
  FROM unnest(ARRAY['regress_jg_live_client', 'regress_jg_live_other', 'regress_jg_live_ops',
					'regress_jg_live_reader']) r;
DROP ROLE regress_jg_live_client, regress_jg_live_other, regress_jg_live_ops, regress_jg_live_reader;
