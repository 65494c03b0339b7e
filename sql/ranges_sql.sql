-- Ranges in jobguard's SQL (1.3): set_key_policy's retention is at most
-- 100 years at the call (22023, nothing written), and a provider's
-- dedupes_for stored longer than 100 years (before 1.3 checked it at the
-- call, or by hand) does not break blocked_jobs: the view reads it as 100
-- years, as the library does.
\i sql/include/helpers.sql
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications,
	jobguard.policies RESTART IDENTITY;
DELETE FROM jobguard.provider_policy;
SELECT jobguard.define_operation('rgs', '{}');

-- out of range at the call: refused, nothing written
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	($$SELECT jobguard.set_key_policy('rgs', retention => '178000000 years')$$),
	($$SELECT jobguard.set_key_policy('rgs', retention => '100 years 1 second')$$),
	($$SELECT jobguard.set_key_policy('rgs', retention => '0')$$)
  ) AS t(call);
SELECT count(*) AS policies FROM jobguard.policies;
-- the widest in range is taken, and purge applies it
SELECT jobguard.set_key_policy('rgs', retention => '100 years');
SELECT retention FROM jobguard.key_policies WHERE operation = 'rgs';
SELECT jobguard.purge() AS purged;

-- a retention stored by hand beyond the range: purge reads it as 100 years
UPDATE jobguard.policies SET retention = '178000000 years' WHERE operation = 'rgs';
SELECT jobguard.purge() AS purged;

-- an unknown attempt against a provider whose dedupes_for is stored too
-- long: blocked_jobs shows it, redrivable for (about) 99 years
INSERT INTO jobguard.provider_policy (provider, dedupes_for) VALUES ('rgs_huge', '178000000 years');
SELECT job_id AS job FROM jobguard.submit('rgs', 'k1', 'rgs', '{}', 'rgs_huge') \gset
SELECT jobguard.mark_unknown(jobguard.begin_attempt(:job, timeout => '1 millisecond'));
SELECT job_id = :job AS this_job, provider, redrivable,
	   redrivable_until BETWEEN pg_catalog.now() + interval '98 years'
							AND pg_catalog.now() + interval '100 years' AS window_read_as_100_years
  FROM jobguard.blocked_jobs;
-- and one against a provider that promises no deduplication stays not
-- redrivable, with no window
SELECT job_id AS job_n FROM jobguard.submit('rgs', 'k2', 'rgs', '{}', 'rgs_none') \gset
SELECT jobguard.mark_unknown(jobguard.begin_attempt(:job_n, timeout => '1 millisecond'));
SELECT provider, redrivable, redrivable_until FROM jobguard.blocked_jobs WHERE job_id = :job_n;
SELECT count(*) FILTER (WHERE NOT redrivable) AS not_redrivable, count(*) AS unknown FROM jobguard.blocked_jobs;
SELECT count(*) AS violations FROM jobguard.check_invariants();
DELETE FROM jobguard.provider_policy;
