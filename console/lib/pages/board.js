'use strict';
// "/": the attention board — only what needs a person or is about to:
// unknown attempts by provider and age with the next end of a redrive
// window, jobs blocked at the gate, lost results not yet refunded,
// providers at their limits or paused, failed jobs, stale certifications.
// Numbers come from jobguard.stats() and from the views through their
// indexes (never a count(*) over the jobs); every number links to its list.

const { html, time, duration, table } = require('../html');
const { panel, stats, numberLink } = require('./common');

const OWED_CAP = 1000;

// page: the board.
async function page(ctx, tx) {
  const s = await tx.panel(stats);
  const st = s.ok ? s.value : {};
  const parts = [];

  parts.push(await panel(ctx, tx, { title: 'Counts', id: 'counts' }, async () => {
    if (!s.ok) throw s.error;
    return html`<ul class="counts">
<li>${numberLink(ctx, st['jobs.unknown'], '/unknown', {}, 'jobs with an unknown attempt')} jobs with an unknown attempt</li>
<li>${numberLink(ctx, st['blocked.jobs'], '/blocked', {}, 'jobs blocked at the gate')} jobs blocked at the gate (unknown, not redrivable; the oldest for ${duration(st['blocked.oldest_seconds'])})</li>
<li>${numberLink(ctx, st['jobs.failed'], '/failed', {}, 'failed jobs')} failed jobs</li>
<li>${st['jobs.running'] ?? '—'} running and ${st['jobs.pending'] ?? '—'} pending jobs (nothing to do for a person)</li>
</ul>`;
  }));

  parts.push(await panel(ctx, tx, { title: 'Unknown attempts by provider and age', id: 'unknown-by-provider' }, async () => {
    const rows = await tx.query(`
      SELECT provider, count(*) AS unknown,
             count(*) FILTER (WHERE redrivable) AS redrivable,
             count(*) FILTER (WHERE NOT redrivable) AS blocked,
             count(*) FILTER (WHERE unknown_since > pg_catalog.now() - interval '5 minutes') AS age_5m,
             count(*) FILTER (WHERE unknown_since <= pg_catalog.now() - interval '5 minutes'
                                AND unknown_since > pg_catalog.now() - interval '1 hour') AS age_1h,
             count(*) FILTER (WHERE unknown_since <= pg_catalog.now() - interval '1 hour'
                                AND unknown_since > pg_catalog.now() - interval '1 day') AS age_1d,
             count(*) FILTER (WHERE unknown_since <= pg_catalog.now() - interval '1 day') AS age_older,
             min(redrivable_until) FILTER (WHERE redrivable) AS next_window_end
        FROM jobguard.blocked_jobs
       GROUP BY provider ORDER BY provider`);
    return table('Unknown attempts of open jobs, by provider',
      ['Provider', 'Unknown', 'Redrivable', 'Blocked', '< 5 min', '5 min – 1 h', '1 h – 1 d', '> 1 d', 'Next window ends'],
      rows.map((r) => [r.provider,
        numberLink(ctx, r.unknown, '/unknown', { provider: r.provider }, `unknown attempts of ${r.provider}`),
        numberLink(ctx, r.redrivable, '/unknown', { provider: r.provider, window: 'open' }, `redrivable attempts of ${r.provider}`),
        numberLink(ctx, r.blocked, '/blocked', { provider: r.provider }, `blocked jobs of ${r.provider}`),
        r.age_5m, r.age_1h, r.age_1d, r.age_older,
        r.next_window_end ? html`${time(r.next_window_end)} <span class="countdown" data-until="${new Date(r.next_window_end).toISOString()}"></span>` : '—']),
      'No unknown attempts.');
  }));

  parts.push(await panel(ctx, tx, { title: 'Lost results not yet refunded', id: 'owed' }, async () => {
    const rows = await tx.query(`SELECT count(*) AS n FROM (SELECT 1 FROM jobguard.lost_results
                                  WHERE refunded_at IS NULL LIMIT ${OWED_CAP + 1}) s`);
    const n = Number(rows[0].n);
    return html`<p>${numberLink(ctx, n > OWED_CAP ? `${OWED_CAP}+` : n, '/refunds', { status: 'owed' }, 'lost results not yet refunded')} results lost the compare-and-swap and are not marked refunded: each may be money a provider took twice.</p>`;
  }));

  parts.push(await panel(ctx, tx, { title: 'Providers at a limit or paused', id: 'busy-providers' }, async () => {
    const rows = await tx.query('SELECT pg_catalog.to_jsonb(p) AS p FROM jobguard.provider_policies p ORDER BY p.provider');
    const busy = rows.map((r) => r.p).map((p) => ({
      ...p,
      inFlight: st[`provider.${p.provider}.in_flight`] ?? null,
      throttled: st[`provider.${p.provider}.throttled`] ?? null,
    })).filter((p) => p.paused === true || (p.max_in_flight !== null && p.inFlight !== null && p.inFlight >= p.max_in_flight)
      || (p.max_per_second !== null && p.throttled > 0));
    return table('Providers that need a look', ['Provider', 'Why', 'In flight / limit', 'Starts passed over'],
      busy.map((p) => [html`<a href="${ctx.base}/providers#provider-${p.provider}">${p.provider}</a>`,
        [p.paused === true ? 'paused' : null,
          p.max_in_flight !== null && p.inFlight >= p.max_in_flight ? 'at max_in_flight' : null,
          p.max_per_second !== null && p.throttled > 0 ? 'held by its rate' : null].filter(Boolean).join(', '),
        `${p.inFlight ?? '—'} / ${p.max_in_flight ?? 'no limit'}`, p.throttled ?? '—']),
      'No provider is at a limit or paused.');
  }));

  parts.push(await panel(ctx, tx, { title: 'Stale certifications', id: 'stale' }, async () => {
    const rows = (await tx.query('SELECT pg_catalog.to_jsonb(c) AS c FROM jobguard.certification_overview c ORDER BY c.operation, c.provider')).map((r) => r.c);
    if (rows.length && !('stale' in rows[0])) return html`<p class="notice">This database's certifications do not lapse with the contract (jobguard 1.2).</p>`;
    const stale = rows.filter((c) => c.stale === true);
    return table('Certifications certified under an earlier contract', ['Operation', 'Provider', 'Certified under contract', 'Certified at'],
      stale.map((c) => [c.operation, html`<a href="${ctx.base}/providers#certifications">${c.provider}</a>`, c.contract_version ?? '—', time(c.certified_at)]),
      'No stale certification.');
  }));

  return { title: 'What needs attention', body: parts };
}

module.exports = { page };
