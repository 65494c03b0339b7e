# Index maintenance under fast-path load: while clients double-click
# submits and run attempts to completion, a DBA builds a second unique
# index on the key with CREATE UNIQUE INDEX CONCURRENTLY (the usual way to
# rebuild a bloated one), swaps it in for the constraint's, and rebuilds the
# other indexes with REINDEX CONCURRENTLY.  No client may see an error
# outside the SPEC (never XX000, never 23505), the invariants hold, the fast
# path is still in use, and amcheck finds no corruption.
#
# PostgreSQL's ON CONFLICT takes only valid indexes as arbiters, so a
# unique index on the key being built (ready, not yet valid) checks the key
# on its own and raises 23505 to the second of two simultaneous identical
# submits; jobguard reads the winner's job instead (src/store_dispatch.c,
# key_guarded).  That race is rare under load, so it is first made
# deterministic, on both paths, for submit and submit_many: a second
# session's insert is held (by a lock taken in an index predicate it
# evaluates before the key indexes) after its conflict check and before its
# key index entries, while the first session inserts the same key and
# commits.
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

# The held insert.  Index entries are made in the order of the indexes'
# OIDs: the predicate of jobs_hold (created before the key indexes) takes a
# shared advisory lock in a session named "held", which waits while this
# test holds the lock exclusively.  jobs_key_building is a unique index on
# the key in the state CREATE UNIQUE INDEX CONCURRENTLY leaves it in while
# it builds: ready for inserts, not valid.
$node->safe_psql('postgres', q{
CREATE FUNCTION public.hold_insert(bigint) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF current_setting('application_name') = 'held' THEN
		PERFORM pg_catalog.pg_advisory_xact_lock_shared(4242);
	END IF;
	RETURN true;
END $$;
CREATE INDEX jobs_hold ON jobguard.jobs (id) WHERE public.hold_insert(id);
CREATE UNIQUE INDEX jobs_key_first ON jobguard.jobs (scope, owner_id, idempotency_key)
  WHERE replaced_at IS NULL;
DROP INDEX jobguard.jobs_live_key;
ALTER INDEX jobguard.jobs_key_first RENAME TO jobs_live_key;
BEGIN;
CREATE UNIQUE INDEX jobs_key_building ON jobguard.jobs (idempotency_key, owner_id, scope)
  WHERE replaced_at IS NULL;
UPDATE pg_catalog.pg_index SET indisvalid = false
  WHERE indexrelid = 'jobguard.jobs_key_building'::pg_catalog.regclass;
COMMIT;
});

# held_race: the second of two identical submits of key $key passes its
# conflict check before the first inserts, and makes its key index entries
# after the first committed.  $call is submit or submit_many.
sub held_race
{
	my ($fast_path, $call, $key) = @_;
	my $submit = $call eq 'submit'
	  ? "SELECT job_id, created FROM jobguard.submit('held', '$key', 'charge', '{}', 'stripe')"
	  : "SELECT job_id, created, sqlstate FROM jobguard.submit_many("
	  . "ARRAY['held', 'held'], ARRAY['$key', '$key-other'], ARRAY['charge', 'charge'], "
	  . "ARRAY['{}', '{}']::jsonb[], ARRAY['stripe', 'stripe']) ORDER BY ord LIMIT 1";
	my $lock = $node->background_psql('postgres');
	$lock->query_safe('SELECT pg_catalog.pg_advisory_lock(4242)');
	my $held = $node->background_psql('postgres');
	$held->query_safe("SET jobguard.fast_path = $fast_path");
	$held->query_safe("SET application_name = 'held'");
	# an error must leave the session open, to be reported below
	$held->query_safe('\\set ON_ERROR_STOP 0');
	$held->query_until(qr/sent/, "\\echo sent\n$submit;\n");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_catalog.pg_stat_activity "
		  . "WHERE application_name = 'held' AND wait_event = 'advisory'")
	  or die 'the held submit did not reach its index entries';
	my $first = $node->safe_psql('postgres',
		"SET jobguard.fast_path = $fast_path; "
		  . "SELECT job_id FROM jobguard.submit('held', '$key', 'charge', '{}', 'stripe')");
	$lock->query_safe('SELECT pg_catalog.pg_advisory_unlock(4242)');
	$lock->quit;
	$held->quit;
	my $path = $fast_path eq 'on' ? 'fast path' : 'SQL path';
	is($held->{stderr}, '', "$call held behind a racing twin ($path): no error");
	my $expected = $call eq 'submit' ? "$first|f" : "$first|f|";
	chomp(my $out = $held->{stdout});
	is($out, $expected, "$call held behind a racing twin ($path): the winner's job, replayed");
	return;
}

is($node->safe_psql('postgres', 'SELECT jobguard.fast_path_status()'),
	'on', 'the held races take the fast path when it is on');
for my $fast_path ('on', 'off')
{
	held_race($fast_path, 'submit', "held-submit-$fast_path");
	held_race($fast_path, 'submit_many', "held-many-$fast_path");
}
is($node->safe_psql('postgres',
		"SELECT count(*) FROM jobguard.jobs WHERE owner_id = 'held'"),
	'6', 'the held races made one job per key');
$node->safe_psql('postgres', q{
DROP INDEX jobguard.jobs_key_building;
DROP INDEX jobguard.jobs_hold;
DROP FUNCTION public.hold_insert(bigint);
DELETE FROM jobguard.jobs WHERE owner_id = 'held';
});

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
  grep { $_ ne 'JG002' && $_ ne 'JG003' } sort keys %errors;
is(join(',', @unexpected), '', 'clients saw no error outside the expected refusals (no 23505)')
  or diag(join(', ', map { "$_: $errors{$_}" } sort keys %errors));
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
