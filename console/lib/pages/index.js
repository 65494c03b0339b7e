'use strict';
// The console's pages by path, and the sign-in page and its POST.

const { html } = require('../html');
const db = require('../db');

const board = require('./board');
const job = require('./job');
const unknown = require('./unknown');
const failed = require('./failed');
const refunds = require('./refunds');
const providers = require('./providers');
const audit = require('./audit');

const ROUTES = {
  '/': board.page,
  '/intent': job.intent,
  '/unknown': unknown.unknownPage,
  '/blocked': unknown.blockedPage,
  '/failed': failed.page,
  '/failed/retry': failed.dryRun,
  '/refunds': refunds.page,
  '/providers': providers.page,
  '/actions': audit.page,
};

// route: the page function for a path, or null.
function route(path) {
  if (ROUTES[path]) return ROUTES[path];
  if (/^\/jobs\/[0-9]+$/.test(path)) return job.jobPage;
  return null;
}

// safeNext: where to go after signing in: a path of this console only.
function safeNext(ctx, next) {
  if (typeof next !== 'string' || !next.startsWith('/') || next.startsWith('//') || next.includes('\\')) return '/';
  return next;
}

// signinPage: the sign-in form.
function signinPage(ctx, message, status = 200) {
  const next = safeNext(ctx, ctx.query.next);
  return {
    status,
    title: 'Sign in',
    body: html`${message ? html`<p class="refusal" role="alert">${message}</p>` : ''}
<p>Sign in with your own PostgreSQL role: PostgreSQL checks the password, and every page and action runs as that role, with exactly its rights.</p>
<form method="post" action="${ctx.base}/signin" class="signin">
<input type="hidden" name="next" value="${next}">
<p><label for="user">Role</label> <input id="user" name="user" autocomplete="username" required></p>
<p><label for="password">Password</label> <input id="password" name="password" type="password" autocomplete="current-password" required></p>
<p><button type="submit">Sign in</button></p>
</form>`,
  };
}

// signin: check the role and password with PostgreSQL; on success a new
// session and its cookie, then the page asked for.
async function signin(ctx, form, sessions) {
  const user = typeof form.user === 'string' ? form.user : '';
  const password = typeof form.password === 'string' ? form.password : '';
  ctx.query.next = form.next;
  if (!user || !password) return signinPage(ctx, 'Give a role and its password.', 422);
  let id;
  try {
    id = await sessions.signIn(user, password);
  } catch (err) {
    const d = db.describe(err, ctx.config);
    // a refused password answers no sooner than half a second
    if (d.kind === 'auth') return new Promise((r) => setTimeout(() => r(signinPage(ctx, d.text, 401)), 500));
    return signinPage(ctx, `Sign-in failed: ${err.message}`, 502);
  }
  if (ctx.session) sessions.drop(ctx.session.id);
  return { redirect: `${ctx.base}${safeNext(ctx, form.next)}`, headers: { 'Set-Cookie': sessions.cookie(id) } };
}

module.exports = { route, signinPage, signin };
