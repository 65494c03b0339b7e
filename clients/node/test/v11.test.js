'use strict';
// The 1.1 functions against a real jobguard: claim, heartbeat, fail with
// retryInSeconds, submitMany's per-row outcomes, and the DETAIL that says an
// id is of the other kind.
const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { Client } = require('pg');
const jg = require('..');
const { setUp, tearDown } = require('../testlib');

const DB = 'jg_client_node_v11';
let pool;
test.before(async () => { pool = await setUp(DB); });
test.after(async () => { await tearDown(pool, DB); });

// freshOp: a new operation (claims see only this test's jobs), with an
// open contract and the given retry backoff
async function freshOp(backoff = null) {
  const op = `op-${randomUUID().slice(0, 12)}`;
  await pool.query(`SELECT jobguard.define_operation($1, '{"type": "object"}', $2::interval)`,
    [op, backoff]);
  return op;
}

// submitN: n jobs of operation op, in one submitMany; their ids
async function submitN(op, n) {
  const rows = await jg.submitMany(pool, Array.from({ length: n }, (_, i) => ({
    ownerId: 'alice', idempotencyKey: randomUUID(), operation: op, params: { n: i },
    provider: 'main-psp' })));
  assert.ok(rows.every((r) => r.sqlstate === null));
  return rows.map((r) => r.job_id);
}

// rejects: assert that p rejects with cls, and return the error.
async function rejects(p, cls) {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof cls, `expected ${cls.name}, got ${err && err.name}: ${err && err.message}`);
    return err;
  }
  assert.fail(`expected ${cls.name}, nothing was thrown`);
}

test('claim hands out attempts oldest first, records the worker, then nothing', async () => {
  const op = await freshOp();
  const jobs = await submitN(op, 3);
  const got = await jg.claim(pool, { worker: 'w-typed', operations: [op], timeoutSeconds: 60,
    maxJobs: 2 });
  assert.deepEqual(got.map((c) => c.job_id), jobs.slice(0, 2));
  const c = got[0];
  assert.deepEqual([c.attempt_no, c.operation, c.provider, c.params], [1, op, 'main-psp', { n: 0 }]);
  assert.equal(typeof c.attempt_id, 'number');
  assert.ok(c.deadline instanceof Date && c.deadline > new Date(Date.now() + 50_000));
  assert.ok(!jobs.includes(c.attempt_id));
  assert.equal((await jg.attempt(pool, c.attempt_id)).worker, 'w-typed');
  assert.equal(await jg.jobState(pool, c.job_id), 'running');
  assert.deepEqual((await jg.claim(pool, { worker: 'w-typed', operations: [op], maxJobs: 5 }))
    .map((x) => x.job_id), jobs.slice(2));
  assert.deepEqual(await jg.claim(pool, { worker: 'w-typed', operations: [op] }), []);
});

test('claim with waitSeconds takes the job submitted while it waits', async () => {
  const op = await freshOp();
  const waiting = jg.claim(pool, { worker: 'w-wait', operations: [op], waitSeconds: 10 });
  await new Promise((r) => setTimeout(r, 300));
  const start = Date.now();
  const [jobId] = await submitN(op, 1);
  const got = await waiting;
  assert.deepEqual(got.map((c) => c.job_id), [jobId]);
  assert.ok(Date.now() - start < 5000);
});

test('heartbeat extends the deadline until it has passed, then JG006', async () => {
  const op = await freshOp();
  await submitN(op, 1);
  const [c] = await jg.claim(pool, { worker: 'w-beat', operations: [op], timeoutSeconds: 0.5 });
  const later = await jg.heartbeat(pool, c.attempt_id, 300);
  assert.ok(later - c.deadline > 240_000);
  assert.ok(await jg.heartbeat(pool, c.attempt_id) < later);   // its own timeout again
  await new Promise((r) => setTimeout(r, 800));
  const err = await rejects(jg.heartbeat(pool, c.attempt_id), jg.InvalidTransition);
  assert.deepEqual([err.attemptId, err.state], [c.attempt_id, 'unknown']);
});

test('fail with retryInSeconds holds claim back, not beginAttempt', async () => {
  const op = await freshOp();
  const [jobId] = await submitN(op, 1);
  const [c] = await jg.claim(pool, { worker: 'w-retry', operations: [op] });
  assert.equal(await jg.fail(pool, c.attempt_id, '503', { retryInSeconds: 3600 }), 'failed');
  assert.equal(await jg.jobState(pool, jobId), 'pending');
  assert.deepEqual(await jg.claim(pool, { worker: 'w-retry', operations: [op] }), []);
  assert.ok(await jg.beginAttempt(pool, jobId) > 0);
});

test("fail without retryInSeconds applies the operation's backoff", async () => {
  const op = await freshOp('0.6 seconds');
  await submitN(op, 1);
  const [c] = await jg.claim(pool, { worker: 'w-backoff', operations: [op] });
  await jg.fail(pool, c.attempt_id, 'boom');
  assert.deepEqual(await jg.claim(pool, { worker: 'w-backoff', operations: [op] }), []);
  const again = await jg.claim(pool, { worker: 'w-backoff', operations: [op], waitSeconds: 5 });
  assert.deepEqual(again.map((x) => x.attempt_no), [2]);
});

test('submitMany returns every outcome as a row; refused rows write nothing', async () => {
  const op = await freshOp();
  const k = randomUUID();
  const { jobId: existing } = await jg.submit(pool, { ownerId: 'bob', idempotencyKey: k,
    operation: op, params: { a: 1 }, provider: 'p' });
  const fresh = randomUUID();
  const req = (over) => ({ ownerId: 'bob', idempotencyKey: fresh, operation: op,
    params: { a: 2, quote: 'say "hi" \\ bye' }, provider: 'p', maxAttempts: 3, ...over });
  const rows = await jg.submitMany(pool, [
    req(),                                                      // created
    req({ idempotencyKey: k, params: { a: 1 }, maxAttempts: undefined }),  // replay
    req({ idempotencyKey: k, params: { a: 9 }, maxAttempts: undefined }),  // JG001
    req({ idempotencyKey: '' }),                                // 22023
    req({ idempotencyKey: randomUUID(), params: null }),        // 22004
    req(),                                                      // replay within the call
  ]);
  assert.deepEqual(rows.map((r) => [r.ord, r.created, r.sqlstate]), [
    [1, true, null], [2, false, null], [3, false, 'JG001'], [4, false, '22023'],
    [5, false, '22004'], [6, false, null]]);
  assert.equal(rows[1].job_id, existing);
  assert.equal(rows[5].job_id, rows[0].job_id);
  assert.equal(rows[2].job_id, existing);
  assert.match(rows[2].message, /differs in params/);
  assert.equal(jg.BY_SQLSTATE[rows[2].sqlstate], jg.IdempotencyKeyReused);
  assert.equal(rows[3].job_id, null);
  const j = await jg.job(pool, rows[0].job_id);
  assert.deepEqual([j.params, j.max_attempts], [{ a: 2, quote: 'say "hi" \\ bye' }, 3]);
  const { rows: [{ n }] } = await pool.query(
    'SELECT count(*)::int AS n FROM jobguard.job_overview WHERE operation = $1', [op]);
  assert.equal(n, 2);
  assert.deepEqual(await jg.submitMany(pool, []), []);
});

test('JG008 / JG009 name an id of the other kind in a field', async () => {
  const op = await freshOp();
  const [jobId] = await submitN(op, 1);
  const [{ attempt_id: attemptId }] = await jg.claim(pool, { worker: 'w-ids', operations: [op] });
  const jnf = await rejects(jg.cancelJob(pool, attemptId, 'x'), jg.JobNotFound);
  assert.deepEqual([jnf.jobId, jnf.attemptId], [attemptId, attemptId]);
  const anf = await rejects(jg.heartbeat(pool, jobId), jg.AttemptNotFound);
  assert.deepEqual([anf.attemptId, anf.jobId], [jobId, jobId]);
  const missing = await rejects(jg.jobState(pool, 987654321), jg.JobNotFound);
  assert.equal(missing.attemptId, null);
});

test('claim under REPEATABLE READ with a wait is refused', async () => {
  const c = new Client({ database: DB });
  await c.connect();
  try {
    await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await assert.rejects(jg.claim(c, { worker: 'w-rr', waitSeconds: 1 }), { code: '0A000' });
    await c.query('ROLLBACK');
  } finally {
    await c.end();
  }
});
