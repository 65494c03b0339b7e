'use strict';
// jobguard for Node.js: the jobguard SQL API on node-postgres.  Every
// function takes a Pool, Client or PoolClient first (anything with
// query(text, values)) and runs one statement on it, in that connection's
// current transaction.  jsonb arguments take any JSON value; ids are
// numbers (exact: an id beyond 2^53 raises a RangeError rather than being
// rounded); intervals are given in seconds.  Errors with a jobguard
// SQLSTATE are thrown as the classes of errors.js.  The Worker (a claim
// loop) is in worker.js.

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

// Prepared statements (off by default).  Off, every statement is unnamed:
// nothing is prepared on the server, so every call works behind a
// transaction-mode pooler, where a prepared statement's name belongs to a
// server connection that other clients share.  setPrepareStatements(true)
// only where every connection is a session of its own (direct, or a
// session-mode pooler): each statement is then prepared once per
// connection (its parse and plan saved), under a name made from its text,
// so that one name never stands for two statements.
const { createHash } = require('node:crypto');
const statementNames = new Map();
let prepareStatements = false;

// setPrepareStatements: whether the calls (and the Worker's and the
// Reconciler's) prepare their statements from now on; see above.
function setPrepareStatements(on) {
  if (typeof on !== 'boolean') throw new TypeError('setPrepareStatements takes true or false');
  prepareStatements = on;
}

// A statement prepared before ALTER EXTENSION jobguard UPDATE changed its
// result's columns is refused on its connection from then on (0A000,
// "cached plan must not change result type"), until the connection closes.
// The refusal comes at the statement's bind, before anything runs, so run
// makes a new generation of names (every connection prepares its statements
// again under them, once) and sends the statement once more.
const STALE_PLAN = /cached plan must not change result type/;
let generation = 0;

// statementName: the prepared statement name of a statement's text, in
// the current generation.
function statementName(text) {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `jobguard_${createHash('sha256').update(text).digest('hex').slice(0, 32)}`;
    if (generation > 0) name += `_${generation}`;
    statementNames.set(text, name);
  }
  return name;
}

// staleStatement: whether err is the refusal of a statement prepared before
// its result's columns changed; then a new generation of names (unless a
// concurrent call has made one since gen, the generation it ran under).
function staleStatement(err, gen) {
  if (err.code !== '0A000') return false;
  // the server's function name, whatever the language of its messages
  if (err.routine !== 'RevalidateCachedQuery' && !STALE_PLAN.test(err.message)) return false;
  if (generation === gen) {
    generation += 1;
    statementNames.clear();
  }
  return true;
}

// run: one statement; its rows, with jobguard errors as their classes.  A
// prepared statement refused as stale (above) is sent once more under its
// new name; in a transaction block that second try cannot run (the
// refusal aborted the transaction), and the refusal is what the caller sees.
async function run(db, text, values) {
  const query = { text, values, types: TYPES };
  const gen = generation;
  if (prepareStatements) query.name = statementName(text);
  try {
    const { rows } = await db.query(query);
    return rows;
  } catch (err) {
    if (query.name && staleStatement(err, gen)) {
      try {
        const { rows } = await db.query({ ...query, name: statementName(text) });
        return rows;
      } catch (again) {
        throw errors.translate(again.code === '25P02' ? err : again);
      }
    }
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

// fail: report that the attempt failed; resolves to 'failed'.  claim hands
// the job out again no sooner than retryInSeconds from now (not given: the
// operation's retry backoff); an explicit beginAttempt is not held back.
async function fail(db, attemptId, error, { retryInSeconds } = {}) {
  if (retryInSeconds === undefined || retryInSeconds === null) {
    return value(db, 'SELECT jobguard.fail_attempt($1, $2) AS v', [attemptId, nul(error)]);
  }
  return value(db, 'SELECT jobguard.fail_attempt($1, $2, $3::interval) AS v',
    [attemptId, nul(error), seconds(retryInSeconds)]);
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

// claim: begin an attempt on each of up to maxJobs runnable jobs (oldest
// first; operations null: any) for worker, each with a deadline
// timeoutSeconds from now; resolves to their rows (column names as in SQL),
// [] when nothing is runnable.  On 1.2 a row also has provider_key (send it
// to the provider as its idempotency key) and redrive (true: a stalled
// attempt asked again under the same key); a 1.1 database has neither.
// On 1.3 a row has failover (true: the attempt runs against a provider of
// the operation's failover route, not the job's own); run it against the
// row's provider.  provider: only attempts against that provider (on 1.2:
// its jobs and the failovers it is certified for); providers (1.3): only
// attempts whose chosen provider is one of these (null: any; a 1.2
// database has no such argument: 42883).  waitSeconds > 0: wait that long
// for work (holds the connection meanwhile).
async function claim(db, { worker, operations, timeoutSeconds = 30, maxJobs = 1, provider,
  waitSeconds = 0, providers } = {}) {
  const values = [nul(worker), operations == null ? null : [...operations],
    seconds(timeoutSeconds), nul(maxJobs), nul(provider), seconds(waitSeconds)];
  // every column: 1.2 adds provider_key and redrive, 1.3 failover; 1.1 has the first seven
  if (providers == null) {
    return run(db, 'SELECT * FROM jobguard.claim($1, $2::text[], $3::interval, $4, $5, $6::interval)',
      values);
  }
  return run(db, `SELECT * FROM jobguard.claim($1, $2::text[], $3::interval, $4, $5, $6::interval,
                                               $7::text[])`, [...values, [...providers]]);
}

// claimTakesProviders: whether the database's claim takes a providers list
// (1.3).  One catalog look-up.
async function claimTakesProviders(db) {
  return value(db, `SELECT pg_catalog.to_regprocedure('jobguard.claim(text, text[], interval,'
                     || ' integer, text, interval, text[])') IS NOT NULL AS v`, []);
}

// heartbeat: push back the deadline of a started attempt that has not timed
// out, to extendBySeconds from now (default: the timeout it began with);
// resolves to the new deadline (a Date).  InvalidTransition (JG006) once
// the attempt is past its deadline.
async function heartbeat(db, attemptId, extendBySeconds) {
  return value(db, 'SELECT jobguard.heartbeat($1, $2::interval) AS v',
    [attemptId, seconds(extendBySeconds)]);
}

// submitMany: submit many requests in one statement; resolves to one row
// per request, in order: { ord, job_id, created, sqlstate, message }.  A
// refused request is a row with its sqlstate and message (BY_SQLSTATE names
// the class submit would have thrown), not an error.
async function submitMany(db, requests) {
  const col = (f) => requests.map((r) => nul(f(r)));
  const limits = requests.map((r) => nul(r.maxAttempts));
  return run(db, `SELECT ord, job_id, created, sqlstate, message
                    FROM jobguard.submit_many($1::text[], $2::text[], $3::text[], $4::jsonb[],
                                              $5::text[], $6::integer[])
                   ORDER BY ord`,
  [col((r) => r.ownerId), col((r) => r.idempotencyKey), col((r) => r.operation),
    requests.map((r) => json(r.params)), col((r) => r.provider),
    limits.every((m) => m === null) ? null : limits]);
}

// claimUnknown: lease up to maxRows unknown attempts (unknown for at least
// olderThanSeconds; operations null: any) to worker for leaseSeconds, to
// look up at the provider by provider_key; resolves to their rows
// (attempt_id, job_id, operation, provider, provider_key, params,
// unknown_since, redrivable).  Report with finish / finishMany, fail, or
// nothing (still unknown).  1.2.
async function claimUnknown(db, { worker, operations, maxRows = 1, olderThanSeconds = 0,
  leaseSeconds = 30 } = {}) {
  return run(db, `SELECT attempt_id, job_id, operation, provider, provider_key, params,
                         unknown_since, redrivable
                    FROM jobguard.claim_unknown($1, $2::text[], $3, $4::interval, $5::interval)`,
  [nul(worker), operations == null ? null : [...operations], nul(maxRows),
    seconds(olderThanSeconds), seconds(leaseSeconds)]);
}

// finishMany: report many results in one statement; resolves to one row
// per element, in order: { ord, attempt_id, outcome, sqlstate, message }.
// outcome is what finish would have resolved to; a refused element (JG006,
// JG007, JG009, 22004, 54000) has a null outcome, its sqlstate and message
// (BY_SQLSTATE names the class finish would have thrown), and wrote
// nothing.  1.2.
async function finishMany(db, attemptIds, results) {
  return run(db, `SELECT ord, attempt_id, outcome, sqlstate, message
                    FROM jobguard.finish_many($1::bigint[], $2::jsonb[])
                   ORDER BY ord`, [attemptIds.map(nul), results.map(json)]);
}

// providerKey: the attempt's provider key.  1.2.
async function providerKey(db, attemptId) {
  return value(db, 'SELECT jobguard.provider_key($1) AS v', [attemptId]);
}

module.exports = {
  submit, beginAttempt, finish, fail, markUnknown, cancelAttempt, cancelJob,
  jobState, job, attempts, attempt, awaitJob, claim, claimTakesProviders, heartbeat, submitMany,
  claimUnknown, finishMany, providerKey,
  setPrepareStatements,
  ...errors,
};
// the worker and reconciler loops (they use the functions above, so they come last)
const { Worker, RetryLater, ProviderRefused, InProgress } = require('./worker');
const { Reconciler } = require('./reconciler');
Object.assign(module.exports, { Worker, RetryLater, ProviderRefused, InProgress, Reconciler });
// the certification runner (1.3)
const { certify, PayloadRightsRequired, CertifyError, formatFailure } = require('./certify');
Object.assign(module.exports, { certify, PayloadRightsRequired, CertifyError, formatFailure });
