/*-------------------------------------------------------------------------
 *
 * schema_level.h
 *	  Which release's SQL objects the database holds (schema_level.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_SCHEMA_LEVEL_H
#define JOBGUARD_SCHEMA_LEVEL_H

#include "postgres.h"

extern bool schema_is_1_2(void);
extern void require_schema_1_2(const char *function);
extern bool schema_is_1_3(void);
extern void require_schema_1_3(const char *function);

#endif							/* JOBGUARD_SCHEMA_LEVEL_H */
