/*-------------------------------------------------------------------------
 *
 * transitions.c
 *	  The state rules of jobguard (doc/reference.md, "Attempts" and
 *	  "States"): which call may move an attempt out of which state, and the
 *	  gate that decides whether a job may begin another attempt.
 *
 * Nothing here touches a table.  The callers read the rows first (locked,
 * or to be written only on condition that they have not changed) and pass
 * them in; these functions only decide, and raise the caller-facing error
 * (JG002, JG003, JG005, JG006) when the answer is no.  The states
 * themselves, and the effective state (a started attempt past its deadline
 * is unknown), are attempt_states.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "errcodes.h"
#include "transitions.h"
#include "metrics.h"

/*
 * The transition table of doc/reference.md ("Attempts"):
 * allowed_from[action][state] is true when the action may be applied to an
 * attempt in that (effective) state.
 * finish_attempt() answers replays on succeeded and lost attempts itself
 * before it asks, so those are not transitions here.
 */
static const bool allowed_from[][ATTEMPT_STATE_COUNT] = {
	[ACTION_FINISH] = {
		[ATTEMPT_STARTED] = true, [ATTEMPT_UNKNOWN] = true, [ATTEMPT_CANCELLED] = true,
	},
	[ACTION_FAIL] = {
		[ATTEMPT_STARTED] = true, [ATTEMPT_UNKNOWN] = true, [ATTEMPT_CANCELLED] = true,
	},
	[ACTION_MARK_UNKNOWN] = {
		[ATTEMPT_STARTED] = true, [ATTEMPT_UNKNOWN] = true,
	},
	[ACTION_CANCEL] = {
		[ATTEMPT_STARTED] = true, [ATTEMPT_UNKNOWN] = true,
	},
	/* a heartbeat must arrive in time: past its deadline an attempt is unknown */
	[ACTION_HEARTBEAT] = {
		[ATTEMPT_STARTED] = true,
	},
};

/* What each action is called in an error message ("cannot be <verb>"). */
static const char *const action_verbs[] = {
	[ACTION_FINISH] = "finished",
	[ACTION_FAIL] = "failed",
	[ACTION_MARK_UNKNOWN] = "marked unknown",
	[ACTION_CANCEL] = "cancelled",
	[ACTION_HEARTBEAT] = "extended by a heartbeat",
};

/*
 * require_transition: raise JG006 unless the action is allowed from the
 * attempt's effective state.  The message names the attempt and its state,
 * so the caller sees at once why the call was refused.
 */
void
require_transition(AttemptAction action, const AttemptRow *attempt)
{
	if (allowed_from[action][attempt->state])
		return;

	ereport(ERROR,
			(errcode(ERRCODE_JG_INVALID_TRANSITION),
			 errmsg("attempt %lld of job %lld cannot be %s: it is %s",
					(long long) attempt->id, (long long) attempt->job_id,
					action_verbs[action], attempt_state_name(attempt->state)),
			 attempt->state == ATTEMPT_FAILED && action == ACTION_FINISH ?
			 errhint("A failed attempt cannot report a result; begin a new attempt instead.") :
			 attempt->state == ATTEMPT_UNKNOWN && action == ACTION_HEARTBEAT ?
			 errhint("Its deadline %s passed: a heartbeat must arrive before the deadline. "
					 "The attempt may still report its result, fail or be cancelled.",
					 timestamptz_to_str(attempt->deadline)) : 0));
}

/*
 * require_gate_open: raise JG003 if the job is closed (succeeded or
 * cancelled) and JG002 if its latest attempt is still open.  A timed-out
 * attempt counts as open: the provider may still be working, so starting
 * another one could run the side effect twice.
 */
void
require_gate_open(const JobRow *job, const AttemptRow *last)
{
	if (job->completed)
		ereport(ERROR,
				(errcode(ERRCODE_JG_JOB_CLOSED),
				 errmsg("job %lld has already succeeded", (long long) job->id),
				 errdetail("Attempt %lld holds its result.", (long long) job->completed_by),
				 errhint("Read the result with jobguard.job(%lld).", (long long) job->id)));
	if (job->cancelled)
		ereport(ERROR,
				(errcode(ERRCODE_JG_JOB_CLOSED),
				 errmsg("job %lld has been cancelled", (long long) job->id),
				 errhint("Submit a new request with a new idempotency key to try again.")));

	if (last != NULL && attempt_state_is_open(last->state))
	{
		stats_count(STAT_GATE_REFUSALS);
		ereport(ERROR,
				(errcode(ERRCODE_JG_ATTEMPT_IN_FLIGHT),
				 errmsg("job %lld already has an attempt in flight", (long long) job->id),
				 errdetail("Attempt %lld (number %d, provider \"%s\") is %s; its deadline %s %s.",
						   (long long) last->id, last->attempt_no, last->provider,
						   attempt_state_name(last->state),
						   last->state == ATTEMPT_UNKNOWN ? "was" : "is",
						   timestamptz_to_str(last->deadline)),
				 last->state == ATTEMPT_UNKNOWN ?
				 errhint("The attempt timed out, but its provider may still be working. "
						 "Wait for its result, or stop waiting with jobguard.cancel_attempt(%lld, reason) "
						 "or jobguard.fail_attempt(%lld, error) before beginning another.",
						 (long long) last->id, (long long) last->id) :
				 errhint("Wait for it to finish or fail, or stop waiting with "
						 "jobguard.cancel_attempt(%lld, reason).",
						 (long long) last->id)));
	}
}

/*
 * require_attempts_left: raise JG005 when the job has used up max_attempts.
 * The latest attempt's tries is the count (its number in 1.1: numbers run
 * 1, 2, ...; a redrive is not counted again).  last comes from
 * store_last_attempt(), which reads tries.
 */
void
require_attempts_left(const JobRow *job, const AttemptRow *last)
{
	int32		used = last ? last->tries : 0;

	if (job->has_max_attempts && used >= job->max_attempts)
		ereport(ERROR,
				(errcode(ERRCODE_JG_ATTEMPTS_EXHAUSTED),
				 errmsg("job %lld has used all of its %d attempts",
						(long long) job->id, job->max_attempts),
				 errhint("Submit a new request with a new idempotency key to try again.")));
}
