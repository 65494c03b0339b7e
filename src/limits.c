/*-------------------------------------------------------------------------
 *
 * limits.c
 *	  The provider limits of jobguard.provider_policy, enforced for every
 *	  start of an attempt on either back end: max_in_flight (open attempts,
 *	  started or unknown, against the provider) and max_per_second (a token
 *	  bucket holding one second's worth, at least one token).
 *
 * One rule, in one place: a start against a provider with a limit locks
 * the provider's policy row, then counts and draws a token under that
 * lock, and writes the bucket back into the row.  So the starts against one
 * provider are decided one at a time, each seeing those before it:
 *
 *   - max_in_flight: the count runs after the lock, with the latest
 *     snapshot (at any isolation level), so it sees every start committed
 *     by the lock's previous holders, and none is still to commit.
 *   - max_per_second: every start writes the bucket into the row; under
 *     REPEATABLE READ or SERIALIZABLE a start whose snapshot misses an
 *     earlier one cannot lock the row (could not serialize, 40001): it
 *     fails rather than overruns.
 *
 * begin_attempt (limits_admit_begun) waits for the lock, and is refused
 * with JG010 beyond a limit; claim (limits_admit_claim) never waits (SKIP
 * LOCKED) and never errors: a provider at its limit, or whose row another
 * start holds, is passed over.  Providers without a limit cost one look-up
 * in a per-backend cache of the providers that have one (no SQL): the
 * trigger provider_policy_changed sends a relcache invalidation whenever a
 * limit changes, and the cache is read again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "utils/builtins.h"
#include "storage/bufmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "errcodes.h"
#include "limits.h"
#include "store.h"

/* The per-backend cache of the providers that have a limit. */
static Oid	cached_relid = InvalidOid;	/* provider_policy's OID it is of */
static bool cache_valid = false;
static int	limited_count = 0;
static char **limited = NULL;
static MemoryContext limits_cxt = NULL;
static bool callback_registered = false;

/* limits_invalidate: a relcache callback; the policy table changed. */
static void
limits_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == cached_relid)
		cache_valid = false;
}

/*
 * policy_relid: jobguard.provider_policy's OID, or InvalidOid in a
 * database whose objects are still 1.1's (no limits there).  Two syscache
 * look-ups.
 */
static Oid
policy_relid(void)
{
	Oid			schema = get_namespace_oid("jobguard", true);

	return OidIsValid(schema) ? get_relname_relid("provider_policy", schema) : InvalidOid;
}

/*
 * schema_has_flow: whether the database's jobguard objects have 1.2's flow
 * control columns (jobs.priority and jobs.retries come with the same
 * update): else the SQL back end runs 1.1's form of the statements that
 * would name them (the fast path steps aside by itself, its catalog check
 * finding the columns missing).  Syscache look-ups, no SQL.
 */
bool
schema_has_flow(void)
{
	Oid			schema = get_namespace_oid("jobguard", true);
	Oid			jobs = OidIsValid(schema) ? get_relname_relid("jobs", schema) : InvalidOid;

	return OidIsValid(jobs) && get_attnum(jobs, "priority") != InvalidAttrNumber;
}

/*
 * load_limited: read the providers that have a limit into the cache.
 * Under REPEATABLE READ or SERIALIZABLE the transaction's snapshot may be
 * older than an invalidation already received, so what it reads is used
 * for this call only and read again by the next.
 */
static void
load_limited(Oid relid)
{
	MemoryContext old;
	char	  **names;
	int			count;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(limits_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (limits_cxt == NULL)
		limits_cxt = AllocSetContextCreate(TopMemoryContext, "jobguard limits",
										   ALLOCSET_SMALL_SIZES);
	cached_relid = relid;
	cache_valid = true;			/* an invalidation during the read clears it */
	names = store_limited_providers(&count);
	MemoryContextReset(limits_cxt);
	old = MemoryContextSwitchTo(limits_cxt);
	limited = palloc(sizeof(char *) * Max(count, 1));
	for (int i = 0; i < count; i++)
		limited[i] = pstrdup(names[i]);
	limited_count = count;
	MemoryContextSwitchTo(old);
	if (IsolationUsesXactSnapshot())
		cache_valid = false;
}

/*
 * limits_apply_to: whether the provider has a limit (inside the store
 * connection).  The only cost for a provider without one.
 */
bool
limits_apply_to(const char *provider)
{
	Oid			relid = policy_relid();

	if (!OidIsValid(relid))
		return false;
	if (!cache_valid || relid != cached_relid)
		load_limited(relid);
	for (int i = 0; i < limited_count; i++)
		if (strcmp(limited[i], provider) == 0)
			return true;
	return false;
}

/* The bucket's capacity: one second's worth, at least one start. */
static double
bucket_capacity(const ProviderLimits *limits)
{
	return Max(limits->max_per_second, 1.0);
}

/*
 * tokens_now: the tokens in the provider's bucket at limits->now: what it
 * held at tokens_at, refilled at max_per_second, up to its capacity (a
 * bucket never used is full).
 */
static double
tokens_now(const ProviderLimits *limits)
{
	double		capacity = bucket_capacity(limits);
	double		elapsed;

	if (!limits->has_tokens)
		return capacity;
	elapsed = Max(0.0, (double) (limits->now - limits->tokens_at) / USECS_PER_SEC);
	return Min(capacity, limits->tokens + elapsed * limits->max_per_second);
}

/* Why a start was refused. */
typedef enum LimitVerdict
{
	LIMIT_ADMITTED,
	LIMIT_IN_FLIGHT,			/* max_in_flight attempts open */
	LIMIT_RATE					/* no token left */
} LimitVerdict;

/*
 * decide: with the provider's row locked, whether one more start may
 * begin: open is the open attempts not counting it; on admission the
 * token is drawn and the bucket written back.  *tokens gets the tokens
 * before the draw (for the HINT).
 */
static LimitVerdict
decide(const char *provider, const ProviderLimits *limits, int64 open, double *tokens)
{
	*tokens = tokens_now(limits);
	if (limits->max_in_flight > 0 && open >= limits->max_in_flight)
		return LIMIT_IN_FLIGHT;
	if (limits->max_per_second > 0 && *tokens < 1.0)
		return LIMIT_RATE;
	/*
	 * The bucket is written back at every start it limits.  A max_in_flight
	 * alone needs only the lock: the count after it sees every earlier
	 * start (see the file's comment).
	 */
	if (limits->max_per_second > 0)
		store_record_start(provider, limits->max_per_second > 0 ? *tokens - 1.0 : 0.0,
						   limits->now);
	return LIMIT_ADMITTED;
}

/*
 * limits_admit_claim: whether claim may start an attempt against provider
 * now (inside the store connection, before the begin).  Never waits and
 * never errors: false when the provider is at a limit (counted as
 * throttled) or another start holds its row.  freeing: open attempts
 * against it that this start closes (a redrive cancels the stalled
 * attempt it repeats: it takes that attempt's slot, not a new one).
 */
bool
limits_admit_claim(const char *provider, int freeing)
{
	ProviderLimits limits;
	double		tokens;
	LimitVerdict verdict;

	if (!limits_apply_to(provider))
		return true;
	if (!store_lock_policy(provider, true, &limits))
		return false;			/* held by another start, or just removed */
	verdict = decide(provider, &limits, store_open_attempts(provider) - freeing, &tokens);
	if (verdict != LIMIT_ADMITTED)
		store_count_throttled(provider);
	return verdict == LIMIT_ADMITTED;
}

/*
 * limits_admit_begun: begin_attempt has just inserted attempt_id (inside
 * the store connection); wait for its provider's row, and refuse the start
 * with JG010 beyond a limit (the error undoes the insert).  DETAIL: the
 * limit and the open count; for the rate, a HINT of when to retry.
 */
void
limits_admit_begun(int64 attempt_id)
{
	char	   *provider = store_attempt_provider(attempt_id);
	ProviderLimits limits;
	double		tokens;
	int64		open;

	if (!limits_apply_to(provider))
		return;
	if (!store_lock_policy(provider, false, &limits))
		return;					/* removed meanwhile: no limit */
	/* the count includes the attempt just inserted */
	open = store_open_attempts(provider) - 1;
	switch (decide(provider, &limits, open, &tokens))
	{
		case LIMIT_ADMITTED:
			return;
		case LIMIT_IN_FLIGHT:
			ereport(ERROR,
					(errcode(ERRCODE_JG_PROVIDER_BUSY),
					 errmsg("provider \"%s\" is busy", provider),
					 errdetail("Its max_in_flight is %d and %lld attempts against it are open.",
							   limits.max_in_flight, (long long) open),
					 errhint("Retry when one of them has ended.")));
			break;
		case LIMIT_RATE:
			{
				double		wait_s = (1.0 - tokens) / limits.max_per_second;
				int			wait_ms = (int) (wait_s * 1000.0) + 1;

				ereport(ERROR,
						(errcode(ERRCODE_JG_PROVIDER_BUSY),
						 errmsg("provider \"%s\" is busy", provider),
						 errdetail("Its max_per_second is %g and no start is left for this second.",
								   limits.max_per_second),
						 errhint("Retry in %d ms.", wait_ms)));
			}
			break;
	}
}

/*
 * limits_put_stats: stats()'s rows provider.<name>.in_flight (open
 * attempts) and provider.<name>.throttled (starts claim passed over for a
 * limit) for each provider with a limit; none in a 1.1 database, and
 * without any limit no table is read (the cache says so).
 */
void
limits_put_stats(ReturnSetInfo *rsinfo)
{
	SavedIdentity caller;		/* restored by store_finish() */

	Oid			relid = policy_relid();
	Relation	rel;
	BlockNumber blocks;

	if (!OidIsValid(relid))
		return;
	/* a policy table never written: nothing to show, and nothing read */
	rel = table_open(relid, AccessShareLock);
	blocks = RelationGetNumberOfBlocks(rel);
	table_close(rel, AccessShareLock);
	if (blocks == 0)
		return;
	store_connect(&caller);
	if (!cache_valid || relid != cached_relid)
		load_limited(relid);
	if (limited_count > 0)
		store_provider_flow(rsinfo);
	store_finish(&caller);
}
