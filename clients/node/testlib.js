'use strict';
// Test support (not a test file): a database of its own on the cluster named by the PG* environment
// variables (jobguard installed there), created before and dropped after.
const { Client, Pool } = require('pg');

const DB = process.env.JG_NODE_DB || 'jg_client_node';

// admin: one statement in the maintenance database.
async function admin(sql) {
  const c = new Client({ database: 'postgres' });
  await c.connect();
  try { await c.query(sql); } finally { await c.end(); }
}

// the jobguard version the tests install (JG_EXTENSION_VERSION, e.g. 1.2:
// the client against a database not yet updated); default the newest
const VERSION = process.env.JG_EXTENSION_VERSION || null;

// setUp: create the database with jobguard, a contract and a certified
// fallback provider; resolves to a Pool on it.
async function setUp(db = DB) {
  await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  await admin(`CREATE DATABASE ${db}`);
  const pool = new Pool({ database: db });
  if (VERSION) await pool.query(`CREATE EXTENSION jobguard VERSION '${VERSION.replace(/'/g, "''")}'`);
  else await pool.query('CREATE EXTENSION jobguard');
  await pool.query(`SELECT jobguard.define_operation('charge',
    '{"type": "object", "required": ["charge_id"]}')`);
  await pool.query(`SELECT jobguard.certify_provider('charge', 'backup-psp')`);
  return pool;
}

// tearDown: close the pool and drop the database.
async function tearDown(pool, db = DB) {
  if (pool) await pool.end();
  await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
}

module.exports = { DB, VERSION, admin, setUp, tearDown };
