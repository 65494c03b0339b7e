/*-------------------------------------------------------------------------
 *
 * job_notify.c
 *	  NOTIFY jobguard_jobs, '<job_id>:<state>' when a job succeeds, fails
 *	  or is cancelled, for listeners that would rather not poll.
 *
 * When jobguard is preloaded and a notifier runs for the database, the
 * notification is recorded for notify_worker.c, which sends it just after the
 * commit from its own transaction (the finishing transaction never takes
 * NOTIFY's cluster-wide lock).  Otherwise it is an Async_Notify inside the
 * finishing transaction, as PostgreSQL's NOTIFY does it.  Either way it is
 * sent only if the transaction commits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/async.h"

#include "notify_worker.h"
#include "job_notify.h"
#include "store.h"

/* GUC jobguard.notify: send NOTIFY jobguard_jobs when a job ends. */
bool		notify_enabled = true;

/*
 * notify_job: NOTIFY jobguard_jobs, '<job_id>:<state>'.  Delivered when the
 * transaction commits, never before, and not at all if it rolls back.  The
 * await() calls of the database are woken at that commit too, even with
 * jobguard.notify off.
 */
void
notify_job(int64 job_id, const char *state)
{
	if (notifier_record(job_id, state[0], notify_enabled) || !notify_enabled)
		return;
	Async_Notify(NOTIFIER_CHANNEL, psprintf("%lld:%s", (long long) job_id, state));
}

/*
 * notify_if_job_failed: after an attempt failed, notify when that made the
 * job itself failed (its last allowed attempt).
 */
void
notify_if_job_failed(int64 job_id)
{
	char	   *state;

	if (store_fresh_job_state(job_id, &state, NULL) &&
		strcmp(state, "failed") == 0)
		notify_job(job_id, "failed");
}
