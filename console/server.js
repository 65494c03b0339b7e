#!/usr/bin/env node
'use strict';
// jobguard's operator console: node server.js [--allow-actions] [--port N]
// [--base-path /PREFIX] ...  (node server.js --help lists every option).
// The database is the libpq environment (PGHOST, PGPORT, PGDATABASE, ...);
// each person signs in with their own PostgreSQL role.

const http = require('node:http');
const { parse, USAGE } = require('./lib/config');
const { createApp } = require('./lib/app');

// main: parse the settings, listen, stop cleanly on SIGINT/SIGTERM.
function main() {
  let config;
  try {
    config = parse(process.argv.slice(2), process.env);
  } catch (err) {
    console.error(`jobguard-console: ${err.message}\n${USAGE}`);
    process.exit(2);
  }
  if (config.help) {
    console.log(USAGE);
    return;
  }
  const app = createApp(config);
  const server = http.createServer((req, res) => { app.handle(req, res); });
  server.headersTimeout = 10000;
  server.requestTimeout = 30000;
  server.listen(config.port, config.listen, () => {
    const { port } = server.address();
    console.log(`jobguard-console: listening on http://${config.listen}:${port}${config.basePath}/ (${config.allowActions ? 'actions allowed' : 'read-only'})`);
  });
  // stop: close the listener and every session's connections, then exit
  const stop = () => {
    server.close();
    app.close().then(() => process.exit(0));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main();
