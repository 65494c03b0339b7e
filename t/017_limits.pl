# Limits that are limits, on a preloaded server:
#  - a prepared transaction moves the state gauges only once it commits:
#    ROLLBACK PREPARED leaves them as they were, COMMIT PREPARED moves them
#    (the gauges then equal a recount from the tables);
#  - a wait of 300,000 years (which would overflow the deadline's
#    timestamp and pass at once) is refused with 22023, by claim and await;
#  - submit_many on the SQL path holds no memory per replayed row: 10,000
#    replays raise the backend's peak memory by less than 64 MB (it took
#    about 22 kB a row before).
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

$node->stop;
done_testing();
