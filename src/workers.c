/*-------------------------------------------------------------------------
 *
 * workers.c
 *	  The entry points of the worker side: claim (hand out runnable jobs,
 *	  one attempt each, to concurrent workers without a herd) and
 *	  heartbeat (a long attempt pushes back its deadline in time).
 *
 * claim() finds its jobs with one statement that locks them SKIP LOCKED
 * (concurrent claims pass over each other's jobs instead of waiting), then
 * begins each through store_begin_attempt(), the very gate of
 * begin_attempt() on either back end: the partial unique index on open
 * attempts stays the arbiter, and a job the gate refuses meanwhile is
 * simply not returned (never JG002).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

#include "args.h"
#include "transitions.h"
#include "claim_floor.h"
#include "liveness.h"
#include "schema_level.h"
#include "limits.h"
#include "metrics.h"
#include "store.h"
#include "subxact.h"

/* The most jobs one claim() may take. */
#define MAX_CLAIM_JOBS 1000

/*
 * How often one claim() looks for more jobs when a concurrent call took
 * some of those it had found; each round means another call made progress.
 */
#define CLAIM_ROUNDS 3

/* How long a waiting claim() sleeps between two looks, at first and at most. */
#define CLAIM_FIRST_SLEEP_MS 1
#define CLAIM_MAX_SLEEP_MS 50
/* How often a claim woken by shared memory still looks for a backoff's end. */
#define CLAIM_BACKOFF_LOOK_MS 250

PG_FUNCTION_INFO_V1(jobguard_claim);
PG_FUNCTION_INFO_V1(jobguard_claim_unknown);
PG_FUNCTION_INFO_V1(jobguard_heartbeat);

static int64 interval_ms(const Interval *span);

/*
 * interval_arg: a required interval argument that must be greater
 * than zero (or, allow_zero, not negative), and at most 100 years, or —
 * a wait of function `waits` (non-NULL) — at most 366 days
 * (require_wait_limit); 22004 / 22023 otherwise.
 */
static Datum
interval_arg(FunctionCallInfo fcinfo, int argno, const char *name, bool allow_zero,
			 const char *waits)
{
	Interval	zero_interval = {0};
	Datum		value;
	bool		ok;

	require_arg(fcinfo, argno, name);
	value = PG_GETARG_DATUM(argno);
	ok = DatumGetBool(DirectFunctionCall2(allow_zero ? interval_ge : interval_gt, value,
										  IntervalPGetDatum(&zero_interval)));
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg(allow_zero ? "argument \"%s\" must not be negative" :
						"argument \"%s\" must be greater than zero", name),
				 errdetail("It is %s.", DatumGetCString(DirectFunctionCall1(interval_out, value)))));
	if (waits != NULL)
		require_wait_limit(interval_ms(DatumGetIntervalP(value)), name, waits);
	else
		require_duration(value, name);
	return value;
}

/*
 * interval_ms: an interval in milliseconds (a day as 24 hours, a month as
 * 30 days, as interval comparison counts them).
 */
static int64
interval_ms(const Interval *span)
{
	return span->time / 1000 +
		((int64) span->month * DAYS_PER_MONTH + span->day) * SECS_PER_DAY * 1000;
}

/*
 * wait_for_runnable: sleep until a job may have become runnable, or until
 * `until`; returns false once `until` has passed.  With jobguard preloaded
 * (shared), commits that make work runnable — a submit, a failed or
 * cancelled attempt — wake the sleep at once through shared memory
 * (notify_worker.c); a backoff running out signals nothing, so the sleep also
 * ends every CLAIM_BACKOFF_LOOK_MS to look again.  The look before it was
 * rolled back (jobguard_claim), and a subtransaction's abort ends the
 * sleep's registration: it is made again here, and when a commit made work
 * runnable since `mark` (claim_floor_lowerings() before the look), there
 * is no sleep, the claim looks again at once.  Without preload it
 * polls: short sleeps on the process latch (1 ms, doubling up to 50 ms).
 * Either way a cancel or statement_timeout interrupts at once.
 */
static bool
wait_for_runnable(TimestampTz until, long *sleep_ms, bool shared, uint64 mark)
{
	long		remaining_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until);

	if (remaining_ms <= 0)
		return false;
	if (shared)
	{
		(void) claim_wait_prepare();
		if (claim_floor_lowerings() == mark)
			claim_wait_sleep(Min(CLAIM_BACKOFF_LOOK_MS, remaining_ms));
	}
	else
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(*sleep_ms, remaining_ms), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		*sleep_ms = Min(*sleep_ms * 2, CLAIM_MAX_SLEEP_MS);
	}
	CHECK_FOR_INTERRUPTS();
	return true;
}

/* What one claim() asks for. */
typedef struct ClaimRequest
{
	const char *scope;			/* NULL: every scope (operators) */
	Datum		worker;
	Datum		operations;
	bool		operations_null;
	Datum		timeout;
	int			max_jobs;
	Datum		provider;
	bool		provider_null;
	Datum		providers;		/* text[] of providers to serve, 0: any (1.3) */
	bool		waited;			/* it waited for work: attempts begin now, not
								 * when the transaction did */
} ClaimRequest;

/*
 * known_levels: the priorities with claimable jobs as an int2[] for the
 * candidates statement, or 0 when not known (it walks the index then).
 */
static Datum
known_levels(void)
{
	ClaimLevels levels;
	Datum		elems[CLAIM_MAX_LEVELS];

	if (!claim_levels(&levels))
		return (Datum) 0;
	for (int i = 0; i < levels.n; i++)
		elems[i] = Int16GetDatum(levels.priority[i]);
	return PointerGetDatum(construct_array(elems, levels.n, INT2OID, sizeof(int16), true,
										   TYPALIGN_SHORT));
}

/*
 * claim_within_limits: whether the claim may start an attempt against the
 * provider the job's next attempt runs on (the candidates statement's
 * choice: its route's, or the claim's provider) within its limits and
 * pause (limits.c: never waits, never errors).  A provider passed over
 * goes to *at_limit (not searched again in this claim: its jobs are passed
 * over, never moved further along a route for it); with the claim's own
 * provider at a limit, every candidate is passed over.
 */
static bool
claim_within_limits(const ClaimRequest *req, const char *provider,
					Datum *at_limit, int *n_at_limit)
{
	if (limits_admit_claim(provider, 0))
		return true;
	if (req->provider_null && *n_at_limit < req->max_jobs)
		at_limit[(*n_at_limit)++] = CStringGetTextDatum(provider);
	return false;
}

/*
 * claim_once: find and begin up to max_jobs runnable jobs; their attempt
 * ids go to attempts[], the count is returned.  A job found runnable but
 * refused by the gate by the time its attempt begins (a concurrent begin
 * got there first) is passed over, and the search runs again for the
 * shortfall.
 */
static int
claim_once(const ClaimRequest *req, int64 *attempts, bool *redrives)
{
	int64	   *candidates = palloc(sizeof(int64) * req->max_jobs);
	char	  **providers = palloc(sizeof(char *) * req->max_jobs);
	int			claimed = 0;
	Datum	   *at_limit = palloc(sizeof(Datum) * req->max_jobs);	/* providers passed
																 * over for a limit */
	int			n_at_limit = 0;

	/*
	 * Redrives first (doc/reference.md, "Redrive"): stalled attempts whose
	 * provider still deduplicates their key, each redriven as it is taken.
	 * One that stopped being redrivable meanwhile, or that another
	 * transaction holds, is passed over.  A 1.1 database has none, nor has
	 * one where no provider deduplicates: the statement is not run then
	 * (it was a third of the CPU of a claim that found nothing).
	 */
	if (schema_is_1_2() && limits_may_redrive())
	{
		int			found = store_redrive_candidates(req->scope, req->operations,
													 req->operations_null, req->provider,
													 req->provider_null, req->providers,
													 req->max_jobs, candidates);

		for (int i = 0; i < found && claimed < req->max_jobs; i++)
		{
			int64		attempt_id = redrive(candidates[i], req->scope, GetUserId(), true,
											 req->worker, false, req->timeout, false,
											 req->waited ? GetCurrentTimestamp() : 0);

			if (attempt_id != 0)
			{
				redrives[claimed] = true;
				attempts[claimed++] = attempt_id;
			}
		}
	}

	for (int round = 0; round < CLAIM_ROUNDS && claimed < req->max_jobs; round++)
	{
		int			found = store_claim_candidates(req->scope, req->operations,
												   req->operations_null,
												   GetCurrentTimestamp(), req->provider,
												   req->provider_null, req->providers,
												   req->max_jobs - claimed,
												   claim_floor(), claim_time_floor(),
												   known_levels(),
												   n_at_limit == 0 ? (Datum) 0 :
												   PointerGetDatum(construct_array(at_limit, n_at_limit,
																				   TEXTOID, -1, false,
																				   TYPALIGN_INT)),
												   candidates, providers);
		int			refused = 0;

		for (int i = 0; i < found; i++)
		{
			/* the attempt runs against the provider the statement chose */
			BeginRequest begin = {
				.job_id = candidates[i], .scope = req->scope,
				.provider = CStringGetTextDatum(providers[i]), .provider_null = false,
				.timeout = req->timeout,
				.attempt_key = (Datum) 0, .attempt_key_null = true,
				.worker = req->worker, .worker_null = false,
				.started_at = req->waited ? GetCurrentTimestamp() : 0,
			};
			int64		attempt_id;

			/* the limits of the provider it would run on: at one, pass it over */
			if (!claim_within_limits(req, providers[i], at_limit, &n_at_limit))
			{
				refused++;
				continue;
			}
			attempt_id = store_begin_attempt(&begin);
			limits_start_done();	/* the next start counts this one */
			if (attempt_id != 0)
			{
				redrives[claimed] = false;
				attempts[claimed++] = attempt_id;
				stats_attempts_begun(1);
			}
			else
				refused++;
		}
		if (refused == 0)
			break;
	}
	pfree(candidates);
	pfree(providers);
	pfree(at_limit);
	return claimed;
}

/* One look of a claim for runnable jobs: what it asks, what it found. */
typedef struct ClaimLook
{
	const ClaimRequest *req;
	int64	   *attempts;
	bool	   *redrives;
	ReturnSetInfo *rsinfo;
	int			claimed;		/* how many it began */
} ClaimLook;

/*
 * claim_look: one look (claim_once), the attempts it began put into the
 * result; true when it began any.
 */
static bool
claim_look(void *arg)
{
	ClaimLook  *look = (ClaimLook *) arg;
	SavedIdentity caller;		/* restored by store_finish() */

	store_connect(&caller);
	look->claimed = claim_once(look->req, look->attempts, look->redrives);
	if (look->claimed > 0)
		store_put_claimed(look->attempts, look->redrives, look->claimed, look->rsinfo);
	store_finish(&caller);
	return look->claimed > 0;
}

/*
 * jobguard.claim(worker, operations, timeout, max_jobs, provider, wait,
 *				  providers)
 *   -> TABLE (attempt_id, job_id, attempt_no, operation, provider, params,
 *			   deadline, provider_key, redrive, failover)
 *
 * Begins one attempt (recording the worker) on each of up to max_jobs
 * runnable jobs of the caller's scope, oldest first, against the provider
 * each job's failover route chooses, and returns them.  provider (one) or
 * providers (a list, 1.3) restricts the claim to the attempts against
 * them; both at once are 22023.
 * With wait > 0 and nothing runnable, looks again until something is or
 * the wait is over; that needs a fresh snapshot per look, so it is
 * refused (0A000) under REPEATABLE READ and SERIALIZABLE.
 */
Datum
jobguard_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ClaimRequest req = {0};
	ClaimLook	look;
	bool		may_sleep;
	bool		shared;
	Interval   *wait;
	TimestampTz until;
	long		sleep_ms = CLAIM_FIRST_SLEEP_MS;
	int64	   *attempts;
	bool	   *redrives;

	req.worker = text_arg(fcinfo, 0, "worker", MAX_KEY_CHARS);
	req.operations_null = PG_ARGISNULL(1);
	req.operations = req.operations_null ? (Datum) 0 : PG_GETARG_DATUM(1);
	/* the list is read for every candidate: bounded like a payload */
	if (!req.operations_null)
		require_payload_size(req.operations, "operations");
	if (!req.operations_null && ARR_NDIM(PG_GETARG_ARRAYTYPE_P(1)) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"operations\" must be a one-dimensional array")));
	req.timeout = interval_arg(fcinfo, 2, "timeout", false, NULL);
	require_arg(fcinfo, 3, "max_jobs");
	req.max_jobs = PG_GETARG_INT32(3);
	if (req.max_jobs < 1 || req.max_jobs > MAX_CLAIM_JOBS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"max_jobs\" must be 1 to %d", MAX_CLAIM_JOBS),
				 errdetail("It is %d.", req.max_jobs)));
	req.provider = optional_text_arg(fcinfo, 4, "provider", MAX_NAME_CHARS, &req.provider_null);
	/* providers: 1.3's seventh argument (a 1.2 database declares six) */
	if (PG_NARGS() >= 7 && !PG_ARGISNULL(6))
	{
		req.providers = PG_GETARG_DATUM(6);
		require_provider_list(req.providers, "providers");
		if (!req.provider_null)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("arguments \"provider\" and \"providers\" cannot both be given"),
					 errhint("Pass the one provider in providers, or use provider alone.")));
	}
	wait = DatumGetIntervalP(interval_arg(fcinfo, 5, "wait", true, "claim"));
	if (interval_ms(wait) > 0 && IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("jobguard.claim() cannot wait in a %s transaction",
						IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errdetail("Its snapshot could never see the jobs that become runnable."),
				 errhint("Call it in READ COMMITTED, or with wait => '0'.")));
	req.scope = scopes_acting_scope(GetUserId());

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	attempts = palloc(sizeof(int64) * req.max_jobs);
	redrives = palloc(sizeof(bool) * req.max_jobs);
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), interval_ms(wait));
	may_sleep = interval_ms(wait) > 0;
	/* woken through shared memory (preloaded), or polling */
	shared = may_sleep && claim_wait_prepare();
	look = (ClaimLook) {
		.req = &req, .attempts = attempts, .redrives = redrives, .rsinfo = rsinfo,
	};
	for (;;)
	{
		/* the commits that made work runnable so far: any later one wakes */
		uint64		mark = shared ? claim_floor_lowerings() : 0;

		/*
		 * A claim that may sleep looks in a subtransaction, and one that
		 * began nothing is rolled back before the sleep: the jobs it
		 * locked and could not take (one a concurrent claim began first,
		 * one whose provider is at its limit, a redrive gone) are let go.
		 * Held, they would make a finish, fail or cancel of those jobs
		 * wait for the whole sleep.
		 */
		if (may_sleep)
			(void) subxact_keep_if(claim_look, &look);
		else
			(void) claim_look(&look);
		if (look.claimed > 0 || !wait_for_runnable(until, &sleep_ms, shared, mark))
			break;
		req.waited = true;
	}
	if (shared)
		claim_wait_done();
	return (Datum) 0;
}

/*
 * jobguard.heartbeat(attempt_id, extend_by) -> the new deadline
 *
 * A worker still busy with a long attempt says so in time: the deadline
 * of a started attempt becomes now() + extend_by (NULL: the timeout the
 * attempt began with).  An attempt past its deadline is unknown and stays
 * so (JG006): its gate may already have been judged by someone else.
 */
Datum
jobguard_heartbeat(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	int64		attempt_id = int64_arg(fcinfo, 0, "attempt_id");
	bool		extend_by_null = PG_ARGISNULL(1);
	Datum		extend_by = extend_by_null ? (Datum) 0 :
		interval_arg(fcinfo, 1, "extend_by", false, NULL);
	Oid			userid = GetUserId();
	AttemptRow	attempt;
	TimestampTz deadline;

	store_connect(&caller);
	if (!store_lock_attempt(attempt_id, scopes_acting_scope(userid), &attempt))
		report_attempt_not_found(attempt_id, userid, SCOPE_ACT);
	require_transition(ACTION_HEARTBEAT, &attempt);
	deadline = store_heartbeat(attempt_id, extend_by, extend_by_null);
	store_finish(&caller);
	PG_RETURN_TIMESTAMPTZ(deadline);
}

/*
 * jobguard.claim_unknown(worker, operations, max_rows, older_than, lease)
 *   -> TABLE (attempt_id, job_id, operation, provider, provider_key,
 *			   params, unknown_since, redrivable)
 *
 * Unknown attempts for a reconciler to look up at their provider by
 * provider key, longest unknown first, each unknown for at least
 * older_than, of the caller's scope and of an operation in operations
 * (NULL: any).  Each comes with a lease of the given length (kept in
 * jobguard.reconcile_leases): while it lasts no other claim_unknown()
 * returns the attempt.  Never waits: a job another transaction holds is
 * passed over (SKIP LOCKED, as claim's).  The reconciler reports what it
 * learns with finish_attempt or fail_attempt, or nothing.
 */
Datum
jobguard_claim_unknown(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SavedIdentity caller;		/* restored by store_finish() */
	Datum		worker = text_arg(fcinfo, 0, "worker", MAX_KEY_CHARS);
	bool		operations_null = PG_ARGISNULL(1);
	Datum		operations = operations_null ? (Datum) 0 : PG_GETARG_DATUM(1);
	int			max_rows;
	Datum		older_than;
	Datum		lease;
	const char *scope;

	require_schema_1_2("claim_unknown");
	if (!operations_null)
		require_payload_size(operations, "operations");
	if (!operations_null && ARR_NDIM(PG_GETARG_ARRAYTYPE_P(1)) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"operations\" must be a one-dimensional array")));
	require_arg(fcinfo, 2, "max_rows");
	max_rows = PG_GETARG_INT32(2);
	if (max_rows < 1 || max_rows > MAX_CLAIM_JOBS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"max_rows\" must be 1 to %d", MAX_CLAIM_JOBS),
				 errdetail("It is %d.", max_rows)));
	older_than = interval_arg(fcinfo, 3, "older_than", true, NULL);
	lease = interval_arg(fcinfo, 4, "lease", false, "claim_unknown");
	scope = scopes_acting_scope(GetUserId());

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	store_connect(&caller);
	store_claim_unknown(scope, worker, operations, operations_null, max_rows,
						older_than, lease, rsinfo);
	store_finish(&caller);
	return (Datum) 0;
}
