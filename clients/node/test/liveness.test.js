'use strict';
// The 1.2 parts of the client against a real jobguard: the provider key and
// redrive reach the handler, InProgress marks the attempt unknown (never
// failed), a batch's results are recorded by one finish_many (refused rows
// handled as finish's errors; a 1.1 database gets finish each), and the
// Reconciler reports what reconcile says, once per row.  The tests of
// provider keys, redrive and claim_unknown need liveness's 1.2 functions;
// on a database without them they are skipped, saying so.
const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { Client } = require('pg');
const jg = require('..');
const { setUp, tearDown, admin } = require('../testlib');

const DB = 'jg_client_node_liveness';
const V11 = `${DB}_v11db`;
let pool;
let liveness = false;
test.before(async () => {
  pool = await setUp(DB);
  const { rows: [{ v }] } = await pool.query(`SELECT to_regprocedure(
    'jobguard.claim_unknown(text, text[], integer, interval, interval)') IS NOT NULL AS v`);
  liveness = v;
});
test.after(async () => { await tearDown(pool, DB); });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const quiet = () => { const lines = []; const keep = (m) => lines.push(m);
  return { lines, info: keep, warn: keep, error: keep }; };
const needsLiveness = (t) => {
  if (!liveness) t.skip('the database has no jobguard.claim_unknown (1.2 liveness)');
  return !liveness;
};

// freshOp: a new operation (claims see only this test's jobs)
async function freshOp(db = pool, schema = '{"type": "object"}') {
  const op = `op-${randomUUID().slice(0, 12)}`;
  await db.query('SELECT jobguard.define_operation($1, $2)', [op, schema]);
  return op;
}

// submitN: one job of op per params (one attempt each), in one submitMany
async function submitN(op, params, { db = pool, provider = 'main-psp' } = {}) {
  const rows = await jg.submitMany(db, params.map((p) => ({ ownerId: 'alice',
    idempotencyKey: randomUUID(), operation: op, params: p, provider, maxAttempts: 1 })));
  assert.ok(rows.every((r) => r.sqlstate === null));
  return rows.map((r) => r.job_id);
}

const states = async (jobId, db = pool) => (await jg.attempts(db, jobId)).map((a) => a.state);

// runWorker: a Worker over op's jobs, run until idle; resolves to it
async function runWorker(handler, op, { database = DB, connection = {}, ...options } = {}) {
  const w = new jg.Worker(handler, { operations: [op], waitSeconds: 0.3, logger: quiet(),
    ...options, connection: { database, ...connection } });
  await w.run({ untilIdle: true, handleSignals: false });
  return w;
}

test('InProgress marks the attempt unknown, never failed; ProviderRefused fails', async () => {
  const op = await freshOp();
  const [busy, no, later] = await submitN(op, [{ k: 'busy' }, { k: 'no' }, { k: 'later' }]);
  const w = await runWorker(async (job) => {
    if (job.params.k === 'busy') throw new jg.InProgress('idempotency_key_in_use');
    if (job.params.k === 'no') throw new jg.ProviderRefused('card declined', 3600);
    throw new jg.RetryLater('rate limited', 3600);
  }, op, { batch: 3 });
  assert.deepEqual(await states(busy), ['unknown']);
  assert.equal(await jg.jobState(pool, busy), 'unknown');
  assert.deepEqual([await states(no), await states(later)], [['failed'], ['failed']]);
  assert.equal((await jg.attempts(pool, no))[0].error, 'ProviderRefused: card declined');
  assert.deepEqual([w.stats.inProgress, w.stats.failed, w.stats.reportErrors], [1, 2, 0]);
  assert.ok(new jg.RetryLater('x', 1) instanceof jg.ProviderRefused);
});

test('a batch is recorded by one finish_many when it ends; batch 1 at once', async () => {
  for (const [batch, want] of [[4, 'started'], [1, 'succeeded']]) {
    const op = await freshOp();
    const jobs = await submitN(op, [0, 1, 2, 3].map((n) => ({ n })));
    const seen = {};
    const w = await runWorker(async (job) => {
      const earlier = [];
      for (const j of jobs.slice(0, job.params.n)) earlier.push((await states(j))[0]);
      seen[job.params.n] = earlier;
      return { n: job.params.n };
    }, op, { batch });
    assert.deepEqual([w.stats.won, w.stats.reportErrors], [4, 0]);
    for (const j of jobs) assert.deepEqual(await states(j), ['succeeded']);
    assert.deepEqual(seen[3], [want, want, want], `batch ${batch}`);
  }
});

test('refused rows of finish_many are handled as finish errors; no handler runs twice', async () => {
  const op = await freshOp(pool, '{"type": "object", "required": ["ok"]}');
  const jobs = await submitN(op, ['won', 'rejected', 'large', 'closed'].map((k) => ({ k })));
  const calls = new Map();
  const w = await runWorker(async (job) => {
    calls.set(job.attempt_id, (calls.get(job.attempt_id) || 0) + 1);
    switch (job.params.k) {
      case 'closed': {   // failed by someone else before its result is recorded
        await jg.fail(pool, job.attempt_id, 'failed by someone else', { retryInSeconds: 3600 });
        return { ok: 'closed' };
      }
      case 'rejected': return { no_ok: true };
      case 'large': return { ok: 'x'.repeat(4096) };
      default: return { ok: job.params.k };
    }
  }, op, { batch: 4, connection: { options: '-c jobguard.max_payload_size=1kB' } });
  assert.equal(calls.size, 4);
  assert.ok([...calls.values()].every((n) => n === 1));
  const [won, rejected, large, closed] = await Promise.all(jobs.map(async (j) => (await jg.attempts(pool, j))[0]));
  assert.equal(won.state, 'succeeded');
  assert.equal(rejected.state, 'failed');
  assert.match(rejected.error, /ok/);
  assert.equal(large.state, 'unknown');   // cannot be sent: the provider may have done it
  assert.ok(w.logger.lines.some((l) => /marked unknown: UnrecordableResult: .*finish_many refused it \(54000/.test(l)));
  assert.deepEqual([closed.state, closed.error], ['failed', 'failed by someone else']);
  assert.deepEqual([w.stats.won, w.stats.rejected, w.stats.unrecorded, w.stats.reportErrors],
    [1, 1, 1, 1]);
});

test('a 1.1 database: finish each, no provider_key, no redrive', async () => {
  await admin(`DROP DATABASE IF EXISTS ${V11} WITH (FORCE)`);
  await admin(`CREATE DATABASE ${V11}`);
  const c = new Client({ database: V11 });
  await c.connect();
  try {
    await c.query("CREATE EXTENSION jobguard VERSION '1.1'");
    const { rows: [{ v }] } = await c.query(
      "SELECT to_regprocedure('jobguard.finish_many(bigint[], jsonb[])') IS NOT NULL AS v");
    assert.equal(v, false);
    const op = await freshOp(c);
    const jobs = await submitN(op, [0, 1, 2].map((n) => ({ n })), { db: c });
    const got = [];
    const w = await runWorker(async (job) => { got.push(job); return { n: job.params.n }; }, op,
      { database: V11, batch: 3 });
    assert.deepEqual([w.stats.won, w.stats.reportErrors], [3, 0]);
    for (const j of jobs) assert.deepEqual(await states(j, c), ['succeeded']);
    assert.deepEqual(got.map((j) => [j.provider_key, j.redrive]), [[undefined, undefined],
      [undefined, undefined], [undefined, undefined]]);
  } finally {
    await c.end();
    await admin(`DROP DATABASE IF EXISTS ${V11} WITH (FORCE)`);
  }
});

test('the handler gets the provider key; a redrive gets the same key', async (t) => {
  if (needsLiveness(t)) return;
  const op = await freshOp();
  const provider = `psp-${randomUUID().slice(0, 8)}`;
  await pool.query("SELECT jobguard.set_provider_policy($1, dedupes_for => interval '1 day')",
    [provider]);
  const [jobId] = await submitN(op, [{ n: 1 }], { provider });
  const got = [];
  const handler = async (job) => {
    got.push(job);
    if (got.length === 1) throw new jg.InProgress('idempotency_key_in_use');
    return { ok: job.provider_key };
  };
  await runWorker(handler, op, { timeoutSeconds: 0.5 });
  assert.deepEqual(await states(jobId), ['unknown']);
  assert.match(got[0].provider_key, /^[A-Za-z0-9_-]{1,64}$/);
  assert.equal(got[0].provider_key, await jg.providerKey(pool, got[0].attempt_id));
  assert.equal(got[0].redrive, false);
  await sleep(700);   // unknown for at least its own timeout
  await runWorker(handler, op, { timeoutSeconds: 30 });
  assert.equal(got.length, 2);
  assert.equal(got[1].redrive, true);
  assert.equal(got[1].provider_key, got[0].provider_key);
  assert.deepEqual(await states(jobId), ['cancelled', 'succeeded']);
  assert.deepEqual((await jg.job(pool, jobId)).result, { ok: got[0].provider_key });
});

// unknownJobs: one job of op per kind, each with an attempt marked unknown
async function unknownJobs(op, kinds) {
  const jobs = await submitN(op, kinds.map((k) => ({ k })));
  for (const j of jobs) await jg.markUnknown(pool, await jg.beginAttempt(pool, j));
  return jobs;
}

const KINDS = ['done', 'no', 'dunno', 'broken', 'busy'];
// answer: what the provider says about each kind
function answer(row) {
  switch (row.params.k) {
    case 'done': return { charge: row.provider_key };
    case 'no': throw new jg.ProviderRefused('no such charge');
    case 'broken': throw new Error('provider API down');
    case 'busy': throw new jg.InProgress();
    default: return undefined;
  }
}

test('the Reconciler reports what the provider says, asking each row once', async (t) => {
  if (needsLiveness(t)) return;
  const op = await freshOp();
  const [done, no, dunno, broken, busy] = await unknownJobs(op, KINDS);
  const calls = new Map();
  const r = new jg.Reconciler(async (row) => {
    calls.set(row.attempt_id, (calls.get(row.attempt_id) || 0) + 1);
    return answer(row);
  }, { connection: { database: DB }, operations: [op], batch: 2, leaseSeconds: 60,
    logger: quiet() });
  const stats = await r.run({ untilIdle: true, handleSignals: false });
  assert.equal(calls.size, 5);
  assert.ok([...calls.values()].every((n) => n === 1));
  assert.deepEqual(await states(done), ['succeeded']);
  assert.deepEqual((await jg.job(pool, done)).result,
    { charge: (await jg.attempts(pool, done))[0].provider_key });
  assert.deepEqual(await states(no), ['failed']);
  assert.equal((await jg.attempts(pool, no))[0].error, 'ProviderRefused: no such charge');
  for (const j of [dunno, broken, busy]) assert.deepEqual(await states(j), ['unknown']);
  assert.deepEqual([stats.claimed, stats.won, stats.failed, stats.left, stats.errors,
    stats.reportErrors], [5, 1, 1, 2, 1, 0]);
});

test('a stopped Reconciler reports the batch so far, once', async (t) => {
  if (needsLiveness(t)) return;
  const op = await freshOp();
  const jobs = await unknownJobs(op, ['done', 'done', 'done', 'done']);
  const asked = [];
  const r = new jg.Reconciler(async (row) => {
    asked.push(row.attempt_id);
    if (asked.length === 2) r.stop();
    return { charge: row.provider_key };
  }, { connection: { database: DB }, operations: [op], batch: 4, leaseSeconds: 60,
    logger: quiet() });
  const stats = await r.run({ handleSignals: false });
  assert.equal(asked.length, 2);
  assert.equal(new Set(asked).size, 2);
  const first = [];
  for (const j of jobs) first.push((await states(j))[0]);
  assert.deepEqual(first.sort(), ['succeeded', 'succeeded', 'unknown', 'unknown']);
  assert.deepEqual([stats.claimed, stats.won, stats.reportErrors], [4, 2, 0]);
});

test('Reconciler options are checked as the Worker\'s are', () => {
  assert.throws(() => new jg.Reconciler(async () => undefined, { batch: 0 }), RangeError);
  assert.throws(() => new jg.Reconciler(async () => undefined, { leaseSeconds: 0 }), RangeError);
  assert.throws(() => new jg.Reconciler(async () => undefined, { olderThanSeconds: -1 }), RangeError);
  assert.throws(() => new jg.Reconciler('no'), TypeError);
});
