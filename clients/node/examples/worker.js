const { Worker, RetryLater } = require('jobguard');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// handle one job; what it resolves to becomes the job's result
async function sendEmail(job) {
  if (job.params.busy && job.attempt_no === 1) {
    throw new RetryLater('mail server busy', 2);   // a failed attempt, retried in 2 s
  }
  await sleep((job.params.seconds || 0) * 1000);   // the work; heartbeats keep the attempt
  console.log('sent', job.job_id, 'to', job.params.to);
  return { sent_to: job.params.to };
}

// PGHOST, PGDATABASE, ... name the database; SIGTERM stops it after the current job
new Worker(sendEmail, { operations: ['send-email'], batch: 10, timeoutSeconds: 30 }).run();
