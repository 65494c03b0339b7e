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

# scans: how often the claim's candidate statement scanned jobs so far
sub scans
{
	return $node->safe_psql('postgres', q{SELECT pg_stat_force_next_flush();
		SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables
		 WHERE relid = 'jobguard.jobs'::regclass});
}

# How many scans of jobs one look makes (claim's statement walks the
# priorities present, an index scan or two each).
my $before = scans();
$node->safe_psql('postgres', q{SELECT count(*) FROM jobguard.claim('idle', ARRAY['nothing'])});
my $per_look = scans() - $before;
$per_look = 1 if $per_look < 1;

# A claim that waits 2 s for work that never comes.
$before = scans();
my $t0 = time();
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM jobguard.claim('idle', ARRAY['nothing'], wait => '2 seconds')}),
	'0', 'a claim with nothing to do returns no rows after its wait');
my $took = time() - $t0;
cmp_ok($took, '>=', 1.9, 'having waited the whole 2 s');
my $looks = (scans() - $before) / $per_look;
note("an idle 2 s wait looked at jobs $looks times");
cmp_ok($looks, '<=', 14, 'looking again every 250 ms, not polling (polling every 50 ms is 40 and more)');

# wake_delays: $rounds times, a claim waits for work in a second session
# until it sleeps (its wait event is the extension's), then, at a random
# moment of its 250 ms look cycle, &$wake commits what makes a job runnable
# and returns the server's clock just before that commit; each round's
# delay is from there to the server's clock just after the claim returned
# (both taken inside the statements, so no client's start-up or exit
# counts).  &$check gets each round's claimed job id and the round.
sub wake_delays
{
	my ($name, $rounds, $prepare, $wake, $check) = @_;
	my @delays;
	for my $round (1 .. $rounds)
	{
		my $context = $prepare->($round);
		my ($out, $err) = ('', '');
		my $worker = "$name-$round";
		my $claim = IPC::Run::start(
			[ "$bindir/psql", '-X', '-At', '-d', $node->connstr('postgres'),
				'-c', qq{SELECT job_id, extract(epoch FROM clock_timestamp())
				           FROM jobguard.claim('$worker', ARRAY['wake'], wait => '30 seconds')} ],
			'>', \$out, '2>', \$err, IPC::Run::timeout(60));
		$node->poll_query_until('postgres', qq{SELECT count(*) = 1 FROM pg_stat_activity
			 WHERE query LIKE '%claim(''$worker''%' AND state = 'active' AND wait_event_type = 'Extension'})
		  or die "the claim of $worker never slept";
		# anywhere in the look cycle: a claim that only looks again every
		# 250 ms would take 0 to 250 ms to see the job
		sleep(0.05 + rand(0.25));
		my $committing = $wake->($context);
		$claim->finish;
		chomp $out;
		my ($job, $returned) = split /\|/, $out;
		$check->($job // '', $context, $round, $err);
		push @delays, (($returned // 0) - $committing) * 1000;
	}
	return @delays;
}

# at_once: the test that the claims were woken by the commit, not by their
# own next look.  A claim that only looked every 250 ms would be seen 0 to
# 250 ms late (under 10 ms in 4 % of the rounds), one polling every 50 ms
# (jobguard not preloaded) 0 to 50 ms late (under 10 ms in 20 %): 10 rounds
# of 15 within 10 ms happens to the first never, to the second in about one
# run of 10,000; woken claims take about a millisecond, which leaves room
# for 5 rounds slowed by a busy machine.
sub at_once
{
	my ($what, @delays) = @_;
	my @sorted = sort { $a <=> $b } @delays;
	my $fast = grep { $_ < 10 } @delays;
	note(sprintf('%s: delays %s ms', $what, join(' ', map { sprintf('%.1f', $_) } @sorted)));
	cmp_ok($fast, '>=', 10,
		sprintf('%s: %d of %d claims woken within 10 ms of the commit (median %.1f ms): at once, '
			  . 'not at their next look (250 ms), nor polling (50 ms)', $what, $fast,
			scalar @delays, $sorted[ int(@sorted / 2) ]));
}

# A claim waiting for work is woken by the submit's commit.
my %submitted;
at_once('woken by a submit',
	wake_delays('waiter', 15, sub { return $_[0] },
		sub {
			my ($round) = @_;
			my ($job, $at) = split /\|/, $node->safe_psql('postgres',
				qq{SELECT job_id, extract(epoch FROM clock_timestamp())
				     FROM jobguard.submit('o', 'w-$round', 'wake', '{}', 'p')});
			$submitted{$round} = $job;
			return $at;
		},
		sub {
			my ($job, $round, undef, $err) = @_;
			is($job, $submitted{$round}, "round $round: the waiting claim took the job just submitted")
			  or diag($err);
		}));

# A claim's attempt fails: the gate opens, and wakes a claim waiting for it
# too.  Each round a job is submitted and claimed first (no one waits then).
at_once('woken by a failed attempt',
	wake_delays('waiter2', 15,
		sub {
			my ($round) = @_;
			return [ split /\|/, $node->safe_psql('postgres', qq{
				SELECT j.job_id, c.attempt_id FROM jobguard.submit('o', 'f-$round', 'wake', '{}', 'p') j,
				       jobguard.claim('first-$round', ARRAY['wake']) c}) ];
		},
		sub {
			my ($context) = @_;
			return $node->safe_psql('postgres', qq{
				SELECT extract(epoch FROM clock_timestamp())
				  FROM jobguard.fail_attempt($context->[1], 'provider down')});
		},
		sub {
			my ($job, $context, $round, $err) = @_;
			is($job, $context->[0], "round $round: the failed attempt let the waiting claim take the job again")
			  or diag($err);
		}));

$node->stop;
done_testing();
