/*-------------------------------------------------------------------------
 *
 * pg_compat.h
 *	  What differs between the PostgreSQL major versions jobguard builds
 *	  against, in one place: each difference is a macro or an inline
 *	  function here, so that a call site reads the same on every major.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_PG_COMPAT_H
#define JOBGUARD_PG_COMPAT_H

#include "catalog/pg_database.h"
#include "utils/acl.h"

/* database_owned_by: whether a role owns a database (16 made the check generic) */
#if PG_VERSION_NUM >= 160000
#define database_owned_by(dboid, roleid) object_ownercheck(DatabaseRelationId, (dboid), (roleid))
#else
#define database_owned_by(dboid, roleid) pg_database_ownercheck((dboid), (roleid))
#endif

#endif							/* JOBGUARD_PG_COMPAT_H */
