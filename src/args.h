/*-------------------------------------------------------------------------
 *
 * args.h
 *	  What every SQL-callable entry point shares (args.c): checking its
 *	  arguments, refusing ids that name nothing, giving up after retries,
 *	  and building its result.
 *
 * Every entry point checks all of its arguments before it touches a table, so
 * a refused call writes nothing.  Required arguments that are NULL raise
 * 22004 naming the argument; the functions are not STRICT, which would
 * silently return NULL instead.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_ARGS_H
#define JOBGUARD_ARGS_H

#include "postgres.h"

#include "fmgr.h"
#include "access/tupdesc.h"
#include "datatype/timestamp.h"

#include "pg_compat.h"
#include "scopes.h"

/* Longest owner_id, idempotency_key and attempt_key, in characters. */
#define MAX_KEY_CHARS 255
/* Longest operation and provider name, in characters. */
#define MAX_NAME_CHARS 63
/*
 * The longest duration an argument may give (a timeout, a backoff, a
 * provider's dedupes_for, ...), in years; longer stored values are read
 * as this (duration_capped).  SQL statements spell it DURATION_MAX_SQL.
 */
#define MAX_DURATION_YEARS 100
#define DURATION_MAX_SQL "'100 years'::pg_catalog.interval"
/*
 * A provider's max_per_second: from one start in under three hours to a
 * million a second (as float8 with no underflow or overflow, and a JG010
 * wait that fits in milliseconds).  SQL statements read stored values
 * clamped to it (PER_SECOND_SQL in store_sql.c).
 */
#define MIN_PER_SECOND_TEXT "0.0001"
#define MAX_PER_SECOND_TEXT "1000000"
/* For text_arg: any length, but not empty (error messages, reasons). */
#define UNLIMITED_CHARS INT_MAX

/*
 * How often begin_attempt() and finish_attempt() try again when a
 * concurrent call changed what they had read (each retry means another
 * call made progress on the same job, so this is never reached in practice).
 */
#define MAX_TRIES 5

extern void require_arg(FunctionCallInfo fcinfo, int argno, const char *name);
extern Datum text_arg(FunctionCallInfo fcinfo, int argno, const char *name,
					  int max_chars);
extern Datum optional_text_arg(FunctionCallInfo fcinfo, int argno,
							   const char *name, int max_chars, bool *isnull);
extern int64 int64_arg(FunctionCallInfo fcinfo, int argno, const char *name);
extern Datum jsonb_arg(FunctionCallInfo fcinfo, int argno, const char *name);
extern int	max_payload_kb;
extern void require_payload_size(Datum value, const char *name);

/* The most providers one list names (claim's providers, a failover route). */
#define MAX_PROVIDER_LIST 64
extern int	require_provider_list(Datum list, const char *name);

/*
 * The longest wait claim(wait =>) and await() take: 366 days (a day as 24
 * hours, a month as 30 days); longer is 22023.
 */
#define MAX_WAIT_MS (INT64CONST(366) * 24 * 60 * 60 * 1000)
extern void require_wait_limit(int64 wait_ms, const char *name, const char *function);
extern void require_duration(Datum value, const char *name);
extern Interval duration_capped(const Interval *span);
extern double interval_seconds(const Interval *span);
extern void require_rate(Datum value, const char *name);
extern void require_tables_owner(FunctionCallInfo fcinfo);
pg_noreturn extern void report_job_not_found(int64 job_id, Oid caller, ScopeUse use);
pg_noreturn extern void report_attempt_not_found(int64 attempt_id, Oid caller, ScopeUse use);
pg_noreturn extern void report_retries_exhausted(const char *what, int64 id);
extern TupleDesc result_tupdesc(FunctionCallInfo fcinfo);
extern Datum text_result(const char *s);

#endif							/* JOBGUARD_ARGS_H */
