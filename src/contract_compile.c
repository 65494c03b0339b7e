/*-------------------------------------------------------------------------
 *
 * contract_compile.c
 *	  Defining an output contract: validate a contract document, a strict
 *	  subset of JSON Schema, and compile it into a tree of JgContract nodes.
 *
 * Supported keywords (and nothing else): type, required, properties,
 * additionalProperties (boolean only), items (single sub-contract only) and
 * enum.  Any other keyword makes the contract invalid; it is never ignored.
 *
 * Properties are kept in an array sorted in jsonb key order (length, then
 * bytes), so that contract_check.c finds the members of a value, which
 * jsonb stores in that same order, usually by a single comparison.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/catcache.h"
#include "utils/fmgrprotos.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "contract_tree.h"
#include "pg_compat.h"

const char *const jg_type_names[JG_NUM_TYPES] = {
	"object", "array", "string", "number", "integer", "boolean", "null"
};

/* state of a compilation: where errors are reported, and into what */
typedef struct JgCompileState
{
	const char *operation;
	MemoryContext cxt;
	StringInfoData path;		/* JSON path into the contract document */
} JgCompileState;

pg_noreturn static void compile_error(JgCompileState *st, const char *fmt,...)
			pg_attribute_printf(2, 3);
static JgContract *compile_node(JgCompileState *st, JsonbContainer *jc);

/*
 * compile_error
 *		Report an invalid contract: the detail is the current contract path,
 *		": ", and the formatted description.  Does not return.
 */
static void
compile_error(JgCompileState *st, const char *fmt,...)
{
	StringInfoData detail;

	initStringInfo(&detail);
	appendBinaryStringInfo(&detail, st->path.data, st->path.len);
	appendStringInfoString(&detail, ": ");
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&detail, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&detail, needed);
	}

	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("output contract of operation \"%s\" is invalid",
					st->operation),
			 errdetail("%s", detail.data)));
	pg_unreachable();
}

/*
 * key_equals
 *		True if a jsonb string value equals the NUL-terminated keyword.
 */
static inline bool
key_equals(const JsonbValue *key, const char *keyword)
{
	int			len = strlen(keyword);

	return key->val.string.len == len &&
		memcmp(key->val.string.val, keyword, len) == 0;
}

/*
 * compare_properties
 *		qsort comparator for JgProperty, in jsonb key order.
 */
static int
compare_properties(const void *a, const void *b)
{
	const JgProperty *pa = (const JgProperty *) a;
	const JgProperty *pb = (const JgProperty *) b;

	return compare_keys(pa->key.data, pa->key.len, pb->key.data, pb->key.len);
}

/*
 * copy_key
 *		Copy a jsonb string into the contract's context (NUL-terminated, so
 *		it can be used in messages), returning it as a JgKey.
 */
static JgKey
copy_key(JgCompileState *st, const JsonbValue *str)
{
	JgKey		key;
	char	   *data = MemoryContextAlloc(st->cxt, str->val.string.len + 1);

	memcpy(data, str->val.string.val, str->val.string.len);
	data[str->val.string.len] = '\0';
	key.data = data;
	key.len = str->val.string.len;
	return key;
}

/*
 * is_container
 *		True if v is an embedded jsonb container of the wanted kind
 *		(object when want_object, array otherwise).
 */
static inline bool
is_container(const JsonbValue *v, bool want_object)
{
	if (v->type != jbvBinary)
		return false;
	return want_object ? JsonContainerIsObject(v->val.binary.data) :
		JsonContainerIsArray(v->val.binary.data);
}

/*
 * lookup_type_name
 *		Map a type name to its JgType, or return -1 if it is not one of the
 *		supported names.
 */
static int
lookup_type_name(const JsonbValue *name)
{
	int			i;

	for (i = 0; i < JG_NUM_TYPES; i++)
	{
		if (key_equals(name, jg_type_names[i]))
			return i;
	}
	return -1;
}

/*
 * add_type
 *		Add one type name (a jsonb string) to node's type list, reporting an
 *		unknown or duplicate name at the current contract path.
 */
static void
add_type(JgCompileState *st, JgContract *node, const JsonbValue *name)
{
	int			t = lookup_type_name(name);

	if (t < 0)
		compile_error(st, "unknown type %s",
					  contract_quote_string(name->val.string.val, name->val.string.len));
	if (node->typemask & JG_TYPE_BIT(t))
		compile_error(st, "duplicate type %s",
					  contract_quote_string(name->val.string.val, name->val.string.len));
	node->typemask |= JG_TYPE_BIT(t);
	node->types[node->ntypes++] = (JgType) t;
}

/*
 * compile_type
 *		Compile "type": a type name or a non-empty array of distinct names.
 */
static void
compile_type(JgCompileState *st, JgContract *node, JsonbValue *v)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	elem;
	int			index = 0;

	if (v->type == jbvString)
	{
		add_type(st, node, v);
		return;
	}
	if (!is_container(v, false) || JsonContainerSize(v->val.binary.data) == 0)
		compile_error(st, "must be a string or a non-empty array of strings");

	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		int			save_len;

		if (tok != WJB_ELEM)
			continue;
		save_len = st->path.len;
		appendStringInfo(&st->path, "[%d]", index);
		if (elem.type != jbvString)
			compile_error(st, "must be a string");
		add_type(st, node, &elem);
		st->path.len = save_len;
		st->path.data[save_len] = '\0';
		index++;
	}
}

/*
 * compare_required
 *		qsort comparator for JgRequired: jsonb key order, then contract order
 *		(so of two equal keys the later one sorts second).
 */
static int
compare_required(const void *a, const void *b)
{
	const JgRequired *ra = (const JgRequired *) a;
	const JgRequired *rb = (const JgRequired *) b;
	int			cmp = compare_keys(ra->key.data, ra->key.len,
								   rb->key.data, rb->key.len);

	if (cmp != 0)
		return cmp;
	return (ra->order < rb->order) ? -1 : (ra->order > rb->order);
}

/*
 * compile_required
 *		Compile "required": an array of distinct strings.  Kept in contract
 *		order (the first missing key reported is deterministic) and also in
 *		jsonb key order, so presence can be checked by merging with the
 *		value's keys, which jsonb stores in that order.
 */
static void
compile_required(JgCompileState *st, JgContract *node, JsonbValue *v)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	elem;
	int			n;
	int			i;
	int			dup = -1;

	if (!is_container(v, false))
		compile_error(st, "must be an array of strings");

	n = JsonContainerSize(v->val.binary.data);
	node->required = MemoryContextAlloc(st->cxt, sizeof(JgKey) * Max(n, 1));
	node->required_sorted = MemoryContextAlloc(st->cxt,
											   sizeof(JgRequired) * Max(n, 1));
	node->nrequired = 0;

	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		if (elem.type != jbvString)
		{
			appendStringInfo(&st->path, "[%d]", node->nrequired);
			compile_error(st, "must be a string");
		}
		node->required[node->nrequired] = copy_key(st, &elem);
		node->required_sorted[node->nrequired].key =
			node->required[node->nrequired];
		node->required_sorted[node->nrequired].order = node->nrequired;
		node->nrequired++;
	}

	if (node->nrequired > 1)
		qsort(node->required_sorted, node->nrequired, sizeof(JgRequired),
			  compare_required);

	/* report the earliest repetition of a key, in contract order */
	for (i = 1; i < node->nrequired; i++)
	{
		const JgRequired *prev = &node->required_sorted[i - 1];
		const JgRequired *cur = &node->required_sorted[i];

		if (compare_keys(prev->key.data, prev->key.len,
						 cur->key.data, cur->key.len) == 0 &&
			(dup < 0 || cur->order < dup))
			dup = cur->order;
	}
	if (dup >= 0)
	{
		appendStringInfo(&st->path, "[%d]", dup);
		compile_error(st, "duplicate key %s",
					  contract_quote_string(node->required[dup].data,
								   node->required[dup].len));
	}
}

/*
 * compile_properties
 *		Compile "properties": an object whose members are sub-contracts.
 *		The result is sorted in jsonb key order for lookups while checking.
 */
static void
compile_properties(JgCompileState *st, JgContract *node, JsonbValue *v)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	val;
	JsonbValue	key = {0};
	int			n;

	if (!is_container(v, true))
		compile_error(st, "must be an object");

	n = JsonContainerSize(v->val.binary.data);
	node->props = MemoryContextAlloc(st->cxt, sizeof(JgProperty) * Max(n, 1));
	node->nprops = 0;

	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &val, true)) != WJB_DONE)
	{
		int			save_len;
		JgProperty *prop;

		if (tok == WJB_KEY)
		{
			key = val;
			continue;
		}
		if (tok != WJB_VALUE)
			continue;

		save_len = st->path.len;
		contract_append_path_key(&st->path, key.val.string.val, key.val.string.len);
		if (!is_container(&val, true))
			compile_error(st, "contract must be a JSON object");
		prop = &node->props[node->nprops++];
		prop->key = copy_key(st, &key);
		prop->contract = compile_node(st, val.val.binary.data);
		st->path.len = save_len;
		st->path.data[save_len] = '\0';
	}

	/* jsonb already yields keys in this order; sort anyway to be safe */
	if (node->nprops > 1)
		qsort(node->props, node->nprops, sizeof(JgProperty),
			  compare_properties);
}

/*
 * copy_enum_value
 *		Copy one enum member (scalar or container) into the contract's
 *		context, so it no longer points into the contract document.
 */
static void
copy_enum_value(JgCompileState *st, JsonbValue *dst, const JsonbValue *src)
{
	*dst = *src;
	switch (src->type)
	{
		case jbvString:
			dst->val.string.val = MemoryContextAlloc(st->cxt,
													 Max(src->val.string.len, 1));
			memcpy(dst->val.string.val, src->val.string.val,
				   src->val.string.len);
			break;
		case jbvNumeric:
			{
				Size		size = VARSIZE_ANY(src->val.numeric);

				dst->val.numeric = MemoryContextAlloc(st->cxt, size);
				memcpy(dst->val.numeric, src->val.numeric, size);
				break;
			}
		case jbvBinary:
			/* containers use relative offsets, so a byte copy is valid */
			dst->val.binary.data = MemoryContextAlloc(st->cxt,
													  src->val.binary.len);
			memcpy(dst->val.binary.data, src->val.binary.data,
				   src->val.binary.len);
			break;
		case jbvNull:
		case jbvBool:
			break;
		default:
			elog(ERROR, "unexpected jsonb value type: %d", (int) src->type);
	}
}

/*
 * compile_enum
 *		Compile "enum": a non-empty array of arbitrary JSON values.
 */
static void
compile_enum(JgCompileState *st, JgContract *node, JsonbValue *v)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	elem;
	int			n;

	if (!is_container(v, false) || JsonContainerSize(v->val.binary.data) == 0)
		compile_error(st, "must be a non-empty array");

	n = JsonContainerSize(v->val.binary.data);
	node->enumvals = MemoryContextAlloc(st->cxt, sizeof(JsonbValue) * n);
	node->nenum = 0;

	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &elem, true)) != WJB_DONE)
	{
		if (tok == WJB_ELEM)
			copy_enum_value(st, &node->enumvals[node->nenum++], &elem);
	}
}

/*
 * compile_items
 *		Compile "items": one sub-contract for every array element.  The
 *		tuple (array) form and boolean schemas are refused.
 */
static void
compile_items(JgCompileState *st, JgContract *node, JsonbValue *v)
{
	if (is_container(v, false))
		compile_error(st, "must be an object (tuple form is not supported)");
	if (!is_container(v, true))
		compile_error(st, "must be an object");
	node->items = compile_node(st, v->val.binary.data);
}

/*
 * compile_node
 *		Compile one contract object (the root or a sub-contract) found at
 *		the current contract path, returning a node allocated in st->cxt.
 */
static JgContract *
compile_node(JgCompileState *st, JsonbContainer *jc)
{
	JgContract *node;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	val;
	JsonbValue	key = {0};
	int			i;

	check_stack_depth();

	node = MemoryContextAllocZero(st->cxt, sizeof(JgContract));
	node->additional = true;

	it = JsonbIteratorInit(jc);
	while ((tok = JsonbIteratorNext(&it, &val, true)) != WJB_DONE)
	{
		void		(*compile_kw) (JgCompileState *, JgContract *, JsonbValue *);
		int			save_len;

		if (tok == WJB_KEY)
		{
			key = val;
			continue;
		}
		if (tok != WJB_VALUE)
			continue;

		if (key_equals(&key, "type"))
			compile_kw = compile_type;
		else if (key_equals(&key, "required"))
			compile_kw = compile_required;
		else if (key_equals(&key, "properties"))
			compile_kw = compile_properties;
		else if (key_equals(&key, "items"))
			compile_kw = compile_items;
		else if (key_equals(&key, "enum"))
			compile_kw = compile_enum;
		else if (key_equals(&key, "additionalProperties"))
			compile_kw = NULL;
		else
			compile_error(st, "unsupported keyword %s",
						  contract_quote_string(key.val.string.val, key.val.string.len));

		save_len = st->path.len;
		contract_append_path_key(&st->path, key.val.string.val, key.val.string.len);
		if (compile_kw != NULL)
			compile_kw(st, node, &val);
		else
		{
			if (val.type != jbvBool)
				compile_error(st, "must be a boolean");
			node->additional = val.val.boolean;
		}
		st->path.len = save_len;
		st->path.data[save_len] = '\0';
	}

	/* precompute what checking has to do at this node */
	node->check_members = !node->additional;
	for (i = 0; i < node->nprops; i++)
	{
		if (!node->props[i].contract->trivial)
			node->check_members = true;
	}
	if (node->items != NULL && node->items->trivial)
		node->items = NULL;
	node->trivial = node->typemask == 0 && node->nenum == 0 &&
		node->nrequired == 0 && !node->check_members && node->items == NULL;

	return node;
}

/*
 * contract_compile
 *		Validate a contract document and compile it into cxt.  Errors out
 *		(ERRCODE_INVALID_PARAMETER_VALUE) with a contract path in the detail
 *		if the contract uses anything outside the supported subset.
 */
JgContract *
contract_compile(const char *operation, Jsonb *contract, MemoryContext cxt)
{
	JgCompileState st;
	JgContract *result;

	st.operation = operation;
	st.cxt = cxt;
	initStringInfo(&st.path);
	appendStringInfoChar(&st.path, '$');

	if (!JB_ROOT_IS_OBJECT(contract))
		compile_error(&st, "contract must be a JSON object");

	result = compile_node(&st, &contract->root);
	pfree(st.path.data);
	return result;
}

