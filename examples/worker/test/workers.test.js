'use strict';
// Several workers, each with its own connection, drain the same submitted
// jobs with jobguard.claim().  Nobody picks jobs from a list: claim() hands
// each job to one worker, so the gate never turns a worker away (no JG002
// at all).  A share of the primary provider's calls hang past the workers'
// patience; a supervisor cancels those attempts and claim() hands the jobs
// to the certified fallback, while the hung calls still answer late.  One
// worker crashes mid-run holding claimed attempts; restarted under the same
// name it finds them (attempt_overview.worker).  In the end every job has
// exactly one winning result, and lost results only where an attempt was
// cancelled while its call was still running.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, types } = require('pg');
const { Worker, cancelStuck, uncertifiedFallbacks } = require('../worker');
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
  // a contract, and a short retry backoff after a failure
  await db.query(`SELECT jobguard.define_operation('charge',
    '{"type": "object", "required": ["charge_id", "provider"]}',
    retry_backoff => '20 milliseconds', retry_backoff_max => '200 milliseconds')`);
});

test.after(async () => {
  if (db) await db.end();
  await admin(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
});

test('the worker says when its fallback is not certified yet', async () => {
  assert.deepEqual(await uncertifiedFallbacks(db, { charge: 'backup-psp' }), ['backup-psp for charge']);
  await db.query(`SELECT jobguard.certify_provider('charge', 'backup-psp', '{"suite": "green"}')`);
  assert.deepEqual(await uncertifiedFallbacks(db, { charge: 'backup-psp' }), []);
});

test(`${WORKERS} workers x ${JOBS / WORKERS} jobs: one winning result per job, no JG002`, { timeout: 180000 }, async (t) => {
  const { rows: submitted } = await db.query(
    `SELECT count(*) FILTER (WHERE created)::int AS created, count(sqlstate)::int AS refused
       FROM jobguard.submit_many(
         ARRAY(SELECT 'customer-' || (i % 7) FROM generate_series(1, $1) i),
         ARRAY(SELECT 'order-' || i FROM generate_series(1, $1) i),
         array_fill('charge'::text, ARRAY[$1::int]),
         ARRAY(SELECT jsonb_build_object('amount', 100 + i) FROM generate_series(1, $1) i),
         array_fill('main-psp'::text, ARRAY[$1::int]))`, [JOBS]);
  assert.deepEqual(submitted[0], { created: JOBS, refused: 0 }, 'submit_many created every job');

  const providers = {
    // patience is 800 ms; a hung call answers after 2.5 s
    'main-psp': createProvider({ name: 'main-psp', delayMs: 5, jitterMs: 20,
      failureRate: 0.1, hangRate: 0.08, hangMs: 2500, seed: 9 }),
    'backup-psp': createProvider({ name: 'backup-psp', delayMs: 5, jitterMs: 20,
      failureRate: 0.05, seed: 9 }),
  };
  const options = { providers, fallbacks: { charge: 'backup-psp' }, patienceMs: 800 };
  const clients = [];
  const connect = async () => {
    const c = new Client({ database: DB });
    await c.connect();
    clients.push(c);
    return c;
  };

  // w0 claims three jobs and crashes: its connection is gone, its attempts
  // stay open until their deadline
  const crashing = new Worker({ id: 'w0', db: await connect(), ...options, batch: 3 });
  const abandoned = await crashing.claim(null, 0);
  await crashing.db.end();
  clients.splice(clients.indexOf(crashing.db), 1);
  assert.ok(abandoned.length > 0, 'the crashing worker had claimed jobs');

  const workers = [];
  for (let i = 0; i < WORKERS; i++)
    workers.push(new Worker({ id: `w${i}`, db: await connect(), ...options }));
  // w0, restarted, finds what it held before the crash
  const recovered = await workers[0].recover();
  const crashedClaims = await db.query(
    `SELECT attempt_id FROM jobguard.attempt_overview WHERE worker = 'w0' ORDER BY attempt_id`);
  assert.deepEqual(recovered.map((r) => r.attempt_id), crashedClaims.rows.map((r) => r.attempt_id),
    'the restarted worker found all of its open attempts');
  assert.ok(recovered.length >= abandoned.length);
  const sup = await connect();

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
    // any error in a worker loop — a JG002 among them — ends the test here
    for (const e of ended) if (e.status === 'rejected') throw e.reason;
  }
  for (const w of workers) assert.deepEqual(w.errors, [], `${w.id}: late reports or heartbeats failed`);

  const sum = (f) => workers.reduce((n, w) => n + f(w.stats), 0);
  const timedOut = new Set(workers.flatMap((w) => w.stats.timedOut));
  t.diagnostic(`attempts claimed ${sum((s) => s.claimed)} (failovers ${sum((s) => s.failover)}), ` +
    `won ${sum((s) => s.won)}, lost ${sum((s) => s.lost)}, failed ${sum((s) => s.failed)}, ` +
    `timed out ${timedOut.size}, cancelled by the supervisor ${cancelled.length}, ` +
    `heartbeats ${sum((s) => s.heartbeats)} (late ${sum((s) => s.heartbeatsLate)})`);
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
  const invariants = await db.query('SELECT * FROM jobguard.check_invariants()');
  assert.deepEqual(invariants.rows, [], 'check_invariants() is empty');

  // lost results only where expected: two attempts of a job can both
  // report only if one was cancelled (out of band) while its call was
  // still running; so the loser, or the winner it lost to, was cancelled
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

  // the abandoned attempts were cancelled, and their jobs done by others
  const afterCrash = await db.query(
    `SELECT a.state FROM jobguard.attempt_overview a WHERE a.attempt_id = ANY ($1)`,
    [abandoned.map((a) => a.attempt_id)]);
  assert.deepEqual(afterCrash.rows.map((r) => r.state), abandoned.map(() => 'cancelled'),
    'the supervisor cancelled every abandoned attempt');

  // the run did exercise the breakpoints
  const hung = providers['main-psp'].calls.filter((c) => c.hang).length;
  assert.ok(hung > 0 && timedOut.size >= hung, 'every hung call was timed out');
  assert.ok(cancelled.length > 0, 'the supervisor cancelled stuck attempts');
  assert.ok(lost.rows.length > 0, 'late answers were recorded as lost');
  assert.ok(sum((s) => s.heartbeats) > 0, 'long calls were kept alive with heartbeats');
  const fallbackWins = await db.query(
    `SELECT count(*)::int AS n FROM jobguard.attempt_overview WHERE provider = 'backup-psp' AND state = 'succeeded'`);
  assert.ok(fallbackWins.rows[0].n > 0, 'jobs failed over to the certified fallback');
  const workersSeen = await db.query(
    `SELECT count(DISTINCT worker)::int AS n FROM jobguard.attempt_overview`);
  assert.equal(workersSeen.rows[0].n, WORKERS, 'every worker claimed work, recorded by name');
});
