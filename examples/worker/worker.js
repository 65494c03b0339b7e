'use strict';
// A minimal jobguard worker.  It does not lock or claim anything itself: it
// picks pending jobs and asks begin_attempt, and the gate decides.  JG002
// (someone else's attempt is open), JG003 (closed) and JG005 (exhausted)
// just mean "not mine": move on.
//
// One attempt:  begin -> call the provider with a timeout ->
//   result in time  -> finish_attempt (won / lost / rejected)
//   provider error  -> fail_attempt (the gate opens, a retry may begin)
//   timeout         -> mark_unknown, and keep listening: the provider may
//                      still answer, and that late answer is reported with
//                      finish_attempt too (it wins, or it is recorded lost
//                      so that it can be compensated).
// A supervisor cancels attempts that stay unknown; the next worker to pick
// the job fails over to the operation's certified fallback provider.
// jobguard's functions are called through the jobguard Node client
// (clients/node), which throws one error class per jobguard SQLSTATE.

const jg = require('jobguard');

// "not mine": someone else's attempt is open, the job is closed or exhausted
const TRANSIENT = [jg.AttemptInFlight, jg.JobClosed, jg.AttemptsExhausted];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Worker {
  // db: a connected pg Client of its own; providers: name -> simulated
  // provider; fallbacks: operation -> provider name to fail over to
  // timeoutMs: how long the worker waits for the provider; the attempt's
  // deadline in jobguard is deadlineSlackMs later, so that normally the
  // worker records its own timeout (mark_unknown) before anyone else
  // sees the deadline pass.
  constructor({ id, db, providers, fallbacks = {}, timeoutMs = 500, deadlineSlackMs = 200, batch = 20 }) {
    Object.assign(this, { id, db, providers, fallbacks, timeoutMs, deadlineSlackMs, batch });
    this.late = new Set();      // reports still to come from timed-out calls
    this.errors = [];           // late reports that failed
    this.stats = { begun: 0, skipped: {}, won: 0, lost: 0, rejected: 0, failed: 0,
      timedOut: [], markRaced: 0, lateOutcomes: {} };
  }

  // up to batch pending jobs, oldest first, each with its last attempt's state
  async pending() {
    const { rows } = await this.db.query(
      `SELECT j.job_id, j.operation, j.provider, j.params, j.attempts,
              (SELECT a.state FROM jobguard.attempts_of(j.job_id) a
                ORDER BY a.attempt_no DESC LIMIT 1) AS last_state
         FROM jobguard.job_overview j
        WHERE j.state = 'pending'
        ORDER BY j.job_id
        LIMIT $1`, [this.batch]);
    return rows;
  }

  // a cancelled last attempt means "stuck": fail over; else the job's own
  chooseProvider(job) {
    if (job.last_state === 'cancelled' && this.fallbacks[job.operation])
      return this.fallbacks[job.operation];
    return job.provider;
  }

  // one attempt at a job, if the gate lets this worker begin one
  async tryJob(job) {
    const providerName = this.chooseProvider(job);
    const attemptNo = job.attempts + 1;
    let attemptId;
    try {
      attemptId = await jg.beginAttempt(this.db, job.job_id, { provider: providerName,
        timeoutSeconds: (this.timeoutMs + this.deadlineSlackMs) / 1000,
        attemptKey: `${this.id}/${job.job_id}/${attemptNo}` });
    } catch (err) {
      if (!TRANSIENT.some((cls) => err instanceof cls)) throw err;
      this.stats.skipped[err.code] = (this.stats.skipped[err.code] || 0) + 1;
      return;
    }
    this.stats.begun++;
    const call = this.providers[providerName].call(job, attemptNo);
    let timer;
    const timeout = new Promise((resolve) => { timer = setTimeout(resolve, this.timeoutMs, 'timeout'); });
    const first = await Promise.race([
      call.then((result) => ({ result }), (error) => ({ error })),
      timeout,
    ]);
    clearTimeout(timer);
    if (first === 'timeout') {
      this.stats.timedOut.push(attemptId);
      try {
        await jg.markUnknown(this.db, attemptId);
      } catch (err) {
        // JG006: a supervisor already cancelled it (its clock reached the
        // deadline first).  Either way, keep listening for the answer.
        if (!(err instanceof jg.InvalidTransition)) throw err;
        this.stats.markRaced++;
      }
      const late = call
        .then((result) => this.finish(attemptId, result, true),
          (error) => this.fail(attemptId, error, true))
        .catch((err) => { this.errors.push(err); })
        .finally(() => this.late.delete(late));
      this.late.add(late);
    } else if (first.error) {
      await this.fail(attemptId, first.error, false);
    } else {
      await this.finish(attemptId, first.result, false);
    }
  }

  // report a result; count its outcome
  async finish(attemptId, result, late) {
    const outcome = await jg.finish(this.db, attemptId, result);
    this.stats[outcome]++;
    if (late) this.stats.lateOutcomes[outcome] = (this.stats.lateOutcomes[outcome] || 0) + 1;
    return outcome;
  }

  // report a provider error; count it
  async fail(attemptId, error, late) {
    await jg.fail(this.db, attemptId, String(error.message));
    this.stats.failed++;
    if (late) this.stats.lateOutcomes.failed = (this.stats.lateOutcomes.failed || 0) + 1;
  }

  // work until stop() is called; returns when the loop has ended
  async run({ idleMs = 20 } = {}) {
    this.stopping = false;
    while (!this.stopping) {
      const jobs = await this.pending();
      for (const job of jobs) {
        if (this.stopping) break;
        await this.tryJob(job);
      }
      if (jobs.length === 0) await sleep(idleMs);
    }
  }

  // end the run loop after the job in hand
  stop() { this.stopping = true; }

  // wait for the late reports of timed-out calls
  async drain() {
    while (this.late.size) await Promise.all([...this.late]);
  }
}

// Out of band: stop waiting for attempts that have been unknown for
// graceMs past their deadline.  Their late results still go through the
// compare-and-swap.  Returns the attempt ids it cancelled.
async function cancelStuck(db, { graceMs = 0, reason = 'supervisor: no answer, failing over' } = {}) {
  const { rows } = await db.query(
    `SELECT attempt_id FROM jobguard.attempt_overview
      WHERE state = 'unknown' AND deadline < now() - make_interval(secs => $1)
      ORDER BY attempt_id`, [graceMs / 1000]);
  const cancelled = [];
  for (const { attempt_id: id } of rows) {
    try {
      await jg.cancelAttempt(db, id, reason);
      cancelled.push(id);
    } catch (err) {
      // JG006: its late answer arrived between the SELECT and the cancel
      if (!(err instanceof jg.InvalidTransition)) throw err;
    }
  }
  return cancelled;
}

module.exports = { Worker, cancelStuck };

// node worker.js: one worker (and its supervisor) on the PG* environment,
// against simulated providers, until interrupted.
if (require.main === module) {
  const { Client, types } = require('pg');
  const { createProvider } = require('./provider');
  types.setTypeParser(20, Number);
  (async () => {
    const db = new Client();
    const sup = new Client();
    await db.connect();
    await sup.connect();
    const providers = {
      'main-psp': createProvider({ name: 'main-psp', failureRate: 0.1, hangRate: 0.1 }),
      'backup-psp': createProvider({ name: 'backup-psp' }),
    };
    const worker = new Worker({ id: `worker-${process.pid}`, db, providers,
      fallbacks: { charge: 'backup-psp' } });
    const tick = setInterval(() => cancelStuck(sup, { graceMs: 1000 }).catch(console.error), 500);
    process.on('SIGINT', () => worker.stop());
    await worker.run();
    clearInterval(tick);
    await worker.drain();
    console.log(JSON.stringify(worker.stats));
    await db.end();
    await sup.end();
  })().catch((err) => { console.error(err); process.exit(1); });
}
