'use strict';
// A worker loop on jobguard.claim().  new Worker(handler, options).run()
// claims jobs (a batch at a time, waiting for work when there is none),
// awaits handler(job) for each and reports: the resolved value is the
// result (finish; with batch > 1 the batch's results are recorded together
// by one finish_many when the batch ends), a rejection fails the attempt
// (fail; ProviderRefused says "the provider said no"; it, RetryLater, or any
// error with a numeric retryInSeconds holds the retry back that long), and
// InProgress ("the provider says this key is still being processed") marks
// it unknown (mark_unknown), never failed: a failed attempt's successor
// gets a new provider key while the first request may still be running.
// Send job.provider_key to the provider as its idempotency key; a redrive
// (job.redrive) is the same request again under the same key, and runs the
// same handler.
// A result that cannot be recorded (undefined, null, not JSON, too large,
// refused by finish_attempt) fails the attempt with an error saying why.
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

const os = require('node:os');
const crypto = require('node:crypto');
const { Pool } = require('pg');
const api = require('./index');
const { InvalidTransition, AttemptNotFound, ResultMismatch } = require('./errors');

// the longest error text a failed attempt records
const MAX_ERROR = 4000;

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

// RetryLater: thrown by a handler to fail the attempt and have claim hand
// the job out again no sooner than retryInSeconds.
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

// the SQLSTATEs of a finish that this attempt can never record (not open,
// a different result, no such attempt): report errors, as finish's
// InvalidTransition, ResultMismatch and AttemptNotFound
const NOT_REPORTABLE = ['JG006', 'JG007', 'JG009'];

// errorText: the error an attempt records for what a handler threw.
function errorText(err) {
  const name = (err && err.name) || 'Error';
  return `${name}: ${err && err.message !== undefined ? err.message : String(err)}`.slice(0, MAX_ERROR);
}

// retryInOf: the delay (seconds) an error asks for its retry, or undefined.
function retryInOf(err) {
  return err && typeof err.retryInSeconds === 'number' ? err.retryInSeconds : undefined;
}

// OWN_OPEN_ATTEMPTS: a worker's started or unknown attempts but those
// given, as claim rows; provider_key through to_jsonb (NULL on a 1.1
// database, which has no such column), redrive: a predecessor was
// redriven as this attempt
const OWN_OPEN_ATTEMPTS = `
  SELECT a.attempt_id::text, a.job_id::text, a.attempt_no, j.operation, a.provider, j.params,
         a.deadline, to_jsonb(a) ->> 'provider_key' AS provider_key,
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

// Lost: the connection broke during a statement that is not repeated blindly.
class Lost extends Error {}
// GaveUp: the server could not be reached and the worker stopped waiting for it.
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

// unrecordable: why a handler's result cannot be a job's result (jobguard
// records a JSON value; SQL NULL is refused), or null when it can be.
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

class Worker {
  // handler: async (job) => result, job a claim row (attempt_id, job_id,
  // attempt_no, operation, provider, params, deadline).  options:
  // connection (pg pool options; the PG* environment fills in the rest) or
  // pool (one of your own, used as is); name (recorded on each attempt;
  // default host, pid and a random part — give a stable one so that a
  // restarted worker picks up its own open attempts); operations, provider,
  // batch (max_jobs), timeoutSeconds and waitSeconds for claim;
  // heartbeatSeconds (default a third of the timeout); reconnectMinSeconds
  // doubling up to reconnectMaxSeconds; shutdownGraceSeconds (how long a
  // report is tried once stopped); logger (info/warn/error, default console).
  constructor(handler, { connection = {}, pool, name, operations = null, provider = null,
    batch = 1, timeoutSeconds = 30, waitSeconds = 2, heartbeatSeconds, reconnectMinSeconds = 0.1,
    reconnectMaxSeconds = 5, shutdownGraceSeconds = 30, logger = console } = {}) {
    if (typeof handler !== 'function') throw new TypeError('handler must be a function');
    if (!(batch >= 1)) throw new RangeError('batch must be at least 1');
    if (!(timeoutSeconds > 0) || !(waitSeconds >= 0)) {
      throw new RangeError('timeoutSeconds must be positive, waitSeconds not negative');
    }
    this.handler = handler;
    this.name = name || `${os.hostname()}:${process.pid}:${crypto.randomBytes(4).toString('hex')}`;
    this.operations = operations;
    this.provider = provider;
    this.batch = batch;
    this.timeoutSeconds = timeoutSeconds;
    this.waitSeconds = waitSeconds;
    this.heartbeatSeconds = heartbeatSeconds ?? timeoutSeconds / 3;
    if (!(this.heartbeatSeconds > 0)) throw new RangeError('heartbeatSeconds must be positive');
    this.reconnectMin = reconnectMinSeconds * 1000;
    this.reconnectMax = reconnectMaxSeconds * 1000;
    this.shutdownGrace = shutdownGraceSeconds * 1000;
    this.logger = logger;
    this.ownPool = !pool;
    // two connections: the loop's statements and the heartbeats
    this.pool = pool || new Pool({ max: 2, idleTimeoutMillis: 0, ...connection,
      application_name: `${this.name} (jobguard worker)`.slice(0, 63) });
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
    this.startedUp = false;     // the open attempts found at start were dealt with
    this.fresh = false;         // a claim's answer was lost: look for what it began
    this.hasFinishMany = undefined;   // the database has finish_many (1.2)
    this.held = new Map();      // attempt_id -> job: claimed, not yet reported
    this.ran = new Set();       // attempts whose handler was called, report not done
    this.unreported = new Set();   // of those, the ones whose report never got through
    this.untouchable = new Set();  // open attempts this worker must never run
    this.refused = new Set();   // attempts whose heartbeat was refused
    this.stopping = false;
    this.stoppedAt = 0;
    this.stats = { claimed: 0, adopted: 0, markedUnknown: 0, won: 0, lost: 0, rejected: 0,
      failed: 0, inProgress: 0, unrecorded: 0, released: 0, reportErrors: 0, heartbeats: 0,
      heartbeatsRefused: 0, reconnects: 0 };
  }

  // stop: the current job finishes and reports, nothing more is claimed.
  stop() {
    if (!this.stopping) {
      this.stopping = true;
      this.stoppedAt = Date.now();
    }
  }

  // run: claim and handle jobs until stop() (or, with untilIdle, until
  // claims found nothing for waitSeconds); resolves to the stats.
  // handleSignals: SIGTERM and SIGINT call stop(); a second one is left to
  // its default action.
  async run({ untilIdle = false, handleSignals = true } = {}) {
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
    const beating = this.beatLoop();
    try {
      let idleSince = Date.now();
      let pause = this.reconnectMin;
      while (!this.stopping) {
        let jobs;
        try {
          jobs = await this.nextJobs();
          pause = this.reconnectMin;
        } catch (err) {
          if (err instanceof GaveUp) break;
          if (!(err instanceof Lost)) throw err;
          this.logger.warn(`${this.name}: connection lost (${err.message}); again in ${pause} ms`);
          await sleep(pause);
          pause = Math.min(pause * 2, this.reconnectMax);
          continue;
        }
        if (jobs.length > 0) {
          await this.runBatch(jobs);
          idleSince = Date.now();
        } else if (untilIdle && Date.now() - idleSince >= this.waitSeconds * 1000) {
          break;
        }
      }
    } finally {
      this.beatStop = true;
      if (this.beatWake) this.beatWake();
      await beating;
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

  // mainGivesUp: once stopped, stop reconnecting at once if nothing is
  // held, else after shutdownGraceSeconds.
  mainGivesUp() {
    return this.stopping && (this.held.size === 0 || Date.now() - this.stoppedAt > this.shutdownGrace);
  }

  // call: fn() on the pool.  When the connection is lost: with retry, wait
  // (backoff) and call again (fn gets the number of earlier tries), else
  // throw Lost.  Other errors are thrown as they are.
  async call(fn, { retry, givesUp = () => this.mainGivesUp() }) {
    let delay = this.reconnectMin;
    for (let tries = 0; ; tries++) {
      try {
        return await fn(tries);
      } catch (err) {
        if (!isConnectionError(err)) throw err;
        this.lost++;
        if (!retry) throw new Lost(err.message);
        if (givesUp()) throw new GaveUp(err.message);
        this.logger.warn(`${this.name}: connection lost (${err.message}); again in ${delay} ms`);
        await sleep(delay);
        delay = Math.min(delay * 2, this.reconnectMax);
      }
    }
  }

  // nextJobs: at start, the open attempts of the worker's name from before
  // (marked unknown, never run); after a claim whose answer was lost, the
  // attempts it began (adopted: their handler never ran); otherwise a claim.
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
    const waitSeconds = Math.min(this.waitSeconds, this.timeoutSeconds / 3);
    let jobs;
    try {
      jobs = await this.call(() => api.claim(this.pool, { worker: this.name,
        operations: this.operations, timeoutSeconds: this.timeoutSeconds, maxJobs: this.batch,
        provider: this.provider, waitSeconds }), { retry: false });
    } catch (err) {
      if (err instanceof Lost) this.fresh = true;   // it may have begun attempts
      throw err;
    }
    this.stats.claimed += jobs.length;
    return jobs;
  }

  // markEarlier: an open attempt of this worker's name from before it
  // started.  Whether its handler ran is unknown, so it is not run again:
  // mark_unknown says so (a late report still goes through the
  // compare-and-swap), and this worker never touches it again.
  async markEarlier(job) {
    this.untouchable.add(job.attempt_id);
    const done = await this.report(job, 'mark unknown', async () => {
      try {
        return await api.markUnknown(this.pool, job.attempt_id);
      } catch (err) {
        if (err instanceof InvalidTransition) return 'gone';   // closed meanwhile
        throw err;
      }
    });
    if (done === 'unknown') this.stats.markedUnknown++;
    this.logger.warn(`${this.name}: attempt ${job.attempt_id} of job ${job.job_id} was open from `
      + 'before this worker started; not run again (its handler may have run)');
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

  // runOne: await the handler; report its error at once and resolve to
  // REPORTED, or resolve to its result, to be recorded.  The attempt is
  // marked as run before the handler is called: nothing runs it again,
  // whatever happens to its report.
  async runOne(job) {
    if (this.ran.has(job.attempt_id) || this.untouchable.has(job.attempt_id)) {
      this.logger.error(`${this.name}: attempt ${job.attempt_id} was run already; not again`);
      return REPORTED;
    }
    this.ran.add(job.attempt_id);
    let result;
    try {
      result = await this.handler(job);
    } catch (err) {
      if (err instanceof InProgress) {
        if (await this.reportInProgress(job)) this.stats.inProgress++;
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
  // without finish_many, with finish each; more with one finish_many, each
  // refused row handled as finish's error would be.  No handler is ever
  // run again, whatever the reports meet.
  async record(done) {
    if (done.length === 0) return;
    try {
      if (done.length === 1 || !(await this.finishManyExists())) {
        for (const [job, result] of done) await this.reportResult(job, result);
        return;
      }
      await this.reportMany(done);
    } finally {
      for (const [job] of done) {
        this.forget(job);
        this.drop(job);
      }
    }
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

  // reportMany: finish_many for the batch, repeated after a lost connection
  // (an equal result gets the same outcome); a call the server refuses as
  // a whole falls back to finish each.
  async reportMany(done) {
    let rows;
    try {
      rows = await this.call(() => api.finishMany(this.pool, done.map(([j]) => j.attempt_id),
        done.map(([, r]) => r)), { retry: true });
    } catch (err) {
      if (err instanceof GaveUp || err instanceof Lost) {
        for (const [job] of done) {
          this.stats.reportErrors++;
          this.unreported.add(job.attempt_id);
          this.logger.error(`${this.name}: could not report the result of attempt ${job.attempt_id} of job ${job.job_id}: ${err.message}`);
        }
        return;
      }
      this.logger.warn(`${this.name}: finish_many refused the batch (${err.message}); finishing one by one`);
      for (const [job, result] of done) await this.reportResult(job, result);
      return;
    }
    for (let i = 0; i < done.length; i++) {
      const [job] = done[i];
      const row = rows[i];
      if (row.outcome !== null) {
        this.stats[row.outcome]++;
      } else if (NOT_REPORTABLE.includes(row.sqlstate)) {
        this.stats.reportErrors++;
        this.unreported.add(job.attempt_id);
        this.logger.error(`${this.name}: could not report the result of attempt ${job.attempt_id} of job ${job.job_id}: ${row.message}`);
      } else {
        await this.reportUnrecorded(job, `finish_many refused it (${row.sqlstate}: ${row.message})`);
      }
    }
  }

  // reportInProgress: the provider says the key is still being processed:
  // mark the attempt unknown (never fail it).  Resolves true once it is.
  async reportInProgress(job) {
    const done = await this.report(job, 'mark unknown',
      () => api.markUnknown(this.pool, job.attempt_id));
    if (!done) this.unreported.add(job.attempt_id);
    return Boolean(done);
  }

  // forget: the attempt is closed (or no longer ours to report): drop it
  // from the set of run attempts, unless its report never got through, in
  // which case it stays there so that no later look-up runs it again.
  forget(job) {
    if (!this.unreported.has(job.attempt_id)) this.ran.delete(job.attempt_id);
  }

  // report: run one report with retries; count it, or log why it failed.
  async report(job, what, fn) {
    try {
      return await this.call(fn, { retry: true });
    } catch (err) {
      this.stats.reportErrors++;
      this.logger.error(`${this.name}: could not ${what} attempt ${job.attempt_id} of job ${job.job_id}: ${err.message}`);
      return undefined;
    }
  }

  // reportResult: finish (repeated after a lost connection: an equal
  // result gets the same outcome).  A result the server refuses (too
  // large, not valid jsonb, ...) fails the attempt instead.
  async reportResult(job, result) {
    let refused;
    const outcome = await this.report(job, 'report the result of', async () => {
      try {
        return await api.finish(this.pool, job.attempt_id, result);
      } catch (err) {
        if (isConnectionError(err) || err instanceof InvalidTransition
          || err instanceof AttemptNotFound || err instanceof ResultMismatch) throw err;
        refused = err;   // the server cannot record this result
        return 'refused';
      }
    });
    if (outcome === 'refused') {
      await this.reportUnrecorded(job, `finish_attempt refused it (${refused.code || 'error'}: ${refused.message})`);
    } else if (outcome) {
      this.stats[outcome]++;
    } else {
      this.unreported.add(job.attempt_id);
    }
  }

  // reportUnrecorded: the handler's result cannot be recorded: fail the
  // attempt with an error saying why (once; a retry after a lost
  // connection that finds it failed already counts as done).
  async reportUnrecorded(job, why) {
    const text = `UnrecordableResult: the handler's result cannot be recorded: ${why}`;
    this.logger.error(`${this.name}: attempt ${job.attempt_id} of job ${job.job_id}: ${text}`);
    if (await this.reportFailure(job, text.slice(0, MAX_ERROR))) this.stats.unrecorded++;
  }

  // reportFailure: fail with retryIn; a repeat that finds the attempt
  // failed already counts as done.  Resolves true once it is failed.
  async reportFailure(job, error, retryInSeconds) {
    const done = await this.report(job, 'fail', async (tries) => {
      try {
        return await api.fail(this.pool, job.attempt_id, error, { retryInSeconds });
      } catch (err) {
        if (tries > 0 && err instanceof InvalidTransition && err.state === 'failed') return 'failed';
        throw err;
      }
    });
    if (!done) this.unreported.add(job.attempt_id);
    return Boolean(done);
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
