# Crash safety: several clients run the whole lifecycle (with double-clicks
# and fallbacks) while the server is killed, twice: once by SIGKILL of a
# backend (the postmaster restarts everything) and once by an immediate
# shutdown.  After each restart every submit that returned to a client
# exists, and check_invariants() finds nothing; at the end amcheck finds
# no corruption in the indexes and tables recovery rebuilt.
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
my $iterations = 4000;

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf('postgresql.conf', "fsync = on\nrestart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION jobguard;
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"]}');
SELECT jobguard.certify_provider('charge', 'adyen');
});

# The script of one client.  Clients 2k-1 and 2k share their keys, so every
# job is double-clicked; each submit that returns is echoed (it has
# committed by then).  Errors (JG002 when the partner holds the gate, JG003
# when it already won) are expected and do not stop the script.
sub client_script
{
	my ($client, $round) = @_;
	my $pair = int(($client + 1) / 2);
	my $script = '';
	for my $i (1 .. $iterations)
	{
		my $key = "r$round-p$pair-$i";
		$script .= qq{SELECT job_id AS j FROM jobguard.submit('owner-$pair', '$key', 'charge', '{"i": $i}', 'stripe') \\gset
\\echo submitted :j
\\unset a
SELECT jobguard.begin_attempt(:j, timeout => '10 seconds', attempt_key => 'c$client') AS a \\gset
};
		if ($i % 5 == 0)
		{
			# a stalled primary: cancel it, fail over, and let both report
			$script .= qq{SELECT jobguard.cancel_attempt(:a, 'stalled');
\\unset b
SELECT jobguard.begin_attempt(:j, 'adyen') AS b \\gset
SELECT jobguard.finish_attempt(:b, '{"id": "fallback-$i"}');
SELECT jobguard.finish_attempt(:a, '{"id": "late-$i"}');
};
		}
		elsif ($i % 7 == 0)
		{
			$script .= qq{SELECT jobguard.finish_attempt(:a, '{"broken": true}');
};
		}
		else
		{
			$script .= qq{SELECT jobguard.finish_attempt(:a, '{"id": "c$client-$i"}');
};
		}
	}
	return $script;
}

# start_clients: the clients of one round, in the background.  Scripts and
# output go through files, which the clients read and write by themselves.
my $dir = PostgreSQL::Test::Utils::tempdir();

sub start_clients
{
	my ($round) = @_;
	my @runs;
	for my $c (1 .. $clients)
	{
		my %run = (
			script => "$dir/round$round-client$c.sql",
			out => "$dir/round$round-client$c.out");
		PostgreSQL::Test::Utils::append_to_file($run{script}, client_script($c, $round));
		$run{handle} = IPC::Run::start(
			[
				'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=0', '-f', $run{script},
				'-d', $node->connstr('postgres') . " application_name=jg_client_$c"
			],
			'>', $run{out}, '2>', '/dev/null');
		push @runs, \%run;
	}
	return @runs;
}

# check_after_crash: every echoed job exists, and the invariants hold.
sub check_after_crash
{
	my ($what, @runs) = @_;
	my %returned;
	for my $run (@runs)
	{
		$run->{handle}->finish;
		my $out = PostgreSQL::Test::Utils::slurp_file($run->{out});
		$returned{$1} = 1 while $out =~ /^submitted (\d+)$/mg;
	}
	my $count = scalar keys %returned;
	cmp_ok($count, '>', 50, "$what: clients had submitted $count jobs before the crash");
	my $ids = join(',', keys %returned) || '0';
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM unnest('{$ids}'::bigint[]) id"
			  . " WHERE NOT EXISTS (SELECT 1 FROM jobguard.jobs j WHERE j.id = id)"),
		'0', "$what: every submit that returned to a client survived");
	is($node->safe_psql('postgres',
			"SELECT coalesce(string_agg(invariant || ': ' || detail, '; '), '') FROM jobguard.check_invariants()"),
		'', "$what: every invariant holds after restart");
	is($node->safe_psql('postgres',
			q{SELECT count(*) FROM (SELECT job_id FROM jobguard.attempts
			   WHERE state IN ('started', 'unknown') GROUP BY job_id HAVING count(*) > 1) s}),
		'0', "$what: at most one open attempt per job");
	return;
}

# Round 1: SIGKILL one client's backend; the postmaster kills the rest and
# recovers from the WAL.
my @runs = start_clients(1);
$node->poll_query_until('postgres', 'SELECT count(*) > 300 FROM jobguard.jobs')
  or die 'clients made no progress';
my $pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE application_name = 'jg_client_3'});
ok($pid =~ /^\d+$/, 'found a client backend to kill');
kill 'KILL', $pid;
$node->poll_query_until('postgres', 'SELECT true')
  or die 'server did not come back after the backend was killed';
check_after_crash('backend SIGKILL', @runs);

# Round 2: immediate shutdown (no checkpoint) in the middle of the load.
@runs = start_clients(2);
$node->poll_query_until('postgres',
	q{SELECT count(*) > 300 FROM jobguard.jobs WHERE idempotency_key LIKE 'r2-%'})
  or die 'clients made no progress';
$node->stop('immediate');
$node->start;
check_after_crash('immediate shutdown', @runs);

# The lifecycle still works after the crashes.
my $job = $node->safe_psql('postgres',
	q{SELECT job_id FROM jobguard.submit('after', 'crash', 'charge', '{}', 'stripe')});
my $attempt = $node->safe_psql('postgres', "SELECT jobguard.begin_attempt($job)");
is($node->safe_psql('postgres', "SELECT jobguard.finish_attempt($attempt, '{\"id\": \"ok\"}')"),
	'won', 'a new job runs to completion after the crashes');
amcheck_ok($node, 'postgres', 'after the crashes');

$node->stop;
done_testing();
