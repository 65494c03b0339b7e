# Periodic jobs with pg_cron (doc/workers.md, "Flow control"): two
# schedules submit, every minute, the job of that minute, its idempotency
# key derived from the tick (date_trunc of the time it fires).  Over two
# ticks or more: each tick's job exists once, although both schedules
# fired for it (the second's submit was a replay), and a re-fire of a
# past tick is a replay too.  Runs the real pg_cron (Debian's
# postgresql-NN-cron), preloaded with jobguard; about two minutes.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('pg_cron');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pg_cron,jobguard'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 20
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION jobguard;
CREATE EXTENSION pg_cron;
});

# the recipe, twice: two schedules of the same work
my $submit = q{SELECT jobguard.submit('reports', 'tick-' || to_char(date_trunc('minute', now()), 'YYYY-MM-DD"T"HH24:MI'), 'report', '{}', 'mailer')};
for my $name ('ticks-a', 'ticks-b')
{
	$node->safe_psql('postgres', qq{SELECT cron.schedule('$name', '* * * * *', \$cron\$$submit\$cron\$)});
}

# wait for both schedules to have fired at least twice each
my $runs = q{SELECT count(*) FROM cron.job_run_details d JOIN cron.job j USING (jobid)
	WHERE j.jobname IN ('ticks-a', 'ticks-b') AND d.status = 'succeeded'};
my $fired = 0;
for (my $i = 0; $i < 400; $i++)
{
	$fired = $node->safe_psql('postgres', $runs);
	last if $fired >= 4;
	sleep 1;
}
cmp_ok($fired, '>=', 4, "the two schedules fired $fired times");
$node->safe_psql('postgres', q{SELECT cron.unschedule('ticks-a'); SELECT cron.unschedule('ticks-b')});
is($node->safe_psql('postgres', q{SELECT count(*) FROM cron.job_run_details WHERE status <> 'succeeded'}),
	'0', 'no run failed');

my ($jobs, $ticks) = split /\|/, $node->safe_psql('postgres', q{
SELECT count(*), count(DISTINCT idempotency_key) FROM jobguard.jobs WHERE owner_id = 'reports'});
cmp_ok($ticks, '>=', 2, "jobs for $ticks ticks");
is($jobs, $ticks, 'one job per tick');
my $fires_per_tick = $node->safe_psql('postgres', q{
SELECT min(n) FROM (SELECT count(*) AS n FROM cron.job_run_details d JOIN cron.job j USING (jobid)
	WHERE j.jobname IN ('ticks-a', 'ticks-b') AND d.status = 'succeeded'
	GROUP BY date_trunc('minute', d.start_time)) t
 WHERE n > 0});
note("fires per tick (minimum over the ticks): $fires_per_tick");

# a re-fire of a past tick: a replay, no second job
my $first = $node->safe_psql('postgres', q{SELECT min(idempotency_key) FROM jobguard.jobs WHERE owner_id = 'reports'});
is($node->safe_psql('postgres', qq{SELECT created FROM jobguard.submit('reports', '$first', 'report', '{}', 'mailer')}),
	'f', 're-firing a past tick is a replay');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobguard.jobs WHERE owner_id = 'reports'}),
	$jobs, 'still one job per tick');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobguard.check_invariants()}), '0',
	'every invariant holds');

$node->stop;
done_testing();
