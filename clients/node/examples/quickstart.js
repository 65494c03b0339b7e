const { Pool } = require('pg');
const jobguard = require('jobguard');

async function main() {
  const pool = new Pool();   // PGHOST, PGDATABASE, ...
  const request = { ownerId: 'alice', idempotencyKey: 'order-42', operation: 'charge',
    params: { amount: 1999, currency: 'EUR' }, provider: 'main-psp' };
  const { jobId, created } = await jobguard.submit(pool, request);
  const attemptId = await jobguard.beginAttempt(pool, jobId, { timeoutSeconds: 30 });
  const outcome = await jobguard.finish(pool, attemptId, { charge_id: 'ch_1' });
  console.log(created, outcome, await jobguard.jobState(pool, jobId));
  try {   // the same key for a different request
    await jobguard.submit(pool, { ...request, params: { amount: 5 } });
  } catch (err) {
    if (!(err instanceof jobguard.IdempotencyKeyReused)) throw err;
    console.log('key reused: job', err.jobId, 'differs in', err.differsIn);
  }
  await pool.end();
}
main();
