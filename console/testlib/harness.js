'use strict';
// What the console's tests share: a superuser connection to the test
// cluster (its socket, from the libpq environment), consoles started in
// this process on free ports with the settings a test gives, and an HTTP
// client that signs in and posts forms the way a browser does.

const http = require('node:http');
const pg = require('pg');
const { createApp } = require('../lib/app');
const { DEFAULTS } = require('../lib/config');

// the consoles connect over TCP (PostgreSQL checks passwords there), to
// CONSOLE_TEST_PGPORT when set (a pooler in front of the cluster); the
// superuser connects through the socket the environment names
const ADMIN_HOST = process.env.PGHOST;
const ADMIN_PORT = process.env.PGPORT;
process.env.PGHOST = process.env.CONSOLE_TEST_TCP_HOST || '127.0.0.1';
if (process.env.CONSOLE_TEST_PGPORT) process.env.PGPORT = process.env.CONSOLE_TEST_PGPORT;

// admin: a superuser client, straight to the cluster.
async function admin() {
  const c = new pg.Client({ host: ADMIN_HOST, port: ADMIN_PORT });
  await c.connect();
  return c;
}

// startConsole: a console with the settings given; resolves to { url,
// close() }.
function startConsole(settings = {}) {
  const config = { ...DEFAULTS, ...settings };
  const app = createApp(config);
  const server = http.createServer((req, res) => { app.handle(req, res); });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const url = `http://127.0.0.1:${server.address().port}${config.basePath}`;
      resolve({ url, config, close: () => new Promise((r) => { server.close(r); app.close(); }) });
    });
  });
}

// request: one HTTP request; resolves to { status, headers, body }.
function request(method, url, { cookie, form, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const body = form ? new URLSearchParams(form).toString() : null;
    const req = http.request(url, {
      method,
      headers: {
        ...(cookie ? { Cookie: cookie } : {}),
        ...(body !== null ? { 'Content-Type': 'application/x-www-form-urlencoded', 'Content-Length': Buffer.byteLength(body) } : {}),
        ...headers,
      },
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    if (body !== null) req.write(body);
    req.end();
  });
}

// post: a form posted from the console's own page (Sec-Fetch-Site:
// same-origin, as a browser sends it).
function post(url, form, cookie, site = 'same-origin') {
  return request('POST', url, { cookie, form, headers: site ? { 'Sec-Fetch-Site': site } : {} });
}

// signIn: sign in as role; resolves to the session cookie.
async function signIn(consoleUrl, role, password) {
  const r = await post(`${consoleUrl}/signin`, { user: role, password, next: '/' });
  if (r.status !== 303) throw new Error(`sign-in of ${role} answered ${r.status}: ${r.body}`);
  return r.headers['set-cookie'][0].split(';')[0];
}

// asRole: run fn(client) on a connection of role (with its password).
async function asRole(role, password, fn) {
  const c = new pg.Client({ user: role, password });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

// sqlstateOf: the SQLSTATE a statement of role raises (null: none).
async function sqlstateOf(role, password, text, values) {
  return asRole(role, password, async (c) => {
    try {
      await c.query(text, values);
      return null;
    } catch (err) {
      return err.code;
    }
  });
}

module.exports = { admin, startConsole, request, post, signIn, asRole, sqlstateOf };
