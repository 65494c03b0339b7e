-- What an operator did, and what is owed back (1.3): operator_actions holds
-- one row per successful call of an operator or administrative function,
-- written in the caller's transaction; lost_results lists the results
-- that lost the compare-and-swap, mark_refunded settles them.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications,
	jobguard.provider_policy, jobguard.policies, jobguard.failover, jobguard.operator_actions,
	jobguard.refunds
	RESTART IDENTITY;
-- error_of: SQLSTATE, message and DETAIL of a statement (callable by every role)
CREATE FUNCTION public.jg_audit_error(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	st text; msg text; det text;
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
	RETURN st || ': ' || msg || coalesce(' | ' || nullif(det, ''), '');
END $$;
GRANT EXECUTE ON FUNCTION public.jg_audit_error(text) TO PUBLIC;
-- the ids the test made, by name (ids differ between back ends and passes)
CREATE TABLE pg_temp.labels (id bigint, label text);
GRANT ALL ON pg_temp.labels TO PUBLIC;
-- the rows written since the last mark: the target by its label, the ids
-- left out of the arguments (target_in_arguments: the target is one of them),
-- the superuser running the suite by what it is, not its name
CREATE TABLE pg_temp.mark (last bigint);
INSERT INTO pg_temp.mark VALUES (0);
CREATE FUNCTION pg_temp.new_actions()
RETURNS TABLE (action text, target text, arguments jsonb, target_in_arguments boolean,
			   reason text, acting_as text, role_is_session boolean)
LANGUAGE sql AS $$
	SELECT o.action, coalesce(l.label, o.target), o.arguments - 'job_id' - 'attempt_id',
		   o.target IN (SELECT a.value FROM jsonb_each_text(o.arguments) a),
		   o.reason, CASE WHEN o.acting_as = session_user THEN '(the session user)' ELSE o.acting_as END,
		   o.role = session_user
	  FROM jobguard.operator_actions o
	  CROSS JOIN pg_temp.mark m
	  LEFT JOIN pg_temp.labels l ON l.id::text = o.target
	 WHERE o.id > m.last ORDER BY o.id;
$$;
CREATE FUNCTION pg_temp.mark() RETURNS bigint LANGUAGE sql AS $$
	UPDATE pg_temp.mark SET last = coalesce((SELECT max(id) FROM jobguard.operator_actions), 0)
	RETURNING last;
$$;

CREATE ROLE regress_jg_audit_shop;		-- client application "shop"
CREATE ROLE regress_jg_audit_blog;		-- client application "blog"
CREATE ROLE regress_jg_audit_ops;		-- operator
CREATE ROLE regress_jg_audit_person IN ROLE regress_jg_audit_ops;	-- a person acting as one
CREATE ROLE regress_jg_audit_all;		-- reads every scope, without payloads
CREATE ROLE regress_jg_audit_auditor;	-- reads shop, without payloads
CREATE ROLE regress_jg_audit_support;	-- reads shop, with payloads

-- the grant functions: one row each, target the role, arguments by name
SELECT jobguard.grant_client('regress_jg_audit_shop', 'shop');
SELECT jobguard.grant_client('regress_jg_audit_blog', 'blog');
SELECT jobguard.grant_operator('regress_jg_audit_ops');
SELECT jobguard.grant_reader('regress_jg_audit_all');
SELECT jobguard.grant_reader('regress_jg_audit_auditor', 'shop');
BEGIN;
SET LOCAL jobguard.action_reason = 'ticket 7: support reads shop';
SELECT jobguard.grant_reader('regress_jg_audit_support', 'shop', payloads => true);
COMMIT;
SELECT * FROM pg_temp.new_actions();
SELECT pg_temp.mark() > 0 AS marked;
-- SET LOCAL ended with its transaction
SELECT current_setting('jobguard.action_reason') AS reason_after_commit;

-- the operations' functions
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"]}',
								 retry_backoff => '1 second');
SELECT jobguard.certify_provider('charge', 'adyen', '{"runner": "by hand"}');
SELECT jobguard.revoke_provider('charge', 'adyen');
SELECT jobguard.set_key_policy('charge', retention => '30 days', identity => '{order}');
SELECT jobguard.set_key_policy('charge');		-- removes it: a change, recorded too
SELECT jobguard.set_provider_policy('stripe', dedupes_for => '1 day', max_in_flight => 10);
SELECT jobguard.set_provider_policy('adyen', paused => true);
SELECT jobguard.set_failover('charge', '{adyen,braintree}', after_failures => 2);
SELECT jobguard.set_failover('charge', NULL);	-- removes the route: recorded too
SELECT * FROM pg_temp.new_actions();
SELECT pg_temp.mark() > 0 AS marked;

-- the jobs' functions, called by a person acting as the operator role:
-- role is the session's user, acting_as the role it acts as
SET ROLE regress_jg_audit_person;
SELECT job_id AS j1 FROM jobguard.submit('alice', 'k1', 'charge', '{"order": 1}', 'stripe') \gset
INSERT INTO pg_temp.labels VALUES (:j1, 'j1');
SELECT jobguard.begin_attempt(:j1) AS a1 \gset
INSERT INTO pg_temp.labels VALUES (:a1, 'a1');
SELECT jobguard.cancel_attempt(:a1, 'provider timed out');
SELECT jobguard.reschedule(:j1, priority => 5);
BEGIN;
SET LOCAL jobguard.action_reason = 'stuck since the outage';
SELECT jobguard.reschedule(:j1, run_at => '2030-01-01 00:00:00+00');
-- a reason argument wins over the setting
SELECT jobguard.cancel_job(:j1, 'customer cancelled');
COMMIT;
-- redrive: an unknown attempt of a provider that deduplicates
SELECT job_id AS j2 FROM jobguard.submit('alice', 'k2', 'charge', '{"order": 2}', 'stripe') \gset
INSERT INTO pg_temp.labels VALUES (:j2, 'j2');
SELECT jobguard.begin_attempt(:j2) AS a2 \gset
INSERT INTO pg_temp.labels VALUES (:a2, 'a2');
SELECT jobguard.mark_unknown(:a2);
SELECT jobguard.redrive_attempt(:a2) > :a2 AS redriven;
-- retry_job: a failed job; its NULL reason falls back to the setting
SELECT job_id AS j3 FROM jobguard.submit('alice', 'k3', 'charge', '{"order": 3}', 'stripe', max_attempts => 1) \gset
INSERT INTO pg_temp.labels VALUES (:j3, 'j3');
SELECT jobguard.begin_attempt(:j3) AS a3 \gset
INSERT INTO pg_temp.labels VALUES (:a3, 'a3');
SELECT jobguard.fail_attempt(:a3, 'declined');
BEGIN;
SET LOCAL jobguard.action_reason = 'card replaced';
SELECT jobguard.retry_job(:j3, 2);
COMMIT;
RESET ROLE;
-- submit, begin, mark_unknown and fail_attempt are no operator actions
SELECT * FROM pg_temp.new_actions();
SELECT pg_temp.mark() > 0 AS marked;

-- a refused call writes nothing; a rolled-back one leaves nothing
SELECT public.jg_audit_error('SELECT jobguard.cancel_job(999, ''nope'')') AS no_job;
SELECT public.jg_audit_error(format('SELECT jobguard.retry_job(%s)', :j2)) AS not_failed;
SELECT public.jg_audit_error('SELECT jobguard.set_provider_policy(''stripe'', max_in_flight => 0)') AS bad_limit;
SELECT public.jg_audit_error('SELECT jobguard.define_operation(''charge'', ''{"type": 5}'')') AS bad_contract;
SELECT public.jg_audit_error('SELECT jobguard.set_failover(''charge'', ''{adyen}'', after_failures => 0)') AS bad_route;
SELECT public.jg_audit_error('SELECT jobguard.revoke_provider(''charge'', ''nobody'')') AS not_certified;
SELECT public.jg_audit_error('SELECT jobguard.grant_client(NULL)') AS null_role;
SELECT public.jg_audit_error('SELECT jobguard.revoke_client(NULL)') AS null_revoke;
SELECT public.jg_audit_error('SELECT jobguard.set_key_policy(''charge'', retention => ''-1 day'')') AS bad_policy;
SELECT public.jg_audit_error(format('SELECT jobguard.redrive_attempt(%s)', :a3)) AS not_unknown;
SET ROLE regress_jg_audit_shop;
-- a client may not call the operators' functions: refused, nothing written
SELECT public.jg_audit_error(format('SELECT jobguard.retry_job(%s)', :j3)) AS client_retry;
SELECT public.jg_audit_error('SELECT jobguard.set_provider_policy(''stripe'', max_in_flight => 1)') AS client_policy;
RESET ROLE;
BEGIN;
SELECT jobguard.cancel_job(:j2, 'rolled back');
SELECT jobguard.set_provider_policy('stripe', max_in_flight => 20);
SELECT jobguard.grant_client('regress_jg_audit_person', 'shop');
SELECT count(*) AS seen_inside FROM pg_temp.new_actions();
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT jobguard.cancel_job(:j2, 'undone by the savepoint');
ROLLBACK TO SAVEPOINT s;
SELECT jobguard.reschedule(:j3, priority => 1);
COMMIT;
SELECT action, target, arguments FROM pg_temp.new_actions();
SELECT pg_temp.mark() > 0 AS marked;
SELECT jobguard.job_state(:j2) AS not_cancelled;

-- who reads operator_actions: operators and readers of every scope; no
-- one but the owner writes it
SET ROLE regress_jg_audit_ops;
SELECT count(*) > 0 AS operator_reads FROM jobguard.operator_actions;
SELECT public.jg_audit_error('INSERT INTO jobguard.operator_actions (role, acting_as, action, arguments) VALUES (''x'', ''x'', ''forged'', ''{}'')') AS operator_insert;
SELECT public.jg_audit_error('UPDATE jobguard.operator_actions SET reason = ''forged''') AS operator_update;
SELECT public.jg_audit_error('DELETE FROM jobguard.operator_actions') AS operator_delete;
SELECT public.jg_audit_error('SELECT pg_catalog.setval(''jobguard.operator_actions_id_seq'', 1)') AS operator_setval;
SELECT public.jg_audit_error('INSERT INTO jobguard.refunds VALUES (1, ''forged'', now(), ''x'')') AS operator_refund_insert;
RESET ROLE;
SET ROLE regress_jg_audit_all;
SELECT count(*) > 0 AS reader_of_all_reads FROM jobguard.operator_actions;
SELECT public.jg_audit_error('DELETE FROM jobguard.operator_actions') AS reader_delete;
RESET ROLE;
SET ROLE regress_jg_audit_auditor;
SELECT public.jg_audit_error('SELECT count(*) FROM jobguard.operator_actions') AS reader_of_one_scope;
RESET ROLE;
SET ROLE regress_jg_audit_shop;
SELECT public.jg_audit_error('SELECT count(*) FROM jobguard.operator_actions') AS client_reads;
SELECT public.jg_audit_error('INSERT INTO jobguard.operator_actions (role, acting_as, action, arguments) VALUES (''x'', ''x'', ''forged'', ''{}'')') AS client_insert;
SELECT public.jg_audit_error('SELECT count(*) FROM jobguard.refunds') AS client_refunds;
RESET ROLE;
SELECT count(*) AS forged FROM jobguard.operator_actions WHERE action = 'forged' OR reason = 'forged';

-- lost results: in shop and in blog, a cancelled attempt's late result
-- loses to its successor's and is kept
SET ROLE regress_jg_audit_shop;
SELECT job_id AS shop_job FROM jobguard.submit('bob', 'lost', 'charge', '{"order": 10}', 'stripe') \gset
INSERT INTO pg_temp.labels VALUES (:shop_job, 'shop_job');
SELECT jobguard.begin_attempt(:shop_job) AS shop_loser \gset
INSERT INTO pg_temp.labels VALUES (:shop_loser, 'shop_loser');
SELECT jobguard.cancel_attempt(:shop_loser, 'looked stuck');
SELECT jobguard.begin_attempt(:shop_job) AS shop_winner \gset
INSERT INTO pg_temp.labels VALUES (:shop_winner, 'shop_winner');
SELECT jobguard.finish_attempt(:shop_winner, '{"id": "ch_2"}');
SELECT jobguard.finish_attempt(:shop_loser, '{"id": "ch_1"}');
RESET ROLE;
SET ROLE regress_jg_audit_blog;
SELECT job_id AS blog_job FROM jobguard.submit('bob', 'lost', 'charge', '{"order": 20}', 'stripe') \gset
INSERT INTO pg_temp.labels VALUES (:blog_job, 'blog_job');
SELECT jobguard.begin_attempt(:blog_job) AS blog_loser \gset
INSERT INTO pg_temp.labels VALUES (:blog_loser, 'blog_loser');
SELECT jobguard.cancel_attempt(:blog_loser, 'looked stuck');
SELECT jobguard.begin_attempt(:blog_job) AS blog_winner \gset
INSERT INTO pg_temp.labels VALUES (:blog_winner, 'blog_winner');
SELECT jobguard.finish_attempt(:blog_winner, '{"id": "ch_4"}');
SELECT jobguard.finish_attempt(:blog_loser, '{"id": "ch_3"}');
RESET ROLE;
-- the clients' cancels are recorded too, as the clients
SELECT action, acting_as, reason FROM pg_temp.new_actions();
SELECT pg_temp.mark() > 0 AS marked;
-- what each role sees: its scopes only, lost_result only with payloads
SELECT attempt_id = :shop_loser AS shop_loser, job_id = :shop_job AS shop_job, scope, owner_id,
	   operation, provider, provider_key IS NOT NULL AS has_key, lost_result,
	   finished_at IS NOT NULL AS finished, refunded_at, refund_reference
  FROM jobguard.lost_results WHERE scope = 'shop';
SET ROLE regress_jg_audit_shop;
SELECT scope, lost_result FROM jobguard.lost_results ORDER BY attempt_id;
RESET ROLE;
SET ROLE regress_jg_audit_blog;
SELECT scope, lost_result FROM jobguard.lost_results ORDER BY attempt_id;
RESET ROLE;
SET ROLE regress_jg_audit_auditor;
SELECT scope, lost_result FROM jobguard.lost_results ORDER BY attempt_id;
RESET ROLE;
SET ROLE regress_jg_audit_support;
SELECT scope, lost_result FROM jobguard.lost_results ORDER BY attempt_id;
RESET ROLE;
SET ROLE regress_jg_audit_all;
SELECT scope, lost_result FROM jobguard.lost_results ORDER BY attempt_id;
RESET ROLE;
SET ROLE regress_jg_audit_ops;
SELECT scope, lost_result FROM jobguard.lost_results ORDER BY attempt_id;
RESET ROLE;

-- mark_refunded: bad arguments, then each answer
SET ROLE regress_jg_audit_ops;
SELECT public.jg_audit_error('SELECT jobguard.mark_refunded(NULL, ''re_1'')') AS null_attempt;
SELECT public.jg_audit_error(format('SELECT jobguard.mark_refunded(%s, NULL)', :shop_loser)) AS null_reference;
SELECT public.jg_audit_error(format('SELECT jobguard.mark_refunded(%s, '''')', :shop_loser)) AS empty_reference;
SELECT public.jg_audit_error(format('SELECT jobguard.mark_refunded(%s, repeat(''r'', 256))', :shop_loser)) AS long_reference;
SELECT public.jg_audit_error('SELECT jobguard.mark_refunded(999999, ''re_1'')') AS no_attempt;
SELECT replace(public.jg_audit_error(format('SELECT jobguard.mark_refunded(%s, ''re_1'')', :shop_winner)),
			   :shop_winner || ' of job ' || :shop_job, '<winner> of job <job>') AS winner;
SELECT replace(public.jg_audit_error(format('SELECT jobguard.mark_refunded(%s, ''re_1'')', :a2)),
			   :a2 || ' of job ' || :j2, '<attempt> of job <job>') AS redriven;
RESET ROLE;
SELECT count(*) AS actions_of_refusals FROM pg_temp.new_actions();
SET ROLE regress_jg_audit_ops;
-- the refund, then the same again (idempotent), then another reference
SELECT jobguard.mark_refunded(:shop_loser, 're_1');
SELECT refunded_at AS first_refunded_at FROM jobguard.lost_results WHERE attempt_id = :shop_loser \gset
SELECT jobguard.mark_refunded(:shop_loser, 're_1');
SELECT replace(public.jg_audit_error(format('SELECT jobguard.mark_refunded(%s, ''re_2'')', :shop_loser)),
			   :shop_loser || ' of job ' || :shop_job, '<loser> of job <job>') AS other_reference;
SELECT scope, refund_reference, refunded_at = :'first_refunded_at' AS first_time_kept
  FROM jobguard.lost_results ORDER BY attempt_id;
RESET ROLE;
SELECT attempt_id = :shop_loser AS loser, reference, refunded_by FROM jobguard.refunds;
-- each successful call is one row, the repeat included
SELECT * FROM pg_temp.new_actions();
SELECT pg_temp.mark() > 0 AS marked;
-- clients and readers may not
SET ROLE regress_jg_audit_blog;
SELECT public.jg_audit_error(format('SELECT jobguard.mark_refunded(%s, ''re_3'')', :blog_loser)) AS client_refund;
RESET ROLE;
SET ROLE regress_jg_audit_all;
SELECT public.jg_audit_error(format('SELECT jobguard.mark_refunded(%s, ''re_3'')', :blog_loser)) AS reader_refund;
RESET ROLE;
-- a rolled-back refund leaves neither the refund nor its action
BEGIN;
SET LOCAL jobguard.action_reason = 'refunded by mistake';
SELECT jobguard.mark_refunded(:blog_loser, 're_3');
ROLLBACK;
SELECT count(*) AS blog_refunds FROM jobguard.lost_results WHERE refunded_at IS NOT NULL AND scope = 'blog';
SELECT count(*) AS rolled_back_actions FROM pg_temp.new_actions();

-- an operator that plants look-alikes first on its search_path changes
-- nothing mark_refunded and the records do: a planted text = would make
-- another reference the same, a bigint = another attempt the one asked for
CREATE SCHEMA regress_jg_audit_evil AUTHORIZATION regress_jg_audit_ops;
SET ROLE regress_jg_audit_ops;
CREATE FUNCTION regress_jg_audit_evil.always(text, text) RETURNS boolean
	LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR regress_jg_audit_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_jg_audit_evil.always);
CREATE FUNCTION regress_jg_audit_evil.always(bigint, bigint) RETURNS boolean
	LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR regress_jg_audit_evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = regress_jg_audit_evil.always);
CREATE FUNCTION regress_jg_audit_evil.clock_timestamp() RETURNS timestamptz
	LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$;
CREATE FUNCTION regress_jg_audit_evil.now() RETURNS timestamptz
	LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$;
CREATE FUNCTION regress_jg_audit_evil.jsonb_build_object(text, bigint, text, text) RETURNS jsonb
	LANGUAGE sql AS $$ SELECT '{"forged": true}'::jsonb $$;
CREATE TABLE regress_jg_audit_evil.operator_actions (id bigint, role text, action text);
CREATE TABLE regress_jg_audit_evil.refunds (attempt_id bigint, reference text);
SET search_path = regress_jg_audit_evil, pg_catalog, jobguard, public;
SELECT now() = now() AS planted_eq;
SELECT replace(public.jg_audit_error(format('SELECT jobguard.mark_refunded(%s, ''re_2'')', :shop_loser)),
			   :shop_loser || ' of job ' || :shop_job, '<loser> of job <job>') AS other_reference;
SELECT jobguard.mark_refunded(:blog_loser, 're_3');
SELECT jobguard.set_provider_policy('stripe', max_in_flight => 30);
RESET search_path;
SELECT (SELECT count(*) FROM regress_jg_audit_evil.operator_actions) AS evil_actions,
	   (SELECT count(*) FROM regress_jg_audit_evil.refunds) AS evil_refunds;
RESET ROLE;
SELECT scope, refund_reference FROM jobguard.lost_results ORDER BY attempt_id;
SELECT n.*, o.at > '2020-01-01' AS real_time
  FROM pg_temp.new_actions() WITH ORDINALITY n
  JOIN (SELECT at, row_number() OVER (ORDER BY id) AS ordinality
		  FROM jobguard.operator_actions, pg_temp.mark m WHERE id > m.last) o USING (ordinality);
SELECT pg_temp.mark() > 0 AS marked;
DROP SCHEMA regress_jg_audit_evil CASCADE;

-- purge takes the ended jobs, never the record of what was done
SELECT count(*) > 0 AS actions_before FROM jobguard.operator_actions \gset
SELECT jobguard.purge('0 seconds') > 0 AS purged;
SELECT count(*) AS lost_results_left FROM jobguard.lost_results;
SELECT count(*) > 0 AS actions_kept FROM jobguard.operator_actions;
SELECT count(*) AS refunds_kept FROM jobguard.refunds;
SELECT count(*) AS violations FROM jobguard.check_invariants();

-- revoke_client, last: one row each
SELECT jobguard.revoke_client(r::regrole)
  FROM unnest(ARRAY['regress_jg_audit_shop', 'regress_jg_audit_blog', 'regress_jg_audit_ops',
					'regress_jg_audit_all', 'regress_jg_audit_auditor', 'regress_jg_audit_support']) r;
SELECT action, target, arguments FROM pg_temp.new_actions();
-- a revoked reader reads operator_actions no more
SET ROLE regress_jg_audit_all;
SELECT public.jg_audit_error('SELECT count(*) FROM jobguard.operator_actions') AS revoked_reader;
RESET ROLE;
DROP ROLE regress_jg_audit_person, regress_jg_audit_shop, regress_jg_audit_blog, regress_jg_audit_ops,
	regress_jg_audit_all, regress_jg_audit_auditor, regress_jg_audit_support;
DROP FUNCTION public.jg_audit_error(text);
-- the suites after this one find no provider policy (adyen is paused)
TRUNCATE jobguard.provider_policy;
