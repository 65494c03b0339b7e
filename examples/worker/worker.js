'use strict';
// A jobguard worker built on jobguard.claim().  It keeps no job list and
// races nobody: claim() hands it runnable jobs that no other worker holds
// (SKIP LOCKED inside jobguard), with an attempt already begun against the
// right provider, so the gate never turns it away (no JG002).
//
// One claimed attempt:  call the provider, heartbeating while it runs ->
//   result in time  -> finish_attempt (won / lost / rejected)
//   provider error  -> fail_attempt (the gate opens; claim() may hand the
//                      job out again, after the retry backoff)
//   no answer within the worker's patience -> mark_unknown, and keep
//                      listening: the provider may still answer, and that
//                      late answer is reported with finish_attempt too (it
//                      wins, or it is recorded lost so it can be compensated).
// A supervisor cancels attempts that stay unknown; claim(provider => the
// certified fallback) then hands those jobs to the fallback.

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Worker {
  // db: a connected pg Client of its own; providers: name -> simulated
  // provider; fallbacks: operation -> provider name to fail over to.
  // The attempt's deadline is leaseMs after the claim and after each
  // heartbeat (every heartbeatMs while the call runs); the worker waits
  // for the provider at most patienceMs in all.
  constructor({ id, db, providers, fallbacks = {}, operations = null, leaseMs = 300,
    heartbeatMs = 100, patienceMs = 800, batch = 10, waitMs = 200 }) {
    Object.assign(this, { id, db, providers, fallbacks, operations, leaseMs, heartbeatMs,
      patienceMs, batch, waitMs });
    this.queue = Promise.resolve();  // the connection's queries, one after another
    this.late = new Set();      // reports still to come from timed-out calls
    this.errors = [];           // late reports that failed
    this.stats = { claimed: 0, failover: 0, won: 0, lost: 0, rejected: 0, failed: 0,
      heartbeats: 0, heartbeatsLate: 0, timedOut: [], markRaced: 0, lateOutcomes: {} };
  }

  // run a query on the worker's connection after those already queued (the
  // calls of a batch and their heartbeats share it)
  query(sql, params) {
    const run = this.queue.then(() => this.db.query(sql, params));
    this.queue = run.catch(() => {});
    return run;
  }

  // claim up to batch jobs; provider: a fallback to fail over to, or null
  // for each job's own provider
  async claim(provider, waitMs) {
    const { rows } = await this.query(
      `SELECT attempt_id, job_id, attempt_no, operation, provider, params
         FROM jobguard.claim($1, operations => $2, timeout => make_interval(secs => $3),
                             max_jobs => $4, provider => $5, wait => make_interval(secs => $6))`,
      [this.id, this.operations, this.leaseMs / 1000, this.batch, provider, waitMs / 1000]);
    return rows;
  }

  // keep the attempt alive while the call runs; stops at the first refusal
  // (JG006: the deadline passed before the heartbeat arrived)
  heartbeat(attemptId) {
    let stopped = false;
    let timer;
    const beat = async () => {
      if (stopped) return;
      try {
        await this.query('SELECT jobguard.heartbeat($1)', [attemptId]);
        this.stats.heartbeats++;
        timer = setTimeout(beat, this.heartbeatMs);
      } catch (err) {
        // JG006: too late (or the attempt finished meanwhile): stop beating
        if (err.code !== 'JG006') this.errors.push(err);
        else if (!stopped) this.stats.heartbeatsLate++;
      }
    };
    timer = setTimeout(beat, this.heartbeatMs);
    return () => { stopped = true; clearTimeout(timer); };
  }

  async runAttempt(a) {
    this.stats.claimed++;
    const call = this.providers[a.provider].call(a, a.attempt_no);
    const stopBeating = this.heartbeat(a.attempt_id);
    let timer;
    const patience = new Promise((resolve) => { timer = setTimeout(resolve, this.patienceMs, 'timeout'); });
    const first = await Promise.race([
      call.then((result) => ({ result }), (error) => ({ error })),
      patience,
    ]);
    clearTimeout(timer);
    stopBeating();
    if (first === 'timeout') {
      this.stats.timedOut.push(a.attempt_id);
      try {
        await this.query('SELECT jobguard.mark_unknown($1)', [a.attempt_id]);
      } catch (err) {
        // JG006: a supervisor already cancelled it.  Keep listening anyway.
        if (err.code !== 'JG006') throw err;
        this.stats.markRaced++;
      }
      const late = call
        .then((result) => this.finish(a.attempt_id, result, true),
          (error) => this.fail(a.attempt_id, error, true))
        .catch((err) => { this.errors.push(err); })
        .finally(() => this.late.delete(late));
      this.late.add(late);
    } else if (first.error) {
      await this.fail(a.attempt_id, first.error, false);
    } else {
      await this.finish(a.attempt_id, first.result, false);
    }
  }

  async finish(attemptId, result, late) {
    const { rows } = await this.query('SELECT jobguard.finish_attempt($1, $2) AS outcome',
      [attemptId, JSON.stringify(result)]);
    const outcome = rows[0].outcome;
    this.stats[outcome]++;
    if (late) this.stats.lateOutcomes[outcome] = (this.stats.lateOutcomes[outcome] || 0) + 1;
    return outcome;
  }

  async fail(attemptId, error, late) {
    await this.query('SELECT jobguard.fail_attempt($1, $2)', [attemptId, String(error.message)]);
    this.stats.failed++;
    if (late) this.stats.lateOutcomes.failed = (this.stats.lateOutcomes.failed || 0) + 1;
  }

  // after a restart: this worker's attempts that are still open.  It cannot
  // know what the provider did with them, so it marks them unknown: the
  // supervisor decides (cancel and fail over), and a late answer still
  // goes through the compare-and-swap.
  async recover() {
    const { rows } = await this.query(
      `SELECT attempt_id, job_id, state FROM jobguard.attempt_overview
        WHERE worker = $1 AND state IN ('started', 'unknown') ORDER BY attempt_id`, [this.id]);
    for (const r of rows) {
      try {
        await this.query('SELECT jobguard.mark_unknown($1)', [r.attempt_id]);
      } catch (err) {
        if (err.code !== 'JG006') throw err;   // cancelled meanwhile
      }
    }
    return rows;
  }

  // work until stop() is called; returns when the loop has ended
  async run() {
    this.stopping = false;
    const fallbacks = [...new Set(Object.values(this.fallbacks))];
    while (!this.stopping) {
      // failovers first: jobs whose last attempt was cancelled or failed,
      // for a fallback certified for their operation (none if it is not)
      let attempts = [];
      for (const fb of fallbacks) {
        const got = await this.claim(fb, 0);
        this.stats.failover += got.length;
        attempts.push(...got);
      }
      if (attempts.length === 0) attempts = await this.claim(null, this.waitMs);
      await Promise.all(attempts.map((a) => this.runAttempt(a)));
    }
  }

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
      await db.query('SELECT jobguard.cancel_attempt($1, $2)', [id, reason]);
      cancelled.push(id);
    } catch (err) {
      // JG006: its late answer arrived between the SELECT and the cancel
      if (err.code !== 'JG006') throw err;
    }
  }
  return cancelled;
}

// Which fallbacks are not certified for their operation: claim() would
// never fail over to them (it never raises JG004, it just finds nothing).
async function uncertifiedFallbacks(db, fallbacks) {
  const missing = [];
  for (const [operation, provider] of Object.entries(fallbacks)) {
    const { rows } = await db.query(
      `SELECT 1 FROM jobguard.certification_overview
        WHERE operation = $1 AND provider = $2 AND certified`, [operation, provider]);
    if (rows.length === 0) missing.push(`${provider} for ${operation}`);
  }
  return missing;
}

module.exports = { Worker, cancelStuck, uncertifiedFallbacks };

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
    const fallbacks = { charge: 'backup-psp' };
    for (const m of await uncertifiedFallbacks(db, fallbacks))
      console.warn(`fallback ${m} is not certified: stuck jobs will not fail over ` +
        `(SELECT jobguard.certify_provider(...) first, see README.md)`);
    const worker = new Worker({ id: process.env.WORKER_ID || `worker-${process.pid}`, db,
      providers, fallbacks });
    const recovered = await worker.recover();
    if (recovered.length) console.log(`recovered ${recovered.length} open attempts of ${worker.id}`);
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
