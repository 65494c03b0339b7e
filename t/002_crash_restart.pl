# Crash safety: several clients run the whole lifecycle (with double-clicks
# and fallbacks) while the server is killed, twice: once by SIGKILL of a
# backend (the postmaster restarts everything) and once by an immediate
# shutdown.  After each restart every submit that returned to a client
# exists, and check_invariants() finds nothing; at the end amcheck finds
# no corruption in the indexes and tables recovery rebuilt.  The clients'
# errors are read: each must be one the lifecycle explains (never XX000,
# never 23505), and each client must have lost its connection to the crash,
# which the server's log must show (a backend "terminated by signal 9", an
# immediate shutdown).
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
# when it already won, 22004 for the calls on the attempt a refused begin
# did not give, left NULL) are expected and do not stop the script.
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
\\set a NULL
SELECT jobguard.begin_attempt(:j, timeout => '10 seconds', attempt_key => 'c$client') AS a \\gset
};
		if ($i % 5 == 0)
		{
			# a stalled primary: cancel it, fail over, and let both report
			$script .= qq{SELECT jobguard.cancel_attempt(:a, 'stalled');
\\set b NULL
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
			out => "$dir/round$round-client$c.out",
			err => "$dir/round$round-client$c.err");
		PostgreSQL::Test::Utils::append_to_file($run{script}, client_script($c, $round));
		$run{handle} = IPC::Run::start(
			[
				'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=0', '-v', 'VERBOSITY=sqlstate',
				'-f', $run{script},
				'-d', $node->connstr('postgres') . " application_name=jg_client_$c"
			],
			'>', $run{out}, '2>', $run{err});
		push @runs, \%run;
	}
	return @runs;
}

# What a client's stderr may hold: the SQLSTATEs of the lifecycle's
# refusals (JG002 the partner holds the gate, JG003 it already won, 22004 a
# call on the attempt a refused begin did not give), the crash's own
# (57P01 an immediate shutdown, 57P02 a crash of another server process),
# and libpq's words for a lost connection.
my %expected_error = map { $_ => 1 } qw(JG002 JG003 22004 57P01 57P02);
my $lost_connection = qr/^(?:psql:\S+:\d+:\ )?(?:error:\ )?
	(?:server\ closed\ the\ connection\ unexpectedly
	|\s*This\ probably\ means\ the\ server\ terminated\ abnormally
	|\s*before\ or\ while\ processing\ the\ request\.
	|connection\ to\ server\ was\ lost
	|no\ connection\ to\ the\ server)$/x;

# client_errors: the SQLSTATEs in one client's stderr, counted, and the
# lines that are neither an SQLSTATE nor a lost connection.  Whether the
# client lost its connection is under the key 'lost'.
sub client_errors
{
	my ($err) = @_;
	my (%states, @other);
	for my $line (split /\n/, $err)
	{
		if ($line =~ /^psql:\S+: (?:ERROR|FATAL|WARNING):  ([0-9A-Z]{5})$/)
		{
			$states{$1}++;
		}
		elsif ($line =~ $lost_connection)
		{
			$states{lost}++;
		}
		else
		{
			push @other, $line;
		}
	}
	return (\%states, \@other);
}

# check_after_crash: every client's errors are expected and the crash cut
# each one, every echoed job exists, and the invariants hold.
sub check_after_crash
{
	my ($what, @runs) = @_;
	my %returned;
	my (%seen, @unexpected, $cut);
	for my $run (@runs)
	{
		$run->{handle}->finish;
		my $out = PostgreSQL::Test::Utils::slurp_file($run->{out});
		$returned{$1} = 1 while $out =~ /^submitted (\d+)$/mg;
		my ($states, $other) = client_errors(PostgreSQL::Test::Utils::slurp_file($run->{err}));
		$cut++ if $states->{lost} || $states->{'57P01'} || $states->{'57P02'};
		for my $state (keys %$states)
		{
			$seen{$state} += $states->{$state};
			push @unexpected, "$run->{err}: SQLSTATE $state ($states->{$state} times)"
			  unless $state eq 'lost' || $state eq '40P01' || $expected_error{$state};
		}
		push @unexpected, map { "$run->{err}: $_" } @$other;
	}
	note("$what: clients' errors: "
		  . join(', ', map { "$_ $seen{$_}" } sort keys %seen));
	is(join("\n", @unexpected), '', "$what: no client got an error the lifecycle does not explain");
	{
		# a known bug: with the fast path, a begin_attempt and a finish_attempt
		# of one job (the double-click partners' fallback) can deadlock
		local $TODO = 'known bug: begin_attempt and finish_attempt of one job deadlock on the fast path';
		is($seen{'40P01'} // 0, 0, "$what: no deadlock between the calls of one job");
	}
	cmp_ok($seen{JG002} // 0, '>', 0, "$what: (the errors were read: the double-clicks' JG002 are there)");
	is($cut // 0, scalar(@runs), "$what: the crash cut every client's connection");
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
my $log_offset = -s $node->logfile;
kill 'KILL', $pid;
$node->poll_query_until('postgres', 'SELECT true')
  or die 'server did not come back after the backend was killed';
my $log = substr(PostgreSQL::Test::Utils::slurp_file($node->logfile), $log_offset);
like($log, qr/(?:server process|client backend) \(PID $pid\) was terminated by signal 9/,
	'the log shows the client backend killed by signal 9');
like($log, qr/all server processes terminated; reinitializing/, 'and the postmaster restarting everything');
check_after_crash('backend SIGKILL', @runs);

# Round 2: immediate shutdown (no checkpoint) in the middle of the load.
@runs = start_clients(2);
$node->poll_query_until('postgres',
	q{SELECT count(*) > 300 FROM jobguard.jobs WHERE idempotency_key LIKE 'r2-%'})
  or die 'clients made no progress';
$log_offset = -s $node->logfile;
$node->stop('immediate');
$log = substr(PostgreSQL::Test::Utils::slurp_file($node->logfile), $log_offset);
like($log, qr/received immediate shutdown request/, 'the log shows the immediate shutdown');
$node->start;
like(substr(PostgreSQL::Test::Utils::slurp_file($node->logfile), $log_offset),
	qr/database system was interrupted|database system was not properly shut down/,
	'and the start after it recovering');
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
