'use strict';
// The scenarios the console's test opens, written through jobguard's own
// functions by a superuser connection: the roles (an operator, readers
// with and without payloads, clients of two scopes, a role with no
// grant), and an unknown attempt inside its redrive window, one past it,
// one whose provider does not deduplicate, a lost result, a provider at
// its max_in_flight, a paused one, a stale certification, a failed job.

const PASSWORD = 'console-test-password';
const ROLES = {
  olga: "SELECT jobguard.grant_operator('olga')",
  rita: "SELECT jobguard.grant_reader('rita')",
  pete: "SELECT jobguard.grant_reader('pete', 'shop', payloads => true)",
  carl: "SELECT jobguard.grant_client('carl', 'shop')",
  cora: "SELECT jobguard.grant_client('cora', 'other')",
  nobody: null,
};

// has: whether the database has a function or view column of 1.3.
async function has(admin, sql) {
  const { rows } = await admin.query(sql);
  return rows[0].v;
}

// freshDatabase: a new database dbname with jobguard, for one test file;
// the consoles of this process connect to it.  Resolves to its superuser
// client and the seeded ids.
async function freshDatabase(connect, dbname) {
  const first = await connect();
  await first.query(`DROP DATABASE IF EXISTS ${dbname}`);
  await first.query(`CREATE DATABASE ${dbname}`);
  await first.end();
  process.env.PGDATABASE = dbname;
  const admin = await connect();
  try {
    await admin.query('SET client_min_messages = warning');
    await admin.query('CREATE EXTENSION jobguard');
    return { admin, ids: await seed(admin) };
  } catch (err) {
    await admin.end();
    throw err;
  }
}

// seed: write every scenario; resolves to the ids the test checks.
async function seed(admin) {
  const q = (text, values) => admin.query(text, values);
  for (const [role, grant] of Object.entries(ROLES)) {
    // roles are the cluster's: made once, granted in each test database
    const { rows } = await q('SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1', [role]);
    if (!rows.length) await q(`CREATE ROLE ${role} LOGIN PASSWORD '${PASSWORD}'`);
    if (grant) await q(grant);
  }
  const v13 = {
    paused: await has(admin, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.proname = 'set_provider_policy'
                                AND p.pronamespace = 'jobguard'::regnamespace AND 'paused' = ANY (p.proargnames)) AS v`),
    stale: await has(admin, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = 'jobguard.certification_overview'::regclass
                               AND attname = 'stale') AS v`),
    lostResults: await has(admin, "SELECT pg_catalog.to_regclass('jobguard.lost_results') IS NOT NULL AS v"),
    audit: await has(admin, "SELECT pg_catalog.to_regclass('jobguard.operator_actions') IS NOT NULL AS v"),
  };
  await q("SELECT jobguard.set_provider_policy('stripe', dedupes_for => interval '1 day')");
  await q("SELECT jobguard.set_provider_policy('adyen', dedupes_for => interval '1 second')");
  await q("SELECT jobguard.set_provider_policy('paypal', max_in_flight => 1)");
  if (v13.paused) await q("SELECT jobguard.set_provider_policy('klarna', paused => true)");
  await q(`SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["charge_id"]}')`);
  await q("SELECT jobguard.certify_provider('charge', 'adyen', '{\"runner\": \"console seed\"}')");
  if (v13.stale) {
    await q(`SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["charge_id", "amount"]}')`);
  }
  // submit and begin as the client of scope shop (its jobs are its scope's)
  const ids = { v13 };
  await q('SET ROLE carl');
  const submit = async (owner, key, provider, params, maxAttempts = null) => (await q(
    'SELECT job_id FROM jobguard.submit($1, $2, $3, $4::jsonb, $5, $6)', [owner, key, 'pay', JSON.stringify(params), provider, maxAttempts])).rows[0].job_id;
  const begin = async (job) => (await q("SELECT jobguard.begin_attempt($1, timeout => interval '1 hour') AS a", [job])).rows[0].a;
  // unknown inside stripe's one-day window
  ids.insideJob = await submit('alice', 'checkout-1', 'stripe', { amount: 4200 });
  ids.insideAttempt = await begin(ids.insideJob);
  await q('SELECT jobguard.mark_unknown($1)', [ids.insideAttempt]);
  // unknown past adyen's window (one second, less the one-minute margin)
  ids.pastJob = await submit('bob', 'checkout-2', 'adyen', { amount: 990 });
  ids.pastAttempt = await begin(ids.pastJob);
  await q('SELECT jobguard.mark_unknown($1)', [ids.pastAttempt]);
  // blocked: mailer does not deduplicate
  ids.blockedJob = await submit('carol', 'receipt-3', 'mailer', { to: 'carol@example.com' });
  ids.blockedAttempt = await begin(ids.blockedJob);
  await q('SELECT jobguard.mark_unknown($1)', [ids.blockedAttempt]);
  // a second unknown inside the window, for the cancel action
  ids.cancelJob = await submit('dave', 'checkout-4', 'stripe', { amount: 1500 });
  ids.cancelAttempt = await begin(ids.cancelJob);
  await q('SELECT jobguard.mark_unknown($1)', [ids.cancelAttempt]);
  // a lost result: attempt 1 unknown, redriven as attempt 2, which wins;
  // attempt 1's late result loses and is kept
  ids.lostJob = await submit('erin', 'checkout-5', 'stripe', { amount: 7700, card: 'secret-card-token' });
  ids.lostAttempt = await begin(ids.lostJob);
  await q('SELECT jobguard.mark_unknown($1)', [ids.lostAttempt]);
  await q('RESET ROLE');
  ids.winAttempt = (await q('SELECT jobguard.redrive_attempt($1) AS a', [ids.lostAttempt])).rows[0].a;
  await q('SET ROLE carl');
  await q(`SELECT jobguard.finish_attempt($1, '{"charge_id": "ch_win"}')`, [ids.winAttempt]);
  await q(`SELECT jobguard.finish_attempt($1, '{"charge_id": "ch_twice"}')`, [ids.lostAttempt]);
  // paypal at its max_in_flight of 1
  ids.busyJob = await submit('frank', 'checkout-6', 'paypal', { amount: 300 });
  ids.busyAttempt = await begin(ids.busyJob);
  // failed: one attempt allowed, and the provider refused it
  ids.failedJob = await submit('gina', 'checkout-7', 'stripe', { amount: 50 }, 1);
  ids.failedAttempt = await begin(ids.failedJob);
  await q("SELECT jobguard.fail_attempt($1, 'card declined')", [ids.failedAttempt]);
  ids.failedJob2 = await submit('hugo', 'checkout-8', 'stripe', { amount: 60 }, 1);
  await q("SELECT jobguard.fail_attempt($1, 'card declined')", [await begin(ids.failedJob2)]);
  await q('RESET ROLE');
  // a job of another scope (cora's)
  await q('SET ROLE cora');
  ids.otherJob = (await q("SELECT job_id FROM jobguard.submit('ivan', 'order-9', 'pay', '{}', 'stripe')")).rows[0].job_id;
  ids.otherAttempt = (await q('SELECT jobguard.begin_attempt($1) AS a', [ids.otherJob])).rows[0].a;
  await q('SELECT jobguard.mark_unknown($1)', [ids.otherAttempt]);
  await q('RESET ROLE');
  for (const k of Object.keys(ids)) if (typeof ids[k] === 'string') ids[k] = Number(ids[k]);
  return ids;
}

module.exports = { seed, freshDatabase, PASSWORD, ROLES };
