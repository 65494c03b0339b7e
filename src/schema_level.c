/*-------------------------------------------------------------------------
 *
 * schema_level.c
 *	  Whether the database holds jobguard 1.3's SQL objects, or still 1.2's
 *	  or 1.1's.
 *
 * The 1.2 library serves a 1.1 database until ALTER EXTENSION jobguard
 * UPDATE runs (doc/reference.md, "Versions and updating"): every 1.1
 * function keeps its 1.1 behaviour there.  The SQL back end then runs the
 * 1.1 form of each statement that names a 1.2 column, and the fast path
 * steps aside (its catalog check refuses tables whose columns differ from
 * store_columns.h).  The test is one column that the update adds,
 * jobguard.attempts.provider_key, looked up in the syscache: no SPI, cheap
 * enough for every call.  The update adds every 1.2 column in one
 * transaction (jobs.priority and jobs.retries too), so this one column
 * stands for all of them.
 *
 * The 1.3 library serves a 1.2 database the same way (schema_is_1_3): the
 * statements that name a 1.3 column have 1.2 forms, and every 1.2
 * function keeps its 1.2 behaviour there.  The column that stands for
 * 1.3's objects is jobguard.certifications.contract_version, added by the
 * update's part 1 in the same transaction as the rest of 1.3.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/attnum.h"
#include "catalog/namespace.h"
#include "utils/lsyscache.h"

#include "schema_level.h"

/*
 * schema_is_1_2: true when jobguard.attempts has the column provider_key,
 * that is when the update to 1.2 (or a fresh 1.2 install) has run.
 */
bool
schema_is_1_2(void)
{
	Oid			schema = get_namespace_oid("jobguard", true);
	Oid			relid;

	if (!OidIsValid(schema))
		return false;
	relid = get_relname_relid("attempts", schema);
	if (!OidIsValid(relid))
		return false;
	return get_attnum(relid, "provider_key") != InvalidAttrNumber;
}

/*
 * schema_is_1_3: true when jobguard.certifications has the column
 * contract_version, that is when the update to 1.3 (or a fresh 1.3
 * install) has run.
 */
bool
schema_is_1_3(void)
{
	Oid			schema = get_namespace_oid("jobguard", true);
	Oid			relid;

	if (!OidIsValid(schema))
		return false;
	relid = get_relname_relid("certifications", schema);
	if (!OidIsValid(relid))
		return false;
	return get_attnum(relid, "contract_version") != InvalidAttrNumber;
}

/*
 * require_schema_1_2: refuse a 1.2 function (0A000) in a database whose
 * objects are still 1.1's.  Such a function is only reachable there when
 * called through a definition made by hand: the update creates them.
 */
void
require_schema_1_2(const char *function)
{
	if (!schema_is_1_2())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("jobguard.%s() needs jobguard 1.2's objects", function),
				 errhint("Run ALTER EXTENSION jobguard UPDATE.")));
}

/*
 * require_schema_1_3: refuse a 1.3 function (0A000) in a database whose
 * objects are still 1.2's (or 1.1's), as require_schema_1_2() does.
 */
void
require_schema_1_3(const char *function)
{
	if (!schema_is_1_3())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("jobguard.%s() needs jobguard 1.3's objects", function),
				 errhint("Run ALTER EXTENSION jobguard UPDATE.")));
}
