#!/usr/bin/env node
'use strict';
// The jobguard command line.
//
//   npx jobguard certify --operation charge --provider adyen \
//       --handler ./mymodule.js#callAdyen [--sample 50 | --inputs file.jsonl] \
//       [--compare ./mymodule.js#same] [--dsn postgres://...]
//
// Runs the certification runner (certify.js) against the database of the
// PG* environment (or --dsn): exit 0 when the provider was certified; 1
// when an input failed (each failure printed: job id, path, message;
// nothing certified); 2 when the run could not take place (bad arguments,
// no payload rights, no inputs, a database error).

const path = require('node:path');
const { pathToFileURL } = require('node:url');
const { parseArgs } = require('node:util');
const { Pool } = require('pg');
// the client first (certify.js uses the loop's rules, which need it loaded)
const { certify } = require('../index');
const { formatFailure, RUNNER } = require('../certify');

const USAGE = `usage: jobguard certify --operation OP --provider P --handler MODULE#EXPORT
                        [--sample N | --inputs FILE.jsonl] [--compare MODULE#EXPORT]
                        [--dsn URL]
  MODULE is a path (relative to the current directory) or a package name;
  EXPORT a function it exports (none: the module itself, or its default).
  The database is the PG* environment's, or --dsn.`;

// Usage: a mistake in the command line (exit 2, with the usage).
class Usage extends Error {}

// loadFunction: the function named by "module#export".
async function loadFunction(spec, what) {
  const hash = spec.lastIndexOf('#');
  const file = hash >= 0 ? spec.slice(0, hash) : spec;
  const name = hash >= 0 ? spec.slice(hash + 1) : '';
  if (file === '') throw new Usage(`--${what} ${spec}: no module`);
  const local = file.startsWith('.') || file.startsWith('/') || path.isAbsolute(file);
  const target = local ? pathToFileURL(path.resolve(file)).href : file;
  let mod;
  try {
    mod = await import(target);
  } catch (err) {
    throw new Usage(`--${what} ${spec}: cannot load ${file}: ${err.message}`);
  }
  let fn;
  if (name === '') fn = typeof mod.default === 'function' ? mod.default : mod;
  else fn = mod[name] ?? (mod.default && mod.default[name]);
  if (typeof fn !== 'function') throw new Usage(`--${what} ${spec}: ${name || 'the module'} is not a function`);
  return fn;
}

// certifyCommand: the certify subcommand; resolves to the exit code.
async function certifyCommand(argv, out, err) {
  let values;
  try {
    ({ values } = parseArgs({ args: argv, strict: true, options: {
      operation: { type: 'string' }, provider: { type: 'string' }, handler: { type: 'string' },
      sample: { type: 'string' }, inputs: { type: 'string' }, compare: { type: 'string' },
      dsn: { type: 'string' }, help: { type: 'boolean' } } }));
  } catch (e) {
    throw new Usage(e.message);
  }
  if (values.help) { out.write(`${USAGE}\n`); return 0; }
  for (const k of ['operation', 'provider', 'handler']) {
    if (!values[k]) throw new Usage(`--${k} is required`);
  }
  if (values.sample !== undefined && values.inputs !== undefined) {
    throw new Usage('give --sample or --inputs, not both');
  }
  let sample;
  if (values.sample !== undefined) {
    sample = Number(values.sample);
    if (!/^[0-9]+$/.test(values.sample) || !(sample >= 1)) throw new Usage('--sample must be a positive integer');
  }
  const handler = await loadFunction(values.handler, 'handler');
  const compare = values.compare ? await loadFunction(values.compare, 'compare') : undefined;
  const pool = new Pool(values.dsn ? { connectionString: values.dsn, max: 2 } : { max: 2 });
  pool.on('error', () => {});
  let report;
  try {
    report = await certify({ pool, operation: values.operation, provider: values.provider,
      handler, compare, sample, inputs: values.inputs });
  } finally {
    await pool.end();
  }
  const what = `operation ${report.operation}, provider ${report.provider}`;
  if (report.certified) {
    out.write(`certified: ${what}: ${report.passed} of ${report.inputs} inputs passed `
      + `(contract version ${report.contractVersion}, ${RUNNER})\n`);
    return 0;
  }
  for (const f of report.failures) err.write(`failed: ${formatFailure(f)}\n`);
  err.write(`not certified: ${what}: ${report.failed} of ${report.inputs} inputs failed\n`);
  return 1;
}

// main: the command line; resolves to the exit code.
async function main(argv, out = process.stdout, err = process.stderr) {
  const [command, ...rest] = argv;
  try {
    if (command === 'certify') return await certifyCommand(rest, out, err);
    if (command === undefined || command === '--help' || command === 'help') {
      (command === undefined ? err : out).write(`${USAGE}\n`);
      return command === undefined ? 2 : 0;
    }
    throw new Usage(`unknown command ${command}`);
  } catch (e) {
    if (e instanceof Usage) {
      err.write(`jobguard: ${e.message}\n${USAGE}\n`);
    } else {
      err.write(`jobguard certify: ${e.message}\n`);
    }
    return 2;
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => { process.exitCode = code; });
}

module.exports = { main };
