'use strict';
// A worker loop on jobguard.claim().  new Worker(handler, options).run()
// (or new Worker({ handlers: { stripe: fn, adyen: fn } }, options): a
// handler per provider) claims jobs (a batch at a time, waiting for work
// when there is none), awaits handler(job) for each and reports: the
// resolved value is the result (finish; with batch > 1 the batch's results
// are recorded together by one finish_many when the batch ends), a
// ProviderRefused ("the provider said no"; RetryLater, or any error with a
// numeric retryInSeconds, holds the retry back that long) fails the
// attempt (fail), and InProgress ("the provider says this key is still
// being processed") marks it unknown (mark_unknown), never failed: a
// failed attempt's successor gets a new provider key while the first
// request may still be running.
// Each attempt runs against the provider its row names (job.provider; on
// 1.3 job.failover is true when that is a fallback of the operation's
// route, not the job's own provider): with a handler per provider, that
// provider's handler runs; one handler reads job.provider.  A worker never
// claims a row for a provider it has no handler for: it passes claim the
// providers of its handlers (claim's providers list on 1.3; on a 1.2
// database, which has none, a claim per provider in turn).
// Send job.provider_key to the provider as its idempotency key; a redrive
// (job.redrive) is the same request again under the same key, and runs the
// same handler.
// Only the provider's refusal fails an attempt: any other error a handler
// throws marks it unknown (the provider may have done the work).  A result
// that cannot be sent (undefined, null, not JSON, too large for the
// server) marks it unknown, the reason logged.  A report that meets any
// server error but jobguard's refusal of it (a statement or lock timeout,
// a serialization failure, a shutdown, a lost connection) is tried again,
// the same report; one that still cannot be recorded leaves the attempt
// open (its deadline makes it unknown), never failed.  A server error in
// claim is logged and the claim tried again with backoff.  (The rules are
// loop.js's, shared with the Reconciler.)
// While a batch is held, its attempts are heartbeaten on a second pooled
// connection, so a long handler keeps its attempt.  A lost connection is
// opened again with backoff; a report is repeated on the new connection
// (finish with an equal result is idempotent), and attempts that a lost
// claim of this worker began are found again by the worker's name and run.
// stop() (or SIGTERM / SIGINT) lets the current job finish and report,
// hands the rest of the batch back (cancel_attempt) and makes run() resolve.
//
// Exactly once: the handler runs at most once per attempt.  An attempt
// whose handler was called is never run again by this worker, whatever
// its report met; open attempts of the worker's name that were there
// before it started (an earlier process under the same name may have run
// their handler) are marked unknown, not run.

const api = require('./index');
const { InvalidTransition, AttemptNotFound } = require('./errors');
const { Loop, Unsendable, ProviderRefused, RetryLater, InProgress, Lost, GaveUp,
  isConnectionError, isRefusal, errorText, retryInOf, unrecordable, sleep, NOT_REPORTABLE,
  MAX_ERROR } = require('./loop');

// OWN_OPEN_ATTEMPTS: a worker's started or unknown attempts but those
// given, as claim rows; provider_key through to_jsonb (NULL on a 1.1
// database, which has no such column), failover: against another provider
// than the job's own, redrive: a predecessor was redriven as this attempt
const OWN_OPEN_ATTEMPTS = `
  SELECT a.attempt_id::text, a.job_id::text, a.attempt_no, j.operation, a.provider, j.params,
         a.deadline, to_jsonb(a) ->> 'provider_key' AS provider_key,
         a.provider IS DISTINCT FROM j.provider AS failover,
         EXISTS (SELECT 1 FROM jobguard.attempt_overview p
                  WHERE p.job_id = a.job_id AND p.state = 'cancelled'
                    AND p.cancel_reason = 'redriven as attempt ' || a.attempt_id) AS redrive
    FROM jobguard.attempt_overview a
    JOIN jobguard.job_overview j ON j.job_id = a.job_id
   WHERE a.worker = $1 AND a.state IN ('started', 'unknown')
     AND a.attempt_id <> ALL ($2::bigint[])
   ORDER BY a.attempt_id`;

// REPORTED: what runOne resolves to when nothing is left to record
const REPORTED = Symbol('reported');

// handlersOf: the Worker's handler argument and its provider, providers
// options as { handler, handlers, providers }: one function (providers:
// the option, null for any), or { handlers: { provider: fn, ... } } (the
// providers are the map's names).  A provider option must be one of the
// providers.
function handlersOf(handler, { provider = null, providers = null }) {
  let handlers = null;
  if (typeof handler === 'function') {
    if (providers != null) {
      providers = [...providers];
      if (providers.length === 0 || !providers.every((p) => typeof p === 'string' && p !== '')) {
        throw new TypeError('providers must be a non-empty list of provider names');
      }
    }
  } else if (handler && typeof handler === 'object' && handler.handlers
             && typeof handler.handlers === 'object') {
    if (providers != null) throw new TypeError('give either handlers or the providers option, not both');
    handlers = new Map(Object.entries(handler.handlers));
    if (handlers.size === 0) throw new TypeError('handlers must name at least one provider');
    for (const [name, fn] of handlers) {
      if (typeof fn !== 'function') throw new TypeError(`the handler of provider "${name}" must be a function`);
    }
    providers = [...handlers.keys()];
    handler = null;
  } else {
    throw new TypeError('handler must be a function or { handlers: { provider: function, ... } }');
  }
  if (provider != null && providers != null && !providers.includes(provider)) {
    throw new RangeError(`provider "${provider}" has no handler in this worker`);
  }
  return { handler, handlers, providers };
}

class Worker extends Loop {
  // handler: async (job) => result, job a claim row (attempt_id, job_id,
  // attempt_no, operation, provider, params, deadline, provider_key,
  // redrive, failover); or { handlers: { provider: async (job) => result } }.
  // options:
  // connection (pg pool options; the PG* environment fills in the rest) or
  // pool (one of your own, used as is); name (recorded on each attempt;
  // default host, pid and a random part — give a stable one so that a
  // restarted worker picks up its own open attempts); operations, provider,
  // batch (max_jobs), timeoutSeconds and waitSeconds for claim; providers
  // (one handler only: the providers it serves; default any);
  // heartbeatSeconds (default a third of the timeout); reconnectMinSeconds
  // doubling up to reconnectMaxSeconds; shutdownGraceSeconds (how long a
  // report is tried once stopped); logger (info/warn/error, default console).
  constructor(handler, options = {}) {
    const { operations = null, provider = null, batch = 1, timeoutSeconds = 30, waitSeconds = 2,
      heartbeatSeconds } = options;
    const served = handlersOf(handler, options);
    if (!(batch >= 1)) throw new RangeError('batch must be at least 1');
    if (!(timeoutSeconds > 0) || !(waitSeconds >= 0)) {
      throw new RangeError('timeoutSeconds must be positive, waitSeconds not negative');
    }
    const beat = heartbeatSeconds ?? timeoutSeconds / 3;
    if (!(beat > 0)) throw new RangeError('heartbeatSeconds must be positive');
    // two connections: the loop's statements and the heartbeats
    super('worker', 2, { claimed: 0, adopted: 0, markedUnknown: 0, won: 0, lost: 0, rejected: 0,
      failed: 0, inProgress: 0, handlerErrors: 0, unrecorded: 0, released: 0, unhandled: 0,
      heartbeats: 0, heartbeatsRefused: 0 }, options);
    Object.assign(this, { handler: served.handler, handlers: served.handlers,
      providers: served.providers, operations, provider, batch, timeoutSeconds, waitSeconds,
      heartbeatSeconds: beat });
    this.takesProviders = undefined;   // the database's claim takes providers (1.3)
    this.turn = 0;              // 1.2, several providers: whose claim is next
    this.startedUp = false;     // the open attempts found at start were dealt with
    this.fresh = false;         // a claim's answer was lost: look for what it began
    this.hasFinishMany = undefined;   // the database has finish_many (1.2)
    this.held = new Map();      // attempt_id -> job: claimed, not yet reported
    this.ran = new Set();       // attempts whose handler was called, report not done
    this.unreported = new Set();   // of those, the ones whose report never got through
    this.untouchable = new Set();  // open attempts this worker must never run
    this.refused = new Set();   // attempts whose heartbeat was refused
  }

  // run: claim and handle jobs until stop() (or, with untilIdle, until
  // claims found nothing for waitSeconds); resolves to the stats.
  // handleSignals: SIGTERM and SIGINT call stop(); a second one is left to
  // its default action.
  async run({ untilIdle = false, handleSignals = true } = {}) {
    const beating = this.beatLoop();
    let idleSince = Date.now();
    return this.drive({
      claim: () => this.nextJobs(),
      handle: async (jobs) => {
        await this.runBatch(jobs);
        idleSince = Date.now();
      },
      idle: async () => untilIdle && Date.now() - idleSince >= this.waitSeconds * 1000,
      handleSignals,
      closing: async () => {
        this.beatStop = true;
        if (this.beatWake) this.beatWake();
        await beating;
      },
    });
  }

  // givesUp: once stopped, stop reconnecting at once if nothing is held,
  // else after shutdownGraceSeconds.
  givesUp() {
    return this.stopping && (this.held.size === 0 || Date.now() - this.stoppedAt > this.shutdownGrace);
  }

  // nextJobs: at start, the open attempts of the worker's name from before
  // (marked unknown, never run); after a claim whose answer was lost (or
  // that raised), the attempts it began (adopted: their handler never
  // ran); otherwise a claim.
  async nextJobs() {
    if (!this.startedUp) {
      const earlier = await this.call(() => this.ownOpenAttempts(), { retry: false });
      for (const job of earlier) await this.markEarlier(job);
      this.startedUp = true;
    }
    if (this.fresh) {
      const adopted = await this.call(() => this.ownOpenAttempts(), { retry: false });
      this.fresh = false;
      if (adopted.length > 0) {
        this.stats.adopted += adopted.length;
        this.logger.info(`${this.name}: picked up ${adopted.length} open attempts of its own`);
        return adopted;
      }
    }
    // a claim that waited begins its attempts when the work came; waiting at
    // most a third of the timeout per claim keeps the loop responsive
    let waitSeconds = Math.min(this.waitSeconds, this.timeoutSeconds / 3);
    let jobs;
    try {
      const only = await this.claimProviders();
      if (only.provider !== undefined) waitSeconds /= this.providers.length;
      jobs = await this.call(() => api.claim(this.pool, { worker: this.name,
        operations: this.operations, timeoutSeconds: this.timeoutSeconds, maxJobs: this.batch,
        provider: this.provider, waitSeconds, ...only }), { retry: false });
    } catch (err) {
      this.fresh = true;   // it may have begun attempts
      throw err;
    }
    this.stats.claimed += jobs.length;
    return jobs;
  }

  // claimProviders: what limits a claim to the providers this worker has
  // handlers for: nothing (any provider, or a provider option), claim's
  // providers list (1.3), or, on a database whose claim has none (1.2), a
  // claim for one provider, each in turn.  Whether claim takes a list is
  // asked once.
  async claimProviders() {
    if (this.providers === null || this.provider !== null) return {};
    if (this.takesProviders === undefined) {
      this.takesProviders = await this.call(() => api.claimTakesProviders(this.pool),
        { retry: false });
    }
    if (this.takesProviders) return { providers: this.providers };
    return { provider: this.providers[this.turn++ % this.providers.length] };
  }

  // handlerFor: the function that runs the job's attempt (its provider's,
  // or the one handler), or undefined when this worker serves no such
  // provider.
  handlerFor(job) {
    if (this.handlers) return this.handlers.get(job.provider);
    if (this.providers !== null && !this.providers.includes(job.provider)) return undefined;
    return this.handler;
  }

  // markEarlier: an open attempt of this worker's name from before it
  // started.  Whether its handler ran is unknown, so it is not run again:
  // mark_unknown says so (a late report still goes through the
  // compare-and-swap), and this worker never touches it again.
  async markEarlier(job) {
    this.untouchable.add(job.attempt_id);
    const done = await this.markUnknownOne(job, 'open from before this worker started '
      + '(its handler may have run); not run again', 'gone');
    if (done === 'unknown') this.stats.markedUnknown++;
  }

  // ownOpenAttempts: this worker's started or unknown attempts that it does
  // not hold and whose handler it never called.
  async ownOpenAttempts() {
    const { rows } = await this.pool.query({ text: OWN_OPEN_ATTEMPTS,
      values: [this.name, [...this.held.keys(), ...this.ran, ...this.untouchable]] });
    return rows.map((r) => ({ ...r, attempt_id: Number(r.attempt_id), job_id: Number(r.job_id),
      provider_key: r.provider_key === null ? undefined : r.provider_key }));
  }

  // runBatch: handle the jobs in order, heartbeating all of them meanwhile;
  // once stopping, hand back those not started.  Results are recorded when
  // the batch ends (one finish_many), or at once when batch is 1; a job
  // stays held (heartbeaten) until its result is recorded.
  async runBatch(jobs) {
    for (const job of jobs) this.held.set(job.attempt_id, job);
    let done = [];   // [job, result]: not recorded yet
    try {
      for (let i = 0; i < jobs.length; i++) {
        if (this.stopping) {
          for (const rest of jobs.slice(i)) await this.release(rest);
          return;
        }
        if (!this.handlerFor(jobs[i])) {   // not claimed so; its handler never runs here
          this.stats.unhandled++;
          this.logger.error(`${this.name}: attempt ${jobs[i].attempt_id} of job ${jobs[i].job_id} `
            + `is against provider ${jobs[i].provider}, which this worker has no handler for; handed back`);
          await this.release(jobs[i]);
          continue;
        }
        let result;
        try {
          result = await this.runOne(jobs[i]);
        } catch (err) {
          this.drop(jobs[i]);
          throw err;
        }
        if (result === REPORTED) {
          this.drop(jobs[i]);
        } else {
          done.push([jobs[i], result]);
          if (this.batch === 1) {
            const now = done;
            done = [];
            await this.record(now);
          }
        }
      }
    } finally {
      await this.record(done);
    }
  }

  // drop: the job's attempt is no longer held (reported, or given up).
  drop(job) {
    this.held.delete(job.attempt_id);
    this.refused.delete(job.attempt_id);
  }

  // runOne: await the handler; report what it threw at once and resolve
  // to REPORTED, or resolve to its result, to be recorded.  The attempt is
  // marked as run before the handler is called: nothing runs it again,
  // whatever happens to its report.  Only the provider's refusal fails it;
  // InProgress, any other error and a result that cannot be sent mark it
  // unknown.
  async runOne(job) {
    if (this.ran.has(job.attempt_id) || this.untouchable.has(job.attempt_id)) {
      this.logger.error(`${this.name}: attempt ${job.attempt_id} was run already; not again`);
      return REPORTED;
    }
    this.ran.add(job.attempt_id);
    let result;
    try {
      result = await this.handlerFor(job)(job);
    } catch (err) {
      if (err instanceof InProgress) {
        if (await this.reportUnknown(job, 'it is still in progress at the provider')) {
          this.stats.inProgress++;
        }
      } else if (!isRefusal(err)) {
        if (await this.reportUnknown(job, `the handler threw ${errorText(err)}`)) {
          this.stats.handlerErrors++;
        }
      } else if (await this.reportFailure(job, errorText(err), retryInOf(err))) {
        this.stats.failed++;
      }
      this.forget(job);
      return REPORTED;
    }
    const why = unrecordable(result);
    if (!why) return result;
    await this.reportUnrecorded(job, why);
    this.forget(job);
    return REPORTED;
  }

  // record: record the results of handlers that ran: one, or a database
  // without finish_many, with finish each; more with one finish_many.  No
  // handler is ever run again, whatever the reports meet.
  async record(done) {
    if (done.length === 0) return;
    try {
      let outcomes;
      if (done.length === 1 || !(await this.finishManyExists())) {
        outcomes = [];
        for (const [job, result] of done) outcomes.push(await this.finishOne(job, result));
      } else {
        outcomes = await this.finishBatch(done);
      }
      for (let i = 0; i < done.length; i++) await this.recorded(done[i][0], outcomes[i]);
    } finally {
      for (const [job] of done) {
        this.forget(job);
        this.drop(job);
      }
    }
  }

  // recorded: count what a finish resolved to: an outcome; a result the
  // server cannot take (marked unknown); or nothing recorded (the attempt
  // stays open, never to be run again by this worker).
  async recorded(job, outcome) {
    if (outcome instanceof Unsendable) await this.reportUnrecorded(job, outcome.why);
    else if (outcome) this.stats[outcome]++;
    else this.unreported.add(job.attempt_id);
  }

  // finishManyExists: whether the database has finish_many (1.2); asked once.
  async finishManyExists() {
    if (this.hasFinishMany === undefined) {
      try {
        const { rows: [{ v }] } = await this.call(() => this.pool.query(
          "SELECT to_regprocedure('jobguard.finish_many(bigint[], jsonb[])') IS NOT NULL AS v"),
        { retry: true });
        this.hasFinishMany = v;
      } catch (err) {
        return false;   // this time: finish each
      }
    }
    return this.hasFinishMany;
  }

  // reportUnknown: mark the attempt unknown (never failed), the reason
  // logged.  Resolves true once it is.  An unknown attempt is still open
  // and still this worker's: it is never picked up again as one of its own
  // (untouchable), as its handler ran.
  async reportUnknown(job, why) {
    const done = await this.markUnknownOne(job, why);
    if (done) this.untouchable.add(job.attempt_id);
    else this.unreported.add(job.attempt_id);
    return Boolean(done);
  }

  // forget: the attempt is closed (or no longer ours to report): drop it
  // from the set of run attempts, unless its report never got through, in
  // which case it stays there so that no later look-up runs it again.
  forget(job) {
    if (!this.unreported.has(job.attempt_id)) this.ran.delete(job.attempt_id);
  }

  // reportUnrecorded: the handler's result cannot be sent: mark the
  // attempt unknown (the provider may have done the work), the reason logged.
  async reportUnrecorded(job, why) {
    const text = `UnrecordableResult: the handler's result cannot be recorded: ${why}`.slice(0, MAX_ERROR);
    this.logger.error(`${this.name}: attempt ${job.attempt_id} of job ${job.job_id}: ${text}`);
    if (await this.reportUnknown(job, text)) this.stats.unrecorded++;
  }

  // reportFailure: fail with retryIn (the provider refused).  Resolves
  // true once it is failed.
  async reportFailure(job, error, retryInSeconds) {
    const done = await this.failOne(job, error, retryInSeconds);
    if (!done) this.unreported.add(job.attempt_id);
    return done;
  }

  // release: hand back a claimed attempt that will not run (cancel_attempt:
  // claim hands the job out again; it counts towards max_attempts).
  async release(job) {
    const done = await this.report(job, 'hand back', async (tries) => {
      try {
        return await api.cancelAttempt(this.pool, job.attempt_id,
          `worker ${this.name} stopped before running it`);
      } catch (err) {
        if (tries > 0 && err instanceof InvalidTransition && err.state === 'cancelled') return 'cancelled';
        throw err;
      }
    });
    this.held.delete(job.attempt_id);
    if (done) this.stats.released++;
  }

  // beatLoop: every heartbeatSeconds, push back the deadline of each held
  // attempt; resolves once run() ends.
  async beatLoop() {
    while (!this.beatStop) {
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, this.heartbeatSeconds * 1000);
        this.beatWake = () => { clearTimeout(timer); resolve(); };
      });
      for (const attemptId of [...this.held.keys()]) {
        if (this.beatStop) return;
        if (this.refused.has(attemptId)) continue;
        try {
          await this.call(() => api.heartbeat(this.pool, attemptId),
            { retry: false, givesUp: () => this.beatStop });
          this.stats.heartbeats++;
        } catch (err) {
          if (err instanceof InvalidTransition || err instanceof AttemptNotFound) {
            this.refused.add(attemptId);
            const reported = err instanceof InvalidTransition
              && ['succeeded', 'lost', 'failed'].includes(err.state);
            if (this.held.has(attemptId) && !reported) {  // too late (unknown), or cancelled
              this.stats.heartbeatsRefused++;
              this.logger.warn(`${this.name}: heartbeat refused: ${err.message}`);
            }
          } else if (err instanceof Lost) {
            break;  // the next round connects again
          } else {
            this.logger.warn(`${this.name}: heartbeat failed: ${err.message}`);
          }
        }
      }
    }
  }
}

module.exports = { Worker, RetryLater, ProviderRefused, InProgress, isConnectionError,
  errorText, retryInOf, unrecordable, sleep, Lost, GaveUp, NOT_REPORTABLE };
