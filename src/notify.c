/*-------------------------------------------------------------------------
 *
 * notify.c
 *	  NOTIFY jobguard_jobs, '<job_id>:<state>' when a job succeeds, fails
 *	  or is cancelled, for listeners that would rather not poll.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/async.h"

#include "notify.h"
#include "store.h"

/* The channel jobguard notifies when a job succeeds, fails or is cancelled. */
#define JOBS_CHANNEL "jobguard_jobs"

/* GUC jobguard.notify: send NOTIFY jobguard_jobs when a job ends. */
bool		notify_enabled = true;

/*
 * notify_job: NOTIFY jobguard_jobs, '<job_id>:<state>'.  Delivered when the
 * transaction commits, never before, and not at all if it rolls back.
 */
void
notify_job(int64 job_id, const char *state)
{
	if (!notify_enabled)
		return;
	Async_Notify(JOBS_CHANNEL, psprintf("%lld:%s", (long long) job_id, state));
}

/*
 * notify_if_job_failed: after an attempt failed, notify when that made the
 * job itself failed (its last allowed attempt).
 */
void
notify_if_job_failed(int64 job_id)
{
	char	   *state;

	if (notify_enabled && store_fresh_job_state(job_id, &state, NULL) &&
		strcmp(state, "failed") == 0)
		notify_job(job_id, "failed");
}
