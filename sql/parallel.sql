-- Parallel plans: every jobguard function a SELECT can call (those
-- declared PARALLEL RESTRICTED or SAFE, and the views over them) answers
-- in a parallel plan exactly as outside one, also as the first call of a
-- session (whose caches of grants, policies and contracts it fills then),
-- as superuser and as a client and a reader.  Before: the first call's
-- grants read took the latest snapshot (XX000, "cannot update
-- SecondarySnapshot during a parallel operation"), job_state() and
-- check_result() planned with settings of their own (25000).
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
CREATE TABLE public.jg_big AS SELECT g FROM pg_catalog.generate_series(1, 20000) g;
ANALYZE public.jg_big;
GRANT SELECT ON public.jg_big TO PUBLIC;
CREATE ROLE regress_jg_par_app;
CREATE ROLE regress_jg_par_reader;
SELECT jobguard.grant_client('regress_jg_par_app', 'par');
SELECT jobguard.grant_reader('regress_jg_par_reader', payloads => true);
SELECT jobguard.define_operation('par_charge', '{"type": "object", "required": ["id"]}');
SELECT jobguard.set_key_policy('par_charge', '1 day');
SELECT jobguard.set_provider_policy('par_stripe', max_in_flight => 10);
SET ROLE regress_jg_par_app;
SELECT job_id AS done_job FROM jobguard.submit('par', 'k1', 'par_charge', '{}', 'par_stripe') \gset
SELECT jobguard.finish_attempt(jobguard.begin_attempt(:done_job), '{"id": "ch_1"}');
SELECT job_id AS open_job FROM jobguard.submit('par', 'k2', 'par_charge', '{}', 'par_stripe') \gset
SELECT jobguard.begin_attempt(:open_job) IS NOT NULL AS begun;
RESET ROLE;

-- what each session below starts with: a plan that must go parallel
\set parallel 'SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 2; SET parallel_leader_participation = off;'
:parallel
-- the plan is parallel, the restricted call above the Gather
EXPLAIN (COSTS OFF) SELECT jobguard.caller_scope(), count(*) FROM public.jg_big;
EXPLAIN (COSTS OFF) SELECT jobguard.attempt_state('started', pg_catalog.now()), count(*) FROM public.jg_big;

-- as superuser, each call the first of its session
\c
:parallel
SELECT jobguard.caller_scope(), count(*) FROM public.jg_big;
\c
:parallel
SELECT jobguard.scope_visible('par'), count(*) FROM public.jg_big;
\c
:parallel
SELECT jobguard.payloads_visible('par'), count(*) FROM public.jg_big;
\c
:parallel
SELECT jobguard.job_state(:done_job), count(*) FROM public.jg_big;
\c
:parallel
SELECT (jobguard.job(:done_job)).result, count(*) FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.array_agg(state ORDER BY attempt_no) FROM jobguard.attempts_of(:open_job)), count(*)
  FROM public.jg_big;
\c
:parallel
SELECT jobguard.await(:done_job, '0'), count(*) FROM public.jg_big;
\c
:parallel
SELECT jobguard.check_result('par_charge', '{"id": "x"}'), count(*) FROM public.jg_big;
\c
:parallel
SELECT jobguard.check_result('par_charge', '{}'), count(*) FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.count(*) FROM jobguard.stats() WHERE metric LIKE 'provider.par_stripe.%'), count(*)
  FROM public.jg_big;
\c
:parallel
SELECT jobguard.fast_path_status() IS NOT NULL AS status, count(*) FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.count(*) FROM jobguard.check_invariants()) AS violations, count(*) FROM public.jg_big;
\c
:parallel
SELECT jobguard.attempt_state('started', pg_catalog.now() + interval '1 hour'), count(*) FROM public.jg_big;
\c
:parallel
SELECT jobguard.require_administrator('parallel test') IS NOT NULL AS ran, count(*) FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.count(*) FROM jobguard.job_overview), count(*) FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.count(*) FROM jobguard.attempt_overview), count(*) FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.count(*) FROM jobguard.blocked_jobs), count(*) FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.count(*) FROM jobguard.provider_policies WHERE provider = 'par_stripe'), count(*)
  FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.count(*) FROM jobguard.key_policies WHERE operation = 'par_charge'), count(*)
  FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.count(*) FROM jobguard.certification_overview), count(*) FROM public.jg_big;
\c
:parallel
SELECT (SELECT pg_catalog.count(*) FROM jobguard.shard_overview) IS NOT NULL AS shards, count(*) FROM public.jg_big;

-- as a client, each call the first of its session
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT jobguard.caller_scope(), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT jobguard.scope_visible('par'), jobguard.scope_visible('other'), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT jobguard.payloads_visible('par'), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT jobguard.job_state(:done_job), jobguard.job_state(:open_job), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT (jobguard.job(:done_job)).result, count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT (SELECT pg_catalog.array_agg(state ORDER BY attempt_no) FROM jobguard.attempts_of(:done_job)), count(*)
  FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT jobguard.await(:done_job, '0'), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT jobguard.check_result('par_charge', '{"id": "x"}'), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT (SELECT pg_catalog.count(*) FROM jobguard.stats() WHERE metric LIKE 'provider.par_stripe.%'), count(*)
  FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT jobguard.fast_path_status() IS NOT NULL AS status, count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT jobguard.attempt_state('unknown', pg_catalog.now()), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT (SELECT pg_catalog.count(*) FROM jobguard.job_overview), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT (SELECT pg_catalog.count(*) FROM jobguard.attempt_overview), count(*) FROM public.jg_big;

-- as a reader, each call the first of its session
\c
:parallel
SET ROLE regress_jg_par_reader;
SELECT jobguard.scope_visible('par'), jobguard.payloads_visible('par'), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_reader;
SELECT jobguard.job_state(:done_job), count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_reader;
SELECT (jobguard.job(:done_job)).result, count(*) FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_reader;
SELECT (SELECT pg_catalog.count(*) FROM jobguard.stats() WHERE metric LIKE 'provider.par_stripe.%'), count(*)
  FROM public.jg_big;
\c
:parallel
SET ROLE regress_jg_par_reader;
SELECT (SELECT pg_catalog.count(*) FROM jobguard.job_overview), count(*) FROM public.jg_big;

-- and the same calls, after the first, in one session
\c
:parallel
SET ROLE regress_jg_par_app;
SELECT jobguard.caller_scope(), jobguard.job_state(:done_job), jobguard.check_result('par_charge', '{}'),
	   (jobguard.job(:open_job)).state, count(*) FROM public.jg_big;
SELECT jobguard.caller_scope(), jobguard.job_state(:done_job), jobguard.check_result('par_charge', '{}'),
	   (jobguard.job(:open_job)).state, count(*) FROM public.jg_big;
RESET ROLE;

\c
SELECT count(*) AS violations FROM jobguard.check_invariants();
SELECT jobguard.revoke_client(r) FROM unnest(ARRAY['regress_jg_par_app', 'regress_jg_par_reader']::regrole[]) r;
DROP ROLE regress_jg_par_app, regress_jg_par_reader;
DROP TABLE public.jg_big;
