'use strict';
// Who is signed in.  A person signs in with their own PostgreSQL role and
// password; PostgreSQL checks the password (the console opens a connection
// as that role).  The session keeps, in this process's memory only, that
// role's small pool of connections, so every request of the person runs as
// the person: the console has no role of its own with rights on jobguard.
// The cookie carries a random session id, HttpOnly and SameSite=Strict.

const crypto = require('node:crypto');
const db = require('./db');

const COOKIE = 'jgconsole';

class Sessions {
  // A store for the settings given (idle timeout, cookie flags, base path).
  constructor(config) {
    this.config = config;
    this.byId = new Map();
    this.sweep = setInterval(() => this.expire(), 60000);
    this.sweep.unref();
  }

  // signIn: check the password with PostgreSQL; resolves to the new
  // session's id.
  async signIn(user, password) {
    const who = await db.checkPassword(this.config, user, password);
    const id = crypto.randomBytes(32).toString('base64url');
    this.byId.set(id, {
      id, user: who, pool: db.personPool(this.config, user, password), seen: Date.now(), lastRefresh: new Map(),
    });
    return id;
  }

  // get: the live session of a request's cookie, or null.
  get(req) {
    const id = cookies(req)[COOKIE];
    const s = id && this.byId.get(id);
    if (!s) return null;
    if (Date.now() - s.seen > this.config.sessionIdleMinutes * 60000) {
      this.drop(id);
      return null;
    }
    s.seen = Date.now();
    return s;
  }

  // drop: end a session and close its connections.
  drop(id) {
    const s = this.byId.get(id);
    if (!s) return;
    this.byId.delete(id);
    s.pool.end().catch(() => {});
  }

  // expire: end the sessions idle for too long.
  expire() {
    const limit = this.config.sessionIdleMinutes * 60000;
    for (const [id, s] of this.byId) if (Date.now() - s.seen > limit) this.drop(id);
  }

  // close: end every session (the server stops).
  async close() {
    clearInterval(this.sweep);
    await Promise.all([...this.byId.values()].map((s) => s.pool.end().catch(() => {})));
    this.byId.clear();
  }

  // cookie: the Set-Cookie value for a session id (null: clear it).
  cookie(id) {
    const flags = `Path=${this.config.basePath || '/'}; HttpOnly; SameSite=Strict${this.config.secureCookies ? '; Secure' : ''}`;
    return id ? `${COOKIE}=${id}; ${flags}` : `${COOKIE}=; ${flags}; Max-Age=0`;
  }
}

// cookies: the request's cookies by name.
function cookies(req) {
  const out = {};
  for (const piece of (req.headers.cookie || '').split(';')) {
    const i = piece.indexOf('=');
    if (i > 0) out[piece.slice(0, i).trim()] = piece.slice(i + 1).trim();
  }
  return out;
}

module.exports = { Sessions, COOKIE };
