# Index maintenance under fast-path load: while clients double-click
# submits and run attempts to completion, a DBA builds a second unique
# index on the key with CREATE UNIQUE INDEX CONCURRENTLY (the usual way to
# rebuild a bloated one), swaps it in for the constraint's, and rebuilds the
# other indexes with REINDEX CONCURRENTLY.  No client may see an error
# outside the SPEC (never XX000), the invariants hold, the fast path is
# still in use, and amcheck finds no corruption.  One known gap is a TODO
# test: PostgreSQL's ON CONFLICT takes only valid indexes as arbiters, so a
# unique index being built (ready, not yet valid) checks the key on its own
# and can raise 23505 to the second of two simultaneous identical submits,
# on either back end (the fast path infers arbiters as the planner does).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib $FindBin::RealBin;
use JobguardCheck;

my $clients = 6;
my $iterations = 5000;

my $node = PostgreSQL::Test::Cluster->new('reindex');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobguard');

# client_script: clients 2k-1 and 2k submit the same keys (one creates,
# the other replays, often at the same moment), and each runs an attempt
# of the job; the partner's attempt in flight (JG002) or its win (JG003)
# are expected refusals.
sub client_script
{
	my ($client) = @_;
	my $pair = int(($client + 1) / 2);
	my $script = "\\set VERBOSITY verbose\n";
	for my $i (1 .. $iterations)
	{
		$script .= qq{SELECT job_id AS j FROM jobguard.submit('owner-$pair', 'k$i', 'charge', '{"i": $i}', 'stripe') \\gset
\\unset a
SELECT jobguard.begin_attempt(:j, attempt_key => 'c$client') AS a \\gset
\\if :{?a}
SELECT jobguard.finish_attempt(:a, '{"id": "c$client-$i"}');
\\endif
};
	}
	return $script;
}

my $dir = PostgreSQL::Test::Utils::tempdir();
my @runs;
for my $c (1 .. $clients)
{
	my %run = (script => "$dir/client$c.sql", err => "$dir/client$c.err");
	PostgreSQL::Test::Utils::append_to_file($run{script}, client_script($c));
	$run{handle} = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=0', '-f', $run{script},
		  '-d', $node->connstr('postgres') ],
		'>', '/dev/null', '2>', $run{err});
	push @runs, \%run;
}
$node->poll_query_until('postgres', 'SELECT count(*) > 200 FROM jobguard.jobs')
  or die 'clients made no progress';

# The DBA's maintenance, while the clients run.
my @maintenance = (
	'CREATE UNIQUE INDEX CONCURRENTLY jobs_key_rebuilt ON jobguard.jobs (scope, owner_id, idempotency_key) WHERE replaced_at IS NULL',
	'CREATE UNIQUE INDEX CONCURRENTLY jobs_key_swapped ON jobguard.jobs (idempotency_key, owner_id, scope) WHERE replaced_at IS NULL',
	'REINDEX INDEX CONCURRENTLY jobguard.jobs_live_key',
	'REINDEX INDEX CONCURRENTLY jobguard.jobs_pkey',
	'REINDEX TABLE CONCURRENTLY jobguard.attempts',
	'CREATE INDEX CONCURRENTLY attempts_by_key ON jobguard.attempts (attempt_key)',
	'DROP INDEX CONCURRENTLY jobguard.jobs_key_swapped',
	'DROP INDEX CONCURRENTLY jobguard.jobs_live_key',
	'ALTER INDEX jobguard.jobs_key_rebuilt RENAME TO jobs_live_key',
	'REINDEX TABLE CONCURRENTLY jobguard.jobs',
	'DROP INDEX CONCURRENTLY jobguard.attempts_by_key');
for my $sql (@maintenance)
{
	my ($ret, $out, $err) = $node->psql('postgres', $sql);
	is($ret, 0, "under load: $sql") or diag($err);
}
my $during = $node->safe_psql('postgres', 'SELECT count(*) FROM jobguard.jobs');

my %errors;
for my $run (@runs)
{
	$run->{handle}->finish;
	my $err = PostgreSQL::Test::Utils::slurp_file($run->{err});
	$errors{$1}++ while $err =~ /ERROR:\s+([0-9A-Z]{5}):/g;
}
my @unexpected =
  grep { $_ ne 'JG002' && $_ ne 'JG003' && $_ ne '23505' } sort keys %errors;
is(join(',', @unexpected), '', 'clients saw no error outside the expected refusals')
  or diag(join(', ', map { "$_: $errors{$_}" } sort keys %errors));
TODO:
{
	local $TODO = 'a unique index on the key being built concurrently is not an '
	  . 'arbiter yet, so a racing twin submit can get 23505 (doc/operating.md)';
	is($errors{'23505'} // 0, 0, 'no 23505 while a unique index on the key is built')
	  or diag(join(', ', map { "$_: $errors{$_}" } sort keys %errors));
}
cmp_ok($during, '<', $clients / 2 * $iterations, 'the maintenance ran while clients worked');
is($node->safe_psql('postgres', 'SELECT count(*) FROM jobguard.jobs'),
	$clients / 2 * $iterations, 'one job per key');
is($node->safe_psql('postgres',
		"SELECT coalesce(string_agg(invariant || ': ' || detail, '; '), '') FROM jobguard.check_invariants()"),
	'', 'every invariant holds');
is($node->safe_psql('postgres', 'SELECT jobguard.fast_path_status()'),
	'on', 'the fast path is in use after the maintenance');
amcheck_ok($node, 'postgres', 'after the maintenance');

$node->stop;
done_testing();
