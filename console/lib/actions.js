'use strict';
// The actions (POST, served only with --allow-actions, after the entry
// point's checks): each takes a reason, checks its form (bad input is 422
// and writes nothing), and calls the jobguard SQL function as the signed-in
// person, in one transaction.  The database decides who may: its refusal
// (42501, or an id outside the person's scope) is 403 here, a refused
// transition 409.  The function itself writes jobguard.operator_actions;
// for those without a reason argument the reason goes in
// jobguard.action_reason (SET LOCAL).

const jobguard = require('jobguard');
const { html, link } = require('./html');
const db = require('./db');
const failed = require('./pages/failed');
const { idParam } = require('./pages/common');

// bad: a 422 for a form that does not hold what the action needs.
function bad(message) {
  return Object.assign(new Error(message), { status: 422 });
}

// reasonOf: the form's reason, required, at most 1000 characters.
function reasonOf(form) {
  const r = typeof form.reason === 'string' ? form.reason.trim() : '';
  if (!r) throw bad('Every action needs a reason: give one.');
  if (r.length > 1000) throw bad('A reason is at most 1000 characters.');
  return r;
}

// idOf: a positive id field of the form.
function idOf(form, name) {
  const id = idParam(form[name]);
  if (!id) throw bad(`${name} must be a positive whole number.`);
  return id;
}

const ACTIONS = {
  // redrive an unknown attempt inside its provider's dedup window
  '/unknown/redrive': async (tx, form) => {
    const id = idOf(form, 'attempt_id');
    const reason = reasonOf(form);
    await db.setReason(tx, reason);
    const rows = await tx.query('SELECT jobguard.redrive_attempt($1::bigint) AS v', [id]);
    return `Attempt ${id} was redriven as attempt ${rows[0].v}.`;
  },
  // cancel an open attempt (opens the gate)
  '/unknown/cancel': async (tx, form) => {
    const id = idOf(form, 'attempt_id');
    const reason = reasonOf(form);
    await jobguard.cancelAttempt(tx.client, Number(id), reason);
    return `Attempt ${id} was cancelled.`;
  },
  // cancel a job without a result
  '/jobs/cancel': async (tx, form) => {
    const id = idOf(form, 'job_id');
    const reason = reasonOf(form);
    await jobguard.cancelJob(tx.client, Number(id), reason);
    return `Job ${id} was cancelled.`;
  },
  // retry the failed jobs of a filter: exactly as many as the dry run
  // counted, never more than the cap
  '/failed/retry': async (tx, form, ctx) => {
    const reason = reasonOf(form);
    const extra = Number(form.extra_attempts);
    if (!Number.isInteger(extra) || extra < 1 || extra > 1000000) throw bad('Extra attempts must be a whole number from 1 to 1000000.');
    const expected = Number(form.expected);
    if (!Number.isInteger(expected) || expected < 1) throw bad('Run the dry run first: it counts the jobs a retry takes.');
    const filters = failed.filtersOf(form);
    const cap = ctx.config.retryCap;
    if (expected > cap) throw bad(`At most ${cap} jobs may be retried at once.`);
    if (filters.job_id) {
      // one named job: the database decides (a job it does not show the
      // person, or a person who is no operator, is its refusal)
      if (expected !== 1) throw bad('A retry of one job expects one job.');
      await tx.query('SELECT jobguard.retry_job($1::bigint, $2::integer, $3)', [filters.job_id, extra, reason]);
      return `Retried job ${filters.job_id} with ${extra} more attempt${extra === 1 ? '' : 's'}.`;
    }
    const rows = await failed.failedJobs(tx, filters, null, cap + 1);
    if (rows.length > cap) throw bad(`More than ${cap} failed jobs match now: narrow the filter.`);
    if (rows.length !== expected) {
      throw Object.assign(new Error(`The dry run counted ${expected} failed jobs; ${rows.length} match now. Nothing was retried: run the dry run again.`), { status: 409 });
    }
    for (const r of rows) await tx.query('SELECT jobguard.retry_job($1::bigint, $2::integer, $3)', [r.job_id, extra, reason]);
    return `Retried ${rows.length} failed job${rows.length === 1 ? '' : 's'} (${rows.map((r) => r.job_id).join(', ')}) with ${extra} more attempt${extra === 1 ? '' : 's'} each.`;
  },
  // record that a lost result was settled
  '/refunds/mark': async (tx, form) => {
    const id = idOf(form, 'attempt_id');
    const reference = typeof form.reference === 'string' ? form.reference.trim() : '';
    if (!reference) throw bad('Give the refund\'s reference.');
    const reason = reasonOf(form);
    await db.setReason(tx, reason);
    await tx.query('SELECT jobguard.mark_refunded($1::bigint, $2)', [id, reference]);
    return `The lost result of attempt ${id} is marked refunded (reference ${reference}).`;
  },
  // pause or unpause a provider, keeping the rest of its policy
  '/providers/pause': async (tx, form) => {
    const provider = typeof form.provider === 'string' ? form.provider : '';
    if (!provider) throw bad('Name the provider.');
    if (form.paused !== 'true' && form.paused !== 'false') throw bad('paused must be true or false.');
    const reason = reasonOf(form);
    const cur = await tx.query(`SELECT dedupes_for, max_in_flight, max_per_second FROM jobguard.provider_policies
                                 WHERE provider = $1`, [provider]);
    const p = cur[0] || { dedupes_for: null, max_in_flight: null, max_per_second: null };
    await db.setReason(tx, reason);
    await tx.query(`SELECT jobguard.set_provider_policy($1, $2::interval, $3::integer, $4::numeric, paused => $5::boolean)`,
      [provider, p.dedupes_for === null ? null : p.dedupes_for.toPostgres(), p.max_in_flight, p.max_per_second, form.paused === 'true']);
    return `Provider "${provider}" is ${form.paused === 'true' ? 'paused: it gets no new start' : 'no longer paused'}.`;
  },
};

// route: the action for a path, or null.
function route(path) {
  return ACTIONS[path] || null;
}

// backOf: where "back" leads: a page of this console only.
function backOf(ctx, form) {
  const b = typeof form.back === 'string' ? form.back : '/';
  return b.startsWith('/') && !b.startsWith('//') && !b.includes('\\') ? `${ctx.base}${b}` : `${ctx.base}/`;
}

// run: one action as the signed-in person; its result page.
async function run(ctx, form, action) {
  const back = backOf(ctx, form);
  try {
    const said = await db.inTransaction(ctx.session.pool, ctx.config, (tx) => action(tx, form, ctx));
    return { title: 'Done', body: html`<p class="done" role="status">${said}</p><p><a href="${back}">Back</a> · <a href="${link(ctx, '/actions')}">What operators did</a></p>` };
  } catch (err) {
    const d = err.status ? { status: err.status, text: err.message, code: null } : db.describe(err, ctx.config);
    if (d.status === 500) throw err;
    return { status: d.status, title: 'Refused', body: html`<p class="refusal" role="alert" data-sqlstate="${d.code || ''}">${d.text}</p><p>Nothing was changed.</p><p><a href="${back}">Back</a></p>` };
  }
}

module.exports = { route, run };
