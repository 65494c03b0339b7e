/*-------------------------------------------------------------------------
 *
 * job_notify.h
 *	  The notifications jobguard sends on channel jobguard_jobs when a
 *	  job succeeds, fails or is cancelled (job_notify.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_JOB_NOTIFY_H
#define JOBGUARD_JOB_NOTIFY_H

#include "postgres.h"

extern bool notify_enabled;		/* GUC jobguard.notify */

extern void notify_job(int64 job_id, const char *state);
extern void notify_if_job_failed(int64 job_id);

#endif							/* JOBGUARD_JOB_NOTIFY_H */
