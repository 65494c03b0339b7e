/*-------------------------------------------------------------------------
 *
 * audit.h
 *	  What an operator did (audit.c): one row of jobguard.operator_actions
 *	  per successful call of an operator-only or administrative function,
 *	  written in the caller's transaction.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_AUDIT_H
#define JOBGUARD_AUDIT_H

#include "postgres.h"

#include "fmgr.h"

/* An argument an action has not: no target, or no reason argument. */
#define AUDIT_NO_ARG (-1)

extern void audit_init(void);
extern void audit_record(FunctionCallInfo fcinfo, int target_arg, int reason_arg);

#endif							/* JOBGUARD_AUDIT_H */
