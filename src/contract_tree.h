/*-------------------------------------------------------------------------
 *
 * contract_tree.h
 *	  The compiled form of an output contract, private to the contract
 *	  files: contract_compile.c builds the tree, contract_check.c walks it
 *	  to check a value.  Everything else sees only contract.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBGUARD_CONTRACT_TREE_H
#define JOBGUARD_CONTRACT_TREE_H

#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "contract.h"

/* JSON types a contract can name in "type" */
typedef enum JgType
{
	JG_TYPE_OBJECT,
	JG_TYPE_ARRAY,
	JG_TYPE_STRING,
	JG_TYPE_NUMBER,
	JG_TYPE_INTEGER,
	JG_TYPE_BOOLEAN,
	JG_TYPE_NULL,
	JG_NUM_TYPES
} JgType;

/* the names of the JgTypes, as a contract's "type" spells them */
extern const char *const jg_type_names[JG_NUM_TYPES];

#define JG_TYPE_BIT(t)	((uint8) (1 << (t)))

/* a key name copied into the contract's memory (NUL-terminated too) */
typedef struct JgKey
{
	const char *data;
	int			len;
} JgKey;

/* a "required" key in jsonb key order, with its position in the contract */
typedef struct JgRequired
{
	JgKey		key;
	int			order;
} JgRequired;

/* one entry of "properties" */
typedef struct JgProperty
{
	JgKey		key;
	JgContract *contract;
} JgProperty;

/* a compiled (sub-)contract */
struct JgContract
{
	uint8		typemask;		/* JG_TYPE_BIT set; 0 means any type */
	int			ntypes;			/* "type" entries, in contract order, */
	JgType		types[JG_NUM_TYPES];	/* ... used for messages only */
	int			nenum;			/* 0 means no "enum" */
	JsonbValue *enumvals;		/* scalars, or jbvBinary containers */
	int			nrequired;
	JgKey	   *required;		/* in contract order */
	JgRequired *required_sorted;	/* the same, in jsonb key order */
	int			nprops;
	JgProperty *props;			/* sorted in jsonb key order */
	bool		additional;		/* additionalProperties (default true) */
	JgContract *items;			/* NULL if no "items" */
	bool		check_members;	/* must object members be visited? */
	bool		trivial;		/* accepts every value */
};

/*
 * compare_keys
 *		Order two keys the way jsonb orders object keys: shorter first, then
 *		bytewise.  Returns <0, 0 or >0.
 */
static inline int
compare_keys(const char *a, int alen, const char *b, int blen)
{
	if (alen != blen)
		return (alen < blen) ? -1 : 1;
	return memcmp(a, b, alen);
}


extern char *contract_quote_string(const char *data, int len);
extern void contract_append_path_key(StringInfo buf, const char *key, int len);

#endif							/* JOBGUARD_CONTRACT_TREE_H */
