/*-------------------------------------------------------------------------
 *
 * metrics.h
 *	  The event counters and state gauges of jobguard.stats() (metrics.c), kept
 *	  per database in shared memory when jobguard is in
 *	  shared_preload_libraries.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_METRICS_H
#define JOBGUARD_METRICS_H

#include "postgres.h"

/* The event counters, in the order jobguard.stats() shows them. */
typedef enum StatCounter
{
	STAT_SUBMITS_CREATED,
	STAT_SUBMITS_REPLAYED,
	STAT_KEY_CONFLICTS,
	STAT_GATE_REFUSALS,
	STAT_CAS_WINS,
	STAT_CAS_LOSSES,
	STAT_CONTRACT_REJECTIONS,
	STAT_SWEPT,
	STAT_PURGED,
	STAT_REDRIVES,
	STAT_RECONCILED
} StatCounter;

#define STAT_COUNT (STAT_RECONCILED + 1)

/*
 * The state gauges: jobs per state, then attempts per state in AttemptState
 * order (GAUGE_ATTEMPT(state) names one).
 */
typedef enum Gauge
{
	GAUGE_JOBS_PENDING,
	GAUGE_JOBS_RUNNING,
	GAUGE_JOBS_UNKNOWN,
	GAUGE_JOBS_SUCCEEDED,
	GAUGE_JOBS_FAILED,
	GAUGE_JOBS_CANCELLED,
	GAUGE_ATTEMPTS_FIRST
} Gauge;

#define GAUGE_ATTEMPT(state) ((int) GAUGE_ATTEMPTS_FIRST + (int) (state))
#define GAUGE_COUNT (GAUGE_ATTEMPTS_FIRST + 6)
#define GAUGE_NONE (-1)

extern void stats_init(void);
extern void stats_count(StatCounter counter);
extern bool stats_read(StatCounter counter, uint64 *value);
extern const char *stats_counter_name(StatCounter counter);
extern void stats_reset(void);
extern void stats_add(StatCounter counter, int64 n);
extern const char *stats_gauge_name(Gauge gauge);
extern void stats_gauge_move(int from, int to, int64 n);
extern void stats_attempts_begun(int64 n);
extern int	stats_job_gauge_of(const char *state);
extern bool stats_gauges_kept(void);
extern bool stats_gauges_valid(void);
extern void stats_gauges_settle_prepared(void);
extern void stats_gauges_begin_recount(int64 *before);
extern void stats_gauges_end_recount(const int64 *before, const int64 *counted);
extern int64 stats_gauge_read(Gauge gauge);

#endif							/* JOBGUARD_METRICS_H */
