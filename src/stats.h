/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  The event counters of jobguard.stats() (stats.c), kept per database in
 *	  shared memory when jobguard is in shared_preload_libraries.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_STATS_H
#define JOBGUARD_STATS_H

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
	STAT_CONTRACT_REJECTIONS
} StatCounter;

#define STAT_COUNT (STAT_CONTRACT_REJECTIONS + 1)

extern void stats_init(void);
extern void stats_count(StatCounter counter);
extern bool stats_read(StatCounter counter, uint64 *value);
extern const char *stats_counter_name(StatCounter counter);
extern void stats_reset(void);

#endif							/* JOBGUARD_STATS_H */
