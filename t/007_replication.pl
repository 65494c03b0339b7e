# What the fast path writes replicates as what SQL writes:
#  - a streaming standby replays a fast-path workload (double-clicks,
#    attempts won, lost, rejected, cancelled; TOASTed params and results)
#    and returns the same rows as the primary, and amcheck finds nothing on
#    either;
#  - logical decoding (test_decoding) of one scripted lifecycle gives the
#    same changes with jobguard.fast_path on and off.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use JobguardCheck;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 'logical');
$primary->start;
$primary->safe_psql('postgres', q{
CREATE EXTENSION jobguard;
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"]}');
SELECT jobguard.certify_provider('charge', 'adyen');
});
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

# lifecycle: one job's story, by number; every kind of write the fast path
# makes (insert, replay, attempt, compare-and-swap won and lost, rejected
# result, cancel), with params and results large enough for TOAST on some.
sub lifecycle
{
	my ($i) = @_;
	my $params = $i % 10 == 0 ? '{"blob": "' . join('-', 1 .. 2000) . '"}' : "{\"i\": $i}";
	my $pad = $i % 5 == 0 ? join('+', 1 .. 1500) : 'p';
	my $sql = "SELECT job_id AS j FROM jobguard.submit('o', 'k$i', 'charge', '$params', 'stripe') \\gset\n"
	  . "SELECT job_id FROM jobguard.submit('o', 'k$i', 'charge', '$params', 'stripe');\n"
	  . "SELECT jobguard.begin_attempt(:j, timeout => '1 hour') AS a \\gset\n";
	$sql .= "SELECT jobguard.finish_attempt(:a, '{\"broken\": true}');\n"
	  . "SELECT jobguard.begin_attempt(:j, 'adyen') AS a \\gset\n"
	  if $i % 4 == 0;
	$sql .= "SELECT jobguard.cancel_attempt(:a, 'stalled');\n"
	  . "SELECT jobguard.begin_attempt(:j, 'adyen') AS b \\gset\n"
	  . "SELECT jobguard.finish_attempt(:b, '{\"id\": \"fallback-$i\"}');\n"
	  if $i % 3 == 0;
	$sql .= "SELECT jobguard.cancel_job(:j, 'user');\n" if $i % 7 == 0 && $i % 3 != 0;
	$sql .= "SELECT jobguard.finish_attempt(:a, '{\"id\": \"c-$i\", \"pad\": \"$pad\"}');\n";
	return $sql;
}

# run_script($node, $db, $sql): run a psql script from a file, stopping at
# the first error; its exit code.
my $dir = PostgreSQL::Test::Utils::tempdir();
my $scripts = 0;

sub run_script
{
	my ($node, $db, $sql) = @_;
	my $file = "$dir/script" . ++$scripts . '.sql';
	PostgreSQL::Test::Utils::append_to_file($file, $sql);
	return PostgreSQL::Test::Utils::system_log('psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
		'-f', $file, '-o', '/dev/null', '-d', $node->connstr($db));
}

is(run_script($primary, 'postgres', join('', map { lifecycle($_) } 1 .. 300)), 0,
	'the workload ran on the primary (fast path)');
is($primary->safe_psql('postgres', 'SELECT jobguard.fast_path_status()'), 'on',
	'with the fast path on');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));

my $rows = q{
SELECT j.*, (SELECT json_agg(a ORDER BY a.id) FROM jobguard.attempts a WHERE a.job_id = j.id)
  FROM jobguard.jobs j ORDER BY j.id};
my $on_primary = $primary->safe_psql('postgres', $rows);
is($standby->safe_psql('postgres', $rows), $on_primary,
	'the standby returns the same rows as the primary');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM jobguard.jobs'), '300',
	'all 300 jobs reached the standby');
is($standby->safe_psql('postgres',
		"SELECT coalesce(string_agg(invariant || ': ' || detail, '; '), '') FROM jobguard.check_invariants()"),
	'', 'every invariant holds on the standby');
$primary->safe_psql('postgres', 'CREATE EXTENSION amcheck');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
amcheck_ok($primary, 'postgres', 'primary');
amcheck_ok($standby, 'postgres', 'standby');

# Logical decoding: the same lifecycle in two fresh databases, one per
# path, each decoded by its own slot; timestamps masked.
my %decoded;
for my $path ('on', 'off')
{
	my $db = "decode_$path";
	$primary->safe_psql('postgres', "CREATE DATABASE $db");
	$primary->safe_psql($db, q{
CREATE EXTENSION jobguard;
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"]}');
SELECT jobguard.certify_provider('charge', 'adyen');
});
	$primary->safe_psql($db,
		"SELECT pg_create_logical_replication_slot('slot_$path', 'test_decoding')");
	is(run_script($primary, $db,
			"SET jobguard.fast_path = $path;\n" . join('', map { lifecycle($_) } 1 .. 12)),
		0, "the lifecycle ran with jobguard.fast_path = $path");
	my $changes = $primary->safe_psql($db,
		"SELECT data FROM pg_logical_slot_get_changes('slot_$path', NULL, NULL, "
		  . "'include-xids', '0', 'skip-empty-xacts', '1')");
	$changes =~ s/'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?[+-]\d\d(:\d\d)?'/'<ts>'/g;
	# provider keys are random: the two runs make different ones, so each
	# is named by its order of first appearance (which attempts share a
	# key is still compared)
	my (%key_no, $keys);
	$changes =~ s/provider_key\[text\]:'([0-9a-f]{32})'/
		"provider_key[text]:'<key " . ($key_no{$1} \/\/= ++$keys) . ">'"/ge;
	$decoded{$path} = $changes;
	$primary->safe_psql($db, "SELECT pg_drop_replication_slot('slot_$path')");
}
cmp_ok(length($decoded{on}), '>', 1000, 'the lifecycle decoded to changes');
like($decoded{on}, qr/table jobguard\.jobs: UPDATE:/, 'including the compare-and-swap');
is($decoded{on}, $decoded{off},
	'logical decoding gives the same changes with the fast path on and off');

$standby->stop;
$primary->stop;
done_testing();
