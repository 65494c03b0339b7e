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

-- The bare floor (bench_bare): the same columns as jobguard's jobs and
-- attempts, of the domains' base types, with their NOT NULLs and defaults
-- but no CHECK constraint and no domain; jobs unique on (owner_id,
-- idempotency_key) with jobguard's fillfactor, attempts on their id alone.  The least a table that
-- keeps these rows can be; bench/run checks that it has no CHECK and no
-- domain.
CREATE FUNCTION pg_temp.make_bare(s text, t text, uniq text, opts text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	cols text;
BEGIN
	SELECT string_agg(format('%I %s%s%s', a.attname,
							 format_type(CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE a.atttypid END,
										 CASE WHEN ty.typtype = 'd' THEN ty.typtypmod ELSE a.atttypmod END),
							 CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
							 CASE WHEN a.attname = 'id' THEN format(' DEFAULT pg_catalog.nextval(%L)', s || '.id_seq')
								  WHEN d.adbin IS NOT NULL THEN ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid)
								  ELSE '' END), ', ' ORDER BY a.attnum)
	  INTO cols
	  FROM pg_attribute a
	  JOIN pg_type ty ON ty.oid = a.atttypid
	  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	 WHERE a.attrelid = ('jobguard.' || t)::regclass AND a.attnum > 0 AND NOT a.attisdropped;
	EXECUTE format('CREATE TABLE %I.%I (%s, PRIMARY KEY (id)%s) %s', s, t, cols,
				   CASE WHEN uniq IS NULL THEN '' ELSE ', UNIQUE (' || uniq || ')' END, opts);
END
$$;

CREATE SCHEMA bench_bare;
CREATE SEQUENCE bench_bare.id_seq;
SELECT pg_temp.make_bare('bench_bare', 'jobs', 'owner_id, idempotency_key', 'WITH (fillfactor = 85)');
SELECT pg_temp.make_bare('bench_bare', 'attempts', NULL, '');
