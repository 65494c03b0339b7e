'use strict';
// The calls to the fake providers of the failover end-to-end test: the
// Worker's handlers (a handler per provider, live), the certification
// runner's handlers (the provider's test mode) and its comparison, and the
// Reconciler's look-up.  FAILOVER_URL_A, _B and _C name the providers.
//
//   npx jobguard certify --operation charge --provider B \
//       --handler e2e/failover/handlers.js#certifyB --compare e2e/failover/handlers.js#sameAmount

const http = require('node:http');
const jobguard = require('jobguard');

// how long a live call waits for the provider before its outcome is unknown
const HTTP_TIMEOUT_MS = 1000;
// how long a test-mode call (the runner's) waits
const TEST_TIMEOUT_MS = 10000;

// urlOf: the URL of provider name, from the environment.
function urlOf(name) {
  const url = process.env[`FAILOVER_URL_${name}`];
  if (!url) throw new Error(`FAILOVER_URL_${name} is not set`);
  return new URL(url);
}

// request: one HTTP call; resolves to { status, body }, rejects when no
// answer came within timeoutMs.
function request(name, method, path, headers, body, timeoutMs = HTTP_TIMEOUT_MS) {
  const url = urlOf(name);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method, path, headers,
      agent: false, timeout: timeoutMs }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { data += c; });
      res.on('end', () => {
        try { resolve({ status: res.statusCode, body: data ? JSON.parse(data) : null }); } catch (err) { reject(err); }
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(body);
  });
}

// charge: POST /charges at provider name under the job's provider key; the
// provider's answer as { status, body }.
function charge(name, job, testMode) {
  return request(name, 'POST', '/charges', {
    'Content-Type': 'application/json', 'Idempotency-Key': job.provider_key || '',
    'X-Attempt-Id': String(job.attempt_id), ...(testMode ? { 'X-Test-Mode': '1' } : {}),
  }, JSON.stringify({ job_id: job.job_id, params: job.params }), testMode ? TEST_TIMEOUT_MS : HTTP_TIMEOUT_MS);
}

// live: the Worker's handler for provider name.  200 is the result; 402 is
// the provider saying no (ProviderRefused: the attempt fails, the route may
// move on); no answer and 409 are InProgress (unknown: it may have charged).
function live(name) {
  return async (job) => {
    if (job.provider !== name) throw new Error(`handler of ${name} given a row for ${job.provider}`);
    let res;
    try {
      res = await charge(name, job, false);
    } catch (err) {
      throw new jobguard.InProgress(`no answer from ${name}: ${err.message}`);
    }
    if (res.status === 200) return res.body;
    if (res.status === 409) throw new jobguard.InProgress(`${name}: idempotency_key_in_use`);
    if (res.status === 402) throw new jobguard.ProviderRefused(`${name} declined`);
    throw new Error(`${name}: HTTP ${res.status}`);   // unknown, never failed
  };
}

// testMode: the certification runner's handler for provider name (its
// test mode): the provider's answer, whatever it is.
function testMode(name) {
  return async (job) => {
    const res = await charge(name, job, true);
    if (res.status !== 200) throw new Error(`${name} test mode: HTTP ${res.status}`);
    return res.body;
  };
}

// sameAmount: the runner's comparison: the candidate charged what the
// winning attempt charged.
function sameAmount(output, winning) {
  return output.amount === winning.amount
    || { path: '$.amount', message: `charged ${JSON.stringify(output.amount)}, the winning attempt ${winning.amount}` };
}

// lookup: the Reconciler's function: the answer under the attempt's key
// at its provider (finish), a key it never saw (ProviderRefused), or
// nothing yet (still unknown).
async function lookup(attempt) {
  const res = await request(attempt.provider, 'GET', `/charges/${encodeURIComponent(attempt.provider_key)}`, {});
  if (res.status === 200) return res.body;
  if (res.status === 404) throw new jobguard.ProviderRefused(`${attempt.provider} never saw this key`);
  if (res.status === 402) throw new jobguard.ProviderRefused(`${attempt.provider} declined`);
  return undefined;
}

module.exports = { live, testMode, sameAmount, lookup,
  certifyB: testMode('B'), certifyC: testMode('C') };
