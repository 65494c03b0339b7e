/*-------------------------------------------------------------------------
 *
 * limits.c
 *	  The provider limits of jobguard.provider_policy, enforced for every
 *	  start of an attempt on either back end: max_in_flight (open attempts,
 *	  started or unknown, against the provider) and max_per_second (a token
 *	  bucket holding one second's worth, at least one token); and the
 *	  pause of 1.3 (no start at all while a provider is paused).
 *
 * One rule, in one place: the starts against one provider with a limit
 * are decided one at a time, each under the provider's start lock (a
 * lock of the lock manager, taken per provider and released as soon as
 * the start's attempt is inserted, not held to commit):
 *
 *   - max_in_flight: under the lock the open attempts are counted with a
 *     dirty snapshot (open_attempts_now), which also sees attempts that
 *     transactions still in progress have inserted: every start decided
 *     before this one, committed or not, takes its slot (a start that
 *     rolls back frees it).  An attempt that a transaction in progress is
 *     ending still counts until that commits.  So the count never misses
 *     a start, under any isolation level, and a start never waits for
 *     another's commit.
 *   - max_per_second: the bucket lives in the provider's policy row, which
 *     a start against a rate locks until its commit (before the start
 *     lock) and writes back; under REPEATABLE READ or SERIALIZABLE a start
 *     whose snapshot misses an earlier one cannot lock the row (could not
 *     serialize, 40001): it fails rather than overruns.
 *
 * begin_attempt (limits_admit_begun) inserts its attempt first, then
 * waits for the lock (nothing waits while holding it), and is refused with
 * JG010 beyond a limit; claim (limits_admit_claim) never waits and never
 * errors: it takes the lock only if it is free, and keeps it across the
 * insert of its attempt (limits_start_done), so that the next start counts
 * it; a provider at its limit, or whose lock or row another start holds,
 * is passed over.  Providers without a limit cost one look-up in a
 * per-backend cache of the providers that have one and their limits (no
 * SQL): the trigger provider_policy_changed sends a relcache invalidation
 * whenever a limit changes, and the cache is read again.  The same cache
 * knows whether any provider deduplicates (dedupes_for, which 1.3's
 * trigger watches too): without one no attempt can be redriven, and claim
 * does not look for redrives (limits_may_redrive).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "errcodes.h"
#include "limits.h"
#include "pg_compat.h"
#include "schema_level.h"
#include "store.h"

/* The per-backend cache of the providers that have a limit. */
static Oid	cached_relid = InvalidOid;	/* provider_policy's OID it is of */
static bool cache_valid = false;
static int	limited_count = 0;
static char **limited = NULL;
static ProviderLimits *limited_limits = NULL;	/* their limits, no tokens */
static bool any_dedupes = true; /* a provider deduplicates, or not known */
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
	ProviderLimits *limits;
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
	names = store_limited_providers(&count, &limits);
	MemoryContextReset(limits_cxt);
	old = MemoryContextSwitchTo(limits_cxt);
	limited = palloc(sizeof(char *) * Max(count, 1));
	limited_limits = palloc(sizeof(ProviderLimits) * Max(count, 1));
	for (int i = 0; i < count; i++)
	{
		limited[i] = pstrdup(names[i]);
		limited_limits[i] = limits[i];
	}
	limited_count = count;
	MemoryContextSwitchTo(old);
	/* a 1.2 database's trigger does not watch dedupes_for: always look there */
	any_dedupes = !schema_is_1_3() || store_any_dedupes();
	if (IsolationUsesXactSnapshot())
		cache_valid = false;
}

/*
 * cache_ready: make the cache current (inside the store connection),
 * reading it again after an invalidation; false in a 1.1 database, which
 * has no policies.
 */
static bool
cache_ready(void)
{
	Oid			relid = policy_relid();

	if (!OidIsValid(relid))
		return false;
	if (!cache_valid || relid != cached_relid)
		load_limited(relid);
	return true;
}

/*
 * cached_limits: the provider's limits from the cache (inside the store
 * connection), or NULL when it has none.
 */
static const ProviderLimits *
cached_limits(const char *provider)
{
	if (!cache_ready())
		return NULL;
	for (int i = 0; i < limited_count; i++)
		if (strcmp(limited[i], provider) == 0)
			return &limited_limits[i];
	return NULL;
}

/*
 * limits_apply_to: whether the provider has a limit (inside the store
 * connection).  The only cost for a provider without one.
 */
bool
limits_apply_to(const char *provider)
{
	return cached_limits(provider) != NULL;
}

/*
 * any_limits: whether any provider has a limit (inside the store
 * connection), so that a start need not even look up its provider.
 */
static bool
any_limits(void)
{
	return cache_ready() && limited_count > 0;
}

/*
 * limits_may_redrive: whether any provider deduplicates (inside the store
 * connection), from the cache: claim looks for redrives only then.  In a
 * 1.1 database there are none; in a 1.2 database always (its trigger does
 * not tell a change of dedupes_for).
 */
bool
limits_may_redrive(void)
{
	return cache_ready() && any_dedupes;
}

/* The start lock this backend holds, if any (limits_start_done). */
static bool start_lock_held = false;
static LOCKTAG start_lock;

/*
 * The start lock's tag: an advisory lock tag of the database, with a
 * fourth field no advisory lock function uses (they use 1 and 2), so that
 * no advisory lock of an application can collide with it.  Providers
 * whose names hash alike share a lock, which only serializes them more.
 */
#define START_LOCK_CLASS 0x4A47	/* "JG" */

/*
 * take_start_lock: take the provider's start lock, waiting for it unless
 * dont_wait (then false when another start holds it).  Held until
 * limits_start_done(), or the (sub)transaction's abort releases it.
 */
static bool
take_start_lock(const char *provider, bool dont_wait)
{
	uint32		hash = hash_bytes((const unsigned char *) provider, strlen(provider));

	start_lock_held = false;
	SET_LOCKTAG_ADVISORY(start_lock, MyDatabaseId, 0, hash, START_LOCK_CLASS);
	if (LockAcquire(&start_lock, ExclusiveLock, false, dont_wait) == LOCKACQUIRE_NOT_AVAIL)
		return false;
	start_lock_held = true;
	return true;
}

/*
 * limits_start_done: the start limits_admit_claim() admitted has inserted
 * its attempt (or given up): release the provider's start lock, so that
 * the next start decides, counting it.  Nothing when no lock is held.
 */
void
limits_start_done(void)
{
	if (!start_lock_held)
		return;
	start_lock_held = false;
	LockRelease(&start_lock, ExclusiveLock, false);
}

/* int64_order: qsort's order of attempt ids. */
static int
int64_order(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : x > y;
}

/* text_is: whether a text datum is the C string s. */
static bool
text_is(Datum d, const char *s)
{
	text	   *t = DatumGetTextPP(d);
	size_t		len = strlen(s);

	return VARSIZE_ANY_EXHDR(t) == len && memcmp(VARDATA_ANY(t), s, len) == 0;
}

/* An index scan of jobguard.attempts (attempts_scan_begin/_end). */
typedef struct AttemptsScan
{
	Relation	heap;
	Relation	index;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	AttrNumber	id_att;			/* the columns the callers read */
	AttrNumber	state_att;
	AttrNumber	provider_att;
} AttemptsScan;

/*
 * attempts_index_scan: scan s's table through its index index_name (NULL:
 * the primary key) for rows whose first index column equals value
 * (compared by eq_proc), as snapshot sees them.
 */
static void
attempts_index_scan(AttemptsScan *s, Oid schema, const char *index_name,
					RegProcedure eq_proc, Datum value, Snapshot snapshot)
{
	Oid			index_oid = index_name ? get_relname_relid(index_name, schema) :
		jg_primary_key_index(s->heap);
	ScanKeyData key;

	if (!OidIsValid(index_oid))
		elog(ERROR, "jobguard: jobguard.attempts lacks the index %s limits read",
			 index_name ? index_name : "of its primary key");
	s->index = index_open(index_oid, AccessShareLock);
	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   s->index->rd_indcollation[0], eq_proc, value);
	s->scan = jg_index_beginscan(s->heap, s->index, snapshot, 1, 0);
	index_rescan(s->scan, &key, 1, NULL, 0);
}

/* attempts_index_scan_end: end an attempts_index_scan() scan. */
static void
attempts_index_scan_end(AttemptsScan *s)
{
	index_endscan(s->scan);
	index_close(s->index, AccessShareLock);
}

/*
 * attempts_scan_begin: scan jobguard.attempts through one of its indexes
 * (attempts_index_scan); attempts_scan_next moves to another index of the
 * same table, attempts_scan_end ends it.
 */
static void
attempts_scan_begin(AttemptsScan *s, const char *index_name, RegProcedure eq_proc,
					Datum value, Snapshot snapshot)
{
	Oid			schema = get_namespace_oid("jobguard", false);
	Oid			heap_oid = get_relname_relid("attempts", schema);

	if (!OidIsValid(heap_oid))
		elog(ERROR, "jobguard: the table jobguard.attempts is missing");
	s->heap = table_open(heap_oid, AccessShareLock);
	s->id_att = get_attnum(heap_oid, "id");
	s->state_att = get_attnum(heap_oid, "state");
	s->provider_att = get_attnum(heap_oid, "provider");
	if (s->id_att == InvalidAttrNumber || s->state_att == InvalidAttrNumber ||
		s->provider_att == InvalidAttrNumber)
		elog(ERROR, "jobguard: jobguard.attempts lacks a column limits read");
	attempts_index_scan(s, schema, index_name, eq_proc, value, snapshot);
	s->slot = table_slot_create(s->heap, NULL);
}

/* attempts_scan_next: go on with the index index_name, as attempts_scan_begin. */
static void
attempts_scan_next(AttemptsScan *s, const char *index_name, RegProcedure eq_proc,
				   Datum value, Snapshot snapshot)
{
	attempts_index_scan_end(s);
	attempts_index_scan(s, RelationGetNamespace(s->heap), index_name, eq_proc, value,
						snapshot);
}

/* attempts_scan_end: end an attempts_scan_begin() scan. */
static void
attempts_scan_end(AttemptsScan *s)
{
	ExecDropSingleTupleTableSlot(s->slot);
	attempts_index_scan_end(s);
	table_close(s->heap, AccessShareLock);
}

/*
 * collect_open_ids: append to *ids (n of *capacity used) the ids of the
 * rows scan s returns whose state is started or unknown (a row version
 * an index still points to may have ended since).
 */
static void
collect_open_ids(AttemptsScan *s, int64 **ids, int *n, int *capacity)
{
	while (index_getnext_slot(s->scan, ForwardScanDirection, s->slot))
	{
		bool		isnull;
		Datum		state = slot_getattr(s->slot, s->state_att, &isnull);

		if (isnull || !(text_is(state, "started") || text_is(state, "unknown")))
			continue;
		if (*n == *capacity)
		{
			*capacity *= 2;
			*ids = repalloc(*ids, sizeof(int64) * *capacity);
		}
		(*ids)[(*n)++] = DatumGetInt64(slot_getattr(s->slot, s->id_att, &isnull));
	}
}

/*
 * open_attempts_now: the attempts against provider that are open (started
 * or unknown) now, through the indexes attempts_started and
 * attempts_unknown (both lead with the provider) with a dirty snapshot:
 * committed ones and those inserted by transactions still in progress (not
 * rolled back).  A row a transaction in progress updates shows both
 * versions (one in each index when it is being swept to unknown), so
 * attempts are counted by id, once.  Run under the provider's start lock
 * (see the file's comment).
 */
static int64
open_attempts_now(const char *provider)
{
	AttemptsScan s;
	Datum		name = CStringGetTextDatum(provider);
	SnapshotData dirty;
	int			capacity = 64;
	int			n = 0;
	int64	   *ids = palloc(sizeof(int64) * capacity);
	int64		count = 0;

	InitDirtySnapshot(dirty);
	attempts_scan_begin(&s, "attempts_started", F_TEXTEQ, name, &dirty);
	collect_open_ids(&s, &ids, &n, &capacity);
	attempts_scan_next(&s, "attempts_unknown", F_TEXTEQ, name, &dirty);
	collect_open_ids(&s, &ids, &n, &capacity);
	attempts_scan_end(&s);
	qsort(ids, n, sizeof(int64), int64_order);
	for (int i = 0; i < n; i++)
		if (i == 0 || ids[i] != ids[i - 1])
			count++;
	pfree(ids);
	return count;
}

/*
 * begun_attempt_provider: the provider of the attempt this transaction has
 * just inserted, through the attempts' primary key with a snapshot that
 * sees the transaction's own rows (no SQL: begin_attempt pays it on every
 * call while any provider has a limit).
 */
static char *
begun_attempt_provider(int64 attempt_id)
{
	AttemptsScan s;
	bool		isnull;
	char	   *provider;

	attempts_scan_begin(&s, NULL, F_INT8EQ, Int64GetDatum(attempt_id), SnapshotSelf);
	if (!index_getnext_slot(s.scan, ForwardScanDirection, s.slot))
		elog(ERROR, "jobguard: attempt %lld vanished after its insert", (long long) attempt_id);
	provider = TextDatumGetCString(slot_getattr(s.slot, s.provider_att, &isnull));
	attempts_scan_end(&s);
	return provider;
}

/*
 * start_limits: the limits a start against the provider is decided by,
 * into *limits: its row locked (skip_locked: unless another start holds
 * it) when it has a rate, for the bucket; else the cached limits and no
 * lock.  False when it has no limit any more, or its row is held.
 */
static bool
start_limits(const char *provider, const ProviderLimits *cached, bool skip_locked,
			 ProviderLimits *limits)
{
	if (cached->max_per_second > 0)
		return store_lock_policy(provider, skip_locked, limits);
	*limits = *cached;
	return true;
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
 * decide: under the provider's start lock (and with its row locked when
 * it has a rate), whether one more start may begin: open is the open attempts not counting it; on admission the
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
	 * alone needs only the start lock: the count under it sees every
	 * earlier start (see the file's comment).
	 */
	if (limits->max_per_second > 0)
		store_record_start(provider, *tokens - 1.0, limits->now);
	return LIMIT_ADMITTED;
}

/*
 * limits_admit_claim: whether claim may start an attempt against provider
 * now (inside the store connection, before the begin).  Never waits and
 * never errors: false when the provider is paused, or at a limit (counted as
 * throttled) or another start holds its start lock or its row.  When it
 * admits a provider with a limit, the start lock stays held: the caller
 * inserts the attempt, then calls limits_start_done().  freeing: open
 * attempts against it that this start closes (a redrive cancels the
 * stalled attempt it repeats: it takes that attempt's slot, not a new one).
 */
bool
limits_admit_claim(const char *provider, int freeing)
{
	const ProviderLimits *cached;
	ProviderLimits limits;
	double		tokens;

	start_lock_held = false;
	if (!any_limits() || (cached = cached_limits(provider)) == NULL)
		return true;
	if (cached->paused)
		return false;			/* no new start while paused (1.3) */
	if (!start_limits(provider, cached, true, &limits))
		return false;			/* held by another start, or just removed */
	if (!take_start_lock(provider, true))
		return false;
	if (decide(provider, &limits, open_attempts_now(provider) - freeing, &tokens) ==
		LIMIT_ADMITTED)
		return true;
	limits_start_done();
	/* throttled is counted in the row, locked here if a rate has not locked it */
	if (cached->max_per_second > 0 || store_lock_policy(provider, true, &limits))
		store_count_throttled(provider);
	return false;
}

/*
 * limits_admit_begun: begin_attempt has just inserted attempt_id (inside
 * the store connection); refuse the start with JG010 when its provider is
 * paused; else wait for its provider's start lock (and its row,
 * with a rate), and refuse the start with JG010 beyond a limit (the error
 * undoes the insert).  DETAIL: the limit and the open count; for the rate,
 * a HINT of when to retry.
 */
void
limits_admit_begun(int64 attempt_id)
{
	const ProviderLimits *cached;
	char	   *provider;
	ProviderLimits limits;
	double		tokens;
	int64		open;
	LimitVerdict verdict;

	if (!any_limits())
		return;
	provider = begun_attempt_provider(attempt_id);
	if ((cached = cached_limits(provider)) == NULL)
		return;
	if (cached->paused)
		ereport(ERROR,
				(errcode(ERRCODE_JG_PROVIDER_BUSY),
				 errmsg("provider \"%s\" is busy", provider),
				 errdetail("Provider \"%s\" is paused: no new attempt starts against it, and its open attempts run on.",
						   provider),
				 errhint("jobguard.set_provider_policy('%s', paused => false) lifts the pause.",
						 provider)));
	if (!start_limits(provider, cached, false, &limits))
		return;					/* removed meanwhile: no limit */
	take_start_lock(provider, false);
	/* the count includes the attempt just inserted */
	open = open_attempts_now(provider) - 1;
	verdict = decide(provider, &limits, open, &tokens);
	limits_start_done();
	switch (verdict)
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
				/* at most a year: a rate read clamped is never that slow */
				double		wait_s = Min((1.0 - tokens) / limits.max_per_second,
										 (double) SECS_PER_DAY * 366);
				long long	wait_ms = (long long) (wait_s * 1000.0) + 1;

				ereport(ERROR,
						(errcode(ERRCODE_JG_PROVIDER_BUSY),
						 errmsg("provider \"%s\" is busy", provider),
						 errdetail("Its max_per_second is %g and no start is left for this second.",
								   limits.max_per_second),
						 errhint("Retry in %lld ms.", wait_ms)));
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
