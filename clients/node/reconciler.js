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
// A report that meets any server error but jobguard's refusal of it (a
// statement or lock timeout, a serialization failure, a shutdown, a lost
// connection) is tried again, the same report; one that still cannot be
// recorded leaves the attempt unknown, never failed.  A server error in
// claim_unknown is logged and the round tried again with backoff.  (The
// rules are loop.js's, shared with the Worker.)
//
// Exactly once: reconcile is called at most once per row of one
// claim_unknown call, and each answer is reported once (a report lost with
// its connection is repeated: an equal result gets the same outcome).
// stop() (or SIGTERM / SIGINT) lets the current call finish, reports the
// batch's answers so far and makes run() resolve; the rest of the batch is
// not asked (its lease ends).

const api = require('./index');
const { Loop, Unsendable, ProviderRefused, InProgress, errorText, retryInOf, unrecordable } = require('./loop');

class Reconciler extends Loop {
  // reconcile: async (attempt) => result | undefined, attempt a
  // claim_unknown row (attempt_id, job_id, operation, provider,
  // provider_key, params, unknown_since, redrivable).  options: connection
  // (pg pool options) or pool (one of your own); name (the reconciler's,
  // default host, pid and a random part); operations, batch (max_rows),
  // olderThanSeconds and leaseSeconds for claim_unknown; waitSeconds (the
  // pause after a round that found nothing); reconnectMinSeconds doubling
  // up to reconnectMaxSeconds; shutdownGraceSeconds (how long a report is
  // tried once stopped); logger (info/warn/error, default console).
  constructor(reconcile, options = {}) {
    const { operations = null, batch = 10, olderThanSeconds = 0, leaseSeconds = 30,
      waitSeconds = 2 } = options;
    if (typeof reconcile !== 'function') throw new TypeError('reconcile must be a function');
    if (!(batch >= 1)) throw new RangeError('batch must be at least 1');
    if (!(leaseSeconds > 0) || !(olderThanSeconds >= 0) || !(waitSeconds >= 0)) {
      throw new RangeError('leaseSeconds must be positive, olderThanSeconds and waitSeconds not negative');
    }
    super('reconciler', 1, { claimed: 0, won: 0, lost: 0, rejected: 0, failed: 0, left: 0,
      errors: 0 }, options);
    Object.assign(this, { reconcile, operations, batch, olderThanSeconds, leaseSeconds,
      waitSeconds });
  }

  // run: lease and reconcile until stop() (or, with untilIdle, until a
  // round finds nothing); resolves to the stats.  handleSignals: SIGTERM
  // and SIGINT call stop(); a second one is left to its default action.
  async run({ untilIdle = false, handleSignals = true } = {}) {
    return this.drive({
      claim: () => this.call(() => api.claimUnknown(this.pool, { worker: this.name,
        operations: this.operations, maxRows: this.batch, olderThanSeconds: this.olderThanSeconds,
        leaseSeconds: this.leaseSeconds }), { retry: true }),
      handle: async (rows) => {
        this.stats.claimed += rows.length;
        await this.runBatch(rows);
      },
      idle: async () => {
        if (untilIdle) return true;
        await this.pause(this.waitSeconds * 1000);
        return false;
      },
      handleSignals,
    });
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
      this.unsendable(row, why);
      return null;
    }
    return ['finish', result];
  }

  // unsendable: the provider's result cannot be sent: the attempt stays
  // unknown (it is already), the reason logged.
  unsendable(row, why) {
    this.stats.errors++;
    this.logger.error(`${this.name}: attempt ${row.attempt_id} of job ${row.job_id}: the result cannot be recorded (${why}); left unknown`);
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
        if (answer[0] === 'fail') {
          if (await this.failOne(row, answer[1], answer[2])) this.stats.failed++;
        } else {
          results.push([row, answer[1]]);
        }
      }
    } finally {
      await this.finish(results);
    }
  }

  // finish: finish_many for the answered results (each tried again as
  // every report is); a result not recorded stays unknown.
  async finish(results) {
    if (results.length === 0) return;
    const outcomes = await this.finishBatch(results);
    for (let i = 0; i < results.length; i++) {
      if (outcomes[i] instanceof Unsendable) this.unsendable(results[i][0], outcomes[i].why);
      else if (outcomes[i]) this.stats[outcomes[i]]++;
    }
  }
}

module.exports = { Reconciler };
