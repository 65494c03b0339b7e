-- pass_setting: make test runs this first in each pass of the pg_regress
-- suites, in the suites' database, with PGOPTIONS naming the pass's
-- jobguard.fast_path twice: as the setting itself (unless it is the
-- default, on) and as jobguard_test.fast_path.  If PGOPTIONS did not reach
-- the suites' sessions, jobguard_test.fast_path is not set and this fails;
-- if the setting did not take, the comparisons say f.
SELECT jobguard.fast_path_status() = CASE current_setting('jobguard_test.fast_path')
		   WHEN 'on' THEN 'on'
		   WHEN 'off' THEN 'off: jobguard.fast_path is off'
	   END AS status_as_named;
SELECT current_setting('jobguard.fast_path') = current_setting('jobguard_test.fast_path') AS setting_as_named;
