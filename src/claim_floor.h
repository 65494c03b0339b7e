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

extern void claim_floor_init(void);
extern void claim_work_ready(int64 job_id);
extern int64 claim_floor(void);
extern uint64 claim_floor_lowerings(void);
extern void claim_floor_publish(int64 floor, uint64 lowerings_before);
extern bool claim_wait_prepare(void);
extern void claim_wait_sleep(long timeout_ms);
extern void claim_wait_done(void);

#endif							/* JOBGUARD_CLAIM_FLOOR_H */
