'use strict';
// jobguard for Node.js: the jobguard SQL API on node-postgres.  Every
// function takes a Pool, Client or PoolClient first (anything with
// query(text, values)) and runs one statement on it, in that connection's
// current transaction.  jsonb arguments take any JSON value; ids are
// numbers (exact: an id beyond 2^53 raises a RangeError rather than being
// rounded); intervals are given in seconds.  Errors with a jobguard
// SQLSTATE are thrown as the classes of errors.js.

const errors = require('./errors');

// int8 -> number, refusing to round; other types as pg parses them.  Set
// per query, so the application's global pg type parsers stay untouched.
const INT8 = 20;
function parseId(text) {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new RangeError(`id ${text} is beyond 2^53`);
  return n;
}
const { types: pgTypes } = require('pg');
const TYPES = {
  getTypeParser: (oid, format) => (oid === INT8 ? parseId : pgTypes.getTypeParser(oid, format)),
};

// run: one statement; its rows, with jobguard errors as their classes.
async function run(db, text, values) {
  try {
    const { rows } = await db.query({ text, values, types: TYPES });
    return rows;
  } catch (err) {
    throw errors.translate(err);
  }
}

// value: a statement returning one value; that value.
async function value(db, text, values) {
  const rows = await run(db, text, values);
  return rows[0].v;
}

// json: a value for a jsonb parameter (undefined and null are SQL NULL,
// which jobguard refuses with 22004 where a value is required).
function json(v) {
  return v === undefined || v === null ? null : JSON.stringify(v);
}

// seconds: an interval parameter from seconds (undefined: SQL NULL).
function seconds(s) {
  return s === undefined || s === null ? null : `${Number(s)} seconds`;
}

// nul: undefined as SQL NULL.
const nul = (v) => (v === undefined ? null : v);

// submit: create the job for (ownerId, idempotencyKey), or return the
// existing one for the same request.  Resolves to { jobId, created }.
async function submit(db, { ownerId, idempotencyKey, operation, params, provider, maxAttempts }) {
  const rows = await run(db,
    'SELECT job_id, created FROM jobguard.submit($1, $2, $3, $4::jsonb, $5, $6)',
    [nul(ownerId), nul(idempotencyKey), nul(operation), json(params), nul(provider), nul(maxAttempts)]);
  return { jobId: rows[0].job_id, created: rows[0].created };
}

// beginAttempt: start the job's next attempt; resolves to its id.
// options: provider (default the job's own), timeoutSeconds (default 30),
// attemptKey (a retried begin with the same key gets the same attempt).
async function beginAttempt(db, jobId, { provider, timeoutSeconds = 30, attemptKey } = {}) {
  return value(db, 'SELECT jobguard.begin_attempt($1, $2, $3::interval, $4) AS v',
    [jobId, nul(provider), seconds(timeoutSeconds), nul(attemptKey)]);
}

// finish: report a result; resolves to 'won', 'lost' or 'rejected'.
async function finish(db, attemptId, result) {
  return value(db, 'SELECT jobguard.finish_attempt($1, $2::jsonb) AS v', [attemptId, json(result)]);
}

// fail: report that the attempt failed; resolves to 'failed'.
async function fail(db, attemptId, error) {
  return value(db, 'SELECT jobguard.fail_attempt($1, $2) AS v', [attemptId, nul(error)]);
}

// markUnknown: the caller saw a timeout; resolves to 'unknown'.
async function markUnknown(db, attemptId) {
  return value(db, 'SELECT jobguard.mark_unknown($1) AS v', [attemptId]);
}

// cancelAttempt: stop waiting for an open attempt; resolves to 'cancelled'.
async function cancelAttempt(db, attemptId, reason) {
  return value(db, 'SELECT jobguard.cancel_attempt($1, $2) AS v', [attemptId, nul(reason)]);
}

// cancelJob: cancel the job; resolves to 'cancelled'.
async function cancelJob(db, jobId, reason) {
  return value(db, 'SELECT jobguard.cancel_job($1, $2) AS v', [jobId, nul(reason)]);
}

// jobState: the job's derived state.
async function jobState(db, jobId) {
  return value(db, 'SELECT jobguard.job_state($1) AS v', [jobId]);
}

// job: the job row of jobguard.job() (snake_case columns, as in SQL).
async function job(db, jobId) {
  return (await run(db, 'SELECT * FROM jobguard.job($1)', [jobId]))[0];
}

// attempts: the job's attempts (jobguard.attempts_of()), in order.
async function attempts(db, jobId) {
  return run(db, 'SELECT * FROM jobguard.attempts_of($1)', [jobId]);
}

// attempt: one attempt (jobguard.attempt_overview), or undefined.
async function attempt(db, attemptId) {
  return (await run(db, 'SELECT * FROM jobguard.attempt_overview WHERE attempt_id = $1',
    [attemptId]))[0];
}

// awaitJob: wait until the job succeeds, fails or is cancelled, or
// timeoutSeconds pass; resolves to its state then.  Holds the connection
// while it waits: give it a Client or PoolClient of its own.
async function awaitJob(db, jobId, timeoutSeconds) {
  return value(db, 'SELECT jobguard.await($1, $2::interval) AS v', [jobId, seconds(timeoutSeconds)]);
}

// ---------------------------------------------------------------------------
// Version 1.1 (SPEC "Version 1.1"): NOT on the server yet, so not here yet.
// Each is one statement through run()/value(), like the functions above:
//
//   claim(db, { worker, operations, timeoutSeconds = 30, maxJobs = 1, provider, waitSeconds = 0 })
//     -> [{ attempt_id, job_id, attempt_no, operation, provider, params, deadline }]
//     SELECT * FROM jobguard.claim($1, $2::text[], $3::interval, $4, $5, $6::interval)
//   heartbeat(db, attemptId, extendBySeconds) -> Date
//     SELECT jobguard.heartbeat($1, $2::interval) AS v
//   fail(db, attemptId, error, { retryInSeconds })
//     SELECT jobguard.fail_attempt($1, $2, $3::interval) AS v
//   submitMany(db, requests) -> [{ ord, job_id, created, sqlstate, message }]
//     SELECT * FROM jobguard.submit_many($1, $2, $3, $4::jsonb[], $5, $6)
//     (a refused row carries sqlstate and message: errors.BY_SQLSTATE names its class)
// ---------------------------------------------------------------------------

module.exports = {
  submit, beginAttempt, finish, fail, markUnknown, cancelAttempt, cancelJob,
  jobState, job, attempts, attempt, awaitJob,
  ...errors,
};
