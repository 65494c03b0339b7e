-- scripts/fuzz/setup.sql: the fuzz database's fixture (run by scripts/run-fuzz
-- as a superuser in a fresh database, with psql variables client, other and
-- reader naming the three login roles it made).  Jobs and attempts in every
-- state, in two client scopes and the default one; contracts,
-- certifications, key and provider policies; a big table for parallel
-- plans; and, for the client, a schema of its own where the hostile calls
-- plant operators.
\set ON_ERROR_STOP 1
CREATE EXTENSION jobguard;
CREATE EXTENSION amcheck;

SELECT jobguard.grant_client(:'client', 'fuzz-a');
SELECT jobguard.grant_client(:'other', 'fuzz-b');
SELECT jobguard.grant_reader(:'reader', 'fuzz-a', true);

-- the configuration: a contract, a retry policy, a certified fallback, a
-- key policy, providers with limits and a deduplication window
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}',
                                 retry_backoff => '1 second', retry_backoff_max => '1 minute');
SELECT jobguard.define_operation('refund', '{"type": "object"}');
SELECT jobguard.certify_provider('charge', 'backup', '{"suite": "fuzz"}');
SELECT jobguard.set_key_policy('refund', retention => '30 days', identity => '{amount}', after_failure => 'new_job');
SELECT jobguard.set_provider_policy('stripe', dedupes_for => '1 day');
SELECT jobguard.set_provider_policy('slow', max_in_flight => 1000, max_per_second => 1000);

-- fixture(prefix): jobs in every state in the caller's scope
CREATE FUNCTION pg_temp.fixture(prefix text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	j bigint;
	a bigint;
	b bigint;
	i integer;
BEGIN
	FOR i IN 1..40 LOOP
		-- pending
		PERFORM jobguard.submit('owner-' || i % 7, prefix || 'pending-' || i, 'charge', jsonb_build_object('amount', i), 'stripe');
		-- scheduled later, with priorities
		PERFORM jobguard.submit('owner-' || i % 7, prefix || 'later-' || i, 'refund', jsonb_build_object('amount', i), 'slow',
		                        run_at => now() + interval '1 hour', priority => i - 20);
		-- running
		SELECT job_id INTO j FROM jobguard.submit('owner-' || i % 7, prefix || 'running-' || i, 'charge', '{}', 'stripe');
		PERFORM jobguard.begin_attempt(j, timeout => '1 day');
		-- started past its deadline (unknown without being written down)
		SELECT job_id INTO j FROM jobguard.submit('owner-' || i % 7, prefix || 'late-' || i, 'charge', '{}', 'stripe');
		PERFORM jobguard.begin_attempt(j, timeout => '1 millisecond');
		-- unknown, written down
		SELECT job_id INTO j FROM jobguard.submit('owner-' || i % 7, prefix || 'unknown-' || i, 'charge', '{}', 'stripe');
		PERFORM jobguard.mark_unknown(jobguard.begin_attempt(j, timeout => '1 hour'));
		-- succeeded
		SELECT job_id INTO j FROM jobguard.submit('owner-' || i % 7, prefix || 'won-' || i, 'charge', '{}', 'stripe');
		PERFORM jobguard.finish_attempt(jobguard.begin_attempt(j), jsonb_build_object('id', 'ch_' || i));
		-- rejected by the contract, then failed for good
		SELECT job_id INTO j FROM jobguard.submit('owner-' || i % 7, prefix || 'failed-' || i, 'charge', '{}', 'stripe', max_attempts => 2);
		PERFORM jobguard.finish_attempt(jobguard.begin_attempt(j), '{"no_id": true}');
		PERFORM jobguard.fail_attempt(jobguard.begin_attempt(j), 'HTTP 402', retry_in => '1 second');
		-- cancelled attempt, a second one wins, the first reports late: lost
		SELECT job_id INTO j FROM jobguard.submit('owner-' || i % 7, prefix || 'lost-' || i, 'charge', '{}', 'stripe');
		a := jobguard.begin_attempt(j, attempt_key => prefix || 'w1-' || i);
		PERFORM jobguard.cancel_attempt(a, 'stalled');
		b := jobguard.begin_attempt(j, 'backup');
		PERFORM jobguard.finish_attempt(b, jsonb_build_object('id', 'ch_b' || i));
		PERFORM jobguard.finish_attempt(a, jsonb_build_object('id', 'ch_a' || i));
		-- cancelled job with an open attempt
		SELECT job_id INTO j FROM jobguard.submit('owner-' || i % 7, prefix || 'cancelled-' || i, 'refund', '{"amount": 1}', 'slow');
		PERFORM jobguard.begin_attempt(j);
		PERFORM jobguard.cancel_job(j, 'user asked');
		-- a cancelled attempt and nothing after it
		SELECT job_id INTO j FROM jobguard.submit('owner-' || i % 7, prefix || 'paused-' || i, 'charge', '{}', 'stripe');
		PERFORM jobguard.cancel_attempt(jobguard.begin_attempt(j), 'operator');
	END LOOP;
END
$$;

SELECT pg_temp.fixture('s-');
SET ROLE :client;
SELECT pg_temp.fixture('a-');
RESET ROLE;
SET ROLE :other;
SELECT pg_temp.fixture('b-');
RESET ROLE;

-- a table big enough for parallel plans (the hostile calls' parallel
-- context sets the parallel costs to 0 around it)
CREATE TABLE fuzz_big AS SELECT g AS id, md5(g::text) AS pad FROM generate_series(1, 200000) g;
ANALYZE fuzz_big;
GRANT SELECT ON fuzz_big TO PUBLIC;

-- the client's own schema, where the hostile calls plant operators
GRANT CREATE ON DATABASE :"DBNAME" TO :client;
SET ROLE :client;
CREATE SCHEMA fuzz_planted;
RESET ROLE;
ANALYZE;

-- planted operators: for every type jobguard compares, each comparison
-- operator in the client's schema, which raises a WARNING (a notice the
-- hostile calls catch, even in a transaction rolled back) and tries to
-- give the client CREATEROLE (which the roles snapshot catches) whenever it
-- runs as anyone but the client.  The hostile calls put this schema before
-- pg_catalog in search_path.
SET ROLE :client;
DO $plant$
DECLARE
	t text;
	o record;
	fn text;
BEGIN
	FOREACH t IN ARRAY ARRAY['text', 'bigint', 'integer', 'smallint', 'timestamptz', 'interval', 'jsonb',
	                         'numeric', 'boolean', 'name', 'oid', '"char"', 'text[]', 'bigint[]',
	                         'double precision', 'regrole', 'regclass'] LOOP
		FOR o IN SELECT * FROM (VALUES ('=', 'eq'), ('<>', 'ne'), ('<', 'lt'), ('<=', 'le'), ('>', 'gt'), ('>=', 'ge')) v(op, nm) LOOP
			fn := format('fuzz_planted.%I', 'planted_' || o.nm || '_' || regexp_replace(t, '[^a-z]', '_', 'g'));
			EXECUTE format($f$
				CREATE FUNCTION %1$s(a %2$s, b %2$s) RETURNS boolean LANGUAGE plpgsql
				SET search_path = pg_catalog AS $body$
				BEGIN
					IF current_user OPERATOR(pg_catalog.<>) %3$L THEN
						RAISE WARNING 'jobguard-fuzz: planted operator %4$s (%2$s) ran as %%', current_user;
						BEGIN
							EXECUTE 'ALTER ROLE ' || quote_ident(%3$L) || ' CREATEROLE';
						EXCEPTION WHEN OTHERS THEN NULL;
						END;
					END IF;
					RETURN a OPERATOR(pg_catalog.%4$s) b;
				END $body$$f$, fn, t, current_user, o.op);
			EXECUTE format('CREATE OPERATOR fuzz_planted.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %s)', o.op, t, t, fn);
		END LOOP;
	END LOOP;
END
$plant$;
GRANT USAGE ON SCHEMA fuzz_planted TO PUBLIC;
RESET ROLE;
