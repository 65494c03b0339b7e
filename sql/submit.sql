-- jobguard.submit: new jobs, replays, conflicts, and every bad input.
\i sql/include/helpers.sql

-- a new (owner, key) creates a job
SELECT * FROM jobguard.submit('alice', 'order-1', 'charge', '{"amount": 100, "currency": "EUR"}', 'stripe');
-- the same request again (a double-click, a retry) returns the same job
SELECT * FROM jobguard.submit('alice', 'order-1', 'charge', '{"amount": 100, "currency": "EUR"}', 'stripe');
-- key order and whitespace in params do not make a different request
SELECT * FROM jobguard.submit('alice', 'order-1', 'charge', '{"currency":"EUR","amount":100}', 'stripe');
-- nor does the spelling of a number (jsonb equality)
SELECT * FROM jobguard.submit('alice', 'order-1', 'charge', '{"currency":"EUR","amount":100.0}', 'stripe');
-- the same key of another owner is another job
SELECT * FROM jobguard.submit('bob', 'order-1', 'charge', '{"amount": 100, "currency": "EUR"}', 'stripe');
-- max_attempts is part of the request
SELECT * FROM jobguard.submit('alice', 'order-2', 'charge', '{"amount": 5}', 'stripe', 3);
SELECT * FROM jobguard.submit('alice', 'order-2', 'charge', '{"amount": 5}', 'stripe', 3);
-- named arguments work as any SQL client would send them
SELECT created FROM jobguard.submit(owner_id => 'carol', idempotency_key => 'k',
	operation => 'summarize', params => '[1, 2]', provider => 'openai');
-- a replay returns the job whatever state it is in
SELECT jobguard.cancel_job(1, 'customer changed their mind');
SELECT * FROM jobguard.submit('alice', 'order-1', 'charge', '{"amount": 100, "currency": "EUR"}', 'stripe');

-- the same key with a different request is a conflict, never a guess
SELECT * FROM jobguard.submit('alice', 'order-1', 'refund', '{"amount": 100, "currency": "EUR"}', 'stripe');
SELECT * FROM jobguard.submit('alice', 'order-1', 'charge', '{"amount": 101, "currency": "EUR"}', 'stripe');
SELECT * FROM jobguard.submit('alice', 'order-1', 'charge', '{"amount": 100, "currency": "EUR"}', 'paypal');
SELECT * FROM jobguard.submit('alice', 'order-1', 'charge', '{"amount": 100, "currency": "EUR"}', 'stripe', 2);
SELECT * FROM jobguard.submit('alice', 'order-2', 'charge', '{"amount": 5}', 'stripe');
SELECT * FROM jobguard.submit('alice', 'order-2', 'charge', '{"amount": 5}', 'stripe', 4);
SELECT * FROM jobguard.submit('alice', 'order-2', 'refund', '{"amount": 6}', 'paypal', NULL);
-- params compare as JSON: a string is not a number, an extra key is a change
SELECT * FROM jobguard.submit('alice', 'order-2', 'charge', '{"amount": "5"}', 'stripe', 3);
SELECT * FROM jobguard.submit('alice', 'order-2', 'charge', '{"amount": 5, "note": null}', 'stripe', 3);
-- the conflicting requests changed nothing
SELECT job_id, owner_id, idempotency_key, operation, provider, params, max_attempts, version
  FROM jobguard.job_overview ORDER BY job_id;

-- every SQLSTATE of the conflicts and of bad input
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('alice', 'order-1', 'refund', '{}', 'stripe')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit(NULL, 'k', 'op', '{}', 'p')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('o', NULL, 'op', '{}', 'p')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('o', 'k', NULL, '{}', 'p')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('o', 'k', 'op', NULL, 'p')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('o', 'k', 'op', '{}', NULL)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('', 'k', 'op', '{}', 'p')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('o', '', 'op', '{}', 'p')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('o', 'k', '', '{}', 'p')$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('o', 'k', 'op', '{}', '')$$);
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.submit(%L, %L, %L, %L, %L)', repeat('o', 256), 'k', 'op', '{}', 'p'));
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.submit(%L, %L, %L, %L, %L)', 'o', repeat('k', 256), 'op', '{}', 'p'));
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.submit(%L, %L, %L, %L, %L)', 'o', 'k', repeat('x', 64), '{}', 'p'));
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.submit(%L, %L, %L, %L, %L)', 'o', 'k', 'op', '{}', repeat('p', 64)));
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('o', 'k', 'op', '{}', 'p', 0)$$);
SELECT pg_temp.sqlstate_of($$SELECT jobguard.submit('o', 'k', 'op', '{}', 'p', -1)$$);
-- the limits are in characters, not bytes, and inclusive
SELECT created FROM jobguard.submit(repeat('ö', 255), repeat('ключ', 63) || 'abc', repeat('x', 63), 'null', repeat('p', 63), 1);

-- what the messages say, in full
SELECT * FROM jobguard.submit('alice', 'order-2', 'charge', '{"amount": 5}', 'stripe');
SELECT * FROM jobguard.submit(NULL, 'k', 'op', '{}', 'p');
SELECT * FROM jobguard.submit(repeat('o', 300), 'k', 'op', '{}', 'p');
SELECT * FROM jobguard.submit('o', 'k', 'op', '{}', 'p', 0);

-- refused calls wrote nothing: the same jobs as before, and the bad
-- owner 'o' has no job at all
SELECT count(*) AS jobs, count(*) FILTER (WHERE owner_id = 'o') AS jobs_of_o
  FROM jobguard.jobs;
SELECT job_id, owner_id, idempotency_key, state, version, attempts
  FROM jobguard.job_overview WHERE pg_catalog.char_length(owner_id) < 10 ORDER BY job_id;
-- and a refused call inside a transaction leaves it aborted, not half-done
BEGIN;
SELECT * FROM jobguard.submit('dave', 'k', 'op', '{}', 'p');
SELECT * FROM jobguard.submit('dave', 'k', 'op', '{"changed": true}', 'p');
ROLLBACK;
SELECT count(*) AS jobs_of_dave FROM jobguard.jobs WHERE owner_id = 'dave';

-- the table itself refuses a second row for a key (the enforcer is the
-- database, not the function)
INSERT INTO jobguard.jobs (owner_id, idempotency_key, operation, params, provider)
VALUES ('alice', 'order-1', 'charge', '{}', 'stripe');
-- and the table's own rules back up the functions' checks
\set VERBOSITY terse
INSERT INTO jobguard.jobs (owner_id, idempotency_key, operation, params, provider)
VALUES ('', 'k', 'charge', '{}', 'stripe');
INSERT INTO jobguard.jobs (owner_id, idempotency_key, operation, params, provider, max_attempts)
VALUES ('o', 'k', 'charge', '{}', 'stripe', 0);
INSERT INTO jobguard.jobs (owner_id, idempotency_key, operation, params, provider, completed_by)
VALUES ('o', 'k', 'charge', '{}', 'stripe', 1);
\set VERBOSITY default
