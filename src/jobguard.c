/*-------------------------------------------------------------------------
 *
 * jobguard.c
 *	  Module initialisation: PG_MODULE_MAGIC, and _PG_init, which defines
 *	  the GUCs and sets up the shared counters and the sweeper.
 *
 * The SQL-callable functions live in the files named for what they serve;
 * src/README.md maps them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "claim_floor.h"
#include "notify_worker.h"
#include "args.h"
#include "audit.h"
#include "job_notify.h"
#include "launcher.h"
#include "metrics.h"
#include "store.h"
#include "store_backend.h"
#include "sweeper.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * _PG_init: define the GUCs; when loaded through shared_preload_libraries,
 * also reserve the shared counters and register the launcher, which
 * starts the sweeper and notifier of each database.
 * Without preloading everything else works: the derived state is the truth.
 */
void
_PG_init(void)
{
	DefineCustomBoolVariable("jobguard.notify",
							 "Sends NOTIFY jobguard_jobs, '<job_id>:<state>' when a job succeeds, fails or is cancelled.",
							 "Preloaded, a background worker sends them just after the commit; otherwise the "
							 "finishing transaction sends them and queues behind other notifying commits.",
							 &notify_enabled, true, PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("jobguard.fast_path",
							 "Reads and writes the rows of submit, begin_attempt and finish_attempt directly instead of through SQL statements.",
							 "Same rules, same locks, same answers, less work per call; off runs the SQL statements "
							 "(used to check both give the same results).",
							 &rows_fast_path, true, PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobguard.max_payload_size",
							"The largest params, result or error a call accepts.",
							"Larger ones are refused with SQLSTATE 54000 and nothing is written.",
							&max_payload_kb, 1024, 1, 1024 * 1024, PGC_SUSET, GUC_UNIT_KB,
							NULL, NULL, NULL);
	audit_init();
	/* first: it defines jobguard.database before sweeper_init reserves the prefix */
	launcher_init();
	sweeper_init();
	notifier_init();
	claim_floor_init();
	if (process_shared_preload_libraries_in_progress)
		stats_init();
}
