/*-------------------------------------------------------------------------
 *
 * subxact.c
 *	  subxact_run(): one piece of a call in an internal subtransaction, so
 *	  that an error it ends with undoes exactly what it wrote and, when the
 *	  caller expects that error, becomes a value instead of ending the call.
 *
 * Used where one call does many independent things (finish_many's
 * elements) or must turn one error into an answer (submit's unique
 * violation from a key index that ON CONFLICT does not arbitrate).  The
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
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (!keep(edata))
			ReThrowError(edata);
		kept = edata;
	}
	PG_END_TRY();
	return kept;
}
