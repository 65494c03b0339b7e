'use strict';
// A small HTTP front for jobguard.  Clients submit jobs with an
// Idempotency-Key header; workers begin attempts and report outcomes.  All
// the deciding is done by jobguard in the database, through the jobguard
// Node client (clients/node): this file maps requests onto its functions
// and its errors onto RFC 9457 problem documents (problems.js).  It keeps
// serving across a database restart: lost connections are dropped from the
// pool, requests meanwhile get 503 with Retry-After, and the pool connects
// again on the next request.
//
//   PGHOST/PGPORT/PGUSER/PGDATABASE  where jobguard is (libpq defaults)
//   PORT (default 3000; 0 = any free port), HOST (default 127.0.0.1)

const http = require('node:http');
const { Pool } = require('pg');
const jg = require('jobguard');
const { problem, problemFromError, databaseUnavailable, PROBLEM_TYPES } = require('./problems');
const { parseIdempotencyKey } = require('./idempotency-key');
const { document: openapi } = require('./openapi');

const MAX_BODY = 1 << 20;

// An error answered with a problem document of a named type.
class HttpError extends Error {
  // name: a key of PROBLEM_TYPES; detail: for humans
  constructor(name, detail) {
    super(detail);
    this.problem = name;
  }
}

// send: write a JSON response (a problem document for 4xx and 5xx).
function send(res, status, body, headers = {}) {
  res.writeHead(status, {
    'Content-Type': status >= 400 ? 'application/problem+json' : 'application/json',
    ...headers,
  });
  res.end(JSON.stringify(body));
}

// readBody: the request body parsed as JSON (undefined when empty).
function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new HttpError('payload-too-large', 'body larger than 1 MiB'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      if (text.trim() === '') return resolve(undefined);
      try {
        resolve(JSON.parse(text));
      } catch {
        reject(new HttpError('invalid-json', 'body is not valid JSON'));
      }
    });
    req.on('error', reject);
  });
}

// object: the body as an object ({} when empty), else 400.
function object(body) {
  if (body === undefined) return {};
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new HttpError('invalid-body', 'body must be a JSON object');
  return body;
}

// id: a path id; digits only, else 404 (no such resource) rather than 400.
function id(s) {
  if (!/^[0-9]{1,15}$/.test(s)) throw new HttpError('not-found', `no resource ${s}`);
  return Number(s);
}

// preferredWait: the seconds of an RFC 7240 "Prefer: wait=N", or null.
function preferredWait(header) {
  if (!header) return null;
  for (const pref of header.split(',')) {
    const m = /^\s*wait\s*=\s*"?([0-9]+)"?\s*(;.*)?$/i.exec(pref);
    if (m) return Number(m[1]);
  }
  return null;
}

// withClient: run fn on a client of its own; a client whose connection
// broke is destroyed, not put back in the pool.
async function withClient(pool, fn) {
  const c = await pool.connect();
  const ignore = () => {};   // a connection lost between two queries: the next query fails
  c.on('error', ignore);
  let broken = null;
  try {
    return await fn(c);
  } catch (err) {
    if (databaseUnavailable(err)) broken = err;
    else await c.query('ROLLBACK').catch((e) => { broken = e; });
    throw err;
  } finally {
    c.removeListener('error', ignore);
    c.release(broken || undefined);
  }
}

// POST /jobs -------------------------------------------------------------
async function postJob(pool, req, res) {
  const header = req.headers['idempotency-key'];
  if (header === undefined)
    throw new HttpError('missing-idempotency-key', 'the Idempotency-Key header is required');
  let key;
  try {
    key = parseIdempotencyKey(header);
  } catch (err) {
    throw new HttpError('invalid-idempotency-key', `Idempotency-Key: ${err.message}`);
  }
  const owner = req.headers['x-owner-id'];
  if (owner === undefined || owner === '')
    throw new HttpError('missing-owner', 'the X-Owner-Id header is required');
  const body = object(await readBody(req));
  // Missing fields go as SQL NULL: jobguard checks NULLs and lengths
  // (22004/22023 -> 400), so this service does not repeat those rules.
  const request = { ownerId: owner, idempotencyKey: key, operation: body.operation,
    params: body.params, provider: body.provider, maxAttempts: body.max_attempts };

  // A concurrent request with the same key waits for the first to commit
  // (see README).  Prefer: wait=N bounds that wait with lock_timeout; on
  // timeout, 409 request-in-progress.
  const wait = preferredWait(req.headers.prefer);
  const headers = {};
  let submitted;
  if (wait === null) {
    submitted = await jg.submit(pool, request);
  } else {
    headers['Preference-Applied'] = `wait=${wait}`;
    submitted = await withClient(pool, async (c) => {
      await c.query('BEGIN');
      // lock_timeout 0 would mean "no limit": wait=0 is the shortest timeout
      await c.query(`SELECT set_config('lock_timeout', $1, true)`, [`${Math.max(1, wait * 1000)}ms`]);
      const r = await jg.submit(c, request);
      await c.query('COMMIT');
      return r;
    }).catch((err) => {
      if (err.code === '55P03') {
        err.message = `a request with Idempotency-Key ${JSON.stringify(key)} is still in progress`;
        err.responseHeaders = headers;
      }
      throw err;
    });
  }
  const job = await jg.job(pool, submitted.jobId);
  headers.Location = `/jobs/${submitted.jobId}`;
  if (submitted.created) send(res, 201, job, headers);
  else send(res, 200, job, { ...headers, 'Idempotent-Replayed': 'true' });
}

// GET /jobs/:id ------------------------------------------------------------
async function getJob(pool, req, res, jobId) {
  const job = await jg.job(pool, jobId);
  job.attempts_list = await jg.attempts(pool, jobId);
  send(res, 200, job);
}

// POST /jobs/:id/attempts --------------------------------------------------
// body: { provider?, timeout_seconds? (default 30), attempt_key? }
// 201 with a new attempt; 200 when attempt_key named the job's open attempt.
async function postAttempt(pool, req, res, jobId) {
  const body = object(await readBody(req));
  const timeout = body.timeout_seconds ?? 30;
  if (typeof timeout !== 'number')
    throw new HttpError('invalid-body', 'timeout_seconds must be a number');
  let attempt, created;
  try {
    // One transaction, so that now() is the moment begin_attempt ran: an
    // attempt that started at now() is new, an older one is a replay of
    // attempt_key.  (begin_attempt does not say which.)
    [attempt, created] = await withClient(pool, async (c) => {
      await c.query('BEGIN');
      const attemptId = await jg.beginAttempt(c, jobId,
        { provider: body.provider, timeoutSeconds: timeout, attemptKey: body.attempt_key });
      const { rows } = await c.query(
        'SELECT started_at = now() AS created FROM jobguard.attempt_overview WHERE attempt_id = $1',
        [attemptId]);
      const a = await jg.attempt(c, attemptId);
      await c.query('COMMIT');
      return [a, rows[0].created];
    });
  } catch (err) {
    if (err instanceof jg.AttemptInFlight && err.blockingAttemptId !== null) {
      // name the blocking attempt in a field, not only in the message text
      const open = await jg.attempt(pool, err.blockingAttemptId);
      if (open) err.blocking = { attempt_id: open.attempt_id, state: open.state, deadline: open.deadline };
    }
    throw err;
  }
  send(res, created ? 201 : 200, attempt,
    created ? { Location: `/attempts/${attempt.attempt_id}` } : { 'Idempotent-Replayed': 'true' });
}

// POST /attempts/:id/finish: the whole body is the result -----------------
async function postFinish(pool, req, res, attemptId) {
  const result = await readBody(req);
  const outcome = await jg.finish(pool, attemptId, result);
  send(res, 200, { outcome, attempt: await jg.attempt(pool, attemptId) });
}

// POST /attempts/:id/{fail,cancel,unknown} ----------------------------------
async function postTransition(pool, req, res, attemptId, action) {
  const body = object(await readBody(req));
  let state;
  if (action === 'fail') state = await jg.fail(pool, attemptId, body.error);
  else if (action === 'cancel') state = await jg.cancelAttempt(pool, attemptId, body.reason);
  else state = await jg.markUnknown(pool, attemptId);
  send(res, 200, { state, attempt: await jg.attempt(pool, attemptId) });
}

// routing -------------------------------------------------------------------
async function route(pool, req, res) {
  const path = new URL(req.url, 'http://localhost').pathname;
  const m = path.split('/').filter(Boolean);
  const method = req.method;
  if (m[0] === 'jobs') {
    if (m.length === 1 && method === 'POST') return postJob(pool, req, res);
    if (m.length === 2 && method === 'GET') return getJob(pool, req, res, id(m[1]));
    if (m.length === 3 && m[2] === 'attempts' && method === 'POST')
      return postAttempt(pool, req, res, id(m[1]));
  } else if (m[0] === 'attempts' && m.length === 3 && method === 'POST'
    && ['finish', 'fail', 'cancel', 'unknown'].includes(m[2])) {
    const a = id(m[1]);
    if (m[2] === 'finish') return postFinish(pool, req, res, a);
    return postTransition(pool, req, res, a, m[2]);
  } else if (path === '/openapi.json' && method === 'GET') {
    return send(res, 200, openapi);
  } else if (m[0] === 'problems' && m.length === 2 && method === 'GET' && PROBLEM_TYPES[m[1]]) {
    const [status, meaning] = PROBLEM_TYPES[m[1]];
    res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' });
    return res.end(`${m[1]} (HTTP ${status} ${http.STATUS_CODES[status]}): ${meaning}\n`);
  }
  throw new HttpError('not-found', `no route for ${method} ${path}`);
}

// createServer: the HTTP server answering with the given pg Pool.
function createServer(pool) {
  return http.createServer((req, res) => {
    route(pool, req, res).catch((err) => {
      const { status, body } = err instanceof HttpError
        ? problem(err.problem, err.message) : problemFromError(err);
      if (err.blocking) body.blocking_attempt = err.blocking;
      const headers = { ...(err.responseHeaders || {}) };
      if (status === 503) headers['Retry-After'] = '1';
      if (status === 500) console.error(err);
      send(res, status, body, headers);
    });
  });
}

// createPool: a pg Pool that survives a database restart: an idle client
// whose connection is cut is dropped (and logged) instead of crashing the
// process, and connecting gives up after a few seconds (then 503).
function createPool(options = {}) {
  const pool = new Pool({ max: Number(process.env.PG_POOL_MAX || 10),
    connectionTimeoutMillis: 5000, ...options });
  pool.on('error', (err) => console.error(`jobguard http-api: lost an idle connection: ${err.message}`));
  return pool;
}

module.exports = { createServer, createPool, preferredWait };

if (require.main === module) {
  const pool = createPool();
  const server = createServer(pool);
  const host = process.env.HOST || '127.0.0.1';
  server.listen(Number(process.env.PORT ?? 3000), host, () => {
    console.log(`jobguard http-api listening on http://${host}:${server.address().port}`);
  });
  const stop = () => {
    server.close(() => pool.end().then(() => process.exit(0)));
    if (server.closeIdleConnections) server.closeIdleConnections();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
