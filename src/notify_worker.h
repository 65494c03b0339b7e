/*-------------------------------------------------------------------------
 *
 * notify_worker.h
 *	  Notifications sent by a background worker from a ring in shared
 *	  memory, and the wake-up of jobguard.await() (notify_worker.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_NOTIFY_WORKER_H
#define JOBGUARD_NOTIFY_WORKER_H

#include "postgres.h"

/* The channel jobguard notifies when a job succeeds, fails or is cancelled. */
#define NOTIFIER_CHANNEL "jobguard_jobs"

extern void notifier_init(void);
extern bool notifier_record(int64 job_id, char state, bool notify);
extern bool notifier_await_prepare(void);
extern void notifier_await_sleep(long timeout_ms);
extern void notifier_await_done(void);

#endif							/* JOBGUARD_NOTIFY_WORKER_H */
