/*-------------------------------------------------------------------------
 *
 * subxact.h
 *	  Running a piece of a call in a subtransaction of its own, and keeping
 *	  the errors it may end with (subxact.c).
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

extern ErrorData *subxact_run(SubxactBody body, void *arg, SubxactKeep keep);

#endif							/* JOBGUARD_SUBXACT_H */
