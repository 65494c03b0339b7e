-- Scopes: one database, several client applications.  A client sees, acts
-- on and probes only the jobs of its own scope; another scope's ids are
-- answered exactly as ids that do not exist; readers read one scope or all,
-- with or without payloads; operators act everywhere.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
CREATE FUNCTION public.jg_error_of(stmt text, id bigint DEFAULT NULL) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	st text; msg text; det text; hin text;
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		det = PG_EXCEPTION_DETAIL, hin = PG_EXCEPTION_HINT;
	-- the id itself masked, so that two answers can be compared
	RETURN replace(st || ': ' || msg || ' | ' || coalesce(det, '-') || ' | ' || coalesce(hin, '-'),
				   coalesce(id::text, '<no id>'), '<id>');
END $$;
GRANT EXECUTE ON FUNCTION public.jg_error_of(text, bigint) TO PUBLIC;

CREATE ROLE regress_jg_shop;			-- client application "shop"
CREATE ROLE regress_jg_blog;			-- client application "blog"
CREATE ROLE regress_jg_shop_worker IN ROLE regress_jg_shop;	-- acts in shop's scope
CREATE ROLE regress_jg_both IN ROLE regress_jg_shop, regress_jg_blog;
CREATE ROLE regress_jg_auditor;		-- reads shop, without payloads
CREATE ROLE regress_jg_support;		-- reads everything, with payloads
CREATE ROLE regress_jg_ops;			-- operator
SELECT jobguard.grant_client('regress_jg_shop', 'shop');
SELECT jobguard.grant_client('regress_jg_blog');	-- scope named after the role
SELECT jobguard.grant_reader('regress_jg_auditor', 'shop');
SELECT jobguard.grant_reader('regress_jg_support', NULL, payloads => true);
SELECT jobguard.grant_operator('regress_jg_ops');
SELECT role, kind, scope, payloads FROM jobguard.grants WHERE role::text LIKE 'regress_jg_%' ORDER BY role::text;

-- each application submits in its own scope; the same owner and key are
-- two jobs, never a JG001 across applications
SET ROLE regress_jg_shop;
SELECT jobguard.caller_scope();
SELECT job_id AS shop_job FROM jobguard.submit('alice', 'order-1', 'charge', '{"card": "4242"}', 'stripe') \gset
SELECT jobguard.begin_attempt(:shop_job) AS shop_attempt \gset
RESET ROLE;
SET ROLE regress_jg_blog;
SELECT jobguard.caller_scope();
SELECT job_id AS blog_job, created FROM jobguard.submit('alice', 'order-1', 'publish', '{"post": 7}', 'wp') \gset
SELECT :'created' AS blog_created, :blog_job <> :shop_job AS two_jobs;
-- a replay in the blog's own scope is a replay there
SELECT created FROM jobguard.submit('alice', 'order-1', 'publish', '{"post": 7}', 'wp');
RESET ROLE;
SELECT scope, owner_id, idempotency_key, operation FROM jobguard.jobs ORDER BY id;

-- the blog sees nothing of the shop: views, and every function taking an id
SET ROLE regress_jg_blog;
SELECT job_id, scope FROM jobguard.job_overview ORDER BY job_id;
SELECT count(*) AS shop_attempts_visible FROM jobguard.attempt_overview WHERE job_id = :shop_job;
SELECT public.jg_error_of(format('SELECT jobguard.job_state(%s)', :shop_job), :shop_job) AS job_state;
SELECT public.jg_error_of(format('SELECT * FROM jobguard.job(%s)', :shop_job), :shop_job) AS job;
SELECT public.jg_error_of(format('SELECT * FROM jobguard.attempts_of(%s)', :shop_job), :shop_job) AS attempts_of;
SELECT public.jg_error_of(format($$SELECT jobguard.await(%s, '0')$$, :shop_job), :shop_job) AS await;
SELECT public.jg_error_of(format('SELECT jobguard.begin_attempt(%s)', :shop_job), :shop_job) AS begin_attempt;
SELECT public.jg_error_of(format($$SELECT jobguard.cancel_job(%s, 'x')$$, :shop_job), :shop_job) AS cancel_job;
SELECT public.jg_error_of(format($$SELECT jobguard.finish_attempt(%s, '{"forged": true}')$$, :shop_attempt), :shop_attempt) AS finish;
SELECT public.jg_error_of(format($$SELECT jobguard.fail_attempt(%s, 'x')$$, :shop_attempt), :shop_attempt) AS fail;
SELECT public.jg_error_of(format('SELECT jobguard.mark_unknown(%s)', :shop_attempt), :shop_attempt) AS mark_unknown;
SELECT public.jg_error_of(format($$SELECT jobguard.cancel_attempt(%s, 'x')$$, :shop_attempt), :shop_attempt) AS cancel_attempt;
-- no oracle: another scope's ids get exactly the answers of ids that never
-- existed, also where the number is of the other kind (job for attempt)
SELECT public.jg_error_of(format('SELECT jobguard.job_state(%s)', :shop_job), :shop_job)
	 = public.jg_error_of('SELECT jobguard.job_state(999999)', 999999) AS job_as_missing;
SELECT public.jg_error_of(format($$SELECT jobguard.finish_attempt(%s, '{}')$$, :shop_attempt), :shop_attempt)
	 = public.jg_error_of($$SELECT jobguard.finish_attempt(999999, '{}')$$, 999999) AS attempt_as_missing;
SELECT public.jg_error_of(format($$SELECT jobguard.finish_attempt(%s, '{}')$$, :shop_job), :shop_job)
	 = public.jg_error_of($$SELECT jobguard.finish_attempt(999999, '{}')$$, 999999) AS job_id_as_attempt_as_missing;
SELECT public.jg_error_of(format($$SELECT jobguard.cancel_job(%s, 'x')$$, :shop_attempt), :shop_attempt)
	 = public.jg_error_of($$SELECT jobguard.cancel_job(999999, 'x')$$, 999999) AS attempt_id_as_job_as_missing;
SELECT count(*) AS invariant_rows FROM jobguard.check_invariants();
RESET ROLE;

-- the shop's job is untouched by all of that
SELECT jobguard.job_state(:shop_job), (SELECT state FROM jobguard.attempts WHERE id = :shop_attempt);

-- in its own scope, the wrong kind of id says which kind it is
SET ROLE regress_jg_shop;
SELECT public.jg_error_of(format($$SELECT jobguard.finish_attempt(%s, '{}')$$, :shop_job), :shop_job) AS job_id_as_attempt;
SELECT public.jg_error_of(format($$SELECT jobguard.cancel_job(%s, 'x')$$, :shop_attempt), :shop_attempt) AS attempt_id_as_job;
RESET ROLE;

-- a member of the shop's client role acts in the shop's scope
SET ROLE regress_jg_shop_worker;
SELECT jobguard.caller_scope();
SELECT jobguard.finish_attempt(:shop_attempt, '{"charge": "ch_1"}');
SELECT state, params, result FROM jobguard.job(:shop_job);
RESET ROLE;

-- a member of two applications' client roles must choose one (22023)
SET ROLE regress_jg_both;
SELECT public.jg_error_of('SELECT jobguard.caller_scope()') AS caller_scope;
SELECT public.jg_error_of($$SELECT jobguard.submit('bob', 'k', 'charge', '{}', 'stripe')$$) AS submit;
-- ... to read too: neither scope's jobs, by id or in the views
SELECT public.jg_error_of(format('SELECT jobguard.job_state(%s)', :shop_job)) AS job_state;
SELECT public.jg_error_of(format('SELECT * FROM jobguard.job(%s)', :blog_job)) AS job;
SELECT public.jg_error_of('SELECT count(*) FROM jobguard.job_overview') AS job_overview;
SET ROLE regress_jg_blog;
SELECT jobguard.caller_scope();
RESET ROLE;

-- readers: the auditor reads the shop only, without payloads
SET ROLE regress_jg_auditor;
SELECT job_id, scope, state, params, result FROM jobguard.job_overview ORDER BY job_id;
SELECT state, params, result FROM jobguard.job(:shop_job);
SELECT attempt_no, state, error, lost_result FROM jobguard.attempts_of(:shop_job);
SELECT public.jg_error_of(format('SELECT jobguard.job_state(%s)', :blog_job), :blog_job) AS blog_job;
SELECT public.jg_error_of($$SELECT jobguard.submit('bob', 'k', 'charge', '{}', 'stripe')$$) AS submit;
RESET ROLE;
-- support reads every scope, payloads included
SET ROLE regress_jg_support;
SELECT job_id, scope, params FROM jobguard.job_overview ORDER BY job_id;
RESET ROLE;

-- operators act on and read every scope; their own jobs go to "default"
SET ROLE regress_jg_ops;
SELECT job_id, scope FROM jobguard.job_overview ORDER BY job_id;
SELECT jobguard.cancel_job(:blog_job, 'spam');
SELECT job_id AS ops_job FROM jobguard.submit('alice', 'order-1', 'charge', '{}', 'stripe') \gset
SELECT scope FROM jobguard.job(:ops_job);
RESET ROLE;
SELECT scope, jobguard.job_state(id) FROM jobguard.jobs ORDER BY id;

-- a role with no grant at all (1.0's way of granting EXECUTE by hand) acts
-- in the scope default
CREATE ROLE regress_jg_plain;
GRANT USAGE ON SCHEMA jobguard TO regress_jg_plain;
GRANT EXECUTE ON FUNCTION jobguard.job_state(bigint), jobguard.scope_visible(text),
	jobguard.payloads_visible(text) TO regress_jg_plain;
SET ROLE regress_jg_plain;
SELECT jobguard.job_state(:ops_job);
SELECT public.jg_error_of(format('SELECT jobguard.job_state(%s)', :shop_job), :shop_job) AS shop_job;
RESET ROLE;

-- grant_* check their arguments
SELECT public.jg_error_of($$SELECT jobguard.grant_client('regress_jg_plain', '')$$) AS empty_scope;
SELECT public.jg_error_of($$SELECT jobguard.grant_client('regress_jg_plain', repeat('s', 64))$$) AS long_scope;
SELECT public.jg_error_of($$SELECT jobguard.grant_reader('regress_jg_plain', NULL, NULL)$$) AS null_payloads;
SELECT public.jg_error_of($$SELECT jobguard.grant_operator(NULL)$$) AS null_role;
SELECT public.jg_error_of($$SELECT jobguard.grant_operator('regress_jg_no_such_role')$$) AS no_role;
-- and a client cannot grant itself more
SET ROLE regress_jg_shop;
SELECT public.jg_error_of($$SELECT jobguard.grant_operator('regress_jg_shop')$$) AS self_grant;
RESET ROLE;

-- a grant takes effect at once in this backend, and revoke takes it back
SELECT jobguard.grant_client('regress_jg_plain', 'shop');
SET ROLE regress_jg_plain;
SELECT jobguard.caller_scope();
RESET ROLE;
SELECT jobguard.revoke_client('regress_jg_plain');
SELECT count(*) AS plain_grants FROM jobguard.grants WHERE role::text = 'regress_jg_plain';

SELECT count(*) AS violations FROM jobguard.check_invariants();

-- clean up the roles (they are cluster-wide)
SELECT jobguard.revoke_client(r::regrole)
  FROM unnest(ARRAY['regress_jg_shop', 'regress_jg_blog', 'regress_jg_auditor',
					'regress_jg_support', 'regress_jg_ops']) r;
DROP ROLE regress_jg_shop_worker, regress_jg_both, regress_jg_shop, regress_jg_blog,
	regress_jg_auditor, regress_jg_support, regress_jg_ops, regress_jg_plain;
DROP FUNCTION public.jg_error_of(text, bigint);
