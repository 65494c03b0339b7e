'use strict';
// bench/console/pages.js: how long each console page takes to render at
// the scale bench/console/load.sql wrote: a console in this process,
// signed in as the operator, each page asked for ROUNDS times after a
// warm-up (one request at a time, the whole response read); the median,
// 95th percentile and slowest per page, as a Markdown table on stdout.
//   node bench/console/pages.js   (libpq environment; BENCH_ROLE, BENCH_PASSWORD)

const http = require('node:http');
const path = require('node:path');
const consoleDir = path.join(__dirname, '..', '..', 'console');
const { createApp } = require(path.join(consoleDir, 'lib', 'app'));
const { DEFAULTS } = require(path.join(consoleDir, 'lib', 'config'));

const ROUNDS = Number(process.env.BENCH_ROUNDS || 20);
const JOBS = Number(process.env.BENCH_JOBS || 5000000);
const UNKNOWN_JOB = JOBS - 10000 - 1000 + 1; // load.sql's first job with an unknown attempt

// get: one request; resolves to { status, headers, body, ms }.
function get(url, cookie, method = 'GET', form = null) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const body = form ? new URLSearchParams(form).toString() : null;
    const req = http.request(url, { method, headers: { ...(cookie ? { Cookie: cookie } : {}), ...(body ? { 'Content-Type': 'application/x-www-form-urlencoded', 'Sec-Fetch-Site': 'same-origin' } : {}) } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString(), ms: Number(process.hrtime.bigint() - t0) / 1e6 }));
    });
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

// main: measure every page.
async function main() {
  const app = createApp({ ...DEFAULTS, allowActions: false, statementTimeoutMs: 10000 });
  const server = http.createServer((req, res) => { app.handle(req, res); });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${server.address().port}`;
  const signin = await get(`${base}/signin`, null, 'POST', { user: process.env.BENCH_ROLE || 'olga', password: process.env.BENCH_PASSWORD || 'bench' });
  if (signin.status !== 303) throw new Error(`sign-in: ${signin.status}`);
  const cookie = signin.headers['set-cookie'][0].split(';')[0];
  const unknown = await get(`${base}/unknown`, cookie);
  const next = /<a rel="next" href="([^"]+)">/.exec(unknown.body);
  const pages = [
    ['/', 'the attention board'],
    ['/unknown', 'unknown attempts, first page'],
    [next ? next[1].replace(/&amp;/g, '&') : '/unknown', 'unknown attempts, second page'],
    ['/unknown?provider=adyen', 'unknown attempts of one provider'],
    ['/blocked', 'blocked jobs'],
    ['/failed', 'failed jobs'],
    ['/failed/retry?operation=charge', 'retry dry run'],
    ['/refunds', 'lost results not refunded'],
    ['/refunds?status=all&provider=stripe', 'lost results, filtered'],
    ['/providers', 'providers and certifications'],
    ['/actions', 'operator actions'],
    [`/jobs/${UNKNOWN_JOB}`, 'one job (unknown attempt)'],
    ['/jobs/12345', 'one job (succeeded)'],
    ['/intent?owner=owner-12345&key=key-12345&scope=shop', 'one click by owner and key (to its job)'],
  ];
  const rows = [];
  for (const [p, label] of pages) {
    for (let i = 0; i < 3; i++) await get(`${base}${p}`, cookie);
    const ms = [];
    let status;
    let timedOut = 0;
    for (let i = 0; i < ROUNDS; i++) {
      const r = await get(`${base}${p}`, cookie);
      status = r.status;
      ms.push(r.ms);
      if (/class="panel-timeout"/.test(r.body)) timedOut++;
    }
    if (timedOut) status = `${status}, a panel timed out in ${timedOut} of ${ROUNDS}`;
    ms.sort((a, b) => a - b);
    const q = (f) => ms[Math.min(ms.length - 1, Math.ceil(f * ms.length) - 1)];
    rows.push(`| ${label} | \`${p.length > 40 ? `${p.slice(0, 40)}…` : p}\` | ${status} | ${q(0.5).toFixed(1)} | ${q(0.95).toFixed(1)} | ${ms[ms.length - 1].toFixed(1)} |`);
  }
  server.close();
  await app.close();
  console.log(`| page | URL | status | median ms | p95 ms | max ms |\n|---|---|---|---|---|---|\n${rows.join('\n')}`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
