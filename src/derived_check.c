/*-------------------------------------------------------------------------
 *
 * derived_check.c
 *	  The C forms of jobguard's derived rules, callable from SQL so that a
 *	  test can compare them with the SQL forms over every combination of
 *	  their inputs (the regression suite derived_states).
 *
 * Two rules are derived from stored columns rather than stored:
 *
 *  - an attempt's effective state (a started attempt past its deadline is
 *    unknown): jobguard.attempt_state() in SQL, attempt_effective_state()
 *    (attempt_states.c) in C, for the fast path;
 *  - a job's state: jobguard.job_overview's CASE in SQL, and the same CASE
 *    over the stored attempt states in STORED_JOB_STATE_SQL (store_sql.c),
 *    from which the state gauges of jobguard.stats() are moved.
 *
 * No SQL script creates these functions, so no user sees them; the suite
 * creates them for itself (CREATE FUNCTION ... LANGUAGE c AS
 * '$libdir/jobguard', '<symbol>') and drops them again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "store.h"

PGDLLEXPORT Datum jobguard_c_attempt_state(PG_FUNCTION_ARGS);
PGDLLEXPORT Datum jobguard_c_stored_job_state(PG_FUNCTION_ARGS);

PG_FUNCTION_INFO_V1(jobguard_c_attempt_state);
PG_FUNCTION_INFO_V1(jobguard_c_stored_job_state);

/*
 * jobguard_c_attempt_state(state text, deadline timestamptz) -> text: the
 * effective state by attempt_effective_state(), at the transaction's start
 * (SQL's now()).  STRICT in the suite's declaration.
 */
Datum
jobguard_c_attempt_state(PG_FUNCTION_ARGS)
{
	AttemptState stored = attempt_state_from_name(text_to_cstring(PG_GETARG_TEXT_PP(0)));
	AttemptState effective = attempt_effective_state(stored, PG_GETARG_TIMESTAMPTZ(1),
													 GetCurrentTransactionStartTimestamp());

	PG_RETURN_TEXT_P(cstring_to_text(attempt_state_name(effective)));
}

/*
 * jobguard_c_stored_job_state(job_id bigint) -> text: the job's state as
 * STORED_JOB_STATE_SQL computes it (store_stored_job_state()), NULL when
 * there is no such job.  STRICT in the suite's declaration.
 */
Datum
jobguard_c_stored_job_state(PG_FUNCTION_ARGS)
{
	SavedIdentity caller;		/* restored by store_finish() */
	char	   *state = NULL;
	bool		found;

	store_connect(&caller);
	found = store_stored_job_state(PG_GETARG_INT64(0), &state);
	if (found)
		state = store_keep_string(state);
	store_finish(&caller);
	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}
