'use strict';
// The console's HTTP entry point: every request passes here first.  It
// sets the security headers (a strict Content-Security-Policy: scripts and
// styles only from the console itself, no inline script), refuses every
// request that is not a GET unless the console was started with
// --allow-actions (signing in and out excepted), refuses a POST that a
// browser says came from another site (Sec-Fetch-Site, else Origin),
// requires a signed-in person, holds auto-refresh to the floor, and runs
// the page or action in one transaction as that person's role.

const fs = require('node:fs');
const path = require('node:path');
const { html, layout } = require('./html');
const db = require('./db');
const { Sessions } = require('./sessions');
const pages = require('./pages');
const actions = require('./actions');

const CSP = [
  "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self'",
  "connect-src 'self'", "form-action 'self'", "frame-ancestors 'none'", "base-uri 'none'",
].join('; ');

const STATIC = {
  '/static/console.js': ['console.js', 'text/javascript; charset=utf-8'],
  '/static/console.css': ['console.css', 'text/css; charset=utf-8'],
};
const BODY_LIMIT = 64 * 1024;
// the POSTs that change nothing in the database, served also read-only
const SESSION_POSTS = new Set(['/signin', '/signout']);

// send: one response with the console's headers.
function send(res, status, body, headers = {}) {
  res.writeHead(status, {
    'Content-Security-Policy': CSP,
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'Cross-Origin-Opener-Policy': 'same-origin',
    'Cross-Origin-Resource-Policy': 'same-origin',
    'Cache-Control': 'no-store',
    'Content-Type': 'text/html; charset=utf-8',
    ...headers,
  });
  res.end(body);
}

// refusal: a short page saying why the request was refused.
function refusal(ctx, status, title, text) {
  return { status, title, body: html`<p class="refusal" role="alert">${text}</p>` };
}

// sameSite: whether a state-changing request came from the console's own
// pages: Sec-Fetch-Site "same-origin" (every current browser sends it), or,
// from a client that sends none, an Origin naming this host.
function sameSite(req) {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined) return site === 'same-origin';
  const origin = req.headers.origin;
  if (!origin) return false;
  try {
    return new URL(origin).host === req.headers.host;
  } catch (e) {
    return false;
  }
}

// readForm: the urlencoded body of a POST (at most 64 kB).
function readForm(req) {
  return new Promise((resolve, reject) => {
    const type = (req.headers['content-type'] || '').split(';')[0].trim();
    if (type !== 'application/x-www-form-urlencoded') {
      reject(Object.assign(new Error('the console takes forms only (application/x-www-form-urlencoded)'), { status: 415 }));
      return;
    }
    let size = 0;
    const chunks = [];
    req.on('data', (c) => {
      size += c.length;
      if (size > BODY_LIMIT) {
        reject(Object.assign(new Error('form too large'), { status: 413 }));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString('utf8')))));
    req.on('error', reject);
  });
}

// refreshAllowed: the server-side floor on auto-refresh: a page asked for
// with ?refresh= is served to one session at most once per floor.
function refreshAllowed(ctx) {
  if (!ctx.query.refresh) return true;
  const key = ctx.path;
  const last = ctx.session.lastRefresh.get(key) || 0;
  const now = Date.now();
  if (now - last < ctx.config.refreshFloorSeconds * 1000 - 250) return false;
  ctx.session.lastRefresh.set(key, now);
  return true;
}

// refreshSeconds: the auto-refresh a page asked for, never below the floor.
function refreshSeconds(ctx) {
  const n = Number(ctx.query.refresh);
  if (!ctx.query.refresh || !Number.isFinite(n) || n <= 0) return null;
  return Math.max(Math.round(n), ctx.config.refreshFloorSeconds);
}

// createApp: the request handler for the settings given, and close().
function createApp(config) {
  const sessions = new Sessions(config);
  const staticFiles = {};
  for (const [p, [file, type]] of Object.entries(STATIC)) {
    staticFiles[p] = [fs.readFileSync(path.join(__dirname, '..', 'static', file)), type];
  }

  // render: a page result as the response.
  function render(ctx, res, out) {
    if (out.redirect) {
      send(res, 303, '', { Location: out.redirect, ...(out.headers || {}) });
      return;
    }
    if (out.csv !== undefined) {
      send(res, 200, out.csv, { 'Content-Type': 'text/csv; charset=utf-8', 'Content-Disposition': `attachment; filename="${out.filename}"` });
      return;
    }
    const page = layout(ctx, { title: out.title, body: out.body, refresh: out.refresh });
    send(res, out.status || 200, ctx.req.method === 'HEAD' ? '' : String(page), out.headers || {});
  }

  // handle: one request.
  async function handle(req, res) {
    const url = new URL(req.url, 'http://console.invalid');
    const ctx = { req, config, base: config.basePath, query: Object.fromEntries(url.searchParams), url, session: null };
    if (config.basePath && !(url.pathname === config.basePath || url.pathname.startsWith(`${config.basePath}/`))) {
      send(res, 404, 'not found', { 'Content-Type': 'text/plain; charset=utf-8' });
      return;
    }
    ctx.path = url.pathname.slice(config.basePath.length) || '/';
    ctx.session = sessions.get(req);
    try {
      if (req.method === 'GET' || req.method === 'HEAD') {
        if (staticFiles[ctx.path]) {
          const [body, type] = staticFiles[ctx.path];
          send(res, 200, body, { 'Content-Type': type, 'Cache-Control': 'max-age=300' });
          return;
        }
        if (ctx.path === '/signin') {
          render(ctx, res, pages.signinPage(ctx));
          return;
        }
        if (!ctx.session) {
          const next = ctx.path + url.search;
          send(res, 303, '', { Location: `${config.basePath}/signin?next=${encodeURIComponent(next)}` });
          return;
        }
        const page = pages.route(ctx.path);
        if (!page) {
          render(ctx, res, refusal(ctx, 404, 'Not found', `There is no page ${ctx.path}.`));
          return;
        }
        if (!refreshAllowed(ctx)) {
          render(ctx, res, { ...refusal(ctx, 429, 'Too many refreshes', `This page refreshes at most every ${config.refreshFloorSeconds} seconds.`), headers: { 'Retry-After': String(config.refreshFloorSeconds) } });
          return;
        }
        ctx.refresh = refreshSeconds(ctx);
        const out = await db.inTransaction(ctx.session.pool, config, (tx) => page(ctx, tx));
        render(ctx, res, { refresh: ctx.refresh, ...out });
        return;
      }
      if (req.method !== 'POST') {
        render(ctx, res, { ...refusal(ctx, 405, 'Method not allowed', `${req.method} is not served.`), headers: { Allow: 'GET, HEAD, POST' } });
        return;
      }
      // every request that is not a GET: refused here unless actions are
      // allowed, from another site, or without a signed-in person
      if (!config.allowActions && !SESSION_POSTS.has(ctx.path)) {
        render(ctx, res, refusal(ctx, 403, 'Read-only console', 'This console is read-only: it was started without --allow-actions.'));
        return;
      }
      if (!sameSite(req)) {
        render(ctx, res, refusal(ctx, 403, 'Refused', 'This request did not come from the console\'s own pages (Sec-Fetch-Site/Origin): refused.'));
        return;
      }
      const form = await readForm(req);
      if (ctx.path === '/signin') {
        render(ctx, res, await pages.signin(ctx, form, sessions));
        return;
      }
      if (ctx.path === '/signout') {
        if (ctx.session) sessions.drop(ctx.session.id);
        send(res, 303, '', { Location: `${config.basePath}/signin`, 'Set-Cookie': sessions.cookie(null) });
        return;
      }
      if (!ctx.session) {
        render(ctx, res, refusal(ctx, 403, 'Not signed in', 'Sign in first: actions run as your own PostgreSQL role.'));
        return;
      }
      const action = actions.route(ctx.path);
      if (!action) {
        render(ctx, res, refusal(ctx, 404, 'Not found', `There is no action ${ctx.path}.`));
        return;
      }
      render(ctx, res, await actions.run(ctx, form, action));
    } catch (err) {
      const status = err.status || db.describe(err, config).status;
      const text = err.status ? err.message : db.describe(err, config).text;
      try {
        render(ctx, res, refusal(ctx, status, 'Error', text));
      } catch (e) {
        res.destroy();
      }
    }
  }

  return { handle, close: () => sessions.close(), sessions };
}

module.exports = { createApp, CSP };
