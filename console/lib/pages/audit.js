'use strict';
// "/actions": the audit log (jobguard.operator_actions), newest first,
// filtered by action, role or target.

const { html, time, table, filterForm, pager } = require('../html');
const { panel, text, cursor } = require('./common');

// page: "/actions".
async function page(ctx, tx) {
  const f = { action: text(ctx, 'action'), role: text(ctx, 'role'), target: text(ctx, 'target') };
  const after = cursor(ctx, 1);
  const body = await panel(ctx, tx, { title: 'Operator actions', id: 'audit' }, async () => {
    const values = [];
    const where = [];
    // add: one condition, its ? the next parameter
    const add = (sql, v) => { values.push(v); where.push(sql.replace('?', `$${values.length}`)); };
    for (const k of ['action', 'role', 'target']) if (f[k]) add(`${k} = ?`, f[k]);
    if (after) add('id < ?::bigint', after[0]);
    values.push(ctx.config.pageSize + 1);
    const rows = await tx.query(`SELECT id, at, role, acting_as, action, target, arguments, reason
                                   FROM jobguard.operator_actions ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
                                  ORDER BY id DESC LIMIT $${values.length}`, values);
    const pageRows = rows.slice(0, ctx.config.pageSize);
    const next = rows.length > ctx.config.pageSize ? String(pageRows[pageRows.length - 1].id) : null;
    return html`${table('What operators did, newest first', ['#', 'At', 'Role', 'Acting as', 'Action', 'Target', 'Arguments', 'Reason'],
      pageRows.map((r) => [r.id, time(r.at), r.role, r.acting_as, r.action, r.target ?? '—',
        html`<code>${JSON.stringify(r.arguments)}</code>`, r.reason ?? '—']), 'No operator action recorded.')}${pager(ctx, '/actions', f, next)}`;
  });
  return { title: 'What operators did', body: html`${filterForm(ctx, '/actions', [['action', 'Action'], ['role', 'Role'], ['target', 'Target']], f)}${body}` };
}

module.exports = { page };
