'use strict';
// The error classes are generated from src/errors.table, whose templates
// say how the server words each error.  Here every error of the table that
// has fields is raised on a real server, on both paths (jobguard.fast_path
// on and off), from the statements of clients/error-cases.json: each comes
// out as its class, no message or DETAIL is left unparsed, and every field
// of every class is filled by at least one of them.  A change of wording in
// C fails this test instead of silently leaving a field null.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const { randomUUID } = require('node:crypto');
const { Client } = require('pg');
const jg = require('..');
const { setUp, tearDown } = require('../testlib');

const DB = 'jg_client_node_errors';
const { cases } = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'error-cases.json'), 'utf8'));
let pool;
test.before(async () => { pool = await setUp(DB); });
test.after(async () => { await tearDown(pool, DB); });

// expand: a case's statement with its placeholders replaced
function expand(sql, k) {
  const job = (key) => `(SELECT job_id FROM jobguard.job_overview WHERE idempotency_key = '${k}${key}')`;
  return sql
    .replace(/\{attempt:(\w+)\}/g, (_, key) =>
      `(SELECT max(attempt_id) FROM jobguard.attempt_overview WHERE job_id = ${job(key)})`)
    .replace(/\{job:(\w+)\}/g, (_, key) => job(key))
    .replaceAll('{k}', k);
}

for (const fastPath of ['on', 'off']) {
  test(`every error of the table parses on a real server (fast_path ${fastPath})`, async () => {
    const c = new Client({ database: DB });
    await c.connect();
    const k = `errors-${fastPath}-${randomUUID().slice(0, 6)}-`;
    const filled = {};
    try {
      await c.query(`SET jobguard.fast_path = ${fastPath}`);
      assert.equal((await c.query("SELECT current_setting('jobguard.fast_path') AS v")).rows[0].v, fastPath);
      for (const cs of cases) {
        for (const sql of cs.setup) await c.query(expand(sql, k));
        let err;
        try {
          await c.query(expand(cs.raise, k));
        } catch (e) {
          err = jg.translate(e);
        }
        assert.ok(err, `${cs.raise} raised nothing`);
        assert.equal(err.code, cs.code, err.message);
        const cls = jg.BY_SQLSTATE[cs.code];
        assert.ok(err instanceof cls && err instanceof jg.JobguardError);
        assert.deepEqual(err.unparsed, [], `${cs.raise}: ${err.message} / ${err.detail}`);
        filled[cs.code] = filled[cs.code] || new Set();
        for (const prop of Object.keys(cls.fields)) if (err[prop] !== null) filled[cs.code].add(prop);
      }
    } finally {
      await c.end();
    }
    for (const [code, cls] of Object.entries(jg.BY_SQLSTATE)) {
      const props = Object.keys(cls.fields);
      if (props.length > 0) assert.deepEqual([...(filled[code] || [])].sort(), props.sort(), code);
    }
  });
}
