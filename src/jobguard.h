/*-------------------------------------------------------------------------
 *
 * jobguard.h
 *	  What the parts of jobguard share: the rows they pass around, the
 *	  attempt states, and the functions of store.c (table access) and
 *	  states.c (the state rules).
 *
 * jobguard.c holds the SQL-callable entry points and checks arguments;
 * store.c is the only file that holds SQL; states.c decides which
 * transitions are allowed; contract.c validates results.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_H
#define JOBGUARD_H

#include "postgres.h"

#include "funcapi.h"
#include "utils/jsonb.h"
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

/* The calls that move an attempt from one state to another. */
typedef enum AttemptAction
{
	ACTION_FINISH,
	ACTION_FAIL,
	ACTION_MARK_UNKNOWN,
	ACTION_CANCEL
} AttemptAction;

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

/* How an existing job compares with a replayed submit. */
typedef struct SubmitMatch
{
	int64		job_id;
	bool		same_operation;
	bool		same_params;
	bool		same_provider;
	bool		same_max_attempts;
} SubmitMatch;

/* The caller's identity, saved while a call runs as the tables' owner. */
typedef struct SavedIdentity
{
	Oid			userid;
	int			sec_context;
} SavedIdentity;

/* security.c: running as the owner of jobguard's tables */
extern void become_tables_owner(SavedIdentity *saved);
extern void become_caller_again(const SavedIdentity *saved);

/* The event counters of stats.c, in the order jobguard.stats() shows them. */
typedef enum StatCounter
{
	STAT_SUBMITS_CREATED,
	STAT_SUBMITS_REPLAYED,
	STAT_KEY_CONFLICTS,
	STAT_GATE_REFUSALS,
	STAT_CAS_WINS,
	STAT_CAS_LOSSES,
	STAT_CONTRACT_REJECTIONS
} StatCounter;

#define STAT_COUNT (STAT_CONTRACT_REJECTIONS + 1)

/* stats.c: event counters in shared memory (when preloaded) */
extern void stats_init(void);
extern void stats_count(StatCounter counter);
extern bool stats_read(StatCounter counter, uint64 *value);
extern const char *stats_counter_name(StatCounter counter);
extern void stats_reset(void);

/* sweeper.c: the background worker writing down overdue attempts */
extern void sweeper_init(void);

/* states.c: the state table and the gate */
extern AttemptState attempt_state_from_name(const char *name);
extern const char *attempt_state_name(AttemptState state);
extern bool attempt_state_is_open(AttemptState state);
extern void require_transition(AttemptAction action, const AttemptRow *attempt);
extern void require_gate_open(const JobRow *job, const AttemptRow *last);
extern void require_attempts_left(const JobRow *job, const AttemptRow *last);

/* store.c: table access through cached SPI plans */
extern void store_connect(SavedIdentity *caller);
extern void store_finish(const SavedIdentity *caller);
extern char *store_keep_string(const char *s);
extern bool store_insert_job(Datum owner_id, Datum idempotency_key,
							 Datum operation, Datum params, Datum provider,
							 Datum max_attempts, bool max_attempts_null,
							 int64 *job_id);
extern bool store_match_job(Datum owner_id, Datum idempotency_key,
							Datum operation, Datum params, Datum provider,
							Datum max_attempts, bool max_attempts_null,
							SubmitMatch *match);
extern bool store_lock_job(int64 job_id, JobRow *job);
extern bool store_last_attempt(int64 job_id, AttemptRow *attempt);
extern int64 store_begin_attempt(int64 job_id, Datum provider, bool provider_null,
								 Datum timeout, Datum attempt_key,
								 bool attempt_key_null);
extern bool store_provider_certified(const char *operation, const char *provider);
extern bool store_lock_attempt(int64 attempt_id, AttemptRow *attempt);
extern bool store_read_for_finish(int64 attempt_id, AttemptRow *attempt,
								  FinishJob *job);
extern ClaimOutcome store_claim_and_swap(const AttemptRow *attempt, Datum result);
extern bool store_winner_of(int64 job_id, int64 *winner);
extern bool store_close_attempt(int64 attempt_id, AttemptState from,
								AttemptState to, const char *error,
								int64 lost_to, Datum lost_result);
extern void store_mark_unknown(int64 attempt_id);
extern void store_cancel_attempt(int64 attempt_id, Datum reason);
extern void store_cancel_job(int64 job_id, Datum reason);
extern bool store_job_state(int64 job_id, char **state);
extern bool store_job_overview(int64 job_id, TupleDesc desc, MemoryContext cxt,
							   Datum *row);
extern bool store_attempts_of(int64 job_id, ReturnSetInfo *rsinfo);
extern void store_define_operation(Datum operation, Datum contract);
extern void store_certify_provider(Datum operation, Datum provider,
								   Datum evidence, bool evidence_null);
extern bool store_revoke_provider(Datum operation, Datum provider);
extern bool store_operation_contract(Datum operation, int64 *version,
									 Datum *contract);
extern bool store_fresh_job_state(int64 job_id, char **state);
extern uint64 store_sweep_overdue(int batch_size);
extern int64 store_purge(TimestampTz cutoff, int batch_size);
extern void store_state_counts(ReturnSetInfo *rsinfo);

/* rows.c, rows_catalog.c: the fast path, the hot reads and writes without SQL */
extern bool rows_fast_path;

/* The calls that use rows.c, by the tables they lock. */
typedef enum RowsCall
{
	ROWS_SUBMIT,
	ROWS_BEGIN,
	ROWS_FINISH
} RowsCall;

extern bool rows_usable(RowsCall call);
extern const char *rows_unusable_reason(void);
extern bool rows_insert_job(Datum owner_id, Datum idempotency_key,
							Datum operation, Datum params, Datum provider,
							Datum max_attempts, bool max_attempts_null,
							int64 *job_id);
extern bool rows_match_job(Datum owner_id, Datum idempotency_key,
						   Datum operation, Datum params, Datum provider,
						   Datum max_attempts, bool max_attempts_null,
						   SubmitMatch *match);
extern int64 rows_begin_attempt(int64 job_id, Datum provider, bool provider_null,
								Datum timeout, Datum attempt_key,
								bool attempt_key_null);
extern bool rows_read_for_finish(int64 attempt_id, AttemptRow *attempt,
								 FinishJob *job);
extern ClaimOutcome rows_claim_and_swap(const AttemptRow *attempt, Datum result);

#endif							/* JOBGUARD_H */
