'use strict';
// index.d.ts type-checks the way an application uses the client, and keeps
// job ids and attempt ids apart: types-check/usage.ts is compiled with the
// TypeScript compiler (a pinned dev dependency, no network at test time);
// its @ts-expect-error lines fail the compile if a misuse were accepted.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');

test('index.d.ts: typed usage compiles, id mix-ups do not', async () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const project = path.join(__dirname, '..', 'types-check');
  try {
    await promisify(execFile)(process.execPath, [tsc, '-p', project]);
  } catch (err) {
    assert.fail(`tsc failed:\n${err.stdout}${err.stderr}`);
  }
});
