'use strict';
// End to end: a throwaway database, the real service in a child process,
// real HTTP requests.  Needs PGHOST/PGPORT/PGUSER of a cluster where
// jobguard is installed; creates and drops its own database.  Every
// response is checked against the service's own OpenAPI document, which is
// first validated as OpenAPI 3.1.  JOBGUARD_TEST_RESTART (a command that
// restarts the cluster; make test exports it) enables the restart test.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { STATUS_CODES } = require('node:http');
const { Client } = require('pg');
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats').default;

const DB = process.env.JG_HTTP_DB || 'jg_examples_http';
let server, base, db, openapi, ajv;
const checked = { responses: 0 };

async function admin(sql) {
  const c = new Client({ database: 'postgres' });
  await c.connect();
  try { await c.query(sql); } finally { await c.end(); }
}

test.before(async () => {
  await admin(`DROP DATABASE IF EXISTS ${DB}`);
  await admin(`CREATE DATABASE ${DB}`);
  db = new Client({ database: DB });
  db.on('error', () => {});   // cut by the restart test; reconnected there
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

  // the OpenAPI document, validated as OpenAPI 3.1, then compiled so that
  // call() can check every response against it
  openapi = await (await fetch(`${base}/openapi.json`)).json();
  const { Validator } = await import('@seriousme/openapi-schema-validator');
  const verdict = await new Validator().validate(openapi);
  assert.ok(verdict.valid, `openapi.json is not valid OpenAPI 3.1: ${JSON.stringify(verdict.errors)}`);
  assert.equal(openapi.openapi, '3.1.0');
  ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema(openapi, 'openapi.json');
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

// pointer: a JSON Pointer segment.
const pointer = (s) => String(s).replace(/~/g, '~0').replace(/\//g, '~1');

// checkResponse: assert that a response is one the OpenAPI document
// describes (path, method, status, content type, body schema), and that a
// problem document's title is the status phrase.
function checkResponse(method, url, res, text) {
  const pathname = new URL(url, 'http://x').pathname;
  const template = Object.keys(openapi.paths).find((t) =>
    new RegExp(`^${t.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(pathname));
  const status = String(res.status);
  const op = template && openapi.paths[template][method.toLowerCase()];
  const where = `${method} ${url} -> ${status}`;
  if (!op && status === '404') {
    assert.equal(res.headers.get('content-type'), 'application/problem+json', where);   // no such route
  } else {
    assert.ok(op, `${where}: no operation in openapi.json`);
    let response = op.responses[status];
    assert.ok(response, `${where}: status not in openapi.json`);
    let refPath = `#/paths/${pointer(template)}/${method.toLowerCase()}/responses/${status}`;
    if (response.$ref) {
      refPath = response.$ref;
      response = response.$ref.split('/').slice(1).reduce((o, k) => o[k], openapi);
    }
    const type = (res.headers.get('content-type') || '').split(';')[0];
    assert.ok(response.content && response.content[type], `${where}: content type ${type} not in openapi.json`);
    if (type.endsWith('json')) {
      const validate = ajv.getSchema(`openapi.json${refPath}/content/${pointer(type)}/schema`);
      assert.ok(validate(JSON.parse(text)), `${where}: ${ajv.errorsText(validate.errors)}\n${text}`);
    }
  }
  if (res.status >= 400) {
    const problem = JSON.parse(text);
    assert.equal(problem.title, STATUS_CODES[res.status], `${where}: title is the status phrase`);
    assert.equal(problem.status, res.status);
    assert.match(problem.type, /^\/problems\/[a-z-]+$/);
  }
  checked.responses++;
}

// call: one HTTP request to the service, its response checked against
// openapi.json; resolves to { status, headers, body (parsed JSON or text) }.
async function call(method, url, { body, headers = {} } = {}) {
  const res = await fetch(base + url, {
    method,
    headers: { 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
  });
  const text = await res.text();
  checkResponse(method, url, res, text);
  const json = text && (res.headers.get('content-type') || '').includes('json');
  return { status: res.status, headers: res.headers, body: json ? JSON.parse(text) : text || undefined };
}

// charge: a request body; submit: POST /jobs; begin: POST /jobs/{id}/attempts
const charge = (amount) => ({ operation: 'charge', params: { amount, currency: 'EUR' }, provider: 'main-psp' });
const submit = (owner, key, body, headers = {}) =>
  call('POST', '/jobs', { body, headers: { 'Idempotency-Key': key, 'X-Owner-Id': owner, ...headers } });
const begin = (jobId, body = {}) => call('POST', `/jobs/${jobId}/attempts`, { body });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('missing Idempotency-Key: 400, nothing stored', async () => {
  const r = await call('POST', '/jobs', { body: charge(5), headers: { 'X-Owner-Id': 'nokey' } });
  assert.equal(r.status, 400);
  assert.equal(r.body.type, '/problems/missing-idempotency-key');
  assert.equal(r.body.title, 'Bad Request');
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
  assert.equal(r.body.type, '/problems/idempotency-key-reused');
  assert.equal(r.body.title, 'Unprocessable Entity');
  assert.equal(r.body.condition, 'idempotency_key_reused');
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
  assert.equal(r.body.type, '/problems/invalid-json');

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

test('Idempotency-Key is a Structured Field: "k" and k are one key, bad syntax is 400', async () => {
  const quoted = await submit('sf', '"k-2"', charge(12));
  assert.equal(quoted.status, 201);
  assert.equal(quoted.body.idempotency_key, 'k-2');
  const bare = await submit('sf', 'k-2', charge(12));
  assert.equal(bare.status, 200);
  assert.equal(bare.body.job_id, quoted.body.job_id);
  const params = await submit('sf', '"k-2";trace=abc', charge(12));
  assert.equal(params.body.job_id, quoted.body.job_id);
  const escaped = await submit('sf', '"say \\"hi\\""', charge(12));
  assert.equal(escaped.status, 201);
  assert.equal(escaped.body.idempotency_key, 'say "hi"');
  for (const bad of ['"k-2', 'k-2 x', '1abc', '"a\\x"', 'a, b', '']) {
    const r = await submit('sf', bad, charge(12));
    assert.equal(r.status, 400, `Idempotency-Key: ${bad}`);
    assert.equal(r.body.type, '/problems/invalid-idempotency-key');
  }
  const n = await db.query(`SELECT count(*)::int AS n FROM jobguard.jobs WHERE owner_id = 'sf'`);
  assert.equal(n.rows[0].n, 2);
});

test('problem types dereference to their description; /openapi.json is served', async () => {
  const r = await call('GET', '/problems/attempt-in-flight');
  assert.equal(r.status, 200);
  assert.match(r.body, /JG002/);
  assert.equal((await call('GET', '/problems/no-such-type')).status, 404);
  const doc = await call('GET', '/openapi.json');
  assert.equal(doc.body.openapi, '3.1.0');
});

test('a concurrent identical submit waits and gets 200; with Prefer: wait=0 it gets 409', async () => {
  // another request with the same key, still in progress: its transaction
  // has inserted the job and not committed yet
  const other = new Client({ database: DB });
  await other.connect();
  try {
    await other.query('BEGIN');
    await other.query(`SELECT jobguard.submit('pat', 'slow-1', 'charge', '{"amount": 4, "currency": "EUR"}', 'main-psp')`);
    const now = await submit('pat', 'slow-1', { ...charge(4) }, { Prefer: 'wait=0' });
    assert.equal(now.status, 409);
    assert.equal(now.body.type, '/problems/request-in-progress');
    assert.equal(now.body.sqlstate, '55P03');
    assert.equal(now.headers.get('preference-applied'), 'wait=0');
    let settled = false;
    const waiting = submit('pat', 'slow-1', charge(4)).finally(() => { settled = true; });
    await sleep(500);
    assert.equal(settled, false, 'without Prefer: wait=0 the request waits');
    await other.query('COMMIT');
    const r = await waiting;
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('idempotent-replayed'), 'true');
    const after = await submit('pat', 'slow-1', charge(4), { Prefer: 'wait=0' });
    assert.equal(after.status, 200, 'nothing in progress: wait=0 changes nothing');
  } finally {
    await other.end();
  }
});

test('the service survives a database restart and answers again within seconds',
  { skip: !process.env.JOBGUARD_TEST_RESTART && 'JOBGUARD_TEST_RESTART is not set (make test sets it)', timeout: 120000 },
  async () => {
    // warm the pool: several idle connections for the restart to cut
    await Promise.all(Array.from({ length: 5 }, (_, i) => submit('rita', `before-${i}`, charge(i + 1))));
    const pid = server.pid;
    const backends = async (c) => (await c.query(`SELECT pid FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid()
        AND backend_type = 'client backend'`)).rows.map((x) => x.pid);
    const serviceBefore = await backends(db);
    assert.ok(serviceBefore.length >= 1, 'the service holds connections to cut');
    const { rows: [{ started: startedBefore }] } = await db.query(
      'SELECT pg_postmaster_start_time()::text AS started');
    // one request held in flight across the restart: its INSERT waits for
    // a lock held by a prepared transaction, so the restart cuts it
    // mid-statement.  (A session's lock would not do: a fast shutdown ends
    // every backend at once, and when the holder ends first the held INSERT
    // can commit before its own backend is told to end.)  The prepared
    // transaction outlives the restart and is rolled back after it.
    const LOCK_GID = 'jobguard-http-api-restart';
    const locker = new Client({ database: DB });
    await locker.connect();
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE jobguard.jobs IN SHARE MODE');
    await locker.query(`PREPARE TRANSACTION '${LOCK_GID}'`);
    await locker.end();
    // releaseLock: roll the prepared transaction back (on a new connection:
    // the restart cut every old one), and wait for it to be gone
    const releaseLock = async () => {
      const c = new Client({ database: DB });
      c.on('error', () => {});
      await c.connect();
      try {
        await c.query(`SELECT 1 FROM pg_prepared_xacts WHERE gid = $1`, [LOCK_GID])
          .then(({ rowCount }) => rowCount && c.query(`ROLLBACK PREPARED '${LOCK_GID}'`));
      } finally {
        await c.end().catch(() => {});
      }
    };
    let cutRequest;
    try {
      cutRequest = submit('rita', 'cut-1', charge(7));
      const end = Date.now() + 20000;
      for (;;) {
        const { rows } = await db.query(`SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'`);
        if (rows[0].n > 0) break;
        assert.ok(Date.now() < end, 'the held request never waited for the lock');
        await sleep(20);
      }
    } catch (err) {
      await releaseLock();
      throw err;
    }
    // requests while the cluster restarts: each gets an answer (503 while
    // the database is down), none hangs and the service does not die
    let restarting = true;
    const during = [];
    const load = (async () => {
      for (let i = 0; restarting; i++) {
        const body = charge(i + 1);
        during.push({ key: `during-${i}`, body, r: await submit('rita', `during-${i}`, body) });
        await sleep(20);
      }
    })();
    // stdio ignored: the restarted server must not hold our pipes open
    const code = await new Promise((resolve) => spawn(process.env.JOBGUARD_TEST_RESTART,
      { shell: true, stdio: 'ignore' }).on('exit', resolve));
    // the lock goes before anything can fail, so that no later test waits
    // for it; requests of the load that reached the restarted server wait
    // for it until then
    await releaseLock();
    assert.equal(code, 0, 'the restart command failed');
    restarting = false;
    await load;
    // the restart cut the held request: it was answered 503, not hung
    const cut = await cutRequest;
    assert.equal(cut.status, 503, `the cut request got ${cut.status}: ${JSON.stringify(cut.body)}`);
    assert.equal(cut.body.type, '/problems/database-unavailable');
    for (const { r } of during) assert.ok([200, 201, 503].includes(r.status), `got ${r.status}`);
    for (const { r } of during.filter((x) => x.r.status === 503)) {
      assert.equal(r.body.type, '/problems/database-unavailable');
      assert.equal(r.headers.get('retry-after'), '1');
    }
    const restartedAt = Date.now();
    let r;
    for (;;) {
      r = await submit('rita', 'after', charge(99));
      if (r.status === 201 || Date.now() - restartedAt > 10000) break;
      await sleep(100);
    }
    assert.equal(r.status, 201, `answered ${r.status} for 10 s after the restart: ${JSON.stringify(r.body)}`);
    assert.ok(Date.now() - restartedAt < 10000);
    assert.equal(server.exitCode, null, 'the service is still running');
    assert.equal(server.pid, pid);
    // the test's own connection was cut too: reconnect it for the rest
    await db.end().catch(() => {});
    db = new Client({ database: DB });
    db.on('error', () => {});
    await db.connect();
    // the server really restarted, and none of the service's connections
    // from before it survived
    const { rows: [{ started: startedAfter }] } = await db.query(
      'SELECT pg_postmaster_start_time()::text AS started');
    assert.notEqual(startedAfter, startedBefore, 'the postmaster was restarted');
    const serviceAfter = await backends(db);
    assert.deepEqual(serviceBefore.filter((p) => serviceAfter.includes(p)), [],
      'a connection of the service survived the restart');
    // the cut request, sent again with its key, makes the one job for it
    // (201: its INSERT never committed); every key of the restart has one job
    const again = await submit('rita', 'cut-1', charge(7));
    assert.equal(again.status, 201, `the cut request, sent again: ${again.status}`);
    for (const { key, body, r: first } of [{ key: 'cut-1', body: charge(7), r: again }, ...during]) {
      const retried = first.status === 503 ? await submit('rita', key, body) : first;
      assert.ok([200, 201].includes(retried.status), `${key}: ${retried.status}`);
      const { rows: [{ n }] } = await db.query(`SELECT count(*)::int AS n FROM jobguard.jobs
        WHERE owner_id = 'rita' AND idempotency_key = $1`, [key]);
      assert.equal(n, 1, `key ${key}: ${n} jobs`);
    }
    const job = await call('GET', `/jobs/${r.body.job_id}`);
    assert.equal(job.status, 200);
  });

test('every response of this suite was checked against openapi.json', () => {
  assert.ok(checked.responses > 50, `only ${checked.responses} responses checked`);
});
