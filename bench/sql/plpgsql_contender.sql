-- bench/sql/plpgsql_contender.sql: jobguard's contract written by hand in
-- PL/pgSQL, the way a careful user following jobguard's design would write
-- it — the benchmark's "plpgsql" contender.  It works on the equivalent
-- tables in schema bench_plpgsql (bench/sql/contenders.sql):
--
--   submit         insert first, ON CONFLICT DO NOTHING; on a conflict read
--                  the existing job and compare the request (JG001)
--   begin_attempt  lock the job row (FOR NO KEY UPDATE), read the latest
--                  attempt, apply the gate (JG003, JG002, JG005, JG004),
--                  insert attempt n+1 with the job's version
--   finish_attempt lock the attempt (FOR UPDATE), answer replays, look up
--                  the operation's contract, then the compare-and-swap
--                  UPDATE ... WHERE id = $1 AND version = $2 AND
--                  completed_by IS NULL; zero rows = lost (lost_to,
--                  lost_result, a LOG line)
--
-- Argument checks (22004 for NULL, 22023 for lengths) come first, like
-- jobguard's.  Output contracts are looked up but not validated here: the
-- benchmark defines none, and a contender that finds one refuses to guess.

\set ON_ERROR_STOP on

CREATE FUNCTION bench_plpgsql.submit(owner_id text,
									 idempotency_key text,
									 operation text,
									 params jsonb,
									 provider text,
									 max_attempts integer DEFAULT NULL,
									 OUT job_id bigint,
									 OUT created boolean)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
	j bench_plpgsql.jobs;
BEGIN
	IF owner_id IS NULL OR idempotency_key IS NULL OR operation IS NULL
	   OR params IS NULL OR provider IS NULL THEN
		RAISE EXCEPTION 'arguments of submit() must not be null' USING ERRCODE = '22004';
	END IF;
	IF char_length(owner_id) NOT BETWEEN 1 AND 255
	   OR char_length(idempotency_key) NOT BETWEEN 1 AND 255
	   OR char_length(operation) NOT BETWEEN 1 AND 63
	   OR char_length(provider) NOT BETWEEN 1 AND 63
	   OR max_attempts < 1 THEN
		RAISE EXCEPTION 'argument of submit() out of range' USING ERRCODE = '22023';
	END IF;

	FOR tries IN 1..3 LOOP
		INSERT INTO bench_plpgsql.jobs AS t
			   (owner_id, idempotency_key, operation, params, provider, max_attempts)
		VALUES (submit.owner_id, submit.idempotency_key, submit.operation,
				submit.params, submit.provider, submit.max_attempts)
		ON CONFLICT (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL DO NOTHING
		RETURNING t.id INTO job_id;
		IF FOUND THEN
			created := true;
			RETURN;
		END IF;

		SELECT * INTO j FROM bench_plpgsql.jobs t
		 WHERE t.scope = 'default' AND t.replaced_at IS NULL
		   AND t.owner_id = submit.owner_id
		   AND t.idempotency_key = submit.idempotency_key;
		IF FOUND THEN
			IF j.operation <> submit.operation OR j.params <> submit.params
			   OR j.provider <> submit.provider
			   OR j.max_attempts IS DISTINCT FROM submit.max_attempts THEN
				RAISE EXCEPTION 'idempotency key "%" of owner "%" was already used for a different request',
					idempotency_key, owner_id
					USING ERRCODE = 'JG001',
						  DETAIL = format('Job %s was submitted with this key.', j.id);
			END IF;
			job_id := j.id;
			created := false;
			RETURN;
		END IF;
		-- the conflicting job was removed in between: insert again
	END LOOP;
	RAISE EXCEPTION 'could not submit job for idempotency key "%"', idempotency_key
		USING ERRCODE = '40001';
END
$$;

CREATE FUNCTION bench_plpgsql.begin_attempt(job_id bigint,
											provider text DEFAULT NULL,
											timeout interval DEFAULT '30 seconds',
											attempt_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
	j bench_plpgsql.jobs;
	last bench_plpgsql.attempts;
	last_state text;
	new_id bigint;
BEGIN
	IF job_id IS NULL OR timeout IS NULL THEN
		RAISE EXCEPTION 'arguments of begin_attempt() must not be null' USING ERRCODE = '22004';
	END IF;
	IF timeout <= interval '0' OR char_length(provider) NOT BETWEEN 1 AND 63
	   OR char_length(attempt_key) NOT BETWEEN 1 AND 255 THEN
		RAISE EXCEPTION 'argument of begin_attempt() out of range' USING ERRCODE = '22023';
	END IF;

	-- concurrent begins of one job run one at a time
	SELECT * INTO j FROM bench_plpgsql.jobs t WHERE t.id = begin_attempt.job_id
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'job % does not exist', job_id USING ERRCODE = 'JG008';
	END IF;

	SELECT * INTO last FROM bench_plpgsql.attempts a
	 WHERE a.job_id = begin_attempt.job_id
	 ORDER BY a.attempt_no DESC LIMIT 1;
	IF FOUND THEN
		last_state := CASE WHEN last.state = 'started' AND last.deadline <= now()
						   THEN 'unknown' ELSE last.state END;
		IF attempt_key IS NOT NULL AND last_state IN ('started', 'unknown')
		   AND last.attempt_key = attempt_key
		   AND (provider IS NULL OR provider = last.provider) THEN
			RETURN last.id;		-- a worker retrying its own begin
		END IF;
	END IF;

	IF j.completed_by IS NOT NULL THEN
		RAISE EXCEPTION 'job % has already succeeded', job_id USING ERRCODE = 'JG003';
	END IF;
	IF j.cancelled_at IS NOT NULL THEN
		RAISE EXCEPTION 'job % has been cancelled', job_id USING ERRCODE = 'JG003';
	END IF;
	IF last_state IN ('started', 'unknown') THEN
		RAISE EXCEPTION 'job % already has an attempt in flight', job_id
			USING ERRCODE = 'JG002',
				  DETAIL = format('Attempt %s is %s; its deadline is %s.', last.id, last_state, last.deadline);
	END IF;
	IF j.max_attempts IS NOT NULL AND coalesce(last.attempt_no, 0) >= j.max_attempts THEN
		RAISE EXCEPTION 'job % has used all of its % attempts', job_id, j.max_attempts
			USING ERRCODE = 'JG005';
	END IF;
	IF provider IS NULL THEN
		provider := j.provider;
	ELSIF provider <> j.provider AND NOT EXISTS (
			SELECT 1 FROM bench_plpgsql.certifications c
			 WHERE c.operation = j.operation AND c.provider = begin_attempt.provider
			   AND c.revoked_at IS NULL) THEN
		RAISE EXCEPTION 'provider "%" is not certified for operation "%"', provider, j.operation
			USING ERRCODE = 'JG004';
	END IF;

	INSERT INTO bench_plpgsql.attempts AS a
		   (job_id, attempt_no, provider, state, read_version, attempt_key, started_at, deadline)
	VALUES (j.id, coalesce(last.attempt_no, 0) + 1, provider, 'started', j.version,
			attempt_key, now(), now() + timeout)
	RETURNING a.id INTO new_id;
	RETURN new_id;
END
$$;

CREATE FUNCTION bench_plpgsql.finish_attempt(attempt_id bigint, result jsonb)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
	a bench_plpgsql.attempts;
	a_state text;
	j_operation text;
	j_result jsonb;
	contract jsonb;
	winner bigint;
BEGIN
	IF attempt_id IS NULL OR result IS NULL THEN
		RAISE EXCEPTION 'arguments of finish_attempt() must not be null' USING ERRCODE = '22004';
	END IF;

	-- finishes, fails and cancels of one attempt run one at a time
	SELECT * INTO a FROM bench_plpgsql.attempts t WHERE t.id = finish_attempt.attempt_id
	   FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'attempt % does not exist', attempt_id USING ERRCODE = 'JG009';
	END IF;
	a_state := CASE WHEN a.state = 'started' AND a.deadline <= now()
					THEN 'unknown' ELSE a.state END;

	SELECT j.operation, j.result, o.output_contract
	  INTO j_operation, j_result, contract
	  FROM bench_plpgsql.jobs j
	  LEFT JOIN bench_plpgsql.operations o ON o.operation = j.operation
	 WHERE j.id = a.job_id;

	-- a repeated report answers as before, if it is the same result
	IF a_state IN ('succeeded', 'lost') THEN
		IF (CASE a_state WHEN 'succeeded' THEN j_result ELSE a.lost_result END) <> result THEN
			RAISE EXCEPTION 'attempt % already reported a different result', attempt_id
				USING ERRCODE = 'JG007';
		END IF;
		RETURN CASE a_state WHEN 'succeeded' THEN 'won' ELSE 'lost' END;
	END IF;
	IF a_state NOT IN ('started', 'unknown', 'cancelled') THEN
		RAISE EXCEPTION 'attempt % of job % cannot be finished: it is %', attempt_id, a.job_id, a_state
			USING ERRCODE = 'JG006';
	END IF;
	IF contract IS NOT NULL THEN
		RAISE EXCEPTION 'output contracts are not implemented by the plpgsql contender';
	END IF;

	-- the compare-and-swap
	UPDATE bench_plpgsql.jobs j
	   SET result = finish_attempt.result, completed_by = a.id,
		   completed_at = now(), version = j.version + 1
	 WHERE j.id = a.job_id AND j.version = a.read_version AND j.completed_by IS NULL;
	IF FOUND THEN
		UPDATE bench_plpgsql.attempts t SET state = 'succeeded', finished_at = now()
		 WHERE t.id = a.id;
		RETURN 'won';
	END IF;

	SELECT j.completed_by INTO winner FROM bench_plpgsql.jobs j WHERE j.id = a.job_id;
	UPDATE bench_plpgsql.attempts t
	   SET state = 'lost', finished_at = now(), lost_to = winner, lost_result = finish_attempt.result
	 WHERE t.id = a.id;
	RAISE LOG 'attempt % of job % lost the race to attempt %; its result was discarded',
		attempt_id, a.job_id, winner;
	RETURN 'lost';
END
$$;
