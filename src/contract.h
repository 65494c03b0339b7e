/*-------------------------------------------------------------------------
 *
 * contract.h
 *	  Output contracts for jobguard: a strict subset of JSON Schema used to
 *	  check the jsonb result of an operation.
 *
 * A contract is a JSON object using only the keywords type, required,
 * properties, additionalProperties, items and enum (applied recursively).
 * Contracts are compiled once into an opaque tree, then values are checked
 * against the tree.  A small per-backend cache keeps compiled contracts
 * keyed by operation name and contract version.
 *
 * src/contract.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_CONTRACT_H
#define JOBGUARD_CONTRACT_H

#include "utils/jsonb.h"
#include "utils/palloc.h"

typedef struct JgContract JgContract;	/* compiled contract (opaque) */

/*
 * Validate and compile `contract` (the output contract of `operation`, which
 * is only used in messages) into memory allocated in `cxt`.  Any problem is
 * reported with ereport(ERROR) and ERRCODE_INVALID_PARAMETER_VALUE; the
 * errdetail gives a JSON path into the contract and what is wrong with it.
 */
extern JgContract *contract_compile(const char *operation, Jsonb *contract,
									MemoryContext cxt);

/*
 * Check `value` against a compiled contract.  Returns NULL when the value
 * satisfies the contract, otherwise a message (palloc'd in
 * CurrentMemoryContext) describing the first violation, prefixed by a JSON
 * path into the value.
 */
extern char *contract_first_violation(const JgContract *contract,
									  Jsonb *value);

/*
 * Per-backend cache of compiled contracts keyed by operation name.  Returns
 * the cached contract when its version equals `version`, otherwise compiles
 * `contract_datum` (a possibly toasted jsonb Datum) and replaces the entry.
 * The result stays valid until the entry for `operation` is replaced.
 */
extern const JgContract *contract_cache_get(const char *operation,
											int64 version,
											Datum contract_datum);

#endif							/* JOBGUARD_CONTRACT_H */
