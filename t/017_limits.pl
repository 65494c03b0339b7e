# Limits that are limits, on a preloaded server:
#  - a prepared transaction moves the state gauges only once it commits:
#    ROLLBACK PREPARED leaves them as they were, COMMIT PREPARED moves them
#    (the gauges then equal a recount from the tables);
#  - a wait of 300,000 years (which would overflow the deadline's
#    timestamp and pass at once) is refused with 22023, by claim and await;
#  - submit_many on the SQL path holds no memory per replayed row: 10,000
#    replays raise the backend's peak memory by less than 64 MB (it took
#    about 22 kB a row before);
#  - a claim asleep in its wait holds no job it could not take: with the
#    provider at its max_in_flight, a claim(wait) passes the job over, and
#    a cancel_job of that job does not wait for the sleeping claim (it
#    waited for the whole sleep before: lock_timeout ran out), on both
#    back ends; asleep, not looking again and again (a look's rollback
#    ends the sleep's registration), and it takes a job submitted after it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('limits');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'jobguard'
max_prepared_transactions = 4
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobguard');

my $gauges = q{SELECT string_agg(metric || '=' || value, ' ' ORDER BY metric) FROM jobguard.stats()
	WHERE metric LIKE 'jobs.%' OR metric LIKE 'attempts.%'};
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobguard.stats()
	WHERE (metric LIKE 'jobs.%' OR metric LIKE 'attempts.%') AND value <> 0}),
	'0', 'the gauges start at zero');

# ------------------------------------------------ prepared transactions

$node->safe_psql('postgres', q{
BEGIN;
SELECT jobguard.submit('o', 'rolled-back', 'op', '{}', 'p');
PREPARE TRANSACTION 'jobguard_rolled_back';
});
is($node->safe_psql('postgres', q{SELECT value FROM jobguard.stats() WHERE metric = 'jobs.pending'}),
	'0', 'a prepared submit does not move the gauges yet');
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'jobguard_rolled_back'});
is($node->safe_psql('postgres', q{SELECT value FROM jobguard.stats() WHERE metric = 'jobs.pending'}),
	'0', 'ROLLBACK PREPARED leaves them as they were');

$node->safe_psql('postgres', q{
BEGIN;
SELECT jobguard.submit('o', 'committed', 'op', '{}', 'p');
SELECT jobguard.submit('o', 'committed-2', 'op', '{}', 'p');
PREPARE TRANSACTION 'jobguard_committed';
});
is($node->safe_psql('postgres', q{SELECT value FROM jobguard.stats() WHERE metric = 'jobs.pending'}),
	'0', 'while prepared, the gauges count what committed');
$node->safe_psql('postgres', q{COMMIT PREPARED 'jobguard_committed'});
is($node->safe_psql('postgres', q{SELECT value FROM jobguard.stats() WHERE metric = 'jobs.pending'}),
	'2', 'COMMIT PREPARED moves them');
my $before_reset = $node->safe_psql('postgres', $gauges);
$node->safe_psql('postgres', 'SELECT jobguard.stats_reset()');
is($before_reset, $node->safe_psql('postgres', $gauges), 'the gauges equal a recount from the tables');

# ------------------------------------------------------- waits that overflow

for my $call ([ 'claim', q{SELECT * FROM jobguard.claim('w', wait => '300000 years')} ],
	[ 'await', q{SELECT jobguard.await(1, '300000 years')} ])
{
	my ($name, $sql) = @$call;
	my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	like($err, qr/ERROR:  22023: argument "\w+" of jobguard\.$name\(\) must be at most 366 days/,
		"$name with a wait of 300,000 years is refused (22023)");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobguard.claim('w', wait => '366 days', max_jobs => 5)}),
	'2', 'claim with the longest wait still claims at once what is runnable');

# ------------------------------------------- submit_many's memory, SQL path

my $batch = q{SELECT count(*) FROM jobguard.submit_many(
	ARRAY(SELECT 'mem' FROM generate_series(1, 10000)),
	ARRAY(SELECT 'k' || i FROM generate_series(1, 10000) i),
	array_fill('op'::text, ARRAY[10000]),
	array_fill('{}'::jsonb, ARRAY[10000]),
	array_fill('p'::text, ARRAY[10000]))};
my $peak = q{SELECT (regexp_match(pg_read_file('/proc/' || pg_backend_pid() || '/status'), 'VmHWM:\s+(\d+) kB'))[1]};
my $kb = $node->safe_psql('postgres', qq{
SET jobguard.fast_path = off;
$batch;
SELECT ($peak)::bigint AS before \\gset
$batch;
SELECT ($peak)::bigint - :before;
});
my $growth = (split /\n/, $kb)[-1];
cmp_ok($growth, '<', 64 * 1024,
	"10,000 replays on the SQL path raise the backend's peak memory by less than 64 MB (by $growth kB)");

# ------------------------------- a sleeping claim holds no job it passed over

$node->safe_psql('postgres', q{SELECT jobguard.set_provider_policy('one-at-a-time', max_in_flight => 1)});
for my $fast_path ('on', 'off')
{
	my $path = $fast_path eq 'on' ? 'fast path' : 'SQL path';
	my ($busy, $next) = split /\n/, $node->safe_psql('postgres', qq{
		SELECT (jobguard.submit('held', 'busy-$fast_path', 'held-op', '{}', 'one-at-a-time')).job_id;
		SELECT (jobguard.submit('held', 'next-$fast_path', 'held-op', '{}', 'one-at-a-time')).job_id;
	});
	my $busy_attempt = $node->safe_psql('postgres', qq{SELECT jobguard.begin_attempt($busy)});
	cmp_ok($busy_attempt, '>', 0, "$path: the provider's one slot is taken");
	my $sleeper = $node->background_psql('postgres');
	$sleeper->query_safe("SET jobguard.fast_path = $fast_path");
	$sleeper->query_safe("SET application_name = 'sleeping-claim'");
	$sleeper->query_until(qr/sent/,
		"\\echo sent\nSELECT count(*) FROM jobguard.claim('sleeper', operations => '{held-op}', wait => '20 seconds');\n");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_catalog.pg_stat_activity "
		  . "WHERE application_name = 'sleeping-claim' AND wait_event = 'Extension'")
	  or die 'the claim did not go to sleep';
	my ($ret, $out, $err) = $node->psql('postgres', qq{
		SET jobguard.fast_path = $fast_path;
		SET lock_timeout = '2s';
		SELECT jobguard.cancel_job($next, 'not wanted');
	});
	is($err, '', "$path: cancel_job of a job a sleeping claim passed over does not wait for it");
	is($out, 'cancelled', "$path: the job is cancelled while the claim sleeps");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE application_name = 'sleeping-claim' AND wait_event = 'Extension'}), '1',
		"$path: the claim was still asleep");
	my $free = $node->safe_psql('postgres',
		qq{SELECT (jobguard.submit('held', 'free-$fast_path', 'held-op', '{}', 'unlimited')).job_id});
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_catalog.pg_stat_activity "
		  . "WHERE application_name = 'sleeping-claim' AND state = 'active'")
	  or die 'the claim did not end';
	is($node->safe_psql('postgres', qq{SELECT jobguard.job_state($free)}), 'running',
		"$path: the sleeping claim took a job submitted while it slept");
	$sleeper->quit;
	$node->safe_psql('postgres', qq{SELECT jobguard.finish_attempt($busy_attempt, '{}');
		SELECT jobguard.cancel_job($free, 'done')});
}

$node->stop;
done_testing();
