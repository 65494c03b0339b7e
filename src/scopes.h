/*-------------------------------------------------------------------------
 *
 * scopes.h
 *	  Scopes: which client application's jobs a role may act on and read
 *	  (scopes.c).
 *
 * A scope is one client application.  jobguard.grants names, per role, a
 * client (acts on and reads one scope), a reader (reads one scope or all,
 * with payloads or not) or an operator (acts on and reads every scope);
 * a role acts with the grants of the roles it is a member of.  Superusers
 * and the tables' owner are operators.  A role with no grant at all acts
 * in the scope "default", as every role did in 1.0.
 *
 * Every id a caller passes is looked up only among the jobs of the scopes
 * it may act on (or read), so another scope's id is answered exactly as an
 * id that does not exist.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_SCOPES_H
#define JOBGUARD_SCOPES_H

#include "postgres.h"

/* The scope jobs go to when the caller is no scope's client. */
#define DEFAULT_SCOPE "default"

/* What a call does with a job: act on it (write), or only read it. */
typedef enum ScopeUse
{
	SCOPE_ACT,
	SCOPE_READ
} ScopeUse;

extern const char *scopes_submit_scope(Oid userid);
extern bool scopes_allow(Oid userid, ScopeUse use, const char *scope);
extern const char *scopes_acting_scope(Oid userid);
extern bool scopes_may_read(Oid userid, const char *scope, bool *payloads);
extern bool scopes_reads_everything(Oid userid);

#endif							/* JOBGUARD_SCOPES_H */
