/*-------------------------------------------------------------------------
 *
 * policies.h
 *	  The key policy of an operation (policies.c), as submit applies it:
 *	  read from jobguard.policies once per backend and kept until the table
 *	  changes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_POLICIES_H
#define JOBGUARD_POLICIES_H

#include "postgres.h"

#include "store_rows.h"

extern bool policy_of(const char *operation, KeyPolicy *policy);

#endif							/* JOBGUARD_POLICIES_H */
