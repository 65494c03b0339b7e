/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The launcher that keeps jobguard's background workers running in
 *	  every database where jobguard is installed (launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_LAUNCHER_H
#define JOBGUARD_LAUNCHER_H

/* the kinds of worker the launcher starts in each database */
typedef enum LaunchedKind
{
	LAUNCHED_SWEEPER,
	LAUNCHED_NOTIFIER,
	LAUNCHED_KINDS
} LaunchedKind;

extern void launcher_init(void);
extern void launcher_report_extension(bool installed);
extern bool launcher_worker_running(LaunchedKind kind, bool running);
extern void launcher_database_used(void);

#endif							/* JOBGUARD_LAUNCHER_H */
