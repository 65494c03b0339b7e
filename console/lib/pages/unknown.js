'use strict';
// "/unknown": the unknown attempts of open jobs, sorted by the end of
// their redrive window (those whose provider does not deduplicate last),
// each with a live countdown; redrive is offered only inside the window
// (past it the button says why not), cancel with a reason.
// "/blocked": the jobs blocked at the gate — unknown and not redrivable
// (the window ended, or the provider does not deduplicate).
// Both read jobguard.blocked_jobs, through the index of open attempts.

const { html, time, duration, table, filterForm, pager } = require('../html');
const { panel, text, cursor, actionForm, jobLink } = require('./common');

// rowsOf: one page of blocked_jobs with the filters of the URL; window is
// 'open' (redrivable), 'closed' (not) or '' (both).
async function rowsOf(ctx, tx, window) {
  const after = cursor(ctx, 2);
  const values = [];
  const where = [];
  // add: one condition, its ? the next parameter
  const add = (sql, v) => { values.push(v); where.push(sql.replace('?', `$${values.length}`)); };
  for (const f of ['provider', 'operation', 'scope']) if (text(ctx, f)) add(`b.${f}::text = ?`, text(ctx, f));
  if (window === 'open') where.push('b.redrivable');
  if (window === 'closed') where.push('NOT b.redrivable');
  if (after) {
    values.push(after[0], after[1]);
    where.push(`(COALESCE(b.redrivable_until, 'infinity'), b.attempt_id) > ($${values.length - 1}::timestamptz, $${values.length}::bigint)`);
  }
  values.push(ctx.config.pageSize + 1);
  const rows = await tx.query(`
    SELECT b.*, COALESCE(b.redrivable_until, 'infinity')::text AS sort_key,
           EXTRACT(epoch FROM pg_catalog.now() - b.unknown_since) AS unknown_for
      FROM jobguard.blocked_jobs b
     ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
     ORDER BY COALESCE(b.redrivable_until, 'infinity'), b.attempt_id
     LIMIT $${values.length}`, values);
  // the owner, key and worker of the rows shown, by their ids (a statement
  // of its own: joined above, the planner may read every job to find them)
  if (rows.length) {
    const jobs = new Map((await tx.query(`SELECT job_id, owner_id, idempotency_key FROM jobguard.job_overview
                                           WHERE job_id = ANY ($1::bigint[])`, [rows.map((r) => r.job_id)])).map((j) => [String(j.job_id), j]));
    const attempts = new Map((await tx.query(`SELECT attempt_id, worker FROM jobguard.attempt_overview
                                               WHERE attempt_id = ANY ($1::bigint[])`, [rows.map((r) => r.attempt_id)])).map((a) => [String(a.attempt_id), a]));
    for (const r of rows) Object.assign(r, jobs.get(String(r.job_id)), attempts.get(String(r.attempt_id)));
  }
  const more = rows.length > ctx.config.pageSize;
  const page = rows.slice(0, ctx.config.pageSize);
  const last = page[page.length - 1];
  // the key as the database wrote it (microseconds, which a Date drops)
  const next = more ? `${last.sort_key}~${last.attempt_id}` : null;
  return { page, next };
}

// keyCell: a provider key, its start shown, the whole in its title.
function keyCell(key) {
  if (!key) return '—';
  return html`<code title="${key}">${key.length > 12 ? `${key.slice(0, 12)}…` : key}</code>`;
}

// windowCell: the redrive window of a row: its end and a live countdown,
// or why there is none.
function windowCell(r) {
  if (!r.redrivable_until) return html`<span class="why">no redrive: provider "${r.provider}" does not deduplicate (no dedupes_for)</span>`;
  const iso = new Date(r.redrivable_until).toISOString();
  if (!r.redrivable) return html`<span class="why">window ended at ${time(r.redrivable_until)}</span>`;
  return html`${time(r.redrivable_until)} <span class="countdown" data-until="${iso}" aria-live="off"></span>`;
}

// actionsCell: redrive (inside the window only) and cancel with a reason.
function actionsCell(ctx, r) {
  const redrive = actionForm(ctx, {
    action: '/unknown/redrive', hidden: { attempt_id: r.attempt_id },
    fields: [{ name: 'reason', label: 'Reason' }], button: 'Redrive',
    label: `Redrive attempt ${r.attempt_id}`,
    disabled: !r.redrivable,
    why: r.redrivable ? null : (r.redrivable_until ? 'the window has ended: the provider may not deduplicate any more' : 'the provider does not deduplicate'),
  });
  const cancel = actionForm(ctx, {
    action: '/unknown/cancel', hidden: { attempt_id: r.attempt_id },
    fields: [{ name: 'reason', label: 'Reason' }], button: 'Cancel attempt', label: `Cancel attempt ${r.attempt_id}`,
  });
  return html`<div class="row-actions" data-window-end="${r.redrivable_until ? new Date(r.redrivable_until).toISOString() : ''}">${redrive}${cancel}</div>`;
}

// list: the page of either list.
async function list(ctx, tx, { title, id, window, path }) {
  const filters = { provider: text(ctx, 'provider'), operation: text(ctx, 'operation'), scope: text(ctx, 'scope'), window: text(ctx, 'window') };
  const fields = [['provider', 'Provider'], ['operation', 'Operation'], ['scope', 'Scope']];
  if (path === '/unknown') fields.push(['window', 'Redrive window', [['', 'any'], ['open', 'open'], ['closed', 'ended or none']]]);
  const body = await panel(ctx, tx, { title: 'Attempts', id }, async () => {
    const { page, next } = await rowsOf(ctx, tx, window || filters.window);
    return html`${table(title, ['Job', 'Owner / key (scope)', 'Operation, provider', 'Attempt, worker', 'Provider key', 'Unknown since', 'Redrive window', 'Actions'],
      page.map((r) => [jobLink(ctx, r.job_id), `${r.owner_id} / ${r.idempotency_key} (${r.scope})`, `${r.operation}, ${r.provider}`,
        `${r.attempt_id}, ${r.worker ?? 'no worker'}`, keyCell(r.provider_key), html`${time(r.unknown_since)} (${duration(r.unknown_for)})`, windowCell(r), actionsCell(ctx, r)]),
      'Nothing here.')}${pager(ctx, path, filters, next)}`;
  });
  return { title, body: html`${filterForm(ctx, path, fields, filters)}${body}` };
}

// unknownPage: "/unknown".
function unknownPage(ctx, tx) {
  return list(ctx, tx, { title: 'Unknown attempts, by the end of their redrive window', id: 'unknown', path: '/unknown' });
}

// blockedPage: "/blocked".
function blockedPage(ctx, tx) {
  return list(ctx, tx, { title: 'Jobs blocked at the gate', id: 'blocked', window: 'closed', path: '/blocked' });
}

module.exports = { unknownPage, blockedPage };
