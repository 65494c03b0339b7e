/*-------------------------------------------------------------------------
 *
 * store_dispatch.c
 *	  The connection a jobguard call works in (store_connect() and
 *	  store_finish()), and the choice of back end for the hot calls.
 *
 * The operations of store_backend.h (submit's insert and replay,
 * submit_many's insert, begin, the finish's read and compare-and-swap)
 * each go to the back end store_ops[] chooses: the fast path of rows.c
 * when rows_usable() says it may serve a call that locks those tables,
 * otherwise the SQL back end of store_lifecycle.c.  Both give the same
 * answers.  Every other store_* call is the SQL back end's alone.
 *
 * Callers bracket their work with store_connect() and store_finish().
 * Values read from a row stay valid until store_finish().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"

#include "launcher.h"
#include "store.h"
#include "store_backend.h"

/*
 * store_connect: open the SPI connection a jobguard call works in, and run
 * as the owner of jobguard's tables until store_finish().  The caller's
 * identity is saved in *caller, on the calling function's stack: calls can
 * nest (a default or constraint on the tables may call jobguard), and each
 * must give back exactly the identity it found.
 */
void
store_connect(SavedIdentity *caller)
{
	static bool used_here = false;

	/* the first call of a backend: the launcher may not know jobguard is here */
	if (!used_here)
	{
		used_here = true;
		launcher_database_used();
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "jobguard: SPI_connect failed");
	become_tables_owner(caller);
}

/*
 * store_keep_string: a copy of a string in the caller's memory context, so
 * that it outlives store_finish().
 */
char *
store_keep_string(const char *s)
{
	char	   *copy = SPI_palloc(strlen(s) + 1);

	strcpy(copy, s);
	return copy;
}

/*
 * store_finish: switch back to the identity store_connect() saved and close
 * the connection; values read from rows are freed with it.
 */
void
store_finish(const SavedIdentity *caller)
{
	become_caller_again(caller);
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "jobguard: SPI_finish failed");
}

/* One operation of the seam: what it is called and the tables it locks. */
typedef struct StoreOpInfo
{
	const char *name;
	RowsCall	locks;			/* what rows_usable() checks for it */
} StoreOpInfo;

/* The operations of store_backend.h, and what decides their back end. */
static const StoreOpInfo store_ops[STORE_OP_COUNT] = {
	[STORE_OP_INSERT_JOB] = {"insert job", ROWS_SUBMIT},
	[STORE_OP_INSERT_JOBS] = {"insert jobs", ROWS_SUBMIT},
	[STORE_OP_MATCH_JOB] = {"match job", ROWS_SUBMIT},
	[STORE_OP_BEGIN_ATTEMPT] = {"begin attempt", ROWS_BEGIN},
	[STORE_OP_READ_FOR_FINISH] = {"read for finish", ROWS_FINISH},
	[STORE_OP_CLAIM_AND_SWAP] = {"claim and swap", ROWS_FINISH},
};

/*
 * backend_for: the back end that serves op in this call: the fast path
 * when rows_usable() says it may, the SQL statements otherwise.
 */
static const StoreBackend *
backend_for(StoreOp op)
{
	Assert(op >= 0 && op < STORE_OP_COUNT && store_ops[op].name != NULL);
	return rows_usable(store_ops[op].locks) ? &fast_path_backend : &sql_backend;
}

/*
 * store_insert_job: insert a new job in the request's scope unless one
 * exists there for the key.  Returns true and the new id when this call
 * created it.
 */
bool
store_insert_job(const SubmitRequest *req, int64 *job_id)
{
	return backend_for(STORE_OP_INSERT_JOB)->insert_job(req, job_id);
}

/*
 * store_insert_jobs: insert the batch's jobs that are not to be skipped,
 * in order, each unless a job exists in the scope for its key (stored, or
 * inserted by an earlier row).  inserted[i] says whether row i created a
 * job, job_ids[i] its id.
 */
void
store_insert_jobs(Datum scope, const JobBatch *batch, bool *inserted, int64 *job_ids)
{
	backend_for(STORE_OP_INSERT_JOBS)->insert_jobs(scope, batch, inserted, job_ids);
}

/*
 * store_match_job: find the job for the request's (scope, owner_id,
 * idempotency_key) and compare it with the request.  Returns false if
 * there is none (it was removed between the insert and this look-up).
 */
bool
store_match_job(const SubmitRequest *req, SubmitMatch *match)
{
	return backend_for(STORE_OP_MATCH_JOB)->match_job(req, match);
}

/*
 * store_begin_attempt: begin the job's next attempt if the gate lets it:
 * the job open, its latest attempt closed, attempts left, a fallback
 * provider certified.  Returns the new attempt's id, or 0 when refused (or
 * no such job in the scope).
 */
int64
store_begin_attempt(const BeginRequest *req)
{
	return backend_for(STORE_OP_BEGIN_ATTEMPT)->begin_attempt(req);
}

/*
 * store_read_for_finish: an attempt with its job and contract, in one
 * snapshot and without a lock; false if there is no such attempt of a job
 * of the scope (NULL: any).
 */
bool
store_read_for_finish(int64 attempt_id, const char *scope, AttemptRow *attempt,
					  FinishJob *job)
{
	return backend_for(STORE_OP_READ_FOR_FINISH)->read_for_finish(attempt_id, scope,
																  attempt, job);
}

/*
 * store_claim_and_swap: claim the attempt (still in the stored state it
 * was read in) and run the compare-and-swap.  CLAIM_CHANGED when the
 * attempt changed since it was read, CLAIM_WON when it took the result
 * slot, CLAIM_LOST when another attempt had it or the job was cancelled.
 */
ClaimOutcome
store_claim_and_swap(const AttemptRow *attempt, Datum result)
{
	return backend_for(STORE_OP_CLAIM_AND_SWAP)->claim_and_swap(attempt, result);
}
