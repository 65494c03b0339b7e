/*-------------------------------------------------------------------------
 *
 * errcodes.h
 *	  The SQLSTATEs jobguard raises, class JG, defined once for every file.
 *
 * Callers match on these codes to decide what to do (replay, wait, fail
 * over, give up), so they never change meaning once released.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_ERRCODES_H
#define JOBGUARD_ERRCODES_H

#include "utils/elog.h"

/* same owner and idempotency key, different request */
#define ERRCODE_JG_IDEMPOTENCY_KEY_REUSED	MAKE_SQLSTATE('J','G','0','0','1')
/* an open (started or unknown) attempt blocks a new one */
#define ERRCODE_JG_ATTEMPT_IN_FLIGHT		MAKE_SQLSTATE('J','G','0','0','2')
/* the job succeeded or was cancelled */
#define ERRCODE_JG_JOB_CLOSED				MAKE_SQLSTATE('J','G','0','0','3')
/* fallback provider not certified for the job's operation */
#define ERRCODE_JG_PROVIDER_NOT_CERTIFIED	MAKE_SQLSTATE('J','G','0','0','4')
/* max_attempts attempts exist already */
#define ERRCODE_JG_ATTEMPTS_EXHAUSTED		MAKE_SQLSTATE('J','G','0','0','5')
/* a transition the state table does not allow */
#define ERRCODE_JG_INVALID_TRANSITION		MAKE_SQLSTATE('J','G','0','0','6')
/* an attempt reported twice with different results */
#define ERRCODE_JG_RESULT_MISMATCH			MAKE_SQLSTATE('J','G','0','0','7')
/* no job with that id */
#define ERRCODE_JG_JOB_NOT_FOUND			MAKE_SQLSTATE('J','G','0','0','8')
/* no attempt with that id */
#define ERRCODE_JG_ATTEMPT_NOT_FOUND		MAKE_SQLSTATE('J','G','0','0','9')

#endif							/* JOBGUARD_ERRCODES_H */
