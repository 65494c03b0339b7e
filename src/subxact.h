/*-------------------------------------------------------------------------
 *
 * subxact.h
 *	  Running a piece of a call in a subtransaction of its own, and keeping
 *	  the errors it may end with, or what it did only when it says so
 *	  (subxact.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_SUBXACT_H
#define JOBGUARD_SUBXACT_H

#include "postgres.h"

/* the piece of work; its results go through arg */
typedef void (*SubxactBody) (void *arg);
/* whether an error the body raised is the caller's to handle */
typedef bool (*SubxactKeep) (const ErrorData *edata);

/* a piece of work that says whether what it did is to be kept */
typedef bool (*SubxactTry) (void *arg);

extern ErrorData *subxact_run(SubxactBody body, void *arg, SubxactKeep keep);
extern bool subxact_keep_if(SubxactTry body, void *arg);

#endif							/* JOBGUARD_SUBXACT_H */
