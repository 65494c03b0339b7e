# jobguard in shared_preload_libraries: the sweeper writes 'unknown' for
# overdue attempts within a few intervals, comes back after being killed,
# does not stay in a database without the extension, and stops cleanly; the
# event counters of jobguard.stats() move as calls are made.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('preloaded');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'jobguard'
jobguard.database = 'postgres, plain'
jobguard.sweep_interval = '200ms'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobguard');
# a listed database where jobguard is not installed: the launcher looks
# into it and leaves it alone
$node->safe_psql('postgres', 'CREATE DATABASE plain');

sub sweeper_pid
{
	my ($db) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper' AND datname = '$db'");
}

ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper' AND datname = 'postgres'}),
	'a sweeper runs in the listed database that has jobguard');

# An attempt with a 1 s timeout is stored as unknown within a few intervals.
my $job = $node->safe_psql('postgres',
	q{SELECT job_id FROM jobguard.submit('alice', 'k1', 'charge', '{}', 'stripe')});
my $attempt = $node->safe_psql('postgres', "SELECT jobguard.begin_attempt($job, timeout => '1 second')");
my $begun = time();
is($node->safe_psql('postgres', "SELECT state FROM jobguard.attempts WHERE id = $attempt"),
	'started', 'the attempt is stored as started');
ok($node->poll_query_until('postgres',
		"SELECT state = 'unknown' FROM jobguard.attempts WHERE id = $attempt"),
	'the sweeper stored it as unknown');
my $elapsed = time() - $begun;
cmp_ok($elapsed, '<', 1 + 5 * 0.2 + 1, sprintf('within a few sweep intervals of its deadline (%.2f s after begin)', $elapsed));
is($node->safe_psql('postgres', "SELECT jobguard.job_state($job)"), 'unknown', 'the job is unknown, not failed');
is($node->safe_psql('postgres', "SELECT jobguard.finish_attempt($attempt, '{\"late\": true}')"),
	'won', 'the late result still wins');

# A sweeper that is killed comes back.
my $old_pid = sweeper_pid('postgres');
ok($old_pid =~ /^\d+$/, 'found the sweeper');
kill 'TERM', $old_pid;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper'"
		  . " AND datname = 'postgres' AND pid <> $old_pid"),
	'the launcher restarted the sweeper');
$attempt = $node->safe_psql('postgres',
	q{SELECT jobguard.begin_attempt(job_id, timeout => '300 milliseconds')
	  FROM jobguard.submit('alice', 'k2', 'charge', '{}', 'stripe')});
ok($node->poll_query_until('postgres',
		"SELECT state = 'unknown' FROM jobguard.attempts WHERE id = $attempt"),
	'the restarted sweeper sweeps');

# Overdue attempts against several providers, two a sweep: the sweep walks
# every provider that has started attempts (its index leads with the
# provider) and leaves those not yet due.
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET jobguard.sweep_batch_size = 2;
	SELECT pg_reload_conf();
	SELECT jobguard.begin_attempt(s.job_id, timeout => '200 milliseconds')
	  FROM generate_series(1, 7) AS i,
	       LATERAL jobguard.submit('alice', 'multi-' || i, 'charge', '{}', 'p' || (i % 3)) AS s;
	SELECT jobguard.begin_attempt(job_id, timeout => '1 hour')
	  FROM jobguard.submit('alice', 'multi-later', 'charge', '{}', 'p1');
});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 7 FROM jobguard.attempts a JOIN jobguard.jobs j ON j.id = a.job_id
		  WHERE j.idempotency_key LIKE 'multi-_' AND a.state = 'unknown'}),
	'the overdue attempts of three providers are all swept, two a sweep');
is($node->safe_psql('postgres',
		q{SELECT a.state FROM jobguard.attempts a JOIN jobguard.jobs j ON j.id = a.job_id
		  WHERE j.idempotency_key = 'multi-later'}),
	'started', 'an attempt not yet due is left started');
$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET jobguard.sweep_batch_size;
	SELECT pg_reload_conf();
});

# The event counters of this database.
$node->safe_psql('postgres', 'SELECT jobguard.stats_reset()');
my ($code, $out, $err);
$node->safe_psql('postgres', q{
SELECT jobguard.define_operation('extract', '{"type": "object", "required": ["name"]}');
SELECT jobguard.submit('bob', 'k1', 'extract', '{}', 'model-a');
SELECT jobguard.submit('bob', 'k1', 'extract', '{}', 'model-a');
SELECT jobguard.submit('bob', 'k1', 'extract', '{}', 'model-a');
});
($code, $out, $err) = $node->psql('postgres',
	q{SELECT jobguard.submit('bob', 'k1', 'extract', '{"changed": 1}', 'model-a')});
my $bob = $node->safe_psql('postgres', q{SELECT id FROM jobguard.jobs WHERE owner_id = 'bob'});
my $first = $node->safe_psql('postgres', "SELECT jobguard.begin_attempt($bob)");
($code, $out, $err) = $node->psql('postgres', "SELECT jobguard.begin_attempt($bob)");
$node->safe_psql('postgres', "SELECT jobguard.finish_attempt($first, '{\"no_name\": 1}')");
my $second = $node->safe_psql('postgres', "SELECT jobguard.begin_attempt($bob)");
$node->safe_psql('postgres', "SELECT jobguard.cancel_attempt($second, 'slow')");
my $third = $node->safe_psql('postgres', "SELECT jobguard.begin_attempt($bob)");
$node->safe_psql('postgres', "SELECT jobguard.finish_attempt($third, '{\"name\": \"Ada\"}')");
$node->safe_psql('postgres', "SELECT jobguard.finish_attempt($second, '{\"name\": \"Late\"}')");
is($node->safe_psql('postgres',
		q{SELECT string_agg(metric || '=' || value, ' ' ORDER BY metric) FROM jobguard.stats()
		   WHERE metric NOT LIKE 'jobs.%' AND metric NOT LIKE 'attempts.%'
		      AND metric NOT LIKE 'blocked.%'
		      OR metric = 'attempts.refused_in_flight'}),
	'attempts.refused_in_flight=1 finishes.lost=1 finishes.rejected=1 finishes.won=1'
	  . ' purge.jobs_deleted=0 reconciled=0 redrives=0 submits.created=1 submits.key_conflicts=1'
	  . ' submits.replayed=2 sweeper.marked_unknown=0',
	'every event counter moved as the calls were made');
is($node->safe_psql('plain', 'SELECT 1'), '1', 'the database without jobguard is untouched');

# Counters are per database and reset on demand.
$node->safe_psql('postgres', 'SELECT jobguard.stats_reset()');
is($node->safe_psql('postgres',
		q{SELECT sum(value) FROM jobguard.stats() WHERE metric LIKE 'submits.%' OR metric LIKE 'finishes.%'}),
	'0', 'stats_reset() sets the counters back to zero');

# Clean shutdown: no errors from the sweepers, not even in the database
# without the extension.
$node->stop('fast');
my $log = slurp_file($node->logfile);
# (the ERRORs of this test's own refused calls carry its application name)
my @problems = grep { !/003_preloaded\.pl/ }
  grep { /ERROR|PANIC|terminated by signal|exited with exit code [^1]/ } split /\n/, $log;
is(join("\n", @problems), '', 'the log shows no sweeper error and no crash');
unlike($log, qr/jobguard sweeper started for database "plain"/, 'no sweeper served the database without jobguard');
done_testing();
