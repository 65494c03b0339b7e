'use strict';
// Fails when a ```sql block of ../psql-guide.md is not, verbatim, in
// sql/guide.sql, or a ```text block is not in expected/guide.out.  Those
// two are checked by pg_regress, so the guide shows only real output.
const fs = require('node:fs');
const path = require('node:path');

const here = __dirname;
const md = fs.readFileSync(path.join(here, '..', 'psql-guide.md'), 'utf8');
const sources = {
  sql: fs.readFileSync(path.join(here, 'sql', 'guide.sql'), 'utf8'),
  text: fs.readFileSync(path.join(here, 'expected', 'guide.out'), 'utf8'),
};
let checked = 0, missing = 0;
for (const m of md.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)) {
  const [, lang, body] = m;
  if (!(lang in sources)) continue;
  checked++;
  if (!sources[lang].includes(body)) {
    missing++;
    console.error(`psql-guide.md: this ${lang} block is not in ${lang === 'sql' ? 'sql/guide.sql' : 'expected/guide.out'}:\n${body}`);
  }
}
if (checked === 0) { console.error('psql-guide.md: no blocks found'); process.exit(1); }
console.log(`psql-guide.md: ${checked - missing} of ${checked} blocks match the tested files`);
process.exit(missing ? 1 : 0);
