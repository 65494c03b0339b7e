/*-------------------------------------------------------------------------
 *
 * contract_check.c
 *	  Checking a result against an output contract compiled by
 *	  contract_compile.c, and the per-backend cache of compiled contracts.
 *
 * Members of a value are found by a single comparison at a moving cursor
 * (jsonb stores them in the order the contract's properties are sorted in)
 * and otherwise by binary search.  Checking never re-parses the contract and
 * builds no paths or messages unless a violation is found.
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

#include "args.h"
#include "contract_tree.h"

/* longest value rendering shown in an enum violation, in bytes */
#define JG_MAX_SHOWN_VALUE	60

/* one step of the path into a checked value; a NULL frame is the root */
typedef struct JgPathFrame
{
	const struct JgPathFrame *parent;
	const char *key;			/* member name, or NULL for an array index */
	int			keylen;
	int			index;
} JgPathFrame;

/*
 * The longest operation name in bytes: names are limited in characters
 * (MAX_NAME_CHARS, args.h), each up to MAX_MULTIBYTE_CHAR_LEN bytes.
 */
#define OPERATION_KEY_BYTES (MAX_NAME_CHARS * MAX_MULTIBYTE_CHAR_LEN + 1)

/* per-backend cache entry, keyed by operation name */
typedef struct JgCacheEntry
{
	char		operation[OPERATION_KEY_BYTES]; /* hash key; must be first */
	int64		version;
	MemoryContext cxt;			/* owns everything in contract */
	JgContract *contract;
} JgCacheEntry;

static HTAB *jg_contract_cache = NULL;

static char *make_violation(const JgPathFrame *path, const char *fmt,...)
			pg_attribute_printf(2, 3);
static char *check_node(const JgContract *c, JsonbValue *v,
						const JgPathFrame *path);

/*
 * contract_quote_string
 *		Return a palloc'd JSON string literal (quoted and escaped) for the
 *		given bytes, so names and values are shown unambiguously in messages.
 */
char *
contract_quote_string(const char *data, int len)
{
	StringInfoData buf;
	char	   *tmp = pnstrdup(data, len);

	initStringInfo(&buf);
	escape_json(&buf, tmp);
	pfree(tmp);
	return buf.data;
}

/*
 * is_plain_identifier
 *		True if the key can be shown as ".name" in a path, i.e. it matches
 *		[A-Za-z_][A-Za-z0-9_]*; other keys are shown as ["name"].
 */
static bool
is_plain_identifier(const char *s, int len)
{
	int			i;

	if (len == 0)
		return false;
	for (i = 0; i < len; i++)
	{
		char		ch = s[i];

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_')
			continue;
		if (i > 0 && ch >= '0' && ch <= '9')
			continue;
		return false;
	}
	return true;
}

/*
 * contract_append_path_key
 *		Append an object member step (.name or ["name"]) to a path.
 */
void
contract_append_path_key(StringInfo buf, const char *key, int len)
{
	if (is_plain_identifier(key, len))
	{
		appendStringInfoChar(buf, '.');
		appendBinaryStringInfo(buf, key, len);
	}
	else
	{
		char	   *quoted = contract_quote_string(key, len);

		appendStringInfo(buf, "[%s]", quoted);
		pfree(quoted);
	}
}

/*
 * append_value_path
 *		Append the JSON path of a frame (root first) to buf.
 */
static void
append_value_path(StringInfo buf, const JgPathFrame *path)
{
	if (path == NULL)
	{
		appendStringInfoChar(buf, '$');
		return;
	}
	append_value_path(buf, path->parent);
	if (path->key != NULL)
		contract_append_path_key(buf, path->key, path->keylen);
	else
		appendStringInfo(buf, "[%d]", path->index);
}

/*
 * make_violation
 *		Build a violation message: the value path, ": ", then the formatted
 *		description.  Returned palloc'd in CurrentMemoryContext.
 */
static char *
make_violation(const JgPathFrame *path, const char *fmt,...)
{
	StringInfoData buf;

	initStringInfo(&buf);
	append_value_path(&buf, path);
	appendStringInfoString(&buf, ": ");
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&buf, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&buf, needed);
	}
	return buf.data;
}

/*
 * value_kind
 *		Classify a jsonb value as one of the JSON types (never
 *		JG_TYPE_INTEGER: integers are numbers with no fractional part).
 */
static JgType
value_kind(const JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return JG_TYPE_NULL;
		case jbvString:
			return JG_TYPE_STRING;
		case jbvNumeric:
			return JG_TYPE_NUMBER;
		case jbvBool:
			return JG_TYPE_BOOLEAN;
		case jbvBinary:
			return JsonContainerIsObject(v->val.binary.data) ?
				JG_TYPE_OBJECT : JG_TYPE_ARRAY;
		default:
			elog(ERROR, "unexpected jsonb value type: %d", (int) v->type);
	}
	return JG_TYPE_NULL;		/* keep compiler quiet */
}

/*
 * numeric_is_integral
 *		True if the number has no fractional part (so 1.0 is integral and
 *		1.5 is not).  Fast path: a display scale of 0 means integral.
 */
static bool
numeric_is_integral(Numeric num)
{
	Datum		d;

	num = DatumGetNumeric(NumericGetDatum(num));	/* short header, if any */
	if (numeric_is_nan(num) || numeric_is_inf(num))
		return false;
	d = NumericGetDatum(num);
	if (DatumGetInt32(DirectFunctionCall1(numeric_scale, d)) == 0)
		return true;
	return DatumGetBool(DirectFunctionCall2(numeric_eq, d,
											DirectFunctionCall1(numeric_floor,
																d)));
}

/*
 * values_equal
 *		jsonb equality of two values (scalars or embedded containers):
 *		numbers compare numerically, object key order is irrelevant.
 */
static bool
values_equal(const JsonbValue *a, const JsonbValue *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type)
	{
		case jbvNull:
			return true;
		case jbvBool:
			return a->val.boolean == b->val.boolean;
		case jbvString:
			return a->val.string.len == b->val.string.len &&
				memcmp(a->val.string.val, b->val.string.val,
					   a->val.string.len) == 0;
		case jbvNumeric:
			return DatumGetBool(DirectFunctionCall2(numeric_eq,
													NumericGetDatum(a->val.numeric),
													NumericGetDatum(b->val.numeric)));
		case jbvBinary:
			/* same kind and element count is necessary for equality */
			if (a->val.binary.data->header != b->val.binary.data->header)
				return false;
			return compareJsonbContainers(a->val.binary.data,
										  b->val.binary.data) == 0;
		default:
			elog(ERROR, "unexpected jsonb value type: %d", (int) a->type);
	}
	return false;				/* keep compiler quiet */
}

/*
 * render_value
 *		Return the JSON text of a value for messages, cut to about
 *		JG_MAX_SHOWN_VALUE bytes (on a character boundary) plus "...".
 */
static char *
render_value(const JsonbValue *v)
{
	char	   *text;
	int			len;

	if (v->type == jbvBinary)
		text = JsonbToCString(NULL, v->val.binary.data, v->val.binary.len);
	else
	{
		Jsonb	   *jb = JsonbValueToJsonb((JsonbValue *) v);

		text = JsonbToCString(NULL, &jb->root, VARSIZE(jb));
	}

	len = strlen(text);
	if (len > JG_MAX_SHOWN_VALUE)
	{
		int			cut = pg_mbcliplen(text, len, JG_MAX_SHOWN_VALUE);

		text = psprintf("%.*s...", cut, text);
	}
	return text;
}

/*
 * type_violation
 *		Message for a value whose type is not allowed by the contract.
 */
static char *
type_violation(const JgContract *c, JgType kind, const JgPathFrame *path)
{
	StringInfoData expected;
	int			i;

	if (c->ntypes == 1)
		return make_violation(path, "expected %s, got %s",
							  jg_type_names[c->types[0]],
							  jg_type_names[kind]);

	initStringInfo(&expected);
	for (i = 0; i < c->ntypes; i++)
	{
		if (i > 0)
			appendStringInfoString(&expected, ", ");
		appendStringInfoString(&expected, jg_type_names[c->types[i]]);
	}
	return make_violation(path, "expected one of [%s], got %s",
						  expected.data, jg_type_names[kind]);
}

/*
 * find_property
 *		Find the property for a key of the value.  Value keys arrive in
 *		jsonb key order, the same order as c->props, so every property
 *		before *cursor is smaller than the key: the entry at *cursor is
 *		tried first, then binary search over the rest.  *cursor is advanced
 *		past everything smaller than the key.  NULL if not a property.
 */
static const JgProperty *
find_property(const JgContract *c, const char *key, int len, int *cursor)
{
	int			lo = *cursor;
	int			hi = c->nprops - 1;
	int			cmp;

	if (lo > hi)
		return NULL;

	cmp = compare_keys(key, len, c->props[lo].key.data, c->props[lo].key.len);
	if (cmp <= 0)
	{
		if (cmp < 0)
			return NULL;
		*cursor = lo + 1;
		return &c->props[lo];
	}

	lo++;
	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;
		const JgProperty *p = &c->props[mid];

		cmp = compare_keys(key, len, p->key.data, p->key.len);
		if (cmp == 0)
		{
			*cursor = mid + 1;
			return p;
		}
		if (cmp < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	*cursor = lo;
	return NULL;
}

/*
 * missing_violation
 *		Message for a missing required key (index in contract order).
 */
static char *
missing_violation(const JgContract *c, int order, const JgPathFrame *path)
{
	return make_violation(path, "missing required key %s",
						  contract_quote_string(c->required[order].data,
									   c->required[order].len));
}

/*
 * check_object
 *		Check an object value: required keys (the first missing one in
 *		contract order wins), then members in the value's key order.
 *
 * When members have to be visited anyway, required keys are checked in the
 * same pass by merging the sorted required list with the value's keys; a
 * member violation found on the way is only returned once it is known that
 * no required key is missing.  Otherwise a few required keys are looked up
 * directly.  Returns the first violation or NULL.
 */
static char *
check_object(const JgContract *c, JsonbContainer *jc, const JgPathFrame *path)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	val;
	JsonbValue	key = {0};
	int			cursor = 0;
	int			req = 0;
	int			first_missing = PG_INT32_MAX;
	char	   *member_msg = NULL;

	if (!c->check_members && c->nrequired <= 4)
	{
		int			i;

		for (i = 0; i < c->nrequired; i++)
		{
			JsonbValue	found;

			if (getKeyJsonValueFromContainer(jc, c->required[i].data,
											 c->required[i].len,
											 &found) == NULL)
				return missing_violation(c, i, path);
		}
		return NULL;
	}

	it = JsonbIteratorInit(jc);
	while ((tok = JsonbIteratorNext(&it, &val, true)) != WJB_DONE)
	{
		const JgProperty *prop;
		JgPathFrame frame;

		if (tok == WJB_KEY)
		{
			key = val;
			continue;
		}
		if (tok != WJB_VALUE)
			continue;

		/* merge step: required keys smaller than this key are missing */
		while (req < c->nrequired)
		{
			const JgKey *rk = &c->required_sorted[req].key;
			int			cmp = compare_keys(rk->data, rk->len,
										   key.val.string.val,
										   key.val.string.len);

			if (cmp > 0)
				break;
			if (cmp < 0)
				first_missing = Min(first_missing,
									c->required_sorted[req].order);
			req++;
			if (cmp == 0)
				break;
		}

		if (member_msg != NULL || first_missing != PG_INT32_MAX ||
			!c->check_members)
		{
			/* the outcome of member checks no longer matters */
			if (req >= c->nrequired)
				break;
			continue;
		}

		prop = find_property(c, key.val.string.val, key.val.string.len,
							 &cursor);
		if (prop == NULL)
		{
			if (!c->additional)
				member_msg = make_violation(path, "unexpected key %s",
											contract_quote_string(key.val.string.val,
														 key.val.string.len));
		}
		else if (!prop->contract->trivial)
		{
			frame.parent = path;
			frame.key = key.val.string.val;
			frame.keylen = key.val.string.len;
			frame.index = 0;
			member_msg = check_node(prop->contract, &val, &frame);
		}

		/* a member violation stands if no required key can be missing */
		if (member_msg != NULL && first_missing == PG_INT32_MAX &&
			req >= c->nrequired)
			return member_msg;
	}

	while (req < c->nrequired)
	{
		first_missing = Min(first_missing, c->required_sorted[req].order);
		req++;
	}
	if (first_missing != PG_INT32_MAX)
		return missing_violation(c, first_missing, path);
	return member_msg;
}

/*
 * check_array
 *		Check every element of an array against "items", in order.  Returns
 *		the first violation or NULL.
 */
static char *
check_array(const JgContract *c, JsonbContainer *jc, const JgPathFrame *path)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	val;
	int			index = 0;

	it = JsonbIteratorInit(jc);
	while ((tok = JsonbIteratorNext(&it, &val, true)) != WJB_DONE)
	{
		JgPathFrame frame;
		char	   *msg;

		if (tok != WJB_ELEM)
			continue;
		frame.parent = path;
		frame.key = NULL;
		frame.keylen = 0;
		frame.index = index++;
		msg = check_node(c->items, &val, &frame);
		if (msg != NULL)
			return msg;
	}
	return NULL;
}

/*
 * check_node
 *		Check one value (scalar or embedded container) against a compiled
 *		node: type, enum, then object or array contents.  Returns the first
 *		violation or NULL.
 */
static char *
check_node(const JgContract *c, JsonbValue *v, const JgPathFrame *path)
{
	JgType		kind;

	if (c->trivial)
		return NULL;

	check_stack_depth();

	kind = value_kind(v);

	if (c->typemask != 0 && (c->typemask & JG_TYPE_BIT(kind)) == 0)
	{
		if (!(kind == JG_TYPE_NUMBER &&
			  (c->typemask & JG_TYPE_BIT(JG_TYPE_INTEGER)) != 0 &&
			  numeric_is_integral(v->val.numeric)))
			return type_violation(c, kind, path);
	}

	if (c->nenum > 0)
	{
		int			i;

		for (i = 0; i < c->nenum; i++)
		{
			if (values_equal(v, &c->enumvals[i]))
				break;
		}
		if (i == c->nenum)
			return make_violation(path,
								  "value %s is not one of the allowed values",
								  render_value(v));
	}

	if (kind == JG_TYPE_OBJECT && (c->nrequired > 0 || c->check_members))
		return check_object(c, v->val.binary.data, path);
	if (kind == JG_TYPE_ARRAY && c->items != NULL)
		return check_array(c, v->val.binary.data, path);
	return NULL;
}

/*
 * contract_first_violation
 *		Check a whole jsonb document against a compiled contract.  Returns
 *		NULL if it conforms, else a palloc'd message for the first violation.
 */
char *
contract_first_violation(const JgContract *contract, Jsonb *value)
{
	JsonbValue	v;

	if (contract->trivial)
		return NULL;

	if (JB_ROOT_IS_SCALAR(value))
	{
		if (!JsonbExtractScalar(&value->root, &v))
			elog(ERROR, "could not extract scalar from jsonb");
	}
	else
	{
		v.type = jbvBinary;
		v.val.binary.data = &value->root;
		v.val.binary.len = VARSIZE(value) - VARHDRSZ;
	}
	return check_node(contract, &v, NULL);
}


/*
 * contract_cache_get
 *		Return the compiled contract of an operation, compiling it (into a
 *		new child of CacheMemoryContext) when the cached version differs.
 *		The old entry is replaced only once the new compile succeeded, so a
 *		failing compile leaves the cache as it was and leaks nothing.
 */
const JgContract *
contract_cache_get(const char *operation, int64 version, Datum contract_datum)
{
	char		key[OPERATION_KEY_BYTES];
	size_t		len = strlen(operation);
	JgCacheEntry *entry;
	MemoryContext cxt;
	JgContract *compiled = NULL;
	bool		found = false;

	/* never for a stored name: define_operation() took at most 63 characters */
	if (len >= OPERATION_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("operation name \"%s\" is too long", operation)));
	memset(key, 0, sizeof(key));
	memcpy(key, operation, len);

	if (jg_contract_cache == NULL)
	{
		HASHCTL		ctl;

		if (CacheMemoryContext == NULL)
			CreateCacheMemoryContext();
		ctl.keysize = OPERATION_KEY_BYTES;
		ctl.entrysize = sizeof(JgCacheEntry);
		ctl.hcxt = CacheMemoryContext;
		jg_contract_cache = hash_create("jobguard output contracts", 32, &ctl,
										HASH_ELEM | HASH_STRINGS |
										HASH_CONTEXT);
	}

	entry = (JgCacheEntry *) hash_search(jg_contract_cache, key, HASH_FIND,
										 NULL);
	if (entry != NULL && entry->version == version)
		return entry->contract;

	/* miss: compile into a fresh context, dropped again on any error */
	cxt = AllocSetContextCreate(CacheMemoryContext, "jobguard output contract",
								ALLOCSET_SMALL_SIZES);
	PG_TRY();
	{
		Jsonb	   *jb = DatumGetJsonbP(contract_datum);

		MemoryContextCopyAndSetIdentifier(cxt, key);
		compiled = contract_compile(key, jb, cxt);
		if ((Pointer) jb != DatumGetPointer(contract_datum))
			pfree(jb);
		entry = (JgCacheEntry *) hash_search(jg_contract_cache, key,
											 HASH_ENTER, &found);
	}
	PG_CATCH();
	{
		MemoryContextDelete(cxt);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/* nothing below can fail, so the entry is never left half-built */
	if (found)
		MemoryContextDelete(entry->cxt);
	entry->version = version;
	entry->cxt = cxt;
	entry->contract = compiled;
	return compiled;
}
