/*-------------------------------------------------------------------------
 *
 * policies.c
 *	  The key policies of jobguard.policies, cached per backend, for
 *	  submit's conflict path: identity keys and after_failure.
 *
 * A replay of an operation without a policy must cost what it cost in
 * 1.0, so the policies are not looked up with SQL on every replay: the
 * (small) table is read once, directly, and kept until a write to it
 * sends a relcache invalidation (its statement trigger, see
 * jobguard_table_changed in scopes.c).  Retention is read by purge(), in
 * SQL, and is not cached here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "policies.h"

/* One operation's policy, as cached. */
typedef struct CachedPolicy
{
	char	   *operation;
	KeyPolicy	policy;
} CachedPolicy;

static MemoryContext policies_cxt = NULL;
static CachedPolicy *cached = NULL;
static int	ncached = 0;
static bool cache_valid = false;
static Oid	policies_relid = InvalidOid;
static bool callback_registered = false;

/* policies_invalidate: forget the cache when jobguard.policies changed. */
static void
policies_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == policies_relid)
		cache_valid = false;
}

/*
 * load_policies: read every row of jobguard.policies into the cache
 * (operation, identity, after_failure).
 */
static void
load_policies(void)
{
	Oid			schema = get_namespace_oid("jobguard", false);
	Relation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	Snapshot	snap;
	AttrNumber	att_operation,
				att_identity,
				att_after_failure;
	MemoryContext old;
	int			allocated = 8;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(policies_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (policies_cxt == NULL)
		policies_cxt = AllocSetContextCreate(TopMemoryContext, "jobguard key policies",
											 ALLOCSET_SMALL_SIZES);
	MemoryContextReset(policies_cxt);
	cached = NULL;
	ncached = 0;

	policies_relid = get_relname_relid("policies", schema);
	if (!OidIsValid(policies_relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("jobguard.policies does not exist"),
				 errhint("Run ALTER EXTENSION jobguard UPDATE.")));
	att_operation = get_attnum(policies_relid, "operation");
	att_identity = get_attnum(policies_relid, "identity");
	att_after_failure = get_attnum(policies_relid, "after_failure");
	if (att_operation == InvalidAttrNumber || att_identity == InvalidAttrNumber ||
		att_after_failure == InvalidAttrNumber)
		elog(ERROR, "jobguard: jobguard.policies lacks a column it should have");

	old = MemoryContextSwitchTo(policies_cxt);
	cached = palloc(sizeof(CachedPolicy) * allocated);
	rel = table_open(policies_relid, AccessShareLock);
	/*
	 * Every committed row, whatever the isolation level (the cache outlives
	 * the transaction).  In a parallel plan no new latest snapshot may be
	 * taken; the catalog snapshot is one, taken no earlier than the
	 * invalidations table_open() accepted (a change of these rows sends
	 * one), so it sees what the latest would.
	 */
	snap = RegisterSnapshot(IsInParallelMode() ? GetCatalogSnapshot(policies_relid)
							: GetLatestSnapshot());
	scan = table_beginscan(rel, snap, 0, NULL);
	slot = table_slot_create(rel, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		CachedPolicy *c;
		bool		isnull;
		Datum		d;

		if (ncached == allocated)
		{
			allocated *= 2;
			cached = repalloc(cached, sizeof(CachedPolicy) * allocated);
		}
		c = &cached[ncached++];
		c->operation = TextDatumGetCString(slot_getattr(slot, att_operation, &isnull));
		d = slot_getattr(slot, att_identity, &isnull);
		c->policy.has_identity = !isnull;
		c->policy.identity = isnull ? (Datum) 0 : datumCopy(d, false, -1);
		c->policy.new_job_after_failure =
			strcmp(TextDatumGetCString(slot_getattr(slot, att_after_failure, &isnull)),
				   "new_job") == 0;
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
	MemoryContextSwitchTo(old);
	cache_valid = true;
}

/*
 * policy_of: the key policy of an operation; false when it has none.  The
 * identity array stays valid until the policies change.
 */
bool
policy_of(const char *operation, KeyPolicy *policy)
{
	if (!cache_valid)
		load_policies();
	for (int i = 0; i < ncached; i++)
		if (strcmp(cached[i].operation, operation) == 0)
		{
			*policy = cached[i].policy;
			return true;
		}
	return false;
}
