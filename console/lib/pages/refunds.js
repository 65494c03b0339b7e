'use strict';
// "/refunds": the lost-results ledger (jobguard.lost_results): results that
// lost the compare-and-swap and were kept, each maybe money a provider
// took twice; filter by status, provider, operation, scope or job, export
// as CSV, mark one refunded with a reference.

const { html, time, json, table, filterForm, pager } = require('../html');
const { panel, text, cursor, idParam, actionForm, jobLink } = require('./common');

const COLUMNS = ['attempt_id', 'job_id', 'scope', 'owner_id', 'operation', 'provider', 'provider_key',
  'lost_result', 'finished_at', 'refunded_at', 'refund_reference'];
const CSV_BATCH = 1000;

// filtersOf: the ledger's filters from the URL.
function filtersOf(ctx) {
  const status = ['owed', 'refunded', 'all'].includes(ctx.query.status) ? ctx.query.status : 'owed';
  return { status, provider: text(ctx, 'provider'), operation: text(ctx, 'operation'), scope: text(ctx, 'scope'), job_id: idParam(ctx.query.job_id) || '' };
}

// ledger: rows of the ledger, the latest finished first (the order of the
// lost attempts' index), after the cursor given ([finished_at, attempt_id]).
async function ledger(tx, f, before, limit) {
  const values = [];
  const where = [];
  // add: one condition, its ? the next parameter
  const add = (sql, v) => { values.push(v); where.push(sql.replace('?', `$${values.length}`)); };
  if (f.status === 'owed') where.push('refunded_at IS NULL');
  if (f.status === 'refunded') where.push('refunded_at IS NOT NULL');
  for (const k of ['provider', 'operation', 'scope']) if (f[k]) add(`${k}::text = ?`, f[k]);
  if (f.job_id) add('job_id = ?::bigint', f.job_id);
  if (before) {
    values.push(before[0], before[1]);
    where.push(`(finished_at, attempt_id) < ($${values.length - 1}::timestamptz, $${values.length}::bigint)`);
  }
  values.push(limit);
  return tx.query(`SELECT l.*, l.finished_at::text AS sort_key, jobguard.payloads_visible(l.scope) AS visible
                     FROM jobguard.lost_results l
                    ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
                    ORDER BY finished_at DESC, attempt_id DESC LIMIT $${values.length}`, values);
}

// csvCell: one value as a CSV field (RFC 4180).
function csvCell(v) {
  if (v === null || v === undefined) return '';
  const s = v instanceof Date ? v.toISOString() : (typeof v === 'object' ? JSON.stringify(v) : String(v));
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

// page: "/refunds" (and ?format=csv: every matching row as CSV).
async function page(ctx, tx) {
  const f = filtersOf(ctx);
  if (ctx.query.format === 'csv') {
    const lines = [COLUMNS.join(',')];
    let before = null;
    for (;;) {
      const rows = await ledger(tx, f, before, CSV_BATCH);
      for (const r of rows) lines.push(COLUMNS.map((c) => csvCell(c === 'lost_result' && !r.visible ? null : r[c])).join(','));
      if (rows.length < CSV_BATCH) break;
      before = [rows[rows.length - 1].sort_key, rows[rows.length - 1].attempt_id];
    }
    return { csv: `${lines.join('\r\n')}\r\n`, filename: `jobguard-lost-results-${f.status}.csv` };
  }
  const after = cursor(ctx, 2);
  const body = await panel(ctx, tx, { title: 'Lost results', id: 'ledger' }, async () => {
    const rows = await ledger(tx, f, after, ctx.config.pageSize + 1);
    const pageRows = rows.slice(0, ctx.config.pageSize);
    const last = pageRows[pageRows.length - 1];
    const next = rows.length > ctx.config.pageSize ? `${last.sort_key}~${last.attempt_id}` : null;
    const q = new URLSearchParams({ ...Object.fromEntries(Object.entries(f).filter(([, v]) => v)), format: 'csv' });
    return html`<p><a href="${ctx.base}/refunds?${q.toString()}" download>Export these as CSV</a></p>
${table('Results that lost the compare-and-swap, the latest first', ['Attempt', 'Job', 'Scope', 'Owner', 'Operation', 'Provider', 'Provider key', 'Lost result', 'Finished', 'Refund'],
    pageRows.map((r) => [r.attempt_id, jobLink(ctx, r.job_id), r.scope, r.owner_id, r.operation, r.provider, r.provider_key ?? '—',
      json(r.lost_result, r.visible), time(r.finished_at),
      r.refunded_at ? html`refunded ${time(r.refunded_at)}, reference <strong>${r.refund_reference}</strong>`
        : actionForm(ctx, { action: '/refunds/mark', hidden: { attempt_id: r.attempt_id },
          fields: [{ name: 'reference', label: 'Reference' }, { name: 'reason', label: 'Reason' }], button: 'Mark refunded', label: `Mark attempt ${r.attempt_id} refunded` })]),
    'No lost result here.')}${pager(ctx, '/refunds', f, next)}`;
  });
  const fields = [['status', 'Status', [['owed', 'not refunded'], ['refunded', 'refunded'], ['all', 'all']]],
    ['provider', 'Provider'], ['operation', 'Operation'], ['scope', 'Scope'], ['job_id', 'Job']];
  return { title: 'Lost results: what is owed back', body: html`${filterForm(ctx, '/refunds', fields, f)}${body}` };
}

module.exports = { page };
