/*-------------------------------------------------------------------------
 *
 * limits.h
 *	  The provider limits, max_in_flight and max_per_second (limits.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_LIMITS_H
#define JOBGUARD_LIMITS_H

#include "postgres.h"

#include "nodes/execnodes.h"

extern bool limits_apply_to(const char *provider);
extern bool limits_admit_claim(const char *provider, int freeing);
extern void limits_admit_begun(int64 attempt_id);
extern void limits_start_done(void);
extern bool limits_may_redrive(void);
extern void limits_put_stats(ReturnSetInfo *rsinfo);

#endif							/* JOBGUARD_LIMITS_H */
