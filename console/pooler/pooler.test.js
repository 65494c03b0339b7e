'use strict';
// The console behind a transaction-mode pooler (console/run-tests starts
// Debian's pgbouncer in front of the cluster, one server connection per
// database and role, and points the consoles at it): signing in, two
// sessions of one role sharing that connection, requests at once, an
// action and its reason, a timed-out panel — and nothing a request set
// (statement_timeout, jobguard.action_reason) left on the shared
// connection for the next one.

const test = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const { admin, startConsole, request, post, signIn } = require('../testlib/harness');
const { freshDatabase, PASSWORD } = require('../testlib/seed');

let db;
let ids;
let rw;

test.before(async () => {
  ({ admin: db, ids } = await freshDatabase(admin, 'console_pooler'));
  rw = await startConsole({ allowActions: true, statementTimeoutMs: 700 });
});

test.after(async () => {
  if (rw) await rw.close();
  if (db) await db.end();
});

test('through the pooler: sign-in checks the password, two sessions of one role share its connection', async () => {
  const wrong = await post(`${rw.url}/signin`, { user: 'olga', password: 'wrong' });
  assert.equal(wrong.status, 401);
  const a = await signIn(rw.url, 'olga', PASSWORD);
  const b = await signIn(rw.url, 'olga', PASSWORD);
  const pages = ['/', '/unknown', '/blocked', '/failed', '/refunds', '/providers', '/actions', `/jobs/${ids.lostJob}`];
  const all = await Promise.all([...pages.map((p) => request('GET', `${rw.url}${p}`, { cookie: a })),
    ...pages.map((p) => request('GET', `${rw.url}${p}`, { cookie: b }))]);
  for (const r of all) {
    assert.equal(r.status, 200);
    assert.doesNotMatch(r.body, /class="panel-(error|timeout|refused|missing)"/);
  }
  const server = await db.query(`SELECT count(*)::int AS n FROM pg_catalog.pg_stat_activity
                                  WHERE usename = 'olga' AND datname = current_database()`);
  assert.equal(server.rows[0].n, 1);
});

test('through the pooler: an action, its reason recorded, nothing left on the connection', async () => {
  const c = await signIn(rw.url, 'olga', PASSWORD);
  const r = await post(`${rw.url}/unknown/redrive`, { attempt_id: ids.insideAttempt, reason: 'behind the pooler' }, c);
  assert.equal(r.status, 200, r.body);
  const act = await db.query("SELECT reason FROM jobguard.operator_actions WHERE action = 'redrive_attempt' ORDER BY id DESC LIMIT 1");
  assert.equal(act.rows[0].reason, 'behind the pooler');
  // the one server connection of olga, as the next client of the pool sees it
  const next = new pg.Client({ user: 'olga', password: PASSWORD });
  await next.connect();
  try {
    const s = await next.query(`SELECT pg_catalog.current_setting('statement_timeout') AS t,
                                       pg_catalog.current_setting('jobguard.action_reason', true) AS reason,
                                       pg_catalog.current_setting('jit') AS jit`);
    assert.equal(s.rows[0].t, '0');
    assert.ok(!s.rows[0].reason, s.rows[0].reason);
    assert.equal(s.rows[0].jit, 'on');
  } finally {
    await next.end();
  }
});

test('through the pooler: a panel past statement_timeout says so; the next request is whole', async () => {
  const c = await signIn(rw.url, 'olga', PASSWORD);
  const locker = await admin();
  await locker.query('BEGIN');
  await locker.query('LOCK TABLE jobguard.provider_policy IN ACCESS EXCLUSIVE MODE');
  try {
    const r = await request('GET', `${rw.url}/providers`, { cookie: c });
    assert.match(r.body, /id="policies" class="panel-timeout"/);
  } finally {
    await locker.query('ROLLBACK');
    await locker.end();
  }
  const again = await request('GET', `${rw.url}/providers`, { cookie: c });
  assert.doesNotMatch(again.body, /panel-timeout/);
  assert.match(again.body, /<span id="provider-stripe">stripe<\/span>/);
});
