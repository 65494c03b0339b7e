'use strict';
// The console over HTTP, without a browser: who may do what (a reader, a
// client of another scope and a signed-out visitor get 403 from the
// console and the database's own refusal on every action), a forged
// cross-site POST, the read-only mode, bad input, the refresh floor, a
// panel that timed out, keyset pagination, the sub-path, the headers.
// Every refused request is checked to have changed nothing.

const test = require('node:test');
const assert = require('node:assert/strict');
const { admin, startConsole, request, post, signIn, sqlstateOf } = require('../testlib/harness');
const { freshDatabase, PASSWORD } = require('../testlib/seed');

let db;
let ids;
let rw; // a console with --allow-actions
let ro; // a read-only console
const cookies = {};

// snapshot: what every action could change, to compare before and after.
async function snapshot() {
  const q = async (text) => JSON.stringify((await db.query(text)).rows);
  return [
    await q('SELECT id, state, cancel_reason FROM jobguard.attempts ORDER BY id'),
    await q('SELECT id, max_attempts, cancelled_at FROM jobguard.jobs ORDER BY id'),
    await q('SELECT * FROM jobguard.provider_policies ORDER BY provider'),
    ids.v13.lostResults ? await q('SELECT attempt_id, refunded_at, refund_reference FROM jobguard.lost_results ORDER BY attempt_id') : '',
  ].join('\n');
}

// every action the console has, as the form a page would post, and the
// SQL call that is the database's own answer to the same person
function everyAction() {
  const list = [
    { path: '/unknown/redrive', form: { attempt_id: ids.insideAttempt, reason: 'test' }, sql: ['SELECT jobguard.redrive_attempt($1)', [ids.insideAttempt]] },
    { path: '/unknown/cancel', form: { attempt_id: ids.insideAttempt, reason: 'test' }, sql: ['SELECT jobguard.cancel_attempt($1, $2)', [ids.insideAttempt, 'test']] },
    { path: '/jobs/cancel', form: { job_id: ids.insideJob, reason: 'test' }, sql: ['SELECT jobguard.cancel_job($1, $2)', [ids.insideJob, 'test']] },
    { path: '/failed/retry', form: { job_id: ids.failedJob, expected: 1, extra_attempts: 1, reason: 'test' }, sql: ['SELECT jobguard.retry_job($1, 1, $2)', [ids.failedJob, 'test']] },
  ];
  if (ids.v13.lostResults) list.push({ path: '/refunds/mark', form: { attempt_id: ids.lostAttempt, reference: 'R-1', reason: 'test' }, sql: ['SELECT jobguard.mark_refunded($1, $2)', [ids.lostAttempt, 'R-1']] });
  if (ids.v13.paused) list.push({ path: '/providers/pause', form: { provider: 'stripe', paused: 'true', reason: 'test' }, sql: ["SELECT jobguard.set_provider_policy('stripe', paused => true)", []] });
  return list;
}

test.before(async () => {
  ({ admin: db, ids } = await freshDatabase(admin, 'console_http'));
  rw = await startConsole({ allowActions: true, pageSize: 2, refreshFloorSeconds: 5, statementTimeoutMs: 500 });
  ro = await startConsole({});
  for (const role of ['olga', 'rita', 'cora', 'pete', 'carl', 'nobody']) cookies[role] = await signIn(rw.url, role, PASSWORD);
  cookies.olgaRo = await signIn(ro.url, 'olga', PASSWORD);
});

test.after(async () => {
  if (rw) await rw.close();
  if (ro) await ro.close();
  if (db) await db.end();
});

test('sign-in: PostgreSQL checks the password; a wrong one is refused by it', async () => {
  const r = await post(`${rw.url}/signin`, { user: 'olga', password: 'not-the-password' });
  assert.equal(r.status, 401);
  assert.match(r.body, /PostgreSQL refused that role and password/);
  assert.equal(r.headers['set-cookie'], undefined);
  assert.equal(await sqlstateOf('olga', 'not-the-password', 'SELECT 1').catch((e) => e.code), '28P01');
});

test('a signed-out visitor: pages send to sign-in, every action is 403 and changes nothing', async () => {
  const page = await request('GET', `${rw.url}/unknown?provider=stripe`);
  assert.equal(page.status, 303);
  assert.equal(page.headers.location, '/signin?next=%2Funknown%3Fprovider%3Dstripe');
  const before = await snapshot();
  for (const a of everyAction()) {
    const r = await post(`${rw.url}${a.path}`, a.form, null);
    assert.equal(r.status, 403, a.path);
    assert.match(r.body, /Sign in first/);
  }
  assert.equal(await snapshot(), before);
});

const WHO = { rita: 'a reader', cora: 'a client of another scope', nobody: 'a role with no grant' };
for (const [role, expected] of [['rita', ['42501']], ['cora', ['42501', 'JG008', 'JG009']], ['nobody', ['42501']]]) {
  test(`${WHO[role]} (${role}): 403 from the console and the database's own refusal on every action`, async () => {
    const before = await snapshot();
    for (const a of everyAction()) {
      const r = await post(`${rw.url}${a.path}`, a.form, cookies[role]);
      assert.equal(r.status, 403, `${role} ${a.path}: ${r.body}`);
      assert.match(r.body, /The database refused/);
      const code = await sqlstateOf(role, PASSWORD, ...a.sql);
      assert.ok(expected.includes(code), `${role} ${a.sql[0]}: ${code}`);
      assert.match(r.body, new RegExp(`data-sqlstate="${code}"`));
    }
    assert.equal(await snapshot(), before);
  });
}

test('a forged cross-site POST is refused, even with the operator signed in', async () => {
  const before = await snapshot();
  for (const site of ['cross-site', 'same-site', 'none']) {
    const r = await post(`${rw.url}/unknown/cancel`, { attempt_id: ids.insideAttempt, reason: 'forged' }, cookies.olga, site);
    assert.equal(r.status, 403, site);
    assert.match(r.body, /did not come from the console/);
  }
  // no Sec-Fetch-Site: only an Origin naming the console's own host passes
  const r = await request('POST', `${rw.url}/unknown/cancel`, { cookie: cookies.olga, form: { attempt_id: ids.insideAttempt, reason: 'forged' }, headers: { Origin: 'http://evil.example' } });
  assert.equal(r.status, 403);
  const bare = await request('POST', `${rw.url}/unknown/cancel`, { cookie: cookies.olga, form: { attempt_id: ids.insideAttempt, reason: 'forged' } });
  assert.equal(bare.status, 403);
  assert.equal(await snapshot(), before);
  assert.match(cookies.olga, /^jgconsole=/);
});

test('a role with no grant reads nothing: each panel says the database refused', async () => {
  const r = await request('GET', `${rw.url}/`, { cookie: cookies.nobody });
  assert.equal(r.status, 200);
  const refused = [...r.body.matchAll(/class="panel-refused"/g)].length;
  assert.equal(refused, 5);
  assert.doesNotMatch(r.body, /<td>stripe<\/td>/);
});

test('the session cookie is HttpOnly and SameSite=Strict', async () => {
  const r = await post(`${rw.url}/signin`, { user: 'rita', password: PASSWORD });
  assert.match(r.headers['set-cookie'][0], /; Path=\/; HttpOnly; SameSite=Strict/);
});

test('read-only console: every action refused at the entry point, for an operator too', async () => {
  const before = await snapshot();
  for (const a of everyAction()) {
    const r = await post(`${ro.url}${a.path}`, a.form, cookies.olgaRo);
    assert.equal(r.status, 403, a.path);
    assert.match(r.body, /read-only/);
  }
  const put = await request('PUT', `${ro.url}/unknown/cancel`, { cookie: cookies.olgaRo });
  assert.equal(put.status, 405);
  const page = await request('GET', `${ro.url}/unknown`, { cookie: cookies.olgaRo });
  assert.equal(page.status, 200);
  assert.match(page.body, /Read-only console/);
  assert.doesNotMatch(page.body, /<button type="submit">Redrive<\/button>/);
  assert.equal(await snapshot(), before);
});

test('bad input is 422 and writes nothing', async () => {
  const before = await snapshot();
  const cases = [
    ['/unknown/cancel', { attempt_id: ids.insideAttempt, reason: '   ' }, /needs a reason/],
    ['/unknown/redrive', { attempt_id: 'x', reason: 'r' }, /attempt_id must be/],
    ['/failed/retry', { job_id: ids.failedJob, expected: 1, extra_attempts: 0, reason: 'r' }, /Extra attempts/],
    ['/failed/retry', { extra_attempts: 1, reason: 'r' }, /dry run first/],
    ['/refunds/mark', { attempt_id: ids.lostAttempt, reference: '', reason: 'r' }, /reference/],
    ['/providers/pause', { provider: 'stripe', paused: 'maybe', reason: 'r' }, /paused must be/],
  ];
  for (const [path, form, said] of cases) {
    const r = await post(`${rw.url}${path}`, form, cookies.olga);
    assert.equal(r.status, 422, path);
    assert.match(r.body, said);
  }
  assert.equal(await snapshot(), before);
});

test('a retry takes exactly what its dry run counted, at most the cap', async () => {
  const dry = await request('GET', `${rw.url}/failed/retry?operation=pay`, { cookie: cookies.olga });
  assert.match(dry.body, /<strong>2<\/strong> failed jobs would be retried/);
  const before = await snapshot();
  const stale = await post(`${rw.url}/failed/retry`, { operation: 'pay', expected: 1, extra_attempts: 1, reason: 'r' }, cookies.olga);
  assert.equal(stale.status, 409);
  assert.match(stale.body, /counted 1 failed jobs; 2 match now/);
  const capped = await startConsole({ allowActions: true, retryCap: 1 });
  const c = await signIn(capped.url, 'olga', PASSWORD);
  const over = await request('GET', `${capped.url}/failed/retry?operation=pay`, { cookie: c });
  assert.match(over.body, /More than 1 failed jobs match/);
  assert.doesNotMatch(over.body, /<form method="post"/);
  const r = await post(`${capped.url}/failed/retry`, { operation: 'pay', expected: 2, extra_attempts: 1, reason: 'r' }, c);
  assert.equal(r.status, 422);
  await capped.close();
  assert.equal(await snapshot(), before);
});

test('the refresh floor: an interval below it is raised, a faster refresh is 429', async () => {
  const first = await request('GET', `${rw.url}/?refresh=1`, { cookie: cookies.pete });
  assert.equal(first.status, 200);
  assert.match(first.body, /<body data-refresh="5">/);
  const again = await request('GET', `${rw.url}/?refresh=1`, { cookie: cookies.pete });
  assert.equal(again.status, 429);
  assert.equal(again.headers['retry-after'], '5');
  const plain = await request('GET', `${rw.url}/`, { cookie: cookies.pete });
  assert.equal(plain.status, 200);
});

test('a query that runs past statement_timeout: its panel says so, the others show', async () => {
  const locker = await admin();
  await locker.query('BEGIN');
  await locker.query('LOCK TABLE jobguard.provider_policy IN ACCESS EXCLUSIVE MODE');
  try {
    const r = await request('GET', `${rw.url}/providers`, { cookie: cookies.olga });
    assert.equal(r.status, 200);
    assert.match(r.body, /<section aria-labelledby="policies-h" id="policies" class="panel-timeout">/);
    assert.match(r.body, /Timed out: the query ran longer than the console&#39;s statement_timeout \(500 ms\)/);
    assert.match(r.body, /<section aria-labelledby="certifications-h" id="certifications">/);
    assert.match(r.body, /<td>charge<\/td><td>adyen<\/td>/);
  } finally {
    await locker.query('ROLLBACK');
    await locker.end();
  }
});

test('keyset pagination: every unknown attempt once, in window order', async () => {
  let url = `${rw.url}/unknown`;
  const seen = [];
  for (let i = 0; i < 10 && url; i++) {
    const r = await request('GET', url, { cookie: cookies.olga });
    assert.equal(r.status, 200);
    seen.push(...[...r.body.matchAll(/action="\/unknown\/cancel"[^>]*>\s*<input type="hidden" name="attempt_id" value="(\d+)">/g)].map((m) => Number(m[1])));
    const next = /<a rel="next" href="([^"]+)">/.exec(r.body);
    url = next ? `http://127.0.0.1:${new URL(rw.url).port}${next[1].replace(/&amp;/g, '&')}` : null;
  }
  const expected = (await db.query(`SELECT attempt_id FROM jobguard.blocked_jobs
                                     ORDER BY COALESCE(redrivable_until, 'infinity'), attempt_id`)).rows.map((r) => Number(r.attempt_id));
  assert.ok(expected.length >= 5);
  assert.deepEqual(seen, expected);
  const bad = await request('GET', `${rw.url}/unknown?after=nonsense`, { cookie: cookies.olga });
  assert.equal(bad.status, 400);
});

test('payloads: hidden from a reader without the right, shown with it', async () => {
  const hidden = await request('GET', `${rw.url}/jobs/${ids.lostJob}`, { cookie: cookies.rita });
  assert.equal(hidden.status, 200);
  assert.doesNotMatch(hidden.body, /secret-card-token|ch_twice|ch_win/);
  assert.match(hidden.body, /hidden: your role may not read payloads/);
  const shown = await request('GET', `${rw.url}/jobs/${ids.lostJob}`, { cookie: cookies.pete });
  assert.match(shown.body, /secret-card-token/);
  assert.match(shown.body, /ch_twice/);
  const other = await request('GET', `${rw.url}/jobs/${ids.lostJob}`, { cookie: cookies.cora });
  assert.equal(other.status, 404);
  assert.doesNotMatch(other.body, /erin|secret-card-token/);
});

test('the ledger as CSV: the reader without payloads gets the rows, not the results', async () => {
  const hidden = await request('GET', `${rw.url}/refunds?status=all&format=csv`, { cookie: cookies.rita });
  assert.equal(hidden.status, 200);
  assert.match(hidden.headers['content-type'], /^text\/csv/);
  const rows = hidden.body.trim().split('\r\n');
  assert.equal(rows.length, 2);
  assert.match(rows[1], new RegExp(`^${ids.lostAttempt},${ids.lostJob},shop,erin,pay,stripe,[0-9a-f]+,,`));
  const shown = await request('GET', `${rw.url}/refunds?status=all&format=csv`, { cookie: cookies.pete });
  assert.match(shown.body, /"{""charge_id"":""ch_twice""}"/);
});

test('one click by owner and key: the job of that scope, or of the person\'s own', async () => {
  const r = await request('GET', `${rw.url}/intent?owner=erin&key=checkout-5&scope=shop`, { cookie: cookies.olga });
  assert.equal(r.status, 303);
  assert.equal(r.headers.location, `/jobs/${ids.lostJob}`);
  const own = await request('GET', `${rw.url}/intent?owner=erin&key=checkout-5`, { cookie: cookies.carl });
  assert.equal(own.headers.location, `/jobs/${ids.lostJob}`);
  const none = await request('GET', `${rw.url}/intent?owner=erin&key=checkout-5&scope=shop`, { cookie: cookies.cora });
  assert.equal(none.status, 200);
  assert.match(none.body, /No job of owner &quot;erin&quot; with key &quot;checkout-5&quot; in scope shop\./);
  const listed = await startConsole({ scopes: ['other', 'shop'] });
  try {
    const c = await signIn(listed.url, 'olga', PASSWORD);
    const found = await request('GET', `${listed.url}/intent?owner=erin&key=checkout-5`, { cookie: c });
    assert.equal(found.headers.location, `/jobs/${ids.lostJob}`);
  } finally {
    await listed.close();
  }
});

test('headers: a strict Content-Security-Policy; no inline script on any page', async () => {
  for (const p of ['/', '/unknown', '/blocked', '/failed', '/failed/retry', '/refunds', '/providers', '/actions', `/jobs/${ids.lostJob}`, '/intent', '/signin']) {
    const r = await request('GET', `${rw.url}${p}`, { cookie: cookies.olga });
    assert.equal(r.status, 200, p);
    assert.equal(r.headers['content-security-policy'],
      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'");
    assert.equal(r.headers['x-content-type-options'], 'nosniff');
    for (const m of r.body.matchAll(/<script([^>]*)>/g)) assert.match(m[1], /src="[^"]+console\.js"/, p);
    assert.doesNotMatch(r.body, /\son[a-z]+=/i, p);
    assert.doesNotMatch(r.body, /style="/, p);
  }
});

test('under a sub-path: every link and the cookie under it', async () => {
  const sub = await startConsole({ basePath: '/ops/jobguard' });
  try {
    const outside = await request('GET', sub.url.replace('/ops/jobguard', '/unknown'));
    assert.equal(outside.status, 404);
    const first = await request('GET', `${sub.url}/unknown`);
    assert.equal(first.headers.location, '/ops/jobguard/signin?next=%2Funknown');
    const r = await post(`${sub.url}/signin`, { user: 'olga', password: PASSWORD, next: '/failed' });
    assert.equal(r.headers.location, '/ops/jobguard/failed');
    assert.match(r.headers['set-cookie'][0], /Path=\/ops\/jobguard;/);
    const page = await request('GET', `${sub.url}/`, { cookie: r.headers['set-cookie'][0].split(';')[0] });
    assert.equal(page.status, 200);
    for (const m of page.body.matchAll(/(?:href|src|action)="([^"]+)"/g)) {
      if (m[1].startsWith('#')) continue;
      assert.match(m[1], /^\/ops\/jobguard\//, m[1]);
    }
    const css = await request('GET', `${sub.url}/static/console.css`);
    assert.equal(css.status, 200);
  } finally {
    await sub.close();
  }
});
