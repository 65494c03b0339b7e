'use strict';
// The certification runner (SPEC 1.3, "Certification is earned"): a
// fallback provider is certified for an operation only after its handler
// ran on real inputs and every output kept the operation's contract.
//
//   const report = await jobguard.certify({ pool, operation: 'charge',
//     provider: 'adyen', handler: callAdyen });   // sample: 50 | inputs: path, compare
//
// The inputs are the params of the operation's most recent succeeded jobs
// (sample, default 50) or the lines of a file (inputs: one JSON object a
// line, {"params": ..., "job_id"?: n, "result"?: the winning result}).
// The handler runs once on each, as a Worker would run it against the
// candidate provider (point it at the provider's test mode where it has
// one); each output is checked with jobguard.check_result and, with
// compare, against the winning result of the same job.  certify_provider
// is called only when every input passed, with the evidence
// {"runner", "contract_version", "inputs", "passed", "failed": 0,
// "sample", "job_ids", "started_at", "ended_at"}; otherwise nothing is
// certified and the report lists each failure (job id, path, message).
// Reading inputs needs payload rights (an operator, or a reader granted
// with payloads => true); certifying needs an administrator of jobguard.

const fs = require('node:fs');
const crypto = require('node:crypto');
const { unrecordable, errorText } = require('./loop');

const VERSION = require('./package.json').version;
const RUNNER = `jobguard-node ${VERSION}`;
const DEFAULT_SAMPLE = 50;

// PayloadRightsRequired: the caller may not read the params of the
// operation's jobs, so there is nothing real to replay.
class PayloadRightsRequired extends Error {
  // operation: the operation whose inputs were to be read
  constructor(operation, detail) {
    super(`the certification runner reads the params of operation "${operation}"'s jobs, `
      + 'which needs payload rights: run it as a jobguard operator (jobguard.grant_operator) '
      + 'or as a role granted jobguard.grant_reader(role, scope, payloads => true)'
      + (detail ? ` (${detail})` : ''));
    this.name = 'PayloadRightsRequired';
  }
}

// CertifyError: the run could not take place (no inputs, a bad inputs
// file, the contract changed meanwhile); nothing was certified.
class CertifyError extends Error {
  // message: what stopped the run
  constructor(message) {
    super(message);
    this.name = 'CertifyError';
  }
}

// RECENT: the params and winning result of an operation's most recent
// succeeded jobs (a job succeeded when its result slot is taken:
// completed_by); hidden: the caller may not read their payloads (params
// is never NULL in a job, so NULL here is the view hiding it)
const RECENT = `
  SELECT job_id::text, provider, params, result, params IS NULL AS hidden
    FROM jobguard.job_overview
   WHERE operation = $1 AND completed_by IS NOT NULL
   ORDER BY completed_at DESC, job_id DESC
   LIMIT $2`;

// contractVersion: the operation's current contract_version (null when it
// has none, or is not defined).  Reading it needs an administrator, as
// certifying does.
async function contractVersion(db, operation) {
  let rows;
  try {
    ({ rows } = await db.query({ text: `SELECT contract_version::text AS v
                                          FROM jobguard.operations WHERE operation = $1`,
    values: [operation] }));
  } catch (err) {
    if (err.code === '42501') {
      throw new CertifyError('certifying a provider needs an administrator of jobguard (the '
        + `extension's owner or a superuser): ${err.message}`);
    }
    throw err;
  }
  return rows.length === 0 || rows[0].v === null ? null : Number(rows[0].v);
}

// recentInputs: up to n inputs from the operation's most recent succeeded
// jobs; PayloadRightsRequired when their params cannot be read.
async function recentInputs(db, operation, n) {
  let rows;
  try {
    ({ rows } = await db.query({ text: RECENT, values: [operation, n] }));
  } catch (err) {
    if (err.code === '42501') throw new PayloadRightsRequired(operation, err.message);
    throw err;
  }
  if (rows.some((r) => r.hidden)) throw new PayloadRightsRequired(operation, 'params read as NULL');
  return rows.map((r) => ({ jobId: Number(r.job_id), ownProvider: r.provider, params: r.params,
    winning: r.result, hasWinning: true, where: `job ${r.job_id}` }));
}

// fileInputs: the inputs of a file, one JSON object a line (blank lines
// skipped): params (required), job_id and result (optional: the winning
// result that compare is given).
function fileInputs(file) {
  let text;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new CertifyError(`cannot read the inputs file ${file}: ${err.message}`);
  }
  const inputs = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    let v;
    try {
      v = JSON.parse(line);
    } catch (err) {
      throw new CertifyError(`${file}:${i + 1}: not JSON (${err.message})`);
    }
    if (!v || typeof v !== 'object' || Array.isArray(v) || !('params' in v) || v.params === null) {
      throw new CertifyError(`${file}:${i + 1}: each line must be an object with "params" `
        + '(and optionally "job_id" and "result")');
    }
    if (v.job_id !== undefined && v.job_id !== null && !Number.isSafeInteger(v.job_id)) {
      throw new CertifyError(`${file}:${i + 1}: "job_id" must be an integer`);
    }
    const jobId = v.job_id ?? null;
    inputs.push({ jobId, ownProvider: null, params: v.params, winning: v.result ?? null,
      hasWinning: 'result' in v, where: jobId !== null ? `job ${jobId}` : `${file}:${i + 1}` });
  });
  return inputs;
}

// winningResults: the winning result of each file input that names a job
// but gives no result (for compare); payload rights needed as for a sample.
async function winningResults(db, operation, inputs) {
  const want = inputs.filter((i) => !i.hasWinning && i.jobId !== null);
  if (want.length === 0) return;
  let rows;
  try {
    ({ rows } = await db.query({ text: `SELECT job_id::text, result, params IS NULL AS hidden
                                          FROM jobguard.job_overview
                                         WHERE job_id = ANY ($1::bigint[])`,
    values: [want.map((i) => i.jobId)] }));
  } catch (err) {
    if (err.code === '42501') throw new PayloadRightsRequired(operation, err.message);
    throw err;
  }
  if (rows.some((r) => r.hidden)) throw new PayloadRightsRequired(operation, 'results read as NULL');
  const byId = new Map(rows.map((r) => [Number(r.job_id), r.result]));
  for (const i of want) {
    if (byId.has(i.jobId)) { i.winning = byId.get(i.jobId); i.hasWinning = i.winning !== null; }
  }
}

// violation: the contract check's text as { path, message } ("$.a: ..."
// gives the path $.a).
function violation(text) {
  const m = /^(\$\S*): (.*)$/s.exec(text);
  return m ? { path: m[1], message: m[2] } : { path: '$', message: text };
}

// firstDifference: the path of the first place where two JSON values
// differ, or null when they are equal.
function firstDifference(a, b, path = '$') {
  if (a === b) return null;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object'
      || Array.isArray(a) !== Array.isArray(b)) {
    return path;
  }
  if (Array.isArray(a)) {
    for (let i = 0; i < Math.max(a.length, b.length); i++) {
      const d = i < a.length && i < b.length ? firstDifference(a[i], b[i], `${path}[${i}]`) : `${path}[${i}]`;
      if (d) return d;
    }
    return null;
  }
  for (const k of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
    const sub = `${path}.${k}`;
    if (!(k in a) || !(k in b)) return sub;
    const d = firstDifference(a[k], b[k], sub);
    if (d) return d;
  }
  return null;
}

// compared: what compare(output, winning, input) said, as null (the same)
// or { path, message }.  true passes; false fails at the first difference;
// a string is the failure's message; { path, message } is the failure.
function compared(said, output, winning) {
  if (said === true) return null;
  if (said === false || said === undefined || said === null) {
    return { path: firstDifference(output, winning) || '$',
      message: 'the output differs from the winning result of the same job' };
  }
  if (typeof said === 'string') return { path: '$', message: said };
  if (typeof said === 'object' && typeof said.message === 'string') {
    return { path: typeof said.path === 'string' ? said.path : '$', message: said.message };
  }
  return { path: '$', message: `compare returned ${JSON.stringify(said)}; expected true, false, a message or { path, message }` };
}

// check: run the handler on one input and judge its output; resolves to
// null (passed) or the failure { jobId, where, path, message }.
async function check(db, { operation, provider, handler, compare, tag }, input, n) {
  const fail = (f) => ({ jobId: input.jobId, where: input.where, ...f });
  const job = { attempt_id: null, job_id: input.jobId, attempt_no: null, operation, provider,
    params: input.params, deadline: null, provider_key: `jgcert-${tag}-${n}`, redrive: false,
    failover: input.ownProvider !== null && input.ownProvider !== provider, certification: true };
  let output;
  try {
    output = await handler(job);
  } catch (err) {
    return fail({ path: '$', message: `the handler threw ${errorText(err)}` });
  }
  const why = unrecordable(output);
  if (why) return fail({ path: '$', message: `the output cannot be recorded: ${why}` });
  const { rows: [{ v }] } = await db.query({ text: 'SELECT jobguard.check_result($1, $2::jsonb) AS v',
    values: [operation, JSON.stringify(output)] });
  if (v !== null) return fail(violation(v));
  if (compare) {
    if (!input.hasWinning) {
      return fail({ path: '$', message: 'no winning result to compare with (give "result" or "job_id" in the inputs file)' });
    }
    let said;
    try {
      said = await compare(output, input.winning, job);
    } catch (err) {
      return fail({ path: '$', message: `compare threw ${errorText(err)}` });
    }
    const diff = compared(said, output, input.winning);
    if (diff) return fail(diff);
  }
  return null;
}

// certify: the certification run (see the top of this file).  options:
// client or pool (or db: anything with query() and, for a pool, connect());
// operation; provider (the candidate); handler (async (job) => output,
// job as a Worker's claim row, provider the candidate, provider_key a key
// of this run); sample (how many recent succeeded jobs, default 50) or
// inputs (a file path); compare (async (output, winning, job) => true |
// false | message | { path, message }).  Resolves to the report: {
// certified, operation, provider, contractVersion, sample, inputs,
// passed, failed, failures: [{ jobId, where, path, message }], jobIds,
// evidence (certified only) }.
async function certify({ client, pool, db, operation, provider, handler, sample, inputs, compare }) {
  const conn = client || pool || db;
  if (!conn || typeof conn.query !== 'function') throw new TypeError('certify needs a client or a pool');
  if (typeof operation !== 'string' || operation === '') throw new TypeError('operation must be a name');
  if (typeof provider !== 'string' || provider === '') throw new TypeError('provider must be a name');
  if (typeof handler !== 'function') throw new TypeError('handler must be a function');
  if (compare !== undefined && compare !== null && typeof compare !== 'function') {
    throw new TypeError('compare must be a function');
  }
  if (inputs !== undefined && inputs !== null && sample !== undefined && sample !== null) {
    throw new TypeError('give sample or inputs, not both');
  }
  const fromFile = inputs !== undefined && inputs !== null;
  const n = fromFile ? null : (sample ?? DEFAULT_SAMPLE);
  if (!fromFile && !(Number.isSafeInteger(n) && n >= 1)) throw new RangeError('sample must be a positive integer');

  const startedAt = new Date();
  const list = fromFile ? fileInputs(inputs) : await recentInputs(conn, operation, n);
  if (fromFile && compare) await winningResults(conn, operation, list);
  if (list.length === 0) {
    throw new CertifyError(fromFile ? `the inputs file ${inputs} has no inputs`
      : `operation "${operation}" has no succeeded jobs the runner can read: nothing to replay`);
  }
  const version = await contractVersion(conn, operation);
  const tag = crypto.randomBytes(6).toString('hex');
  const failures = [];
  for (let i = 0; i < list.length; i++) {
    const failure = await check(conn, { operation, provider, handler, compare, tag }, list[i], i + 1);
    if (failure) failures.push(failure);
  }
  const jobIds = list.map((i) => i.jobId).filter((id) => id !== null);
  const report = { certified: false, operation, provider, contractVersion: version,
    sample: fromFile ? 'file' : 'recent', inputs: list.length, passed: list.length - failures.length,
    failed: failures.length, failures, jobIds };
  if (failures.length > 0) return report;

  const evidence = { runner: RUNNER, contract_version: version, inputs: list.length,
    passed: list.length, failed: 0, sample: report.sample, job_ids: jobIds,
    started_at: startedAt.toISOString(), ended_at: new Date().toISOString() };
  await certifyUnder(conn, operation, provider, version, evidence);
  return { ...report, certified: true, evidence };
}

// certifyUnder: certify_provider with the evidence, in one transaction
// that first sees the contract still at the version the inputs were
// checked against (a redefinition meanwhile: CertifyError, nothing written).
async function certifyUnder(conn, operation, provider, version, evidence) {
  const pooled = typeof conn.connect === 'function' && typeof conn.totalCount === 'number';
  const c = pooled ? await conn.connect() : conn;
  try {
    await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    try {
      const now = await contractVersion(c, operation);
      if (now !== version) {
        throw new CertifyError(`the contract of operation "${operation}" changed during the run `
          + `(version ${version} to ${now}); nothing certified: run it again`);
      }
      await c.query({ text: 'SELECT jobguard.certify_provider($1, $2, $3::jsonb)',
        values: [operation, provider, JSON.stringify(evidence)] });
      await c.query('COMMIT');
    } catch (err) {
      await c.query('ROLLBACK').catch(() => {});
      if (err.code === '42501') {
        throw new CertifyError('certifying a provider needs an administrator of jobguard (the '
          + `extension's owner or a superuser): ${err.message}`);
      }
      throw err;
    }
  } finally {
    if (pooled) c.release();
  }
}

// formatFailure: one failure as the command line prints it.
function formatFailure(f) {
  return `${f.where}: ${f.path}: ${f.message}`;
}

module.exports = { certify, PayloadRightsRequired, CertifyError, formatFailure, firstDifference,
  RUNNER };
