const { Pool } = require('pg');
const jobguard = require('jobguard');

const BATCH = 100;   // at most this many jobs in memory (claim takes up to 1000 at once)

// ask the provider once, under the attempt's provider key (its idempotency key)
async function charge(job) {
  if (job.params.in_progress) {
    throw new jobguard.InProgress('idempotency_key_in_use');   // the provider is still on it
  }
  return { charge_id: `ch_${job.job_id}`, key: job.provider_key };
}

async function main() {
  const pool = new Pool();   // PGHOST, PGDATABASE, ...
  let drained = 0;
  for (;;) {
    const jobs = await jobguard.claim(pool, { worker: 'drain', operations: ['charge'],
      timeoutSeconds: 60, maxJobs: BATCH });
    if (jobs.length === 0) break;
    const ids = [];
    const results = [];
    for (const job of jobs) {   // each handler runs once; nothing here runs it again
      try {
        results.push(await charge(job));
        ids.push(job.attempt_id);
      } catch (err) {
        if (err instanceof jobguard.ProviderRefused) {      // the provider said no
          await jobguard.fail(pool, job.attempt_id, `${err.name}: ${err.message}`);
        } else {   // in progress, or we cannot tell: unknown, never failed
          await jobguard.markUnknown(pool, job.attempt_id);
        }
      }
    }
    // one statement records the batch; a lost connection here ends the
    // loop with the attempts still open (they time out to unknown), and
    // never runs a handler twice
    for (const out of await jobguard.finishMany(pool, ids, results)) {
      if (out.outcome === null) console.log('not recorded:', out.attempt_id, out.sqlstate, out.message);
    }
    drained += jobs.length;
  }
  console.log('drained', drained);
  await pool.end();
}
main();
