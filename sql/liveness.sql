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

-- clean up the roles (they are cluster-wide)
SELECT count(*) AS violations FROM jobguard.check_invariants();
SELECT jobguard.revoke_client(r::regrole)
  FROM unnest(ARRAY['regress_jg_live_client', 'regress_jg_live_other', 'regress_jg_live_ops',
					'regress_jg_live_reader']) r;
DROP ROLE regress_jg_live_client, regress_jg_live_other, regress_jg_live_ops, regress_jg_live_reader;
