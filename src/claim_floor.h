/*-------------------------------------------------------------------------
 *
 * claim_floor.h
 *	  The claim floor and the claim wake-ups (claim_floor.c): where in the
 *	  jobs claim() starts to look, and the sleep of claim(wait => ...).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_CLAIM_FLOOR_H
#define JOBGUARD_CLAIM_FLOOR_H

#include "postgres.h"

#include "datatype/timestamp.h"

extern void claim_floor_init(void);
extern void claim_work_ready(int64 job_id);
/*
 * The priorities that have claimable jobs, ascending, as far as known: n
 * of them, or n = -1 when not known (more than CLAIM_MAX_LEVELS, or a
 * commit made runnable a job whose priority it did not say).
 */
#define CLAIM_MAX_LEVELS 16
#define CLAIM_PRIORITY_UNKNOWN (-1000000)
typedef struct ClaimLevels
{
	int			n;
	int16		priority[CLAIM_MAX_LEVELS];
} ClaimLevels;

extern void claim_work_ready_at(int64 job_id, TimestampTz run_time, int priority);
extern bool claim_levels(ClaimLevels *levels);
extern void claim_levels_add(ClaimLevels *levels, int priority);
extern int64 claim_floor(void);
extern uint64 claim_floor_lowerings(void);
extern TimestampTz claim_time_floor(void);
extern void claim_floor_publish(int64 floor, TimestampTz time_floor, const ClaimLevels *levels,
								uint64 lowerings_before);
extern bool claim_wait_prepare(void);
extern void claim_wait_sleep(long timeout_ms);
extern void claim_wait_done(void);

#endif							/* JOBGUARD_CLAIM_FLOOR_H */
