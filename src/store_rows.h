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

#include "store_columns.h"

/* The attempt states of doc/reference.md, in the order of its state table. */
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

/* attempt_states.c: the states' names, and the effective state */
extern AttemptState attempt_state_from_name(const char *name);
extern const char *attempt_state_name(AttemptState state);
extern bool attempt_state_is_open(AttemptState state);
/* A new provider key: this many random bytes, as hex (attempt_states.c). */
#define PROVIDER_KEY_BYTES 16
extern Datum provider_key_new(void);
extern AttemptState attempt_effective_state(AttemptState stored, TimestampTz deadline,
											TimestampTz now);

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
	int32		tries;			/* counted toward max_attempts (1.1: attempt_no);
								 * read only by store_last_attempt */
} AttemptRow;

/* What a redrive needs to know about the attempt it redrives. */
typedef struct RedriveRow
{
	int64		job_id;
	int32		attempt_no;
	char	   *provider;
	AttemptState stored_state;
	AttemptState state;			/* effective */
	char	   *provider_key;
	bool		job_closed;		/* succeeded or cancelled */
	bool		dedupes;		/* its provider has dedupes_for */
	TimestampTz window_end;		/* valid when dedupes */
	bool		in_window;		/* now() is before window_end */
} RedriveRow;

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

/*
 * How an existing job compares with a replayed submit: same[c] for each
 * compared column c of SUBMIT_COLUMNS (store_columns.h), by SubmitColumn;
 * true for the others (the key and the scope found the job).
 */
typedef struct SubmitMatch
{
	int64		job_id;
	bool		same[SUBMIT_COLUMN_COUNT];
} SubmitMatch;

/*
 * One submit as the back ends insert and match it: the job columns of
 * SUBMIT_COLUMNS (store_columns.h) by SubmitColumn, the scope among them.
 * The KEY columns and the scope are never NULL.
 */
typedef struct SubmitRequest
{
	Datum		values[SUBMIT_COLUMN_COUNT];
	bool		nulls[SUBMIT_COLUMN_COUNT];
	/*
	 * The schedule: not part of the request's identity (a replay never
	 * compares nor changes it), written by an insert only.  Zeroed: no
	 * run_at (runnable at once), priority 0 — what a 1.1 submit writes.
	 */
	bool		has_run_at;
	Datum		run_at;			/* timestamptz, into not_before */
	int16		priority;
} SubmitRequest;

/* submit_is_scheduled: whether a submit sets run_at or a priority. */
#define submit_is_scheduled(req) ((req)->has_run_at || (req)->priority != 0)

/*
 * One begin of an attempt (begin_attempt, or a claim): the job, in the
 * caller's scope (NULL: any); the provider (NULL: the job's own); the
 * timeout; the caller's attempt key and worker name (either may be NULL);
 * started_at, 0 for now().
 */
typedef struct BeginRequest
{
	int64		job_id;
	const char *scope;
	Datum		provider;
	bool		provider_null;
	Datum		timeout;
	Datum		attempt_key;
	bool		attempt_key_null;
	Datum		worker;
	bool		worker_null;
	TimestampTz started_at;
} BeginRequest;

/*
 * Many submits at once (submit_many): the requests, column by column (by
 * SubmitColumn, as SubmitRequest has them; the scope is passed apart), and
 * which of them to leave out (refused before they reached the table).
 */
typedef struct JobBatch
{
	int			count;
	const Datum *values[SUBMIT_COLUMN_COUNT];	/* NULL: the column not given */
	const bool *nulls[SUBMIT_COLUMN_COUNT]; /* NULL: none is NULL */
	const bool *skip;
	Datum		arrays[SUBMIT_COLUMN_COUNT];	/* the arrays given, (Datum) 0
												 * where none was */
	/* the schedule (see SubmitRequest); NULL / 0 when not given */
	const Datum *run_ats;
	const bool *run_ats_null;
	const int16 *priorities;
	Datum		run_at_array;	/* timestamptz[] as given */
	Datum		priority_array; /* smallint[], one per row */
} JobBatch;

/* batch_is_scheduled: whether a batch sets run_at or a priority. */
#define batch_is_scheduled(b) ((b)->run_ats != NULL || (b)->priorities != NULL)

/*
 * A provider's limits as a start reads them, its policy row locked:
 * max_in_flight (0: none), max_per_second (0: none) and the token bucket
 * (has_tokens false: full), with the clock read after the lock.
 */
typedef struct ProviderLimits
{
	int32		max_in_flight;
	double		max_per_second;
	bool		has_tokens;
	double		tokens;
	TimestampTz tokens_at;
	TimestampTz now;
	bool		paused;			/* no new start against it (1.3) */
} ProviderLimits;

#endif							/* JOBGUARD_STORE_ROWS_H */
