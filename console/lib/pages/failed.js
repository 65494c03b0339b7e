'use strict';
// "/failed": failed jobs (their max_attempts used up, no attempt open),
// read through the index of open jobs; "/failed/retry": the dry run of a
// retry — how many failed jobs the filter takes (at most the cap), then
// the form that retries exactly those, with a reason.

const { html, time, table, filterForm, pager, link } = require('../html');
const { panel, text, cursor, idParam, actionForm, jobLink } = require('./common');

// filtersOf: the filters of a failed-job list, from the URL or a form.
function filtersOf(source) {
  const f = {};
  for (const k of ['operation', 'provider', 'scope']) f[k] = typeof source[k] === 'string' ? source[k].slice(0, 255) : '';
  f.job_id = idParam(source.job_id) || '';
  return f;
}

// failedJobs: failed jobs matching the filters, by id, after the id given,
// at most limit.
async function failedJobs(tx, filters, after, limit) {
  const values = [];
  const where = ['completed_by IS NULL', 'cancelled_at IS NULL', "state = 'failed'"];
  // add: one condition, its ? the next parameter
  const add = (sql, v) => { values.push(v); where.push(sql.replace('?', `$${values.length}`)); };
  for (const k of ['operation', 'provider', 'scope']) if (filters[k]) add(`${k}::text = ?`, filters[k]);
  if (filters.job_id) add('job_id = ?::bigint', filters.job_id);
  if (after) add('job_id > ?::bigint', after);
  values.push(limit);
  return tx.query(`SELECT job_id, owner_id, idempotency_key, scope, operation, provider, attempts, max_attempts, created_at
                     FROM jobguard.job_overview WHERE ${where.join(' AND ')}
                    ORDER BY job_id LIMIT $${values.length}`, values);
}

// page: "/failed".
async function page(ctx, tx) {
  const filters = filtersOf(ctx.query);
  const after = cursor(ctx, 1);
  const body = await panel(ctx, tx, { title: 'Failed jobs', id: 'failed' }, async () => {
    const rows = await failedJobs(tx, filters, after && after[0], ctx.config.pageSize + 1);
    const pageRows = rows.slice(0, ctx.config.pageSize);
    const next = rows.length > ctx.config.pageSize ? String(pageRows[pageRows.length - 1].job_id) : null;
    return html`<p><a href="${link(ctx, '/failed/retry', { ...filters })}">Retry the failed jobs of this filter…</a> (a dry run first: it says how many, at most ${ctx.config.retryCap})</p>
${table('Failed jobs, oldest first', ['Job', 'Owner / key', 'Scope', 'Operation', 'Provider', 'Attempts', 'Created'],
    pageRows.map((r) => [jobLink(ctx, r.job_id), `${r.owner_id} / ${r.idempotency_key}`, r.scope, r.operation, r.provider,
      `${r.attempts} of ${r.max_attempts}`, time(r.created_at)]), 'No failed job.')}${pager(ctx, '/failed', filters, next)}`;
  });
  return { title: 'Failed jobs', body: html`${filterForm(ctx, '/failed', [['operation', 'Operation'], ['provider', 'Provider'], ['scope', 'Scope']], filters)}${body}` };
}

// dryRun: "/failed/retry": the count, then the confirming form.
async function dryRun(ctx, tx) {
  const filters = filtersOf(ctx.query);
  const cap = ctx.config.retryCap;
  const body = await panel(ctx, tx, { title: 'Dry run', id: 'dry-run' }, async () => {
    const rows = await failedJobs(tx, filters, null, cap + 1);
    const shown = Object.entries(filters).filter(([, v]) => v).map(([k, v]) => `${k} = ${v}`).join(', ') || 'none';
    if (rows.length === 0) return html`<p>No failed job matches (filter: ${shown}). Nothing to retry.</p>`;
    if (rows.length > cap) {
      return html`<p class="refusal" role="alert">More than ${cap} failed jobs match (filter: ${shown}): more than one retry may take. Narrow the filter.</p>`;
    }
    return html`<p><strong>${rows.length}</strong> failed job${rows.length === 1 ? '' : 's'} would be retried (filter: ${shown}): ${rows.map((r, i) => html`${i ? ', ' : ''}${jobLink(ctx, r.job_id)}`)}.</p>
${actionForm(ctx, {
    action: '/failed/retry', hidden: { ...filters, expected: rows.length },
    fields: [{ name: 'extra_attempts', label: 'Extra attempts', type: 'number', value: 1 }, { name: 'reason', label: 'Reason' }],
    button: `Retry ${rows.length} job${rows.length === 1 ? '' : 's'}`,
  })}`;
  });
  return { title: 'Retry failed jobs', body };
}

module.exports = { page, dryRun, failedJobs, filtersOf };
