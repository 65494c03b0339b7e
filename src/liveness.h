/*-------------------------------------------------------------------------
 *
 * liveness.h
 *	  Redrive, shared by redrive_attempt() and claim(), and the operators'
 *	  rule (liveness.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_LIVENESS_H
#define JOBGUARD_LIVENESS_H

#include "postgres.h"

#include "fmgr.h"
#include "utils/timestamp.h"

extern void operators_only(FunctionCallInfo fcinfo);

extern int64 redrive(int64 attempt_id, const char *scope, Oid userid, bool from_claim,
					 Datum worker, bool worker_null, Datum timeout, bool timeout_null,
					 TimestampTz started_at);

#endif							/* JOBGUARD_LIVENESS_H */
