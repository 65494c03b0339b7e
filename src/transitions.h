/*-------------------------------------------------------------------------
 *
 * transitions.h
 *	  The state rules of SPEC.md (transitions.c): the names of the attempt
 *	  states, the transitions each call may make, and the gate that lets a
 *	  new attempt begin.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_TRANSITIONS_H
#define JOBGUARD_TRANSITIONS_H

#include "store_rows.h"

/* The calls that move an attempt from one state to another. */
typedef enum AttemptAction
{
	ACTION_FINISH,
	ACTION_FAIL,
	ACTION_MARK_UNKNOWN,
	ACTION_CANCEL,
	ACTION_HEARTBEAT
} AttemptAction;

extern AttemptState attempt_state_from_name(const char *name);
extern const char *attempt_state_name(AttemptState state);
extern bool attempt_state_is_open(AttemptState state);
extern void require_transition(AttemptAction action, const AttemptRow *attempt);
extern void require_gate_open(const JobRow *job, const AttemptRow *last);
extern void require_attempts_left(const JobRow *job, const AttemptRow *last);

#endif							/* JOBGUARD_TRANSITIONS_H */
