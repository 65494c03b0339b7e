# High availability with pg_auto_failover: a monitor and two PostgreSQL
# nodes with synchronous replication, all started here by pg_autoctl.
# Eight clients (examples/failover/retrying_client.pl) run the lifecycle
# through a multi-host connection string while the primary's postmaster and
# its keeper are killed with SIGKILL; the monitor promotes the standby and
# the clients resend their interrupted calls there.  Then every
# acknowledged submit, begin and outcome must be on the new primary, the
# invariants and amcheck must be clean, the sweeper must start sweeping on
# the new primary, and await() must have given an error or the right
# answer.  Then the old primary rejoins as a standby, a switchover makes it
# the primary again, and everything is checked once more.  The numbers go
# to the test's output and to tmp_check/failover_results.txt, and as the
# docs' fragment to tmp_check/failover.md (and to $JOBGUARD_BENCH_RESULTS/
# failover.md when that names a directory: how bench/results/failover.md,
# which doc/high-availability.md includes, is published).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use POSIX ();
use Time::HiRes qw(time sleep);
use FindBin;

my $clients = 8;
# found from this file (PostgreSQL 17's PGXS no longer sets TESTDIR)
my $client_script = "$FindBin::RealBin/../examples/failover/retrying_client.pl";
my $bindir = `pg_config --bindir`;
chomp $bindir;
my ($pg_autoctl) = grep { -x } map { "$_/pg_autoctl" } split /:/, $ENV{PATH};
defined $pg_autoctl
  or BAIL_OUT('pg_autoctl not found: make test installs it (Debian packages'
	  . ' pg-auto-failover-cli and postgresql-15-auto-failover)');

my $dir = PostgreSQL::Test::Utils::tempdir('failover');
my $sockets = PostgreSQL::Test::Utils::tempdir_short();

# pg_autoctl keeps its configuration and state under the XDG directories
# and connects to the local server over TCP: keep all of it in this test.
$ENV{XDG_CONFIG_HOME} = "$dir/config";
$ENV{XDG_DATA_HOME} = "$dir/share";
$ENV{XDG_RUNTIME_DIR} = "$dir/run";
mkdir "$dir/run" or die "mkdir: $!";
$ENV{PGHOST} = '127.0.0.1';
delete $ENV{$_} for qw(PG_REGRESS_SOCK_DIR PGPORT PGDATABASE PGDATA PGAPPNAME);

my %port = map { $_ => PostgreSQL::Test::Cluster::get_free_port() } qw(monitor node1 node2);
my %pgdata = map { $_ => "$dir/$_" } qw(monitor node1 node2);
my %keeper;					# node => process group of its pg_autoctl
my $monitor_uri = "postgres://autoctl_node\@127.0.0.1:$port{monitor}/pg_auto_failover?sslmode=disable";
my $rw = "host=127.0.0.1,127.0.0.1 port=$port{node1},$port{node2} dbname=postgres"
  . " target_session_attrs=read-write connect_timeout=2";

# run_cmd: run a command to completion; returns (exit status, stdout, stderr).
sub run_cmd
{
	my ($stdin, @cmd) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '<', \$stdin, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	chomp $out;
	return ($? >> 8, $out, $err);
}

# sql: the output of a query on the node at $port (unaligned, tuples only);
# dies on error.  The query goes through stdin, so it may be long.
sub sql
{
	my ($port, $query, $db) = @_;
	my ($rc, $out, $err) = run_cmd($query, "$bindir/psql", '-X', '-At', '-v', 'ON_ERROR_STOP=1',
		'-h', '127.0.0.1', '-p', $port, '-d', $db // 'postgres');
	die "query on port $port failed: $err\n$query\n" if $rc != 0;
	return $out;
}

# wait_until: poll $check every 100 ms until it returns true; false after
# $seconds.
sub wait_until
{
	my ($seconds, $check) = @_;
	my $until = time() + $seconds;
	while (time() < $until)
	{
		return 1 if eval { $check->() };
		sleep(0.1);
	}
	return 0;
}

# start_group: start a command in a new session, so that its whole process
# group (pg_autoctl, its Postgres and the backends) can be signalled at once.
sub start_group
{
	my ($log, @cmd) = @_;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		POSIX::setsid();
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>>', $log);
		open(STDERR, '>&', \*STDOUT);
		exec(@cmd) or POSIX::_exit(127);
	}
	return $pid;
}

# stop_group: stop a process group, politely first.
sub stop_group
{
	my ($pgid) = @_;
	kill 'TERM', -$pgid;
	# (reap the leader, or its zombie keeps the group alive)
	wait_until(15, sub { waitpid($pgid, POSIX::WNOHANG()) != 0 && !kill(0, -$pgid) });
	kill 'KILL', -$pgid;
	waitpid($pgid, 0);
	return;
}

END
{
	# leave nothing running, whatever happened
	stop_group($_) for grep { defined } @keeper{qw(node1 node2 monitor)};
}

# states: the monitor's view, e.g. "node1:primary/primary node2:secondary/secondary".
sub states
{
	return sql($port{monitor},
		q{SELECT string_agg(nodename || ':' || reportedstate || '/' || goalstate, ' ' ORDER BY nodename)
		    FROM pgautofailover.node}, 'pg_auto_failover');
}

# initdb: a data directory with the settings this test needs, written where
# pg_autoctl's own settings cannot override them.
sub initdb
{
	my ($name, $settings) = @_;
	my ($rc, $out, $err) = run_cmd('', "$bindir/initdb", '-D', $pgdata{$name}, '-A', 'trust',
		'-E', 'UTF8', '--locale=C.UTF-8', '--no-sync');
	die "initdb $name: $err" if $rc != 0;
	PostgreSQL::Test::Utils::append_to_file("$pgdata{$name}/postgresql.auto.conf",
		"unix_socket_directories = '$sockets'\nshared_buffers = '32MB'\n$settings");
	return;
}

# create_node_cmd: the command that registers a data node with the monitor;
# extra arguments (such as --run) are passed on.
sub create_node_cmd
{
	my ($name, @extra) = @_;
	return ($pg_autoctl, 'create', 'postgres', '--pgctl', "$bindir/pg_ctl",
		'--pgdata', $pgdata{$name}, '--pgport', $port{$name}, '--pghost', '127.0.0.1',
		'--listen', '127.0.0.1', '--hostname', '127.0.0.1', '--name', $name,
		'--auth', 'trust', '--no-ssl', '--monitor', $monitor_uri, @extra);
}

#
# The formation.
#
my $t0 = time();

# The monitor fails over fast here: health checks every second, a node
# unhealthy after 2 s, and 2 s for an unreachable primary to demote itself.
# (Production keeps the defaults; see doc/high-availability.md.)
initdb('monitor', q{
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 2000
pgautofailover.primary_demote_timeout = 2000
pgautofailover.startup_grace_period = 2000
});
my ($rc, $out, $err) = run_cmd('', $pg_autoctl, 'create', 'monitor', '--pgctl', "$bindir/pg_ctl",
	'--pgdata', $pgdata{monitor}, '--pgport', $port{monitor}, '--hostname', '127.0.0.1',
	'--auth', 'trust', '--no-ssl');
is($rc, 0, 'pg_autoctl created the monitor') or diag($err);
run_cmd('', $pg_autoctl, 'config', 'set', '--pgdata', $pgdata{monitor},
	'postgresql.listen_addresses', '127.0.0.1');
$keeper{monitor} = start_group("$dir/monitor.log", $pg_autoctl, 'run', '--pgdata', $pgdata{monitor});
ok(wait_until(60, sub { defined states() }), 'the monitor runs');

# The nodes preload jobguard, so that a sweeper runs on the primary.  The
# backend type in the log prefix tells the sweeper's lines apart.
my $node_settings = q{
shared_preload_libraries = 'jobguard'
jobguard.sweep_interval = '200ms'
wal_keep_size = '128MB'
log_line_prefix = '%m [%p] %b '
};
initdb('node1', $node_settings);
($rc, $out, $err) = run_cmd('', create_node_cmd('node1'));
is($rc, 0, 'pg_autoctl registered node1') or diag($err);
$keeper{node1} = start_group("$dir/node1.log", $pg_autoctl, 'run', '--pgdata', $pgdata{node1});
ok(wait_until(60, sub { states() =~ /node1:single\/single/ && sql($port{node1}, 'SELECT 1') }),
	'node1 runs alone');
sql($port{node1}, q{
CREATE EXTENSION jobguard;
CREATE EXTENSION amcheck;
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"]}');
SELECT jobguard.certify_provider('charge', 'adyen');
});

# node2 is cloned from node1 by pg_basebackup, settings included.
$keeper{node2} = start_group("$dir/node2.log", create_node_cmd('node2', '--run'));
ok(wait_until(120, sub { states() eq 'node1:primary/primary node2:secondary/secondary' }),
	'node2 joined as a secondary') or diag(states());
my $setup_seconds = time() - $t0;

is(sql($port{node1}, 'SHOW synchronous_standby_names'), 'ANY 1 (pgautofailover_standby_2)',
	'the primary waits for the standby at commit');
ok(wait_until(30, sub {
	sql($port{node1}, q{SELECT sync_state FROM pg_stat_replication}) =~ /^(sync|quorum)$/ }),
	'the standby is synchronous');
is(sql($port{node1}, 'SHOW synchronous_commit'), 'on', 'commits wait for the standby to flush');
# number_sync_standbys = 0 already means one synchronous standby here; 1
# would need two standbys, and the monitor says so.
($rc, $out, $err) = run_cmd('', $pg_autoctl, 'set', 'formation', 'number-sync-standbys', '1',
	'--pgdata', $pgdata{monitor});
isnt($rc, 0, 'number_sync_standbys = 1 is refused with one standby');
like($err, qr/number-sync-standbys value 1 is not valid/, 'with the monitor\'s reason');
is(sql($port{node2}, q{SELECT pg_is_in_recovery()
	|| ' ' || (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper')}),
	'true 0', 'the standby runs no sweeper');
is(sql($port{node1}, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper'}),
	'1', 'the primary runs its sweeper');

#
# Two waiters: one on the primary (its connection will break) and one on the
# standby (it will be promoted under it).
#
# open_job: a submitted job with one started attempt; returns (job, attempt).
sub open_job
{
	my ($port, $key, $timeout) = @_;
	my $job = sql($port, "SELECT job_id FROM jobguard.submit('ha', '$key', 'charge', '{}', 'stripe')");
	my $attempt = sql($port, "SELECT jobguard.begin_attempt($job, timeout => '$timeout')");
	return ($job, $attempt);
}

# start_await: jobguard.await() in a background psql; returns its handle.
sub start_await
{
	my ($conninfo, $job, $result) = @_;
	$result->{out} = '';
	$result->{err} = '';
	return IPC::Run::start(
		[ "$bindir/psql", '-X', '-At', '-d', "$conninfo application_name=jg_await",
			'-c', "SELECT jobguard.await($job, '120 s')" ],
		'>', \$result->{out}, '2>', \$result->{err}, IPC::Run::timeout(150));
}

# start_claim: jobguard.claim() waiting for a job of an operation nobody
# submits yet, in a background psql; prints how many jobs it claimed.
sub start_claim
{
	my ($conninfo, $result) = @_;
	$result->{out} = '';
	$result->{err} = '';
	return IPC::Run::start(
		[ "$bindir/psql", '-X', '-At', '-d', "$conninfo application_name=jg_claim",
			'-c', q{SELECT count(*) FROM jobguard.claim('ha-claimer', ARRAY['ha_claim'], wait => '120 s')} ],
		'>', \$result->{out}, '2>', \$result->{err}, IPC::Run::timeout(150));
}

my %claim1;
my $claimer1 = start_claim($rw, \%claim1);
ok(wait_until(30, sub {
	sql($port{node1}, q{SELECT count(*) FROM pg_stat_activity
	                     WHERE application_name = 'jg_claim' AND state = 'active'}) eq '1' }),
	'a claim waits for work on the primary');

my ($await_job1, $await_attempt1) = open_job($port{node1}, 'await-1', '5 minutes');
my ($await_job2, $await_attempt2) = open_job($port{node1}, 'await-2', '5 minutes');
my (%await1, %await2);
my $waiter1 = start_await($rw, $await_job1, \%await1);
ok(wait_until(30, sub { sql($port{node2}, "SELECT jobguard.job_state($await_job2)") eq 'running' }),
	'the standby sees the second waiter\'s job');
my $waiter2 = start_await("host=127.0.0.1 port=$port{node2} dbname=postgres", $await_job2, \%await2);
for my $port ($port{node1}, $port{node2})
{
	ok(wait_until(30, sub {
		sql($port, q{SELECT count(*) FROM pg_stat_activity
		              WHERE application_name = 'jg_await' AND state = 'active'}) eq '1' }),
		"a waiter waits on port $port");
}

#
# The load, and the crash of the primary.
#
my $stop_file = "$dir/stop";
my @runs;
for my $c (1 .. $clients)
{
	my $out_file = "$dir/client$c.out";
	push @runs, {
		out => $out_file,
		handle => IPC::Run::start(
			[ 'perl', $client_script, '--conninfo', "$rw application_name=jg_client_$c",
				'--client', $c, '--out', $out_file, '--stop-file', $stop_file,
				'--deadline', 150 ],
			'>', "$dir/client$c.log", '2>&1', IPC::Run::timeout(180)) };
}
ok(wait_until(60, sub { sql($port{node1}, 'SELECT count(*) FROM jobguard.jobs') >= 300 }),
	'the clients are under way on node1');

# An attempt whose deadline passes while the standby is being promoted: the
# new primary's sweeper must store it as unknown.
my ($sweep_job, $sweep_attempt) = open_job($port{node1}, 'sweep-1', '3 seconds');
my $sweep_begun = time();
ok(wait_until(5, sub {
	sql($port{node2}, "SELECT state FROM jobguard.attempts WHERE id = $sweep_attempt") eq 'started' }),
	'the standby has the attempt as started');

my $postmaster = (split /\n/, PostgreSQL::Test::Utils::slurp_file("$pgdata{node1}/postmaster.pid"))[0];
# SIGKILL the postmaster and, in the same instant, its keeper: a keeper left
# alive would restart Postgres at once, and this test is about losing the
# machine, not the process.
kill 'KILL', -$keeper{node1};
kill 'KILL', $postmaster;
my $killed = time();
waitpid($keeper{node1}, 0);
delete $keeper{node1};
ok(wait_until(10, sub { !kill(0, $postmaster) }), 'the primary\'s postmaster is gone');
cmp_ok($killed - $sweep_begun, '<', 3, 'the primary died before the attempt\'s deadline');

# Failover time: from the kill to the first write through the multi-host
# connection string.
my $writable = wait_until(90, sub {
	my ($rc, $out) = run_cmd('', "$bindir/psql", '-X', '-At', '-d', $rw,
		'-c', 'SELECT pg_current_xact_id()');
	return $rc == 0;
});
my $failover_seconds = time() - $killed;
ok($writable, sprintf('a node accepts writes %.1f s after the kill', $failover_seconds));
ok(wait_until(30, sub { states() =~ /node2:(wait_primary|primary)\// }), 'the monitor promoted node2')
  or diag(states());

# The new primary's sweeper: it starts, and stores the overdue attempt as
# unknown within a few intervals; a fresh one too.
my $promoted = time();
ok(wait_until(10, sub {
	sql($port{node2}, "SELECT state FROM jobguard.attempts WHERE id = $sweep_attempt") eq 'unknown' }),
	'the new primary\'s sweeper stored the overdue attempt as unknown');
my $sweep_seconds = time() - $sweep_begun;
cmp_ok($sweep_seconds, '<', 3 + $failover_seconds + 2,
	sprintf('within its deadline + the failover + 2 s (%.1f s after begin)', $sweep_seconds));
my ($fresh_job, $fresh_attempt) = open_job($port{node2}, 'sweep-2', '300 milliseconds');
my $fresh_begun = time();
ok(wait_until(10, sub {
	sql($port{node2}, "SELECT state FROM jobguard.attempts WHERE id = $fresh_attempt") eq 'unknown' }),
	'an attempt begun on the new primary is swept too');
my $fresh_seconds = time() - $fresh_begun;
cmp_ok($fresh_seconds, '<', 0.3 + 5 * 0.2 + 1,
	sprintf('within a few sweep intervals of its deadline (%.2f s after begin)', $fresh_seconds));

# The clients go on against node2.
my $jobs_at_promotion = sql($port{node2}, 'SELECT count(*) FROM jobguard.jobs');
ok(wait_until(60, sub {
	sql($port{node2}, 'SELECT count(*) FROM jobguard.jobs') >= $jobs_at_promotion + 300 }),
	'the clients go on against the new primary');
PostgreSQL::Test::Utils::append_to_file($stop_file, 'stop');
for my $c (1 .. $clients)
{
	ok($runs[ $c - 1 ]{handle}->finish, "client $c stopped cleanly")
	  or diag(PostgreSQL::Test::Utils::slurp_file("$dir/client$c.log"));
}

#
# await() across the failover.
#
ok(!$waiter1->finish, 'the waiter on the killed primary got an error');
like($await1{err}, qr/server closed the connection|connection to server was lost|terminating connection/,
	'an error that says the connection was lost (retry it)');
is($await1{out}, '', 'and no answer');
my %retry;
my $retry = start_await($rw, $await_job1, \%retry);
ok(wait_until(30, sub {
	sql($port{node2}, q{SELECT count(*) FROM pg_stat_activity
	                     WHERE application_name = 'jg_await' AND state = 'active'}) eq '2' }),
	'the retried waiter waits on the new primary');
is(sql($port{node2}, "SELECT jobguard.finish_attempt($await_attempt1, '{\"id\": \"await-1\"}')"),
	'won', 'its job gets a result');
$retry->finish;
chomp $retry{out};
is($retry{out}, 'succeeded', 'the retried await() returns the right answer');
is(sql($port{node2}, "SELECT jobguard.finish_attempt($await_attempt2, '{\"id\": \"await-2\"}')"),
	'won', 'the job of the waiter on the promoted standby gets a result');
$waiter2->finish;
chomp $await2{out};
is($await2{out}, 'succeeded', 'the waiter on the standby kept waiting through the promotion and got it')
  or diag($await2{err});

#
# claim(wait) across the failover: the waiter on the killed primary gets an
# error it can retry, never a wrong answer; retried, it waits on the new
# primary and claims the job submitted there.
#
ok(!$claimer1->finish, 'the claim waiting on the killed primary got an error');
like($claim1{err}, qr/server closed the connection|connection to server was lost|terminating connection/,
	'an error that says the connection was lost (retry it)');
is($claim1{out}, '', 'and no answer');
my %claim2;
my $claimer2 = start_claim($rw, \%claim2);
ok(wait_until(30, sub {
	sql($port{node2}, q{SELECT count(*) FROM pg_stat_activity
	                     WHERE application_name = 'jg_claim' AND state = 'active'}) eq '1' }),
	'the retried claim waits on the new primary');
my $claim_job = sql($port{node2}, q{SELECT job_id FROM jobguard.submit('ha', 'claim-1', 'ha_claim', '{}', 'stripe')});
$claimer2->finish;
chomp $claim2{out};
is($claim2{out}, '1', 'the retried claim takes the job submitted after the failover') or diag($claim2{err});
is(sql($port{node2}, qq{SELECT jobguard.job_state($claim_job) || ' ' || (SELECT worker FROM jobguard.attempt_overview WHERE job_id = $claim_job)}),
	'running ha-claimer', 'as one started attempt of that worker');

#
# What the clients were told, and what the nodes must hold.
#
my (%job_of_key, %job_of_attempt, %final, %won_by_job, %cancelled_job, %count);
my $max_outage = 0;

# read_clients: fold the clients' logs into the acknowledged facts.
sub read_clients
{
	for my $file (@_)
	{
		for my $line (split /\n/, PostgreSQL::Test::Utils::slurp_file($file))
		{
			my ($what, @f) = split / /, $line;
			$count{$what}++;
			if ($what eq 'submit') { $job_of_key{ $f[1] } = $f[0] }
			elsif ($what eq 'begin') { $job_of_attempt{ $f[1] } = $f[0]; $final{ $f[1] } = 'started' }
			elsif ($what eq 'finish')
			{
				$count{"finish $f[1]"}++;
				$final{ $f[0] } = { won => 'succeeded', lost => 'lost', rejected => 'failed' }->{ $f[1] };
				$won_by_job{ $job_of_attempt{ $f[0] } } = $f[0] if $f[1] eq 'won';
			}
			elsif ($what eq 'cancel_attempt') { $final{ $f[0] } = 'cancelled' }
			elsif ($what eq 'fail') { $final{ $f[0] } = 'failed' }
			elsif ($what eq 'cancel_job') { $cancelled_job{ $f[0] } = 1 }
			elsif ($what eq 'outage') { $max_outage = $f[0] if $f[0] > $max_outage }
			elsif ($what eq 'unexpected') { diag("$file: $line") }
		}
	}
	return;
}
read_clients(map { $_->{out} } @runs);
cmp_ok($count{interrupted} // 0, '>=', 1, 'the failover interrupted calls in flight');
is($count{unexpected} // 0, 0, 'no client saw an unexpected answer');

# check_node: every acknowledged fact is on the node, and its data is sound.
# $full adds what only a primary can run (bt_index_parent_check).
sub check_node
{
	my ($port, $label, $full) = @_;
	my $values = sub { join(",\n", @_) || 'NULL' };
	my $jobs = $values->(map { "($job_of_key{$_}, '$_')" } sort keys %job_of_key);
	is(sql($port, qq{SELECT count(*) FROM (VALUES $jobs) v(id, key)
		WHERE NOT EXISTS (SELECT 1 FROM jobguard.jobs j WHERE j.id = v.id AND j.idempotency_key = v.key)}),
		'0', "$label: every acknowledged submit is there (" . scalar(keys %job_of_key) . ')');
	my $attempts = $values->(map { "($_, $job_of_attempt{$_}, '$final{$_}')" } sort keys %final);
	is(sql($port, qq{SELECT coalesce(string_agg(v.id || ' ' || v.state || '/' || coalesce(a.state, 'missing'), ', '), '')
		FROM (VALUES $attempts) v(id, job, state)
		LEFT JOIN jobguard.attempt_overview a ON a.attempt_id = v.id AND a.job_id = v.job
		WHERE a.state IS DISTINCT FROM v.state
		  AND NOT (v.state = 'started' AND a.state = 'unknown')}),
		'', "$label: every acknowledged begin, won, lost, rejected, cancel and fail is there ("
		  . scalar(keys %final) . ' attempts)');
	my $wins = $values->(map { "($_, $won_by_job{$_})" } sort keys %won_by_job);
	is(sql($port, qq{SELECT count(*) FROM (VALUES $wins) v(job, attempt)
		WHERE NOT EXISTS (SELECT 1 FROM jobguard.jobs j WHERE j.id = v.job AND j.completed_by = v.attempt)}),
		'0', "$label: every acknowledged 'won' holds the job's result slot (" . scalar(keys %won_by_job) . ')');
	my $cancels = $values->(map { "($_)" } sort keys %cancelled_job);
	is(sql($port, qq{SELECT count(*) FROM (VALUES $cancels) v(job)
		WHERE NOT EXISTS (SELECT 1 FROM jobguard.jobs j WHERE j.id = v.job AND j.cancelled_at IS NOT NULL)}),
		'0', "$label: every acknowledged cancel_job is there (" . scalar(keys %cancelled_job) . ')');
	is(sql($port, q{SELECT coalesce(string_agg(invariant || ': ' || detail, '; '), '')
		FROM jobguard.check_invariants()}), '', "$label: check_invariants() is empty");
	is(sql($port, q{SELECT count(*) FROM (SELECT job_id FROM jobguard.attempts WHERE state = 'succeeded'
		GROUP BY job_id HAVING count(*) > 1) s}), '0', "$label: no job has two succeeded attempts");
	my $check = $full
	  ? 'bt_index_parent_check(c.oid, heapallindexed => true, rootdescend => true)'
	  : 'bt_index_check(c.oid, heapallindexed => true)';
	is(sql($port, qq{SELECT count(*) FROM (SELECT $check FROM pg_class c JOIN pg_am am ON am.oid = c.relam
		WHERE c.relnamespace = 'jobguard'::regnamespace AND c.relkind = 'i' AND am.amname = 'btree') s}),
		sql($port, q{SELECT count(*) FROM pg_class c JOIN pg_am am ON am.oid = c.relam
			WHERE c.relnamespace = 'jobguard'::regnamespace AND c.relkind = 'i' AND am.amname = 'btree'}),
		"$label: amcheck finds every jobguard index sound ("
		  . ($full ? 'bt_index_parent_check' : 'bt_index_check') . ')');
	is(sql($port, q{SELECT coalesce(string_agg(c.relname || ': ' || v.msg, '; '), '')
		FROM pg_class c, LATERAL verify_heapam(c.oid, check_toast => true) v
		WHERE c.relnamespace = 'jobguard'::regnamespace AND c.relkind = 'r'}),
		'', "$label: verify_heapam finds every jobguard table sound");
	return;
}
check_node($port{node2}, 'after failover', 1);

# sweeper_trouble: the lines of a node's server log that show its sweeper
# in trouble (an error, a crash, an attempt to write during recovery).
sub sweeper_trouble
{
	my ($name) = @_;
	my @lines;
	for my $file (glob("$pgdata{$name}/log/*"))
	{
		push @lines,
		  grep { !/due to administrator command/ }
		  grep { /jobguard sweeper.*\b(WARNING|ERROR|FATAL|PANIC):|"jobguard sweeper".*(exit code [^1]|terminated by)/ }
		  split /\n/, PostgreSQL::Test::Utils::slurp_file($file);
	}
	return join("\n", @lines);
}
is(sweeper_trouble('node2'), '', 'node2 logged no sweeper trouble as a standby or after promotion');

#
# Fail back: node1 rejoins as a standby (pg_rewind), then a switchover.
#
my $rejoin_started = time();
$keeper{node1} = start_group("$dir/node1.log", $pg_autoctl, 'run', '--pgdata', $pgdata{node1});
ok(wait_until(120, sub { states() eq 'node1:secondary/secondary node2:primary/primary' }),
	'node1 rejoined as a secondary') or diag(states());
my $rejoin_seconds = time() - $rejoin_started;
my $lsn = sql($port{node2}, 'SELECT pg_current_wal_insert_lsn()');
ok(wait_until(30, sub { sql($port{node1}, "SELECT pg_last_wal_replay_lsn() >= '$lsn'") eq 't' }),
	'node1 replays what node2 wrote');
is(sql($port{node1}, q{SELECT pg_is_in_recovery()
	|| ' ' || (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper')}),
	'true 0', 'node1 is a standby and runs no sweeper');
check_node($port{node1}, 'node1 as a standby', 0);

my $switchover_started = time();
($rc, $out, $err) = run_cmd('', $pg_autoctl, 'perform', 'switchover', '--pgdata', $pgdata{monitor});
is($rc, 0, 'pg_autoctl performed a switchover') or diag($err);
ok(wait_until(60, sub { states() eq 'node1:primary/primary node2:secondary/secondary' }),
	'node1 is the primary again') or diag(states());
my $switchover_seconds = time() - $switchover_started;
ok(wait_until(10, sub {
	sql($port{node1}, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper'}) eq '1' }),
	'node1 runs its sweeper again');
is(sql($port{node2}, q{SELECT pg_is_in_recovery()
	|| ' ' || (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper')}),
	'true 0', 'node2 is a standby again and runs no sweeper');

# One more client runs through the multi-host string, which now finds node1.
# It plays a lost answer after every call: each call is sent twice, and the
# second answer must agree with the first (cancel_attempt and fail_attempt
# are confirmed by reading the attempt back).
my %failover_count = %count;
my $last = "$dir/client9.out";
($rc, $out, $err) = run_cmd('', 'perl', $client_script, '--conninfo', $rw, '--client', 9,
	'--out', $last, '--intents', 50, '--deadline', 60, '--drop-answers');
is($rc, 0, 'a client runs 50 intents after the switchover, sending every call twice') or diag($err);
read_clients($last);
is($count{unexpected} // 0, 0, 'every resend got the first send\'s answer');
is(($count{confirmed} // 0) - ($failover_count{confirmed} // 0), 15,
	'the resends of 5 cancel_attempt, 5 fail_attempt and 5 rejected finishes were confirmed by reading back');
is(sql($port{node1}, q{SELECT count(*) || ' ' || count(*) FILTER (WHERE j.completed_by IS NOT NULL)
	|| ' ' || (SELECT count(*) FROM jobguard.attempts a JOIN jobguard.jobs k ON k.id = a.job_id
	           WHERE k.owner_id = 'client-9')
	FROM jobguard.jobs j WHERE owner_id = 'client-9'}), '50 45 65',
	'on node1: 50 jobs, 45 with a result, 65 attempts (no resend made a second one)');
check_node($port{node1}, 'after switchover', 1);
is(sweeper_trouble('node1'), '', 'node1 logged no sweeper trouble');
is(sweeper_trouble('node2'), '', 'node2 logged no sweeper trouble as a standby again');

#
# The numbers.
#
my $total = time() - $t0;
my %n = map { $_ => $failover_count{$_} // 0 } qw(submit begin interrupted resent confirmed connect_refused
  cancel_attempt fail cancel_job), 'finish won', 'finish lost', 'finish rejected';
my $finishes = $n{'finish won'} + $n{'finish lost'} + $n{'finish rejected'};
my $results = join("\n",
	'jobguard failover test (t/008_failover.pl), ' . POSIX::strftime('%Y-%m-%d %H:%M UTC', gmtime()),
	sprintf('formation set up (monitor + 2 nodes): %.1f s', $setup_seconds),
	sprintf('failover, SIGKILL to the first write through the multi-host string: %.1f s', $failover_seconds),
	sprintf('longest outage a client saw (first failed call to its answer): %.1f s', $max_outage),
	sprintf('acknowledged to the %d clients and checked on both nodes: %d submits, %d begins, %d finishes (%d won, %d lost, %d rejected), %d cancel_attempt, %d fail_attempt, %d cancel_job',
		$clients, $n{submit}, $n{begin}, $finishes, $n{'finish won'}, $n{'finish lost'},
		$n{'finish rejected'}, $n{cancel_attempt}, $n{fail}, $n{cancel_job}),
	sprintf('calls cut off by the failover and resent: %d (answered on the new primary: %d; of these confirmed by reading the attempt back: %d)',
		$n{interrupted}, $n{resent}, $n{confirmed}),
	sprintf('connection attempts refused while no node took writes: %d (every 50 ms per client)', $n{connect_refused}),
	'after the switchover: 50 intents with every call sent twice, every resend answered as the first send',
	sprintf('sweeper on the new primary: overdue attempt stored unknown %.1f s after begin (deadline 3 s), a fresh one %.2f s after begin (deadline 0.3 s)',
		$sweep_seconds, $fresh_seconds),
	sprintf('old primary rejoined as standby: %.1f s; switchover back: %.1f s', $rejoin_seconds, $switchover_seconds),
	sprintf('whole test: %.0f s', $total)) . "\n";
diag($results);
PostgreSQL::Test::Utils::append_to_file("$PostgreSQL::Test::Utils::tmp_check/failover_results.txt", $results);

# The same numbers as the docs' fragment, with the machine and versions of
# the run (the form of bench/fragments' files).
my ($model) = map { /^model name\s*: (.*)$/ ? $1 : () } split /\n/,
  PostgreSQL::Test::Utils::slurp_file('/proc/cpuinfo');
my ($mem_kb) = PostgreSQL::Test::Utils::slurp_file('/proc/meminfo') =~ /^MemTotal:\s+(\d+)/m;
my (undef, $ncpu) = run_cmd('', 'nproc');
my (undef, $autoctl_version) = run_cmd('', $pg_autoctl, '--version');
($autoctl_version) = $autoctl_version =~ /(\d+\.\d+(?:\.\d+)?)/;
my $server_version = sql($port{node1}, 'SHOW server_version');
my @lines = split /\n/, $results;
shift @lines;
my $fragment = sprintf("*Failover* — `t/008_failover.pl`, run %s, %.0f s; %s CPUs (%s), %.0f GB RAM, "
	  . "PostgreSQL %s, pg_auto_failover %s, fsync on\n\n",
	POSIX::strftime('%Y-%m-%d %H:%M UTC', gmtime()), $total, $ncpu, $model // 'unknown CPU',
	($mem_kb // 0) / 1048576, $server_version, $autoctl_version // 'unknown')
  . join('', map { "- $_\n" } @lines);
my @fragment_files = ("$PostgreSQL::Test::Utils::tmp_check/failover.md");
push @fragment_files, "$ENV{JOBGUARD_BENCH_RESULTS}/failover.md"
  if $ENV{JOBGUARD_BENCH_RESULTS} && -d $ENV{JOBGUARD_BENCH_RESULTS};
for my $file (@fragment_files)
{
	open(my $fh, '>', $file) or die "cannot write $file: $!";
	print $fh $fragment;
	close($fh);
	note("wrote $file");
}

stop_group($keeper{$_}) for qw(node1 node2 monitor);
%keeper = ();
done_testing();
