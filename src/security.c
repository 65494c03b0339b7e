/*-------------------------------------------------------------------------
 *
 * security.c
 *	  How jobguard's functions get the rights they need: around its table
 *	  access every call runs as the owner of jobguard's tables, then switches
 *	  back to the caller.
 *
 * The tables are closed to everyone but their owner, so the functions are
 * the only door to them: no caller can bypass the gate or the
 * compare-and-swap with a plain UPDATE.  Switching the user id in C (rather
 * than declaring the functions SECURITY DEFINER) costs no per-call GUC
 * work; the switch is marked security-restricted, so nothing that runs
 * under it can change the session's state.  An error aborts the
 * (sub)transaction, which restores the caller's user id by itself.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "security.h"

/*
 * tables_owner_role: the role that owns jobguard.jobs, i.e. the role that ran
 * CREATE EXTENSION.  The table, not the schema, decides: a schema of that
 * name could have been created by someone else beforehand, a table created
 * by the extension script cannot.  Three syscache look-ups, no scans.
 */
Oid
tables_owner_role(void)
{
	Oid			schema = get_namespace_oid("jobguard", true);
	Oid			jobs = OidIsValid(schema) ? get_relname_relid("jobs", schema) : InvalidOid;
	HeapTuple	tuple;
	Oid			owner;

	if (!OidIsValid(jobs))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("jobguard is not installed in database \"%s\"",
						get_database_name(MyDatabaseId)),
				 errhint("Run CREATE EXTENSION jobguard.")));

	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(jobs));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "jobguard: cache lookup failed for relation %u", jobs);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);

	/*
	 * The schema must be the tables' owner's too: whoever owns a schema
	 * named jobguard can replace what its names resolve to, and every
	 * statement here resolves jobguard.* by name while running as the
	 * owner.  CREATE EXTENSION refuses such a schema; this refuses one
	 * that changed hands afterwards.
	 */
	tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(schema));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "jobguard: cache lookup failed for schema %u", schema);
	if (((Form_pg_namespace) GETSTRUCT(tuple))->nspowner != owner)
	{
		ReleaseSysCache(tuple);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("schema \"jobguard\" is not owned by the owner of jobguard's tables"),
				 errdetail("Its owner could replace the objects jobguard uses."),
				 errhint("ALTER SCHEMA jobguard OWNER TO the role that owns jobguard.jobs.")));
	}
	ReleaseSysCache(tuple);
	return owner;
}

/*
 * become_tables_owner: switch to the owner of jobguard's tables, saving the
 * caller's identity in *saved for become_caller_again().
 */
void
become_tables_owner(SavedIdentity *saved)
{
	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	SetUserIdAndSecContext(tables_owner_role(),
						   saved->sec_context |
						   SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

/* become_caller_again: switch back to the identity saved before. */
void
become_caller_again(const SavedIdentity *saved)
{
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
}
