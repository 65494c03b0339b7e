-- finish_many (1.2): one row per element in input order, each decided as
-- finish_attempt would decide it alone (won, lost, rejected), refusals
-- carried as rows that write nothing and stop nothing, an attempt named
-- twice, the arrays' shape, the payload limit, scopes and grants.
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	st text; msg text;
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
	RETURN st || ': ' || msg;
END $$;
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["charge_id"]}');
-- five jobs, each with a started attempt; job 2's first attempt was
-- cancelled (unknown, then given up on) and a second one runs
SELECT job_id AS j1 FROM jobguard.submit('alice', 'k1', 'charge', '{}', 'stripe') \gset
SELECT job_id AS j2 FROM jobguard.submit('alice', 'k2', 'charge', '{}', 'stripe') \gset
SELECT job_id AS j3 FROM jobguard.submit('alice', 'k3', 'charge', '{}', 'stripe') \gset
SELECT job_id AS j4 FROM jobguard.submit('alice', 'k4', 'charge', '{}', 'stripe') \gset
SELECT job_id AS j5 FROM jobguard.submit('alice', 'k5', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:j1) AS a1 \gset
SELECT jobguard.begin_attempt(:j2) AS a2old \gset
SELECT jobguard.mark_unknown(:a2old);
SELECT jobguard.cancel_attempt(:a2old, 'the provider did not answer');
SELECT jobguard.begin_attempt(:j2) AS a2 \gset
SELECT jobguard.begin_attempt(:j3) AS a3 \gset
SELECT jobguard.begin_attempt(:j4) AS a4 \gset
SELECT jobguard.fail_attempt(:a4, 'declined');
SELECT jobguard.begin_attempt(:j5) AS a5 \gset

-- won, won, lost (the cancelled attempt's late result), rejected (breaks
-- the contract), a failed attempt (JG006), an id naming nothing (JG009)
SELECT ord, attempt_id = ANY (ARRAY[:a1, :a2, :a2old, :a3, :a4]) AS known_id, outcome, sqlstate, message
  FROM jobguard.finish_many(ARRAY[:a1, :a2, :a2old, :a3, :a4, 999999],
                            ARRAY['{"charge_id": "ch_1"}', '{"charge_id": "ch_2"}',
                                  '{"charge_id": "ch_late"}', '{"no": 1}',
                                  '{"charge_id": "ch_4"}', '{"charge_id": "ch_x"}']::jsonb[]);
-- what finish_attempt answers one by one now, for the same elements
SELECT jobguard.finish_attempt(:a1, '{"charge_id": "ch_1"}') AS replay_a1,
       jobguard.finish_attempt(:a2old, '{"charge_id": "ch_late"}') AS replay_a2old;
SELECT pg_temp.error_of(format($$SELECT jobguard.finish_attempt(%s, '{"charge_id": "ch_4"}')$$, :a4));
-- the jobs as the compare-and-swap left them: one result each, the loser's
-- result on its attempt only, the rejected attempt failed
SELECT j.id = :j1 AS j1, j.id = :j2 AS j2, j.id = :j3 AS j3, j.completed_by = :a1 AS by_a1,
       j.completed_by = :a2 AS by_a2, j.result
  FROM jobguard.jobs j WHERE j.id IN (:j1, :j2, :j3) ORDER BY j.id;
SELECT a.id = :a2old AS a2old, a.state, a.lost_result
  FROM jobguard.attempts a WHERE a.id IN (:a2old, :a3) ORDER BY a.id;
SELECT jobguard.job_state(:j3) AS j3_state;

-- a refused row wrote nothing and stopped nothing: JG007 for a changed
-- result of a won attempt, 22004 for a NULL element, and a5 still wins
SELECT ord, outcome, sqlstate, message
  FROM jobguard.finish_many(ARRAY[:a1, NULL, :a5, :a5],
                            ARRAY['{"charge_id": "changed"}', '{"charge_id": "ch_n"}',
                                  '{"charge_id": "ch_5"}', NULL]::jsonb[]);
SELECT result FROM jobguard.jobs WHERE id IN (:j1, :j5) ORDER BY id;

-- the same attempt twice in one call: the first decides, an equal result
-- repeats its answer, a different one is JG007 (and writes nothing)
SELECT job_id AS j6 FROM jobguard.submit('alice', 'k6', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:j6) AS a6 \gset
SELECT ord, outcome, sqlstate, message
  FROM jobguard.finish_many(ARRAY[:a6, :a6, :a6],
                            ARRAY['{"charge_id": "ch_6"}', '{"charge_id":"ch_6"}',
                                  '{"charge_id": "other"}']::jsonb[]);
SELECT result FROM jobguard.jobs WHERE id = :j6;
-- a refusal repeated repeats the refusal
SELECT ord, outcome, sqlstate FROM jobguard.finish_many(ARRAY[999998, 999998],
                                                        ARRAY['{}', '{}']::jsonb[]);

-- a result over jobguard.max_payload_size: 54000 on its row, nothing written
SELECT job_id AS j7 FROM jobguard.submit('alice', 'k7', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:j7) AS a7 \gset
SET jobguard.max_payload_size = '1kB';
SELECT ord, outcome, sqlstate, message
  FROM jobguard.finish_many(ARRAY[:a7], ARRAY[jsonb_build_object('charge_id', repeat('x', 2000))]);
RESET jobguard.max_payload_size;
SELECT jobguard.job_state(:j7) AS j7_state;

-- the arrays' shape: errors of the whole call
SELECT pg_temp.error_of($$SELECT * FROM jobguard.finish_many(ARRAY[1, 2], ARRAY['{}']::jsonb[])$$);
SELECT pg_temp.error_of($$SELECT * FROM jobguard.finish_many(NULL, ARRAY['{}']::jsonb[])$$);
SELECT pg_temp.error_of($$SELECT * FROM jobguard.finish_many(ARRAY[1], NULL)$$);
SELECT pg_temp.error_of($$SELECT * FROM jobguard.finish_many(ARRAY[[1], [2]], ARRAY[['{}'], ['{}']]::jsonb[])$$);
SELECT count(*) AS empty_call FROM jobguard.finish_many('{}', '{}');

-- grants: a client (and an operator) may call it, a reader may not; an
-- attempt of another scope is JG009 for the client, as one never issued
CREATE ROLE regress_fm_client;
CREATE ROLE regress_fm_reader;
CREATE ROLE regress_fm_operator;
SELECT jobguard.grant_operator('regress_fm_operator');
SELECT jobguard.grant_client('regress_fm_client', 'shop');
SELECT jobguard.grant_reader('regress_fm_reader');
SELECT has_function_privilege('regress_fm_client', 'jobguard.finish_many(bigint[], jsonb[])', 'EXECUTE') AS client,
       has_function_privilege('regress_fm_reader', 'jobguard.finish_many(bigint[], jsonb[])', 'EXECUTE') AS reader,
       has_function_privilege('regress_fm_operator', 'jobguard.finish_many(bigint[], jsonb[])', 'EXECUTE') AS operator,
       has_function_privilege('public', 'jobguard.finish_many(bigint[], jsonb[])', 'EXECUTE') AS public;
SELECT job_id AS j8 FROM jobguard.submit('alice', 'k8', 'charge', '{}', 'stripe') \gset
SELECT jobguard.begin_attempt(:j8) AS a8 \gset
SET ROLE regress_fm_client;
SELECT ord, outcome, sqlstate, message = format('attempt %s does not exist', :a8) AS as_never_issued
  FROM jobguard.finish_many(ARRAY[:a8], ARRAY['{"charge_id": "ch_8"}']::jsonb[]);
RESET ROLE;
SELECT jobguard.job_state(:j8) AS j8_state;
SELECT jobguard.revoke_client('regress_fm_client');
SELECT has_function_privilege('regress_fm_client', 'jobguard.finish_many(bigint[], jsonb[])', 'EXECUTE') AS after_revoke;
SELECT jobguard.revoke_client('regress_fm_reader');
SELECT jobguard.revoke_client('regress_fm_operator');
DROP ROLE regress_fm_client, regress_fm_reader, regress_fm_operator;
SELECT * FROM jobguard.check_invariants();
-- leave no contract behind for the suites that follow in the same database
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
