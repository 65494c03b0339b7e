'use strict';
// One process of the liveness end-to-end test (e2e/liveness.py): a Node
// Worker or Reconciler of jobguard's client, calling the fake provider
// (e2e/fake_provider.py) over HTTP.
//
//   node liveness_worker.js worker NAME      claim 'charge' jobs, charge each
//                                            under the job's provider key
//   node liveness_worker.js reconciler NAME  look unknown attempts up
//
// PROVIDER_URL names the provider; PG* the database.  At a clean stop
// (SIGTERM) it prints one line "stats <role> <name> <json>".

const http = require('node:http');
const jobguard = require('jobguard');

const URL_ = new URL(process.env.PROVIDER_URL);
// how long a call waits for the provider before its outcome is unknown
const HTTP_TIMEOUT = Number(process.env.HTTP_TIMEOUT || 1.5) * 1000;

// request: one HTTP call; resolves to { status, body }, rejects when no
// answer came (a timeout, a dropped reply)
function request(method, path, headers, body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: URL_.hostname, port: URL_.port, method, path, headers,
      agent: false, timeout: HTTP_TIMEOUT }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, body: data ? JSON.parse(data) : null }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(body);
  });
}

// charge: the handler.  No answer and 409 are InProgress: the attempt
// becomes unknown, never failed, as the provider may have charged.
async function charge(job) {
  let res;
  try {
    res = await request('POST', '/charges', {
      'Content-Type': 'application/json', 'Idempotency-Key': job.provider_key || '',
      'X-Attempt-Id': String(job.attempt_id),
    }, JSON.stringify({ job_id: Number(job.job_id), params: job.params }));
  } catch (err) {
    throw new jobguard.InProgress(`no answer: ${err.message}`);
  }
  if (res.status === 200) return res.body;
  if (res.status === 409) throw new jobguard.InProgress('provider: idempotency_key_in_use');
  throw new jobguard.ProviderRefused(`provider: HTTP ${res.status}`);
}

// reconcile: the provider's answer under the key (finish), a key it never
// saw (ProviderRefused: the gate opens), or nothing yet (still unknown).
async function reconcile(attempt) {
  const res = await request('GET', `/charges/${attempt.provider_key}`, {});
  if (res.status === 200) return res.body;
  if (res.status === 404) throw new jobguard.ProviderRefused('provider: never saw this key');
  return null;
}

async function main() {
  const [role, name] = process.argv.slice(2);
  const quiet = { info() {}, warn() {}, error: console.error };
  const runner = role === 'worker'
    ? new jobguard.Worker(charge, { name, operations: ['charge'], batch: 4,
      timeoutSeconds: Number(process.env.ATTEMPT_TIMEOUT || 2), waitSeconds: 0.5, logger: quiet })
    : new jobguard.Reconciler(reconcile, { name, operations: ['charge'], batch: 10,
      olderThanSeconds: Number(process.env.RECONCILE_AFTER || 2), leaseSeconds: 5,
      waitSeconds: 0.5, logger: quiet });
  const stats = await runner.run();
  console.log(`stats ${role} ${name} ${JSON.stringify(stats)}`);
}

main().catch((err) => { console.error(err); process.exit(1); });
