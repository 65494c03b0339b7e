'use strict';
// A reconciler loop on jobguard.claim_unknown() (1.2).  new
// Reconciler(reconcile, options).run() leases unknown attempts (a batch at
// a time, pausing waitSeconds when there are none) and awaits
// reconcile(attempt) for each claim_unknown row: look the attempt up at
// its provider by attempt.provider_key and say what the provider says.
//
// - a resolved value (JSON): the provider did the work, this is its
//   result.  The batch's results are recorded together (finish_many) when
//   the batch ends; each goes through the compare-and-swap as usual.
// - a ProviderRefused thrown: the provider did not do it.  The attempt
//   fails, the gate opens, the next attempt gets a new key.
// - undefined or null (or an InProgress thrown): the provider does not know
//   yet; the attempt stays unknown and a later round asks again once the
//   lease ends.  Any other error (the provider could not be asked) also
//   leaves it unknown: only the provider's own "no" may fail an attempt.
//
// Exactly once: reconcile is called at most once per row of one
// claim_unknown call, and each answer is reported once (a report lost with
// its connection is repeated: an equal result gets the same outcome).
// stop() (or SIGTERM / SIGINT) lets the current call finish, reports the
// batch's answers so far and makes run() resolve; the rest of the batch is
// not asked (its lease ends).

const os = require('node:os');
const crypto = require('node:crypto');
const { Pool } = require('pg');
const api = require('./index');
const { InvalidTransition } = require('./errors');
const { ProviderRefused, InProgress, isConnectionError, errorText, retryInOf, unrecordable,
  sleep, GaveUp, NOT_REPORTABLE } = require('./worker');

class Reconciler {
  // reconcile: async (attempt) => result | undefined, attempt a
  // claim_unknown row (attempt_id, job_id, operation, provider,
  // provider_key, params, unknown_since, redrivable).  options: connection
  // (pg pool options) or pool (one of your own); name (the reconciler's,
  // default host, pid and a random part); operations, batch (max_rows),
  // olderThanSeconds and leaseSeconds for claim_unknown; waitSeconds (the
  // pause after a round that found nothing); reconnectMinSeconds doubling
  // up to reconnectMaxSeconds; shutdownGraceSeconds (how long a report is
  // tried once stopped); logger (info/warn/error, default console).
  constructor(reconcile, { connection = {}, pool, name, operations = null, batch = 10,
    olderThanSeconds = 0, leaseSeconds = 30, waitSeconds = 2, reconnectMinSeconds = 0.1,
    reconnectMaxSeconds = 5, shutdownGraceSeconds = 30, logger = console } = {}) {
    if (typeof reconcile !== 'function') throw new TypeError('reconcile must be a function');
    if (!(batch >= 1)) throw new RangeError('batch must be at least 1');
    if (!(leaseSeconds > 0) || !(olderThanSeconds >= 0) || !(waitSeconds >= 0)) {
      throw new RangeError('leaseSeconds must be positive, olderThanSeconds and waitSeconds not negative');
    }
    this.reconcile = reconcile;
    this.name = name || `${os.hostname()}:${process.pid}:${crypto.randomBytes(4).toString('hex')}`;
    this.operations = operations;
    this.batch = batch;
    this.olderThanSeconds = olderThanSeconds;
    this.leaseSeconds = leaseSeconds;
    this.waitSeconds = waitSeconds;
    this.reconnectMin = reconnectMinSeconds * 1000;
    this.reconnectMax = reconnectMaxSeconds * 1000;
    this.shutdownGrace = shutdownGraceSeconds * 1000;
    this.logger = logger;
    this.ownPool = !pool;
    this.pool = pool || new Pool({ max: 1, idleTimeoutMillis: 0, ...connection,
      application_name: `${this.name} (jobguard reconciler)`.slice(0, 63) });
    this.onPoolError = (err) => {
      this.lost++;
      this.logger.warn(`${this.name}: idle connection lost: ${err.message}`);
    };
    this.onPoolConnect = () => {
      if (this.lost > 0) { this.stats.reconnects++; this.lost = 0; }
    };
    this.pool.on('error', this.onPoolError);
    this.pool.on('connect', this.onPoolConnect);
    this.lost = 0;
    this.stopping = false;
    this.stoppedAt = 0;
    this.wake = null;
    this.stats = { claimed: 0, won: 0, lost: 0, rejected: 0, failed: 0, left: 0, errors: 0,
      reportErrors: 0, reconnects: 0 };
  }

  // stop: the current call finishes, the batch's answers are reported, no
  // more are leased.
  stop() {
    if (!this.stopping) {
      this.stopping = true;
      this.stoppedAt = Date.now();
      if (this.wake) this.wake();
    }
  }

  // givesUp: once stopped, reconnecting ends after shutdownGraceSeconds.
  givesUp() {
    return this.stopping && Date.now() - this.stoppedAt > this.shutdownGrace;
  }

  // call: fn(tries) on the pool, called again (with backoff) after a lost
  // connection until givesUp(); other errors are thrown as they are.
  async call(fn) {
    let delay = this.reconnectMin;
    for (let tries = 0; ; tries++) {
      try {
        return await fn(tries);
      } catch (err) {
        if (!isConnectionError(err)) throw err;
        this.lost++;
        if (this.givesUp()) throw new GaveUp(err.message);
        this.logger.warn(`${this.name}: connection lost (${err.message}); again in ${delay} ms`);
        await sleep(delay);
        delay = Math.min(delay * 2, this.reconnectMax);
      }
    }
  }

  // run: lease and reconcile until stop() (or, with untilIdle, until a
  // round finds nothing); resolves to the stats.  handleSignals: SIGTERM
  // and SIGINT call stop(); a second one is left to its default action.
  async run({ untilIdle = false, handleSignals = true } = {}) {
    const onSignal = (sig) => {
      if (this.stopping) {
        process.removeListener('SIGTERM', onSignal);
        process.removeListener('SIGINT', onSignal);
        process.kill(process.pid, sig);
        return;
      }
      this.logger.info(`${this.name}: ${sig} received, stopping after the current call`);
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
          rows = await this.call(() => api.claimUnknown(this.pool, { worker: this.name,
            operations: this.operations, maxRows: this.batch,
            olderThanSeconds: this.olderThanSeconds, leaseSeconds: this.leaseSeconds }));
        } catch (err) {
          if (err instanceof GaveUp) break;
          throw err;
        }
        this.stats.claimed += rows.length;
        if (rows.length > 0) {
          await this.runBatch(rows);
        } else if (untilIdle) {
          break;
        } else {
          await new Promise((resolve) => {
            const timer = setTimeout(resolve, this.waitSeconds * 1000);
            this.wake = () => { clearTimeout(timer); resolve(); };
          });
          this.wake = null;
        }
      }
    } finally {
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

  // answer: what one reconcile call said: ['finish', result], ['fail',
  // error, retryIn] or null (left unknown, counted).
  async answer(row) {
    let result;
    try {
      result = await this.reconcile(row);
    } catch (err) {
      if (err instanceof InProgress) {
        this.stats.left++;
        return null;
      }
      if (err instanceof ProviderRefused) return ['fail', errorText(err), retryInOf(err)];
      this.stats.errors++;
      this.logger.warn(`${this.name}: reconciling attempt ${row.attempt_id} of job ${row.job_id} threw ${errorText(err)}; left unknown`);
      return null;
    }
    if (result === undefined || result === null) {
      this.stats.left++;
      return null;
    }
    const why = unrecordable(result);
    if (why) {   // the provider did the work: the attempt must not fail
      this.stats.errors++;
      this.logger.error(`${this.name}: attempt ${row.attempt_id} of job ${row.job_id}: the result cannot be recorded (${why}); left unknown`);
      return null;
    }
    return ['finish', result];
  }

  // runBatch: ask reconcile about each row once, in order (until stopped),
  // then report: failures at once, results with one finish_many.
  async runBatch(rows) {
    const asked = new Set();
    const results = [];
    try {
      for (const row of rows) {
        if (this.stopping) break;
        if (asked.has(row.attempt_id)) continue;
        asked.add(row.attempt_id);
        const answer = await this.answer(row);
        if (answer === null) continue;
        if (answer[0] === 'fail') await this.fail(row, answer[1], answer[2]);
        else results.push([row, answer[1]]);
      }
    } finally {
      await this.finish(results);
    }
  }

  // fail: fail_attempt (the provider said no); a repeat after a lost
  // connection that finds it failed counts as done.
  async fail(row, error, retryInSeconds) {
    try {
      await this.call(async (tries) => {
        try {
          return await api.fail(this.pool, row.attempt_id, error, { retryInSeconds });
        } catch (err) {
          if (tries > 0 && err instanceof InvalidTransition && err.state === 'failed') return 'failed';
          throw err;
        }
      });
      this.stats.failed++;
    } catch (err) {
      this.stats.reportErrors++;
      this.logger.error(`${this.name}: could not fail attempt ${row.attempt_id} of job ${row.job_id}: ${err.message}`);
    }
  }

  // finish: finish_many for the answered results (repeated after a lost
  // connection: an equal result gets the same outcome).
  async finish(results) {
    if (results.length === 0) return;
    let out;
    try {
      out = await this.call(() => api.finishMany(this.pool, results.map(([r]) => r.attempt_id),
        results.map(([, v]) => v)));
    } catch (err) {
      this.stats.reportErrors += results.length;
      this.logger.error(`${this.name}: could not report ${results.length} results: ${err.message}`);
      return;
    }
    for (let i = 0; i < results.length; i++) {
      const [row] = results[i];
      if (out[i].outcome !== null) {
        this.stats[out[i].outcome]++;
      } else {
        this.stats.reportErrors++;
        const log = NOT_REPORTABLE.includes(out[i].sqlstate) ? 'warn' : 'error';
        this.logger[log](`${this.name}: the result of attempt ${row.attempt_id} of job ${row.job_id} was refused: ${out[i].sqlstate} ${out[i].message}`);
      }
    }
  }
}

module.exports = { Reconciler };
