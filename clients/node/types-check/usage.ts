// Compiled (not run) by test/types.test.js: index.d.ts describes the API
// as it is used, and the type checker refuses what it must refuse.
import { Pool } from 'pg';
import * as jobguard from '..';
import type { AttemptId, Claimed, JobId, Outcome, JobState, SubmitOutcome, WorkerStats,
  Unknown, FinishOutcome, ReconcilerStats, CertificationReport } from '..';

// usage: the calls a typed application makes, with the types they get.
async function usage(pool: Pool): Promise<void> {
  const { jobId, created }: { jobId: JobId; created: boolean } = await jobguard.submit(pool, {
    ownerId: 'alice', idempotencyKey: 'k', operation: 'charge', params: { amount: 1 }, provider: 'p',
  });
  const attemptId: AttemptId = await jobguard.beginAttempt(pool, jobId, { timeoutSeconds: 5 });
  const outcome: Outcome = await jobguard.finish(pool, attemptId, { charge_id: 'c' });
  const state: JobState = await jobguard.jobState(pool, jobId);
  const job = await jobguard.job(pool, jobId);
  const winner: AttemptId | null = job.completed_by;
  jobguard.setPrepareStatements(false);
  const client = await pool.connect();
  await jobguard.awaitJob(client, jobId, 10);
  client.release();
  try {
    await jobguard.cancelJob(pool, jobId, 'r');
  } catch (err) {
    if (err instanceof jobguard.IdempotencyKeyReused) {
      const existing: JobId | null = err.jobId;
      const code: string | undefined = err.code;
      void existing; void code;
    }
    if (err instanceof jobguard.AttemptInFlight) {
      const blocking: AttemptId | null = err.blockingAttemptId;
      void blocking;
    }
  }

  // @ts-expect-error a job id is not an attempt id
  await jobguard.finish(pool, jobId, {});
  // @ts-expect-error an attempt id is not a job id
  await jobguard.jobState(pool, attemptId);
  // @ts-expect-error a plain number is neither
  await jobguard.markUnknown(pool, 42);
  // @ts-expect-error a request needs a provider
  await jobguard.submit(pool, { ownerId: 'a', idempotencyKey: 'k', operation: 'o', params: {} });
  // @ts-expect-error finish resolves to an outcome, not a number
  const wrong: number = await jobguard.finish(pool, attemptId, {});
  void created; void outcome; void state; void winner; void wrong;
}

// usage11: the 1.1 calls and the Worker, with the types they get.
async function usage11(pool: Pool): Promise<void> {
  const claimed: Claimed[] = await jobguard.claim(pool, { worker: 'w1', operations: ['charge'],
    timeoutSeconds: 30, maxJobs: 10, waitSeconds: 5 });
  for (const c of claimed) {
    const deadline: Date = await jobguard.heartbeat(pool, c.attempt_id, 60);
    await jobguard.fail(pool, c.attempt_id, 'HTTP 503', { retryInSeconds: 10 });
    void deadline;
  }
  const rows: SubmitOutcome[] = await jobguard.submitMany(pool, [
    { ownerId: 'a', idempotencyKey: 'k', operation: 'o', params: {}, provider: 'p' }]);
  for (const r of rows) {
    if (r.sqlstate === null) {
      const id: JobId = r.job_id;            // accepted: always a job
      void id;
    } else {
      const existing: JobId | null = r.job_id;   // refused: the existing job for JG001
      const message: string = r.message;
      void existing; void message;
    }
  }
  const worker = new jobguard.Worker(async (job) => {
    if (job.attempt_no === 1) throw new jobguard.RetryLater('busy', 5);
    return { ok: job.job_id };
  }, { connection: { database: 'shop' }, operations: ['charge'], batch: 10, timeoutSeconds: 30 });
  const stats: WorkerStats = await worker.run({ handleSignals: true });
  worker.stop();
  try {
    await jobguard.cancelJob(pool, claimed[0].job_id, 'r');
  } catch (err) {
    if (err instanceof jobguard.JobNotFound) {
      const other: AttemptId | null = err.attemptId;
      void other;
    }
  }

  // @ts-expect-error a heartbeat takes an attempt id, not a job id
  await jobguard.heartbeat(pool, claimed[0].job_id);
  // @ts-expect-error claim needs the worker's name
  await jobguard.claim(pool, { maxJobs: 1 });
  // @ts-expect-error retryInSeconds is a number of seconds
  await jobguard.fail(pool, claimed[0].attempt_id, 'e', { retryInSeconds: '10s' });
  void stats;
}

// usage12: provider keys, the in-progress exception, finishMany, the Reconciler.
async function usage12(pool: Pool): Promise<void> {
  const worker = new jobguard.Worker(async (job) => {
    const key: string | undefined = job.provider_key;
    const again: boolean | undefined = job.redrive;
    if (again) throw new jobguard.InProgress('idempotency_key_in_use');
    if (!key) throw new jobguard.ProviderRefused('declined', 60);
    return { key };
  }, { batch: 10 });
  const ws: WorkerStats = await worker.run();
  const n: number = ws.inProgress + ws.handlerErrors + ws.claimErrors + ws.reportRetries;
  const rows: Unknown[] = await jobguard.claimUnknown(pool, { worker: 'r', maxRows: 5,
    olderThanSeconds: 60, leaseSeconds: 30 });
  const out: FinishOutcome[] = await jobguard.finishMany(pool, rows.map((r) => r.attempt_id),
    rows.map((r) => ({ key: r.provider_key })));
  for (const o of out) {
    if (o.outcome === null) {
      const state: string = o.sqlstate;
      void state;
    } else {
      const won: Outcome = o.outcome;
      void won;
    }
  }
  const key: string = await jobguard.providerKey(pool, rows[0].attempt_id);
  const r = new jobguard.Reconciler(async (attempt) => {
    if (attempt.redrivable) return undefined;
    if (attempt.provider_key === 'x') throw new jobguard.ProviderRefused('no such charge');
    return { charge: attempt.provider_key };
  }, { operations: ['charge'], batch: 20, olderThanSeconds: 60, leaseSeconds: 30 });
  const rs: ReconcilerStats = await r.run({ untilIdle: true });
  r.stop();
  const again: number = rs.claimErrors + rs.reportRetries;
  void again;
  // @ts-expect-error finishMany takes attempt ids, not job ids
  await jobguard.finishMany(pool, rows.map((r) => r.job_id), []);
  // @ts-expect-error a Reconciler's options are its own (no timeoutSeconds)
  void new jobguard.Reconciler(async () => undefined, { timeoutSeconds: 3 });
  void n; void key; void rs;
}

// usage13: handlers per provider, claim's providers list and failover, the runner.
async function usage13(pool: Pool): Promise<void> {
  const worker = new jobguard.Worker({ handlers: {
    stripe: async (job) => ({ via: job.provider, fallback: job.failover === true }),
    adyen: async (job) => ({ key: job.provider_key ?? null }),
  } }, { operations: ['charge'], batch: 4 });
  const ws: WorkerStats = await worker.run({ untilIdle: true });
  const unhandled: number = ws.unhandled;
  const one = new jobguard.Worker(async (job) => ({ p: job.provider }), { providers: ['stripe', 'adyen'] });
  void one;
  const takes: boolean = await jobguard.claimTakesProviders(pool);
  const rows: Claimed[] = await jobguard.claim(pool, { worker: 'w', providers: ['adyen'] });
  const fo: boolean | undefined = rows[0]?.failover;
  const report: CertificationReport = await jobguard.certify({ pool, operation: 'charge',
    provider: 'adyen', sample: 20, handler: async (job) => ({ key: job.provider_key }),
    compare: (output, winning) => JSON.stringify(output) === JSON.stringify(winning) });
  if (!report.certified) {
    for (const f of report.failures) {
      const where: string = `${f.where} ${f.path} ${f.message}`;
      void where;
    }
  } else {
    const version: number | null = report.evidence!.contract_version;
    void version;
  }
  await jobguard.certify({ client: pool, operation: 'charge', provider: 'adyen', inputs: 'in.jsonl',
    handler: async () => ({}) });
  // @ts-expect-error a handler per provider is a function
  void new jobguard.Worker({ handlers: { stripe: 'call' } });
  // @ts-expect-error certify needs the candidate provider
  await jobguard.certify({ pool, operation: 'charge', handler: async () => ({}) });
  void unhandled; void takes; void fo;
}

void usage;
void usage11;
void usage12;
void usage13;
