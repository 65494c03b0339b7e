'use strict';
// The certification runner against a real jobguard: a passing run
// certifies with the evidence of the SPEC, a failing input or a compare
// mismatch certifies nothing and names the job, the path and the message,
// no payload rights is a clear error, and the command line's exit codes
// and printed failures.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const { execFile } = require('node:child_process');
const { isDeepStrictEqual } = require('node:util');
const { Pool } = require('pg');
const jg = require('..');
const { setUp, tearDown, admin } = require('../testlib');

const DB = 'jg_client_node_certify';
const BIN = path.join(__dirname, '..', 'bin', 'jobguard.js');
const CONTRACT = { type: 'object', required: ['charge_id'], additionalProperties: false,
  properties: { charge_id: { type: 'string' }, amount: { type: 'integer' } } };
let pool;
let dir;
test.before(async () => {
  pool = await setUp(DB);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'jg-certify-'));
});
test.after(async () => {
  await tearDown(pool, DB);
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// freshOp: a new operation with CONTRACT and n succeeded jobs against
// provider 'main-psp', each result {charge_id: "ch_<i>", amount: <i>};
// resolves to { op, jobIds } (most recent first)
async function freshOp(n) {
  const op = `op-${randomUUID().slice(0, 12)}`;
  await pool.query('SELECT jobguard.define_operation($1, $2::jsonb)', [op, JSON.stringify(CONTRACT)]);
  const jobIds = [];
  for (let i = 1; i <= n; i++) {
    const { jobId } = await jg.submit(pool, { ownerId: 'alice', idempotencyKey: randomUUID(),
      operation: op, params: { amount: i }, provider: 'main-psp' });
    const attempt = await jg.beginAttempt(pool, jobId);
    assert.equal(await jg.finish(pool, attempt, { charge_id: `ch_${i}`, amount: i }), 'won');
    jobIds.unshift(jobId);
  }
  return { op, jobIds };
}

// certification: the provider's certification_overview row, or undefined
async function certification(op, provider) {
  const { rows } = await pool.query(`SELECT certified, evidence FROM jobguard.certification_overview
                                      WHERE operation = $1 AND provider = $2`, [op, provider]);
  return rows[0];
}

// contractVersion: the operation's current contract_version
async function contractVersion(op) {
  const { rows: [{ v }] } = await pool.query(
    'SELECT contract_version::int AS v FROM jobguard.operations WHERE operation = $1', [op]);
  return v;
}

// honest: a candidate provider's handler that keeps the contract and gives
// what the winning attempt gave
const honest = async (job) => ({ charge_id: `ch_${job.params.amount}`, amount: job.params.amount });

test('a passing run certifies the provider with the evidence of the SPEC', async () => {
  const { op, jobIds } = await freshOp(5);
  const seen = [];
  const report = await jg.certify({ pool, operation: op, provider: 'backup-b', sample: 3,
    handler: async (job) => { seen.push(job); return honest(job); } });
  assert.equal(report.certified, true);
  assert.deepEqual(report.failures, []);
  assert.equal(seen.length, 3, 'the handler runs once per input');
  assert.deepEqual(seen.map((j) => j.job_id), jobIds.slice(0, 3), 'the most recent succeeded jobs');
  for (const j of seen) {
    assert.equal(j.provider, 'backup-b');
    assert.equal(j.failover, true);
    assert.match(j.provider_key, /^jgcert-[0-9a-f]+-[0-9]+$/);
  }
  assert.equal(new Set(seen.map((j) => j.provider_key)).size, 3, 'a provider key per input');
  const row = await certification(op, 'backup-b');
  assert.equal(row.certified, true);
  const ev = row.evidence;
  assert.deepEqual(Object.keys(ev).sort(), ['contract_version', 'ended_at', 'failed', 'inputs',
    'job_ids', 'passed', 'runner', 'sample', 'started_at']);
  assert.equal(ev.runner, `jobguard-node ${require('../package.json').version}`);
  assert.equal(ev.contract_version, await contractVersion(op));
  assert.deepEqual([ev.inputs, ev.passed, ev.failed, ev.sample], [3, 3, 0, 'recent']);
  assert.deepEqual(ev.job_ids, jobIds.slice(0, 3));
  assert.ok(Date.parse(ev.started_at) <= Date.parse(ev.ended_at));
  assert.deepEqual(report.evidence, ev);
});

test('a failing input certifies nothing and names the job, the path and the message', async () => {
  const { op, jobIds } = await freshOp(4);
  const bad = jobIds[1];
  const report = await jg.certify({ pool, operation: op, provider: 'backup-c',
    handler: async (job) => (job.job_id === bad ? { charge_id: 7, amount: 1 } : honest(job)) });
  assert.equal(report.certified, false);
  assert.deepEqual([report.inputs, report.passed, report.failed], [4, 3, 1]);
  assert.deepEqual(report.failures, [{ jobId: bad, where: `job ${bad}`, path: '$.charge_id',
    message: 'expected string, got number' }]);
  assert.equal(await certification(op, 'backup-c'), undefined, 'no certification written');
});

test('a handler that throws or resolves nothing fails its input', async () => {
  const { op, jobIds } = await freshOp(2);
  const report = await jg.certify({ pool, operation: op, provider: 'backup-c',
    handler: async (job) => {
      if (job.job_id === jobIds[0]) throw new Error('sandbox down');
      return undefined;
    } });
  assert.equal(report.certified, false);
  assert.equal(report.failed, 2);
  assert.match(report.failures[0].message, /the handler threw Error: sandbox down/);
  assert.match(report.failures[1].message, /cannot be recorded/);
  assert.equal(await certification(op, 'backup-c'), undefined);
});

test('compare: a mismatch with the winning result fails at its path', async () => {
  const { op, jobIds } = await freshOp(3);
  const off = jobIds[2];
  const handler = async (job) => ({ charge_id: `ch_${job.params.amount}`,
    amount: job.job_id === off ? 999 : job.params.amount });
  const same = (output, winning) => isDeepStrictEqual(output, winning);
  const report = await jg.certify({ pool, operation: op, provider: 'backup-d', handler, compare: same });
  assert.equal(report.certified, false);
  assert.deepEqual(report.failures, [{ jobId: off, where: `job ${off}`, path: '$.amount',
    message: 'the output differs from the winning result of the same job' }]);
  assert.equal(await certification(op, 'backup-d'), undefined);
  // a message of compare's own is the failure's message
  const told = await jg.certify({ pool, operation: op, provider: 'backup-d', handler,
    compare: (o, w) => o.amount === w.amount || `amount ${o.amount}, the winner charged ${w.amount}` });
  assert.deepEqual(told.failures.map((f) => [f.jobId, f.message]), [[off, 'amount 999, the winner charged 1']]);
  // without the mismatch, the same comparison certifies
  const ok = await jg.certify({ pool, operation: op, provider: 'backup-d', handler: honest, compare: same });
  assert.equal(ok.certified, true);
});

test('inputs from a file: sample "file", the job ids given, results compared', async () => {
  const { op, jobIds } = await freshOp(2);
  const file = path.join(dir, `${op}.jsonl`);
  fs.writeFileSync(file, [
    JSON.stringify({ params: { amount: 5 } }),
    '',
    JSON.stringify({ job_id: jobIds[0], params: { amount: 2 } }),
    JSON.stringify({ params: { amount: 3 }, result: { charge_id: 'ch_3', amount: 3 } }),
  ].join('\n'));
  const report = await jg.certify({ pool, operation: op, provider: 'backup-f', inputs: file,
    handler: honest });
  assert.equal(report.certified, true);
  assert.deepEqual([report.evidence.sample, report.evidence.inputs, report.evidence.job_ids],
    ['file', 3, [jobIds[0]]]);
  // compare: the line without a result nor a job has nothing to compare with;
  // the job's winning result is read from the database
  const cmp = await jg.certify({ pool, operation: op, provider: 'backup-g', inputs: file,
    handler: honest, compare: isDeepStrictEqual });
  assert.equal(cmp.certified, false);
  assert.deepEqual(cmp.failures.map((f) => f.where), [`${file}:1`]);
  assert.match(cmp.failures[0].message, /no winning result to compare with/);
  // a line that is no input is refused before anything runs
  fs.writeFileSync(file, '{"amount": 1}\n');
  let ran = 0;
  await assert.rejects(jg.certify({ pool, operation: op, provider: 'backup-h', inputs: file,
    handler: async () => { ran++; return {}; } }), { name: 'CertifyError', message: /:1: each line must be an object with "params"/ });
  assert.equal(ran, 0);
});

test('no inputs, a changed contract meanwhile: nothing certified', async () => {
  const op = `op-${randomUUID().slice(0, 12)}`;
  await pool.query('SELECT jobguard.define_operation($1, $2::jsonb)', [op, JSON.stringify(CONTRACT)]);
  await assert.rejects(jg.certify({ pool, operation: op, provider: 'backup-e', handler: honest }),
    { name: 'CertifyError', message: /no succeeded jobs/ });
  const { op: op2 } = await freshOp(2);
  const report = jg.certify({ pool, operation: op2, provider: 'backup-e',
    handler: async (job) => {
      if (job.params.amount === 1) {   // the last input: the contract changes under the run
        await pool.query('SELECT jobguard.define_operation($1, $2::jsonb)',
          [op2, JSON.stringify({ ...CONTRACT, required: ['charge_id', 'amount'] })]);
      }
      return honest(job);
    } });
  await assert.rejects(report, { name: 'CertifyError', message: /changed during the run/ });
  assert.equal(await certification(op2, 'backup-e'), undefined);
});

test('no payload rights: a clear error naming what is needed, nothing run', async () => {
  const { op } = await freshOp(2);
  const role = `jg_cert_reader_${randomUUID().slice(0, 8)}`;
  await admin(`CREATE ROLE ${role} LOGIN`);
  const readers = [];
  try {
    await pool.query('SELECT jobguard.grant_reader($1, NULL, false)', [role]);
    const reader = new Pool({ database: DB, user: role });
    readers.push(reader);
    let ran = 0;
    await assert.rejects(jg.certify({ pool: reader, operation: op, provider: 'backup-r',
      handler: async (job) => { ran++; return honest(job); } }), (err) => {
      assert.equal(err.name, 'PayloadRightsRequired');
      assert.match(err.message, /payload rights/);
      assert.match(err.message, /grant_operator/);
      assert.match(err.message, /grant_reader\(role, scope, payloads => true\)/);
      return true;
    });
    assert.equal(ran, 0);
    // a role with no grant at all: the same error
    await pool.query('SELECT jobguard.revoke_client($1)', [role]);
    await assert.rejects(jg.certify({ pool: reader, operation: op, provider: 'backup-r',
      handler: honest }), { name: 'PayloadRightsRequired' });
    // a reader with payloads reads the inputs, but certifying needs an administrator
    await pool.query('SELECT jobguard.grant_reader($1, NULL, true)', [role]);
    await assert.rejects(jg.certify({ pool: reader, operation: op, provider: 'backup-r',
      handler: honest }), { name: 'CertifyError', message: /needs an administrator/ });
    assert.equal(await certification(op, 'backup-r'), undefined);
  } finally {
    for (const r of readers) await r.end();
    await pool.query('SELECT jobguard.revoke_client($1)', [role]).catch(() => {});
    await admin(`DROP ROLE IF EXISTS ${role}`);
  }
});

// cli: run the command line; resolves to { code, stdout, stderr }
function cli(args, env = {}) {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd: dir, env: { ...process.env, PGDATABASE: DB, ...env } },
      (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

test('the command line: exit 0 certified, 1 with each failure printed, 2 for a run that cannot be', async () => {
  const { op, jobIds } = await freshOp(3);
  fs.writeFileSync(path.join(dir, 'handlers.js'), `
    exports.honest = async (job) => ({ charge_id: 'ch_' + job.params.amount, amount: job.params.amount });
    exports.breaks = async (job) => job.params.amount === 2 ? { charge_id: 'ch_2', extra: true }
      : { charge_id: 'ch_' + job.params.amount, amount: job.params.amount };
    exports.shifted = async (job) => ({ charge_id: 'ch_' + job.params.amount, amount: job.params.amount + 1 });
    exports.same = require('node:util').isDeepStrictEqual;
  `);
  const ok = await cli(['certify', '--operation', op, '--provider', 'cli-b', '--handler', './handlers.js#honest',
    '--sample', '2', '--compare', './handlers.js#same']);
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, new RegExp(`^certified: operation ${op}, provider cli-b: 2 of 2 inputs passed`));
  assert.equal((await certification(op, 'cli-b')).evidence.inputs, 2);

  const bad = await cli(['certify', '--operation', op, '--provider', 'cli-c', '--handler', './handlers.js#breaks']);
  assert.equal(bad.code, 1);
  const two = jobIds[1];
  assert.equal(bad.stderr, `failed: job ${two}: $: unexpected key "extra"\n`
    + `not certified: operation ${op}, provider cli-c: 1 of 3 inputs failed\n`);
  assert.equal(await certification(op, 'cli-c'), undefined);

  const diff = await cli(['certify', '--operation', op, '--provider', 'cli-c', '--handler', './handlers.js#shifted',
    '--compare', './handlers.js#same']);
  assert.equal(diff.code, 1);
  assert.equal(diff.stderr.split('\n').filter((l) => /^failed: job [0-9]+: \$\.amount: the output differs/.test(l)).length, 3);

  for (const args of [
    ['certify', '--operation', op, '--provider', 'cli-c'],                                // no handler
    ['certify', '--operation', op, '--provider', 'cli-c', '--handler', './handlers.js#nope'],
    ['certify', '--operation', op, '--provider', 'cli-c', '--handler', './handlers.js#honest', '--sample', '0'],
    ['certify', '--operation', op, '--provider', 'cli-c', '--handler', './handlers.js#honest', '--sample', '2',
      '--inputs', 'x.jsonl'],
    ['certify', '--operation', op, '--provider', 'cli-c', '--handler', './handlers.js#honest', '--bogus'],
    ['frobnicate'],
  ]) {
    const r = await cli(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /usage: jobguard certify/);
  }
  const none = await cli(['certify', '--operation', 'no-such-op', '--provider', 'cli-c', '--handler', './handlers.js#honest']);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /no succeeded jobs/);
  assert.equal(await certification(op, 'cli-c'), undefined);
});
