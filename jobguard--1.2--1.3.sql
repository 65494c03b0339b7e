/* jobguard--1.2--1.3.sql: update jobguard 1.2 to 1.3 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobguard UPDATE TO '1.3'" to load this file. \quit

/*
 * What 1.3 adds to the SQL of 1.2 (doc/reference.md, "Version 1.3").
 * CREATE EXTENSION jobguard runs the 1.0 script and every update after
 * it, ending with this one; ALTER EXTENSION jobguard UPDATE on a 1.2
 * database runs this script alone.  Each 1.3 object is written here once.
 *
 * The 1.3 library also serves a 1.2 database that has not run this script
 * yet.  An object created here gets the default privileges the updating
 * role has in force: each part below takes them back for its own objects
 * and gives the clients and operators of the updated database what new
 * ones get.
 *
 * Three parts:
 *   0. Ranges of numbers: the checks 1.3's library makes at every call
 *      (doc/reference.md, "Ranges of numbers"), in 1.2's SQL too.
 *   1. Failover routes, certification bound to the contract, pausing a
 *      provider.
 *   2. What an operator did (operator_actions), and what is owed back
 *      (lost_results, mark_refunded).
 */

/*
 * The grants of roles dropped since (a bare OID each: see the top of
 * jobguard--1.1--1.2.sql) are forgotten first, as the 1.2 update forgot
 * them: the parts below give 1.3's rights to every granted role, and
 * check_invariants() names any such grant left.
 */
DELETE FROM jobguard.grants g
 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
				   WHERE r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid);

---------------------------------------------------------------------------
-- Part 0. Ranges of numbers
---------------------------------------------------------------------------

/*
 * set_key_policy's retention is at most 100 years, as every duration an
 * operator sets (22023 at the call).  Redefined from its own definition,
 * as 1.2 added require_administrator(): the check goes on the line of the
 * check that it is greater than zero, so that the body stays written once
 * and its line numbers stay those of 1.1.
 */
DO LANGUAGE plpgsql $$
DECLARE
	f pg_catalog.regprocedure := 'jobguard.set_key_policy(text, interval, text[], text)';
	def text;
	patched text;
BEGIN
	def := pg_catalog.pg_get_functiondef(f);
	patched := pg_catalog.replace(def,
		$q$IF retention <= '0'::interval THEN$q$,
		$q$IF retention > '100 years'::interval THEN $q$ OPERATOR(pg_catalog.||)
		$q$RAISE EXCEPTION 'argument "retention" must be at most 100 years' $q$ OPERATOR(pg_catalog.||)
		$q$USING ERRCODE = 'invalid_parameter_value', DETAIL = format('It is %s.', retention); $q$ OPERATOR(pg_catalog.||)
		$q$END IF; IF retention <= '0'::interval THEN$q$);
	IF patched OPERATOR(pg_catalog.=) def THEN
		RAISE EXCEPTION 'jobguard update: no retention check in the body of %', f;
	END IF;
	EXECUTE patched;
END
$$;

/*
 * blocked_jobs reads a provider's dedupes_for as at most 100 years, as the
 * library reads it: a longer one stored before 1.3 checked it at the call
 * would otherwise make every read of the view 22008 (timestamp out of
 * range), the sweeper's count included.
 */
CREATE OR REPLACE VIEW jobguard.blocked_jobs WITH (security_barrier) AS
SELECT j.id AS job_id,
	   j.scope,
	   j.operation,
	   a.provider,
	   a.id AS attempt_id,
	   a.provider_key,
	   COALESCE(a.unknown_since, a.deadline) AS unknown_since,
	   COALESCE(w.window_end > now(), false) AS redrivable,
	   w.window_end AS redrivable_until
  FROM jobguard.attempts a
  -- from the open attempts to their jobs by the primary key (see 1.2's
  -- definition of this view for why)
  CROSS JOIN LATERAL (
	   SELECT o.id, o.scope, o.operation, o.completed_by, o.cancelled_at
		 FROM jobguard.jobs o
		WHERE o.id = a.job_id
	   OFFSET 0) j
  LEFT JOIN jobguard.provider_policy p ON p.provider = a.provider
  CROSS JOIN LATERAL (
	   SELECT CASE WHEN p.dedupes_for > interval '100 years' THEN interval '100 years'
				   ELSE p.dedupes_for END AS dedupes_for) d
  LEFT JOIN LATERAL (
	   SELECT min(f.started_at) + d.dedupes_for
			  - greatest(d.dedupes_for * 0.01::float8, interval '1 minute') AS window_end
		 FROM jobguard.attempts f
		WHERE f.job_id = a.job_id AND f.provider_key = a.provider_key) w ON true
 WHERE a.state IN ('started', 'unknown')
   AND jobguard.attempt_state(a.state, a.deadline) = 'unknown'
   AND j.completed_by IS NULL AND j.cancelled_at IS NULL
   AND jobguard.scope_visible(j.scope);

---------------------------------------------------------------------------
-- Part 1. Failover routes, certification bound to the contract, pausing
---------------------------------------------------------------------------

/*
 * A certification is bound to the contract it was earned under: the
 * operation's contract_version when certify_provider() ran (NULL when the
 * operation had no contract then).  It counts only while that version is
 * the operation's current one; define_operation() with a contract that
 * differs makes it stale (its row stays).  The certifications of 1.2 are
 * taken as earned under the version current at this update.  This column
 * is also what tells the library that the database holds 1.3's objects
 * (src/schema_level.c).
 */
ALTER TABLE jobguard.certifications ADD COLUMN contract_version bigint;

UPDATE jobguard.certifications AS c
   SET contract_version = o.contract_version
  FROM jobguard.operations o
 WHERE o.operation OPERATOR(pg_catalog.=) c.operation;

COMMENT ON COLUMN jobguard.certifications.contract_version IS 'the operation''s contract_version the certification was earned under (NULL: it had none); stale once the operation''s contract changes';

/*
 * certification_overview: certified now means live and earned under the
 * operation's current contract; contract_version and stale appended.
 */
CREATE OR REPLACE VIEW jobguard.certification_overview AS
SELECT c.operation,
	   c.provider,
	   c.revoked_at IS NULL
		 AND c.contract_version IS NOT DISTINCT FROM o.contract_version AS certified,
	   c.evidence,
	   c.certified_at,
	   c.revoked_at,
	   o.output_contract IS NOT NULL AS operation_has_contract,
	   c.contract_version,
	   c.contract_version IS DISTINCT FROM o.contract_version AS stale
  FROM jobguard.certifications c
  LEFT JOIN jobguard.operations o ON o.operation = c.operation;

COMMENT ON VIEW jobguard.certification_overview IS 'which providers are certified for which operation, under which contract version (stale: the contract changed since), since when, with what evidence';

/*
 * Pausing a provider: no new start against it (claim passes over it,
 * begin_attempt and redrive_attempt are JG010); its open attempts run on.
 * The limits' cache (src/limits.c) holds the paused providers too, and
 * whether any provider deduplicates (claim looks for redrives only then),
 * so the trigger that tells every backend of a change now watches paused
 * and dedupes_for as well.
 */
ALTER TABLE jobguard.provider_policy ADD COLUMN paused boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN jobguard.provider_policy.paused IS 'no new attempt starts against the provider while true (set_provider_policy(..., paused => ...))';

DROP TRIGGER provider_policy_changed ON jobguard.provider_policy;
CREATE TRIGGER provider_policy_changed
	AFTER INSERT OR DELETE OR TRUNCATE OR UPDATE OF provider, max_in_flight, max_per_second, paused, dedupes_for
	ON jobguard.provider_policy
	FOR EACH STATEMENT EXECUTE FUNCTION jobguard.table_changed();

CREATE OR REPLACE VIEW jobguard.provider_policies AS
SELECT p.provider, p.dedupes_for, p.max_in_flight, p.max_per_second, p.updated_at,
	   p.paused
  FROM jobguard.provider_policy p;

COMMENT ON VIEW jobguard.provider_policies IS 'the policy of each provider that has one: dedupes_for, max_in_flight, max_per_second, paused';

/*
 * set_provider_policy gains paused.  The 1.2 signature goes (an overload
 * beside it would make every 1.2 call ambiguous); a 1.2 call means what it
 * meant, and keeps the provider's pause as it is.
 */
DROP FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric);

CREATE FUNCTION jobguard.set_provider_policy(provider text, dedupes_for interval DEFAULT NULL,
											 max_in_flight integer DEFAULT NULL,
											 max_per_second numeric DEFAULT NULL,
											 paused boolean DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'jobguard_set_provider_policy';

COMMENT ON FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric, boolean) IS 'set what a provider promises (dedupes_for), its limits (max_in_flight, max_per_second) and whether it is paused; operators only';

REVOKE ALL ON FUNCTION jobguard.set_provider_policy(text, interval, integer, numeric, boolean) FROM PUBLIC;

/*
 * Failover routes: the ordered fallbacks of an operation.  A job's route
 * is its own provider, then these in order (one equal to its own provider
 * skipped); claim() chooses the provider of the job's next attempt from
 * the job's attempts (doc/reference.md, "Failover routes").  No foreign
 * key to jobguard.operations: a route may be set before its operation is
 * defined, as a certification may.
 */
CREATE TABLE jobguard.failover (
	operation		text PRIMARY KEY,
	providers		text[] NOT NULL,
	after_failures	integer NOT NULL DEFAULT 1 CHECK (after_failures >= 1),
	updated_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	CONSTRAINT failover_operation_length CHECK (pg_catalog.char_length(operation) BETWEEN 1 AND 63),
	CONSTRAINT failover_providers_given CHECK (pg_catalog.cardinality(providers) >= 1)
);

COMMENT ON TABLE jobguard.failover IS 'per operation: the fallbacks a job moves to, in order, after after_failures failed or cancelled attempts against a provider';

SELECT pg_catalog.pg_extension_config_dump('jobguard.failover', '');

CREATE VIEW jobguard.failover_routes AS
SELECT f.operation, f.providers, f.after_failures
  FROM jobguard.failover f;

COMMENT ON VIEW jobguard.failover_routes IS 'the failover route of each operation that has one: its fallbacks in order, and after how many failures against a provider a job moves on';

/*
 * set_failover: set or replace an operation's route; NULL or '{}' removes
 * it.  Operators only (42501); a bad argument is 22004 or 22023 and
 * writes nothing.
 */
CREATE FUNCTION jobguard.set_failover(operation text, providers text[], after_failures integer DEFAULT 1)
RETURNS void
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'jobguard_set_failover';

COMMENT ON FUNCTION jobguard.set_failover(text, text[], integer) IS 'set the ordered fallbacks of an operation, and after how many failures against a provider a job moves on (NULL or ''{}'' removes the route); operators only';

REVOKE ALL ON FUNCTION jobguard.set_failover(text, text[], integer) FROM PUBLIC;

/*
 * claim takes providers (serve only the attempts whose chosen provider is
 * one of them; NULL: any) and returns failover (the attempt is not against
 * the job's own provider).  The library builds its rows for the declared
 * result, so a 1.2 database's claim keeps working until it is updated.
 */
DROP FUNCTION jobguard.claim(text, text[], interval, integer, text, interval);

CREATE FUNCTION jobguard.claim(worker text,
							   operations text[] DEFAULT NULL,
							   timeout interval DEFAULT '30 seconds',
							   max_jobs integer DEFAULT 1,
							   provider text DEFAULT NULL,
							   wait interval DEFAULT '0',
							   providers text[] DEFAULT NULL)
RETURNS TABLE (attempt_id bigint, job_id bigint, attempt_no integer, operation text,
			   provider text, params jsonb, deadline timestamptz,
			   provider_key text, redrive boolean, failover boolean)
AS 'MODULE_PATHNAME', 'jobguard_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION jobguard.claim(text, text[], interval, integer, text, interval, text[]) IS 'begin an attempt on each of up to max_jobs runnable jobs (redrives of stalled attempts first, then oldest first) against the provider each job''s failover route chooses, and return them with their provider keys';

REVOKE ALL ON FUNCTION jobguard.claim(text, text[], interval, integer, text, interval, text[]) FROM PUBLIC;

/*
 * job_overview shows next_provider: the provider of the job's next attempt
 * as claim() chooses it (the route rule; src/store_sql.c holds the same
 * rule for claim), NULL when the job is not pending.  A scalar subquery,
 * so that a reader of other columns never computes it.
 */
CREATE OR REPLACE VIEW jobguard.job_overview WITH (security_barrier) AS
SELECT j.id AS job_id,
	   j.owner_id,
	   j.idempotency_key,
	   j.operation,
	   j.provider,
	   CASE WHEN jobguard.payloads_visible(j.scope) THEN j.params END AS params,
	   j.max_attempts,
	   CASE
		   WHEN j.completed_by IS NOT NULL THEN 'succeeded'
		   WHEN j.cancelled_at IS NOT NULL THEN 'cancelled'
		   WHEN last.state = 'unknown' THEN 'unknown'
		   WHEN last.state = 'started' THEN 'running'
		   WHEN j.max_attempts IS NOT NULL
				AND COALESCE(last.tries, 0) >= j.max_attempts THEN 'failed'
		   ELSE 'pending'
	   END AS state,
	   j.version,
	   COALESCE(last.attempt_no, 0) AS attempts,
	   j.completed_by,
	   CASE WHEN jobguard.payloads_visible(j.scope) THEN j.result END AS result,
	   j.created_at,
	   j.completed_at,
	   j.cancelled_at,
	   j.scope,
	   j.previous_job_id,
	   j.replaced_at,
	   CASE
		   WHEN j.completed_by IS NOT NULL OR j.cancelled_at IS NOT NULL
				OR last.state IN ('unknown', 'started')
				OR (j.max_attempts IS NOT NULL AND COALESCE(last.tries, 0) >= j.max_attempts)
			   THEN NULL
		   ELSE (
			   -- the route: the own provider (n = 0), then the usable fallbacks;
			   -- the first with fewer than after_failures failed or cancelled
			   -- attempts of the job (a redriven one not counted), else the last
			   SELECT rp.provider
				 FROM (SELECT j.provider::text AS provider, 0::bigint AS n
					   UNION ALL
					   SELECT u.provider, u.n
						 FROM jobguard.failover r,
							  unnest(r.providers) WITH ORDINALITY AS u(provider, n)
						WHERE r.operation = j.operation
						  AND u.provider <> j.provider
						  AND EXISTS (SELECT 1 FROM jobguard.certifications c
									   WHERE c.operation = j.operation
										 AND c.provider = u.provider
										 AND c.revoked_at IS NULL
										 AND c.contract_version IS NOT DISTINCT FROM
											 (SELECT o.contract_version FROM jobguard.operations o
											   WHERE o.operation = j.operation))
						  AND NOT EXISTS (SELECT 1 FROM jobguard.provider_policy pp
										   WHERE pp.provider = u.provider AND pp.paused)) rp
				CROSS JOIN LATERAL (
					   SELECT COALESCE((SELECT count(*) FROM jobguard.attempts f
										 WHERE f.job_id = j.id
										   AND f.provider = rp.provider
										   AND f.state IN ('failed', 'cancelled')
										   AND NOT EXISTS (
											   SELECT 1 FROM jobguard.attempts nx
												WHERE nx.job_id = f.job_id
												  AND nx.attempt_no = f.attempt_no + 1
												  AND COALESCE(nx.tries, nx.attempt_no)
													  = COALESCE(f.tries, f.attempt_no)))
									   < (SELECT r.after_failures FROM jobguard.failover r
										   WHERE r.operation = j.operation), true) AS fresh) fr
				ORDER BY fr.fresh DESC, CASE WHEN fr.fresh THEN rp.n ELSE -rp.n END
				LIMIT 1)
	   END AS next_provider
  FROM jobguard.jobs j
  LEFT JOIN LATERAL (
	   SELECT a.attempt_no, COALESCE(a.tries, a.attempt_no) AS tries,
			  jobguard.attempt_state(a.state, a.deadline) AS state
		 FROM jobguard.attempts a
		WHERE a.job_id = j.id
		ORDER BY a.attempt_no DESC
		LIMIT 1) last ON true
 WHERE jobguard.scope_visible(j.scope);

/*
 * The grant functions name claim by signature: apply_grant and the 1.2
 * trigger function are redefined from their own definitions with the 1.3
 * signatures of claim and set_provider_policy in place of 1.2's (so their
 * bodies stay written once, in the scripts that made them).
 */
DO LANGUAGE plpgsql $$
DECLARE
	f regprocedure;
	def text;
	patched text;
BEGIN
	FOREACH f IN ARRAY ARRAY['jobguard.apply_grant(regrole, text, text, boolean, text)',
							 'jobguard.grant_added_routines()']::regprocedure[]
	LOOP
		def := pg_catalog.pg_get_functiondef(f);
		patched := pg_catalog.replace(pg_catalog.replace(def,
			'jobguard.claim(text, text[], interval, integer, text, interval)',
			'jobguard.claim(text, text[], interval, integer, text, interval, text[])'),
			'jobguard.set_provider_policy(text, interval, integer, numeric)',
			'jobguard.set_provider_policy(text, interval, integer, numeric, boolean)');
		IF patched = def THEN
			RAISE EXCEPTION 'jobguard update: no 1.2 signature in the body of %', f;
		END IF;
		EXECUTE patched;
	END LOOP;
END
$$;

/*
 * grant_failover_routines: when a role becomes (or stays) a reader, a
 * client or an operator, give it the failover routes to read; an operator
 * also set_failover.
 */
CREATE FUNCTION jobguard.grant_failover_routines()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	EXECUTE format('GRANT SELECT ON jobguard.failover_routes TO %s', NEW.role);
	IF NEW.kind = 'operator' THEN
		EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.set_failover(text, text[], integer) TO %s',
					   NEW.role);
	END IF;
	RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION jobguard.grant_failover_routines() FROM PUBLIC;

CREATE TRIGGER grants_failover_routines
	AFTER INSERT OR UPDATE ON jobguard.grants
	FOR EACH ROW EXECUTE FUNCTION jobguard.grant_failover_routines();

/*
 * The objects of this part got the default privileges in force for the
 * updating role: take every such right back (with the WARNING of the
 * earlier scripts), then give the roles granted before this update what
 * the grant functions give new ones.
 */
DO LANGUAGE plpgsql $$
DECLARE
	g record;
	taken text[] := '{}';
BEGIN
	FOR g IN
		SELECT p.oid::pg_catalog.regprocedure AS routine,
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END AS grantee
		  FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
		 WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
				   'jobguard.set_provider_policy(text, interval, integer, numeric, boolean)'::pg_catalog.regprocedure,
				   'jobguard.set_failover(text, text[], integer)'::pg_catalog.regprocedure,
				   'jobguard.claim(text, text[], interval, integer, text, interval, text[])'::pg_catalog.regprocedure,
				   'jobguard.grant_failover_routines()'::pg_catalog.regprocedure])
		   AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM %s', g.routine, g.grantee);
		IF g.grantee <> 'PUBLIC' AND NOT g.grantee = ANY (taken) THEN
			taken := taken || g.grantee;
		END IF;
	END LOOP;
	FOR g IN
		SELECT c.oid::pg_catalog.regclass AS rel,
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END AS grantee
		  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
		 WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
				   'jobguard.failover'::pg_catalog.regclass,
				   'jobguard.failover_routes'::pg_catalog.regclass])
		   AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s', g.rel, g.grantee);
		IF g.grantee <> 'PUBLIC' AND NOT g.grantee = ANY (taken) THEN
			taken := taken || g.grantee;
		END IF;
	END LOOP;
	-- said once: a fresh install's jobguard--1.0--1.1.sql has said it already
	IF pg_catalog.cardinality(taken) > 0 AND NOT EXISTS (
		SELECT 1 FROM pg_catalog.pg_class c
		 WHERE c.oid OPERATOR(pg_catalog.=) 'jobguard.grants'::pg_catalog.regclass
		   AND c.xmin OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id()::pg_catalog.xid) THEN
		RAISE WARNING 'jobguard revoked the rights that default privileges gave % on its objects',
			pg_catalog.array_to_string(taken, ', ')
			USING DETAIL = 'Only jobguard.grant_client(), grant_reader() and grant_operator() give rights on jobguard.';
	END IF;
	-- (a grant of a role dropped since holds a bare OID: nothing to give)
	FOR g IN SELECT gr.role, gr.kind FROM jobguard.grants gr
			  WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
							 WHERE r.oid OPERATOR(pg_catalog.=) gr.role::pg_catalog.oid)
	LOOP
		EXECUTE pg_catalog.format('GRANT SELECT ON jobguard.failover_routes TO %s', g.role);
		IF g.kind OPERATOR(pg_catalog.=) ANY ('{client,operator}'::pg_catalog.text[]) THEN
			-- claim was made again above, without the rights it had
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION'
									  ' jobguard.claim(text, text[], interval, integer, text, interval, text[]) TO %s',
									  g.role);
		END IF;
		IF g.kind OPERATOR(pg_catalog.=) 'operator' THEN
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION'
									  ' jobguard.set_provider_policy(text, interval, integer, numeric, boolean),'
									  ' jobguard.set_failover(text, text[], integer) TO %s',
									  g.role);
		END IF;
	END LOOP;
END
$$;


---------------------------------------------------------------------------
-- Part 2. What an operator did, and what is owed back
---------------------------------------------------------------------------

/*
 * What an operator did (doc/reference.md, "What an operator did, and what
 * is owed back"): one row per
 * successful call of an operator-only or administrative function that
 * changes something, written in the caller's transaction by the function
 * itself (src/audit.c for the C ones; the PL/pgSQL ones below).  role is
 * session_user, acting_as current_user; target the job, attempt, provider,
 * operation or role acted on (as text; action says which); arguments the
 * call's arguments by name; reason the function's reason argument, else
 * the transaction's jobguard.action_reason.  Only the owner writes it (the
 * functions write it as the owner): no one can forge a row.  Operators and
 * readers of every scope read it; dump and restore keep it; purge never
 * touches it.
 */
CREATE TABLE jobguard.operator_actions (
	id			bigserial PRIMARY KEY,
	at			timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	role		text NOT NULL,
	acting_as	text NOT NULL,
	action		text NOT NULL,
	target		text,
	arguments	jsonb NOT NULL,
	reason		text
);

COMMENT ON TABLE jobguard.operator_actions IS 'one row per successful call of an operator or administrative function: when, who (role, acting_as), what (action, target, arguments) and why (reason)';

-- what a console reads: the latest actions, and those on one job, attempt,
-- provider, operation or role
CREATE INDEX operator_actions_at ON jobguard.operator_actions (at);
CREATE INDEX operator_actions_target ON jobguard.operator_actions (target, id);

SELECT pg_catalog.pg_extension_config_dump('jobguard.operator_actions', '');
SELECT pg_catalog.pg_extension_config_dump('jobguard.operator_actions_id_seq', '');

/*
 * What is owed back (the same section): a result that lost
 * the compare-and-swap and was kept (attempts.lost_result) may be money
 * the provider took twice; mark_refunded() records that it was settled.
 * A table of its own: the fast path writes attempts' tuples by column
 * number.  No foreign key to attempts either: its triggers on attempts
 * would send every write of attempts through the executor (the fast path
 * steps aside for any trigger).  A record outlives its attempt's purge,
 * as the operator action that made it does.
 */
CREATE TABLE jobguard.refunds (
	attempt_id	bigint PRIMARY KEY,
	reference	text NOT NULL,
	refunded_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	refunded_by text NOT NULL,
	CONSTRAINT refunds_reference_length CHECK (pg_catalog.char_length(reference) BETWEEN 1 AND 255)
);

COMMENT ON TABLE jobguard.refunds IS 'per attempt whose lost result was settled: the reference, when and by whom (written by mark_refunded)';

SELECT pg_catalog.pg_extension_config_dump('jobguard.refunds', '');

/*
 * The lost attempts by when they lost (and id, for pages of a ledger in
 * that order): what lost_results reads (and an operator's console counts)
 * without a scan of every attempt.  An attempt becomes lost once, in the
 * update that ends it.
 */
CREATE INDEX attempts_lost
	ON jobguard.attempts (finished_at, id)
	WHERE state = 'lost';

COMMENT ON INDEX jobguard.attempts_lost IS 'lost attempts (their result lost the compare-and-swap and was kept) by finished_at and id: what lost_results reads, a ledger''s pages in order';

/*
 * lost_results: every lost result with its refund, in the scopes the
 * caller may read; lost_result itself only where it may read payloads.
 */
CREATE VIEW jobguard.lost_results WITH (security_barrier) AS
SELECT a.id AS attempt_id,
	   a.job_id,
	   j.scope,
	   j.owner_id,
	   j.operation,
	   a.provider,
	   a.provider_key,
	   CASE WHEN jobguard.payloads_visible(j.scope) THEN a.lost_result END AS lost_result,
	   a.finished_at,
	   r.refunded_at,
	   r.reference AS refund_reference
  FROM jobguard.attempts a
  JOIN jobguard.jobs j ON j.id = a.job_id
  LEFT JOIN jobguard.refunds r ON r.attempt_id = a.id
 WHERE a.state = 'lost'			-- a lost attempt, and only one, keeps a lost_result
   AND jobguard.scope_visible(j.scope);

COMMENT ON VIEW jobguard.lost_results IS 'results that lost the compare-and-swap and were kept (perhaps money taken twice), with their refund (mark_refunded)';

/*
 * mark_refunded: operators record that an attempt's lost result was
 * settled, under a reference.  The same reference again changes nothing;
 * another one is JG007; an attempt without a lost result JG006.
 */
CREATE FUNCTION jobguard.mark_refunded(attempt_id bigint, reference text)
RETURNS void
LANGUAGE C VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'jobguard_mark_refunded';

COMMENT ON FUNCTION jobguard.mark_refunded(bigint, text) IS 'operators: record that the lost result of an attempt was settled (refunded), under a reference; recorded in operator_actions';

REVOKE ALL ON FUNCTION jobguard.mark_refunded(bigint, text) FROM PUBLIC;

/*
 * The audited C functions are pointed at their wrappers in src/audit.c,
 * jobguard_audited_<name>, which call the unaudited entry point with the
 * same arguments and then record the call.  Each is redefined from its own
 * definition (pg_get_functiondef) with only the symbol changed, so that
 * signature, defaults and attributes stay exactly what the scripts that
 * made them say, Part 1's included (set_provider_policy, set_failover).
 */
DO LANGUAGE plpgsql $$
DECLARE
	f record;
	def text;
	patched text;
	audited text[] := '{cancel_attempt,cancel_job,redrive_attempt,retry_job,reschedule,set_provider_policy,set_failover,certify_provider,revoke_provider,define_operation}';
	done text[] := '{}';
BEGIN
	FOR f IN
		SELECT p.oid::pg_catalog.regprocedure AS routine, p.proname::pg_catalog.text AS name
		  FROM pg_catalog.pg_proc p
		 WHERE p.pronamespace OPERATOR(pg_catalog.=) 'jobguard'::pg_catalog.regnamespace
		   AND p.prolang OPERATOR(pg_catalog.=)
			   (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname OPERATOR(pg_catalog.=) 'c')
		   AND p.proname::pg_catalog.text OPERATOR(pg_catalog.=) ANY (audited)
		   AND p.prosrc OPERATOR(pg_catalog.=) ('jobguard_' OPERATOR(pg_catalog.||) p.proname::pg_catalog.text)
	LOOP
		def := pg_catalog.pg_get_functiondef(f.routine);
		patched := pg_catalog.replace(def,
			pg_catalog.format('$function$jobguard_%s$function$', f.name),
			pg_catalog.format('$function$jobguard_audited_%s$function$', f.name));
		IF patched OPERATOR(pg_catalog.=) def THEN
			RAISE EXCEPTION 'jobguard update: no symbol jobguard_% in the definition of %', f.name, f.routine;
		END IF;
		EXECUTE patched;
		done := done OPERATOR(pg_catalog.||) f.name;
	END LOOP;
	-- each exactly once: a renamed entry point or a new overload is noticed here
	IF NOT coalesce((SELECT pg_catalog.array_agg(n ORDER BY n) FROM pg_catalog.unnest(done) n)
					OPERATOR(pg_catalog.=)
					(SELECT pg_catalog.array_agg(n ORDER BY n) FROM pg_catalog.unnest(audited) n), false) THEN
		RAISE EXCEPTION 'jobguard update: audited functions % found, % expected', done, audited;
	END IF;
END
$$;

/*
 * The PL/pgSQL administrative functions (grant_client, grant_reader,
 * grant_operator, revoke_client, set_key_policy) record the call
 * themselves: each is redefined from its own definition with the INSERT
 * added on the line of its BEGIN, after require_administrator() (as 1.2
 * added that call), so that the bodies and the line numbers their errors'
 * CONTEXT names stay those of the scripts that wrote them.  A call that
 * fails afterwards takes the row with it.  They run with the caller's
 * rights, which are the owner's (require_administrator), so the INSERT
 * is the owner's too.
 */
DO LANGUAGE plpgsql $$
DECLARE
	f record;
	args text;
	def text;
	call text;
	patched text;
BEGIN
	FOR f IN
		SELECT p.oid::pg_catalog.regprocedure AS routine, p.proname::pg_catalog.text AS name,
			   p.proargnames AS names, t.target
		  FROM (VALUES ('jobguard.grant_client(regrole, text)', 'role'),
					   ('jobguard.grant_reader(regrole, text, boolean)', 'role'),
					   ('jobguard.grant_operator(regrole)', 'role'),
					   ('jobguard.revoke_client(regrole)', 'role'),
					   ('jobguard.set_key_policy(text, interval, text[], text)', 'operation'))
			   AS t(routine, target)
		  JOIN pg_catalog.pg_proc p
			ON p.oid OPERATOR(pg_catalog.=) t.routine::pg_catalog.regprocedure
	LOOP
		SELECT pg_catalog.string_agg(pg_catalog.format('%L, %I.%I', a.n, f.name, a.n), ', ' ORDER BY a.i)
		  INTO args
		  FROM pg_catalog.unnest(f.names) WITH ORDINALITY AS a(n, i);
		call := pg_catalog.format('PERFORM jobguard.require_administrator(%L);', f.name);
		def := pg_catalog.pg_get_functiondef(f.routine);
		patched := pg_catalog.replace(def, call, call OPERATOR(pg_catalog.||) pg_catalog.format(
			' INSERT INTO jobguard.operator_actions (role, acting_as, action, target, arguments, reason)'
			' VALUES (session_user, current_user, %L, %I.%I::pg_catalog.text, pg_catalog.jsonb_build_object(%s),'
			' NULLIF(pg_catalog.current_setting(''jobguard.action_reason'', true), ''''));',
			f.name, f.name, f.target, args));
		IF patched OPERATOR(pg_catalog.=) def THEN
			RAISE EXCEPTION 'jobguard update: no call of require_administrator in the body of %', f.routine;
		END IF;
		EXECUTE patched;
	END LOOP;
END
$$;

/*
 * grant_audit_routines: when a role becomes (or stays) a reader, a client
 * or an operator, give it lost_results (scoped by the view); a reader of
 * every scope and an operator also operator_actions; an operator also
 * mark_refunded.  take_back revokes them with everything else.
 */
CREATE FUNCTION jobguard.grant_audit_routines()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	EXECUTE format('GRANT SELECT ON jobguard.lost_results TO %s', NEW.role);
	IF NEW.kind = 'operator' OR (NEW.kind = 'reader' AND NEW.scope IS NULL) THEN
		EXECUTE format('GRANT SELECT ON jobguard.operator_actions TO %s', NEW.role);
	END IF;
	IF NEW.kind = 'operator' THEN
		EXECUTE format('GRANT EXECUTE ON FUNCTION jobguard.mark_refunded(bigint, text) TO %s', NEW.role);
	END IF;
	RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION jobguard.grant_audit_routines() FROM PUBLIC;

CREATE TRIGGER grants_audit_routines
	AFTER INSERT OR UPDATE ON jobguard.grants
	FOR EACH ROW EXECUTE FUNCTION jobguard.grant_audit_routines();

/*
 * The objects of this part got the default privileges in force for the
 * updating role: take every such right back (with the WARNING of the
 * earlier scripts), then give the roles granted before this update what
 * the grant functions give new ones.
 */
DO LANGUAGE plpgsql $$
DECLARE
	g record;
	taken text[] := '{}';
BEGIN
	FOR g IN
		SELECT p.oid::pg_catalog.regprocedure AS routine,
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END AS grantee
		  FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
		 WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
				   'jobguard.mark_refunded(bigint, text)'::pg_catalog.regprocedure,
				   'jobguard.grant_audit_routines()'::pg_catalog.regprocedure])
		   AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM %s', g.routine, g.grantee);
		IF g.grantee OPERATOR(pg_catalog.<>) 'PUBLIC' AND NOT g.grantee OPERATOR(pg_catalog.=) ANY (taken) THEN
			taken := taken OPERATOR(pg_catalog.||) g.grantee;
		END IF;
	END LOOP;
	FOR g IN
		SELECT c.oid::pg_catalog.regclass AS rel,
			   CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind,
			   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END AS grantee
		  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
		 WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
				   'jobguard.operator_actions'::pg_catalog.regclass,
				   'jobguard.operator_actions_id_seq'::pg_catalog.regclass,
				   'jobguard.refunds'::pg_catalog.regclass,
				   'jobguard.lost_results'::pg_catalog.regclass])
		   AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s', g.kind, g.rel, g.grantee);
		IF g.grantee OPERATOR(pg_catalog.<>) 'PUBLIC' AND NOT g.grantee OPERATOR(pg_catalog.=) ANY (taken) THEN
			taken := taken OPERATOR(pg_catalog.||) g.grantee;
		END IF;
	END LOOP;
	-- said once: a fresh install's jobguard--1.0--1.1.sql has said it already
	IF pg_catalog.cardinality(taken) > 0 AND NOT EXISTS (
		SELECT 1 FROM pg_catalog.pg_class c
		 WHERE c.oid OPERATOR(pg_catalog.=) 'jobguard.grants'::pg_catalog.regclass
		   AND c.xmin OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id()::pg_catalog.xid) THEN
		RAISE WARNING 'jobguard revoked the rights that default privileges gave % on its objects',
			pg_catalog.array_to_string(taken, ', ')
			USING DETAIL = 'Only jobguard.grant_client(), grant_reader() and grant_operator() give rights on jobguard.';
	END IF;
	-- the grants of roles that exist (one of a role dropped without
	-- revoke_client holds a bare OID, which grants nothing)
	FOR g IN SELECT gr.role, gr.kind, gr.scope FROM jobguard.grants gr
			  WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
							 WHERE r.oid OPERATOR(pg_catalog.=) gr.role::pg_catalog.oid)
	LOOP
		EXECUTE pg_catalog.format('GRANT SELECT ON jobguard.lost_results TO %s', g.role);
		IF g.kind OPERATOR(pg_catalog.=) 'operator'
		   OR (g.kind OPERATOR(pg_catalog.=) 'reader' AND g.scope IS NULL) THEN
			EXECUTE pg_catalog.format('GRANT SELECT ON jobguard.operator_actions TO %s', g.role);
		END IF;
		IF g.kind OPERATOR(pg_catalog.=) 'operator' THEN
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION jobguard.mark_refunded(bigint, text) TO %s',
									  g.role);
		END IF;
	END LOOP;
END
$$;
