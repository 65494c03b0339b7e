SET search_path = d;
-- bench/wal-designs/variants.sql: where the claim order lives — on jobs
-- (jobguard 1.2: jobs_run_order, whose predicate names completed_by, so the
-- finish's update of the job is never HOT), or with :queue in a narrow
-- table of runnable jobs (jobs then has no claim index); with :started, the
-- index of started attempts by (provider, deadline) that the sweeper and
-- max_in_flight read.
\if :{?queue}
CREATE TABLE queue (job_id bigint PRIMARY KEY, priority smallint NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX queue_order ON queue (priority, run_at, job_id);
\else
CREATE INDEX jobs_run_order ON jobs (priority, (COALESCE(not_before, created_at)), id) WHERE completed_by IS NULL AND cancelled_at IS NULL AND replaced_at IS NULL;
\endif
\if :{?started}
CREATE INDEX attempts_started ON attempts (provider, deadline) WHERE state = 'started';
\endif
