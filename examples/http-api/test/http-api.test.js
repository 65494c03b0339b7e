'use strict';
// End to end: a throwaway database, the real service in a child process,
// real HTTP requests.  Needs PGHOST/PGPORT/PGUSER of a cluster where
// jobguard is installed; creates and drops its own database.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { Client } = require('pg');

const DB = process.env.JG_HTTP_DB || 'jg_examples_http';
let server, base, db;

async function admin(sql) {
  const c = new Client({ database: 'postgres' });
  await c.connect();
  try { await c.query(sql); } finally { await c.end(); }
}

test.before(async () => {
  await admin(`DROP DATABASE IF EXISTS ${DB}`);
  await admin(`CREATE DATABASE ${DB}`);
  db = new Client({ database: DB });
  await db.connect();
  await db.query('CREATE EXTENSION jobguard');
  // what the operator sets up once: the charge contract, a certified fallback
  await db.query(`SELECT jobguard.define_operation('charge',
    '{"type": "object", "required": ["charge_id"], "properties": {"charge_id": {"type": "string"}}}')`);
  await db.query(`SELECT jobguard.certify_provider('charge', 'backup-psp', '{"suite": "charge-contract", "passed": 42}')`);

  server = spawn(process.execPath, [path.join(__dirname, '..', 'server.js')], {
    env: { ...process.env, PGDATABASE: DB, PORT: '0', HOST: '127.0.0.1' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  base = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[0-9.]+:[0-9]+)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
});

test.after(async () => {
  if (server) {
    const exited = new Promise((r) => server.once('exit', r));
    server.kill('SIGTERM');
    await exited;
  }
  if (db) await db.end();
  await admin(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
});

async function call(method, url, { body, headers = {} } = {}) {
  const res = await fetch(base + url, {
    method,
    headers: { 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}

const charge = (amount) => ({ operation: 'charge', params: { amount, currency: 'EUR' }, provider: 'main-psp' });
const submit = (owner, key, body) =>
  call('POST', '/jobs', { body, headers: { 'Idempotency-Key': key, 'X-Owner-Id': owner } });
const begin = (jobId, body = {}) => call('POST', `/jobs/${jobId}/attempts`, { body });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('missing Idempotency-Key: 400, nothing stored', async () => {
  const r = await call('POST', '/jobs', { body: charge(5), headers: { 'X-Owner-Id': 'nokey' } });
  assert.equal(r.status, 400);
  assert.equal(r.body.title, 'idempotency_key_missing');
  const n = await db.query(`SELECT count(*)::int AS n FROM jobguard.jobs WHERE owner_id = 'nokey'`);
  assert.equal(n.rows[0].n, 0);
});

test('double-click: 10 concurrent identical POSTs are one job', async () => {
  const rs = await Promise.all(Array.from({ length: 10 }, () => submit('alice', 'click-1', charge(1999))));
  const statuses = rs.map((r) => r.status).sort();
  assert.deepEqual(statuses, [200, 200, 200, 200, 200, 200, 200, 200, 200, 201]);
  const ids = new Set(rs.map((r) => r.body.job_id));
  assert.equal(ids.size, 1, 'every response names the same job');
  for (const r of rs) {
    assert.equal(r.headers.get('idempotent-replayed'), r.status === 200 ? 'true' : null);
    assert.equal(r.headers.get('location'), `/jobs/${r.body.job_id}`);
    assert.equal(r.body.state, 'pending');
  }
  const n = await db.query(
    `SELECT count(*)::int AS n FROM jobguard.jobs WHERE owner_id = 'alice' AND idempotency_key = 'click-1'`);
  assert.equal(n.rows[0].n, 1, 'one row in jobguard.jobs');
  // a later replay, whatever the job's state, is still 200 with the same job
  const again = await submit('alice', 'click-1', charge(1999));
  assert.equal(again.status, 200);
  assert.equal(again.body.job_id, [...ids][0]);
});

test('same key, different body: 422 JG001, the job is untouched', async () => {
  const first = await submit('bob', 'order-7', charge(500));
  assert.equal(first.status, 201);
  const r = await submit('bob', 'order-7', charge(501));
  assert.equal(r.status, 422);
  assert.equal(r.body.sqlstate, 'JG001');
  const job = await call('GET', `/jobs/${first.body.job_id}`);
  assert.deepEqual(job.body.params, { amount: 500, currency: 'EUR' });
  // the same key for another owner is another job
  const other = await submit('carol', 'order-7', charge(501));
  assert.equal(other.status, 201);
  assert.notEqual(other.body.job_id, first.body.job_id);
});

test('invalid arguments are 400 (22004, 22023), unknown ids 404 (JG008, JG009)', async () => {
  let r = await submit('dave', 'k1', { params: {}, provider: 'main-psp' });   // no operation
  assert.equal(r.status, 400);
  assert.equal(r.body.sqlstate, '22004');
  r = await submit('dave', 'k1', { ...charge(1), operation: '' });
  assert.equal(r.status, 400);
  assert.equal(r.body.sqlstate, '22023');
  r = await submit('dave', 'k1', { ...charge(1), max_attempts: 0 });
  assert.equal(r.status, 400);
  assert.equal(r.body.sqlstate, '22023');
  r = await call('POST', '/jobs', { body: '{"operation": ', headers: { 'Idempotency-Key': 'k', 'X-Owner-Id': 'dave' } });
  assert.equal(r.status, 400);
  assert.equal(r.body.title, 'invalid_json');

  r = await call('GET', '/jobs/987654');
  assert.equal(r.status, 404);
  assert.equal(r.body.sqlstate, 'JG008');
  r = await begin(987654);
  assert.equal(r.status, 404);
  assert.equal(r.body.sqlstate, 'JG008');
  r = await call('POST', '/attempts/987654/finish', { body: { charge_id: 'x' } });
  assert.equal(r.status, 404);
  assert.equal(r.body.sqlstate, 'JG009');

  const job = (await submit('dave', 'k2', charge(1))).body;
  r = await begin(job.job_id, { timeout_seconds: 0 });
  assert.equal(r.status, 400);
  assert.equal(r.body.sqlstate, '22023');
  const a = (await begin(job.job_id)).body;
  r = await call('POST', `/attempts/${a.attempt_id}/finish`);   // no result
  assert.equal(r.status, 400);
  assert.equal(r.body.sqlstate, '22004');
});

test('attempt in flight: 409 JG002 naming the open attempt; attempt_key replays it', async () => {
  const job = (await submit('erin', 'pay-1', charge(42))).body;
  const a1 = await begin(job.job_id, { attempt_key: 'worker-a:1' });
  assert.equal(a1.status, 201);
  assert.equal(a1.body.attempt_no, 1);
  assert.equal(a1.body.state, 'started');
  const blocked = await begin(job.job_id);
  assert.equal(blocked.status, 409);
  assert.equal(blocked.body.sqlstate, 'JG002');
  assert.equal(blocked.body.blocking_attempt.attempt_id, a1.body.attempt_id);
  // the same worker retrying its own begin gets its own attempt back
  const replay = await begin(job.job_id, { attempt_key: 'worker-a:1' });
  assert.equal(replay.status, 200);
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(replay.body.attempt_id, a1.body.attempt_id);
  const fin = await call('POST', `/attempts/${a1.body.attempt_id}/finish`, { body: { charge_id: 'ch_1' } });
  assert.equal(fin.status, 200);
  assert.equal(fin.body.outcome, 'won');
  // finished: the job is closed (409 JG003), a replayed POST /jobs still answers 200
  const closed = await begin(job.job_id);
  assert.equal(closed.status, 409);
  assert.equal(closed.body.sqlstate, 'JG003');
  const again = await submit('erin', 'pay-1', charge(42));
  assert.equal(again.status, 200);
  assert.equal(again.body.state, 'succeeded');
  assert.deepEqual(again.body.result, { charge_id: 'ch_1' });
});

test('timeout is unknown, not failed, and keeps the gate shut until cancelled', async () => {
  const job = (await submit('frank', 'slow-1', charge(7))).body;
  const a = (await begin(job.job_id, { timeout_seconds: 0.2 })).body;
  await sleep(1200);   // well past the deadline, even on a busy machine
  let j = (await call('GET', `/jobs/${job.job_id}`)).body;
  assert.equal(j.state, 'unknown');
  assert.equal(j.attempts_list[0].state, 'unknown');
  const blocked = await begin(job.job_id);
  assert.equal(blocked.status, 409);
  assert.equal(blocked.body.sqlstate, 'JG002');
  // the caller saw its timeout: record it (idempotent)
  for (let i = 0; i < 2; i++) {
    const u = await call('POST', `/attempts/${a.attempt_id}/unknown`);
    assert.equal(u.status, 200);
    assert.equal(u.body.state, 'unknown');
  }
  // a supervisor stops waiting: cancel opens the gate
  const c = await call('POST', `/attempts/${a.attempt_id}/cancel`, { body: { reason: 'stuck for 1 s' } });
  assert.equal(c.status, 200);
  assert.equal(c.body.state, 'cancelled');
  j = (await call('GET', `/jobs/${job.job_id}`)).body;
  assert.equal(j.state, 'pending');
  // cancelling again is not a transition the state table allows
  const twice = await call('POST', `/attempts/${a.attempt_id}/cancel`, { body: { reason: 'again' } });
  assert.equal(twice.status, 409);
  assert.equal(twice.body.sqlstate, 'JG006');
});

test('fallback: only to a certified provider (422 JG004), then reverse-order finish', async () => {
  const job = (await submit('gina', 'fallback-1', charge(99))).body;
  const primary = (await begin(job.job_id, { timeout_seconds: 600 })).body;       // leaves first
  await call('POST', `/attempts/${primary.attempt_id}/unknown`);                   // caller timed out
  await call('POST', `/attempts/${primary.attempt_id}/cancel`, { body: { reason: 'failing over' } });

  const uncertified = await begin(job.job_id, { provider: 'cheap-psp' });
  assert.equal(uncertified.status, 422);
  assert.equal(uncertified.body.sqlstate, 'JG004');
  const fallback = await begin(job.job_id, { provider: 'backup-psp' });           // leaves second
  assert.equal(fallback.status, 201);
  assert.equal(fallback.body.provider, 'backup-psp');
  assert.equal(fallback.body.attempt_no, 2);

  // the fallback returns first and wins ...
  const won = await call('POST', `/attempts/${fallback.body.attempt_id}/finish`, { body: { charge_id: 'bk_2' } });
  assert.equal(won.body.outcome, 'won');
  // ... the primary returns last and loses, its result kept for the refund
  const lost = await call('POST', `/attempts/${primary.attempt_id}/finish`, { body: { charge_id: 'mn_1' } });
  assert.equal(lost.status, 200);
  assert.equal(lost.body.outcome, 'lost');
  assert.equal(lost.body.attempt.lost_to, fallback.body.attempt_id);
  assert.deepEqual(lost.body.attempt.lost_result, { charge_id: 'mn_1' });
  // a repeated identical report changes nothing; a different one is 422 JG007
  const repeat = await call('POST', `/attempts/${primary.attempt_id}/finish`, { body: { charge_id: 'mn_1' } });
  assert.equal(repeat.body.outcome, 'lost');
  const changed = await call('POST', `/attempts/${primary.attempt_id}/finish`, { body: { charge_id: 'mn_X' } });
  assert.equal(changed.status, 422);
  assert.equal(changed.body.sqlstate, 'JG007');

  const j = (await call('GET', `/jobs/${job.job_id}`)).body;
  assert.equal(j.state, 'succeeded');
  assert.equal(j.completed_by, fallback.body.attempt_id);
  assert.deepEqual(j.result, { charge_id: 'bk_2' });
  assert.deepEqual(j.attempts_list.map((a) => [a.attempt_no, a.provider, a.state]),
    [[1, 'main-psp', 'lost'], [2, 'backup-psp', 'succeeded']]);
});

test('concurrent finishes of two attempts: exactly one won', async () => {
  const job = (await submit('hugo', 'race-1', charge(3))).body;
  const a1 = (await begin(job.job_id)).body;
  await call('POST', `/attempts/${a1.attempt_id}/cancel`, { body: { reason: 'failing over' } });
  const a2 = (await begin(job.job_id, { provider: 'backup-psp' })).body;
  const [r1, r2] = await Promise.all([
    call('POST', `/attempts/${a1.attempt_id}/finish`, { body: { charge_id: 'mn' } }),
    call('POST', `/attempts/${a2.attempt_id}/finish`, { body: { charge_id: 'bk' } }),
  ]);
  assert.deepEqual([r1.body.outcome, r2.body.outcome].sort(), ['lost', 'won']);
});

test('rejected result, failure and exhausted attempts', async () => {
  const job = (await submit('ivan', 'limited-1', { ...charge(8), max_attempts: 2 })).body;
  const a1 = (await begin(job.job_id)).body;
  const rej = await call('POST', `/attempts/${a1.attempt_id}/finish`, { body: { charge: 42 } });
  assert.equal(rej.status, 200);
  assert.equal(rej.body.outcome, 'rejected');
  assert.equal(rej.body.attempt.state, 'failed');
  const a2 = (await begin(job.job_id)).body;
  const f = await call('POST', `/attempts/${a2.attempt_id}/fail`, { body: { error: 'card declined' } });
  assert.equal(f.status, 200);
  assert.equal(f.body.state, 'failed');
  const again = await call('POST', `/attempts/${a2.attempt_id}/fail`, { body: { error: 'card declined' } });
  assert.equal(again.status, 409);
  assert.equal(again.body.sqlstate, 'JG006');
  const noError = await call('POST', `/attempts/${a1.attempt_id}/fail`, {});
  assert.equal(noError.status, 400);
  assert.equal(noError.body.sqlstate, '22004');
  const exhausted = await begin(job.job_id);
  assert.equal(exhausted.status, 409);
  assert.equal(exhausted.body.sqlstate, 'JG005');
  const j = (await call('GET', `/jobs/${job.job_id}`)).body;
  assert.equal(j.state, 'failed');
});
