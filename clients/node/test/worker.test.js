'use strict';
// The Worker against a real jobguard: several workers drain a queue while
// their connections are killed, heartbeats keep a long handler's attempt,
// the provider's refusals become failed attempts retried per backoff, a lost claim
// is picked up again, attempts of an earlier process under the worker's
// name are not run again, and a restart of the server is survived.
// (Exactly once under every failure: exactly-once.test.js.)  (SIGTERM:
// see docs.test.js, which runs the documented example as a process.)
const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { exec } = require('node:child_process');
const { promisify } = require('node:util');
const { Client, Pool } = require('pg');
const jg = require('..');
const { setUp, tearDown, admin } = require('../testlib');

const DB = 'jg_client_node_worker';
let pool;
test.before(async () => {
  pool = await setUp(DB);
  pool.on('error', () => {});   // its idle connections die in the restart test
});
test.after(async () => { await tearDown(pool, DB); });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// quiet: a logger that keeps the lines instead of printing them
const quiet = () => { const lines = []; const keep = (m) => lines.push(m);
  return { lines, info: keep, warn: keep, error: keep }; };

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
  return rows.map((r) => r.job_id);
}

// worker: a Worker on the test database that logs quietly
const worker = (handler, options) => new jg.Worker(handler,
  { connection: { database: DB }, logger: quiet(), ...options });

// waitFor: poll check() until it is true, failing after ms
async function waitFor(check, ms, what) {
  const end = Date.now() + ms;
  while (!(await check())) {
    assert.ok(Date.now() < end, `timed out waiting for ${what}`);
    await sleep(50);
  }
}

// assertOneSuccessEach: every job has exactly one attempt, succeeded
async function assertOneSuccessEach(db, jobs) {
  for (const jobId of jobs) {
    const states = (await jg.attempts(db, jobId)).map((a) => a.state);
    assert.deepEqual(states, ['succeeded'], `job ${jobId}`);
    assert.equal(await jg.jobState(db, jobId), 'succeeded');
  }
}

test('4 workers drain 120 jobs through killed connections: one success each', async () => {
  const op = await freshOp();
  const jobs = await submitN(op, 120);
  const calls = new Map();
  const handler = async (job) => {
    calls.set(job.job_id, (calls.get(job.job_id) || 0) + 1);
    await sleep(10);
    return { done: job.params.n };
  };
  const prefix = `drain-${randomUUID().slice(0, 6)}`;
  const workers = Array.from({ length: 4 }, (_, i) => worker(handler, { name: `${prefix}-${i}`,
    operations: [op], batch: 5, waitSeconds: 1, reconnectMinSeconds: 0.05 }));
  const running = workers.map((w) => w.run({ untilIdle: true, handleSignals: false }));
  let finished = false;
  Promise.all(running).finally(() => { finished = true; });
  let kills = 0;
  while (!finished && kills < 6) {
    await sleep(200);
    // one of exactly these workers' backends (their application_names)
    const { rows: [{ n }] } = await pool.query(`SELECT count(*)::int AS n FROM (
      SELECT pg_terminate_backend(pid) FROM pg_stat_activity
       WHERE datname = $1 AND application_name = ANY ($2::text[])
       ORDER BY random() LIMIT 1) t`, [DB, workers.map((w) => `${w.name} (jobguard worker)`)]);
    kills += n;
  }
  const stats = await Promise.all(running);
  assert.ok(kills >= 3, `only ${kills} backends terminated`);
  await assertOneSuccessEach(pool, jobs);
  assert.deepEqual([...calls.keys()].sort((a, b) => a - b), jobs);
  assert.ok([...calls.values()].every((n) => n === 1));
  const total = (k) => stats.reduce((sum, s) => sum + s[k], 0);
  assert.deepEqual([total('won'), total('failed'), total('reportErrors')], [120, 0, 0]);
  assert.equal(total('claimed') + total('adopted'), 120);
  assert.ok(total('reconnects') >= 1);
});

test('heartbeats keep a long handler in time; without them it goes unknown', async () => {
  const seen = {};
  const handler = async (job) => {
    await sleep(2500);
    const { rows: [{ state }] } = await pool.query(
      'SELECT state FROM jobguard.attempt_overview WHERE attempt_id = $1', [job.attempt_id]);
    seen[job.operation] = state;
    return {};
  };
  const beating = await freshOp();
  const rare = await freshOp();
  const [jobBeating] = await submitN(beating, 1);
  const [jobRare] = await submitN(rare, 1);
  const w1 = worker(handler, { operations: [beating], timeoutSeconds: 1, heartbeatSeconds: 0.25,
    waitSeconds: 0 });
  const w2 = worker(handler, { operations: [rare], timeoutSeconds: 1, heartbeatSeconds: 30,
    waitSeconds: 0 });
  const [s1, s2] = await Promise.all([w1.run({ untilIdle: true, handleSignals: false }),
    w2.run({ untilIdle: true, handleSignals: false })]);
  assert.deepEqual(seen, { [beating]: 'started', [rare]: 'unknown' });
  assert.ok(s1.heartbeats >= 5, `${s1.heartbeats} heartbeats`);
  assert.equal(s1.heartbeatsRefused, 0);
  assert.equal(s2.heartbeats, 0);
  assert.deepEqual([s1.won, s2.won], [1, 1]);   // a late result still wins the free slot
  assert.equal(await jg.jobState(pool, jobBeating), 'succeeded');
  assert.equal(await jg.jobState(pool, jobRare), 'succeeded');
});

test("the provider's refusals fail the attempt; the retry waits for the backoff or retryInSeconds", async () => {
  const op = await freshOp('0.5 seconds');
  const [plain, later] = await submitN(op, 2);
  const called = new Map([[plain, []], [later, []]]);
  const handler = async (job) => {
    called.get(job.job_id).push(Date.now());
    if (job.attempt_no === 1 && job.job_id === plain) throw new jg.ProviderRefused('card declined');
    if (job.attempt_no === 1) throw new jg.RetryLater('provider busy', 1.2);
    return { attempt: job.attempt_no };
  };
  const w = worker(handler, { operations: [op], batch: 2, waitSeconds: 2 });
  const stats = await w.run({ untilIdle: true, handleSignals: false });
  assert.deepEqual([stats.failed, stats.won], [2, 2]);
  for (const [jobId, error, gapMs] of [[plain, 'ProviderRefused: card declined', 500],
    [later, 'RetryLater: provider busy', 1200]]) {
    const [a1, a2] = await jg.attempts(pool, jobId);
    assert.deepEqual([a1.state, a1.error, a2.state], ['failed', error, 'succeeded']);
    const [first, second] = called.get(jobId);
    assert.ok(second - first >= gapMs, `retried after ${second - first} ms`);
    assert.deepEqual((await jg.job(pool, jobId)).result, { attempt: 2 });
  }
});

test("a claim of the worker whose answer was lost is picked up by the worker's name", async () => {
  const op = await freshOp();
  const jobs = await submitN(op, 2);
  const name = `adopt-${randomUUID().slice(0, 6)}`;
  // the worker's own pool, whose first claim runs on the server and then
  // loses its answer (as when the connection breaks after the commit)
  const own = new Pool({ database: DB, max: 2 });
  const query = own.query.bind(own);
  let lost = null;
  own.query = async (q, ...rest) => {
    const res = await query(q, ...rest);
    if (lost === null && typeof q === 'object' && /jobguard\.claim\(/.test(q.text)) {
      lost = res.rows.map((r) => Number(r.attempt_id));
      throw new Error('Connection terminated unexpectedly');
    }
    return res;
  };
  const handled = [];
  const w = worker(async (job) => { handled.push(job.attempt_id); return {}; },
    { name, pool: own, operations: [op], batch: 2, waitSeconds: 0 });
  const stats = await w.run({ untilIdle: true, handleSignals: false });
  await own.end();
  assert.equal(lost.length, 2);
  assert.deepEqual(handled, lost);
  assert.deepEqual([stats.adopted, stats.claimed, stats.won], [2, 0, 2]);
  await assertOneSuccessEach(pool, jobs);
});

test('open attempts of its name from before it started are marked unknown, never run', async () => {
  const op = await freshOp();
  const jobs = await submitN(op, 2);
  const name = `earlier-${randomUUID().slice(0, 6)}`;
  // an earlier process under this name claimed them; it may have run them
  const earlier = await jg.claim(pool, { worker: name, operations: [op], maxJobs: 2 });
  const handled = [];
  const w = worker(async (job) => { handled.push(job.attempt_id); return {}; },
    { name, operations: [op], waitSeconds: 0 });
  const stats = await w.run({ untilIdle: true, handleSignals: false });
  assert.deepEqual(handled, []);
  assert.deepEqual([stats.markedUnknown, stats.adopted, stats.claimed], [2, 0, 0]);
  for (const c of earlier) assert.equal((await jg.attempt(pool, c.attempt_id)).state, 'unknown');
  for (const jobId of jobs) assert.equal(await jg.jobState(pool, jobId), 'unknown');
});

test('the worker survives a restart of the server', {
  skip: !process.env.JOBGUARD_TEST_RESTART && 'JOBGUARD_TEST_RESTART (set by make test) says how to restart the cluster',
}, async () => {
  const op = await freshOp();
  const jobs = await submitN(op, 40);
  const done = [];
  const w = worker(async (job) => { await sleep(30); done.push(job.job_id); return {}; },
    { operations: [op], batch: 4, waitSeconds: 0.5, reconnectMaxSeconds: 1 });
  const running = w.run({ handleSignals: false });
  const fresh = new Pool({ database: DB, max: 1 });
  fresh.on('error', () => {});
  try {
    await waitFor(() => done.length >= 8, 20000, '8 jobs before the restart');
    await promisify(exec)(process.env.JOBGUARD_TEST_RESTART);
    await waitFor(async () => {
      try {
        const { rows: [{ n }] } = await fresh.query(`SELECT count(*)::int AS n FROM jobguard.job_overview
          WHERE operation = $1 AND state = 'succeeded'`, [op]);
        return n === jobs.length;
      } catch (err) {
        return false;
      }
    }, 60000, 'all jobs after the restart');
  } finally {
    w.stop();
    await running;
  }
  assert.ok(w.stats.reconnects >= 1);
  assert.equal(w.stats.reportErrors, 0);
  await assertOneSuccessEach(fresh, jobs);
  await fresh.end();
});

// sessionStatements: the prepared statements of each of the pool's
// connections (the two a Worker uses), by name
async function sessionStatements(own) {
  const clients = [await own.connect(), await own.connect()];
  try {
    const names = [];
    for (const c of clients) {
      const { rows } = await c.query('SELECT name FROM pg_prepared_statements ORDER BY name');
      names.push(...rows.map((r) => r.name));
    }
    return names;
  } finally {
    for (const c of clients) c.release();
  }
}

test('setPrepareStatements: off, nothing is prepared; on, each connection prepares a statement once and every job still runs once', async () => {
  assert.throws(() => jg.setPrepareStatements('yes'), TypeError);
  const drain = async (prefix) => {
    const op = await freshOp();
    const jobs = await submitN(op, 60);
    const own = new Pool({ database: DB, max: 2 });
    own.on('error', () => {});
    const calls = new Map();
    const handler = async (job) => {
      calls.set(job.job_id, (calls.get(job.job_id) || 0) + 1);
      return { done: job.params.n };
    };
    const workers = Array.from({ length: 2 }, (_, i) => new jg.Worker(handler, {
      pool: i === 0 ? own : undefined, connection: { database: DB }, logger: quiet(),
      name: `${prefix}-${i}`, operations: [op], batch: 4, waitSeconds: 0.5 }));
    const stats = await Promise.all(workers.map((w) => w.run({ untilIdle: true, handleSignals: false })));
    await assertOneSuccessEach(pool, jobs);
    assert.ok([...calls.values()].every((n) => n === 1) && calls.size === 60);
    assert.equal(stats[0].won + stats[1].won, 60);
    const names = await sessionStatements(own);
    await own.end();
    return names;
  };
  try {
    assert.deepEqual(await drain(`unprepared-${randomUUID().slice(0, 6)}`), []);
    jg.setPrepareStatements(true);
    const names = await drain(`prepared-${randomUUID().slice(0, 6)}`);
    // claim and finish_many, each at most once per connection, named by its text
    assert.ok(new Set(names).size >= 2, `prepared: ${names}`);
    assert.ok(names.every((n) => /^jobguard_[0-9a-f]{32}(_[0-9]+)?$/.test(n)), `prepared: ${names}`);
    // a refusal of a prepared statement is still its class, the first time and again
    for (let i = 0; i < 2; i++) {
      await assert.rejects(jg.finish(pool, 999999999, {}), jg.AttemptNotFound);
    }
  } finally {
    jg.setPrepareStatements(false);
  }
  // off again: a new connection prepares nothing
  const c = new Client({ database: DB });
  await c.connect();
  try {
    await jg.jobState(c, (await submitN(await freshOp(), 1))[0]);
    const { rows } = await c.query('SELECT count(*)::int AS n FROM pg_prepared_statements');
    assert.equal(rows[0].n, 0);
  } finally {
    await c.end();
  }
});

test('setPrepareStatements: a claim prepared before ALTER EXTENSION jobguard UPDATE changed its columns is prepared again; in a transaction block the refusal is the error', async () => {
  // onOld: a connection on a new database holding jobguard 1.2 (whose claim
  // has no failover column), with two jobs of an operation; the test's body
  // runs with it and the operation, then the database is dropped
  const onOld = async (suffix, body) => {
    const db = `${DB}_${suffix}`;
    await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    await admin(`CREATE DATABASE ${db}`);
    const c = new Client({ database: db });
    await c.connect();
    try {
      await c.query("CREATE EXTENSION jobguard VERSION '1.2'");
      await c.query(`SELECT jobguard.define_operation('op', '{"type": "object"}')`);
      for (const k of ['a', 'b', 'c']) {
        await jg.submit(c, { ownerId: 'alice', idempotencyKey: k, operation: 'op', params: {}, provider: 'psp' });
      }
      await body(c, db);
    } finally {
      await c.end();
      await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    }
  };
  // update: ALTER EXTENSION jobguard UPDATE from another connection
  const update = async (db) => {
    const u = new Client({ database: db });
    await u.connect();
    try { await u.query('ALTER EXTENSION jobguard UPDATE'); } finally { await u.end(); }
  };
  const claimOne = (c) => jg.claim(c, { worker: 'w', operations: ['op'], maxJobs: 1 });
  const claimed = async (c) => (await c.query(
    "SELECT count(*)::int AS n FROM jobguard.attempts WHERE state = 'started'")).rows[0].n;
  jg.setPrepareStatements(true);
  try {
    // in a transaction block: the refusal aborted it, nothing is claimed,
    // and the next claim (the transaction rolled back) is prepared again
    await onOld('stale_tx', async (c, db) => {
      const [first] = await claimOne(c);
      assert.equal(first.failover, undefined);
      await c.query('BEGIN');
      await update(db);
      // a statement that locks a table takes in the update's invalidations
      await c.query('SELECT count(*) FROM jobguard.jobs');
      await assert.rejects(claimOne(c), (err) => err.code === '0A000');
      await c.query('ROLLBACK');
      assert.equal(await claimed(c), 1);
      const [second] = await claimOne(c);
      assert.equal(second.failover, false);
      assert.equal(await claimed(c), 2);
    });
    // outside a transaction block: the refused claim is sent once more
    // under a new name and claims one job, once
    await onOld('stale', async (c, db) => {
      const [first] = await claimOne(c);
      assert.equal(first.failover, undefined);
      await update(db);
      const again = await claimOne(c);
      assert.equal(again.length, 1);
      assert.equal(again[0].failover, false);
      assert.notEqual(again[0].job_id, first.job_id);
      assert.equal(await claimed(c), 2);
      const { rows } = await c.query(`SELECT name FROM pg_prepared_statements
                                       WHERE statement LIKE '%jobguard.claim(%' ORDER BY prepare_time`);
      assert.equal(rows.length, 2);
      assert.match(rows[1].name, /^jobguard_[0-9a-f]{32}_[0-9]+$/);
      // and once only: the next claim runs its new statement
      assert.equal((await claimOne(c)).length, 1);
      assert.equal(await claimed(c), 3);
      // jobguard's own 0A000 (a claim that may wait, in REPEATABLE READ) is
      // the caller's error, sent once: no new names, nothing prepared again
      await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await assert.rejects(jg.claim(c, { worker: 'w', operations: ['op'], waitSeconds: 1 }),
        (err) => err.code === '0A000' && !/cached plan/.test(err.message));
      await c.query('ROLLBACK');
      assert.deepEqual(await claimOne(c), []);
      const { rows: after } = await c.query(`SELECT name FROM pg_prepared_statements
                                              WHERE statement LIKE '%jobguard.claim(%' ORDER BY prepare_time`);
      assert.deepEqual(after.map((r) => r.name), rows.map((r) => r.name));
    });
  } finally {
    jg.setPrepareStatements(false);
  }
});
