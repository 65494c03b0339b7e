'use strict';
// Exactly once: the Worker calls a handler at most once per attempt, under
// every failure a handler or the server can produce: a throw, a rejection,
// a provider's refusal, undefined, null, a result over
// jobguard.max_payload_size, a result breaking the output contract, the worker's backend terminated while its
// finish waits, the server restarted while its finish waits.  Every
// handler call is counted per attempt; every attempt of the worker is
// counted in the database; each attempt ran exactly once.  Only the
// provider's refusal and a contract-breaking result fail an attempt (the
// job is tried again); an error or a result that cannot be sent leaves it
// unknown (the provider may have done the work), the reason logged.
const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const { exec } = require('node:child_process');
const { promisify } = require('node:util');
const { Client } = require('pg');
const jg = require('..');
const { setUp, tearDown } = require('../testlib');

const DB = 'jg_client_node_once';
const MAX_ATTEMPTS = 2;
let pool;
test.before(async () => {
  pool = await setUp(DB);
  pool.on('error', () => {});   // its idle connections die in the restart case
});
test.after(async () => { await tearDown(pool, DB); });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const quiet = () => { const lines = []; const keep = (m) => lines.push(m);
  return { lines, info: keep, warn: keep, error: keep }; };

// query: one statement on a connection of its own (it survives what the
// pool's connections do not: the restart case kills them)
async function query(text, values) {
  const c = new Client({ database: DB });
  c.on('error', () => {});
  await c.connect();
  try { return (await c.query(text, values)).rows; } finally { await c.end().catch(() => {}); }
}

// waitFor: poll check() until it is true, failing after ms
async function waitFor(check, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    try { if (await check()) return; } catch (err) { /* the server is restarting */ }
    assert.ok(Date.now() < end, `timed out waiting for ${what}`);
    await sleep(50);
  }
}

// the cases: what the handler does on each attempt of its job, and what
// the job's attempts must end as
const CASES = {
  ok: { expect: ['succeeded'] },
  throws: { expect: ['unknown'], log: /marked unknown: the handler threw TypeError: thrown/ },
  rejects: { expect: ['unknown'], log: /marked unknown: the handler threw RangeError: rejected/ },
  refused: { expect: ['failed', 'failed'], error: /^ProviderRefused: declined/ },
  undefined: { expect: ['unknown'], log: /marked unknown: UnrecordableResult: .*resolved undefined/ },
  null: { expect: ['unknown'], log: /marked unknown: UnrecordableResult: .*resolved null/ },
  too_large: { expect: ['unknown'], log: /marked unknown: UnrecordableResult: .*54000/ },
  contract: { expect: ['failed', 'failed'], error: /charge_id/ },
  dropped: { expect: ['succeeded'], cut: 'terminate' },
  restarted: { expect: ['succeeded'], cut: 'restart' },
};

// cutMidFinish: once the worker's backend waits in finish_attempt (or
// finish_many) for the lock held on the attempt's row, terminate that
// backend (or restart the server), then let the lock go; resolves to what
// it cut and the statement it cut
async function cutMidFinish(locker, workerName, how) {
  let pid;
  let statement;
  await waitFor(async () => {
    // exactly the worker's own main connection (its application_name, in
    // this test's database): never a backend of another test file
    const rows = await query(`SELECT pid, query FROM pg_stat_activity
      WHERE datname = $1 AND application_name = $2 AND wait_event_type = 'Lock'
        AND (query LIKE '%finish_attempt%' OR query LIKE '%finish_many%')`,
      [DB, `${workerName} (jobguard worker)`]);
    pid = rows.length > 0 ? rows[0].pid : undefined;
    statement = rows.length > 0 ? rows[0].query : undefined;
    return pid !== undefined;
  }, 20000, 'the worker waiting in finish_attempt');
  if (how === 'terminate') {
    const [{ t }] = await query('SELECT pg_terminate_backend($1) AS t', [pid]);
    assert.equal(t, true);
    await locker.query('ROLLBACK');
    await locker.end();
  } else {
    await promisify(exec)(process.env.JOBGUARD_TEST_RESTART);
    await locker.end().catch(() => {});
  }
  return { how, pid, statement };
}

// everyCase: run every case (but those left out) through one Worker of
// the given batch size, and check that each attempt ran exactly once
async function everyCase(t, { batch, leaveOut = [] }) {
  const restart = Boolean(process.env.JOBGUARD_TEST_RESTART);
  if (!restart) t.diagnostic('JOBGUARD_TEST_RESTART is not set: the restart case is left out');
  const cases = Object.keys(CASES).filter((k) => (restart || CASES[k].cut !== 'restart')
    && !leaveOut.includes(k));
  const op = `op-${randomUUID().slice(0, 12)}`;
  await pool.query(`SELECT jobguard.define_operation($1,
    '{"type": "object", "required": ["charge_id"]}', '0.1 seconds')`, [op]);
  const jobs = {};
  for (const kind of cases) {
    ({ jobId: jobs[kind] } = await jg.submit(pool, { ownerId: 'alice', idempotencyKey: randomUUID(),
      operation: op, params: { kind }, provider: 'main-psp', maxAttempts: MAX_ATTEMPTS }));
  }
  const name = `once-${randomUUID().slice(0, 6)}`;
  const calls = new Map();      // attempt_id -> handler calls
  const cuts = [];
  // not an async function: 'throws' throws synchronously, 'rejects'
  // returns a rejected promise, the rest resolve
  const handler = (job) => {
    calls.set(job.attempt_id, (calls.get(job.attempt_id) || 0) + 1);
    if (job.params.kind === 'throws') throw new TypeError('thrown');
    return resolveFor(job);
  };
  const resolveFor = async (job) => {
    switch (job.params.kind) {
      case 'rejects': throw new RangeError('rejected');
      case 'refused': throw new jg.ProviderRefused('declined');
      case 'undefined': return undefined;
      case 'null': return null;
      case 'too_large': return { charge_id: 'x'.repeat(4096) };
      case 'contract': return { no_charge_id: true };
      case 'dropped': case 'restarted': {
        // hold the attempt's row: the finish that follows waits for it
        const locker = new Client({ database: DB });
        locker.on('error', () => {});
        await locker.connect();
        await locker.query('BEGIN');
        await locker.query('SELECT 1 FROM jobguard.attempts WHERE id = $1 FOR UPDATE',
          [job.attempt_id]);
        cuts.push(cutMidFinish(locker, name, CASES[job.params.kind].cut));
        return { charge_id: job.params.kind };
      }
      default: return { charge_id: 'ok' };
    }
  };
  const logger = quiet();
  const w = new jg.Worker(handler, { name, operations: [op], waitSeconds: 0.2, batch,
    reconnectMinSeconds: 0.05, reconnectMaxSeconds: 0.5, logger,
    connection: { database: DB, options: '-c jobguard.max_payload_size=1kB' } });
  const running = w.run({ handleSignals: false });
  const final = ['succeeded', 'failed', 'unknown'];
  try {
    // until every job has ended, or a handler ran twice for one attempt
    await waitFor(async () => {
      if ([...calls.values()].some((n) => n > 1)) return true;
      const rows = await query(`SELECT count(*)::int AS n FROM jobguard.job_overview
        WHERE operation = $1 AND state = ANY ($2)`, [op, final]);
      return rows[0].n === cases.length;
    }, 90000, 'every job to end');
  } finally {
    w.stop();
    await running;
  }
  for (const [attemptId, n] of calls) assert.equal(n, 1, `attempt ${attemptId} ran ${n} times`);
  const cut = await Promise.all(cuts);
  assert.deepEqual(cut.map((c) => c.how).sort(),
    cases.filter((k) => CASES[k].cut).map((k) => CASES[k].cut).sort(), 'every cut happened');
  if (batch > 1) {   // the cut hit the batch's finish_many
    assert.ok(cut.every((c) => /finish_many/.test(c.statement)), cut.map((c) => c.statement).join());
  }

  // every attempt of the worker, in the database, ran exactly once
  const attempts = await query(`SELECT a.attempt_id::int AS id, a.job_id::int AS job, a.state,
      a.error FROM jobguard.attempt_overview a WHERE a.worker = $1 ORDER BY a.attempt_id`, [name]);
  assert.deepEqual(attempts.map((a) => a.id).sort(), [...calls.keys()].sort());
  for (const kind of cases) {
    const mine = attempts.filter((a) => a.job === jobs[kind]);
    assert.deepEqual(mine.map((a) => a.state), CASES[kind].expect, kind);
    if (CASES[kind].error) {
      for (const a of mine) assert.match(a.error, CASES[kind].error, `${kind}: ${a.error}`);
    }
    if (CASES[kind].log) {
      const [a] = mine;
      assert.ok(logger.lines.some((l) => l.includes(`attempt ${a.id} of job ${a.job} `)
        && CASES[kind].log.test(l)), `${kind}: no log line saying why`);
    }
  }
  assert.ok(w.stats.reconnects >= 1, 'the worker reconnected after the cut');
  assert.equal(w.stats.adopted, 0);
}

test('each handler runs exactly once per attempt, whatever fails', async (t) => {
  await everyCase(t, { batch: 1 });
});

// a batch's results go in one finish_many: its connection cut while it
// waits (the worker's backend terminated) must not run any handler again.
// (One cut per batch: two cut cases in one batch would race for it.)
test('each handler runs exactly once when a batch\'s finish_many is cut', async (t) => {
  await everyCase(t, { batch: 4, leaveOut: ['restarted'] });
});
