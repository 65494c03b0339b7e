/*-------------------------------------------------------------------------
 *
 * store_backend.h
 *	  The seam between store.h and its two back ends: what a back end must
 *	  do for the hot calls, and which back end does it.
 *
 * A back end is a StoreBackend: the operations submit, submit_many,
 * begin_attempt (and claim) and finish_attempt need from the tables, each
 * taking a request struct and filling a response, with the contract of its
 * store_* namesake in store.h.  Two exist and must give exactly the same
 * answers under the same rules and locks: sql_backend (store_lifecycle.c,
 * the statements of store_sql.c through SPI) and fast_path_backend
 * (rows.c, the table access method without SQL).  store_dispatch.c picks
 * one per call from its table of operations: the fast path when
 * rows_usable() says the tables hold nothing it would skip and
 * jobguard.fast_path is on, the SQL back end otherwise.  Every other
 * store_* call is the SQL back end's alone.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_STORE_BACKEND_H
#define JOBGUARD_STORE_BACKEND_H

#include "postgres.h"

#include "store_rows.h"

/* The operations a back end implements; they index store_dispatch.c's table. */
typedef enum StoreOp
{
	STORE_OP_INSERT_JOB,		/* submit: insert unless the key has a job */
	STORE_OP_INSERT_JOBS,		/* submit_many: the same for many, in order */
	STORE_OP_MATCH_JOB,			/* submit's replay: compare with the key's job */
	STORE_OP_BEGIN_ATTEMPT,		/* the gate and the insert of an attempt */
	STORE_OP_READ_FOR_FINISH,	/* finish: attempt, job and contract, unlocked */
	STORE_OP_CLAIM_AND_SWAP,	/* finish: the compare-and-swap */
	STORE_OP_COUNT
} StoreOp;

/* What a back end must do: one function per StoreOp. */
typedef struct StoreBackend
{
	const char *name;
	bool		(*insert_job) (const SubmitRequest *req, int64 *job_id);
	void		(*insert_jobs) (Datum scope, const JobBatch *batch, bool *inserted,
								int64 *job_ids);
	bool		(*match_job) (const SubmitRequest *req, SubmitMatch *match);
	int64		(*begin_attempt) (const BeginRequest *req);
	bool		(*read_for_finish) (int64 attempt_id, const char *scope,
									AttemptRow *attempt, FinishJob *job);
	ClaimOutcome (*claim_and_swap) (const AttemptRow *attempt, Datum result);
} StoreBackend;

/* store_lifecycle.c: the back end of SQL statements */
extern const StoreBackend sql_backend;

/* rows.c: the fast path */
extern const StoreBackend fast_path_backend;

/*
 * rows_catalog.c: whether the fast path may serve a call now, by the
 * tables the call locks; why not (for jobguard.fast_path_status()); and
 * the GUC jobguard.fast_path.
 */
typedef enum RowsCall
{
	ROWS_SUBMIT,
	ROWS_BEGIN,
	ROWS_FINISH
} RowsCall;

extern bool rows_fast_path;
extern bool rows_usable(RowsCall call);
extern const char *rows_unusable_reason(void);

#endif							/* JOBGUARD_STORE_BACKEND_H */
