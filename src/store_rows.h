/*-------------------------------------------------------------------------
 *
 * store_rows.h
 *	  The rows jobguard passes between its entry points, the state rules
 *	  and the two back ends of store.h: a job, an attempt, what a finish
 *	  reads, and what submit and the compare-and-swap found.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_STORE_ROWS_H
#define JOBGUARD_STORE_ROWS_H

#include "postgres.h"

#include "utils/timestamp.h"

/* The attempt states of SPEC.md, in the order of the state table. */
typedef enum AttemptState
{
	ATTEMPT_STARTED,
	ATTEMPT_UNKNOWN,
	ATTEMPT_CANCELLED,
	ATTEMPT_SUCCEEDED,
	ATTEMPT_LOST,
	ATTEMPT_FAILED
} AttemptState;

#define ATTEMPT_STATE_COUNT (ATTEMPT_FAILED + 1)

/* A job row as begin_attempt() and cancel_job() need it. */
typedef struct JobRow
{
	int64		id;
	char	   *operation;
	char	   *provider;
	bool		has_max_attempts;
	int32		max_attempts;
	int64		version;
	bool		completed;		/* the result slot is taken */
	int64		completed_by;
	bool		cancelled;
} JobRow;

/* An attempt row; state is the effective one (past deadline = unknown). */
typedef struct AttemptRow
{
	int64		id;
	int64		job_id;
	int32		attempt_no;
	char	   *provider;
	AttemptState stored_state;
	AttemptState state;
	int64		read_version;
	TimestampTz deadline;
	char	   *attempt_key;	/* NULL when the caller gave none */
	Datum		lost_result;	/* jsonb, valid only when state is lost */
} AttemptRow;

/* What finish_attempt() needs to know about the attempt's job. */
typedef struct FinishJob
{
	char	   *operation;
	bool		completed;
	int64		completed_by;
	Datum		result;			/* jsonb, valid only when completed */
	bool		has_contract;
	int64		contract_version;
	Datum		contract;		/* jsonb, valid only when has_contract */
} FinishJob;

/* What the claim-and-swap of a finish found. */
typedef enum ClaimOutcome
{
	CLAIM_CHANGED,				/* the attempt changed since it was read */
	CLAIM_WON,					/* it took the result slot */
	CLAIM_LOST					/* another attempt had it, or the job was cancelled */
} ClaimOutcome;

/* An operation's key policy, as submit applies it. */
typedef struct KeyPolicy
{
	bool		has_identity;
	Datum		identity;		/* text[]: the keys that make a request the same */
	bool		new_job_after_failure;	/* after_failure = 'new_job' */
} KeyPolicy;

/* How an existing job compares with a replayed submit. */
typedef struct SubmitMatch
{
	int64		job_id;
	bool		same_operation;
	bool		same_params;
	bool		same_provider;
	bool		same_max_attempts;
} SubmitMatch;

/*
 * Many submits at once (submit_many): the requests, column by column, and
 * which of them to leave out (refused before they reached the table).
 */
typedef struct JobBatch
{
	int			count;
	const Datum *owner_ids;
	const Datum *idempotency_keys;
	const Datum *operations;
	const Datum *params;
	const Datum *providers;
	const Datum *max_attempts;
	const bool *max_attempts_null;
	const bool *skip;
	Datum		arrays[6];		/* the same as the arrays given (max_attempts: 0 if none) */
} JobBatch;

#endif							/* JOBGUARD_STORE_ROWS_H */
