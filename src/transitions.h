/*-------------------------------------------------------------------------
 *
 * transitions.h
 *	  The state rules of doc/reference.md (transitions.c): the transitions
 *	  each call may make, and the gate that lets a new attempt begin (the
 *	  states themselves are store_rows.h's).
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

extern void require_transition(AttemptAction action, const AttemptRow *attempt);
extern void require_gate_open(const JobRow *job, const AttemptRow *last);
extern void require_attempts_left(const JobRow *job, const AttemptRow *last);

#endif							/* JOBGUARD_TRANSITIONS_H */
