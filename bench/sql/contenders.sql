-- bench/sql/contenders.sql: the tables of the floor and plpgsql contenders.
--
-- Both get tables equivalent to jobguard's, built from them: the same
-- columns, defaults, CHECK constraints, unique index (scope, owner_id,
-- idempotency_key), the same partial unique index on open attempts, the
-- foreign key from attempts to jobs and the same fillfactor — but their own
-- id sequences.  Building them with LIKE ... INCLUDING ALL keeps them in
-- step with whatever jobguard--*.sql defines.
--
-- Run by bench/run in the benchmark database after CREATE EXTENSION jobguard;
-- bench/run then checks that indexes, constraints and options match.

\set ON_ERROR_STOP on

CREATE FUNCTION pg_temp.make_tables(s text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('CREATE SCHEMA %I', s);
	EXECUTE format('CREATE TABLE %I.jobs (LIKE jobguard.jobs INCLUDING ALL) WITH (fillfactor = 85)', s);
	EXECUTE format('CREATE SEQUENCE %1$I.jobs_id_seq OWNED BY %1$I.jobs.id', s);
	EXECUTE format('ALTER TABLE %1$I.jobs ALTER id SET DEFAULT pg_catalog.nextval(%2$L)',
				   s, s || '.jobs_id_seq');
	EXECUTE format('CREATE TABLE %I.attempts (LIKE jobguard.attempts INCLUDING ALL)', s);
	EXECUTE format('CREATE SEQUENCE %1$I.attempts_id_seq OWNED BY %1$I.attempts.id', s);
	EXECUTE format('ALTER TABLE %1$I.attempts ALTER id SET DEFAULT pg_catalog.nextval(%2$L)',
				   s, s || '.attempts_id_seq');
	EXECUTE format('ALTER TABLE %1$I.attempts ADD FOREIGN KEY (job_id) REFERENCES %1$I.jobs (id) ON DELETE CASCADE', s);
	EXECUTE format('CREATE TABLE %I.operations (LIKE jobguard.operations INCLUDING ALL)', s);
	EXECUTE format('CREATE TABLE %I.certifications (LIKE jobguard.certifications INCLUDING ALL)', s);
END
$$;

SELECT pg_temp.make_tables('bench_floor');
SELECT pg_temp.make_tables('bench_plpgsql');
