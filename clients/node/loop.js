'use strict';
// The claim/report/backoff rules of jobguard's loops, written once: the
// Worker (worker.js, on claim) and the Reconciler (reconciler.js, on
// claim_unknown) are both a Loop and differ only in what they ask and run.
//
// SPEC 1.3, "an unrecorded report is unknown, never failed":
// - a report (finish, finish_many, fail, mark_unknown) that raises anything
//   but jobguard's own refusal of it (a lost connection, a statement
//   timeout, a serialization failure, a lock timeout, an admin shutdown,
//   any unexpected error) is tried again, the same report (finish with an
//   equal result is idempotent), with backoff; one that still cannot be
//   recorded leaves the attempt open (its deadline makes it unknown).  It
//   is never turned into fail_attempt.
// - a result the server cannot take (22004 null, 54000 too large, another
//   class 22 error of the value) is "cannot be sent": the caller marks the
//   attempt unknown, the reason logged.  A contract-breaking result is
//   finish_attempt's to judge ('rejected').
// - a server error in claim or claim_unknown is logged and the round tried
//   again with backoff; it never ends the loop.
// Every statement is unnamed unless prepareStatements is set (index.js):
// nothing is prepared on the server, so every call works behind a
// transaction-mode pooler.

const os = require('node:os');
const crypto = require('node:crypto');
const { Pool } = require('pg');
const api = require('./index');
const { InvalidTransition } = require('./errors');

// the longest error text a failed attempt records
const MAX_ERROR = 4000;
// how many times in all a report is tried that meets a server error on an
// intact connection (a lost connection is tried again until the loop gives up)
const REPORT_TRIES = 6;
// the SQLSTATEs of a finish that this attempt can never record (not open,
// a different result, no such attempt): finish's InvalidTransition,
// ResultMismatch and AttemptNotFound
const NOT_REPORTABLE = ['JG006', 'JG007', 'JG009'];

// ProviderRefused: thrown by a handler or a reconcile function: the
// provider said no (it did not do the work, and will not).  The attempt
// fails, the gate opens, the next attempt gets a new provider key;
// retryInSeconds (undefined: the operation's backoff) holds it back.
class ProviderRefused extends Error {
  // message: the attempt's error; retryInSeconds: the delay before a retry
  constructor(message, retryInSeconds) {
    super(message);
    this.name = 'ProviderRefused';
    this.retryInSeconds = retryInSeconds;
  }
}

// RetryLater: thrown by a handler: the provider refused for now; fail the
// attempt and have claim hand the job out again no sooner than retryInSeconds.
class RetryLater extends ProviderRefused {
  // message: the attempt's error; retryInSeconds: the delay before a retry
  constructor(message, retryInSeconds) {
    super(message, retryInSeconds);
    this.name = 'RetryLater';
  }
}

// InProgress: thrown by a handler: the provider says this provider key is
// still being processed (Stripe: 409 idempotency_key_in_use).  Not a
// failure: the attempt is marked unknown (mark_unknown), so that a redrive
// or a reconciler asks again under the same key later.
class InProgress extends Error {
  // message: what the provider said
  constructor(message = 'the provider is still processing this key') {
    super(message);
    this.name = 'InProgress';
  }
}

// Lost: the connection broke during a statement that is not repeated blindly.
class Lost extends Error {}
// GaveUp: the server could not be reached (or a report recorded) and the
// loop stopped trying.
class GaveUp extends Error {}

// SQLSTATEs that mean the connection is gone or the server is not taking
// connections: connection exceptions (08), admin/crash shutdown, starting up
const CONNECTION_STATES = /^(08|57P01|57P02|57P03)/;

// isConnectionError: whether err means "no connection" (rather than a
// refusal of the statement by the server).
function isConnectionError(err) {
  if (!err || typeof err !== 'object') return false;
  if (err.severity !== undefined) return CONNECTION_STATES.test(String(err.code || ''));
  if (typeof err.code === 'string' && /^E[A-Z]+$/.test(err.code)) return true;  // ECONNREFUSED, ...
  return /Connection terminated|connection error|not queryable|timeout exceeded when trying to connect/i
    .test(String(err.message || ''));
}

// cannotTake: whether the server refused the value itself (class 22: null,
// not valid jsonb; class 54: over jobguard.max_payload_size): sending the
// same value again cannot succeed.
function cannotTake(err) {
  const code = String((err && err.code) || '');
  return /^(22|54)/.test(code);
}

// retryable: whether a statement that raised err may be tried again as it
// was: anything but jobguard's own refusals (JG...) and a value the server
// cannot take.  Timeouts (57014, 55P03), serialization failures (40001),
// shutdowns and unexpected errors are.
function retryable(err) {
  const code = String((err && err.code) || '');
  return !code.startsWith('JG') && !cannotTake(err);
}

// isRefusal: whether what a handler threw says the provider refused (did
// not do the work): ProviderRefused (RetryLater), or any error with a
// numeric retryInSeconds.  Only these fail an attempt.
function isRefusal(err) {
  return err instanceof ProviderRefused || retryInOf(err) !== undefined;
}

// errorText: the error an attempt records for what a handler threw.
function errorText(err) {
  const name = (err && err.name) || 'Error';
  return `${name}: ${err && err.message !== undefined ? err.message : String(err)}`.slice(0, MAX_ERROR);
}

// retryInOf: the delay (seconds) an error asks for its retry, or undefined.
function retryInOf(err) {
  return err && typeof err.retryInSeconds === 'number' ? err.retryInSeconds : undefined;
}

// unrecordable: why a handler's result cannot be sent as a job's result
// (jobguard records a JSON value; SQL NULL is refused), or null when it can.
function unrecordable(result) {
  if (result === undefined || result === null) {
    return `the handler resolved ${result}; a result must be a JSON value other than null`;
  }
  let text;
  try {
    text = JSON.stringify(result);
  } catch (err) {
    return `it is not JSON (${err.message})`;
  }
  if (typeof text !== 'string') return `it is not JSON (a ${typeof result})`;
  return null;
}

// sleep: resolve after ms milliseconds.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// What a report resolved to, besides an outcome ('won', 'lost', 'rejected'):
// UNSENDABLE (with .why) the server cannot take the result; null, it could
// not be recorded (the attempt stays open).
class Unsendable {
  // why: the server's refusal, for the log
  constructor(why) { this.why = why; }
}

class Loop {
  // kind: 'worker' or 'reconciler' (the connections' application_name);
  // maxConnections: the own pool's size; stats: the loop's counters (the
  // common ones are added).  The options every loop takes: connection or
  // pool, name, reconnectMinSeconds doubling up to reconnectMaxSeconds,
  // shutdownGraceSeconds, logger.
  constructor(kind, maxConnections, stats, { connection = {}, pool, name,
    reconnectMinSeconds = 0.1, reconnectMaxSeconds = 5, shutdownGraceSeconds = 30,
    logger = console } = {}) {
    this.name = name || `${os.hostname()}:${process.pid}:${crypto.randomBytes(4).toString('hex')}`;
    this.kind = kind;
    this.reconnectMin = reconnectMinSeconds * 1000;
    this.reconnectMax = reconnectMaxSeconds * 1000;
    this.shutdownGrace = shutdownGraceSeconds * 1000;
    this.logger = logger;
    this.ownPool = !pool;
    this.pool = pool || new Pool({ max: maxConnections, idleTimeoutMillis: 0, ...connection,
      application_name: `${this.name} (jobguard ${kind})`.slice(0, 63) });
    this.onPoolError = (err) => {
      this.lost++;
      this.logger.warn(`${this.name}: idle connection lost: ${err.message}`);
    };
    // a new connection: count it as a reconnect if one was lost before
    this.onPoolConnect = () => {
      if (this.lost > 0) { this.stats.reconnects++; this.lost = 0; }
    };
    this.pool.on('error', this.onPoolError);
    this.pool.on('connect', this.onPoolConnect);
    this.lost = 0;              // connections lost since the last new one
    this.stopping = false;
    this.stoppedAt = 0;
    this.wake = null;           // ends the current pause early (stop)
    this.claimDelay = 0;        // the pause after the last failed claim round
    this.stats = { ...stats, claimErrors: 0, reportRetries: 0, reportErrors: 0, reconnects: 0 };
  }

  // stop: the current job finishes and reports, nothing more is claimed.
  stop() {
    if (!this.stopping) {
      this.stopping = true;
      this.stoppedAt = Date.now();
      if (this.wake) this.wake();
    }
  }

  // givesUp: once stopped, reconnecting ends after shutdownGraceSeconds
  // (the Worker also at once when it holds nothing).
  givesUp() {
    return this.stopping && Date.now() - this.stoppedAt > this.shutdownGrace;
  }

  // pause: wait ms, or less if stop() is called.
  async pause(ms) {
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => { clearTimeout(timer); resolve(); };
    });
    this.wake = null;
  }

  // drive: the loop.  Until stop(): a round of claim() (claimRound: a
  // failed one is logged and tried again with backoff), then handle(rows),
  // or, when it found nothing, idle() (true: the loop ends).  SIGTERM /
  // SIGINT call stop() (a second one is left to its default action).  Then
  // it closes: closing() (the Worker's heartbeats), the listeners, the own
  // pool; resolves to the stats.
  async drive({ claim, handle, idle, handleSignals, closing = async () => {} }) {
    const onSignal = (sig) => {
      if (this.stopping) {
        process.removeListener('SIGTERM', onSignal);
        process.removeListener('SIGINT', onSignal);
        process.kill(process.pid, sig);
        return;
      }
      this.logger.info(`${this.name}: ${sig} received, stopping after the current job`);
      this.stop();
    };
    if (handleSignals) {
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
    }
    try {
      while (!this.stopping) {
        let rows;
        try {
          rows = await this.claimRound(claim);
        } catch (err) {
          if (err instanceof GaveUp) break;
          throw err;
        }
        if (rows === null) continue;
        if (rows.length > 0) await handle(rows);
        else if (await idle()) break;
      }
    } finally {
      await closing();
      if (handleSignals) {
        process.removeListener('SIGTERM', onSignal);
        process.removeListener('SIGINT', onSignal);
      }
      this.pool.removeListener('connect', this.onPoolConnect);
      if (this.ownPool) await this.pool.end();
      else this.pool.removeListener('error', this.onPoolError);
    }
    return this.stats;
  }

  // call: fn(tries) on the pool (tries: the earlier calls).  A lost
  // connection: with retry, wait (backoff) and call again until givesUp()
  // (GaveUp), else throw Lost.  A retryable server error on an intact
  // connection is tried again up to `more` more times; other errors are
  // thrown as they are.
  async call(fn, { retry, more = 0, givesUp = () => this.givesUp() }) {
    let delay = this.reconnectMin;
    for (let tries = 0; ; tries++) {
      try {
        return await fn(tries);
      } catch (err) {
        if (isConnectionError(err)) {
          this.lost++;
          if (!retry) throw new Lost(err.message);
          if (givesUp()) throw new GaveUp(err.message);
          this.logger.warn(`${this.name}: connection lost (${err.message}); again in ${delay} ms`);
        } else {
          if (more <= 0 || !retryable(err)) throw err;
          if (givesUp()) throw new GaveUp(err.message);
          more--;
          this.stats.reportRetries++;
          this.logger.warn(`${this.name}: ${err.code || 'error'}: ${err.message}; the same statement again in ${delay} ms`);
        }
        await sleep(delay);
        delay = Math.min(delay * 2, this.reconnectMax);
      }
    }
  }

  // claimRound: fn() (a claim, and what goes with it); its rows, or null
  // when it met a lost connection or a server error: logged, and the loop
  // pauses (doubling from reconnectMinSeconds to reconnectMaxSeconds) and
  // tries again.  GaveUp is thrown (the loop ends).
  async claimRound(fn) {
    try {
      const rows = await fn();
      this.claimDelay = 0;
      return rows;
    } catch (err) {
      if (err instanceof GaveUp) throw err;
      this.claimDelay = Math.min(Math.max(this.claimDelay * 2, this.reconnectMin), this.reconnectMax);
      if (err instanceof Lost) {
        this.logger.warn(`${this.name}: connection lost (${err.message}); again in ${this.claimDelay} ms`);
      } else {
        this.stats.claimErrors++;
        this.logger.error(`${this.name}: claim failed (${err.code || 'error'}: ${err.message}); again in ${this.claimDelay} ms`);
      }
      await this.pause(this.claimDelay);
      return null;
    }
  }

  // report: one report, tried again after a lost connection or a retryable
  // server error (REPORT_TRIES in all); its value, or undefined (counted,
  // logged) when it could not be recorded.
  async report(item, what, fn) {
    try {
      return await this.call(fn, { retry: true, more: REPORT_TRIES - 1 });
    } catch (err) {
      this.stats.reportErrors++;
      this.logger.error(`${this.name}: could not ${what} attempt ${item.attempt_id} of job ${item.job_id}: ${err.message}; left open`);
      return undefined;
    }
  }

  // finishOne: finish_attempt, tried again as every report is; resolves to
  // the outcome, an Unsendable (the server cannot take this result), or
  // null (not recorded: the attempt stays open; or never recordable: not
  // open, another result, no such attempt).
  async finishOne(item, result) {
    const outcome = await this.report(item, 'report the result of', async () => {
      try {
        return await api.finish(this.pool, item.attempt_id, result);
      } catch (err) {
        if (cannotTake(err)) return new Unsendable(`finish_attempt refused it (${err.code}: ${err.message})`);
        throw err;
      }
    });
    return outcome === undefined ? null : outcome;
  }

  // finishBatch: finish_many for [item, result] pairs (tried again as
  // every report is); resolves to one value per pair, as finishOne's.  A
  // row refused for a retryable reason, or a call refused as a whole, is
  // tried again alone (finishOne).
  async finishBatch(pairs) {
    let rows;
    try {
      rows = await this.call(() => api.finishMany(this.pool, pairs.map(([i]) => i.attempt_id),
        pairs.map(([, r]) => r)), { retry: true, more: REPORT_TRIES - 1 });
    } catch (err) {
      if (err instanceof GaveUp || err instanceof Lost || retryable(err)) {
        for (const [item] of pairs) {
          this.stats.reportErrors++;
          this.logger.error(`${this.name}: could not report the result of attempt ${item.attempt_id} of job ${item.job_id}: ${err.message}; left open`);
        }
        return pairs.map(() => null);
      }
      this.logger.warn(`${this.name}: finish_many refused the batch (${err.message}); finishing one by one`);
      const each = [];
      for (const [item, result] of pairs) each.push(await this.finishOne(item, result));
      return each;
    }
    const out = [];
    for (let i = 0; i < pairs.length; i++) {
      const [item, result] = pairs[i];
      const row = rows[i];
      if (row.outcome !== null) {
        out.push(row.outcome);
      } else if (NOT_REPORTABLE.includes(row.sqlstate)) {
        this.stats.reportErrors++;
        this.logger.error(`${this.name}: could not report the result of attempt ${item.attempt_id} of job ${item.job_id}: ${row.message}`);
        out.push(null);
      } else if (cannotTake({ code: row.sqlstate })) {
        out.push(new Unsendable(`finish_many refused it (${row.sqlstate}: ${row.message})`));
      } else {
        out.push(await this.finishOne(item, result));   // the same report, alone, again
      }
    }
    return out;
  }

  // failOne: fail_attempt (the provider said no), tried again as every
  // report is; a repeat that finds it failed counts as done.  Resolves
  // true once it is failed.
  async failOne(item, error, retryInSeconds) {
    return Boolean(await this.report(item, 'fail', async (tries) => {
      try {
        return await api.fail(this.pool, item.attempt_id, error, { retryInSeconds });
      } catch (err) {
        if (tries > 0 && err instanceof InvalidTransition && err.state === 'failed') return 'failed';
        throw err;
      }
    }));
  }

  // markUnknownOne: mark_unknown (the provider may have done the work:
  // redrive or reconciliation decide), the reason logged; tried again as
  // every report is; a repeat that finds it unknown counts as done;
  // gone: what an attempt closed meanwhile resolves to (undefined: an
  // error).  Resolves to 'unknown', gone, or undefined (left open).
  async markUnknownOne(item, why, gone) {
    const done = await this.report(item, 'mark unknown', async (tries) => {
      try {
        return await api.markUnknown(this.pool, item.attempt_id);
      } catch (err) {
        if (tries > 0 && err instanceof InvalidTransition && err.state === 'unknown') return 'unknown';
        if (gone !== undefined && err instanceof InvalidTransition) return gone;
        throw err;
      }
    });
    if (done === 'unknown') {
      this.logger.warn(`${this.name}: attempt ${item.attempt_id} of job ${item.job_id} marked unknown: ${why}`);
    }
    return done;
  }
}

module.exports = { Loop, Unsendable, ProviderRefused, RetryLater, InProgress, Lost, GaveUp,
  isConnectionError, retryable, cannotTake, isRefusal, errorText, retryInOf, unrecordable, sleep,
  NOT_REPORTABLE, REPORT_TRIES, MAX_ERROR };
