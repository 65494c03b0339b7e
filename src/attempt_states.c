/*-------------------------------------------------------------------------
 *
 * attempt_states.c
 *	  The attempt states of doc/reference.md ("States"): their stored
 *	  names, which are open (block a new attempt), and the effective state
 *	  of a stored one.
 *
 * The effective state is the rule "a started attempt whose deadline has
 * passed is unknown".  It is written once in SQL, jobguard.attempt_state()
 * (which the views and the SQL back end's statements call), and once in C,
 * attempt_effective_state() here (which the fast path calls, having no
 * SQL).  The regression suite derived_states checks that the two agree
 * for every state and for deadlines before, at and after now()
 * (derived_check.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "store_rows.h"

/* One attempt state: its SQL name and whether it blocks a new attempt. */
typedef struct AttemptStateInfo
{
	const char *name;
	bool		open;
} AttemptStateInfo;

static const AttemptStateInfo attempt_states[ATTEMPT_STATE_COUNT] = {
	[ATTEMPT_STARTED] = {"started", true},
	[ATTEMPT_UNKNOWN] = {"unknown", true},
	[ATTEMPT_CANCELLED] = {"cancelled", false},
	[ATTEMPT_SUCCEEDED] = {"succeeded", false},
	[ATTEMPT_LOST] = {"lost", false},
	[ATTEMPT_FAILED] = {"failed", false},
};

/*
 * attempt_state_from_name: the AttemptState of a stored state name.  The
 * table's CHECK constraint allows only these, so anything else is a bug.
 */
AttemptState
attempt_state_from_name(const char *name)
{
	for (int i = 0; i < ATTEMPT_STATE_COUNT; i++)
	{
		if (strcmp(attempt_states[i].name, name) == 0)
			return (AttemptState) i;
	}
	elog(ERROR, "unrecognized attempt state \"%s\"", name);
	return ATTEMPT_FAILED;		/* keep compiler quiet */
}

/* attempt_state_name: the SQL name of an attempt state. */
const char *
attempt_state_name(AttemptState state)
{
	Assert(state >= 0 && state < ATTEMPT_STATE_COUNT);
	return attempt_states[state].name;
}

/* attempt_state_is_open: true for started and unknown, which block the gate. */
bool
attempt_state_is_open(AttemptState state)
{
	return attempt_states[state].open;
}

/*
 * attempt_effective_state: the state every rule sees for an attempt stored
 * as `stored` with this deadline, at time now (the transaction's start, as
 * SQL's now()): started past its deadline is unknown.  The C form of
 * jobguard.attempt_state(state, deadline).
 */
AttemptState
attempt_effective_state(AttemptState stored, TimestampTz deadline, TimestampTz now)
{
	if (stored == ATTEMPT_STARTED && deadline <= now)
		return ATTEMPT_UNKNOWN;
	return stored;
}

/*
 * provider_key_new: a new provider key (doc/reference.md, "Provider
 * keys"): 32 lower-case hex characters of 16 bytes from the strong random
 * source, so that no two databases ever make the same key.  Both back ends
 * take their new keys from here; the update's keys of 1.1 attempts (an
 * md5, also 32 hex characters) have the same form.
 */
Datum
provider_key_new(void)
{
	uint8		bytes[PROVIDER_KEY_BYTES];
	char		hex[PROVIDER_KEY_BYTES * 2 + 1];
	static const char digits[] = "0123456789abcdef";

	if (!pg_strong_random(bytes, sizeof(bytes)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("jobguard: could not generate a random provider key")));
	for (int i = 0; i < PROVIDER_KEY_BYTES; i++)
	{
		hex[2 * i] = digits[bytes[i] >> 4];
		hex[2 * i + 1] = digits[bytes[i] & 0x0f];
	}
	hex[PROVIDER_KEY_BYTES * 2] = '\0';
	return CStringGetTextDatum(hex);
}
