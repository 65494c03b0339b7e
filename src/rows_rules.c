/*-------------------------------------------------------------------------
 *
 * rows_rules.c
 *	  The tables' own rules as the fast path applies them: column defaults
 *	  and CHECK constraints planned as the executor plans them, kept in
 *	  the catalog when they call only PostgreSQL's own functions, planned
 *	  again for every statement when they call a user's (see TableRules in
 *	  fastpath.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "nodes/plannodes.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "fastpath.h"

/*
 * compile_expression: plan an expression as the executor would and
 * compile it into the current memory; when kept (in the catalog), also
 * remember what it depends on.  The expression is copied first: its plan
 * shares constants with it.
 */
static ExprState *
compile_expression(Expr *expr, bool kept)
{
	List	   *relids = NIL;
	List	   *items = NIL;
	Expr	   *planned;

	expr = copyObject(expr);

	if (!kept)
		return ExecInitExpr(expression_planner(expr), NULL);
	planned = expression_planner_with_deps(expr, &relids, &items);
	rows_catalog_depends_on(relids, items);
	return ExecInitExpr(planned, NULL);
}

/* is_user_function: a function not from PostgreSQL's built-in catalog data. */
static bool
is_user_function(Oid func, void *context)
{
	return func >= FirstGenbkiObjectId;
}

/*
 * calls_user_function: does the (unplanned) expression call a function,
 * operator, cast or type I/O function a user defined?  Planning such an
 * expression may evaluate the function (an IMMUTABLE one called with
 * constants) or inline its body, so its plan must not be kept.
 */
static bool
calls_user_function(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, is_user_function, context))
		return true;
	return expression_tree_walker(node, calls_user_function, context);
}

/*
 * rows_compile_rules: what a table's rules need before any is compiled: its
 * columns' domains and its CHECK constraints' names.  Nothing is planned
 * here (see TableRules).
 */
void
rows_compile_rules(Relation rel, TableRules *rules)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;

	memset(rules, 0, sizeof(*rules));
	rules->natts = desc->natts;
	rules->domain_type = palloc0(sizeof(Oid) * desc->natts);
	rules->domain_cache = palloc0(sizeof(void *) * desc->natts);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && get_typtype(att->atttypid) == TYPTYPE_DOMAIN)
			rules->domain_type[i] = att->atttypid;
	}
	rules->ncheck = constr ? constr->num_check : 0;
	rules->check_name = palloc0(sizeof(char *) * Max(rules->ncheck, 1));
	for (int i = 0; i < rules->ncheck; i++)
		rules->check_name[i] = pstrdup(constr->check[i].ccname);
	rules->cxt = CurrentMemoryContext;
}

/*
 * compile_per_call: compile exprs for this call only, in its executor
 * state's memory (rules that run user code are planned per statement, as
 * the executor plans them).
 */
static void
compile_per_call(EState *estate, Expr **exprs, int n, CompiledRules *out)
{
	MemoryContext old = MemoryContextSwitchTo(estate->es_query_cxt);

	out->state = palloc0(sizeof(ExprState *) * Max(n, 1));
	for (int i = 0; i < n; i++)
		if (exprs[i] != NULL)
			out->state[i] = compile_expression(exprs[i], false);
	out->econtext = CreateExprContext(estate);
	MemoryContextSwitchTo(old);
}

/*
 * compile_kept: compile exprs into cxt, to be kept across calls, with the
 * long-lived context to evaluate them in; back in the caller's memory
 * context on return.  (Apart from compile_list so that the PG_TRY there
 * has no context switch of its own to lose to a longjmp.)
 */
static void
compile_kept(MemoryContext cxt, Expr **exprs, int n, CompiledRules *out)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);

	out->state = palloc0(sizeof(ExprState *) * Max(n, 1));
	for (int i = 0; i < n; i++)
		if (exprs[i] != NULL)
			out->state[i] = compile_expression(exprs[i], true);

	/*
	 * Evaluated in a context that lives as long as the compiled
	 * expressions: some steps (a whole-row reference) keep what they set up
	 * on first use in the context's per-query memory.
	 */
	out->econtext = CreateStandaloneExprContext();
	MemoryContextSwitchTo(old);
}

/*
 * compile_list: compile the expressions (NULL entries stay NULL) for one
 * statement in estate's memory, or, when none calls a user's function,
 * once into the catalog's memory, kept for later calls.  An error leaves
 * nothing kept.  Returns whether they were kept.
 */
static bool
compile_list(TableRules *rules, Expr **exprs, int n, EState *estate,
			 CompiledRules *out)
{
	bool		user_code = false;
	MemoryContext cxt;
	MemoryContext old;

	for (int i = 0; i < n && !user_code; i++)
		user_code = calls_user_function((Node *) exprs[i], NULL);
	if (user_code)
	{
		compile_per_call(estate, exprs, n, out);
		return false;
	}
	cxt = AllocSetContextCreate(rules->cxt, "jobguard compiled rules",
								ALLOCSET_SMALL_SIZES);
	old = CurrentMemoryContext;
	PG_TRY();
	{
		compile_kept(cxt, exprs, n, out);
	}
	PG_CATCH();
	{
		CurrentMemoryContext = old;
		MemoryContextDelete(cxt);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return true;
}

/*
 * rows_rules_defaults: the table's column defaults for an insert by the
 * statement of estate, compiled as its plan would compile them.
 */
void
rows_rules_defaults(TableRules *rules, Relation rel, EState *estate,
					CompiledRules *out)
{
	Expr	  **exprs;

	if (rules->defaults_kept)
	{
		*out = rules->defaults;
		return;
	}
	exprs = palloc0(sizeof(Expr *) * Max(rules->natts, 1));
	for (int i = 0; i < rules->natts; i++)
		if (!TupleDescAttr(RelationGetDescr(rel), i)->attisdropped)
			exprs[i] = (Expr *) build_column_default(rel, i + 1);
	if (compile_list(rules, exprs, rules->natts, estate, out))
	{
		rules->defaults = *out;
		rules->defaults_kept = true;
	}
	pfree(exprs);
}

/*
 * rows_rules_checks: the table's CHECK constraints for the statement of
 * estate, compiled as the executor compiles them when it first checks a
 * row (ExecRelCheck), in the same order.
 */
void
rows_rules_checks(TableRules *rules, Relation rel, EState *estate,
				  CompiledRules *out)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	Expr	  **exprs;

	if (rules->checks_kept)
	{
		*out = rules->checks;
		return;
	}
	if ((constr ? constr->num_check : 0) != rules->ncheck)
		elog(ERROR, "jobguard: cached constraints of \"%s\" are out of date",
			 RelationGetRelationName(rel));
	exprs = palloc0(sizeof(Expr *) * Max(rules->ncheck, 1));
	for (int i = 0; i < rules->ncheck; i++)
		exprs[i] = stringToNode(constr->check[i].ccbin);
	if (compile_list(rules, exprs, rules->ncheck, estate, out))
	{
		rules->checks = *out;
		rules->checks_kept = true;
	}
	pfree(exprs);
}

