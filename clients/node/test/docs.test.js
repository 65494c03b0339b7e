'use strict';
// The README's Node example is examples/quickstart.js and doc/clients.md's
// worker example examples/worker.js, verbatim, and they run as the doc says (the worker: a
// retry after RetryLater, and a clean stop on SIGTERM).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFile, spawn } = require('node:child_process');
const { randomUUID } = require('node:crypto');
const { promisify } = require('node:util');
const jg = require('..');
const { setUp, tearDown } = require('../testlib');

const DOC = path.join(__dirname, '..', '..', '..', 'doc', 'clients.md');
const README = path.join(__dirname, '..', '..', '..', 'README.md');
const EXAMPLE = path.join(__dirname, '..', 'examples', 'quickstart.js');
const WORKER = path.join(__dirname, '..', 'examples', 'worker.js');
const DB = 'jg_client_node_docs';

// docBlock: the fenced code block of doc that follows the HTML comment marker.
function docBlock(marker, doc = DOC) {
  const text = fs.readFileSync(doc, 'utf8');
  const at = text.indexOf(marker);
  assert.ok(at >= 0, `${doc} has no ${marker}`);
  const m = /^\s*```[a-z]*(?: [a-z=]+)*\n([\s\S]*?)```/.exec(text.slice(at + marker.length));
  assert.ok(m, `no code block after ${marker}`);
  return m[1];
}

test('the doc example is the tested file', () => {
  assert.equal(docBlock('<!-- example: clients/node/examples/quickstart.js -->', README),
    fs.readFileSync(EXAMPLE, 'utf8'));
});

test('the example runs', async () => {
  const pool = await setUp(DB);
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [EXAMPLE],
      { env: { ...process.env, PGDATABASE: DB } });
    const lines = stdout.trim().split('\n');
    assert.equal(lines[0], 'true won succeeded');
    assert.match(lines[1], /^key reused: job \d+ differs in params$/);
  } finally {
    await tearDown(pool, DB);
  }
});

test('the doc worker example is the tested file', () => {
  assert.equal(docBlock('<!-- example: clients/node/examples/worker.js -->'),
    fs.readFileSync(WORKER, 'utf8'));
});

// waitFor: poll check() until it is true, failing after ms
async function waitFor(check, ms, what) {
  const end = Date.now() + ms;
  while (!(await check())) {
    assert.ok(Date.now() < end, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('the worker example retries a busy job and stops cleanly on SIGTERM', async () => {
  const db = `${DB}_worker`;
  const pool = await setUp(db);
  try {
    const states = async (jobId) => (await jg.attempts(pool, jobId)).map((a) => a.state);
    const { jobId: busy } = await jg.submit(pool, { ownerId: 'shop', idempotencyKey: randomUUID(),
      operation: 'send-email', params: { to: 'ann@example.com', busy: true }, provider: 'smtp' });
    const child = spawn(process.execPath, [WORKER], { env: { ...process.env, PGDATABASE: db } });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    try {
      await waitFor(async () => (await states(busy)).join() === 'failed,succeeded', 15000,
        'the retried job');
      const slow = (await jg.submitMany(pool, [0, 1, 2].map((i) => ({ ownerId: 'shop',
        idempotencyKey: randomUUID(), operation: 'send-email',
        params: { to: `u${i}@example.com`, seconds: 1.5 }, provider: 'smtp' }))))
        .map((r) => r.job_id);   // one statement: one batch
      await waitFor(async () => (await states(slow[0])).join() === 'started', 10000,
        'the first slow job to start');
      await new Promise((r) => setTimeout(r, 300));
      child.kill('SIGTERM');
      const { code, signal } = await exited;
      assert.deepEqual([code, signal], [0, null], err);
      assert.deepEqual(out.trim().split('\n').filter((l) => l.startsWith('sent ')), [`sent ${busy} to ann@example.com`,
        `sent ${slow[0]} to u0@example.com`]);
      const after = [];
      for (const jobId of slow) after.push(await states(jobId));
      assert.deepEqual(after, [['succeeded'], ['cancelled'], ['cancelled']]);
      assert.deepEqual((await jg.job(pool, busy)).result, { sent_to: 'ann@example.com' });
      assert.match(out + err, /SIGTERM received/);
      assert.equal((await jg.attempts(pool, busy))[0].error, 'RetryLater: mail server busy');
    } finally {
      child.kill('SIGKILL');
    }
  } finally {
    await tearDown(pool, db);
  }
});

const DRAIN = path.join(__dirname, '..', 'examples', 'drain.js');

test('the README\'s hand-written loop is the tested file', () => {
  assert.equal(docBlock('<!-- example: clients/node/examples/drain.js -->',
    path.join(__dirname, '..', 'README.md')), fs.readFileSync(DRAIN, 'utf8'));
});

test('the drain loop drains more jobs than a batch, each once', async () => {
  const db = `${DB}_drain`;
  const pool = await setUp(db);
  try {
    const jobs = (await jg.submitMany(pool, Array.from({ length: 250 }, (_, n) => ({
      ownerId: 'shop', idempotencyKey: randomUUID(), operation: 'charge', params: { n },
      provider: 'main-psp' })))).map((r) => r.job_id);
    const { jobId: busy } = await jg.submit(pool, { ownerId: 'shop', idempotencyKey: randomUUID(),
      operation: 'charge', params: { in_progress: true }, provider: 'main-psp' });
    const { stdout } = await promisify(execFile)(process.execPath, [DRAIN],
      { env: { ...process.env, PGDATABASE: db }, timeout: 120000 });
    assert.deepEqual(stdout.trim().split('\n'), ['drained 251']);
    const { rows } = await pool.query(`SELECT j.job_id::int AS id, j.state, j.result, a.n, a.key
        FROM jobguard.job_overview j,
             LATERAL (SELECT count(*)::int AS n, max(to_jsonb(x) ->> 'provider_key') AS key
                        FROM jobguard.attempt_overview x WHERE x.job_id = j.job_id) a
       WHERE j.job_id = ANY ($1::bigint[])`, [jobs]);
    assert.equal(rows.length, 250);
    for (const r of rows) {
      assert.deepEqual([r.state, r.n], ['succeeded', 1], `job ${r.id}`);
      const result = { charge_id: `ch_${r.id}` };
      if (r.key !== null) result.key = r.key;   // a 1.1-shaped claim has no provider_key
      assert.deepEqual(r.result, result);
    }
    assert.deepEqual((await jg.attempts(pool, busy)).map((a) => a.state), ['unknown']);
  } finally {
    await tearDown(pool, db);
  }
});
