/*-------------------------------------------------------------------------
 *
 * sweeper.h
 *	  The background worker that writes down overdue attempts as unknown
 *	  (sweeper.c), set up by _PG_init.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_SWEEPER_H
#define JOBGUARD_SWEEPER_H

extern void sweeper_init(void);

#endif							/* JOBGUARD_SWEEPER_H */
