/*-------------------------------------------------------------------------
 *
 * scopes.c
 *	  Which scopes (client applications) a role may act on and read, from
 *	  jobguard.grants and the role's memberships, cached per backend.
 *
 * The rights of one role are worked out once and kept until something they
 * depend on changes: a write to jobguard.grants (its trigger sends a
 * relcache invalidation of the table, see jobguard_table_changed) or any
 * change of roles or memberships (syscache callbacks).  A call then costs
 * one comparison of role ids, so scopes take nothing measurable from the
 * hot path.
 *
 * The grants table is read directly (heap scan), not through SQL: it is
 * small, the caller may not read it, and this runs inside views' quals.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "scopes.h"
#include "security.h"

PG_FUNCTION_INFO_V1(jobguard_table_changed);
PG_FUNCTION_INFO_V1(jobguard_caller_scope);
PG_FUNCTION_INFO_V1(jobguard_scope_visible);
PG_FUNCTION_INFO_V1(jobguard_payloads_visible);

/* One scope a role may read, and whether with payloads. */
typedef struct ReadableScope
{
	char	   *scope;
	bool		payloads;
} ReadableScope;

/* What one role may do, worked out from jobguard.grants. */
typedef struct ScopeRights
{
	Oid			userid;
	bool		operator;		/* acts on and reads every scope */
	bool		any_grant;		/* some grant applies to the role */
	const char *client_scope;	/* the scope it is a client of, or NULL */
	const char *other_client_scope; /* a second, different one: ambiguous */
	bool		read_all;		/* a reader of every scope */
	bool		read_all_payloads;
	int			nreadable;
	ReadableScope *readable;	/* scopes it reads as a reader */
} ScopeRights;

static MemoryContext rights_cxt = NULL;
static ScopeRights *cached = NULL;
static Oid	grants_relid = InvalidOid;
static bool callbacks_registered = false;

/* rights_invalidate: forget the cached rights (any role change). */
static void
rights_invalidate_syscache(Datum arg, int cacheid, uint32 hashvalue)
{
	cached = NULL;
}

/* rights_invalidate_relcache: forget them when jobguard.grants changed. */
static void
rights_invalidate_relcache(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == grants_relid)
		cached = NULL;
}

/* register_callbacks: once per backend, before the first cache fill. */
static void
register_callbacks(void)
{
	if (callbacks_registered)
		return;
	CacheRegisterRelcacheCallback(rights_invalidate_relcache, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, rights_invalidate_syscache, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHOID, rights_invalidate_syscache, (Datum) 0);
	callbacks_registered = true;
}

/*
 * add_grant: fold one row of jobguard.grants that applies to the role into
 * its rights.
 */
static void
add_grant(ScopeRights *r, const char *kind, const char *scope, bool payloads)
{
	r->any_grant = true;
	if (strcmp(kind, "operator") == 0)
		r->operator = true;
	else if (strcmp(kind, "client") == 0)
	{
		if (r->client_scope == NULL)
			r->client_scope = pstrdup(scope);
		else if (strcmp(r->client_scope, scope) != 0 && r->other_client_scope == NULL)
			r->other_client_scope = pstrdup(scope);
	}
	else if (scope == NULL)
	{
		r->read_all = true;
		r->read_all_payloads |= payloads;
	}
	else
	{
		r->readable = repalloc(r->readable, sizeof(ReadableScope) * (r->nreadable + 1));
		r->readable[r->nreadable].scope = pstrdup(scope);
		r->readable[r->nreadable].payloads = payloads;
		r->nreadable++;
	}
}

/*
 * load_rights: the rights of a role, from every row of jobguard.grants
 * whose role it is a member of (a granted role chain; superuser rights do
 * not count as membership).  Superusers and the tables' owner operate.
 */
static ScopeRights *
load_rights(Oid userid)
{
	Oid			schema = get_namespace_oid("jobguard", false);
	MemoryContext old;
	ScopeRights *r;
	Relation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	Snapshot	snap;
	AttrNumber	att_role,
				att_kind,
				att_scope,
				att_payloads;

	register_callbacks();
	if (rights_cxt == NULL)
		rights_cxt = AllocSetContextCreate(TopMemoryContext, "jobguard scope rights",
										   ALLOCSET_SMALL_SIZES);
	MemoryContextReset(rights_cxt);
	cached = NULL;

	grants_relid = get_relname_relid("grants", schema);
	if (!OidIsValid(grants_relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("jobguard.grants does not exist"),
				 errhint("Run ALTER EXTENSION jobguard UPDATE.")));

	old = MemoryContextSwitchTo(rights_cxt);
	r = palloc0(sizeof(ScopeRights));
	r->userid = userid;
	r->readable = palloc(sizeof(ReadableScope));
	r->operator = superuser_arg(userid) || userid == tables_owner_role();

	rel = table_open(grants_relid, AccessShareLock);
	att_role = get_attnum(grants_relid, "role");
	att_kind = get_attnum(grants_relid, "kind");
	att_scope = get_attnum(grants_relid, "scope");
	att_payloads = get_attnum(grants_relid, "payloads");
	if (att_role == InvalidAttrNumber || att_kind == InvalidAttrNumber ||
		att_scope == InvalidAttrNumber || att_payloads == InvalidAttrNumber)
		elog(ERROR, "jobguard: jobguard.grants lacks a column it should have");

	/*
	 * Every committed row, whatever the isolation level (the cache outlives
	 * the transaction).  In a parallel plan no new latest snapshot may be
	 * taken; the catalog snapshot is one, taken no earlier than the
	 * invalidations table_open() accepted (a change of these rows sends
	 * one), so it sees what the latest would.
	 */
	snap = RegisterSnapshot(IsInParallelMode() ? GetCatalogSnapshot(grants_relid)
							: GetLatestSnapshot());
	scan = table_beginscan(rel, snap, 0, NULL);
	slot = table_slot_create(rel, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Oid			role = DatumGetObjectId(slot_getattr(slot, att_role, &isnull));
		char	   *kind;
		char	   *scope = NULL;
		bool		payloads;
		Datum		d;

		if (isnull || !is_member_of_role_nosuper(userid, role))
			continue;
		kind = TextDatumGetCString(slot_getattr(slot, att_kind, &isnull));
		d = slot_getattr(slot, att_scope, &isnull);
		if (!isnull)
			scope = TextDatumGetCString(d);
		payloads = DatumGetBool(slot_getattr(slot, att_payloads, &isnull));
		add_grant(r, kind, scope, payloads);
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);
	MemoryContextSwitchTo(old);

	cached = r;
	return r;
}

/* rights_of: the (cached) rights of a role. */
static const ScopeRights *
rights_of(Oid userid)
{
	if (cached != NULL && cached->userid == userid)
		return cached;
	return load_rights(userid);
}

/*
 * require_one_client_scope: a role that is a client of two scopes must
 * choose one with SET ROLE before it acts (22023).
 */
static void
require_one_client_scope(const ScopeRights *r)
{
	if (r->other_client_scope != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("role \"%s\" is a client of more than one scope",
						GetUserNameFromId(r->userid, false)),
				 errdetail("It is a member of client roles of scope \"%s\" and of scope \"%s\".",
						   r->client_scope, r->other_client_scope),
				 errhint("SET ROLE to the client role of the scope to act in.")));
}

/*
 * scopes_submit_scope: the scope a role's submits go to: the scope it is a
 * client of, else "default" (operators, superusers, roles without grants).
 * A reader that is no client cannot submit (42501).
 */
const char *
scopes_submit_scope(Oid userid)
{
	const ScopeRights *r = rights_of(userid);

	require_one_client_scope(r);
	if (r->client_scope != NULL)
		return r->client_scope;
	if (r->operator || !r->any_grant)
		return DEFAULT_SCOPE;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("role \"%s\" may only read jobguard's jobs",
					GetUserNameFromId(userid, false)),
			 errhint("A client role is made with jobguard.grant_client().")));
	return NULL;				/* keep the compiler quiet */
}

/*
 * scopes_acting_scope: the scope whose jobs a role may act on (finish,
 * cancel, ...), or NULL for every scope (operators).
 */
const char *
scopes_acting_scope(Oid userid)
{
	const ScopeRights *r = rights_of(userid);

	if (r->operator)
		return NULL;
	return scopes_submit_scope(userid);
}

/*
 * scopes_may_read: whether a role may read the jobs of a scope, and
 * (*payloads) their params, results and errors.  A member of client roles
 * of two scopes reads as it acts: not until it has chosen one with SET
 * ROLE (22023).
 */
bool
scopes_may_read(Oid userid, const char *scope, bool *payloads)
{
	const ScopeRights *r = rights_of(userid);
	bool		visible = false;

	*payloads = false;
	if (!r->operator)
		require_one_client_scope(r);
	if (r->operator ||
		(r->client_scope != NULL && strcmp(r->client_scope, scope) == 0) ||
		(r->other_client_scope != NULL && strcmp(r->other_client_scope, scope) == 0) ||
		(!r->any_grant && strcmp(scope, DEFAULT_SCOPE) == 0))
	{
		*payloads = true;
		return true;
	}
	if (r->read_all)
	{
		visible = true;
		*payloads = r->read_all_payloads;
	}
	for (int i = 0; i < r->nreadable; i++)
		if (strcmp(r->readable[i].scope, scope) == 0)
		{
			visible = true;
			*payloads |= r->readable[i].payloads;
		}
	return visible;
}

/*
 * scopes_allow: whether a role may use (act on, or read) the jobs of a
 * scope.  Acting, it raises no error: a client of several scopes acts on
 * none; reading, such a client gets 22023 (scopes_may_read).
 */
bool
scopes_allow(Oid userid, ScopeUse use, const char *scope)
{
	const ScopeRights *r = rights_of(userid);
	bool		payloads;

	if (use == SCOPE_READ)
		return scopes_may_read(userid, scope, &payloads);
	if (r->operator)
		return true;
	if (r->other_client_scope != NULL)
		return false;
	if (r->client_scope != NULL)
		return strcmp(r->client_scope, scope) == 0;
	return !r->any_grant && strcmp(scope, DEFAULT_SCOPE) == 0;
}

/* scopes_reads_everything: whether a role reads every scope with payloads. */
bool
scopes_reads_everything(Oid userid)
{
	const ScopeRights *r = rights_of(userid);

	return r->operator || (r->read_all && r->read_all_payloads);
}

/*
 * jobguard.table_changed(): statement trigger on jobguard.grants and
 * jobguard.policies.  A relcache invalidation of the table reaches every
 * backend at its next command once this transaction commits (and this
 * backend at once), and makes them read what they cached from it again:
 * the rights of their roles (here), the key policies (policies.c).
 */
Datum
jobguard_table_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("jobguard: table_changed() must be called as a trigger")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	PG_RETURN_POINTER(NULL);
}

/* jobguard.caller_scope() -> the scope the calling role submits in. */
Datum
jobguard_caller_scope(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(scopes_submit_scope(GetUserId())));
}

/* scope_arg: a view's scope argument (never NULL: the column is NOT NULL). */
static char *
scope_arg(FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		return NULL;
	return TextDatumGetCString(PG_GETARG_DATUM(0));
}

/* jobguard.scope_visible(scope) -> may the calling role read its jobs? */
Datum
jobguard_scope_visible(PG_FUNCTION_ARGS)
{
	char	   *scope = scope_arg(fcinfo);
	bool		payloads;

	PG_RETURN_BOOL(scope != NULL && scopes_may_read(GetUserId(), scope, &payloads));
}

/* jobguard.payloads_visible(scope) -> may it read their payloads too? */
Datum
jobguard_payloads_visible(PG_FUNCTION_ARGS)
{
	char	   *scope = scope_arg(fcinfo);
	bool		payloads;

	PG_RETURN_BOOL(scope != NULL && scopes_may_read(GetUserId(), scope, &payloads) &&
				   payloads);
}
