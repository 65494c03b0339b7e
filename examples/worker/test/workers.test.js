'use strict';
// Several workers, each with its own connection, over the same submitted
// jobs.  Nobody claims anything: each worker picks pending jobs and the gate
// decides.  A share of the primary provider's calls hang past the timeout;
// a supervisor cancels them and the jobs fail over to the certified
// fallback, while the hung calls still answer late.  In the end every job
// has exactly one winning result, and lost results only where an attempt
// was cancelled while its call was still running.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, types } = require('pg');
const { Worker, cancelStuck } = require('../worker');
const { createProvider } = require('../provider');

types.setTypeParser(20, Number);

const DB = process.env.JG_WORKER_DB || 'jg_examples_worker';
const WORKERS = 4;
const JOBS = 200;            // 4 workers x 50 jobs
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function admin(sql) {
  const c = new Client({ database: 'postgres' });
  await c.connect();
  try { await c.query(sql); } finally { await c.end(); }
}

let db;
test.before(async () => {
  await admin(`DROP DATABASE IF EXISTS ${DB}`);
  await admin(`CREATE DATABASE ${DB}`);
  db = new Client({ database: DB });
  await db.connect();
  await db.query('CREATE EXTENSION jobguard');
  await db.query(`SELECT jobguard.define_operation('charge',
    '{"type": "object", "required": ["charge_id", "provider"]}')`);
  await db.query(`SELECT jobguard.certify_provider('charge', 'backup-psp')`);
});

test.after(async () => {
  if (db) await db.end();
  await admin(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
});

test(`${WORKERS} workers x ${JOBS / WORKERS} jobs: one winning result per job`, { timeout: 180000 }, async (t) => {
  for (let i = 1; i <= JOBS; i++) {
    await db.query(`SELECT jobguard.submit($1, $2, 'charge', $3, 'main-psp')`,
      [`customer-${i % 7}`, `order-${i}`, JSON.stringify({ amount: 100 + i })]);
  }
  const providers = {
    // timeouts are 800 ms; a hung call answers after 2.5 s
    'main-psp': createProvider({ name: 'main-psp', delayMs: 5, jitterMs: 20,
      failureRate: 0.1, hangRate: 0.08, hangMs: 2500, seed: 9 }),
    'backup-psp': createProvider({ name: 'backup-psp', delayMs: 5, jitterMs: 20,
      failureRate: 0.05, seed: 9 }),
  };
  const clients = [];
  const workers = [];
  for (let i = 0; i < WORKERS; i++) {
    const c = new Client({ database: DB });
    await c.connect();
    clients.push(c);
    workers.push(new Worker({ id: `w${i}`, db: c, providers, fallbacks: { charge: 'backup-psp' },
      timeoutMs: 800 }));
  }
  const sup = new Client({ database: DB });
  await sup.connect();
  clients.push(sup);

  // the supervisor: every 100 ms, stop waiting for unknown attempts
  const cancelled = [];
  let supervising = true;
  const supervisor = (async () => {
    while (supervising) {
      cancelled.push(...await cancelStuck(sup));
      await sleep(100);
    }
  })();

  let crashed = null;
  const loops = workers.map((w) => w.run().catch((err) => { crashed = err; throw err; }));
  try {
    const deadline = Date.now() + 150000;
    for (;;) {
      const { rows } = await db.query(
        `SELECT count(*) FILTER (WHERE state <> 'succeeded')::int AS open FROM jobguard.job_overview`);
      const inFlight = providers['main-psp'].inFlight + providers['backup-psp'].inFlight;
      if (crashed) break;   // reported below
      if (rows[0].open === 0 && inFlight === 0) break;
      assert.ok(Date.now() < deadline, `jobs still open: ${rows[0].open}`);
      await sleep(100);
    }
  } finally {
    // also on failure: stop everything, so that the process can end
    workers.forEach((w) => w.stop());
    const ended = await Promise.allSettled(loops);
    await Promise.allSettled(workers.map((w) => w.drain()));
    supervising = false;
    await supervisor.catch(() => {});
    await Promise.allSettled(clients.map((c) => c.end()));
    for (const e of ended) if (e.status === 'rejected') throw e.reason;
  }
  for (const w of workers) assert.deepEqual(w.errors, [], `${w.id}: late reports failed`);

  const sum = (f) => workers.reduce((n, w) => n + f(w.stats), 0);
  const timedOut = new Set(workers.flatMap((w) => w.stats.timedOut));
  const skippedGate = sum((s) => (s.skipped.JG002 || 0) + (s.skipped.JG003 || 0));
  t.diagnostic(`attempts begun ${sum((s) => s.begun)}, refused by the gate ${skippedGate}, ` +
    `won ${sum((s) => s.won)}, lost ${sum((s) => s.lost)}, failed ${sum((s) => s.failed)}, ` +
    `timed out ${timedOut.size}, cancelled by the supervisor ${cancelled.length}`);
  for (const w of workers) t.diagnostic(`${w.id}: ${JSON.stringify({ ...w.stats, timedOut: w.stats.timedOut.length })}`);

  // every job succeeded, its result slot names its one succeeded attempt
  const jobs = await db.query(
    `SELECT j.job_id, j.state, j.completed_by, j.result,
            (SELECT array_agg(a.attempt_id ORDER BY a.attempt_no) FROM jobguard.attempts_of(j.job_id) a
              WHERE a.state = 'succeeded') AS winners,
            (SELECT count(*)::int FROM jobguard.attempts_of(j.job_id) a
              WHERE a.state IN ('started', 'unknown')) AS open
       FROM jobguard.job_overview j ORDER BY j.job_id`);
  assert.equal(jobs.rows.length, JOBS, 'one job per submitted order');
  for (const j of jobs.rows) {
    assert.equal(j.state, 'succeeded', `job ${j.job_id}`);
    assert.deepEqual(j.winners.map(Number), [j.completed_by], `job ${j.job_id}: exactly one succeeded attempt`);
    assert.equal(j.open, 0, `job ${j.job_id}: nothing left open`);
  }
  assert.equal(sum((s) => s.won), JOBS, 'the workers saw exactly one won per job');

  // lost results only where expected: two attempts of a job can both
  // report only if the first was cancelled (out of band) while its call was
  // still running; so the loser, or the late winner it lost to, is a
  // cancelled attempt
  const lost = await db.query(
    `SELECT l.attempt_id, l.job_id, l.lost_to, l.lost_result, j.completed_by,
            l.cancelled_at IS NOT NULL OR w.cancelled_at IS NOT NULL AS after_cancel
       FROM jobguard.attempt_overview l
       JOIN jobguard.jobs j ON j.id = l.job_id
       JOIN jobguard.attempts w ON w.id = l.lost_to
      WHERE l.state = 'lost'`);
  for (const l of lost.rows) {
    assert.equal(l.lost_to, l.completed_by, `attempt ${l.attempt_id} lost to the job's winner`);
    assert.ok(l.after_cancel, `attempt ${l.attempt_id} of job ${l.job_id} lost without a cancel involved`);
    assert.ok(l.lost_result.charge_id, 'the losing charge is kept for the refund');
  }
  assert.equal(lost.rows.length, sum((s) => s.lost));

  // the run did exercise the breakpoints
  const hung = providers['main-psp'].calls.filter((c) => c.hang).length;
  assert.ok(hung > 0 && timedOut.size >= hung, 'every hung call was timed out');
  assert.ok(cancelled.length > 0, 'the supervisor cancelled stuck attempts');
  assert.ok(lost.rows.length > 0, 'late answers were recorded as lost');
  const fallbackWins = await db.query(
    `SELECT count(*)::int AS n FROM jobguard.attempt_overview WHERE provider = 'backup-psp' AND state = 'succeeded'`);
  assert.ok(fallbackWins.rows[0].n > 0, 'jobs failed over to the certified fallback');
  assert.ok(skippedGate > 0, 'workers collided and the gate turned them away');
});
