'use strict';
// Never twice (SPEC 1.3, "an unrecorded report is unknown, never failed"),
// by fault injection against a real jobguard: a statement timeout, a lock
// timeout, a serialization failure and a terminated backend at the
// worker's finish, a claim and a claim_unknown that raise a server error,
// a Reconciler's finish_many that raises one.  In each the handler ran
// exactly once and the job ended once: the report was tried again, never
// turned into a failed attempt with a second attempt behind it, and the
// loop did not end.  Then several workers drain a queue while claims and
// reports meet injected server errors: one handler call and one attempt
// per job.
const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { Client, Pool } = require('pg');
const jg = require('..');
const { setUp, tearDown } = require('../testlib');

const DB = 'jg_client_node_never_twice';
let pool;
let liveness = false;
test.before(async () => {
  pool = await setUp(DB);
  pool.on('error', () => {});   // terminated backends
  const { rows: [{ v }] } = await pool.query(`SELECT to_regprocedure(
    'jobguard.claim_unknown(text, text[], integer, interval, interval)') IS NOT NULL AS v`);
  liveness = v;
});
test.after(async () => { await tearDown(pool, DB); });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const quiet = () => { const lines = []; const keep = (m) => lines.push(m);
  return { lines, info: keep, warn: keep, error: keep }; };

// RAISE: a statement the server answers with a real error of the given SQLSTATE
const RAISE = (code) => `DO $$BEGIN RAISE EXCEPTION USING ERRCODE = '${code}',
  MESSAGE = 'injected by never-twice.test.js'; END$$`;

// faultyPool: a pool on the test database whose query(q) first asks
// hooks.before(text) (a string: run that statement instead) and, when a
// statement fails, calls hooks.failed(text, err); application_name names
// its backends.
function faultyPool(appName, hooks, options = {}) {
  const own = new Pool({ database: DB, max: 2, application_name: appName, ...options });
  own.on('error', () => {});
  const query = own.query.bind(own);
  own.query = async (q, ...rest) => {
    const text = typeof q === 'string' ? q : q.text;
    const instead = hooks.before ? hooks.before(text) : undefined;
    try {
      if (instead) return await query({ text: instead }, ...rest);
      return await query(q, ...rest);
    } catch (err) {
      if (hooks.failed) await hooks.failed(text, err);
      throw err;
    }
  };
  return own;
}

const isFinish = (text) => /jobguard\.finish_(attempt|many)\(/.test(text);
const isClaim = (text) => /jobguard\.claim\(/.test(text);

// freshOp: a new operation (claims see only this test's jobs), open
// contract, a short backoff
async function freshOp() {
  const op = `op-${randomUUID().slice(0, 12)}`;
  await pool.query(`SELECT jobguard.define_operation($1, '{"type": "object"}', '0.1 seconds')`, [op]);
  return op;
}

// submitN: n jobs of op (up to 3 attempts each); their ids
async function submitN(op, n) {
  const rows = await jg.submitMany(pool, Array.from({ length: n }, (_, i) => ({
    ownerId: 'alice', idempotencyKey: randomUUID(), operation: op, params: { n: i },
    provider: 'main-psp', maxAttempts: 3 })));
  assert.ok(rows.every((r) => r.sqlstate === null));
  return rows.map((r) => r.job_id);
}

// endedOnce: every job has exactly one attempt, succeeded, and the handler
// ran once for each
async function endedOnce(jobs, calls) {
  for (const jobId of jobs) {
    const states = (await jg.attempts(pool, jobId)).map((a) => a.state);
    assert.deepEqual(states, ['succeeded'], `job ${jobId}: attempts ${states}`);
    assert.equal(calls.get(jobId), 1, `job ${jobId}: the handler ran ${calls.get(jobId)} times`);
  }
}

// lockAttempt: a connection holding the attempt's row (FOR UPDATE), so
// that a finish waits for it; release() ends it.
async function lockAttempt(attemptId) {
  const c = new Client({ database: DB });
  c.on('error', () => {});
  await c.connect();
  await c.query('BEGIN');
  await c.query('SELECT 1 FROM jobguard.attempts WHERE id = $1 FOR UPDATE', [attemptId]);
  let released = false;
  return {
    async release() {
      if (released) return;
      released = true;
      await c.query('ROLLBACK');
      await c.end();
    },
  };
}

// atFinish: run one job through a Worker on `own` whose handler holds the
// attempt's row while the worker reports; the lock is released once the
// first finish has failed (or after releaseAfterMs); resolves to the worker, the job, the
// handler calls and the first finish error.
async function atFinish(makePool, { releaseAfterMs = 5000 } = {}) {
  const op = await freshOp();
  const jobs = await submitN(op, 1);
  const calls = new Map();
  let lock = null;
  let firstError = null;
  const own = makePool({
    failed: async (text, err) => {
      if (isFinish(text) && !firstError) {
        firstError = err;
        if (lock) await lock.release();
      }
    },
  });
  const w = new jg.Worker(async (job) => {
    calls.set(job.job_id, (calls.get(job.job_id) || 0) + 1);
    lock = await lockAttempt(job.attempt_id);
    const l = lock;
    setTimeout(() => l.release().catch(() => {}), releaseAfterMs).unref();
    return { charge_id: `c-${job.job_id}` };
  }, { pool: own, name: `nt-${randomUUID().slice(0, 6)}`, operations: [op], waitSeconds: 0.2,
    reconnectMinSeconds: 0.05, logger: quiet() });
  await w.run({ untilIdle: true, handleSignals: false });
  await own.end();
  if (lock) await lock.release().catch(() => {});
  return { w, jobs, calls, firstError };
}

test('a statement timeout at the finish: the same finish again, the job ends once', { timeout: 60000 }, async () => {
  const { w, jobs, calls, firstError } = await atFinish((hooks) => faultyPool('nt-timeout', hooks,
    { options: '-c statement_timeout=300' }));
  assert.equal(firstError && firstError.code, '57014');
  await endedOnce(jobs, calls);
  assert.deepEqual([w.stats.won, w.stats.failed, w.stats.reportErrors], [1, 0, 0]);
  assert.ok(w.stats.reportRetries >= 1);
});

test('a lock timeout at the finish: the same finish again, the job ends once', { timeout: 60000 }, async () => {
  const { w, jobs, calls, firstError } = await atFinish((hooks) => faultyPool('nt-lock', hooks,
    { options: '-c lock_timeout=300' }));
  assert.equal(firstError && firstError.code, '55P03');
  await endedOnce(jobs, calls);
  assert.deepEqual([w.stats.won, w.stats.failed, w.stats.reportErrors], [1, 0, 0]);
});

test('a serialization failure at the finish: the same finish again, the job ends once', { timeout: 60000 }, async () => {
  // the server answers the worker's first finish with 40001
  const op = await freshOp();
  const jobs = await submitN(op, 1);
  const calls = new Map();
  let finishes = 0;
  const own = faultyPool('nt-serial', {
    before: (text) => (isFinish(text) && finishes++ === 0 ? RAISE('40001') : undefined),
  });
  const w = new jg.Worker(async (job) => {
    calls.set(job.job_id, (calls.get(job.job_id) || 0) + 1);
    return { charge_id: `c-${job.job_id}` };
  }, { pool: own, operations: [op], waitSeconds: 0.2, reconnectMinSeconds: 0.05, logger: quiet() });
  await w.run({ untilIdle: true, handleSignals: false });
  await own.end();
  assert.equal(finishes, 2);
  await endedOnce(jobs, calls);
  assert.deepEqual([w.stats.won, w.stats.failed, w.stats.reportErrors], [1, 0, 0]);
});

test("the worker's backend terminated mid-report: the same finish again, the job ends once", { timeout: 60000 }, async () => {
  const op = await freshOp();
  const jobs = await submitN(op, 1);
  const calls = new Map();
  const appName = `nt-kill-${randomUUID().slice(0, 6)}`;
  let killed = null;
  const w = new jg.Worker(async (job) => {
    calls.set(job.job_id, (calls.get(job.job_id) || 0) + 1);
    const lock = await lockAttempt(job.attempt_id);
    // once the finish waits for the row, terminate its backend, then let go
    (async () => {
      for (let i = 0; i < 200 && !killed; i++) {
        const { rows } = await pool.query(`SELECT pid FROM pg_stat_activity WHERE datname = $1
          AND application_name = $2 AND wait_event_type = 'Lock' AND query LIKE '%finish_%'`,
        [DB, `${appName} (jobguard worker)`]);
        if (rows.length > 0) {
          killed = (await pool.query('SELECT pg_terminate_backend($1) AS t', [rows[0].pid])).rows[0].t;
        } else {
          await sleep(20);
        }
      }
      await lock.release();
    })();
    return { charge_id: `c-${job.job_id}` };
  }, { connection: { database: DB }, name: appName, operations: [op],
    waitSeconds: 0.2, reconnectMinSeconds: 0.05, logger: quiet() });
  await w.run({ untilIdle: true, handleSignals: false });
  assert.equal(killed, true);
  await endedOnce(jobs, calls);
  assert.deepEqual([w.stats.won, w.stats.failed, w.stats.reportErrors], [1, 0, 0]);
  assert.ok(w.stats.reconnects >= 1);
});

test('a claim that raises a server error is logged and tried again; the loop goes on', { timeout: 60000 }, async () => {
  const op = await freshOp();
  const jobs = await submitN(op, 3);
  const calls = new Map();
  let raised = 0;
  const own = faultyPool('nt-claim', {
    before: (text) => (isClaim(text) && raised++ === 0 ? RAISE('XX000') : undefined),
  });
  const logger = quiet();
  const w = new jg.Worker(async (job) => {
    calls.set(job.job_id, (calls.get(job.job_id) || 0) + 1);
    return { ok: job.job_id };
  }, { pool: own, operations: [op], waitSeconds: 0.2, reconnectMinSeconds: 0.05, logger });
  const stats = await w.run({ untilIdle: true, handleSignals: false });
  await own.end();
  await endedOnce(jobs, calls);
  assert.deepEqual([stats.won, stats.claimErrors], [3, 1]);
  assert.ok(logger.lines.some((l) => /claim failed \(XX000/.test(l)));
});

test('a handler error that is not a refusal marks the attempt unknown, never failed', { timeout: 60000 }, async () => {
  const op = await freshOp();
  const [jobId] = await submitN(op, 1);
  let calls = 0;
  const w = new jg.Worker(async () => {
    calls++;
    throw new TypeError('cannot read the response');
  }, { connection: { database: DB }, operations: [op], waitSeconds: 0.2, logger: quiet() });
  const stats = await w.run({ untilIdle: true, handleSignals: false });
  assert.equal(calls, 1);
  assert.deepEqual((await jg.attempts(pool, jobId)).map((a) => a.state), ['unknown']);
  assert.deepEqual([stats.handlerErrors, stats.failed], [1, 0]);
});

// unknownJobs: n jobs of op, each with an attempt marked unknown
async function unknownJobs(op, n) {
  const jobs = await submitN(op, n);
  for (const j of jobs) await jg.markUnknown(pool, await jg.beginAttempt(pool, j));
  return jobs;
}

test("a Reconciler's claim_unknown and finish_many that raise are tried again; each ends once", { timeout: 60000 }, async (t) => {
  if (!liveness) { t.skip('no jobguard.claim_unknown (1.2 liveness)'); return; }
  const op = await freshOp();
  const jobs = await unknownJobs(op, 3);
  let claims = 0;
  let finishes = 0;
  const own = faultyPool('nt-reconcile', {
    before: (text) => {
      if (/jobguard\.claim_unknown\(/.test(text) && claims++ === 0) return RAISE('57014');
      if (isFinish(text) && finishes++ === 0) return RAISE('40001');
      return undefined;
    },
  });
  const calls = new Map();
  const r = new jg.Reconciler(async (row) => {
    calls.set(row.job_id, (calls.get(row.job_id) || 0) + 1);
    return { charge: row.provider_key };
  }, { pool: own, operations: [op], batch: 3, leaseSeconds: 60, waitSeconds: 0.1,
    reconnectMinSeconds: 0.05, logger: quiet() });
  const running = r.run({ handleSignals: false });
  const end = Date.now() + 10000;
  while (Date.now() < end) {
    const states = await Promise.all(jobs.map((j) => jg.jobState(pool, j)));
    if (states.every((s) => s === 'succeeded')) break;
    await sleep(50);
  }
  r.stop();
  const stats = await running;
  await own.end();
  for (const j of jobs) {
    assert.deepEqual((await jg.attempts(pool, j)).map((a) => a.state), ['succeeded'], `job ${j}`);
    assert.equal(calls.get(j), 1);
  }
  assert.deepEqual([stats.won, stats.failed, stats.claimErrors, stats.reportErrors], [3, 0, 1, 0]);
});

test('6 workers drain 600 jobs through injected server errors: one run and one attempt per job', { timeout: 120000 }, async (t) => {
  const op = await freshOp();
  const jobs = await submitN(op, 600);
  const calls = new Map();
  const codes = ['40001', '57014', '55P03', 'XX000'];
  let injected = 0;
  let seed = 7;
  const random = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
  const hooks = {
    before: (text) => {
      if ((isFinish(text) || isClaim(text)) && random() < 0.08) {
        return RAISE(codes[injected++ % codes.length]);
      }
      return undefined;
    },
  };
  const pools = [];
  const workers = Array.from({ length: 6 }, (_, i) => {
    const own = faultyPool(`nt-drain-${i}`, hooks);
    pools.push(own);
    return new jg.Worker(async (job) => {
      calls.set(job.job_id, (calls.get(job.job_id) || 0) + 1);
      await sleep(1);
      return { done: job.params.n };
    }, { pool: own, operations: [op], batch: i % 2 === 0 ? 1 : 4, waitSeconds: 0.5,
      reconnectMinSeconds: 0.01, reconnectMaxSeconds: 0.1, logger: quiet() });
  });
  const stats = await Promise.all(workers.map((w) => w.run({ untilIdle: true, handleSignals: false })));
  await Promise.all(pools.map((p) => p.end()));
  const { rows: [{ attempts, succeeded }] } = await pool.query(`SELECT count(*)::int AS attempts,
      count(*) FILTER (WHERE a.state = 'succeeded')::int AS succeeded
      FROM jobguard.attempt_overview a JOIN jobguard.job_overview j USING (job_id)
     WHERE j.operation = $1`, [op]);
  const total = (k) => stats.reduce((sum, s) => sum + s[k], 0);
  assert.ok(injected >= 30, `only ${injected} errors injected`);
  assert.deepEqual([attempts, succeeded], [600, 600]);
  await endedOnce(jobs, calls);
  assert.deepEqual([total('won'), total('failed'), total('reportErrors')], [600, 0, 0]);
  assert.ok(total('claimErrors') >= 1 && total('reportRetries') >= 1);
  t.diagnostic(`injected ${injected} errors; ${total('claimErrors')} claim errors, `
    + `${total('reportRetries')} report retries`);
});
