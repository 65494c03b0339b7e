'use strict';
// "/providers": each provider's policy (dedup window, limits, paused), its
// open attempts against its max_in_flight and the starts its rate passed
// over (jobguard.stats()), pause/unpause with a reason; and the
// certifications, with the contract version each was certified under and
// whether it is stale.

const { html, time, table } = require('../html');
const { panel, stats, actionForm } = require('./common');

// interval: a pg interval object as text.
function interval(v) {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'string') return v;
  if (typeof v.toPostgres === 'function') return v.toPostgres() || '0';
  return JSON.stringify(v);
}

// page: "/providers".
async function page(ctx, tx) {
  const parts = [];
  const s = await tx.panel(stats);
  const st = s.ok ? s.value : {};
  parts.push(await panel(ctx, tx, { title: 'Provider policies', id: 'policies' }, async () => {
    const rows = await tx.query('SELECT p.provider, p.dedupes_for, pg_catalog.to_jsonb(p) AS j FROM jobguard.provider_policies p ORDER BY p.provider');
    const hasPaused = rows.length === 0 || 'paused' in rows[0].j;
    return table('What operators set per provider', ['Provider', 'Dedup window', 'In flight / max_in_flight', 'max_per_second', 'Starts passed over', 'Paused', 'Updated', 'Pause'],
      rows.map((r) => {
        const p = r.j;
        const inFlight = st[`provider.${p.provider}.in_flight`];
        const atLimit = p.max_in_flight !== null && inFlight !== undefined && inFlight >= p.max_in_flight;
        return [html`<span id="provider-${p.provider}">${p.provider}</span>`, interval(r.dedupes_for),
          html`<span class="${atLimit ? 'at-limit' : ''}">${inFlight ?? '—'} / ${p.max_in_flight ?? 'no limit'}${atLimit ? ' (at its limit)' : ''}</span>`,
          p.max_per_second ?? 'no limit', st[`provider.${p.provider}.throttled`] ?? '—',
          hasPaused ? (p.paused ? html`<strong>paused</strong>` : 'no') : 'not in this database',
          time(p.updated_at),
          hasPaused ? actionForm(ctx, {
            action: '/providers/pause', hidden: { provider: p.provider, paused: p.paused ? 'false' : 'true' },
            fields: [{ name: 'reason', label: 'Reason' }], button: p.paused ? 'Unpause' : 'Pause',
            label: `${p.paused ? 'Unpause' : 'Pause'} ${p.provider}`,
          }) : '—'];
      }), 'No provider has a policy.');
  }));
  parts.push(await panel(ctx, tx, { title: 'Certifications', id: 'certifications' }, async () => {
    const rows = (await tx.query('SELECT pg_catalog.to_jsonb(c) AS c FROM jobguard.certification_overview c ORDER BY c.operation, c.provider')).map((r) => r.c);
    return table('Fallback providers certified per operation', ['Operation', 'Provider', 'Certified', 'Contract version', 'Stale', 'Certified at', 'Revoked at'],
      rows.map((c) => [c.operation, c.provider, c.certified ? 'yes' : 'no',
        'contract_version' in c ? (c.contract_version ?? 'none') : 'not in this database',
        'stale' in c ? (c.stale ? html`<strong>stale</strong>` : 'no') : 'not in this database',
        time(c.certified_at), time(c.revoked_at)]), 'No certification.');
  }));
  return { title: 'Providers', body: parts };
}

module.exports = { page };
