'use strict';
// The console in a real browser: Debian's chromium, headless, driven by
// playwright-core, against a database seeded with every scenario.  Each
// page is opened as the operator, its content checked, axe-core run on it
// (no serious or critical violation) and a screenshot written into
// doc/console/; each action is clicked through and its effect checked in
// the database; a form on another site posting to the console is refused;
// the UTC/local choice is remembered; payloads are hidden from a reader.
// At the end doc/console.md is generated from the screenshots made.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { chromium } = require('playwright-core');
const { admin, startConsole } = require('../testlib/harness');
const { freshDatabase, PASSWORD } = require('../testlib/seed');
const { writeDoc, SHOTS_DIR } = require('../gen-doc');

const AXE = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
const shots = [];
let db;
let ids;
let rw;
let browser;
let context;
let page;
let evil;

// signInAs: sign the page in as role (through the sign-in form).
async function signInAs(p, role, next = '/') {
  await p.goto(`${rw.url}/signin?next=${encodeURIComponent(next)}`);
  await p.fill('#user', role);
  await p.fill('#password', PASSWORD);
  await Promise.all([p.waitForNavigation(), p.click('form.signin button[type="submit"]')]);
}

// axe: run axe-core on the page; fails on a serious or critical violation.
async function axe(p, label) {
  await p.evaluate(AXE);
  const result = await p.evaluate(() => globalThis.axe.run(document, { resultTypes: ['violations'] }));
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`), [], `axe on ${label}`);
}

// shoot: the page's screenshot into doc/console/<name>.png.
async function shoot(p, name, title) {
  await p.screenshot({ path: path.join(SHOTS_DIR, `${name}.png`), fullPage: true });
  shots.push({ name, title, path: new URL(p.url()).pathname + new URL(p.url()).search });
}

// row: the table row of the page that holds text.
function row(p, text) {
  return p.locator('tr', { hasText: text });
}

// one: the one value of a query.
async function one(text, values) {
  return (await db.query(text, values)).rows[0];
}

test.before(async () => {
  ({ admin: db, ids } = await freshDatabase(admin, 'console_browser'));
  // the sweeper counts the blocked jobs (stats() blocked.jobs) each round
  for (let i = 0; i < 100; i++) {
    if (Number((await one("SELECT value FROM jobguard.stats() WHERE metric = 'blocked.jobs'")).value) === 2) break;
    await new Promise((r) => setTimeout(r, 300));
  }
  rw = await startConsole({ allowActions: true, refreshFloorSeconds: 5 });
  fs.mkdirSync(SHOTS_DIR, { recursive: true });
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
  context = await browser.newContext({ timezoneId: 'Asia/Kolkata', viewport: { width: 1440, height: 900 }, acceptDownloads: true });
  page = await context.newPage();
  // a script error or a refusal by the Content-Security-Policy
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(e.message));
  page.on('console', (m) => { if (/Content.Security.Policy|Refused to/i.test(m.text())) page.problems.push(m.text()); });
  // another site's page with a form that posts to the console at once
  evil = http.createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html' });
    res.end(`<!DOCTYPE html><html lang="en"><title>x</title><form id="f" method="post" action="${rw.url}/unknown/cancel">
<input name="attempt_id" value="${ids.otherAttempt}"><input name="reason" value="forged"></form>
<script>document.getElementById('f').submit()</script></html>`);
  });
  await new Promise((r) => evil.listen(0, '127.0.0.1', r));
});

test.after(async () => {
  if (shots.length) writeDoc(shots);
  if (browser) await browser.close();
  if (evil) evil.close();
  if (rw) await rw.close();
  if (db) await db.end();
});

test('sign-in page: accessible; a signed-out visitor is sent to it', async () => {
  await page.goto(`${rw.url}/unknown`);
  assert.match(page.url(), /\/signin\?next=%2Funknown$/);
  await axe(page, 'sign-in');
  await shoot(page, 'signin', 'Sign in');
  await signInAs(page, 'olga');
  assert.equal(new URL(page.url()).pathname, '/');
});

test('the attention board: every scenario counted, every number a link to its list', async () => {
  await page.goto(`${rw.url}/`);
  const counts = page.locator('#counts');
  assert.match(await counts.innerText(), /5 jobs with an unknown attempt/);
  assert.match(await counts.innerText(), /2 jobs blocked at the gate/);
  assert.match(await counts.innerText(), /2 failed jobs/);
  assert.match(await row(page, 'stripe').first().innerText(), /stripe\s+3\s+3\s+0/);
  assert.match(await page.locator('#owed').innerText(), /^Lost results not yet refunded\s+1 results lost/);
  assert.match(await row(page, 'paypal').innerText(), /at max_in_flight/);
  assert.match(await row(page, 'klarna').innerText(), /paused/);
  assert.match(await page.locator('#stale').innerText(), /charge\s+adyen\s+1/);
  for (const a of await page.locator('main a.number').all()) {
    assert.match(await a.getAttribute('href'), /^\/(unknown|blocked|failed|refunds)(\?|$)/);
  }
  await axe(page, 'board');
  await shoot(page, 'board', 'The attention board');
  await Promise.all([page.waitForNavigation(), page.click('a[aria-label="2 jobs blocked at the gate"]')]);
  assert.equal(new URL(page.url()).pathname, '/blocked');
});

test('unknown: sorted by the end of the window, a live countdown, redrive only inside the window', async () => {
  await page.goto(`${rw.url}/unknown`);
  await axe(page, 'unknown');
  await shoot(page, 'unknown', 'Unknown attempts and their redrive windows');
  const first = row(page, `bob / checkout-2`);
  assert.match(await first.innerText(), /window ended at/);
  assert.equal(await first.locator('form[action="/unknown/redrive"] button').isDisabled(), true);
  assert.match(await first.locator('form[action="/unknown/redrive"]').innerText(), /the window has ended/);
  const mailer = row(page, 'carol / receipt-3');
  assert.match(await mailer.innerText(), /does not deduplicate/);
  assert.equal(await mailer.locator('form[action="/unknown/redrive"] button').isDisabled(), true);
  const inside = row(page, 'alice / checkout-1');
  assert.equal(await inside.locator('form[action="/unknown/redrive"] button').isDisabled(), false);
  const before = await inside.locator('.countdown').innerText();
  assert.match(before, /^\(2[23] h \d\d min \d\d s left\)$/);
  await page.waitForTimeout(1100);
  assert.notEqual(await inside.locator('.countdown').innerText(), before);
  const order = await page.locator('tbody tr td:first-child').allInnerTexts();
  assert.equal(order[0], `job ${ids.pastJob}`);
  assert.equal(order[order.length - 1], `job ${ids.blockedJob}`);
});

test('redrive clicked: the attempt is cancelled as redriven and a new one runs with the same key', async () => {
  await page.goto(`${rw.url}/unknown?provider=stripe`);
  const inside = row(page, 'alice / checkout-1');
  await inside.locator('form[action="/unknown/redrive"] input[name="reason"]').fill('provider confirmed it keeps the key');
  await Promise.all([page.waitForNavigation(), inside.locator('form[action="/unknown/redrive"] button').click()]);
  const said = await page.locator('.done').innerText();
  const m = /Attempt (\d+) was redriven as attempt (\d+)\./.exec(said);
  assert.ok(m, said);
  assert.equal(Number(m[1]), ids.insideAttempt);
  const old = await one('SELECT state, cancel_reason, provider_key FROM jobguard.attempts WHERE id = $1', [ids.insideAttempt]);
  const fresh = await one('SELECT state, provider_key, job_id FROM jobguard.attempts WHERE id = $1', [m[2]]);
  assert.equal(old.state, 'cancelled');
  assert.match(old.cancel_reason, /^redriven as attempt/);
  assert.equal(fresh.state, 'started');
  assert.equal(fresh.provider_key, old.provider_key);
  assert.equal(Number(fresh.job_id), ids.insideJob);
  const act = await one(`SELECT role, action, reason FROM jobguard.operator_actions WHERE action = 'redrive_attempt' ORDER BY id DESC LIMIT 1`);
  assert.deepEqual(act, { role: 'olga', action: 'redrive_attempt', reason: 'provider confirmed it keeps the key' });
});

test('cancel clicked: the unknown attempt is cancelled with the reason given', async () => {
  await page.goto(`${rw.url}/unknown`);
  const r = row(page, 'dave / checkout-4');
  await r.locator('form[action="/unknown/cancel"] input[name="reason"]').fill('the customer was called: not charged');
  await Promise.all([page.waitForNavigation(), r.locator('form[action="/unknown/cancel"] button').click()]);
  assert.match(await page.locator('.done').innerText(), new RegExp(`Attempt ${ids.cancelAttempt} was cancelled`));
  const a = await one('SELECT state, cancel_reason FROM jobguard.attempts WHERE id = $1', [ids.cancelAttempt]);
  assert.deepEqual(a, { state: 'cancelled', cancel_reason: 'the customer was called: not charged' });
});

test('blocked: the jobs at the gate, why each cannot be redriven', async () => {
  await page.goto(`${rw.url}/blocked`);
  await axe(page, 'blocked');
  await shoot(page, 'blocked', 'Jobs blocked at the gate');
  const text = await page.locator('main').innerText();
  assert.match(text, /bob \/ checkout-2/);
  assert.match(text, /carol \/ receipt-3/);
  assert.doesNotMatch(text, /alice \/ checkout-1/);
});

test('one click: /intent finds the job; its timeline shows the winner and the lost result owed back', async () => {
  await page.goto(`${rw.url}/intent`);
  await axe(page, 'intent');
  await page.fill('input[name="owner"]', 'erin');
  await page.fill('input[name="key"]', 'checkout-5');
  await page.fill('input[name="scope"]', 'shop');
  await Promise.all([page.waitForNavigation(), page.click('form[aria-label="Find a click"] button')]);
  assert.equal(new URL(page.url()).pathname, `/jobs/${ids.lostJob}`);
  const attempts = await page.locator('#attempts').innerText();
  assert.match(attempts, /won/);
  assert.match(attempts, new RegExp(`lost to attempt ${ids.winAttempt}`));
  assert.match(attempts, /ch_twice/);
  assert.match(attempts, /not refunded/);
  assert.match(await page.locator('#replays').innerText(), /JG001/);
  assert.match(await page.locator('#job-actions').innerText(), /redrive_attempt/);
  await axe(page, 'job');
  await shoot(page, 'job', 'One click: the job and its attempts');
});

test('times in UTC or local, the choice remembered', async () => {
  await page.goto(`${rw.url}/jobs/${ids.lostJob}`);
  const t = page.locator('main time').first();
  assert.match(await t.innerText(), / UTC$/);
  await page.click('#tz-toggle');
  assert.match(await t.innerText(), /\(local, UTC\+05:30\)$/);
  assert.equal(await page.locator('#tz-toggle').getAttribute('aria-pressed'), 'true');
  await page.reload();
  assert.match(await page.locator('main time').first().innerText(), /\(local, UTC\+05:30\)$/);
  await page.click('#tz-toggle');
  assert.match(await page.locator('main time').first().innerText(), / UTC$/);
});

test('failed: retry after a dry-run count, clicked through', async () => {
  await page.goto(`${rw.url}/failed`);
  assert.match(await page.locator('main').innerText(), /gina \/ checkout-7[\s\S]*hugo \/ checkout-8/);
  await axe(page, 'failed');
  await shoot(page, 'failed', 'Failed jobs');
  await Promise.all([page.waitForNavigation(), page.click('text=Retry the failed jobs of this filter')]);
  assert.match(await page.locator('#dry-run').innerText(), /2 failed jobs would be retried/);
  await page.fill('#dry-run input[name="reason"]', 'card processor outage is over');
  await axe(page, 'failed-retry');
  await shoot(page, 'failed-retry', 'Retry: the dry run');
  await Promise.all([page.waitForNavigation(), page.click('text=Retry 2 jobs')]);
  assert.match(await page.locator('.done').innerText(), /Retried 2 failed jobs/);
  for (const id of [ids.failedJob, ids.failedJob2]) {
    const j = await one('SELECT state, max_attempts FROM jobguard.job_overview WHERE job_id = $1', [id]);
    assert.deepEqual(j, { state: 'pending', max_attempts: 2 });
  }
  const n = await one(`SELECT count(*)::int AS n FROM jobguard.operator_actions WHERE action = 'retry_job' AND reason = 'card processor outage is over'`);
  assert.equal(n.n, 2);
});

test('refunds: the ledger, mark refunded with a reference, the CSV export', async () => {
  await page.goto(`${rw.url}/refunds`);
  const r = row(page, `${ids.lostAttempt}`).filter({ hasText: 'erin' });
  assert.match(await r.innerText(), /ch_twice/);
  await axe(page, 'refunds');
  await shoot(page, 'refunds', 'Lost results: what is owed back');
  await r.locator('input[name="reference"]').fill('RF-1001');
  await r.locator('input[name="reason"]').fill('refunded at the provider');
  await Promise.all([page.waitForNavigation(), r.locator('button').click()]);
  assert.match(await page.locator('.done').innerText(), /marked refunded \(reference RF-1001\)/);
  const l = await one('SELECT refunded_at IS NOT NULL AS done, refund_reference FROM jobguard.lost_results WHERE attempt_id = $1', [ids.lostAttempt]);
  assert.deepEqual(l, { done: true, refund_reference: 'RF-1001' });
  await page.goto(`${rw.url}/refunds?status=all`);
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('text=Export these as CSV')]);
  const csv = fs.readFileSync(await download.path(), 'utf8').split('\r\n');
  assert.equal(csv[0], 'attempt_id,job_id,scope,owner_id,operation,provider,provider_key,lost_result,finished_at,refunded_at,refund_reference');
  assert.match(csv[1], new RegExp(`^${ids.lostAttempt},${ids.lostJob},shop,erin,pay,stripe,[0-9a-f]+,"{""charge_id"":""ch_twice""}",[^,]+,[^,]+,RF-1001$`));
  await page.goto(`${rw.url}/refunds`);
  assert.match(await page.locator('main').innerText(), /No lost result here/);
});

test('providers: in flight against the limit, pause and unpause clicked, certifications stale', async () => {
  await page.goto(`${rw.url}/providers`);
  assert.match(await row(page, 'paypal').innerText(), /1 \/ 1 \(at its limit\)/);
  assert.match(await page.locator('#certifications').innerText(), /charge\s+adyen\s+no\s+1\s+stale/);
  await axe(page, 'providers');
  await shoot(page, 'providers', 'Providers and certifications');
  const stripe = row(page, 'stripe');
  await stripe.locator('input[name="reason"]').fill('provider incident 4711');
  await Promise.all([page.waitForNavigation(), stripe.locator('button', { hasText: 'Pause' }).click()]);
  assert.match(await page.locator('.done').innerText(), /"stripe" is paused/);
  let p = await one("SELECT paused, dedupes_for::text AS d FROM jobguard.provider_policies WHERE provider = 'stripe'");
  assert.deepEqual(p, { paused: true, d: '1 day' });
  await page.goto(`${rw.url}/providers`);
  await row(page, 'stripe').locator('input[name="reason"]').fill('incident 4711 resolved');
  await Promise.all([page.waitForNavigation(), row(page, 'stripe').locator('button', { hasText: 'Unpause' }).click()]);
  p = await one("SELECT paused, dedupes_for::text AS d FROM jobguard.provider_policies WHERE provider = 'stripe'");
  assert.deepEqual(p, { paused: false, d: '1 day' });
});

test('cancel job clicked on its page', async () => {
  await page.goto(`${rw.url}/jobs/${ids.blockedJob}`);
  await page.fill('form[action="/jobs/cancel"] input[name="reason"]', 'receipt sent by hand');
  await Promise.all([page.waitForNavigation(), page.click('form[action="/jobs/cancel"] button')]);
  const j = await one('SELECT state FROM jobguard.job_overview WHERE job_id = $1', [ids.blockedJob]);
  assert.equal(j.state, 'cancelled');
});

test('the audit log: every action clicked above, with its reason', async () => {
  await page.goto(`${rw.url}/actions`);
  const text = await page.locator('#audit').innerText();
  for (const [action, reason] of [['redrive_attempt', 'provider confirmed it keeps the key'], ['cancel_attempt', 'the customer was called: not charged'],
    ['retry_job', 'card processor outage is over'], ['mark_refunded', 'refunded at the provider'],
    ['set_provider_policy', 'incident 4711 resolved'], ['cancel_job', 'receipt sent by hand']]) {
    assert.match(text, new RegExp(`olga\\s+olga\\s+${action}\\s+.*${reason}`), action);
  }
  await axe(page, 'actions');
  await shoot(page, 'actions', 'What operators did');
});

test('a form on another site posting to the console is refused, and changes nothing', async () => {
  const before = await one('SELECT state FROM jobguard.attempts WHERE id = $1', [ids.otherAttempt]);
  for (const host of ['localhost', '127.0.0.1']) {
    const response = page.waitForResponse((r) => r.url().endsWith('/unknown/cancel'));
    await page.goto(`http://${host}:${evil.address().port}/`);
    const r = await response;
    assert.equal(r.status(), 403, host);
    assert.match(await r.text(), /did not come from the console/);
  }
  assert.deepEqual(await one('SELECT state FROM jobguard.attempts WHERE id = $1', [ids.otherAttempt]), before);
});

test('a reader: payloads hidden, actions refused by the database', async () => {
  const reader = await context.browser().newContext();
  const p = await reader.newPage();
  try {
    await signInAs(p, 'rita', `/jobs/${ids.lostJob}`);
    const text = await p.locator('main').innerText();
    assert.doesNotMatch(text, /secret-card-token|ch_twice/);
    assert.match(text, /hidden: your role may not read payloads/);
    await p.goto(`${rw.url}/unknown`);
    const r = row(p, 'ivan / order-9');
    await r.locator('form[action="/unknown/cancel"] input[name="reason"]').fill('a reader tries');
    const [resp] = await Promise.all([p.waitForNavigation(), r.locator('form[action="/unknown/cancel"] button').click()]);
    assert.equal(resp.status(), 403);
    assert.match(await p.locator('.refusal').innerText(), /The database refused: permission denied/);
    assert.equal((await one('SELECT state FROM jobguard.attempts WHERE id = $1', [ids.otherAttempt])).state, 'unknown');
  } finally {
    await reader.close();
  }
});

test('no script error and no Content-Security-Policy violation on any page', async () => {
  assert.deepEqual(page.problems, []);
});
