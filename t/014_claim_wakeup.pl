# With jobguard preloaded, a claim waiting for work sleeps on shared memory:
# a committed submit (or a failed or cancelled attempt) wakes it at once,
# and while nothing comes it looks again only every 250 ms (for a backoff
# running out), instead of polling every few milliseconds.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = PostgreSQL::Test::Cluster->new('wakeup');
$node->init;
# The sweeper runs once, at start: its work on jobs (the claim floor) would
# count with the claim's looks below.
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'jobguard'
jobguard.database = 'postgres'
jobguard.sweep_interval = '1h'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobguard');
my $bindir = $node->config_data('--bindir');

# scans: how often the claim's candidate statement looked at jobs so far
sub scans
{
	return $node->safe_psql('postgres', q{SELECT pg_stat_force_next_flush();
		SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables
		 WHERE relid = 'jobguard.jobs'::regclass});
}

# A claim that waits 2 s for work that never comes.
my $before = scans();
my $t0 = time();
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM jobguard.claim('idle', ARRAY['nothing'], wait => '2 seconds')}),
	'0', 'a claim with nothing to do returns no rows after its wait');
my $took = time() - $t0;
cmp_ok($took, '>=', 1.9, 'having waited the whole 2 s');
my $looks = scans() - $before;
note("an idle 2 s wait looked at jobs $looks times");
cmp_ok($looks, '<=', 14, 'looking again every 250 ms, not polling (polling every 50 ms is 40 and more)');

# A claim waiting for work is woken by the submit's commit.
my ($out, $err) = ('', '');
my $claim = IPC::Run::start(
	[ "$bindir/psql", '-X', '-At', '-d', $node->connstr('postgres'),
		'-c', q{SELECT job_id FROM jobguard.claim('waiter', ARRAY['wake'], wait => '30 seconds')} ],
	'>', \$out, '2>', \$err, IPC::Run::timeout(60));
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%claim(''waiter''%' AND state = 'active'}),
	'the claim waits');
sleep 0.5;
my $submitted = time();
my $job = $node->safe_psql('postgres', q{SELECT job_id FROM jobguard.submit('o', 'w-1', 'wake', '{}', 'p')});
$claim->finish;
my $woken = time() - $submitted;
chomp $out;
is($out, $job, 'the waiting claim took the job just submitted') or diag($err);
note(sprintf('woken %.1f ms after the submit returned', $woken * 1000));
cmp_ok($woken, '<', 0.2, 'at once, not at its next look (250 ms)');

# The first claim's attempt fails: the gate opens, and wakes a claim
# waiting for it too.
my $attempt = $node->safe_psql('postgres',
	"SELECT attempt_id FROM jobguard.attempt_overview WHERE job_id = $job AND worker = 'waiter'");
$out = '';
$claim = IPC::Run::start(
	[ "$bindir/psql", '-X', '-At', '-d', $node->connstr('postgres'),
		'-c', q{SELECT job_id FROM jobguard.claim('waiter2', ARRAY['wake'], wait => '30 seconds')} ],
	'>', \$out, '2>', \$err, IPC::Run::timeout(60));
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%claim(''waiter2''%' AND state = 'active'}),
	'a second claim waits while the job runs');
sleep 0.5;
my $failed = time();
$node->safe_psql('postgres', "SELECT jobguard.fail_attempt($attempt, 'provider down')");
$claim->finish;
chomp $out;
is($out, $job, 'the failed attempt let the waiting claim take the job again') or diag($err);
cmp_ok(time() - $failed, '<', 0.2, 'at once');

$node->stop;
done_testing();
