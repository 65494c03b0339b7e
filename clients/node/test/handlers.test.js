'use strict';
// A Worker with a handler per provider, or one handler for a list of
// providers: each attempt runs the handler of its row's provider, and a
// row for a provider the worker has no handler for is never claimed, on a
// database whose claim takes a providers list (1.3) and on one whose claim
// does not (1.2: a claim per provider in turn).
const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');
const jg = require('..');
const { setUp, tearDown } = require('../testlib');

const DB = 'jg_client_node_handlers';
let pool;
let takesProviders;
test.before(async () => {
  pool = await setUp(DB);
  takesProviders = await jg.claimTakesProviders(pool);
});
test.after(async () => { await tearDown(pool, DB); });

const quiet = () => { const lines = []; const keep = (m) => lines.push(m);
  return { lines, info: keep, warn: keep, error: keep }; };

// freshJobs: a new operation and, per provider named, n jobs targeting it;
// resolves to { op, jobs: Map job_id -> provider }
async function freshJobs(perProvider) {
  const op = `op-${randomUUID().slice(0, 12)}`;
  await pool.query(`SELECT jobguard.define_operation($1, '{"type": "object"}')`, [op]);
  const jobs = new Map();
  for (const [provider, n] of Object.entries(perProvider)) {
    const rows = await jg.submitMany(pool, Array.from({ length: n }, (_, i) => ({
      ownerId: 'alice', idempotencyKey: randomUUID(), operation: op, params: { i }, provider })));
    for (const r of rows) jobs.set(r.job_id, provider);
  }
  return { op, jobs };
}

// attemptsOf: every attempt of the operation's jobs: { job_id, provider, state }
async function attemptsOf(op) {
  const { rows } = await pool.query(`SELECT a.job_id::int, a.provider, a.state
                                       FROM jobguard.attempt_overview a
                                       JOIN jobguard.job_overview j USING (job_id)
                                      WHERE j.operation = $1 ORDER BY a.attempt_id`, [op]);
  return rows;
}

// both: run the case on the database's own claim and, where that takes a
// providers list, as on a 1.2 database (a claim per provider in turn)
const both = [['the database\'s claim', undefined], ['a claim per provider (1.2)', false]];

for (const [how, forced] of both) {
  test(`handlers per provider, ${how}: each runs its own rows; an unhandled provider's are never claimed`, async (t) => {
    if (forced === false && !takesProviders) t.diagnostic('the database is 1.2: the same path twice');
    const { op, jobs } = await freshJobs({ 'psp-a': 6, 'psp-b': 5, 'psp-z': 4 });
    const ran = [];
    const handle = (name) => async (job) => {
      ran.push({ name, provider: job.provider, job_id: job.job_id, failover: job.failover });
      return { by: name };
    };
    const w = new jg.Worker({ handlers: { 'psp-a': handle('a'), 'psp-b': handle('b') } },
      { connection: { database: DB }, operations: [op], batch: 3, waitSeconds: 0.3, logger: quiet() });
    if (forced !== undefined) w.takesProviders = forced;
    const stats = await w.run({ untilIdle: true, handleSignals: false });
    assert.equal(stats.won, 11);
    assert.equal(stats.unhandled, 0, 'no row for an unhandled provider was claimed');
    assert.deepEqual(ran.map((r) => r.name).sort(), [...'aaaaaabbbbb']);
    for (const r of ran) {
      assert.equal(r.provider, `psp-${r.name}`, 'a row runs its own provider\'s handler');
      assert.equal(jobs.get(r.job_id), r.provider);
      if (takesProviders && forced === undefined) assert.equal(r.failover, false);
    }
    const attempts = await attemptsOf(op);
    assert.equal(attempts.length, 11);
    assert.ok(attempts.every((a) => a.provider !== 'psp-z' && a.state === 'succeeded'));
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM jobguard.job_overview
                                        WHERE operation = $1 AND provider = 'psp-z'
                                          AND state = 'pending' AND attempts = 0`, [op]);
    assert.equal(rows[0].n, 4, 'the unhandled provider\'s jobs wait, untouched');
  });

  test(`one handler with a providers list, ${how}: it reads job.provider`, async () => {
    const { op } = await freshJobs({ 'psp-a': 3, 'psp-b': 3, 'psp-z': 2 });
    const seen = [];
    const w = new jg.Worker(async (job) => { seen.push(job.provider); return { via: job.provider }; },
      { connection: { database: DB }, operations: [op], providers: ['psp-b', 'psp-a'],
        waitSeconds: 0.3, logger: quiet() });
    if (forced !== undefined) w.takesProviders = forced;
    const stats = await w.run({ untilIdle: true, handleSignals: false });
    assert.equal(stats.won, 6);
    assert.deepEqual(seen.sort(), ['psp-a', 'psp-a', 'psp-a', 'psp-b', 'psp-b', 'psp-b']);
    assert.ok((await attemptsOf(op)).every((a) => a.provider !== 'psp-z'));
  });
}

test('one handler without a providers list serves every provider, as before', async () => {
  const { op } = await freshJobs({ 'psp-a': 2, 'psp-z': 2 });
  const seen = [];
  const w = new jg.Worker(async (job) => { seen.push(job.provider); return {}; },
    { connection: { database: DB }, operations: [op], waitSeconds: 0.3, logger: quiet() });
  const stats = await w.run({ untilIdle: true, handleSignals: false });
  assert.equal(stats.won, 4);
  assert.deepEqual(seen.sort(), ['psp-a', 'psp-a', 'psp-z', 'psp-z']);
});

test('a provider option with handlers: only that provider\'s attempts; one it has no handler for is refused', async () => {
  const { op } = await freshJobs({ 'psp-a': 2, 'psp-b': 2 });
  const seen = [];
  const w = new jg.Worker({ handlers: { 'psp-a': async () => { seen.push('a'); return {}; },
    'psp-b': async () => { seen.push('b'); return {}; } } },
  { connection: { database: DB }, operations: [op], provider: 'psp-b', waitSeconds: 0.3, logger: quiet() });
  const stats = await w.run({ untilIdle: true, handleSignals: false });
  assert.equal(stats.won, 2);
  assert.deepEqual(seen, ['b', 'b']);
  assert.throws(() => new jg.Worker({ handlers: { 'psp-a': async () => ({}) } }, { provider: 'psp-b' }),
    { name: 'RangeError', message: /provider "psp-b" has no handler/ });
});

test('a Worker refuses handlers it cannot use', () => {
  const bad = [
    [undefined, {}, /handler must be a function or \{ handlers/],
    [{ handlers: {} }, {}, /at least one provider/],
    [{ handlers: { 'psp-a': 'nope' } }, {}, /handler of provider "psp-a" must be a function/],
    [{ handlers: { 'psp-a': async () => ({}) } }, { providers: ['psp-a'] }, /either handlers or the providers option/],
    [async () => ({}), { providers: [] }, /non-empty list/],
    [async () => ({}), { providers: ['psp-a'], provider: 'psp-b' }, /has no handler/],
  ];
  for (const [handler, options, message] of bad) {
    assert.throws(() => new jg.Worker(handler, options), { message });
  }
});

test('1.3 route: a refused job moves to the certified fallback, run by that provider\'s handler with job.failover', async (t) => {
  if (!takesProviders) { t.skip('the database is 1.2: no failover routes'); return; }
  const { op, jobs } = await freshJobs({ 'psp-a': 3 });
  await pool.query('SELECT jobguard.certify_provider($1, $2)', [op, 'psp-b']);
  await pool.query('SELECT jobguard.set_failover($1, ARRAY[$2])', [op, 'psp-b']);
  const ran = [];
  const refuseA = async (job) => { ran.push([job.job_id, job.provider, job.failover]); throw new jg.ProviderRefused('psp-a said no', 0); };
  const okB = async (job) => { ran.push([job.job_id, job.provider, job.failover]); return { via: 'psp-b' }; };
  // a worker with psp-a's handler only: the refused jobs wait for psp-b
  const onlyA = new jg.Worker({ handlers: { 'psp-a': refuseA } }, { connection: { database: DB },
    operations: [op], waitSeconds: 0.3, logger: quiet() });
  const s1 = await onlyA.run({ untilIdle: true, handleSignals: false });
  assert.equal(s1.failed, 3);
  assert.equal(s1.unhandled, 0);
  const { rows: waiting } = await pool.query(`SELECT next_provider FROM jobguard.job_overview
    WHERE operation = $1 AND state = 'pending'`, [op]);
  assert.deepEqual(waiting.map((r) => r.next_provider), ['psp-b', 'psp-b', 'psp-b']);
  // both handlers: psp-b's runs each job's second attempt, as a failover
  const both = new jg.Worker({ handlers: { 'psp-a': refuseA, 'psp-b': okB } }, { connection: { database: DB },
    operations: [op], waitSeconds: 0.3, logger: quiet() });
  const s2 = await both.run({ untilIdle: true, handleSignals: false });
  assert.equal(s2.won, 3);
  const second = ran.slice(3);
  assert.deepEqual(second.map(([, p, f]) => [p, f]), [['psp-b', true], ['psp-b', true], ['psp-b', true]]);
  assert.deepEqual(new Set(second.map(([id]) => id)), new Set(jobs.keys()));
  assert.deepEqual(ran.slice(0, 3).map(([, p, f]) => [p, f]), [['psp-a', false], ['psp-a', false], ['psp-a', false]]);
});
