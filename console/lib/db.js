'use strict';
// The database side of a request: every request of a person runs on a
// connection signed in as that person's own PostgreSQL role, in one
// transaction (BEGIN ... COMMIT, nothing kept on the connection between
// requests, no server-side prepared statement: safe behind a
// transaction-mode pooler), under SET LOCAL statement_timeout.  Each panel
// of a page runs in a savepoint of its own, so that a panel that timed out
// or was refused says so and the others still show.

const pg = require('pg');
const { translate } = require('jobguard');

// int8 as a JavaScript number when exact, else as text (ids stay exact).
const TYPES = {
  getTypeParser: (oid, format) => (oid === 20
    ? (t) => (Number.isSafeInteger(Number(t)) ? Number(t) : t)
    : pg.types.getTypeParser(oid, format)),
};

// connectionOptions: where the console's connections go (the libpq
// environment, PGHOST, PGPORT, PGDATABASE, ..., as pg reads it) for one role.
function connectionOptions(config, user, password) {
  return {
    user,
    password,
    application_name: 'jobguard-console',
    connectionTimeoutMillis: config.connectTimeoutMs,
    types: TYPES,
  };
}

// checkPassword: sign in to PostgreSQL as user with password; resolves to
// the role PostgreSQL authenticated (PostgreSQL itself checks the password).
async function checkPassword(config, user, password) {
  const client = new pg.Client(connectionOptions(config, user, password));
  await client.connect();
  try {
    const { rows } = await client.query('SELECT pg_catalog.session_user() AS who');
    return rows[0].who;
  } finally {
    await client.end();
  }
}

// personPool: the small pool of a signed-in person's own connections.
function personPool(config, user, password) {
  const pool = new pg.Pool({ ...connectionOptions(config, user, password), max: 2, idleTimeoutMillis: 60000 });
  pool.on('error', () => {}); // an idle connection that broke is replaced at the next request
  return pool;
}

// inTransaction: run fn(tx) in one transaction of the person's pool with
// the console's statement_timeout; commits when fn resolves, else rolls
// back.  tx.query(text, values) runs one statement (jobguard errors as the
// client's classes); tx.panel(fn) runs fn in a savepoint and resolves to
// { ok: true, value } or { ok: false, error }.
async function inTransaction(pool, config, fn) {
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('BEGIN');
    // the timeout, and no JIT compilation (a page's short queries never
    // gain from it, and a misestimated plan would pay it on every request)
    await client.query("SELECT pg_catalog.set_config('statement_timeout', $1, true), pg_catalog.set_config('jit', 'off', true)",
      [`${config.statementTimeoutMs}ms`]);
    const tx = {
      client,
      async query(text, values) {
        try {
          return (await client.query({ text, values, types: TYPES })).rows;
        } catch (err) {
          throw translate(err);
        }
      },
      async panel(run) {
        await client.query('SAVEPOINT console_panel');
        try {
          const value = await run(tx);
          await client.query('RELEASE SAVEPOINT console_panel');
          return { ok: true, value };
        } catch (error) {
          await client.query('ROLLBACK TO SAVEPOINT console_panel');
          return { ok: false, error };
        }
      },
    };
    const value = await fn(tx);
    await client.query('COMMIT');
    return value;
  } catch (err) {
    try { await client.query('ROLLBACK'); } catch (e) { broken = true; }
    throw err;
  } finally {
    client.release(broken);
  }
}

// setReason: the reason of the action that follows, for an operator
// function without a reason argument (SPEC 1.3: jobguard.action_reason,
// transaction-local); a library without that setting records none.
async function setReason(tx, reason) {
  await tx.query(`SELECT pg_catalog.set_config('jobguard.action_reason', $1, true)
                   FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) 'jobguard.action_reason'`, [reason]);
}

// describe: what an error means for a panel or an action: an HTTP status,
// a short sentence and the SQLSTATE.
function describe(err, config) {
  const code = err && err.code;
  const said = `${err.message}${err.detail ? ` — ${err.detail}` : ''}`;
  if (code === '57014') {
    return { status: 503, code, kind: 'timeout',
      text: `Timed out: the query ran longer than the console's statement_timeout (${config.statementTimeoutMs} ms).` };
  }
  if (code === '42501' || code === 'JG008' || code === 'JG009') {
    return { status: 403, code, kind: 'refused', text: `The database refused: ${said}` };
  }
  if (code === '42P01' || code === '42703' || code === '42883') {
    return { status: 501, code, kind: 'missing', text: `Not in this database's jobguard (update the extension to 1.3): ${err.message}` };
  }
  if (code === '22023' || code === '22004' || code === '22P02' || code === '22007' || code === '22008' || code === '54000') {
    return { status: 422, code, kind: 'invalid', text: `The database refused the input: ${said}` };
  }
  if (code && /^(JG|55P03|40001|40P01)/.test(code)) {
    return { status: 409, code, kind: 'conflict', text: `The database refused: ${said}` };
  }
  // (a pooler such as pgbouncer refuses a password with 08P01)
  if (code === '28P01' || code === '28000' || (code === '08P01' && /authentication failed/i.test(err.message))) {
    return { status: 401, code, kind: 'auth', text: 'Sign-in failed: PostgreSQL refused that role and password.' };
  }
  return { status: 500, code: code || null, kind: 'error', text: `Error: ${err.message}` };
}

module.exports = { checkPassword, personPool, inTransaction, setReason, describe };
