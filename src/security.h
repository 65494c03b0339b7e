/*-------------------------------------------------------------------------
 *
 * security.h
 *	  Running as the owner of jobguard's tables (security.c): every call
 *	  switches to the owner between store_connect() and store_finish(), and
 *	  gives back exactly the identity it found.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_SECURITY_H
#define JOBGUARD_SECURITY_H

#include "postgres.h"

/* The caller's identity, saved while a call runs as the tables' owner. */
typedef struct SavedIdentity
{
	Oid			userid;
	int			sec_context;
} SavedIdentity;

extern Oid	tables_owner_role(void);
extern void become_tables_owner(SavedIdentity *saved);
extern void become_caller_again(const SavedIdentity *saved);

#endif							/* JOBGUARD_SECURITY_H */
