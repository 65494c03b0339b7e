'use strict';
// doc/clients.md's Node example is examples/quickstart.js, verbatim, and it
// runs as the doc says.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');
const { setUp, tearDown } = require('../testlib');

const DOC = path.join(__dirname, '..', '..', '..', 'doc', 'clients.md');
const EXAMPLE = path.join(__dirname, '..', 'examples', 'quickstart.js');
const DB = 'jg_client_node_docs';

// docBlock: the fenced code block that follows the HTML comment marker.
function docBlock(marker) {
  const text = fs.readFileSync(DOC, 'utf8');
  const at = text.indexOf(marker);
  assert.ok(at >= 0, `${DOC} has no ${marker}`);
  const m = /^\s*```[a-z]*\n([\s\S]*?)```/.exec(text.slice(at + marker.length));
  assert.ok(m, `no code block after ${marker}`);
  return m[1];
}

test('the doc example is the tested file', () => {
  assert.equal(docBlock('<!-- example: clients/node/examples/quickstart.js -->'),
    fs.readFileSync(EXAMPLE, 'utf8'));
});

test('the example runs', async () => {
  const pool = await setUp(DB);
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [EXAMPLE],
      { env: { ...process.env, PGDATABASE: DB } });
    const lines = stdout.trim().split('\n');
    assert.equal(lines[0], 'true won succeeded');
    assert.match(lines[1], /^key reused: job \d+ differs in params$/);
  } finally {
    await tearDown(pool, DB);
  }
});
