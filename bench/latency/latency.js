'use strict';
// bench/latency/latency.js: submit-to-start latency (issue 40, section 1):
// from the commit of a single submit until a worker's handler starts the
// job, at steady arrival rates, 4 workers, every contender side by side in
// one run, rounds alternating, each run checked exactly-once.
//
//   node latency.js [--rates 50,500] [--seconds 6] [--rounds 3] [--workers 4]
//                   [--only name,...] [--report FILE] [--svg FILE]
//   node latency.js --produce KIND URL RATE N TAG CONNS   (the producer, below)
//
// Run by bench/latency/run on the Node 22 in bench/node/node_modules, with
// JG_URL (a cluster with jobguard preloaded) and JG_PLAIN_URL (one without:
// claim(wait) polls there, notifications are sent in the finishing
// transaction).  Both have fsync and synchronous_commit on.
//
// The producer is its own process (latency.js --produce), so that the
// workers' event loop never delays its clock: it opens CONNS connections
// and submits job i (payload {"i": i}) at start + i / RATE, each submit one
// autocommit statement, on the first idle connection (a submit that finds
// none waits: its lag is reported); job i's commit time is the moment its
// statement returned.  Each handler notes the moment it is called.  Both
// are wall-clock milliseconds (performance.timeOrigin + performance.now(),
// Python's time.time()); latency = start - commit.  It is an upper bound of
// the time the worker needed less the submit's own return trip.
//
// Every run verifies its outcome or its figures are not published: each job
// handled exactly once (the handlers' own count), and the database
// agreeing (every job done once, none left).  A run whose jobs are not all
// done within --stall-seconds of the producer's end fails as "did not
// finish".  While a run goes, pg_stat_activity is sampled every 50 ms: the
// wait events of the run's sessions are reported per contender.
//
// Exit status: 0 when every run verified and every target passed, 3 when a
// target failed, 1 when a run failed its verification or anything else
// went wrong.

const { performance } = require('node:perf_hooks');
const { spawn } = require('node:child_process');
const path = require('node:path');
const fs = require('node:fs');
const { Client, Pool } = require('pg');

// now: wall-clock milliseconds since the epoch, sub-millisecond resolution
const now = () => performance.timeOrigin + performance.now();
// sleep: resolve after ms milliseconds
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ------------------------------------------------------------ the producer

// SUBMITS: one autocommit statement per job, per kind of queue
// (its values: the job's number, its key, its payload)
const SUBMITS = {
  jobguard: { text: `SELECT job_id FROM jobguard.submit('owner-' || ($1::int % 97), $2, 'noop', $3::jsonb, 'local')`,
    values: (i, key, params) => [i, key, params] },
  floor: { text: `WITH j AS (INSERT INTO bench_latency.jobs (params) VALUES ($1::jsonb) RETURNING id)
          SELECT pg_catalog.pg_notify('bench_latency', j.id::text) FROM j`,
  values: (i, key, params) => [params] },
  graphile: { text: `SELECT (graphile_worker.add_job('noop', $1::json, job_key => $2)).id`,
    values: (i, key, params) => [params, key] },
};

// produce: the producer's process; prints one JSON line, the commit time
// of each job and how the producer kept its schedule
async function produce([kind, url, rateS, nS, tag, connsS]) {
  const rate = Number(rateS); const n = Number(nS); const conns = Number(connsS);
  let send;
  let close;
  if (kind.startsWith('pgboss')) {
    const { PgBoss } = require('pg-boss');
    const boss = new PgBoss({ connectionString: url, max: conns, supervise: false, schedule: false,
      migrate: false, createSchema: false });
    boss.on('error', (e) => console.error('pg-boss producer:', e.message));
    await boss.start();
    const queue = kind === 'pgboss-notify' ? 'lat_notify' : 'lat_poll';
    send = (i) => boss.send(queue, { i });
    close = () => boss.stop({ graceful: false, wait: true });
  } else {
    const pool = new Pool({ connectionString: url, max: conns });
    const warm = await Promise.all(Array.from({ length: conns }, () => pool.connect()));
    warm.forEach((c) => c.release());
    const { text, values } = SUBMITS[kind];
    send = (i) => pool.query({ text, values: values(i, `${tag}-${i}`, JSON.stringify({ i })) });
    close = () => pool.end();
  }
  const commit = new Float64Array(n + 1);
  const took = [];
  let maxLag = 0;
  let inFlight = 0;
  let failed = null;
  const t0 = now() + 20;
  await new Promise((resolve) => {
    let next = 1;
    let done = 0;
    const tick = () => {
      const t = now();
      while (next <= n && t >= t0 + (next - 1) * 1000 / rate && inFlight < conns) {
        const i = next++;
        const due = t0 + (i - 1) * 1000 / rate;
        maxLag = Math.max(maxLag, t - due);
        inFlight++;
        const sent = now();
        send(i).then(() => {
          commit[i] = now();
          took.push(commit[i] - sent);
        }, (e) => { failed = failed || e.message; }).finally(() => {
          inFlight--;
          if (++done === n) resolve();
        });
      }
      if (next <= n) {
        const wait = t0 + (next - 1) * 1000 / rate - now();
        if (wait > 1.5) setTimeout(tick, Math.floor(wait - 0.5)); else setImmediate(tick);
      }
    };
    tick();
  });
  const span = Math.max(...commit.subarray(1)) - t0;
  await close();
  took.sort((a, b) => a - b);
  // commit times as offsets from t0 (µs resolution), the line written
  // whole before the process exits
  const line = JSON.stringify({ t0, commit: Array.from(commit, (t) => Math.round((t - t0) * 1000) / 1000),
    failed, maxLag, achieved: n / (span / 1000), submitP50: pct(took, 50), submitP99: pct(took, 99) }) + '\n';
  await new Promise((resolve) => process.stdout.write(line, resolve));
}

// pct: the p-th percentile of sorted xs (nearest rank)
function pct(xs, p) {
  if (xs.length === 0) return NaN;
  return xs[Math.min(xs.length - 1, Math.max(0, Math.ceil(p / 100 * xs.length) - 1))];
}

if (process.argv[2] === '--produce') {
  produce(process.argv.slice(3)).then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
  return;
}

// ------------------------------------------------------------ the run

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) =>
  (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const RATES = (args.rates || '50,500').split(',').map(Number);
const SECONDS = Number(args.seconds || 6);
const ROUNDS = Number(args.rounds || 3);
const WORKERS = Number(args.workers || 4);
const STALL_SECONDS = Number(args['stall-seconds'] || 20);
const FINISH_SECONDS = Number(args['finish-seconds'] || 15);
const PRODUCER_CONNS = 8;
const ONLY = args.only ? args.only.split(',') : null;
const URL = process.env.JG_URL;
const PLAIN_URL = process.env.JG_PLAIN_URL;
const PYTHON = process.env.PYTHON || '/usr/bin/python3';
// PKG: the installed version of an npm package
const PKG = (name) => require(`${name}/package.json`).version;
if (!URL || !PLAIN_URL) {
  console.error('latency.js: JG_URL and JG_PLAIN_URL must name the preloaded and the unpreloaded database');
  process.exit(2);
}

// VerifyError: a run whose outcome is not exactly once, or that did not
// finish; its figures are not published and the run fails.
class VerifyError extends Error {}

// connect: a new client connection to url
async function connect(url) {
  const c = new Client({ connectionString: url });
  await c.connect();
  return c;
}

// checkSession: fail unless this session has jobguard's fast path on and
// synchronous_commit on (a jobguard database) or synchronous_commit on
async function checkSession(c, jobguard) {
  const { rows } = await c.query(`SELECT ${jobguard ? 'jobguard.fast_path_status()' : "'on'"} AS fp,
      current_setting('synchronous_commit') AS sc`);
  if (rows[0].fp !== 'on') throw new Error(`fast path is "${rows[0].fp}" in a measured session`);
  if (rows[0].sc !== 'on') throw new Error(`synchronous_commit is "${rows[0].sc}" in a measured session`);
}

// Starts: the moment each job's handler started (jobs 1..n), and how
// often it ran
class Starts {
  constructor(n) { this.t = new Float64Array(n + 1); this.c = new Uint32Array(n + 1); this.n = n; }
  // hit: a handler started job i at time t
  hit(i, t = now()) {
    if (!(i >= 1 && i <= this.n)) throw new VerifyError(`a handler got a job numbered ${i}`);
    if (this.c[i]++ === 0) this.t[i] = t;
  }
  // check: every job handled exactly once, or throw saying how it was not
  check(who) {
    let never = 0; let twice = 0;
    for (let i = 1; i <= this.n; i++) { if (this.c[i] === 0) never++; else if (this.c[i] > 1) twice++; }
    if (never || twice) throw new VerifyError(`${who}: ${never} jobs never handled, ${twice} handled more than once`);
  }
}

// DidNotFinish: a run whose jobs were not all done FINISH_SECONDS after
// the producer's last submit: the contender did not keep up with the rate
// (no figure; not a failed verification)
class DidNotFinish extends Error {}

// until: poll the query every 20 ms until it returns n = 0; a run whose n
// does not fall for STALL_SECONDS is stuck (a failed verification), one
// not done within FINISH_SECONDS did not keep up
async function until(db, sql, who) {
  let last = Infinity; let since = Date.now();
  const t0 = Date.now();
  for (;;) {
    const { rows } = await db.query(sql);
    const n = Number(rows[0].n);
    if (n === 0) return;
    if (n < last) { last = n; since = Date.now(); }
    else if (Date.now() - since > STALL_SECONDS * 1000) {
      throw new VerifyError(`${who}: stuck: ${n} jobs still not done, none done for ${STALL_SECONDS} s`);
    }
    if (Date.now() - t0 > FINISH_SECONDS * 1000) {
      throw new DidNotFinish(`did not keep up: ${n} jobs not done ${FINISH_SECONDS} s after the last submit`);
    }
    await sleep(20);
  }
}

// expectCounts: the database's view of a run: each named count must equal the expected
async function expectCounts(db, who, sql, expected) {
  const { rows } = await db.query(sql);
  for (const [k, v] of Object.entries(expected)) {
    if (Number(rows[0][k]) !== v) {
      throw new VerifyError(`${who}: the database says ${k} = ${rows[0][k]}, expected ${v} (${JSON.stringify(rows[0])})`);
    }
  }
}

// ------------------------------------------------------------ jobguard

const JOBGUARD_LEFT = 'SELECT count(*) AS n FROM jobguard.jobs WHERE completed_by IS NULL';

// resetJobguard: empty jobguard's jobs and attempts before a run
async function resetJobguard(db) { await db.query('TRUNCATE jobguard.attempts, jobguard.jobs'); }

// verifyJobguard: every job completed by its one and only attempt, which succeeded
async function verifyJobguard(db, who, n) {
  await expectCounts(db, who, `SELECT (SELECT count(*) FROM jobguard.jobs) AS jobs,
      (SELECT count(*) FROM jobguard.jobs j JOIN jobguard.attempts a ON a.id = j.completed_by
        WHERE a.state = 'succeeded') AS succeeded,
      (SELECT count(*) FROM jobguard.attempts) AS attempts`,
  { jobs: n, succeeded: n, attempts: n });
}

// sqlLoop(maxJobs): the README's worker loop, one connection per worker:
// claim up to maxJobs jobs with wait => '5 seconds' (its own transaction),
// then for each run the handler and finish_attempt (its own transaction)
const sqlLoop = (maxJobs) => async (url, starts, ctx) => {
  const clients = await Promise.all(Array.from({ length: WORKERS }, () => connect(url)));
  for (const c of clients) await checkSession(c, true);
  let stop = false;
  const loops = clients.map(async (c, w) => {
    while (!stop) {
      const { rows } = await c.query({ name: 'claim', values: [`sql-${w}`, maxJobs],
        text: `SELECT attempt_id, params FROM jobguard.claim($1, max_jobs => $2, timeout => '30 seconds', wait => '5 seconds')` });
      for (const r of rows) {
        starts.hit(r.params.i);
        const { rows: o } = await c.query({ name: 'finish', values: [r.attempt_id],
          text: `SELECT jobguard.finish_attempt($1, '{}') AS o` });
        if (o[0].o !== 'won') throw new VerifyError(`the SQL loop: finish said ${o[0].o}`);
      }
    }
  });
  // a loop's error is kept for the teardown (never an unhandled rejection)
  const ended = loops.map((l) => l.then(() => null, (e) => e));
  ctx.pids = clients.map((c) => c.processID);
  ctx.teardown = async (db) => {
    stop = true;
    // the loops wait in claim(wait): cancel those waits (nothing is left to
    // claim, and a cancelled claim begins nothing)
    await db.query('SELECT pg_cancel_backend(p) FROM unnest($1::int[]) p', [ctx.pids]);
    const errors = await Promise.all(ended);
    await Promise.all(clients.map((c) => c.end()));
    for (const e of errors) if (e && e.code !== '57014') throw e;
  };
};

// nodeWorkers(batch): the Node client's Worker with its defaults (wait
// 2 s) and the given batch (its default is 1), each on a pool of 2 (its
// loop and its heartbeats)
const nodeWorkers = (batch) => async (url, starts, ctx) => {
  const { Worker } = require('../../clients/node');
  const pools = []; const workers = [];
  for (let w = 0; w < WORKERS; w++) {
    const pool = new Pool({ connectionString: url, max: 2, idleTimeoutMillis: 0 });
    const cs = await Promise.all([pool.connect(), pool.connect()]);
    for (const c of cs) await checkSession(c, true);
    for (const c of cs) c.release();
    pools.push(pool);
    workers.push(new Worker(async (job) => { starts.hit(job.params.i); return {}; },
      { pool, name: `lat-node-${w}`, batch, logger: { info() {}, warn: console.error, error: console.error } }));
  }
  const running = workers.map((w) => w.run({ handleSignals: false }));
  ctx.teardown = async () => {
    for (const w of workers) w.stop();
    const stats = await Promise.all(running);
    await Promise.all(pools.map((p) => p.end()));
    const bad = stats.reduce((s, x) => s + x.lost + x.rejected + x.failed + x.reportErrors + x.released, 0);
    if (bad) throw new VerifyError(`the Node Worker: ${JSON.stringify(stats)}`);
  };
};

// pythonWorkers(batch): the Python client's Worker, one process each
// (py_worker.py), its defaults but the batch
const pythonWorkers = (batch) => async (url, starts, ctx) => {
  const u = new globalThis.URL(url);
  const env = { ...process.env, PGHOST: u.hostname, PGPORT: u.port, PGUSER: u.username,
    PGDATABASE: u.pathname.slice(1) };
  const procs = [];
  for (let w = 0; w < WORKERS; w++) {
    const p = spawn(PYTHON, [path.join(__dirname, 'py_worker.py'), `lat-py-${w}`, String(batch)],
      { stdio: ['ignore', 'pipe', 'inherit'], env });
    p.out = '';
    p.stdout.on('data', (b) => { p.out += b; });
    p.done = new Promise((resolve) => p.on('exit', (code) => resolve(code)));
    procs.push(p);
  }
  // ready: each has checked its session and is about to claim
  const t0 = Date.now();
  while (!procs.every((p) => p.out.startsWith('ready'))) {
    if (procs.some((p) => p.exitCode !== null)) throw new VerifyError('a Python worker exited before it was ready');
    if (Date.now() - t0 > 20000) throw new Error('the Python workers did not start within 20 s');
    await sleep(20);
  }
  ctx.teardown = async () => {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGTERM');
    const codes = await Promise.all(procs.map((p) => p.done));
    for (let w = 0; w < WORKERS; w++) {
      if (codes[w] !== 0) throw new VerifyError(`Python worker ${w} exited with ${codes[w]}`);
      const { started, stats } = JSON.parse(procs[w].out.trim().split('\n').pop());
      for (const [i, t] of started) starts.hit(i, t);
      const bad = stats.lost + stats.rejected + stats.failed + stats.report_errors + stats.released;
      if (bad) throw new VerifyError(`Python worker ${w}: ${JSON.stringify(stats)}`);
    }
  };
};

// ------------------------------------------------------------ the floor

// setupFloor: the floor's one table and its index of pending jobs
async function setupFloor(db) {
  await db.query(`CREATE SCHEMA IF NOT EXISTS bench_latency;
    CREATE TABLE IF NOT EXISTS bench_latency.jobs (id bigserial PRIMARY KEY, params jsonb NOT NULL,
      state text NOT NULL DEFAULT 'pending', worker text, result jsonb,
      created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz, finished_at timestamptz);
    CREATE INDEX IF NOT EXISTS jobs_pending ON bench_latency.jobs (id) WHERE state = 'pending'`);
}

// floorWorkers: one connection per worker, LISTEN bench_latency; claim one
// job with SKIP LOCKED until none is left, then wait for a notification
// (or 1 s); finish with one UPDATE
async function floorWorkers(url, starts, ctx) {
  const clients = await Promise.all(Array.from({ length: WORKERS }, () => connect(url)));
  let stop = false;
  const loops = clients.map(async (c, w) => {
    await checkSession(c, false);
    let notified = false; let wake = null;
    c.on('notification', () => { notified = true; if (wake) wake(); });
    await c.query('LISTEN bench_latency');
    ctx.ready++;
    while (!stop) {
      notified = false;
      const { rows } = await c.query({ name: 'claim', values: [`floor-${w}`],
        text: `UPDATE bench_latency.jobs SET state = 'running', worker = $1, started_at = now()
                WHERE id = (SELECT id FROM bench_latency.jobs WHERE state = 'pending' ORDER BY id LIMIT 1
                            FOR UPDATE SKIP LOCKED)
                RETURNING id, params` });
      if (rows.length === 0) {
        if (!notified) await new Promise((r) => { wake = r; setTimeout(r, 1000); });
        wake = null;
        continue;
      }
      starts.hit(rows[0].params.i);
      const u = await c.query({ name: 'done', values: [rows[0].id],
        text: `UPDATE bench_latency.jobs SET state = 'done', result = '{}', finished_at = now() WHERE id = $1 AND state = 'running'` });
      if (u.rowCount !== 1) throw new VerifyError(`the floor: job ${rows[0].id} was not running`);
    }
  });
  const ended = loops.map((l) => l.then(() => null, (e) => e));
  ctx.ready = 0;
  while (ctx.ready < WORKERS) {
    const e = (await Promise.race([...ended, sleep(5).then(() => null)]));
    if (e) throw e;
  }
  ctx.teardown = async () => {
    stop = true;
    for (const e of await Promise.all(ended)) if (e) throw e;
    await Promise.all(clients.map((c) => c.end()));
  };
}

// ------------------------------------------------------------ pg-boss

// bossWorkers: pg-boss 12 work() with its lowest polling (0.5 s, the
// minimum its docs and attorney.js allow), localConcurrency = the workers,
// batchSize 10 with burstWhenBatchFull (a fetch that came back full
// fetches again at once; pg-boss ignores it at batchSize 1, where 4
// workers polling every 0.5 s take 8 jobs a second); with notify, its opt-in LISTEN/NOTIFY (useListenNotify
// and a queue created with notify: true)
function bossWorkers(notify) {
  return async (url, starts, ctx) => {
    const { PgBoss } = require('pg-boss');
    const boss = new PgBoss({ connectionString: url, max: WORKERS + 2, supervise: false, schedule: false,
      migrate: false, createSchema: false, useListenNotify: notify });
    let err = null;
    boss.on('error', (e) => { err = e; });
    await boss.start();
    await boss.work(notify ? 'lat_notify' : 'lat_poll',
      { pollingIntervalSeconds: 0.5, ...(notify ? { notifyPollingIntervalSeconds: 0.5 } : {}),
        batchSize: BOSS_BATCH, localConcurrency: WORKERS, burstWhenBatchFull: true },
      async (jobs) => { for (const j of jobs) starts.hit(j.data.i); });
    ctx.teardown = async () => {
      await boss.stop({ graceful: true, wait: true });
      if (err) throw new VerifyError(`pg-boss reported an error: ${err.message}`);
    };
  };
}

const BOSS_BATCH = 10;
const BOSS_LEFT = (q) => `SELECT count(*) AS n FROM pgboss.job WHERE name = '${q}' AND state <> 'completed'`;

// ------------------------------------------------------------ graphile-worker

// graphileWorkers: graphile-worker's runner with concurrency = the workers
async function graphileWorkers(url, starts, ctx) {
  const graphile = require('graphile-worker');
  let failed = 0;
  const runner = await graphile.run({
    connectionString: url, concurrency: WORKERS, noHandleSignals: true,
    logger: new graphile.Logger(() => () => {}),
    taskList: { noop: async (payload) => { starts.hit(payload.i); } },
  });
  runner.events.on('job:failed', () => { failed++; });
  ctx.teardown = async () => {
    await runner.stop();
    if (failed) throw new VerifyError(`graphile-worker: ${failed} jobs failed`);
  };
}

// ------------------------------------------------------------ the contenders

const JG_RESET = { reset: resetJobguard, left: JOBGUARD_LEFT, verify: verifyJobguard, submit: 'jobguard' };
const CONTENDERS = [
  { name: 'jg-node', label: "jobguard, the Node client's `Worker`", preload: true, workers: nodeWorkers(1), ...JG_RESET,
    settings: '`new Worker(handler, { pool })` (its defaults: batch 1, waitSeconds 2, its claim waits), a pool of 2 each' },
  { name: 'jg-node-10', label: "jobguard, the Node client's `Worker`, batch 10", preload: true, workers: nodeWorkers(10), ...JG_RESET,
    settings: '`new Worker(handler, { pool, batch: 10 })`: a claim takes up to 10 (what is there), finished with `finish_many`' },
  { name: 'jg-python', label: "jobguard, the Python client's `Worker`", preload: true, workers: pythonWorkers(1), ...JG_RESET,
    settings: '`Worker(handler)` (its defaults: batch 1, wait 2 s), one process each; psycopg 3' },
  { name: 'jg-python-10', label: "jobguard, the Python client's `Worker`, batch 10", preload: true, workers: pythonWorkers(10), ...JG_RESET,
    settings: '`Worker(handler, batch=10)`, one process each' },
  { name: 'jg-sql', label: "jobguard, the README's SQL loop", preload: true, workers: sqlLoop(10), ...JG_RESET,
    settings: "`claim(worker, max_jobs => 10, timeout => '30 seconds', wait => '5 seconds')`, then `finish_attempt` per job, each its own transaction" },
  { name: 'jg-sql-1', label: "jobguard, the README's SQL loop, one job a claim", preload: true, workers: sqlLoop(1), ...JG_RESET,
    settings: 'as above with `max_jobs => 1`: two commits per job in every worker' },
  { name: 'jg-node-plain', label: "jobguard not preloaded, the Node client's `Worker`", preload: false, workers: nodeWorkers(1), ...JG_RESET,
    settings: 'as above; without preload claim(wait) polls (1 ms doubling to 50 ms)' },
  { name: 'jg-python-plain', label: "jobguard not preloaded, the Python client's `Worker`", preload: false, workers: pythonWorkers(1), ...JG_RESET,
    settings: 'as above' },
  { name: 'jg-sql-plain', label: "jobguard not preloaded, the README's SQL loop", preload: false, workers: sqlLoop(10), ...JG_RESET,
    settings: 'as above' },
  { name: 'floor', label: 'the floor: plain `LISTEN`/`NOTIFY` + `SKIP LOCKED` on one table', preload: true, workers: floorWorkers,
    submit: 'floor', reset: (db) => db.query('TRUNCATE bench_latency.jobs'),
    left: `SELECT count(*) AS n FROM bench_latency.jobs WHERE state <> 'done'`,
    verify: (db, who, n) => expectCounts(db, who, `SELECT count(*) AS jobs, count(*) FILTER (WHERE state = 'done') AS done
        FROM bench_latency.jobs`, { jobs: n, done: n }),
    settings: 'submit: `INSERT … RETURNING` and `pg_notify` in one statement; each worker `LISTEN`s, claims one with `FOR UPDATE SKIP LOCKED` until none is left, then waits for a notification (1 s at most), finishes with one `UPDATE`' },
  { name: 'pgboss-poll', label: () => `pg-boss ${PKG('pg-boss')} \`work()\`, polling`, preload: true, workers: bossWorkers(false),
    submit: 'pgboss-poll', reset: (db) => db.query(`DELETE FROM pgboss.job WHERE name = 'lat_poll'`), left: BOSS_LEFT('lat_poll'),
    verify: (db, who, n) => expectCounts(db, who, `SELECT count(*) AS jobs, count(*) FILTER (WHERE state = 'completed') AS done
        FROM pgboss.job WHERE name = 'lat_poll'`, { jobs: n, done: n }),
    settings: '`work(queue, { pollingIntervalSeconds: 0.5, batchSize: 10, localConcurrency: 4, burstWhenBatchFull: true })` (a batch\'s jobs start when its handler is called), jobs by `send()`' },
  { name: 'pgboss-notify', label: () => `pg-boss ${PKG('pg-boss')} \`work()\`, its opt-in LISTEN/NOTIFY`, preload: true,
    workers: bossWorkers(true),
    submit: 'pgboss-notify', reset: (db) => db.query(`DELETE FROM pgboss.job WHERE name = 'lat_notify'`), left: BOSS_LEFT('lat_notify'),
    verify: (db, who, n) => expectCounts(db, who, `SELECT count(*) AS jobs, count(*) FILTER (WHERE state = 'completed') AS done
        FROM pgboss.job WHERE name = 'lat_notify'`, { jobs: n, done: n }),
    settings: 'as above, with `new PgBoss({ useListenNotify: true })` and the queue created with `notify: true`' },
  { name: 'graphile', label: () => `graphile-worker ${PKG('graphile-worker')} \`run()\``, preload: true, workers: graphileWorkers,
    submit: 'graphile', reset: (db) => db.query('TRUNCATE graphile_worker._private_jobs'),
    left: 'SELECT count(*) AS n FROM graphile_worker._private_jobs',
    verify: (db, who) => expectCounts(db, who, 'SELECT count(*) AS left FROM graphile_worker._private_jobs', { left: 0 }),
    settings: '`run({ concurrency: 4, taskList })` (LISTEN/NOTIFY wakes it), jobs by `graphile_worker.add_job`' },
];
// labelOf: a contender's label (some name their package's version)
const labelOf = (c) => (typeof c.label === 'function' ? c.label() : c.label);
const JG_PRELOADED = ['jg-node', 'jg-node-10', 'jg-python', 'jg-python-10', 'jg-sql', 'jg-sql-1'];
const PEERS = ['pgboss-poll', 'pgboss-notify', 'graphile'];

// runProducer: the producer process for one run; resolves to its report
function runProducer(kind, url, rate, n, tag) {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [__filename, '--produce', kind, url, String(rate), String(n), tag,
      String(PRODUCER_CONNS)], { stdio: ['ignore', 'pipe', 'inherit'], env: process.env });
    let out = '';
    p.stdout.on('data', (b) => { out += b; });
    p.on('exit', (code) => {
      if (code !== 0) reject(new Error(`the producer exited with ${code}`));
      else {
        const r = JSON.parse(out.trim().split('\n').pop());
        r.commit = r.commit.map((t) => r.t0 + t);
        resolve(r);
      }
    });
  });
}

// sampleWaits: every 50 ms until stopped, count the wait events of the
// client backends of db and of jobguard's workers (their backend_type)
function sampleWaits(db, dbname) {
  const counts = {};
  let stop = false;
  const done = (async () => {
    while (!stop) {
      const { rows } = await db.query(`SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS w,
          CASE WHEN backend_type = 'client backend' THEN '' ELSE backend_type || ' ' END AS who, count(*) AS n
          FROM pg_stat_activity
         WHERE pid <> pg_backend_pid()
           AND ((backend_type = 'client backend' AND datname = $1 AND state = 'active')
                OR (backend_type IN ('jobguard notifier', 'walwriter')
                    AND wait_event IS DISTINCT FROM 'WalWriterMain'
                    AND (wait_event_type IS DISTINCT FROM 'Extension' OR backend_type <> 'jobguard notifier')))
         GROUP BY 1, 2`, [dbname]);
      for (const r of rows) { const k = r.who + r.w; counts[k] = (counts[k] || 0) + Number(r.n); }
      await sleep(50);
    }
  })();
  return async () => { stop = true; await done; return counts; };
}

// runOnce: one run of contender c at rate: workers started and ready, the
// producer's N submits, then every job done; returns the latencies
async function runOnce(dbs, c, rate, round) {
  const url = c.preload ? URL : PLAIN_URL;
  const db = c.preload ? dbs.pre : dbs.plain;
  const n = Math.round(rate * SECONDS);
  await c.reset(db);
  await db.query('VACUUM ANALYZE');
  const starts = new Starts(n);
  const ctx = { teardown: async () => {} };
  let prod;
  let waits;
  try {
    await c.workers(url, starts, ctx);
    await sleep(300);          // their first claims (or polls) are in place
    const stopSampling = sampleWaits(db, new globalThis.URL(url).pathname.slice(1));
    try {
      prod = await runProducer(c.submit, url, rate, n, `r${round}-${rate}`);
      if (prod.failed) throw new VerifyError(`${c.name}: a submit failed: ${prod.failed}`);
      await until(db, c.left, c.name);
    } finally {
      waits = await stopSampling();
    }
  } finally {
    await ctx.teardown(db);
  }
  starts.check(c.name);
  await c.verify(db, c.name, n);
  const lat = [];
  for (let i = 1; i <= n; i++) lat.push(starts.t[i] - prod.commit[i]);
  lat.sort((a, b) => a - b);
  return { lat, prod, waits };
}

// ------------------------------------------------------------ the report

// summary: p50, p95, p99, max of sorted latencies
const summary = (s) => ({ p50: pct(s, 50), p95: pct(s, 95), p99: pct(s, 99), max: s[s.length - 1] });
// median of xs
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
// ms: a latency in ms as the tables show it (— when there is none)
const ms = (x) => (x === null || Number.isNaN(x) ? '—' : x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : Math.round(x).toString());

// svg: a histogram per rate (log-spaced bins of latency, the share of each
// contender's jobs in each bin), one line per contender
function svg(res, chosen, title) {
  const W = 900; const PH = 300; const ML = 60; const MR = 250; const MT = 50; const MB = 45;
  const H = MT + RATES.length * (PH + MB) + 10;
  const lo = -1; const hi = 4;                         // 0.1 ms .. 10 s
  const BINS = 50;
  // jobguard's in blue, green and teal (dashed: not preloaded), the floor
  // black, the peers warm
  const style = {
    'jg-node': ['#1f77b4', ''], 'jg-python': ['#2ca02c', ''], 'jg-sql': ['#17becf', ''], 'jg-sql-1': ['#8c564b', ''], 'jg-node-10': ['#7f7f7f', ''], 'jg-python-10': ['#bcbd22', ''],
    'jg-node-plain': ['#1f77b4', '5,3'], 'jg-python-plain': ['#2ca02c', '5,3'], 'jg-sql-plain': ['#17becf', '5,3'],
    floor: ['#000000', ''], 'pgboss-poll': ['#d62728', ''], 'pgboss-notify': ['#ff7f0e', ''], graphile: ['#9467bd', ''],
  };
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="20" text-anchor="middle" font-size="13">${title.replace(/&/g, '&amp;').replace(/</g, '&lt;')}</text>`];
  RATES.forEach((rate, k) => {
    const top = MT + k * (PH + MB);
    const pw = W - ML - MR;
    const hists = chosen.map((c) => {
      const xs = res[c.name][rate].lat;
      const h = new Array(BINS).fill(0);
      for (const x of xs) {
        const b = Math.floor((Math.log10(Math.max(x, 10 ** lo)) - lo) / (hi - lo) * BINS);
        h[Math.min(BINS - 1, Math.max(0, b))]++;
      }
      return xs.length ? h.map((v) => 100 * v / xs.length) : null;
    });
    const ymax = Math.max(5, ...hists.filter(Boolean).flat());
    const X = (v) => ML + (v - lo) / (hi - lo) * pw;
    const Y = (v) => top + PH - v / ymax * PH;
    out.push(`<text x="${ML}" y="${top - 8}" font-size="12">${rate} submits/s, ${WORKERS} workers: share of jobs (%) by submit-to-start latency (log scale; a run that did not finish has no line)</text>`);
    out.push(`<rect x="${ML}" y="${top}" width="${pw}" height="${PH}" fill="none" stroke="#888"/>`);
    for (let d = lo; d <= hi; d++) {
      out.push(`<line x1="${X(d)}" y1="${top}" x2="${X(d)}" y2="${top + PH}" stroke="#ddd"/>`);
      const tick = 10 ** d >= 1 ? `${10 ** d} ms` : `${(10 ** d).toFixed(1)} ms or less`;
      out.push(`<text x="${X(d)}" y="${top + PH + 15}" text-anchor="${d === lo ? 'start' : 'middle'}">${tick}</text>`);
    }
    for (let t = 0; t <= 4; t++) {
      const v = ymax * t / 4;
      out.push(`<text x="${ML - 6}" y="${Y(v) + 4}" text-anchor="end">${v.toFixed(0)}</text>`);
    }
    chosen.forEach((c, j) => {
      const h = hists[j];
      if (!h) return;
      const pts = h.map((v, b) => `${X(lo + (b + 0.5) * (hi - lo) / BINS).toFixed(1)},${Y(v).toFixed(1)}`).join(' ');
      const [colour, dash] = style[c.name] || ['#7f7f7f', ''];
      const d = dash ? ` stroke-dasharray="${dash}"` : '';
      out.push(`<polyline fill="none" stroke="${colour}"${d} stroke-width="1.6" points="${pts}"/>`);
      out.push(`<line x1="${W - MR + 15}" y1="${top + 12 + 16 * j}" x2="${W - MR + 35}" y2="${top + 12 + 16 * j}" stroke="${colour}"${d} stroke-width="2"/>`);
      out.push(`<text x="${W - MR + 40}" y="${top + 16 + 16 * j}">${c.name}</text>`);
    });
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

// main: check both clusters, install the peers' schemas, run every round
// and write the report
(async () => {
  const dbs = { pre: await connect(URL), plain: await connect(PLAIN_URL) };
  await checkSession(dbs.pre, true);
  await checkSession(dbs.plain, true);
  await setupFloor(dbs.pre);
  const { rows: [pl] } = await dbs.pre.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE backend_type = 'jobguard notifier'`);
  const { rows: [pp] } = await dbs.plain.query(`SELECT current_setting('shared_preload_libraries') AS l`);
  if (Number(pl.n) === 0) throw new Error('JG_URL: no jobguard notifier runs there (is jobguard preloaded?)');
  if (/jobguard/.test(pp.l)) throw new Error('JG_PLAIN_URL: jobguard is preloaded there');
  // the peers' schemas and queues, installed once, outside every clock
  const { PgBoss } = require('pg-boss');
  const boss = new PgBoss({ connectionString: URL, max: 2, supervise: false, schedule: false });
  boss.on('error', (e) => console.error('pg-boss:', e.message));
  await boss.start();
  if (!(await boss.getQueue('lat_poll'))) await boss.createQueue('lat_poll');
  if (!(await boss.getQueue('lat_notify'))) await boss.createQueue('lat_notify', { notify: true });
  await boss.stop({ graceful: false, wait: true });
  const graphile = require('graphile-worker');
  await (await graphile.run({ connectionString: URL, concurrency: 1, noHandleSignals: true,
    logger: new graphile.Logger(() => () => {}), taskList: {} })).stop();

  const chosen = CONTENDERS.filter((c) => !ONLY || ONLY.includes(c.name));
  const res = {};
  for (const c of chosen) {
    res[c.name] = {};
    for (const rate of RATES) res[c.name][rate] = { lat: [], rounds: [], prod: [], waits: {}, failed: null };
  }
  const failures = [];
  for (let r = 0; r < ROUNDS; r++) {
    for (const rate of RATES) {
      const order = chosen.slice(r % chosen.length).concat(chosen.slice(0, r % chosen.length));
      for (const c of order) {
        const x = res[c.name][rate];
        if (x.failed) continue;
        try {
          const o = await runOnce(dbs, c, rate, r);
          x.lat.push(...o.lat);
          x.rounds.push(summary(o.lat));
          x.prod.push(o.prod);
          for (const [k, v] of Object.entries(o.waits)) x.waits[k] = (x.waits[k] || 0) + v;
          const s = summary(o.lat);
          console.error(`  round ${r + 1}  ${String(rate).padStart(4)}/s  ${c.name.padEnd(16)} p50 ${ms(s.p50).padStart(6)}  p99 ${ms(s.p99).padStart(6)}  max ${ms(s.max).padStart(6)} ms  (producer ${Math.round(o.prod.achieved)}/s, lag ≤ ${ms(o.prod.maxLag)} ms, submit p99 ${ms(o.prod.submitP99)} ms)`);
        } catch (e) {
          if (e instanceof DidNotFinish) {
            x.failed = e.message;
            console.error(`  round ${r + 1}  ${rate}/s  ${c.name}: ${e.message}`);
            continue;
          }
          if (!(e instanceof VerifyError)) throw e;
          x.failed = e.message;
          failures.push(`${rate}/s ${e.message}`);
          console.error(`  round ${r + 1}  ${rate}/s  ${c.name}: VERIFICATION FAILED: ${e.message}`);
        }
      }
    }
  }
  for (const c of chosen) for (const rate of RATES) res[c.name][rate].lat.sort((a, b) => a - b);

  const ok = (n, rate) => res[n] && !res[n][rate].failed && res[n][rate].rounds.length === ROUNDS;
  const lines = [];
  lines.push(`${WORKERS} workers, single submits at a steady rate for ${SECONDS} s a run (a producer process, ${PRODUCER_CONNS} connections), ${ROUNDS} rounds, contenders alternated (order rotated per round); fsync and \`synchronous_commit\` on; jobguard's fast path on (checked). Latency: from a submit's commit (its statement returned) until a handler started the job; percentiles of all rounds' jobs pooled, in ms. Every run verified: each job handled exactly once by the handlers' own count, and the database agreeing. Node ${process.versions.node}.`);
  lines.push('');
  lines.push('| contender | rate /s | p50 ms | p95 ms | p99 ms | max ms | p99 ÷ floor\'s | producer /s | settings |');
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|---|');
  const p99ratio = (n, rate) => (ok(n, rate) && ok('floor', rate)
    ? median(res[n][rate].rounds.map((s, i) => s.p99 / res.floor[rate].rounds[i].p99)) : null);
  for (const rate of RATES) {
    for (const c of chosen) {
      const x = res[c.name][rate];
      if (x.failed) {
        lines.push(`| ${labelOf(c)} | ${rate} | ${x.failed.replace(/\|/g, '/')} | — | — | — | — | — | ${c.settings} |`);
        continue;
      }
      const s = summary(x.lat);
      const r = p99ratio(c.name, rate);
      lines.push(`| ${labelOf(c)} | ${rate} | ${ms(s.p50)} | ${ms(s.p95)} | ${ms(s.p99)} | ${ms(s.max)} | ${r === null ? '—' : r.toFixed(2)} | ${Math.round(median(x.prod.map((p) => p.achieved)))} | ${c.settings} |`);
    }
  }
  lines.push('');
  // the wait events sampled during the runs, per contender and rate
  lines.push('Wait events of the runs\' sessions, sampled every 50 ms: the active client backends of the database (`Extension:Extension` there is a `claim(wait)` asleep until work comes; `CPU`: active, not waiting), and jobguard\'s notifier and the WAL writer when not idle; the most frequent first, share of samples:');
  lines.push('');
  lines.push('| contender | rate /s | wait events |');
  lines.push('|---|---:|---|');
  for (const rate of RATES) {
    for (const c of chosen) {
      const w = res[c.name][rate].waits;
      const total = Object.values(w).reduce((a, b) => a + b, 0);
      const top = Object.entries(w).sort((a, b) => b[1] - a[1]).slice(0, 5)
        .map(([k, v]) => `${k} ${(100 * v / total).toFixed(0)} %`).join(', ');
      lines.push(`| ${c.name} | ${rate} | ${top || '—'} |`);
    }
  }
  lines.push('');
  // the targets
  // a target whose jobguard figure is missing (it did not keep up) FAILs;
  // one whose baseline is missing (the floor did not keep up) is not judged
  let npass = 0; let nfail = 0; let nna = 0;
  const tl = [];
  const judge = (what, v, need, cmp, baseline = true) => {
    let verdict;
    if (!baseline) { verdict = 'not judged (the baseline has no figure)'; nna++; } else if (v === null) { verdict = 'FAIL (no figure)'; nfail++; } else if (cmp === '≤' ? v <= need : v < need) { verdict = 'PASS'; npass++; } else { verdict = 'FAIL'; nfail++; }
    tl.push(`| ${what} | ${cmp} ${typeof need === 'number' ? ms(need) : need} | ${v === null ? '—' : ms(v)} | ${verdict} |`);
  };
  for (const rate of RATES) {
    const peerP50 = PEERS.filter((p) => ok(p, rate)).map((p) => ({ p, v: summary(res[p][rate].lat).p50 }));
    for (const n of JG_PRELOADED.filter((x) => res[x])) {
      const s = ok(n, rate) ? summary(res[n][rate].lat) : null;
      judge(`${n}, ${rate}/s: p99, ms`, s && s.p99, 10, '≤');
      if (res.floor) {
        judge(`${n}, ${rate}/s: p99 ÷ the floor's p99 (median of rounds)`, s && p99ratio(n, rate), 1.5, '≤', ok('floor', rate));
      }
      for (const { p, v } of peerP50) judge(`${n}, ${rate}/s: p99 below ${p}'s p50 (${ms(v)} ms)`, s && s.p99, v, '<');
      // a peer that did not keep up: its p50 grows with the run, any
      // jobguard figure is below it
      for (const p of PEERS.filter((q) => res[q] && /^did not keep up/.test(res[q][rate].failed || ''))) {
        const what = `${n}, ${rate}/s: p99 below ${p}'s p50 (it did not keep up)`;
        if (s) { npass++; tl.push(`| ${what} | < its p50 | ${ms(s.p99)} | PASS |`); } else { nfail++; tl.push(`| ${what} | < its p50 | — | FAIL (no figure) |`); }
      }
    }
  }
  lines.push('| target | required | figure | result |');
  lines.push('|---|---:|---:|---|');
  lines.push(...tl);
  lines.push('');
  lines.push(`${npass} passed, ${nfail} failed, ${nna} not judged; ${failures.length} runs failed their verification.`);
  if (failures.length) { lines.push(''); for (const f of failures) lines.push(`- verification failed: ${f}`); }
  const report = lines.join('\n') + '\n';
  process.stdout.write(report);
  if (args.report) fs.writeFileSync(args.report, report);
  if (args.svg) fs.writeFileSync(args.svg, svg(res, chosen, `jobguard: submit-to-start latency, ${ROUNDS} round${ROUNDS > 1 ? "s" : ""} pooled`));
  console.log(`\nLATENCY-TARGETS ${npass} ${nfail} ${failures.length}`);
  await dbs.pre.end();
  await dbs.plain.end();
  process.exit(failures.length ? 1 : nfail ? 3 : 0);
})().catch((err) => { console.error(err); process.exit(1); });
