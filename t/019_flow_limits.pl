# Provider limits under load: 16 workers (pgbench clients) claim greedily
# for 20 seconds, each attempt held open 20 ms, against two providers:
# "five" with max_in_flight 5 and "fifty" with max_per_second 50.
#  - sampled every 10 ms, the open attempts against "five" never exceed 5;
#  - the starts against "fifty" in any 1 s window never exceed 100
#    (max_per_second x t + max_per_second, t = 1 s);
#  - at least 90 % of the allowed rate is reached (>= 900 starts in 20 s),
#    and "five" is kept busy (claims pass over it to "fifty" and back).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $seconds = 20;
my $node = PostgreSQL::Test::Cluster->new('flow_limits');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'jobguard'
max_connections = 40
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION jobguard;
SELECT jobguard.set_provider_policy('five', max_in_flight => 5);
SELECT jobguard.set_provider_policy('fifty', max_per_second => 50);
SELECT count(*) FROM jobguard.submit_many(
	ARRAY(SELECT 'o' FROM generate_series(1, 10000)),
	ARRAY(SELECT 'k' || g FROM generate_series(1, 10000) g),
	ARRAY(SELECT 'op' FROM generate_series(1, 10000)),
	ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10000)),
	ARRAY(SELECT CASE WHEN g % 3 = 0 THEN 'fifty' ELSE 'five' END FROM generate_series(1, 10000) g));
CREATE TABLE samples (at timestamptz, open_five bigint);
});

# a worker: claim one job, hold it 20 ms, finish it
my $script = $node->basedir . '/worker.sql';
open(my $fh, '>', $script) or die;
print $fh q{SELECT COALESCE((SELECT attempt_id FROM jobguard.claim('w' || :client_id, max_jobs => 1)), 0) AS a \gset
\sleep 20 ms
SELECT CASE WHEN :a > 0 THEN jobguard.finish_attempt(:a, '{}') END;
};
close $fh;

# the sampler: every 10 ms, the open attempts against "five"
my ($sout, $serr) = ('', '');
my $sampler = IPC::Run::start(
	[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c', qq{
DO \$\$
BEGIN
	FOR i IN 1..@{[ $seconds * 100 ]} LOOP
		INSERT INTO samples SELECT clock_timestamp(), count(*) FROM jobguard.attempts
		 WHERE provider = 'five' AND state IN ('started', 'unknown');
		COMMIT;
		PERFORM pg_sleep(0.01);
	END LOOP;
END \$\$;} ],
	'>', \$sout, '2>', \$serr);

my ($pout, $perr) = ('', '');
my $ok = IPC::Run::run(
	[ 'pgbench', '-n', '-c', '16', '-j', '4', '-T', $seconds, '-f', $script,
	  $node->connstr('postgres') ],
	'>', \$pout, '2>', \$perr);
ok($ok, 'the 16 workers ran without an error') or diag("$pout\n$perr");
$sampler->finish;
is($serr, '', 'the sampler ran') or diag($serr);

my ($samples, $max_open) = split /\|/, $node->safe_psql('postgres',
	q{SELECT count(*), max(open_five) FROM samples});
cmp_ok($samples, '>=', 500, "sampled $samples times");
cmp_ok($max_open, '<=', 5, "open attempts against max_in_flight 5: at most $max_open");
cmp_ok($max_open, '>=', 4, "and the provider was kept busy ($max_open open at peak)");

my $max_window = $node->safe_psql('postgres', q{
SELECT max((SELECT count(*) FROM jobguard.attempts b
			 WHERE b.provider = 'fifty' AND b.started_at >= a.started_at
			   AND b.started_at < a.started_at + interval '1 second'))
  FROM jobguard.attempts a WHERE a.provider = 'fifty'});
cmp_ok($max_window, '<=', 100, "starts against max_per_second 50 in any 1 s window: at most $max_window");

my ($starts, $span) = split /\|/, $node->safe_psql('postgres', q{
SELECT count(*), extract(epoch FROM max(started_at) - min(started_at))
  FROM jobguard.attempts WHERE provider = 'fifty'});
note("starts against fifty: $starts in ${span} s; against five: "
	. $node->safe_psql('postgres', q{SELECT count(*) FROM jobguard.attempts WHERE provider = 'five'}));
cmp_ok($starts, '>=', 0.9 * 50 * $seconds, "at least 90 % of the allowed rate ($starts starts in $seconds s)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobguard.check_invariants()}), '0',
	'every invariant holds');

$node->stop;
done_testing();
