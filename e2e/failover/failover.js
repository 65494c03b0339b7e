'use strict';
// The failover end-to-end test (e2e/failover/run sets up its cluster):
// three fake providers on loopback (fake_providers.js): A refuses 40 % of
// requests ("provider said no") and holds a few longer than the caller
// waits, B honours the contract, C returns results that break it.  The
// route of 'charge' is {B, C}.
//
// 1. Seed jobs succeed on A; the certification runner (the command line,
//    against the providers' test mode) certifies B (exit 0) and refuses C
//    (exit 1, each failure printed), the Python client's runner too.
// 2. 500 jobs targeting A are drained by 4 Workers (a handler per
//    provider, C's too) and a Reconciler: every job succeeds exactly once
//    (one effect per job at the providers, under its winning attempt's
//    provider key), no request reaches C, every failover follows a failed
//    attempt, no unknown attempt fails over.
// 3. Mid-run, jobs still coming: define_operation with a changed contract
//    (B's certification is stale: no new attempt reaches B until the
//    Python client's runner certifies it again), then set_provider_policy('B', paused =>
//    true) (none reaches B until it is unpaused).
//
// Prints pg_regress-style lines ("test failover e2e (LABEL): ... ok") and the
// counts; exits non-zero on any failure.

const path = require('node:path');
const { execFile } = require('node:child_process');
const { randomUUID } = require('node:crypto');
const { Pool } = require('pg');
const jobguard = require('jobguard');
const { Provider } = require('./fake_providers');

const JOBS = Number(process.env.FAILOVER_JOBS || 500);
// mid-run, new jobs come at this many a second until the checks are done
const FEED_PER_SECOND = Number(process.env.FAILOVER_FEED_PER_SECOND || 50);
const SEED = Number(process.env.FAILOVER_SEED || Date.now() % 100000);
const BIN = path.join(__dirname, '..', '..', 'clients', 'node', 'bin', 'jobguard.js');
const HANDLERS = path.join(__dirname, 'handlers.js');
// the Python client's runner: Debian's python3 (with python3-psycopg)
const PYTHON = process.env.FAILOVER_PYTHON || '/usr/bin/python3';
const PYTHONPATH = [path.join(__dirname, '..', '..', 'clients', 'python', 'src'), process.env.PYTHONPATH]
  .filter(Boolean).join(path.delimiter);
const CONTRACT = { type: 'object', required: ['charge_id', 'amount'], additionalProperties: false,
  properties: { charge_id: { type: 'string' }, amount: { type: 'integer' } } };
// the changed contract of the mid-run: a currency may come back too
const CONTRACT2 = { ...CONTRACT, properties: { ...CONTRACT.properties, currency: { type: 'string' } } };

// what the run's lines are called: "test failover e2e (fast path on): ..."
const LABEL = process.env.FAILOVER_LABEL ? ` (${process.env.FAILOVER_LABEL})` : '';
const TITLE = `failover e2e${LABEL}`;

let failures = 0;
// check: one result line
function check(name, ok, detail = '') {
  if (!ok) failures++;
  console.log(`test ${TITLE}: ${name} ... ${ok ? 'ok' : 'FAILED'}${!ok && detail ? ` (${detail})` : ''}`);
}

// mulberry32: a seeded generator, so that a run can be repeated
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// waitFor: poll check() until it resolves true; false after ms
async function waitFor(fn, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await fn()) return true;
    await sleep(100);
  }
  return false;
}

// runner: the Node certification runner's command line for provider
// name; resolves to { code, stdout, stderr }
function runner(name, extra = []) {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, 'certify', '--operation', 'charge', '--provider', name,
      '--handler', `${HANDLERS}#certify${name}`, ...extra], { env: process.env },
    (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

// pyRunner: the Python client's runner (python3 -m jobguard certify, with
// certify_handlers.py) for provider name; resolves as runner does
function pyRunner(name, extra = []) {
  return new Promise((resolve) => {
    execFile(PYTHON, ['-m', 'jobguard', 'certify', '--operation', 'charge', '--provider', name,
      '--handler', `certify_handlers:certify_${name.toLowerCase()}`, ...extra], { cwd: __dirname,
      env: { ...process.env, PYTHONPATH: PYTHONPATH } },
    (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

// quiet: a logger that keeps warnings and errors for the end
const logged = [];
const quiet = { info() {}, warn: (m) => logged.push(m), error: (m) => logged.push(m) };

// submit: n jobs targeting A, amounts 1..n offset by base; their ids
async function submit(pool, n, base) {
  const rows = await jobguard.submitMany(pool, Array.from({ length: n }, (_, i) => ({
    ownerId: 'shop', idempotencyKey: randomUUID(), operation: 'charge',
    params: { amount: base + i + 1 }, provider: 'A' })));
  return rows.map((r) => r.job_id);
}

// barrier: after a change committed, wait until every transaction that
// began before it has ended; then the largest attempt id: any attempt
// above it was begun by a transaction that sees the change.
async function barrier(pool) {
  const { rows: [{ t }] } = await pool.query('SELECT pg_catalog.clock_timestamp() AS t');
  await waitFor(async () => {
    const { rows: [{ n }] } = await pool.query(`SELECT count(*)::int AS n FROM pg_catalog.pg_stat_activity
      WHERE xact_start < $1 AND pid <> pg_catalog.pg_backend_pid()
        AND datname = pg_catalog.current_database()`, [t]);
    return n === 0;
  }, 10000);
  const { rows: [{ m }] } = await pool.query(
    'SELECT COALESCE(max(attempt_id), 0)::bigint::text AS m FROM jobguard.attempt_overview');
  return Number(m);
}

// attemptsAbove: the attempts against provider with an id above id
async function attemptsAbove(pool, provider, id) {
  const { rows: [{ n }] } = await pool.query(`SELECT count(*)::int AS n FROM jobguard.attempt_overview
    WHERE provider = $1 AND attempt_id > $2`, [provider, id]);
  return n;
}

// main: the whole run; resolves to the exit status.
async function main() {
  const rng = mulberry32(SEED);
  const pool = new Pool({ max: 4 });
  const { rows: [{ fast }] } = await pool.query('SELECT jobguard.fast_path_status() AS fast');
  console.log(`${TITLE}: seed ${SEED}, ${JOBS} jobs, then ${FEED_PER_SECOND} a second mid-run; `
    + `fast path: ${fast}`);
  const providers = {
    A: new Provider('A', 'refusing', { rng, refuse: 0.4, stall: 0.02 }),
    B: new Provider('B', 'honest', { rng }),
    C: new Provider('C', 'breaking', { rng }),
  };
  for (const [name, p] of Object.entries(providers)) process.env[`FAILOVER_URL_${name}`] = await p.start();
  const { live, lookup } = require('./handlers');

  await pool.query(`SELECT jobguard.define_operation('charge', $1::jsonb, '10 milliseconds', '50 milliseconds')`,
    [JSON.stringify(CONTRACT)]);
  const handlers = { A: live('A'), B: live('B'), C: live('C') };
  const workers = Array.from({ length: 4 }, (_, i) => new jobguard.Worker({ handlers },
    { name: `failover-w${i + 1}`, operations: ['charge'], batch: 4, timeoutSeconds: 10, waitSeconds: 0.3,
      connection: { max: 2 }, logger: quiet }));
  const reconciler = new jobguard.Reconciler(lookup, { name: 'failover-r', operations: ['charge'],
    batch: 10, olderThanSeconds: 0.3, leaseSeconds: 3, waitSeconds: 0.3, logger: quiet });

  // 1. seed jobs on A (no route yet), then certification
  const seed = await submit(pool, 40, 100000);
  // a worker with A's handler only: no route yet, every attempt is against A
  const seeder = new jobguard.Worker({ handlers: { A: handlers.A } }, { name: 'failover-seed',
    operations: ['charge'], batch: 4, timeoutSeconds: 10, waitSeconds: 0.3, logger: quiet });
  const seeding = seeder.run({ handleSignals: false });
  const seedRec = reconciler.run({ handleSignals: false });
  const seeded = await waitFor(async () => {
    const { rows: [{ n }] } = await pool.query(`SELECT count(*)::int AS n FROM jobguard.job_overview
      WHERE job_id = ANY ($1::bigint[]) AND state = 'succeeded'`, [seed]);
    return n === seed.length;
  }, 60000);
  seeder.stop();
  const seedStats = await seeding;
  check('seed jobs succeeded on A before any route', seeded);

  const certB = await runner('B', ['--sample', '30', '--compare', `${HANDLERS}#sameAmount`]);
  console.log(`  runner B: ${certB.stdout.trim()}`);
  check('the runner certifies B (exit 0)', certB.code === 0, certB.stderr.trim());
  const pyC = await pyRunner('C', ['--sample', '30']);
  const pyLines = pyC.stderr.split('\n').filter((l) => /^failed: job [0-9]+: \$/.test(l));
  check('the Python runner refuses C too (exit 1, each failure printed)', pyC.code === 1 && pyLines.length === 30,
    `exit ${pyC.code}, ${pyLines.length} failures printed: ${pyC.stderr.slice(0, 300)}`);
  const certC = await runner('C', ['--sample', '30']);
  process.stdout.write(certC.stderr.split('\n').filter(Boolean).slice(0, 4).map((l) => `  runner C: ${l}\n`).join(''));
  const cLines = certC.stderr.split('\n').filter((l) => /^failed: job [0-9]+: \$/.test(l));
  check('the runner refuses C (exit 1, each failure printed)', certC.code === 1 && cLines.length === 30,
    `exit ${certC.code}, ${cLines.length} failures printed: ${certC.stderr.slice(0, 300)}`);
  const { rows: certs } = await pool.query(`SELECT provider, certified, evidence
    FROM jobguard.certification_overview WHERE operation = 'charge' ORDER BY provider`);
  check('only B is certified, with the runner\'s evidence',
    certs.length === 1 && certs[0].provider === 'B' && certs[0].certified
    && certs[0].evidence.inputs === 30 && certs[0].evidence.failed === 0 && certs[0].evidence.sample === 'recent',
    JSON.stringify(certs));
  const refusedCertifications = (certC.code === 1 ? 1 : 0) + (pyC.code === 1 ? 1 : 0);

  await pool.query(`SELECT jobguard.set_failover('charge', ARRAY['B', 'C'])`);

  // 2. 500 jobs, 4 workers
  const t0 = Date.now();
  const batch1 = await submit(pool, JOBS, 0);
  const running = workers.map((w) => w.run({ handleSignals: false }));
  const drained = await waitFor(async () => {
    const { rows: [{ n }] } = await pool.query(`SELECT count(*)::int AS n FROM jobguard.job_overview
      WHERE job_id = ANY ($1::bigint[]) AND state = 'succeeded'`, [batch1]);
    return n === batch1.length;
  }, 180000);
  check(`${JOBS} jobs drained by 4 workers (${((Date.now() - t0) / 1000).toFixed(1)} s)`, drained);
  const { rows: [{ n: fo1 }] } = await pool.query(`SELECT count(*)::int AS n FROM jobguard.attempt_overview a
    JOIN jobguard.job_overview j USING (job_id) WHERE j.job_id = ANY ($1::bigint[]) AND a.provider <> j.provider`,
  [batch1]);
  check('jobs refused by A failed over to B', fo1 > 0 && providers.B.effects.length > 0, `failovers ${fo1}`);
  check('no request reached C', providers.C.counts.live === 0, `${providers.C.counts.live} requests`);

  // 3. mid-run: jobs keep coming
  let feeding = true;
  const midrun = [];
  const feeder = (async () => {
    while (feeding) {
      const n = Math.max(1, Math.round(FEED_PER_SECOND / 10));
      midrun.push(...await submit(pool, n, 200000 + midrun.length));
      await sleep(100);
    }
  })();
  const live0 = await barrier(pool);
  check('mid-run: failovers to B go on', await waitFor(async () => (await attemptsAbove(pool, 'B', live0)) > 0, 20000));

  // a changed contract: B's certification is stale
  await pool.query(`SELECT jobguard.define_operation('charge', $1::jsonb, '10 milliseconds', '50 milliseconds')`,
    [JSON.stringify(CONTRACT2)]);
  const staleFrom = await barrier(pool);
  const { rows: [stale] } = await pool.query(`SELECT certified, stale FROM jobguard.certification_overview
    WHERE operation = 'charge' AND provider = 'B'`);
  check('a changed contract makes B\'s certification stale', stale && stale.stale === true && stale.certified === false,
    JSON.stringify(stale));
  const refusedBefore = providers.A.counts.refused;
  await waitFor(async () => providers.A.counts.refused >= refusedBefore + 15, 15000);
  const bStale = await attemptsAbove(pool, 'B', staleFrom);
  const bStaleRequests = providers.B.liveAttempts.filter((id) => id > staleFrom).length;
  check('no new attempt reaches B while its certification is stale',
    bStale === 0 && bStaleRequests === 0 && providers.A.counts.refused >= refusedBefore + 15,
    `${bStale} attempts, ${bStaleRequests} requests; A refused ${providers.A.counts.refused - refusedBefore} meanwhile`);
  // this time the Python client's runner
  const recert = await pyRunner('B', ['--sample', '30', '--compare', 'certify_handlers:same_amount']);
  console.log(`  Python runner B: ${recert.stdout.trim()}`);
  const { rows: [again] } = await pool.query(`SELECT certified, stale, evidence FROM jobguard.certification_overview
    WHERE operation = 'charge' AND provider = 'B'`);
  check('the Python runner certifies B again under the new contract (exit 0)', recert.code === 0
    && again.certified && !again.stale && /^jobguard-python /.test(again.evidence.runner)
    && again.evidence.contract_version > certs[0].evidence.contract_version,
  `exit ${recert.code}: ${recert.stderr.trim()} ${JSON.stringify(again)}`);
  const recertAt = await barrier(pool);
  check('after the new certification, failovers to B resume',
    await waitFor(async () => (await attemptsAbove(pool, 'B', recertAt)) > 0, 20000));

  // B paused
  await pool.query(`SELECT jobguard.set_provider_policy('B', paused => true)`);
  const pausedFrom = await barrier(pool);
  const refusedBefore2 = providers.A.counts.refused;
  await waitFor(async () => providers.A.counts.refused >= refusedBefore2 + 15, 15000);
  const bPaused = await attemptsAbove(pool, 'B', pausedFrom);
  const bPausedRequests = providers.B.liveAttempts.filter((id) => id > pausedFrom).length;
  check('no new attempt reaches B while it is paused',
    bPaused === 0 && bPausedRequests === 0 && providers.A.counts.refused >= refusedBefore2 + 15,
    `${bPaused} attempts, ${bPausedRequests} requests; A refused ${providers.A.counts.refused - refusedBefore2} meanwhile`);
  await pool.query(`SELECT jobguard.set_provider_policy('B', paused => false)`);
  const unpausedAt = await barrier(pool);
  check('unpaused, failovers to B resume',
    await waitFor(async () => (await attemptsAbove(pool, 'B', unpausedAt)) > 0, 20000));

  feeding = false;
  await feeder;
  const all = [...seed, ...batch1, ...midrun];
  const done = await waitFor(async () => {
    const { rows: [{ n }] } = await pool.query(`SELECT count(*)::int AS n FROM jobguard.job_overview
      WHERE job_id = ANY ($1::bigint[]) AND state = 'succeeded'`, [all]);
    return n === all.length;
  }, 120000);
  check(`every job succeeded (${all.length})`, done);
  // let held unknown attempts settle, then stop
  await waitFor(async () => {
    const { rows: [{ n }] } = await pool.query(`SELECT count(*)::int AS n FROM jobguard.attempt_overview
      WHERE state IN ('started', 'unknown')`);
    return n === 0;
  }, 20000);
  for (const w of workers) w.stop();
  reconciler.stop();
  const stats = await Promise.all(running);
  const rstats = await seedRec;

  // exactly once, at the providers: one effect per job, under the key of
  // its winning attempt, with the result it recorded
  const { rows: jobs } = await pool.query(`SELECT j.job_id::int, j.result, a.provider, a.provider_key
      FROM jobguard.job_overview j JOIN jobguard.attempt_overview a ON a.attempt_id = j.completed_by
     WHERE j.job_id = ANY ($1::bigint[])`, [all]);
  const effects = new Map();
  for (const p of [providers.A, providers.B, providers.C]) {
    for (const e of p.effects) {
      if (!effects.has(e.jobId)) effects.set(e.jobId, []);
      effects.get(e.jobId).push({ provider: p.name, ...e });
    }
  }
  const bad = jobs.filter((j) => {
    const es = effects.get(j.job_id) || [];
    return es.length !== 1 || es[0].key !== j.provider_key || es[0].provider !== j.provider
      || es[0].chargeId !== j.result.charge_id;
  });
  check('one effect per job at the providers, under its winning attempt\'s key', jobs.length === all.length
    && bad.length === 0 && effects.size === all.length,
  `${bad.length} jobs off, e.g. ${JSON.stringify(bad.slice(0, 2))}; ${effects.size} jobs with effects`);
  const { rows: [{ n: succeededAttempts }] } = await pool.query(`SELECT count(*)::int AS n
    FROM jobguard.attempt_overview a JOIN jobguard.job_overview j USING (job_id)
   WHERE j.job_id = ANY ($1::bigint[]) AND a.state IN ('succeeded', 'lost')`, [all]);
  check('one succeeded attempt per job, none lost', succeededAttempts === all.length, `${succeededAttempts}`);
  check('no request ever reached C (live)', providers.C.counts.live === 0, `${providers.C.counts.live}`);

  // the route's rules, from the attempts
  const { rows: moves } = await pool.query(`
    SELECT a.attempt_id::int, a.job_id::int, a.provider, p.provider AS prev_provider, p.state AS prev_state,
           p.unknown_since IS NOT NULL AS prev_was_unknown, a.provider <> j.provider AS failover
      FROM jobguard.attempt_overview a
      JOIN jobguard.job_overview j USING (job_id)
      JOIN jobguard.attempt_overview p ON p.job_id = a.job_id AND p.attempt_no = a.attempt_no - 1
     WHERE j.job_id = ANY ($1::bigint[])`, [all]);
  const failovers = moves.filter((m) => m.failover);
  const afterUnknown = moves.filter((m) => m.prev_was_unknown && m.provider !== m.prev_provider);
  const notAfterFailed = failovers.filter((m) => m.prev_state !== 'failed' && m.prev_state !== 'cancelled');
  const { rows: [{ n: unknowns }] } = await pool.query(`SELECT count(*)::int AS n FROM jobguard.attempt_overview a
    JOIN jobguard.job_overview j USING (job_id) WHERE j.job_id = ANY ($1::bigint[]) AND a.unknown_since IS NOT NULL`, [all]);
  check('every failover follows a failed attempt', notAfterFailed.length === 0, JSON.stringify(notAfterFailed.slice(0, 3)));
  check(`no unknown attempt ever failed over (${unknowns} attempts were unknown)`,
    afterUnknown.length === 0 && unknowns > 0, `${afterUnknown.length} moved; ${unknowns} unknown`);
  const stalledJobs = [...providers.A.stalledKeys].map((k) => providers.A.keys.get(k).jobId);
  const { rows: [{ n: stalledMoved }] } = await pool.query(`SELECT count(*)::int AS n FROM jobguard.attempt_overview
    WHERE job_id = ANY ($1::bigint[]) AND provider <> 'A'`, [stalledJobs]);
  check('a job whose request A held never moved off A', stalledMoved === 0, `${stalledMoved} attempts elsewhere`);
  const ran = [seedStats, ...stats].reduce((s, w) => s + w.won + w.lost + w.rejected + w.failed
    + w.inProgress + w.handlerErrors + w.unrecorded, 0);
  const liveRequests = providers.A.counts.live + providers.B.counts.live + providers.C.counts.live;
  check('each handler run was one request, no attempt ran twice',
    liveRequests === ran && new Set([...providers.A.liveAttempts, ...providers.B.liveAttempts,
      ...providers.C.liveAttempts]).size === liveRequests,
    `${liveRequests} requests, ${ran} handler runs`);
  check('no worker claimed a row it has no handler for', [seedStats, ...stats].every((w) => w.unhandled === 0));

  console.log(`${TITLE}: jobs=${all.length} effects A=${providers.A.effects.length} B=${providers.B.effects.length} `
    + `C=${providers.C.effects.length} failovers=${failovers.length} refused_by_A=${providers.A.counts.refused} `
    + `unknown=${unknowns} reconciled=${rstats.won} refused_certifications=${refusedCertifications} `
    + `requests_to_C=${providers.C.counts.live} (test mode: ${providers.C.counts.test}) `
    + `certification_requests_B=${providers.B.counts.test}`);
  if (failures > 0 && logged.length > 0) console.log(`${TITLE}: the loops logged:\n  ${logged.slice(-20).join('\n  ')}`);

  await pool.end();
  for (const p of Object.values(providers)) await p.stop();
  return failures === 0 ? 0 : 1;
}

main().then((code) => process.exit(code), (err) => {
  console.log(`test ${TITLE}: the run ... FAILED (${err.stack})`);
  process.exit(1);
});
