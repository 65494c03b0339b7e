'use strict';
// A small HTTP front for jobguard.  Clients submit jobs with an
// Idempotency-Key header; workers begin attempts and report outcomes.  All
// the deciding is done by jobguard in the database: this file only maps
// requests onto its functions and SQLSTATEs onto HTTP statuses.
//
//   PGHOST/PGPORT/PGUSER/PGDATABASE  where jobguard is (libpq defaults)
//   PORT (default 3000; 0 = any free port), HOST (default 127.0.0.1)

const http = require('node:http');
const { Pool, types } = require('pg');
const { problemFromError } = require('./errors');

// bigint ids as JSON numbers (exact up to 2^53, far beyond any example)
types.setTypeParser(20, (v) => Number(v));

const MAX_BODY = 1 << 20;

class HttpError extends Error {
  constructor(status, title, detail) {
    super(detail);
    this.status = status;
    this.title = title;
  }
}

function send(res, status, body, headers = {}) {
  const problem = status >= 400;
  res.writeHead(status, {
    'Content-Type': problem ? 'application/problem+json' : 'application/json',
    ...headers,
  });
  res.end(JSON.stringify(body));
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new HttpError(413, 'payload_too_large', 'body larger than 1 MiB'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      if (text.trim() === '') return resolve(undefined);
      try {
        resolve(JSON.parse(text));
      } catch {
        reject(new HttpError(400, 'invalid_json', 'body is not valid JSON'));
      }
    });
    req.on('error', reject);
  });
}

function object(body) {
  if (body === undefined) return {};
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new HttpError(400, 'invalid_body', 'body must be a JSON object');
  return body;
}

// A path id: digits only, else 404 (no such resource) rather than a 22P02.
function id(s) {
  if (!/^[0-9]{1,18}$/.test(s)) throw new HttpError(404, 'not_found', `no resource ${s}`);
  return s;
}

async function jobWithAttempts(db, jobId, withAttempts) {
  const { rows } = await db.query('SELECT * FROM jobguard.job($1)', [jobId]);
  const job = rows[0];
  if (withAttempts) {
    const a = await db.query('SELECT * FROM jobguard.attempts_of($1)', [jobId]);
    job.attempts_list = a.rows;
  }
  return job;
}

async function attemptById(db, attemptId) {
  const { rows } = await db.query(
    'SELECT * FROM jobguard.attempt_overview WHERE attempt_id = $1', [attemptId]);
  return rows[0];
}

// POST /jobs -------------------------------------------------------------
async function postJob(pool, req, res) {
  const key = req.headers['idempotency-key'];
  if (key === undefined || key === '')
    throw new HttpError(400, 'idempotency_key_missing', 'the Idempotency-Key header is required');
  const owner = req.headers['x-owner-id'];
  if (owner === undefined || owner === '')
    throw new HttpError(400, 'owner_missing', 'the X-Owner-Id header is required');
  const body = object(await readBody(req));
  const { operation, params, provider } = body;
  const maxAttempts = body.max_attempts ?? null;

  // jsonb goes as JSON text, everything else as plain values.  Missing
  // fields become SQL NULL: jobguard checks NULLs and lengths (22004/22023
  // -> 400), so this service does not repeat those rules.
  const { rows } = await pool.query(
    'SELECT job_id, created FROM jobguard.submit($1, $2, $3, $4::jsonb, $5, $6)',
    [owner, key, operation ?? null, params == null ? null : JSON.stringify(params),
     provider ?? null, maxAttempts]);
  const { job_id: jobId, created } = rows[0];
  const job = await jobWithAttempts(pool, jobId, false);
  const headers = { Location: `/jobs/${jobId}` };
  if (created) send(res, 201, job, headers);
  else send(res, 200, job, { ...headers, 'Idempotent-Replayed': 'true' });
}

// GET /jobs/:id ------------------------------------------------------------
async function getJob(pool, req, res, jobId) {
  send(res, 200, await jobWithAttempts(pool, jobId, true));
}

// POST /jobs/:id/attempts --------------------------------------------------
// body: { provider?, timeout_seconds? (default 30), attempt_key? }
// 201 with a new attempt; 200 when attempt_key named the job's open attempt.
async function postAttempt(pool, req, res, jobId) {
  const body = object(await readBody(req));
  const timeout = body.timeout_seconds ?? 30;
  if (typeof timeout !== 'number')
    throw new HttpError(400, 'invalid_body', 'timeout_seconds must be a number');
  const db = await pool.connect();
  try {
    // One transaction, so that now() is the moment begin_attempt ran: an
    // attempt that started at now() is new, an older one is a replay of
    // attempt_key.  (begin_attempt does not say which.)
    await db.query('BEGIN');
    let attemptId;
    try {
      const r = await db.query(
        'SELECT jobguard.begin_attempt($1, $2, make_interval(secs => $3), $4) AS id',
        [jobId, body.provider ?? null, timeout, body.attempt_key ?? null]);
      attemptId = r.rows[0].id;
    } catch (err) {
      await db.query('ROLLBACK');
      if (err.code === 'JG002') {
        // name the blocking attempt in a field, not only in the message text
        const open = await db.query(
          `SELECT attempt_id, state, deadline FROM jobguard.attempt_overview
            WHERE job_id = $1 AND state IN ('started', 'unknown')`, [jobId]);
        err.blocking = open.rows[0];
      }
      throw err;
    }
    const a = await db.query(
      'SELECT *, started_at = now() AS created FROM jobguard.attempt_overview WHERE attempt_id = $1',
      [attemptId]);
    await db.query('COMMIT');
    const { created, ...attempt } = a.rows[0];
    send(res, created ? 201 : 200, attempt,
      created ? { Location: `/attempts/${attemptId}` } : { 'Idempotent-Replayed': 'true' });
  } finally {
    db.release();
  }
}

// POST /attempts/:id/{finish,fail,cancel,unknown} --------------------------
async function postFinish(pool, req, res, attemptId) {
  const result = await readBody(req);   // the whole body is the result
  const { rows } = await pool.query('SELECT jobguard.finish_attempt($1, $2::jsonb) AS outcome',
    [attemptId, result === undefined ? null : JSON.stringify(result)]);
  const attempt = await attemptById(pool, attemptId);
  send(res, 200, { outcome: rows[0].outcome, attempt });
}

async function postTransition(pool, req, res, attemptId, fn, field) {
  const body = object(await readBody(req));
  const args = [attemptId];
  let sql = `SELECT jobguard.${fn}($1) AS state`;
  if (field) {
    args.push(body[field] ?? null);
    sql = `SELECT jobguard.${fn}($1, $2) AS state`;
  }
  const { rows } = await pool.query(sql, args);
  send(res, 200, { state: rows[0].state, attempt: await attemptById(pool, attemptId) });
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
  } else if (m[0] === 'attempts' && m.length === 3 && method === 'POST') {
    const a = id(m[1]);
    switch (m[2]) {
      case 'finish': return postFinish(pool, req, res, a);
      case 'fail': return postTransition(pool, req, res, a, 'fail_attempt', 'error');
      case 'cancel': return postTransition(pool, req, res, a, 'cancel_attempt', 'reason');
      case 'unknown': return postTransition(pool, req, res, a, 'mark_unknown', null);
      default: break;
    }
  }
  throw new HttpError(404, 'not_found', `no route for ${method} ${path}`);
}

function createServer(pool) {
  return http.createServer((req, res) => {
    route(pool, req, res).catch((err) => {
      if (err instanceof HttpError) {
        send(res, err.status, { type: 'about:blank', title: err.title, status: err.status, detail: err.message });
        return;
      }
      const { status, body } = problemFromError(err);
      if (err.blocking) body.blocking_attempt = err.blocking;
      if (status === 503) res.setHeader('Retry-After', '1');
      if (status === 500) console.error(err);
      send(res, status, body);
    });
  });
}

module.exports = { createServer };

if (require.main === module) {
  const pool = new Pool({ max: Number(process.env.PG_POOL_MAX || 10) });
  const server = createServer(pool);
  const host = process.env.HOST || '127.0.0.1';
  server.listen(Number(process.env.PORT ?? 3000), host, () => {
    console.log(`jobguard http-api listening on http://${host}:${server.address().port}`);
  });
  const stop = () => server.close(() => pool.end().then(() => process.exit(0)));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
