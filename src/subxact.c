/*-------------------------------------------------------------------------
 *
 * subxact.c
 *	  subxact_run(): one piece of a call in an internal subtransaction, so
 *	  that an error it ends with undoes exactly what it wrote and, when the
 *	  caller expects that error, becomes a value instead of ending the call.
 *
 * Used where one call does many independent things (finish_many's
 * elements) or must turn one error into an answer (submit's unique
 * violation from a key index that ON CONFLICT does not arbitrate).
 * subxact_keep_if(): a piece whose locks must not outlive it unless it
 * did something (a claim's look before it sleeps: the rows it locked and
 * could not use are let go).  The
 * subtransaction always ends before the error goes on: raised again with
 * it still open, the error would leave the client's transaction inside an
 * aborted subtransaction it never began.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "subxact.h"

/*
 * rolled_back_error: inside PG_CATCH of a body run in an internal
 * subtransaction begun in memory context cxt under resource owner owner:
 * the error, copied into cxt, and the subtransaction rolled back.
 */
static ErrorData *
rolled_back_error(MemoryContext cxt, ResourceOwner owner)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return edata;
}

/*
 * subxact_run: run body(arg) in an internal subtransaction.  NULL when it
 * returned (the subtransaction is then released into the caller's); when
 * it raised an error, the subtransaction is rolled back and the error is
 * returned, copied into the caller's memory context, if keep() says the
 * caller handles it, or raised again otherwise.
 */
ErrorData *
subxact_run(SubxactBody body, void *arg, SubxactKeep keep)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile kept = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		body(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata = rolled_back_error(cxt, owner);

		if (!keep(edata))
			ReThrowError(edata);
		kept = edata;
	}
	PG_END_TRY();
	return kept;
}

/*
 * subxact_keep_if: run body(arg) in an internal subtransaction and keep
 * what it did only when it returns true.  When it returns false, the
 * subtransaction is rolled back: its writes are undone and the row locks
 * and lock-manager locks it took are let go at once (they would otherwise
 * be held to the end of the caller's transaction).  An error it raises
 * rolls it back too and goes on.
 */
bool
subxact_keep_if(SubxactTry body, void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool keep = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		keep = body(arg);
	}
	PG_CATCH();
	{
		ReThrowError(rolled_back_error(cxt, owner));
	}
	PG_END_TRY();
	if (keep)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return keep;
}
