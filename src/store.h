/*-------------------------------------------------------------------------
 *
 * store.h
 *	  The one interface between jobguard's entry points and its tables.
 *
 * The entry points call only store_* functions.  The SQL back end
 * (store_lifecycle.c and store_admin.c, running the statements of
 * store_sql.c with cached SPI plans) implements every one of them.  For
 * the hot calls of submit, submit_many, begin_attempt, claim and
 * finish_attempt, store_dispatch.c may hand the call to the fast path
 * instead (rows.c: the same rows through the table access method, under
 * the same rules and locks, with exactly the same answers; every test
 * suite runs with jobguard.fast_path on and off to check it).  The seam
 * between the two is store_backend.h.
 *
 * Callers bracket their work with store_connect() and store_finish().
 * Values read from a row stay valid until store_finish().
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_STORE_H
#define JOBGUARD_STORE_H

#include "postgres.h"

#include "funcapi.h"
#include "utils/timestamp.h"

#include "store_rows.h"
#include "security.h"

struct ClaimLevels;				/* claim_floor.h */

/* store_dispatch.c: the connection a call works in, and the hot calls */
extern void store_connect(SavedIdentity *caller);
extern void store_finish(const SavedIdentity *caller);
extern char *store_keep_string(const char *s);
extern bool store_insert_job(const SubmitRequest *req, int64 *job_id);
extern void store_insert_jobs(Datum scope, const JobBatch *batch, bool *inserted,
							  int64 *job_ids);
extern bool store_match_job(const SubmitRequest *req, SubmitMatch *match);
extern int64 store_begin_attempt(const BeginRequest *req);
extern bool store_read_for_finish(int64 attempt_id, const char *scope, AttemptRow *attempt,
								  FinishJob *job);
extern ClaimOutcome store_claim_and_swap(const AttemptRow *attempt, Datum result);

/* store_lifecycle.c: the rest of a job's life, SQL only */
extern bool store_same_identity(int64 job_id, Datum params, Datum identity);
extern bool store_replace_ended_job(int64 job_id);
extern bool store_insert_next_job(const SubmitRequest *req, int64 previous_job_id,
								  int64 *job_id);
extern bool store_lock_job(int64 job_id, const char *scope, JobRow *job);
extern bool store_last_attempt(int64 job_id, AttemptRow *attempt);
extern bool store_provider_certified(const char *operation, const char *provider);
extern bool store_lock_attempt(int64 attempt_id, const char *scope,
							   AttemptRow *attempt);
extern bool store_winner_of(int64 job_id, int64 *winner);
extern bool store_close_attempt(int64 attempt_id, AttemptState from,
								AttemptState to, const char *error,
								int64 lost_to, Datum lost_result);
extern void store_mark_unknown(int64 attempt_id);
extern void store_cancel_attempt(int64 attempt_id, Datum reason);
extern void store_cancel_job(int64 job_id, Datum reason);
extern TimestampTz store_heartbeat(int64 attempt_id, Datum extend_by, bool extend_by_null);
extern bool store_retry_policy(int64 job_id, Interval *backoff, Interval *max, bool *max_null);
extern void store_set_not_before(int64 job_id, const Interval *delay);
extern int	store_claim_candidates(const char *scope, Datum operations, bool operations_null,
								   TimestampTz now, Datum provider, bool provider_null,
								   Datum provider_list, int max_jobs, int64 from_id,
								   TimestampTz from_time, Datum levels, Datum pass_over,
								   int64 *ids, char **providers);
extern int64 store_claim_floor(TimestampTz *time_floor, struct ClaimLevels *levels);
extern void store_reschedule(int64 job_id, Datum run_at, bool run_at_null, int16 priority,
							 bool priority_null);
extern char **store_limited_providers(int *count, ProviderLimits **limits);
extern bool store_any_dedupes(void);
extern bool store_lock_policy(const char *provider, bool skip_locked, ProviderLimits *limits);
extern void store_record_start(const char *provider, double tokens, TimestampTz at);
extern void store_count_throttled(const char *provider);
extern void store_provider_flow(ReturnSetInfo *rsinfo);
extern void store_retry_job(int64 job_id, int32 extra, Datum reason, bool reason_null,
							Datum retried_by);
extern void store_put_claimed(const int64 *ids, const bool *redrives, int count,
							  ReturnSetInfo *rsinfo);

/* store_admin.c: reads, operations and certifications, upkeep */
extern bool store_job_state(int64 job_id, char **state, char **scope);
extern bool store_job_overview(int64 job_id, Oid reader, TupleDesc desc, MemoryContext cxt,
							   Datum *row);
extern bool store_attempts_of(int64 job_id, Oid reader, ReturnSetInfo *rsinfo);
extern void store_id_scopes(int64 id, char **job_scope, char **attempt_scope);
extern void store_define_operation(Datum operation, Datum contract,
								   Datum retry_backoff, bool retry_backoff_null,
								   Datum retry_backoff_max, bool retry_backoff_max_null);
extern void store_set_provider_policy(Datum provider, Datum dedupes_for, bool dedupes_null,
									  Datum max_in_flight, bool in_flight_null,
									  Datum max_per_second, bool per_second_null,
									  Datum paused, bool paused_null);
extern bool store_provider_key(int64 attempt_id, char **provider_key, char **scope);
extern bool store_redrive_read(int64 attempt_id, const char *scope, bool skip_locked,
							   RedriveRow *row);
extern int64 store_redrive_begin(int64 attempt_id, Datum worker, bool worker_null,
								 Datum timeout, bool timeout_null, TimestampTz started_at);
extern void store_claim_unknown(const char *scope, Datum worker, Datum operations,
								bool operations_null, int max_rows, Datum older_than,
								Datum lease, ReturnSetInfo *rsinfo);
extern bool store_blocked_counts(int64 *blocked, TimestampTz *oldest);
extern int	store_redrive_candidates(const char *scope, Datum operations, bool operations_null,
									 Datum provider, bool provider_null, Datum provider_list,
									 int max_rows, int64 *attempt_ids);
extern bool store_certification_versions(const char *operation, const char *provider,
										 int64 *certified_under, bool *certified_null,
										 int64 *current, bool *current_null);
extern void store_set_failover(Datum operation, Datum providers, bool remove,
							   int32 after_failures);
extern void store_certify_provider(Datum operation, Datum provider,
								   Datum evidence, bool evidence_null);
extern bool store_revoke_provider(Datum operation, Datum provider);
extern bool store_operation_contract(Datum operation, int64 *version,
									 Datum *contract);
extern bool store_fresh_job_state(int64 job_id, char **state, char **scope);
extern uint64 store_sweep_overdue(int batch_size);
extern int64 store_purge(TimestampTz cutoff, int batch_size, const char *operation);
extern bool store_purge_page(TimestampTz cutoff, int batch_size, const char *operation,
							 int64 *after, int64 *deleted);
extern int64 store_purge_by_retention(int batch_size);
extern int	store_retentions(MemoryContext into, char ***operations, TimestampTz **cutoffs);
extern void store_state_counts(ReturnSetInfo *rsinfo);
extern void store_stored_state_counts(int64 *counts);
extern bool store_stored_job_state(int64 job_id, char **state);
extern int	store_stored_job_gauge(int64 job_id);
extern void store_invariant_violations(Oid reader, ReturnSetInfo *rsinfo);

#endif							/* JOBGUARD_STORE_H */
