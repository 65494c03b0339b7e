'use strict';
// The API functions against a real jobguard: results, id types and every
// error class with its parsed fields.
const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const pg = require('pg');
const jg = require('..');
const { DB, setUp, tearDown } = require('../testlib');

let pool;
test.before(async () => { pool = await setUp(); });
test.after(async () => { await tearDown(pool); });

// key: a fresh idempotency key; request: a charge request; newJob: a new job's id
const key = () => `k-${randomUUID()}`;
const request = (over = {}) => ({ ownerId: 'alice', idempotencyKey: key(), operation: 'charge',
  params: { amount: 1 }, provider: 'main-psp', ...over });
const newJob = async (over) => (await jg.submit(pool, request(over))).jobId;

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

test('submit takes an object for params, replays, and returns number ids', async () => {
  const r = request({ params: { amount: 10, tags: ['a'] } });
  const first = await jg.submit(pool, r);
  const again = await jg.submit(pool, { ...r, params: { tags: ['a'], amount: 10 } });
  assert.equal(first.created, true);
  assert.equal(again.created, false);
  assert.equal(again.jobId, first.jobId);
  assert.equal(typeof first.jobId, 'number');
  const j = await jg.job(pool, first.jobId);
  assert.deepEqual(j.params, { amount: 10, tags: ['a'] });
  assert.equal(j.state, 'pending');
  assert.equal(j.job_id, first.jobId);
});

test('lifecycle: cancel, fail over, won and lost, reads', async () => {
  const jobId = await newJob();
  const a1 = await jg.beginAttempt(pool, jobId, { timeoutSeconds: 300 });
  assert.equal(await jg.jobState(pool, jobId), 'running');
  assert.equal(await jg.markUnknown(pool, a1), 'unknown');
  assert.equal(await jg.cancelAttempt(pool, a1, 'failing over'), 'cancelled');
  const a2 = await jg.beginAttempt(pool, jobId, { provider: 'backup-psp', timeoutSeconds: 5 });
  assert.equal(await jg.finish(pool, a2, { charge_id: 'bk' }), 'won');
  assert.equal(await jg.finish(pool, a1, { charge_id: 'mn' }), 'lost');
  const j = await jg.job(pool, jobId);
  assert.deepEqual([j.state, j.completed_by, j.result], ['succeeded', a2, { charge_id: 'bk' }]);
  const rows = await jg.attempts(pool, jobId);
  assert.deepEqual(rows.map((a) => [a.attempt_no, a.state, a.provider]),
    [[1, 'lost', 'main-psp'], [2, 'succeeded', 'backup-psp']]);
  assert.equal(rows[0].lost_to, a2);
  assert.deepEqual(rows[0].lost_result, { charge_id: 'mn' });
  assert.equal((await jg.attempt(pool, a1)).state, 'lost');
});

test('rejected result, fail, attempt key replay', async () => {
  const jobId = await newJob();
  const a1 = await jg.beginAttempt(pool, jobId, { attemptKey: 'w1:1' });
  assert.equal(await jg.beginAttempt(pool, jobId, { attemptKey: 'w1:1' }), a1);
  assert.equal(await jg.finish(pool, a1, ['not', 'an', 'object']), 'rejected');
  const a2 = await jg.beginAttempt(pool, jobId);
  assert.equal(await jg.fail(pool, a2, 'card declined'), 'failed');
  assert.equal(await jg.jobState(pool, jobId), 'pending');
});

test('JG001 IdempotencyKeyReused names the existing job; still a pg DatabaseError', async () => {
  const r = request({ ownerId: 'bob' });
  const first = await jg.submit(pool, r);
  const err = await rejects(jg.submit(pool, { ...r, params: { amount: 2 } }), jg.IdempotencyKeyReused);
  assert.ok(err instanceof pg.DatabaseError);
  assert.ok(err instanceof jg.JobguardError);
  assert.equal(err.code, 'JG001');
  assert.equal(err.name, 'IdempotencyKeyReused');
  assert.equal(jg.IdempotencyKeyReused.condition, 'idempotency_key_reused');
  assert.equal(err.jobId, first.jobId);
  assert.equal(err.ownerId, 'bob');
  assert.equal(err.idempotencyKey, r.idempotencyKey);
  assert.match(err.differsIn, /params/);
  assert.match(err.hint, new RegExp(String(first.jobId)));
  assert.equal(err.cause.code, 'JG001');
});

test('JG002 AttemptInFlight names the blocking attempt', async () => {
  const jobId = await newJob();
  const a = await jg.beginAttempt(pool, jobId, { timeoutSeconds: 60 });
  const err = await rejects(jg.beginAttempt(pool, jobId), jg.AttemptInFlight);
  assert.deepEqual([err.jobId, err.blockingAttemptId, err.blockingAttemptNo, err.blockingProvider,
    err.blockingState], [jobId, a, 1, 'main-psp', 'started']);
  assert.ok(err.deadline);
});

test('JG003 JobClosed: succeeded (completedBy) and cancelled', async () => {
  const jobId = await newJob();
  const a = await jg.beginAttempt(pool, jobId);
  await jg.finish(pool, a, { charge_id: 'x' });
  let err = await rejects(jg.beginAttempt(pool, jobId), jg.JobClosed);
  assert.deepEqual([err.jobId, err.completedBy, err.cancelled], [jobId, a, false]);
  err = await rejects(jg.cancelJob(pool, jobId, 'too late'), jg.JobClosed);
  assert.equal(err.completedBy, a);
  const other = await newJob();
  assert.equal(await jg.cancelJob(pool, other, 'changed their mind'), 'cancelled');
  err = await rejects(jg.beginAttempt(pool, other), jg.JobClosed);
  assert.deepEqual([err.jobId, err.completedBy, err.cancelled], [other, null, true]);
});

test('JG004 ProviderNotCertified, JG005 AttemptsExhausted', async () => {
  let jobId = await newJob();
  let err = await rejects(jg.beginAttempt(pool, jobId, { provider: 'cheap-psp' }), jg.ProviderNotCertified);
  assert.deepEqual([err.provider, err.operation, err.jobId], ['cheap-psp', 'charge', jobId]);
  jobId = await newJob({ maxAttempts: 1 });
  await jg.fail(pool, await jg.beginAttempt(pool, jobId), 'boom');
  err = await rejects(jg.beginAttempt(pool, jobId), jg.AttemptsExhausted);
  assert.deepEqual([err.jobId, err.maxAttempts], [jobId, 1]);
  assert.equal(await jg.jobState(pool, jobId), 'failed');
});

test('JG006 InvalidTransition, JG007 ResultMismatch', async () => {
  const jobId = await newJob();
  const a = await jg.beginAttempt(pool, jobId);
  await jg.fail(pool, a, 'boom');
  let err = await rejects(jg.cancelAttempt(pool, a, 'again'), jg.InvalidTransition);
  assert.deepEqual([err.attemptId, err.jobId, err.state], [a, jobId, 'failed']);
  const b = await jg.beginAttempt(pool, jobId);
  await jg.finish(pool, b, { charge_id: 'one' });
  err = await rejects(jg.finish(pool, b, { charge_id: 'two' }), jg.ResultMismatch);
  assert.deepEqual([err.attemptId, err.jobId], [b, jobId]);
});

test('JG008, JG009 and the argument errors 22004, 22023', async () => {
  let err = await rejects(jg.jobState(pool, 987654321), jg.JobNotFound);
  assert.equal(err.jobId, 987654321);
  err = await rejects(jg.finish(pool, 987654321, {}), jg.AttemptNotFound);
  assert.equal(err.attemptId, 987654321);
  await rejects(jg.submit(pool, request({ params: undefined })), jg.NullValueNotAllowed);
  await rejects(jg.submit(pool, request({ operation: '' })), jg.InvalidParameterValue);
  await rejects(jg.beginAttempt(pool, await newJob(), { timeoutSeconds: 0 }), jg.InvalidParameterValue);
  // one class per SPEC condition, JG001 .. JG009
  assert.deepEqual(Object.keys(jg.BY_SQLSTATE).filter((c) => c.startsWith('JG')),
    ['JG001', 'JG002', 'JG003', 'JG004', 'JG005', 'JG006', 'JG007', 'JG008', 'JG009', 'JG010']);
});

test('translate: other errors pass through unchanged', async () => {
  const err = await rejects(pool.query('SELECT 1/0'), pg.DatabaseError);
  assert.equal(jg.translate(err), err);
  const plain = new Error('not from the server');
  assert.equal(jg.translate(plain), plain);
});

test('ids beyond 2^53 raise a RangeError instead of rounding', async () => {
  // the client's own query config (its int8 parser), on a statement that
  // answers as submit would, with an id past 2^53
  const answer = (text) => ({ query: (config) => pool.query({ ...config, text, values: [] }) });
  await assert.rejects(jg.submit(answer('SELECT 9007199254740993::int8 AS job_id, true AS created'),
    request()), RangeError);
  assert.deepEqual(await jg.submit(answer('SELECT 9007199254740991::int8 AS job_id, true AS created'),
    request()), { jobId: 9007199254740991, created: true });
});

test('the global pg type parsers stay as the application set them', async () => {
  const { rows } = await pool.query('SELECT 5::int8 AS n');
  assert.equal(rows[0].n, '5');
});

test('awaitJob wakes when the job succeeds', async () => {
  const jobId = await newJob();
  const a = await jg.beginAttempt(pool, jobId);
  assert.equal(await jg.awaitJob(pool, jobId, 0.1), 'running');
  const waiter = new pg.Client({ database: DB });
  await waiter.connect();
  try {
    const start = Date.now();
    const waiting = jg.awaitJob(waiter, jobId, 20);
    await new Promise((r) => setTimeout(r, 300));
    await jg.finish(pool, a, { charge_id: 'z' });
    assert.equal(await waiting, 'succeeded');
    assert.ok(Date.now() - start < 10000);
  } finally { await waiter.end(); }
});

test('concurrent identical submits are one job', async () => {
  const r = request({ ownerId: 'carol' });
  const clients = await Promise.all(Array.from({ length: 8 }, async () => {
    const c = new pg.Client({ database: DB });
    await c.connect();
    return c;
  }));
  try {
    const rs = await Promise.all(clients.map((c) => jg.submit(c, r)));
    assert.equal(new Set(rs.map((x) => x.jobId)).size, 1);
    assert.deepEqual(rs.map((x) => x.created).sort(), [false, false, false, false, false, false, false, true]);
  } finally { await Promise.all(clients.map((c) => c.end())); }
});

test('the worker side: claim, heartbeat, fail with retryInSeconds, submitMany', async () => {
  // an operation of its own, so that the other tests' jobs are not claimed
  const op = `render-${randomUUID().slice(0, 8)}`;
  const rows = await jg.submitMany(pool, [
    { ownerId: 'dora', idempotencyKey: 'm1', operation: op, params: { n: 1 }, provider: 'main-psp' },
    { ownerId: 'dora', idempotencyKey: 'm1', operation: op, params: { n: 1 }, provider: 'main-psp' },
    { ownerId: 'dora', idempotencyKey: 'm1', operation: op, params: { n: 2 }, provider: 'main-psp' },
    { ownerId: null, idempotencyKey: 'm2', operation: op, params: {}, provider: 'main-psp' },
  ]);
  assert.deepEqual(rows.map((r) => [r.ord, r.created, r.sqlstate]),
    [[1, true, null], [2, false, null], [3, false, 'JG001'], [4, false, '22004']]);
  assert.equal(rows[1].job_id, rows[0].job_id);
  assert.equal(typeof rows[0].job_id, 'number');
  assert.ok(jg.BY_SQLSTATE[rows[2].sqlstate], 'a refused row names an error class');

  const [c] = await jg.claim(pool, { worker: 'node-1', operations: [op], timeoutSeconds: 60, maxJobs: 5 });
  assert.equal(c.job_id, rows[0].job_id);
  assert.equal(typeof c.attempt_id, 'number');
  assert.deepEqual(await jg.claim(pool, { worker: 'node-2', operations: [op] }), [], 'nothing else is runnable');
  const deadline = await jg.heartbeat(pool, c.attempt_id, 3600);
  assert.ok(deadline instanceof Date && deadline - Date.now() > 3500 * 1000);
  assert.equal(await jg.fail(pool, c.attempt_id, 'busy', { retryInSeconds: 3600 }), 'failed');
  assert.deepEqual(await jg.claim(pool, { worker: 'node-1', operations: [op] }), [], 'held back by retry_in');
  await rejects(jg.heartbeat(pool, c.attempt_id), jg.InvalidTransition);
  await rejects(jg.claim(pool, { worker: '' }), jg.JobguardError);
});
