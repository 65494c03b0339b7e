// Compiled (not run) by test/types.test.js: index.d.ts describes the API
// as it is used, and the type checker refuses what it must refuse.
import { Pool } from 'pg';
import * as jobguard from '..';
import type { AttemptId, JobId, Outcome, JobState } from '..';

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

void usage;
