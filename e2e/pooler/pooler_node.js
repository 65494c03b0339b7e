// e2e/pooler/pooler_node.js: the Node client's part of the pooler pass
// (e2e/pooler/pooler.py runs it).  POOLER_CONNINFO (JSON pg options) names
// the database through pgbouncer; PG* the server itself, where handlers
// record their runs.  Prints one JSON line of counts.
//
//   pooler_node.js submit-many N     N clients submit 12 batches of 30
//   pooler_node.js drain OP N        N Workers drain OP's jobs
//   pooler_node.js reconcile OP N    N Reconcilers resolve OP's unknown attempts
//   pooler_node.js heartbeats N      N clients heartbeat an attempt 20 times
'use strict';
const { Pool, Client } = require('pg');
const jobguard = require('jobguard');

const pooled = JSON.parse(process.env.POOLER_CONNINFO);

// counting: a logger that counts the warnings and errors a loop logs
function counting(counts) {
  return {
    info() {},
    warn(...args) { counts.warnings += 1; counts.lastWarning = String(args[0]).slice(0, 200); },
    error(...args) { counts.warnings += 1; counts.lastWarning = String(args[0]).slice(0, 200); },
  };
}

// recorder: records each handler run in pooler_runs on a direct connection
async function recorder(client) {
  const db = new Client({ database: pooled.database });   // PGHOST, PGPORT: the server
  await db.connect();
  const record = (jobId, attemptId, key) => db.query(
    'INSERT INTO pooler_runs VALUES ($1, $2, $3, $4)', [client, jobId, attemptId, key]);
  return { record, close: () => db.end() };
}

// sumStats: the loops' stats added up, with what their run() threw
function sumStats(results, keys, out) {
  for (const k of keys) out[k] = 0;
  out.run_errors = 0;
  for (const r of results) {
    if (r.status === 'rejected') {
      out.run_errors += 1;
      out.first_error = out.first_error || String(r.reason).slice(0, 200);
      continue;
    }
    for (const k of keys) out[k] += r.value[k] || 0;
  }
  return out;
}

// submitMany: n clients each submit 12 batches of 30 requests
async function submitMany(n) {
  const pool = new Pool({ ...pooled, max: n });
  const out = { requests: n * 12 * 30, created: 0, errors: 0 };
  await Promise.all(Array.from({ length: n }, async (_, i) => {
    for (let b = 0; b < 12; b += 1) {
      const reqs = Array.from({ length: 30 }, (_, k) => ({ ownerId: `sm-node-${i}`,
        idempotencyKey: `k-${b}-${k}`, operation: 'pooler-sm-node', params: { n: k }, provider: 'psp' }));
      try {
        for (const row of await jobguard.submitMany(pool, reqs)) {
          if (row.created && !row.sqlstate) out.created += 1;
        }
      } catch (err) {
        out.errors += 1;
        out.first_error = out.first_error || `${err.name}: ${err.message}`.slice(0, 200);
      }
    }
  }));
  await pool.end();
  return out;
}

// drain: n Workers drain op's jobs until idle
async function drain(op, n) {
  const rec = await recorder('node-worker');
  const counts = { warnings: 0 };
  const workers = Array.from({ length: n }, (_, i) => new jobguard.Worker(async (job) => {
    await rec.record(job.job_id, job.attempt_id, job.provider_key);
    return { charge: job.provider_key };
  }, { connection: pooled, name: `node-drain-${i}`, operations: [op], batch: 4,
    timeoutSeconds: 60, waitSeconds: 1.5, logger: counting(counts) }));
  const timer = setTimeout(() => workers.forEach((w) => w.stop()), 150000);
  const results = await Promise.allSettled(workers.map((w) => w.run({ untilIdle: true,
    handleSignals: false })));
  clearTimeout(timer);
  await rec.close();
  return sumStats(results, ['claimed', 'won', 'failed', 'unrecorded', 'reportErrors',
    'reconnects', 'adopted', 'markedUnknown'], counts);
}

// reconcile: n Reconcilers resolve op's unknown attempts until idle
async function reconcile(op, n) {
  const rec = await recorder('node-rec');
  const counts = { warnings: 0 };
  const recs = Array.from({ length: n }, (_, i) => new jobguard.Reconciler(async (a) => {
    await rec.record(a.job_id, a.attempt_id, a.provider_key);
    return { found: a.provider_key };
  }, { connection: pooled, name: `node-rec-${i}`, operations: [op], batch: 5, leaseSeconds: 60,
    waitSeconds: 1, logger: counting(counts) }));
  const timer = setTimeout(() => recs.forEach((r) => r.stop()), 90000);
  const results = await Promise.allSettled(recs.map((r) => r.run({ untilIdle: true,
    handleSignals: false })));
  clearTimeout(timer);
  await rec.close();
  return sumStats(results, ['claimed', 'won', 'failed', 'errors', 'reportErrors', 'reconnects',
    'left'], counts);
}

// heartbeats: n clients each begin an attempt, heartbeat it 20 times, finish it
async function heartbeats(n) {
  const pool = new Pool({ ...pooled, max: n });
  const out = { sent: n * 20, ok: 0, errors: 0, won: 0 };
  await Promise.all(Array.from({ length: n }, async (_, i) => {
    const { jobId } = await jobguard.submit(pool, { ownerId: `hb-node-${i}`, idempotencyKey: 'k',
      operation: 'pooler-hb-node', params: {}, provider: 'psp' });
    const attemptId = await jobguard.beginAttempt(pool, jobId, { timeoutSeconds: 30 });
    let last = 0;
    for (let k = 0; k < 20; k += 1) {
      try {
        const d = await jobguard.heartbeat(pool, attemptId);
        if (d.getTime() >= last) out.ok += 1;
        last = d.getTime();
      } catch (err) {
        out.errors += 1;
        out.first_error = out.first_error || `${err.name}: ${err.message}`.slice(0, 200);
      }
    }
    if (await jobguard.finish(pool, attemptId, { beats: 20 }) === 'won') out.won += 1;
  }));
  await pool.end();
  return out;
}

// main: run the command named on the command line, print its counts
async function main() {
  const [cmd, a, b] = process.argv.slice(2);
  let out;
  if (cmd === 'submit-many') out = await submitMany(Number(a));
  else if (cmd === 'drain') out = await drain(a, Number(b));
  else if (cmd === 'reconcile') out = await reconcile(a, Number(b));
  else if (cmd === 'heartbeats') out = await heartbeats(Number(b || a));
  else throw new Error(`unknown command ${cmd}`);
  console.log(JSON.stringify(out));
}
main().catch((err) => { console.error(err); process.exit(1); });
