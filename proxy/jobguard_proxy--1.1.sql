/* jobguard_proxy--1.1.sql: the jobguard API on a proxy database */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION jobguard_proxy CASCADE" to load this file. \quit

/*
 * The proxy holds no jobs.  Every function here has the name and the
 * signature of the jobguard function it stands for; PL/Proxy runs that
 * function on one shard (or on all of them) and returns what it returned.
 *
 * The shards are the PL/Proxy cluster 'jobguard_shards', a foreign server
 * whose options p0 .. p<n-1> are the connection strings of the shards, in
 * shard order: p<k> must be the database where jobguard.configure_shard(k, n)
 * ran.  jobguard.configure_proxy() below writes it.
 *
 * Routing.  PL/Proxy sends a call to partition (hash & (n - 1)), n a power of
 * two:
 *   - submit by jobguard.route_owner(owner_id) = hashtext(owner_id): all jobs
 *     of an owner live on one shard, so the unique (owner_id,
 *     idempotency_key) index of that shard alone decides a double-click;
 *   - every call that names a job or an attempt by jobguard.route_id(id) =
 *     id: on shard k of n every id is k modulo n, so id & (n - 1) is k;
 *   - define_operation, certify_provider, revoke_provider, purge, stats and
 *     check_invariants on every shard.
 * A NULL owner or id routes to shard 0, which refuses it with the usual
 * 22004, so NULLs are never a routing error.
 *
 * Errors.  PL/Proxy re-raises a shard's error with the shard's SQLSTATE
 * (JG001 .. JG009, 22004, 22023, ...); the message is prefixed with the
 * function and the shard's database, DETAIL and HINT with "Remote detail:"
 * and "Remote hint:".  Match on the SQLSTATE, as with a single database.
 *
 * Transactions.  PL/Proxy runs each remote call in autocommit: a call that
 * returns has committed on its shard, whatever the proxy transaction does
 * afterwards.
 */

---------------------------------------------------------------------------
-- Routing and the cluster definition.
---------------------------------------------------------------------------

CREATE FUNCTION jobguard.route_owner(owner_id text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN COALESCE(pg_catalog.hashtext(owner_id), 0);

COMMENT ON FUNCTION jobguard.route_owner(text) IS 'the PL/Proxy hash of an owner: its shard is route_owner(owner_id) & (shard count - 1); NULL goes to shard 0';

CREATE FUNCTION jobguard.route_id(id bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN COALESCE(id, 0);

COMMENT ON FUNCTION jobguard.route_id(bigint) IS 'the PL/Proxy hash of a job or attempt id: the id itself (on shard k of n every id is k modulo n); NULL goes to shard 0';

/*
 * configure_proxy: define (or redefine) the cluster 'jobguard_shards' as
 * the foreign server of that name with one option p<k> per shard, and a
 * user mapping for PUBLIC (PL/Proxy then connects to the shards as the
 * calling user, unless a connection string names another).  The number of
 * shards must be a power of two and must equal the shard_count the shards
 * were configured with.
 */
CREATE FUNCTION jobguard.configure_proxy(VARIADIC shards text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n integer := coalesce(cardinality(shards), 0);
	existing text[];
	opts text[] := '{}';
	k integer;
	key text;
BEGIN
	IF shards IS NULL OR array_position(shards, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'the connection strings of jobguard.configure_proxy() must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF n NOT BETWEEN 1 AND 1024 OR (n & (n - 1)) <> 0 THEN
		RAISE EXCEPTION 'the number of shards must be a power of two from 1 to 1024'
			USING ERRCODE = 'invalid_parameter_value', DETAIL = format('%s connection strings were given.', n);
	END IF;
	IF EXISTS (SELECT 1 FROM unnest(shards) s WHERE btrim(s) = '') THEN
		RAISE EXCEPTION 'the connection strings of jobguard.configure_proxy() must not be empty'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;

	SELECT coalesce(array_agg(split_part(o, '=', 1)), '{}') INTO existing
	  FROM pg_foreign_server s, unnest(s.srvoptions) o
	 WHERE s.srvname = 'jobguard_shards';

	IF NOT EXISTS (SELECT 1 FROM pg_foreign_server WHERE srvname = 'jobguard_shards') THEN
		FOR k IN 0 .. n - 1 LOOP
			opts := opts || format('p%s %L', k, shards[k + 1]);
		END LOOP;
		EXECUTE format('CREATE SERVER jobguard_shards FOREIGN DATA WRAPPER plproxy OPTIONS (%s)',
					   array_to_string(opts, ', '));
	ELSE
		FOR k IN 0 .. n - 1 LOOP
			opts := opts || format('%s p%s %L',
								   CASE WHEN format('p%s', k) = ANY (existing) THEN 'SET' ELSE 'ADD' END,
								   k, shards[k + 1]);
		END LOOP;
		FOREACH key IN ARRAY existing LOOP
			IF key ~ '^p[0-9]+$' AND substr(key, 2)::integer >= n THEN
				opts := opts || format('DROP %s', key);
			END IF;
		END LOOP;
		EXECUTE format('ALTER SERVER jobguard_shards OPTIONS (%s)', array_to_string(opts, ', '));
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_user_mappings
				    WHERE srvname = 'jobguard_shards' AND usename = 'public') THEN
		CREATE USER MAPPING FOR PUBLIC SERVER jobguard_shards;
	END IF;
END
$$;

COMMENT ON FUNCTION jobguard.configure_proxy(text[]) IS 'define the shards: one connection string per shard, shard 0 first (a power of two of them)';

-- shard_config: what one partition of the cluster says it is.
CREATE FUNCTION jobguard.shard_config(partition integer, OUT shard_no integer, OUT shard_count integer)
RETURNS record
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON partition;
	SELECT s.shard_no, s.shard_count
	  FROM (SELECT true AS present) p
	  LEFT JOIN jobguard.shard s ON true;
$$;

/*
 * check_shards: one row per partition of the cluster with the shard
 * configuration found there; ok is true when partition k holds shard k of
 * n, n being the number of partitions.  Run it after configure_proxy(): a
 * partition in the wrong place would send id-routed calls to the wrong shard
 * (which then answers JG008 or JG009).
 */
CREATE FUNCTION jobguard.check_shards(OUT partition integer, OUT connstr text,
									  OUT shard_no integer, OUT shard_count integer, OUT ok boolean)
RETURNS SETOF record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n integer;
	k integer;
BEGIN
	SELECT count(*) INTO n
	  FROM pg_foreign_server s, unnest(s.srvoptions) o
	 WHERE s.srvname = 'jobguard_shards' AND o ~ '^p[0-9]+=';
	IF n = 0 THEN
		RAISE EXCEPTION 'the jobguard shards are not configured'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Call jobguard.configure_proxy() with the connection string of every shard.';
	END IF;
	FOR k IN 0 .. n - 1 LOOP
		partition := k;
		SELECT substr(o, length(format('p%s=', partition)) + 1) INTO connstr
		  FROM pg_foreign_server s, unnest(s.srvoptions) o
		 WHERE s.srvname = 'jobguard_shards' AND o LIKE format('p%s=%%', partition);
		SELECT c.shard_no, c.shard_count INTO shard_no, shard_count
		  FROM jobguard.shard_config(partition) c;
		ok := shard_no IS NOT DISTINCT FROM partition AND shard_count IS NOT DISTINCT FROM n;
		RETURN NEXT;
	END LOOP;
END
$$;

COMMENT ON FUNCTION jobguard.check_shards() IS 'the shard configuration of every partition; ok when partition k is shard k of n';

---------------------------------------------------------------------------
-- The row types of job() and attempts_of(), as on the shards.
---------------------------------------------------------------------------

CREATE TYPE jobguard.job_overview AS (
	job_id			bigint,
	owner_id		text,
	idempotency_key text,
	operation		text,
	provider		text,
	params			jsonb,
	max_attempts	integer,
	state			text,
	version			bigint,
	attempts		integer,
	completed_by	bigint,
	result			jsonb,
	created_at		timestamptz,
	completed_at	timestamptz,
	cancelled_at	timestamptz
);

COMMENT ON TYPE jobguard.job_overview IS 'one job with its derived state, as jobguard.job() returns it (on the proxy a row type, not a view)';

CREATE TYPE jobguard.attempt_overview AS (
	attempt_id		bigint,
	job_id			bigint,
	attempt_no		integer,
	provider		text,
	state			text,
	read_version	bigint,
	attempt_key		text,
	started_at		timestamptz,
	deadline		timestamptz,
	finished_at		timestamptz,
	error			text,
	lost_to			bigint,
	lost_result		jsonb,
	cancelled_at	timestamptz,
	cancel_reason	text
);

COMMENT ON TYPE jobguard.attempt_overview IS 'one attempt with its effective state, as jobguard.attempts_of() returns it (on the proxy a row type, not a view)';

---------------------------------------------------------------------------
-- Submitting: routed by owner.
---------------------------------------------------------------------------

CREATE FUNCTION jobguard.submit(owner_id text,
								idempotency_key text,
								operation text,
								params jsonb,
								provider text,
								max_attempts integer DEFAULT NULL,
								OUT job_id bigint,
								OUT created boolean)
RETURNS record
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_owner(owner_id);
$$;

COMMENT ON FUNCTION jobguard.submit(text, text, text, jsonb, text, integer) IS 'jobguard.submit on the shard of owner_id';

---------------------------------------------------------------------------
-- Jobs and attempts: routed by id.
---------------------------------------------------------------------------

CREATE FUNCTION jobguard.begin_attempt(job_id bigint,
									   provider text DEFAULT NULL,
									   timeout interval DEFAULT '30 seconds',
									   attempt_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(job_id);
$$;

CREATE FUNCTION jobguard.finish_attempt(attempt_id bigint, result jsonb)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

CREATE FUNCTION jobguard.fail_attempt(attempt_id bigint, error text)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

CREATE FUNCTION jobguard.mark_unknown(attempt_id bigint)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

CREATE FUNCTION jobguard.cancel_attempt(attempt_id bigint, reason text)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

CREATE FUNCTION jobguard.cancel_job(job_id bigint, reason text)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(job_id);
$$;

CREATE FUNCTION jobguard.job_state(job_id bigint)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(job_id);
$$;

CREATE FUNCTION jobguard.job(job_id bigint)
RETURNS jobguard.job_overview
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(job_id);
$$;

CREATE FUNCTION jobguard.attempts_of(job_id bigint)
RETURNS SETOF jobguard.attempt_overview
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(job_id);
$$;

CREATE FUNCTION jobguard.await(job_id bigint, timeout interval)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(job_id);
$$;

COMMENT ON FUNCTION jobguard.begin_attempt(bigint, text, interval, text) IS 'jobguard.begin_attempt on the shard of job_id';
COMMENT ON FUNCTION jobguard.finish_attempt(bigint, jsonb) IS 'jobguard.finish_attempt on the shard of attempt_id';
COMMENT ON FUNCTION jobguard.fail_attempt(bigint, text) IS 'jobguard.fail_attempt on the shard of attempt_id';
COMMENT ON FUNCTION jobguard.mark_unknown(bigint) IS 'jobguard.mark_unknown on the shard of attempt_id';
COMMENT ON FUNCTION jobguard.cancel_attempt(bigint, text) IS 'jobguard.cancel_attempt on the shard of attempt_id';
COMMENT ON FUNCTION jobguard.cancel_job(bigint, text) IS 'jobguard.cancel_job on the shard of job_id';
COMMENT ON FUNCTION jobguard.job_state(bigint) IS 'jobguard.job_state on the shard of job_id';
COMMENT ON FUNCTION jobguard.job(bigint) IS 'jobguard.job on the shard of job_id';
COMMENT ON FUNCTION jobguard.attempts_of(bigint) IS 'jobguard.attempts_of on the shard of job_id';
COMMENT ON FUNCTION jobguard.await(bigint, interval) IS 'jobguard.await on the shard of job_id';

---------------------------------------------------------------------------
-- Contracts and certifications: on every shard.
--
-- PL/Proxy runs a RUN ON ALL call on the shards in parallel, each in its
-- own autocommit transaction; a non-SETOF function may return only one
-- row, so each call is a SETOF function returning one row per shard,
-- wrapped in a function with the jobguard signature.  The calls are
-- idempotent (define replaces, certify renews) except revoke, which raises
-- JG004 on a shard where the provider is not certified.
---------------------------------------------------------------------------

CREATE FUNCTION jobguard.define_operation_on_shards(operation text, output_contract jsonb)
RETURNS SETOF integer
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT 1 FROM jobguard.define_operation(operation, output_contract);
$$;

CREATE FUNCTION jobguard.define_operation(operation text, output_contract jsonb)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT count(*) FROM jobguard.define_operation_on_shards(operation, output_contract);
END;

CREATE FUNCTION jobguard.certify_provider_on_shards(operation text, provider text, evidence jsonb)
RETURNS SETOF integer
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT 1 FROM jobguard.certify_provider(operation, provider, evidence);
$$;

CREATE FUNCTION jobguard.certify_provider(operation text, provider text, evidence jsonb DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT count(*) FROM jobguard.certify_provider_on_shards(operation, provider, evidence);
END;

CREATE FUNCTION jobguard.revoke_provider_on_shards(operation text, provider text)
RETURNS SETOF integer
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT 1 FROM jobguard.revoke_provider(operation, provider);
$$;

CREATE FUNCTION jobguard.revoke_provider(operation text, provider text)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT count(*) FROM jobguard.revoke_provider_on_shards(operation, provider);
END;

-- check_result reads only the contract, which every shard holds: any shard.
CREATE FUNCTION jobguard.check_result(operation text, result jsonb)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ANY;
$$;

COMMENT ON FUNCTION jobguard.define_operation(text, jsonb) IS 'jobguard.define_operation on every shard';
COMMENT ON FUNCTION jobguard.certify_provider(text, text, jsonb) IS 'jobguard.certify_provider on every shard';
COMMENT ON FUNCTION jobguard.revoke_provider(text, text) IS 'jobguard.revoke_provider on every shard';
COMMENT ON FUNCTION jobguard.check_result(text, jsonb) IS 'jobguard.check_result on any one shard';

---------------------------------------------------------------------------
-- Operating the shards from the proxy: on every shard, results combined.
---------------------------------------------------------------------------

CREATE FUNCTION jobguard.check_invariants()
RETURNS TABLE (invariant text, job_id bigint, attempt_id bigint, detail text)
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
$$;

COMMENT ON FUNCTION jobguard.check_invariants() IS 'jobguard.check_invariants on every shard (job and attempt ids name their shard)';

CREATE FUNCTION jobguard.purge_on_shards(older_than interval, batch_size integer)
RETURNS SETOF bigint
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT jobguard.purge(older_than, batch_size);
$$;

CREATE FUNCTION jobguard.purge(older_than interval, batch_size integer DEFAULT 1000)
RETURNS bigint
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT coalesce(sum(n), 0)::bigint FROM jobguard.purge_on_shards(older_than, batch_size) n;
END;

COMMENT ON FUNCTION jobguard.purge(interval, integer) IS 'jobguard.purge on every shard (batch_size per shard); the jobs deleted in all';

CREATE FUNCTION jobguard.stats_on_shards(OUT metric text, OUT value bigint)
RETURNS SETOF record
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT s.metric, s.value FROM jobguard.stats() s;
$$;

CREATE FUNCTION jobguard.stats(OUT metric text, OUT value bigint)
RETURNS SETOF record
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT s.metric, sum(s.value)::bigint
	  FROM jobguard.stats_on_shards() WITH ORDINALITY s (metric, value, n)
	 GROUP BY s.metric
	 ORDER BY min(s.n), s.metric;
END;

COMMENT ON FUNCTION jobguard.stats() IS 'jobguard.stats summed over every shard';

---------------------------------------------------------------------------
-- Privileges, as on the shards: nothing for PUBLIC.
---------------------------------------------------------------------------

REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA jobguard FROM PUBLIC;

/*
 * grant_client: what an application role needs on the proxy: the API, and
 * USAGE on the cluster.  PL/Proxy connects to the shards as that role, so
 * it must exist there too, with jobguard.grant_client() run on every shard.
 */
CREATE FUNCTION jobguard.grant_client(role name)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF role IS NULL THEN
		RAISE EXCEPTION 'argument "role" of jobguard.grant_client() must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF to_regrole(quote_ident(role)) IS NULL THEN
		RAISE EXCEPTION 'role "%" does not exist', role USING ERRCODE = 'undefined_object';
	END IF;
	EXECUTE format('GRANT USAGE ON SCHEMA jobguard TO %I', role);
	EXECUTE format('GRANT USAGE ON FOREIGN SERVER jobguard_shards TO %I', role);
	EXECUTE format('GRANT EXECUTE ON FUNCTION'
				   ' jobguard.route_owner(text), jobguard.route_id(bigint),'
				   ' jobguard.submit(text, text, text, jsonb, text, integer),'
				   ' jobguard.begin_attempt(bigint, text, interval, text),'
				   ' jobguard.finish_attempt(bigint, jsonb),'
				   ' jobguard.fail_attempt(bigint, text),'
				   ' jobguard.mark_unknown(bigint),'
				   ' jobguard.cancel_attempt(bigint, text),'
				   ' jobguard.cancel_job(bigint, text),'
				   ' jobguard.job_state(bigint), jobguard.job(bigint), jobguard.attempts_of(bigint),'
				   ' jobguard.await(bigint, interval), jobguard.check_result(text, jsonb) TO %I', role);
END
$$;

COMMENT ON FUNCTION jobguard.grant_client(name) IS 'let a role call the jobguard API through the proxy (it needs jobguard.grant_client on every shard too)';

REVOKE EXECUTE ON FUNCTION jobguard.grant_client(name) FROM PUBLIC;

---------------------------------------------------------------------------
-- The worker side (jobguard 1.1): claim, heartbeat, retry backoff, batch
-- submit.
---------------------------------------------------------------------------

-- fail_attempt gains retry_in: on the shard of the attempt
DROP FUNCTION jobguard.fail_attempt(bigint, text);

CREATE FUNCTION jobguard.fail_attempt(attempt_id bigint, error text, retry_in interval DEFAULT NULL)
RETURNS text
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

COMMENT ON FUNCTION jobguard.fail_attempt(bigint, text, interval) IS 'jobguard.fail_attempt on the shard of attempt_id';

CREATE FUNCTION jobguard.heartbeat(attempt_id bigint, extend_by interval DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON jobguard.route_id(attempt_id);
$$;

COMMENT ON FUNCTION jobguard.heartbeat(bigint, interval) IS 'jobguard.heartbeat on the shard of attempt_id';

-- define_operation gains the retry policy: on every shard
DROP FUNCTION jobguard.define_operation(text, jsonb);
DROP FUNCTION jobguard.define_operation_on_shards(text, jsonb);

CREATE FUNCTION jobguard.define_operation_on_shards(operation text, output_contract jsonb,
													retry_backoff interval, retry_backoff_max interval)
RETURNS SETOF integer
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON ALL;
	SELECT 1 FROM jobguard.define_operation(operation, output_contract, retry_backoff, retry_backoff_max);
$$;

CREATE FUNCTION jobguard.define_operation(operation text, output_contract jsonb,
										  retry_backoff interval DEFAULT NULL,
										  retry_backoff_max interval DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT count(*) FROM jobguard.define_operation_on_shards(operation, output_contract,
															 retry_backoff, retry_backoff_max);
END;

COMMENT ON FUNCTION jobguard.define_operation(text, jsonb, interval, interval) IS 'jobguard.define_operation on every shard';

/*
 * claim.  Jobs live on the shards, so a claim runs on one shard: the one a
 * worker names (shard => k: a worker per shard, or a worker pinned to a
 * shard), or — shard NULL — the shards in turn, round robin: each call
 * starts at the next shard (a sequence of the proxy), takes what that shard
 * has, and goes on to the next while it has fewer than max_jobs; with wait
 * > 0 and nothing anywhere, it looks again every 50 ms until wait is over.
 * Each shard's claim commits there at once (PL/Proxy's autocommit), so a
 * claim through the proxy is never rolled back with the proxy's
 * transaction: a worker finds such attempts again by its name
 * (attempt_overview.worker on the shard).
 */
CREATE FUNCTION jobguard.claim_on_shard(shard integer, worker text, operations text[],
										timeout interval, max_jobs integer, provider text,
										wait interval)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz)
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	RUN ON shard;
	SELECT * FROM jobguard.claim(worker, operations, timeout, max_jobs, provider, wait);
$$;

COMMENT ON FUNCTION jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval) IS 'jobguard.claim on shard number shard';

-- where the next round-robin claim of this proxy starts
CREATE SEQUENCE jobguard.claim_turn;

CREATE FUNCTION jobguard.claim_in_turn(worker_name text, wanted_operations text[],
									   attempt_timeout interval, jobs_wanted integer,
									   via_provider text, wait_for interval, on_shard integer)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	shards integer;
	start_at integer;
	got integer := 0;
	n integer;
	until timestamptz;
BEGIN
	IF $6 IS NULL THEN
		RAISE EXCEPTION 'argument "wait" of jobguard.claim() must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF $6 < interval '0' THEN
		RAISE EXCEPTION 'argument "wait" must not be negative'
			USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %s.', $6);
	END IF;
	IF $7 IS NOT NULL THEN
		RETURN QUERY SELECT * FROM jobguard.claim_on_shard($7, $1, $2, $3, $4, $5, $6);
		RETURN;
	END IF;
	SELECT count(*) INTO shards
	  FROM pg_foreign_server s, unnest(s.srvoptions) o
	 WHERE s.srvname = 'jobguard_shards' AND o ~ '^p[0-9]+=';
	until := clock_timestamp() + $6;
	LOOP
		start_at := nextval('jobguard.claim_turn') % shards;
		FOR k IN 0 .. shards - 1 LOOP
			RETURN QUERY SELECT * FROM jobguard.claim_on_shard((start_at + k) % shards, $1, $2, $3,
															   $4 - got, $5, '0');
			GET DIAGNOSTICS n = ROW_COUNT;
			got := got + n;
			EXIT WHEN got >= $4;
		END LOOP;
		EXIT WHEN got > 0 OR clock_timestamp() >= until;
		PERFORM pg_sleep(least(0.05, extract(epoch FROM until - clock_timestamp())));
	END LOOP;
END
$$;

COMMENT ON FUNCTION jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer) IS 'what jobguard.claim does on the proxy (its arguments named apart from its result columns, as PL/pgSQL needs)';

CREATE FUNCTION jobguard.claim(worker text,
							   operations text[] DEFAULT NULL,
							   timeout interval DEFAULT '30 seconds',
							   max_jobs integer DEFAULT 1,
							   provider text DEFAULT NULL,
							   wait interval DEFAULT '0',
							   shard integer DEFAULT NULL)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz)
LANGUAGE sql VOLATILE
BEGIN ATOMIC
	SELECT * FROM jobguard.claim_in_turn(worker, operations, timeout, max_jobs, provider, wait, shard);
END;

COMMENT ON FUNCTION jobguard.claim(text, text[], interval, integer, text, interval, integer) IS 'jobguard.claim on shard number shard, or (NULL) on the shards in turn until max_jobs are claimed';

/*
 * submit_many, split by owner: each shard gets the requests of its owners
 * (PL/Proxy's SPLIT, routed by route_owner as submit is) in one call, and
 * the rows come back in input order, numbered as in the input.  Arrays of
 * unequal length are refused here, before anything is sent.  Each shard's
 * part commits there on its own.
 */
CREATE FUNCTION jobguard.submit_many_on_shards(ords integer[], owner_ids text[],
											   idempotency_keys text[], operations text[],
											   params jsonb[], providers text[],
											   max_attempts integer[])
RETURNS TABLE (ord integer, job_id bigint, created boolean, sqlstate text, message text)
LANGUAGE plproxy
AS $$
	CLUSTER 'jobguard_shards';
	SPLIT ALL;
	RUN ON jobguard.route_owner(owner_ids);
	SELECT (ords)[s.ord] AS ord,
		   s.job_id AS job_id, s.created AS created, s.sqlstate AS sqlstate,
		   replace(s.message, format('of request %s ', s.ord),
				   format('of request %s ', (ords)[s.ord])) AS message
	  FROM jobguard.submit_many(owner_ids, idempotency_keys, operations, params, providers,
								max_attempts) s;
$$;

CREATE FUNCTION jobguard.submit_many(owner_ids text[],
									 idempotency_keys text[],
									 operations text[],
									 params jsonb[],
									 providers text[],
									 max_attempts integer[] DEFAULT NULL)
RETURNS TABLE (ord integer, job_id bigint, created boolean, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n integer := cardinality(owner_ids);
	arg record;
BEGIN
	FOR arg IN SELECT * FROM (VALUES ('owner_ids', array_ndims(owner_ids), cardinality(owner_ids)),
									 ('idempotency_keys', array_ndims(idempotency_keys), cardinality(idempotency_keys)),
									 ('operations', array_ndims(operations), cardinality(operations)),
									 ('params', array_ndims(params), cardinality(params)),
									 ('providers', array_ndims(providers), cardinality(providers)),
									 ('max_attempts', array_ndims(max_attempts), cardinality(max_attempts)))
							   AS a(name, dims, len)
	LOOP
		IF arg.len IS NULL AND arg.name <> 'max_attempts' THEN
			RAISE EXCEPTION 'argument "%" of jobguard.submit_many() must not be null', arg.name
				USING ERRCODE = 'null_value_not_allowed';
		END IF;
		IF arg.dims > 1 THEN
			RAISE EXCEPTION 'argument "%" must be a one-dimensional array', arg.name
				USING ERRCODE = 'invalid_parameter_value';
		END IF;
		IF arg.len <> n THEN
			RAISE EXCEPTION 'the arrays of jobguard.submit_many() must all have the same length'
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = format('owner_ids has %s elements, %s %s.', n, arg.name, arg.len);
		END IF;
	END LOOP;
	IF n = 0 THEN
		RETURN;
	END IF;
	RETURN QUERY
		SELECT s.ord, s.job_id, s.created, s.sqlstate, s.message
		  FROM jobguard.submit_many_on_shards(ARRAY(SELECT generate_series(1, n)), owner_ids,
											  idempotency_keys, operations, params, providers,
											  coalesce(max_attempts, array_fill(NULL::integer, ARRAY[n]))) s
		 ORDER BY 1;
END
$$;

COMMENT ON FUNCTION jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]) IS 'jobguard.submit_many, each request on the shard of its owner, rows back in input order';

-- nothing for PUBLIC; grant_client gives the worker side too
REVOKE EXECUTE ON FUNCTION jobguard.fail_attempt(bigint, text, interval),
	jobguard.heartbeat(bigint, interval),
	jobguard.define_operation(text, jsonb, interval, interval),
	jobguard.define_operation_on_shards(text, jsonb, interval, interval),
	jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval),
	jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer),
	jobguard.claim(text, text[], interval, integer, text, interval, integer),
	jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[]),
	jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]) FROM PUBLIC;

/*
 * grant_client: let a role call the jobguard API through the proxy,
 * the worker side included (it needs jobguard.grant_client on every shard
 * too).
 */
CREATE OR REPLACE FUNCTION jobguard.grant_client(role name)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF role IS NULL THEN
		RAISE EXCEPTION 'argument "role" of jobguard.grant_client() must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF to_regrole(quote_ident(role)) IS NULL THEN
		RAISE EXCEPTION 'role "%" does not exist', role USING ERRCODE = 'undefined_object';
	END IF;
	EXECUTE format('GRANT USAGE ON SCHEMA jobguard TO %I', role);
	EXECUTE format('GRANT USAGE ON FOREIGN SERVER jobguard_shards TO %I', role);
	EXECUTE format('GRANT USAGE ON SEQUENCE jobguard.claim_turn TO %I', role);
	EXECUTE format('GRANT EXECUTE ON FUNCTION'
				   ' jobguard.route_owner(text), jobguard.route_id(bigint),'
				   ' jobguard.submit(text, text, text, jsonb, text, integer),'
				   ' jobguard.begin_attempt(bigint, text, interval, text),'
				   ' jobguard.finish_attempt(bigint, jsonb),'
				   ' jobguard.fail_attempt(bigint, text, interval),'
				   ' jobguard.mark_unknown(bigint),'
				   ' jobguard.cancel_attempt(bigint, text),'
				   ' jobguard.cancel_job(bigint, text),'
				   ' jobguard.job_state(bigint), jobguard.job(bigint), jobguard.attempts_of(bigint),'
				   ' jobguard.await(bigint, interval), jobguard.check_result(text, jsonb),'
				   ' jobguard.heartbeat(bigint, interval),'
				   ' jobguard.claim_on_shard(integer, text, text[], interval, integer, text, interval),'
				   ' jobguard.claim_in_turn(text, text[], interval, integer, text, interval, integer),'
				   ' jobguard.claim(text, text[], interval, integer, text, interval, integer),'
				   ' jobguard.submit_many_on_shards(integer[], text[], text[], text[], jsonb[], text[], integer[]),'
				   ' jobguard.submit_many(text[], text[], text[], jsonb[], text[], integer[]) TO %I', role);
END
$$;
