'use strict';
// bench/node/drain.js: the worker-side benchmarks of jobguard 1.1, against
// the database the PG* environment names (jobguard installed there).
//
//   drain   N jobs submitted, then drained by 8 workers with a no-op
//           provider; jobs per second from the first claim to the last
//           completion:
//             jobguard  8 connections, each: claim(max_jobs => 10), then
//                       finish_attempt of the batch (two round trips per 10)
//             graphile  graphile-worker's own runner, concurrency 8, a
//                       no-op task
//             pgboss    pg-boss's own work(), 8 workers, batchSize 10,
//                       the shortest polling interval it allows (0.5 s)
//   batch   1,000-request batch submits, rows per second, one connection:
//             jobguard  jobguard.submit_many
//             graphile  graphile_worker.add_jobs with job keys
//             floor     INSERT ... SELECT FROM unnest(...) ON CONFLICT DO
//                       NOTHING into a table like jobguard.jobs
//
// The contenders of a measure run back to back, in a different order each
// round; each ratio is the median over the rounds of the ratio within a
// round, since the machine may be busy with other work.  Prints a markdown
// table.
//
//   node drain.js [--jobs 10000] [--rounds 3] [--batch-seconds 3]
//                 [--only jobguard,graphile,pgboss,floor] [--chart-data FILE]
//
// --chart-data writes the medians as a table for gnuplot (bench/run draws
// bench/results/worker.png from it).

const { Client } = require('pg');
const { run: graphileRun } = require('graphile-worker');
const PgBoss = require('pg-boss');

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) =>
  (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const JOBS = Number(args.jobs || 10000);
const ROUNDS = Number(args.rounds || 3);
const BATCH_SECONDS = Number(args['batch-seconds'] || 3);
const ONLY = (args.only || 'jobguard,graphile,pgboss,floor').split(',');
const CHART_DATA = args['chart-data'];
const WORKERS = 8;
const CONN = process.env.DATABASE_URL ||
  `postgres://${process.env.PGUSER || 'postgres'}@${process.env.PGHOST ? encodeURIComponent(process.env.PGHOST) : 'localhost'}:${process.env.PGPORT || 5432}/${process.env.PGDATABASE || 'postgres'}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

async function connect() {
  const c = new Client({ connectionString: CONN });
  await c.connect();
  return c;
}

// wait until count() says 0, polling every 20 ms; returns when it did.  The
// counts read a small index or table: the polling must not load the server.
async function until(db, sql) {
  for (;;) {
    const { rows } = await db.query(sql);
    if (Number(rows[0].n) === 0) return;
    await sleep(20);
  }
}

// ------------------------------------------------------------ drain

async function setup(db) {
  await db.query(`CREATE TABLE IF NOT EXISTS public.bench_floor_batch
    (LIKE jobguard.jobs INCLUDING ALL)`);
}

const submitters = {
  async jobguard(db, round) {
    await db.query('TRUNCATE jobguard.attempts, jobguard.jobs');
    for (let b = 0; b < JOBS; b += 1000) {
      await db.query(`SELECT count(*) FROM jobguard.submit_many(
          ARRAY(SELECT 'owner-' || (i % 97) FROM generate_series($1::int, $2::int) i),
          ARRAY(SELECT $3 || '-' || i FROM generate_series($1::int, $2::int) i),
          array_fill('noop'::text, ARRAY[$2::int - $1::int + 1]),
          ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series($1::int, $2::int) i),
          array_fill('local'::text, ARRAY[$2::int - $1::int + 1]))`,
      [b + 1, Math.min(b + 1000, JOBS), `r${round}`]);
    }
  },
  async graphile(db, round) {
    await db.query('TRUNCATE graphile_worker._private_jobs');
    for (let b = 0; b < JOBS; b += 1000) {
      await db.query(`SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
          SELECT ROW('noop', json_build_object('i', i), NULL, NULL, NULL, $3 || '-' || i,
                     NULL, NULL)::graphile_worker.job_spec
            FROM generate_series($1::int, $2::int) i))`,
      [b + 1, Math.min(b + 1000, JOBS), `r${round}`]);
    }
  },
  async pgboss(db, round, boss) {
    await db.query('DELETE FROM pgboss.job');
    for (let b = 0; b < JOBS; b += 1000) {
      const jobs = [];
      for (let i = b + 1; i <= Math.min(b + 1000, JOBS); i++)
        jobs.push({ name: 'noop', data: { i }, singletonKey: `r${round}-${i}` });
      await boss.insert(jobs);
    }
  },
};

const drainers = {
  // 8 connections, each claiming 10 at a time and finishing them
  async jobguard(db) {
    const clients = await Promise.all(Array.from({ length: WORKERS }, connect));
    const t0 = Date.now();
    await Promise.all(clients.map(async (c, w) => {
      for (;;) {
        const { rows } = await c.query({ name: 'claim', values: [`w${w}`],
          text: 'SELECT attempt_id FROM jobguard.claim($1, max_jobs => 10)' });
        if (rows.length === 0) break;
        await c.query({ name: 'finish', values: [rows.map((r) => r.attempt_id)],
          text: `SELECT count(jobguard.finish_attempt(a, '{}')) FROM unnest($1::bigint[]) a` });
      }
    }));
    // (every job is pending or running until it succeeds: no failures here)
    await until(db, 'SELECT count(*) AS n FROM jobguard.jobs WHERE completed_by IS NULL');
    const ms = Date.now() - t0;
    await Promise.all(clients.map((c) => c.end()));
    return ms;
  },
  async graphile(db) {
    const t0 = Date.now();
    const runner = await graphileRun({
      connectionString: CONN, concurrency: WORKERS, noHandleSignals: true, pollInterval: 1000,
      logger: new (require('graphile-worker').Logger)(() => () => {}),
      taskList: { noop: async () => {} },
    });
    await until(db, 'SELECT count(*) AS n FROM graphile_worker._private_jobs');
    const ms = Date.now() - t0;
    await runner.stop();
    return ms;
  },
  async pgboss(db, boss) {
    const t0 = Date.now();
    const ids = [];
    for (let w = 0; w < WORKERS; w++)
      ids.push(await boss.work('noop', { batchSize: 10, pollingIntervalSeconds: 0.5 }, async () => {}));
    await until(db, `SELECT count(*) AS n FROM pgboss.job WHERE name = 'noop' AND state <> 'completed'`);
    const ms = Date.now() - t0;
    for (const id of ids) await boss.offWork({ id });
    return ms;
  },
};

// ------------------------------------------------------------ batch submit

const batchers = {
  jobguard: (db, n) => db.query(`SELECT count(*) FROM jobguard.submit_many(
      ARRAY(SELECT 'owner-' || (i % 97) FROM generate_series(1, 1000) i),
      ARRAY(SELECT $1 || '-' || i FROM generate_series(1, 1000) i),
      array_fill('noop'::text, ARRAY[1000]),
      ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series(1, 1000) i),
      array_fill('local'::text, ARRAY[1000]))`, [`b${n}`]),
  graphile: (db, n) => db.query(`SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
      SELECT ROW('noop', json_build_object('i', i), NULL, NULL, NULL, $1 || '-' || i,
                 NULL, NULL)::graphile_worker.job_spec
        FROM generate_series(1, 1000) i))`, [`b${n}`]),
  floor: (db, n) => db.query(`INSERT INTO public.bench_floor_batch
      (owner_id, idempotency_key, operation, params, provider)
      SELECT * FROM unnest(
        ARRAY(SELECT 'owner-' || (i % 97) FROM generate_series(1, 1000) i),
        ARRAY(SELECT $1 || '-' || i FROM generate_series(1, 1000) i),
        array_fill('noop'::text, ARRAY[1000]),
        ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series(1, 1000) i),
        array_fill('local'::text, ARRAY[1000]))
      ON CONFLICT DO NOTHING`, [`b${n}`]),
};

async function batchRate(db, name) {
  await db.query('TRUNCATE jobguard.attempts, jobguard.jobs, graphile_worker._private_jobs, public.bench_floor_batch');
  let n = 0;
  const t0 = Date.now();
  while (Date.now() - t0 < BATCH_SECONDS * 1000) await batchers[name](db, n++);
  return (n * 1000) / ((Date.now() - t0) / 1000);
}

// ------------------------------------------------------------ main

(async () => {
  const db = await connect();
  await setup(db);
  const { rows: fp } = await db.query('SELECT jobguard.fast_path_status() AS s');
  const boss = new PgBoss({ connectionString: CONN, max: WORKERS + 2, supervise: false, schedule: false });
  boss.on('error', (e) => console.error('pg-boss:', e.message));
  await boss.start();
  await boss.createQueue('noop');
  // graphile-worker installs its schema on first run
  await (await graphileRun({ connectionString: CONN, concurrency: 1, noHandleSignals: true,
    logger: new (require('graphile-worker').Logger)(() => () => {}), taskList: {} })).stop();

  const drain = { jobguard: [], graphile: [], pgboss: [] };
  const order = ONLY.filter((n) => n in drain);
  for (let r = 0; r < ROUNDS; r++) {
    const names = order.slice(r % order.length).concat(order.slice(0, r % order.length));
    for (const name of names) {
      await submitters[name](db, r, boss);
      await db.query('VACUUM ANALYZE');
      const ms = await drainers[name](db, boss);
      drain[name].push(JOBS / (ms / 1000));
    }
  }
  const batch = { jobguard: [], graphile: [], floor: [] };
  const border = ONLY.filter((n) => n in batch);
  for (let r = 0; r < ROUNDS; r++) {
    const names = border.slice(r % border.length).concat(border.slice(0, r % border.length));
    for (const name of names) batch[name].push(await batchRate(db, name));
  }
  await boss.stop({ graceful: false, wait: true });

  const ratios = (xs, ys) => median(xs.map((x, i) => x / ys[i])).toFixed(2);
  const fmt = (xs) => `${Math.round(median(xs))} (${xs.map(Math.round).join(', ')})`;
  const fasterPeer = drain.graphile.map((g, i) => Math.max(g, drain.pgboss[i]));
  console.log(`Fast path: ${fp[0].s}. ${JOBS} jobs per drain, ${WORKERS} workers, ${ROUNDS} rounds.\n`);
  console.log('| measure | jobguard | graphile-worker 0.16 | pg-boss 10 | floor | jobguard ÷ faster peer | jobguard ÷ graphile | jobguard ÷ floor |');
  console.log('|---|---|---|---|---|---|---|---|');
  console.log(`| drain, jobs/s (median (rounds)) | ${fmt(drain.jobguard)} | ${fmt(drain.graphile)} | ${fmt(drain.pgboss)} | — | ${ratios(drain.jobguard, fasterPeer)} | ${ratios(drain.jobguard, drain.graphile)} | — |`);
  console.log(`| batch submit of 1,000, rows/s | ${fmt(batch.jobguard)} | ${fmt(batch.graphile)} | — | ${fmt(batch.floor)} | — | ${ratios(batch.jobguard, batch.graphile)} | ${ratios(batch.jobguard, batch.floor)} |`);
  // the targets of the worker side, judged on the ratios above
  const judge = (what, ratio, need) => `- ${what}: ${ratio} (≥ ${need}) — ${Number(ratio) >= need ? 'PASS' : 'FAIL'}`;
  console.log('\nTargets:\n');
  console.log(judge('drain, jobguard ÷ the faster peer', ratios(drain.jobguard, fasterPeer), 2));
  console.log(judge('batch submit, jobguard ÷ graphile-worker', ratios(batch.jobguard, batch.graphile), 1.5));
  console.log(judge('batch submit, jobguard ÷ the floor', ratios(batch.jobguard, batch.floor), 0.8));
  if (CHART_DATA) {
    // one row per measure, one column per system (NaN: not measured there)
    const m = (xs) => (xs.length ? Math.round(median(xs)) : 'NaN');
    require('fs').writeFileSync(CHART_DATA, [
      'measure jobguard graphile-worker pg-boss floor',
      `"drain of ${JOBS} jobs (jobs/s)" ${m(drain.jobguard)} ${m(drain.graphile)} ${m(drain.pgboss)} NaN`,
      `"batch submit of 1,000 (rows/s)" ${m(batch.jobguard)} ${m(batch.graphile)} NaN ${m(batch.floor)}`,
    ].join('\n') + '\n');
  }
  await db.query('DROP TABLE public.bench_floor_batch');
  await db.end();
})().catch((err) => { console.error(err); process.exit(1); });
