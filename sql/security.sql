-- Security: nothing is PUBLIC, the functions are the only door to the
-- tables, the grant functions give exactly what a role needs, and no
-- search_path a caller sets can redirect anything jobguard does.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
CREATE FUNCTION public.jg_sqlstate_of(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
GRANT EXECUTE ON FUNCTION public.jg_sqlstate_of(text) TO PUBLIC;

CREATE ROLE regress_jg_nobody;
CREATE ROLE regress_jg_app;
CREATE ROLE regress_jg_reader;
CREATE ROLE regress_jg_evil;

-- nothing of jobguard is granted to PUBLIC but require_administrator(),
-- the administrators' rule, which reads and writes nothing
SELECT c.relname, c.relacl IS NULL OR NOT EXISTS (
		SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee = 0) AS closed_to_public
  FROM pg_class c WHERE c.relnamespace = 'jobguard'::regnamespace ORDER BY 1;
SELECT p.oid::regprocedure AS executable_by_public
  FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
 WHERE p.pronamespace = 'jobguard'::regnamespace AND a.grantee = 0;

-- a role without grants can do nothing
SET ROLE regress_jg_nobody;
SELECT public.jg_sqlstate_of($$SELECT jobguard.submit('o', 'k', 'op', '{}', 'p')$$);
SELECT public.jg_sqlstate_of($$SELECT * FROM jobguard.job_overview$$);
SELECT public.jg_sqlstate_of($$SELECT * FROM jobguard.jobs$$);
RESET ROLE;
-- app and evil are clients of one scope, as every client was in 1.0: evil
-- acts on the jobs app submits.  The reader reads every scope, payloads too.
SELECT jobguard.grant_client('regress_jg_app', 'shop');
SELECT jobguard.grant_reader('regress_jg_reader', payloads => true);
SELECT jobguard.grant_client('regress_jg_evil', 'shop');
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"]}');
SELECT jobguard.certify_provider('charge', 'adyen');

-- with grant_client, an application role can call every function...
SET ROLE regress_jg_app;
SELECT job_id, created FROM jobguard.submit('alice', 'k1', 'charge', '{"amount": 1}', 'stripe');
SELECT job_id, created FROM jobguard.submit('alice', 'k1', 'charge', '{"amount": 1}', 'stripe');
SELECT jobguard.begin_attempt(1, timeout => '1 minute') AS a1 \gset
SELECT jobguard.mark_unknown(:a1);
SELECT jobguard.cancel_attempt(:a1, 'fail over');
SELECT jobguard.begin_attempt(1, 'adyen') AS a2 \gset
SELECT jobguard.finish_attempt(:a2, '{"wrong": true}');
SELECT jobguard.begin_attempt(1, 'adyen') AS a3 \gset
SELECT jobguard.fail_attempt(:a3, 'declined');
SELECT jobguard.begin_attempt(1) AS a4 \gset
SELECT jobguard.finish_attempt(:a4, '{"id": "ch_1"}');
SELECT jobguard.finish_attempt(:a1, '{"id": "ch_late"}');
SELECT job_id AS k2_job FROM jobguard.submit('alice', 'k2', 'charge', '{}', 'stripe') \gset
SELECT jobguard.cancel_job(:k2_job, 'changed my mind');
SELECT jobguard.job_state(1), (jobguard.job(1)).state;
SELECT attempt_no, state FROM jobguard.attempts_of(1);
SELECT job_id, state FROM jobguard.job_overview ORDER BY job_id;
SELECT count(*) FROM jobguard.attempt_overview;
SELECT jobguard.check_result('charge', '{}');
SELECT count(*) AS violations FROM jobguard.check_invariants();
-- ... but cannot touch the tables directly, so it cannot bypass the gate
-- or the compare-and-swap
SELECT public.jg_sqlstate_of($$SELECT * FROM jobguard.jobs$$);
SELECT public.jg_sqlstate_of($$INSERT INTO jobguard.jobs (owner_id, idempotency_key, operation, params, provider) VALUES ('a', 'b', 'c', '{}', 'd')$$);
SELECT public.jg_sqlstate_of($$UPDATE jobguard.jobs SET result = '{"id": "forged"}' WHERE id = 1$$);
SELECT public.jg_sqlstate_of($$DELETE FROM jobguard.attempts$$);
SELECT public.jg_sqlstate_of($$INSERT INTO jobguard.attempts (job_id, attempt_no, provider, read_version, deadline) VALUES (1, 9, 'p', 1, now() + interval '1 day')$$);
SELECT public.jg_sqlstate_of($$UPDATE jobguard.operations SET output_contract = '{}'$$);
SELECT public.jg_sqlstate_of($$SELECT nextval('jobguard.id_seq')$$);
-- nor define contracts, certify providers or hand out grants
SELECT public.jg_sqlstate_of($$SELECT jobguard.define_operation('charge', '{}')$$);
SELECT public.jg_sqlstate_of($$SELECT jobguard.certify_provider('charge', 'shady')$$);
SELECT public.jg_sqlstate_of($$SELECT jobguard.revoke_provider('charge', 'adyen')$$);
SELECT public.jg_sqlstate_of($$SELECT jobguard.grant_client('regress_jg_nobody')$$);
RESET ROLE;

-- a reader can inspect but not change anything
SET ROLE regress_jg_reader;
SELECT job_id, state, result FROM jobguard.job_overview ORDER BY job_id;
SELECT jobguard.job_state(:k2_job);
SELECT count(*) AS violations FROM jobguard.check_invariants();
SELECT public.jg_sqlstate_of($$SELECT jobguard.submit('o', 'k', 'op', '{}', 'p')$$);
SELECT public.jg_sqlstate_of($$SELECT jobguard.cancel_job(1, 'x')$$);
SELECT public.jg_sqlstate_of($$SELECT * FROM jobguard.attempts$$);
RESET ROLE;
-- a reader granted without payloads (the default) sees the jobs and their
-- states, but not their params, results, errors or lost results
SELECT jobguard.grant_reader('regress_jg_reader');
SET ROLE regress_jg_reader;
SELECT job_id, state, params, result FROM jobguard.job_overview ORDER BY job_id;
SELECT (jobguard.job(1)).params, (jobguard.job(1)).result;
SELECT attempt_no, state, error, lost_result FROM jobguard.attempts_of(1);
RESET ROLE;

-- a role that plants look-alikes in its own schema and puts it first in
-- search_path changes nothing jobguard does
CREATE SCHEMA regress_jg_evil AUTHORIZATION regress_jg_evil;
SET ROLE regress_jg_evil;
CREATE TABLE regress_jg_evil.jobs (LIKE pg_catalog.pg_class);
CREATE TABLE regress_jg_evil.attempts (id bigint);
CREATE TABLE regress_jg_evil.operations (operation text, output_contract jsonb, contract_version bigint);
CREATE FUNCTION regress_jg_evil.now() RETURNS timestamptz
	LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$;
CREATE FUNCTION regress_jg_evil.clock_timestamp() RETURNS timestamptz
	LANGUAGE sql AS $$ SELECT '2000-01-01'::timestamptz $$;
CREATE FUNCTION regress_jg_evil.always(jsonb, jsonb) RETURNS boolean
	LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR regress_jg_evil.= (LEFTARG = jsonb, RIGHTARG = jsonb, FUNCTION = regress_jg_evil.always);
CREATE FUNCTION regress_jg_evil.always(text, text) RETURNS boolean
	LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR regress_jg_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_jg_evil.always);
CREATE FUNCTION regress_jg_evil.always(bigint, bigint) RETURNS boolean
	LANGUAGE sql AS $$ SELECT true $$;
CREATE OPERATOR regress_jg_evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = regress_jg_evil.always);
CREATE FUNCTION regress_jg_evil.plus(bigint, integer) RETURNS bigint
	LANGUAGE sql AS $$ SELECT 1000::bigint $$;
CREATE OPERATOR regress_jg_evil.+ (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = regress_jg_evil.plus);
SET search_path = regress_jg_evil, pg_catalog, jobguard, public;
-- the planted = would make every request equal: JG001 must still come
SELECT public.jg_sqlstate_of($$SELECT jobguard.submit('alice', 'k1', 'charge', '{"amount": 999}', 'stripe')$$);
SELECT job_id, created FROM jobguard.submit('alice', 'k1', 'charge', '{"amount": 1}', 'stripe');
-- the planted now() would put every deadline in the past
SELECT job_id AS eve_job FROM jobguard.submit('eve', 'k1', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:eve_job, timeout => '1 hour') AS eve_attempt \gset
SELECT jobguard.job_state(:eve_job);
SELECT state, deadline > pg_catalog.now() + interval '59 minutes' AS real_deadline
  FROM jobguard.attempts_of(:eve_job);
-- the planted = and + would let a stale attempt win: the compare-and-swap holds
SELECT jobguard.cancel_job(:eve_job, 'cancelled before the result');
SELECT jobguard.finish_attempt(:eve_attempt, '{"id": "sneaky"}');
SELECT state, version, result FROM jobguard.job(:eve_job);
-- the planted tables were never touched
SELECT (SELECT count(*) FROM regress_jg_evil.jobs) AS evil_jobs,
	   (SELECT count(*) FROM regress_jg_evil.attempts) AS evil_attempts,
	   (SELECT count(*) FROM regress_jg_evil.operations) AS evil_operations;
RESET search_path;
RESET ROLE;
SELECT count(*) AS violations FROM jobguard.check_invariants();

-- every operator jobguard's statements compare or compute with, planted
-- for every type they use in a schema the client owns, first on its
-- search_path: each records who ran it unless it is the client itself.
-- Every call then runs as the client asks (fail_attempt's retry_in and the
-- operation's backoff, claim, heartbeat, stats() with a limited provider)
-- and not one planted operator ran as anyone else (the extension owner).
CREATE SCHEMA regress_jg_spy AUTHORIZATION regress_jg_evil;
SELECT jobguard.set_provider_policy('spied', max_in_flight => 100, max_per_second => 50);
SELECT jobguard.define_operation('spied_op', '{}', retry_backoff => '1 second', retry_backoff_max => '1 minute');
SET ROLE regress_jg_evil;
CREATE TABLE regress_jg_spy.ran_as (who name, op text);
GRANT INSERT ON regress_jg_spy.ran_as TO PUBLIC;
DO $do$
DECLARE
	o record;
	n int := 0;
BEGIN
	FOR o IN
		SELECT op, l, r, res FROM
		  unnest(ARRAY['=', '<>', '<', '<=', '>', '>=']) op,
		  unnest(ARRAY['text', 'bigint', 'integer', 'smallint', 'timestamptz', 'interval', 'jsonb',
					   'boolean', 'numeric', 'double precision', 'name', 'oid', 'text[]', 'bigint[]']) l,
		  LATERAL (SELECT l AS r, 'boolean' AS res) x
		UNION ALL
		SELECT * FROM (VALUES ('+', 'timestamptz', 'interval', 'timestamptz'),
							  ('-', 'timestamptz', 'interval', 'timestamptz'),
							  ('-', 'timestamptz', 'timestamptz', 'interval'),
							  ('+', 'bigint', 'bigint', 'bigint'), ('+', 'bigint', 'integer', 'bigint'),
							  ('-', 'bigint', 'bigint', 'bigint'), ('+', 'integer', 'integer', 'integer'),
							  ('-', 'integer', 'integer', 'integer'),
							  ('*', 'interval', 'double precision', 'interval'),
							  ('*', 'double precision', 'double precision', 'double precision'),
							  ('/', 'double precision', 'double precision', 'double precision'),
							  ('+', 'double precision', 'double precision', 'double precision'),
							  ('-', 'double precision', 'double precision', 'double precision'),
							  ('||', 'text', 'text', 'text')) v
	LOOP
		n := n + 1;
		EXECUTE format($f$CREATE FUNCTION regress_jg_spy.spy%s(a %s, b %s) RETURNS %s
			LANGUAGE plpgsql SET search_path = pg_catalog AS $b$
			BEGIN
				IF current_user OPERATOR(pg_catalog.<>) 'regress_jg_evil'::name THEN
					INSERT INTO regress_jg_spy.ran_as VALUES (current_user, %L);
				END IF;
				RETURN a OPERATOR(pg_catalog.%s) b;
			END $b$ $f$, n, o.l, o.r, o.res, o.op || '(' || o.l || ', ' || o.r || ')', o.op);
		EXECUTE format('CREATE OPERATOR regress_jg_spy.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = regress_jg_spy.spy%s)',
					   o.op, o.l, o.r, n);
	END LOOP;
END $do$;
SET search_path = regress_jg_spy, regress_jg_evil, pg_catalog, jobguard, public;
-- the planted operators work, and record nothing for the client itself
SELECT now() = now() AS planted_eq, (SELECT count(*) FROM regress_jg_spy.ran_as) AS recorded;
SELECT job_id AS spy_job FROM jobguard.submit('spy', 'k1', 'spied_op', '{}', 'spied') \gset
SELECT jobguard.begin_attempt(:spy_job, timeout => '1 hour') AS spy_a1 \gset
SELECT jobguard.heartbeat(:spy_a1, '2 hours') > pg_catalog.now() AS extended;
SELECT jobguard.fail_attempt(:spy_a1, 'declined', retry_in => '1 minute');
SELECT jobguard.reschedule(:spy_job, run_at => pg_catalog.now());
SELECT jobguard.begin_attempt(:spy_job) AS spy_a2 \gset
SELECT jobguard.fail_attempt(:spy_a2, 'declined');
SELECT jobguard.reschedule(:spy_job, run_at => pg_catalog.now());
SELECT count(*) AS claimed FROM jobguard.claim('spy-worker', ARRAY['spied_op'], timeout => '1 minute');
SELECT count(*) AS unknown_claimed FROM jobguard.claim_unknown('spy-worker', ARRAY['spied_op']);
SELECT metric, value FROM jobguard.stats() WHERE metric LIKE 'provider.spied.%' ORDER BY metric;
SELECT jobguard.job_state(:spy_job), jobguard.caller_scope();
SELECT count(*) > 0 AS listed FROM jobguard.attempts_of(:spy_job);
RESET search_path;
-- no planted operator ran as anyone but the client
SELECT who, op FROM regress_jg_spy.ran_as ORDER BY 1, 2;
RESET ROLE;
SELECT jobguard.set_provider_policy('spied');
SELECT count(*) AS violations FROM jobguard.check_invariants();

-- a constraint on the tables that calls jobguard again (an owner's CHECK):
-- each call gives back the identity it found, so afterwards the caller is
-- itself again, never the tables' owner
CREATE FUNCTION public.jg_params_ok(p jsonb) RETURNS boolean
LANGUAGE sql AS $$ SELECT jobguard.fast_path_status() IS NOT NULL AND p IS NOT NULL $$;
ALTER TABLE jobguard.jobs ADD CONSTRAINT nested_call CHECK (public.jg_params_ok(params)) NOT VALID;
SET ROLE regress_jg_app;
SELECT created FROM jobguard.submit('nested', 'k1', 'op', '{}', 'p');
SELECT current_user AS after_nested_call;
SELECT public.jg_sqlstate_of($$ALTER TABLE jobguard.jobs DROP CONSTRAINT nested_call$$);
RESET ROLE;
ALTER TABLE jobguard.jobs DROP CONSTRAINT nested_call;
DROP FUNCTION public.jg_params_ok(jsonb);

-- revoke_client takes everything back
SELECT jobguard.revoke_client('regress_jg_app');
SET ROLE regress_jg_app;
SELECT public.jg_sqlstate_of($$SELECT jobguard.submit('o', 'k', 'op', '{}', 'p')$$);
SELECT public.jg_sqlstate_of($$SELECT * FROM jobguard.job_overview$$);
RESET ROLE;
-- the grant functions check their argument
SELECT public.jg_sqlstate_of($$SELECT jobguard.grant_client(NULL)$$);
SELECT public.jg_sqlstate_of($$SELECT jobguard.grant_client('regress_jg_no_such_role')$$);
SELECT public.jg_sqlstate_of($$SELECT jobguard.revoke_client(NULL)$$);

-- one rule for every administrative function, C or PL/pgSQL: EXECUTE
-- granted by hand delegates nothing (42501, nothing written); a member of
-- the tables' owner may call them
CREATE ROLE regress_jg_delegate;
GRANT USAGE ON SCHEMA jobguard TO regress_jg_delegate;
GRANT EXECUTE ON FUNCTION jobguard.define_operation(text, jsonb, interval, interval),
	jobguard.certify_provider(text, text, jsonb), jobguard.revoke_provider(text, text),
	jobguard.purge(interval, integer), jobguard.stats_reset(),
	jobguard.set_key_policy(text, interval, text[], text), jobguard.grant_operator(regrole),
	jobguard.grant_client(regrole, text), jobguard.grant_reader(regrole, text, boolean),
	jobguard.revoke_client(regrole), jobguard.configure_shard(integer, integer)
	TO regress_jg_delegate;
SET ROLE regress_jg_delegate;
-- each says the same: permission denied for the function called
SELECT f AS function, public.jg_sqlstate_of('SELECT jobguard.' || f) AS error
  FROM unnest(ARRAY[$$define_operation('delegated', '{}')$$, $$certify_provider('charge', 'delegated')$$,
					$$revoke_provider('charge', 'adyen')$$, $$purge('1 day')$$, $$stats_reset()$$,
					$$set_key_policy('delegated', '1 day')$$, $$grant_operator('regress_jg_delegate')$$,
					$$grant_client('regress_jg_delegate')$$, $$grant_reader('regress_jg_delegate')$$,
					$$revoke_client('regress_jg_app')$$, $$configure_shard(0, 1)$$]) f;
RESET ROLE;
SELECT count(*) AS delegated_writes FROM jobguard.operations WHERE operation = 'delegated';
SELECT jobguard.revoke_client('regress_jg_delegate');
DROP ROLE regress_jg_delegate;

-- a granted role dropped without revoke_client (DROP OWNED BY, DROP ROLE)
-- leaves its row behind as a bare OID: check_invariants() names it, and a
-- dump leaves it out (t/001), so that no role of another cluster with
-- that OID inherits it
CREATE ROLE regress_jg_gone;
SELECT jobguard.grant_operator('regress_jg_gone');
DROP OWNED BY regress_jg_gone;
DROP ROLE regress_jg_gone;
SELECT invariant, job_id, attempt_id, detail ~ '^the operator grant of role OID \d+, which was dropped$' AS names_it
  FROM jobguard.check_invariants();
SELECT e.extcondition[array_position(e.extconfig, 'jobguard.grants'::regclass)]
  FROM pg_extension e WHERE e.extname = 'jobguard';
DELETE FROM jobguard.grants g WHERE NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = g.role);
SELECT count(*) AS violations FROM jobguard.check_invariants();

-- clean up the roles (they are cluster-wide)
DROP SCHEMA regress_jg_evil CASCADE;
SET client_min_messages = warning;
DROP SCHEMA regress_jg_spy CASCADE;
RESET client_min_messages;
SELECT jobguard.revoke_client(r) FROM unnest(ARRAY['regress_jg_reader', 'regress_jg_evil']::regrole[]) r;
DROP ROLE regress_jg_nobody, regress_jg_app, regress_jg_reader, regress_jg_evil;
DROP FUNCTION public.jg_sqlstate_of(text);
