'use strict';
// One user's click: "/intent?owner=&key=" finds the job of an owner's
// idempotency key (in every scope the person may read, each looked up by
// the key's unique index), "/jobs/<id>" shows it: the request, its state,
// the attempt timeline with the winning result and each losing result
// with its refund status, and what operators did to it.

const { html, time, json, table, link } = require('../html');
const { panel, text, jobLink, actionForm } = require('./common');

// scopesToSearch: the scopes an owner's key is looked for in, each by the
// key's unique index: the one in the URL, else those the console was
// started with (--scopes), else the person's own (jobguard.caller_scope()).
// The scopes of a database cannot be listed through jobguard's views
// without reading every job, so the console does not guess them.
async function scopesToSearch(ctx, tx) {
  const given = text(ctx, 'scope');
  if (given) return [given];
  if (ctx.config.scopes && ctx.config.scopes.length) return ctx.config.scopes;
  return [(await tx.query('SELECT jobguard.caller_scope() AS s'))[0].s];
}

// intent: the job of one owner's idempotency key.
async function intent(ctx, tx) {
  const owner = text(ctx, 'owner');
  const key = text(ctx, 'key');
  const form = html`<form method="get" action="${ctx.base}/intent" class="filters" role="search" aria-label="Find a click">
<label>Owner <input name="owner" value="${owner}" required></label>
<label>Idempotency key <input name="key" value="${key}" required></label>
<label>Scope <input name="scope" value="${text(ctx, 'scope')}"></label>
<button type="submit">Find</button></form>`;
  if (!owner || !key) return { title: 'Find one click', body: html`${form}<p>Give the owner and the idempotency key the application submitted with, and its scope (without one: ${ctx.config.scopes && ctx.config.scopes.length ? `the scopes ${ctx.config.scopes.join(', ')}` : 'your own scope'}).</p>` };
  let scopes = [];
  const search = await tx.panel(async () => {
    const rows = [];
    scopes = await scopesToSearch(ctx, tx);
    for (const scope of scopes) {
      rows.push(...await tx.query(`SELECT job_id, scope, operation, provider, state, created_at
                                     FROM jobguard.job_overview
                                    WHERE scope::text = $1 AND owner_id::text = $2 AND idempotency_key::text = $3
                                      AND replaced_at IS NULL`, [scope, owner, key]));
    }
    return rows;
  });
  if (search.ok && search.value.length === 1) return { redirect: link(ctx, `/jobs/${search.value[0].job_id}`) };
  const found = await panel(ctx, tx, { title: 'Jobs with this key', id: 'found' }, async () => {
    if (!search.ok) throw search.error;
    return table('Jobs of this owner and key', ['Job', 'Scope', 'Operation', 'Provider', 'State', 'Created'],
      search.value.map((r) => [jobLink(ctx, r.job_id), r.scope, r.operation, r.provider, r.state, time(r.created_at)]),
      `No job of owner "${owner}" with key "${key}" in scope${scopes.length === 1 ? '' : 's'} ${scopes.join(', ')}.`);
  });
  return { title: 'Find one click', body: html`${form}${found}` };
}

// jobPage: "/jobs/<id>".
async function jobPage(ctx, tx) {
  const id = ctx.path.split('/')[2];
  const rows = await tx.panel(() => tx.query('SELECT j.*, jobguard.payloads_visible(j.scope) AS visible FROM jobguard.job($1) j', [id]));
  if (!rows.ok) {
    if (rows.error.code === 'JG008') {
      return { status: 404, title: `Job ${id}`, body: html`<p class="refusal" role="alert">No job ${id} in the scopes you may read.</p>` };
    }
    throw rows.error;
  }
  const j = rows.value[0];
  const parts = [];
  parts.push(html`<section aria-labelledby="request-h"><h2 id="request-h">The request</h2>
<dl class="facts">
<dt>State</dt><dd class="state state-${j.state}">${j.state}</dd>
<dt>Owner</dt><dd>${j.owner_id}</dd><dt>Idempotency key</dt><dd>${j.idempotency_key}</dd>
<dt>Scope</dt><dd>${j.scope}</dd><dt>Operation</dt><dd>${j.operation}</dd><dt>Provider</dt><dd>${j.provider}</dd>
${'next_provider' in j ? html`<dt>Next provider</dt><dd>${j.next_provider ?? '—'}</dd>` : ''}
<dt>Attempts</dt><dd>${j.attempts} of ${j.max_attempts ?? 'no limit'}</dd>
<dt>Created</dt><dd>${time(j.created_at)}</dd><dt>Completed</dt><dd>${time(j.completed_at)}</dd>
<dt>Cancelled</dt><dd>${time(j.cancelled_at)}</dd>
${j.previous_job_id ? html`<dt>Replaces</dt><dd>${jobLink(ctx, j.previous_job_id)}</dd>` : ''}
<dt>Params</dt><dd>${json(j.params, j.visible)}</dd>
<dt>Winning result</dt><dd>${j.completed_by ? html`attempt ${j.completed_by}: ${json(j.result, j.visible)}` : '—'}</dd>
</dl>
${j.state === 'failed' ? html`<p><a href="${link(ctx, '/failed/retry', { job_id: j.job_id })}">Retry this job…</a></p>` : ''}
</section>`);

  parts.push(await panel(ctx, tx, { title: 'Attempts', id: 'attempts' }, async () => {
    const attempts = await tx.query('SELECT * FROM jobguard.attempts_of($1)', [id]);
    const refunds = await tx.panel(() => tx.query(
      'SELECT attempt_id, refunded_at, refund_reference FROM jobguard.lost_results WHERE job_id = $1', [id]));
    const byAttempt = new Map((refunds.ok ? refunds.value : []).map((r) => [Number(r.attempt_id), r]));
    return table(`Attempts of job ${id}, in order`,
      ['#', 'Attempt', 'Provider', 'Provider key', 'Worker', 'Started', 'Deadline', 'State', 'Reason / error', 'Result'],
      attempts.map((a) => {
        const refund = byAttempt.get(Number(a.attempt_id));
        let result = '—';
        if (Number(a.attempt_id) === Number(j.completed_by)) result = html`<strong>won</strong>`;
        else if (a.state === 'lost') {
          const status = refund
            ? (refund.refunded_at ? html`refunded ${time(refund.refunded_at)}, reference ${refund.refund_reference}` : html`<a href="${link(ctx, '/refunds', { status: 'owed', job_id: id })}">not refunded</a>`)
            : (refunds.ok ? 'no result kept' : 'refund status not in this database');
          result = html`lost${a.lost_to ? ` to attempt ${a.lost_to}` : ''}: ${json(a.lost_result, j.visible)} <span class="refund">${status}</span>`;
        }
        return [a.attempt_no, a.attempt_id, a.provider, a.provider_key ?? '—', a.worker ?? '—', time(a.started_at), time(a.deadline),
          a.state, a.cancel_reason ?? (j.visible ? a.error : (a.state === 'failed' ? 'hidden' : null)) ?? '—', result];
      }), 'No attempt yet.');
  }));

  parts.push(await panel(ctx, tx, { title: 'Replays', id: 'replays' }, async () => {
    const s = await tx.query("SELECT value FROM jobguard.stats() WHERE metric = 'submits.key_conflicts'");
    return html`<p>A replay with the same request returns this job. A replay with a different request is refused with JG001 and changes nothing; the database does not record refused replays per job, only their number in all (submits.key_conflicts: ${s.length ? s[0].value ?? 'not counted' : 'not counted'}).</p>`;
  }));

  parts.push(await panel(ctx, tx, { title: 'What operators did', id: 'job-actions' }, async () => {
    const targets = [String(id), `job ${id}`];
    for (const a of await tx.query('SELECT attempt_id FROM jobguard.attempts_of($1)', [id])) {
      targets.push(String(a.attempt_id), `attempt ${a.attempt_id}`);
    }
    const acts = await tx.query(`SELECT id, at, role, acting_as, action, target, arguments, reason
                                   FROM jobguard.operator_actions WHERE target = ANY($1::text[])
                                  ORDER BY id DESC LIMIT 200`, [targets]);
    return table(`Operator actions on job ${id} and its attempts`, ['At', 'Role', 'Acting as', 'Action', 'Target', 'Reason'],
      acts.map((a) => [time(a.at), a.role, a.acting_as, a.action, a.target, a.reason ?? '—']), 'No operator action recorded.');
  }));

  if (j.state !== 'succeeded' && j.state !== 'cancelled') {
    parts.push(html`<section aria-labelledby="cancel-h"><h2 id="cancel-h">Cancel this job</h2>
${actionForm(ctx, { action: '/jobs/cancel', hidden: { job_id: j.job_id }, fields: [{ name: 'reason', label: 'Reason' }], button: 'Cancel job', label: `Cancel job ${j.job_id}` })}</section>`);
  }
  return { title: `Job ${id}: ${j.operation} for ${j.owner_id}`, body: parts };
}

module.exports = { intent, jobPage, scopesToSearch };
