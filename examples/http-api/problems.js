'use strict';
// RFC 9457 problem documents.  Every problem has a type URI under
// PROBLEM_BASE ("/problems/", resolved against the service's own address;
// GET /problems/{name} describes the type), the HTTP status phrase as its
// title, the status, and a detail for humans.  jobguard's errors add
// sqlstate (the code to act on), condition, and the server's DETAIL and
// HINT.  Errors are mapped by err.code only, never by message text.

const { STATUS_CODES } = require('node:http');

const PROBLEM_BASE = '/problems/';

// name -> [status, what the problem type means]
const PROBLEM_TYPES = {
  'idempotency-key-reused': [422, 'JG001: this owner used the Idempotency-Key for a different request.'],
  'attempt-in-flight': [409, 'JG002: an open attempt blocks a new one; blocking_attempt names it.'],
  'job-closed': [409, 'JG003: the job succeeded or was cancelled; it can still be read.'],
  'provider-not-certified': [422, 'JG004: the fallback provider is not certified for the operation.'],
  'attempts-exhausted': [409, 'JG005: the job has used all of its attempts.'],
  'invalid-transition': [409, 'JG006: the attempt\'s state does not allow this transition.'],
  'result-mismatch': [422, 'JG007: the attempt already reported a different result.'],
  'job-not-found': [404, 'JG008: no job with that id.'],
  'attempt-not-found': [404, 'JG009: no attempt with that id.'],
  'invalid-argument': [400, '22004, 22023, 22P02: a required field is missing, empty, too long, out of range or of the wrong type.'],
  'missing-idempotency-key': [400, 'POST /jobs needs an Idempotency-Key header.'],
  'invalid-idempotency-key': [400, 'The Idempotency-Key header is not a Structured Field String ("...") or Token.'],
  'missing-owner': [400, 'POST /jobs needs an X-Owner-Id header.'],
  'invalid-json': [400, 'The body is not valid JSON.'],
  'invalid-body': [400, 'The body is valid JSON of the wrong shape.'],
  'payload-too-large': [413, 'The body is larger than 1 MiB.'],
  'not-found': [404, 'No such route or resource.'],
  'request-in-progress': [409, 'Prefer: wait=0 was given and a request with the same Idempotency-Key is still in progress; retry it.'],
  'try-again': [503, 'A serialization failure or deadlock (40001, 40P01); retry the request.'],
  'database-unavailable': [503, 'The database cannot be reached right now (restart, failover); retry after Retry-After seconds.'],
  'internal-error': [500, 'An unexpected error; it is logged, not shown.'],
};

const BY_SQLSTATE = {
  JG001: 'idempotency-key-reused',
  JG002: 'attempt-in-flight',
  JG003: 'job-closed',
  JG004: 'provider-not-certified',
  JG005: 'attempts-exhausted',
  JG006: 'invalid-transition',
  JG007: 'result-mismatch',
  JG008: 'job-not-found',
  JG009: 'attempt-not-found',
  '22004': 'invalid-argument',
  '22023': 'invalid-argument',
  '22P02': 'invalid-argument',
  '55P03': 'request-in-progress',    // lock_timeout, only set for Prefer: wait=0
  '40001': 'try-again',
  '40P01': 'try-again',
};

// errors of the connection itself, not of a statement: the database is
// restarting, failing over or out of reach
const UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOENT', 'EPIPE', 'ETIMEDOUT',
  '57P01', '57P02', '57P03', '53300']);
function databaseUnavailable(err) {
  if (!err) return false;
  if (UNAVAILABLE_CODES.has(err.code) || /^08/.test(err.code || '')) return true;
  return /Connection terminated|connection error|timeout exceeded when trying to connect|Client was closed/
    .test(err.message || '');
}

// problem: the document for a named problem type.
function problem(name, detail, extra = {}) {
  const [status] = PROBLEM_TYPES[name];
  return { status, body: { type: PROBLEM_BASE + name, title: STATUS_CODES[status], status, detail, ...extra } };
}

// problemFromError: the document for an error a jobguard call raised.
function problemFromError(err) {
  const name = err && typeof err.code === 'string' && BY_SQLSTATE[err.code];
  if (name) {
    const extra = { sqlstate: err.code };
    if (err.constructor && err.constructor.condition) extra.condition = err.constructor.condition;
    if (err.detail) extra.pg_detail = err.detail;
    if (err.hint) extra.hint = err.hint;
    return problem(name, err.message, extra);
  }
  if (databaseUnavailable(err)) return problem('database-unavailable', 'the database is not available right now');
  return problem('internal-error', 'internal error');
}

module.exports = { PROBLEM_BASE, PROBLEM_TYPES, BY_SQLSTATE, problem, problemFromError, databaseUnavailable };
