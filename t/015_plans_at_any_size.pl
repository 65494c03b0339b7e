# The SQL statements jobguard runs through SPI are planned once per backend
# and kept.  A plan made while the tables held a page or two (a new
# installation, or right after a TRUNCATE) must still be a plan of index
# lookups: otherwise it reads a whole table, or merge-joins through a whole
# index, at every call as the tables grow, until autovacuum's next ANALYZE.
# Nor may such a plan be JIT-compiled (about 7 ms per call for a statement
# that takes a few microseconds).
#
# Here every call of the API runs in a fresh backend right after the tables
# were analyzed nearly empty, with jit_above_cost = 0 in the session (JIT
# for anything the session itself plans), on both back ends; auto_explain
# shows each plan jobguard's statements ran with.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('plans');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobguard;
	SELECT jobguard.define_operation('charge', '{"type": "object"}');
	SELECT jobguard.certify_provider('charge', 'backup', '{"test": "plans"}');
});

# What a worker and its clients do, once each.  Every call that reads or
# writes by key, on a fresh job, so that none is answered early.
my $calls = q{
SELECT job_id AS j1 FROM jobguard.submit('o', 'k1', 'charge', '{"n": 1}', 'main') \gset
SELECT jobguard.submit('o', 'k1', 'charge', '{"n": 1}', 'main');
SELECT jobguard.begin_attempt(:j1) AS a1 \gset
SELECT jobguard.heartbeat(:a1, '1 minute');
SELECT jobguard.fail_attempt(:a1, 'timeout upstream');
SELECT jobguard.begin_attempt(:j1, 'backup') AS a2 \gset
SELECT jobguard.mark_unknown(:a2);
SELECT jobguard.cancel_attempt(:a2, 'operator checked the provider');
SELECT count(*) FROM jobguard.claim('w', max_jobs => 10);
SELECT job_id AS j2 FROM jobguard.submit('o', 'k2', 'charge', '{"n": 2}', 'main') \gset
SELECT count(jobguard.finish_attempt(c.attempt_id, '{"ok": true}')) FROM jobguard.claim('w', max_jobs => 10) c;
SELECT jobguard.finish_attempt(attempt_id, '{"ok": true}') FROM jobguard.attempt_overview
 WHERE job_id = :j1 AND state = 'started';
SELECT jobguard.job_state(:j2), jobguard.job(:j2) IS NOT NULL;
SELECT count(*) FROM jobguard.attempts_of(:j1);
SELECT count(*) FROM jobguard.submit_many(ARRAY['o', 'o'], ARRAY['k3', 'k1'], ARRAY['charge', 'charge'],
	ARRAY['{}', '{"n": 1}']::jsonb[], ARRAY['main', 'main']);
SELECT job_id AS j4 FROM jobguard.submit('o', 'k4', 'charge', '{}', 'main') \gset
SELECT jobguard.cancel_job(:j4, 'not wanted');
};

# The plans of the statements run inside jobguard's calls, as auto_explain
# logged them: [query text, plan].
sub nested_plans
{
	my ($log) = @_;
	my @plans;
	for my $entry (split /^\S*\s*LOG:\s+duration: [0-9.]+ ms\s+plan:\n/m, $log)
	{
		next unless $entry =~ /^\s*Query Text: (.*)$/m;
		my $query = $1;
		# a statement run inside a call says so in its CONTEXT
		push @plans, [ $query, $entry ] if $entry =~ /^CONTEXT:/m;
	}
	return @plans;
}

for my $fast_path ('on', 'off')
{
	$node->safe_psql('postgres', q{
		TRUNCATE jobguard.attempts, jobguard.jobs;
		SELECT jobguard.submit('seed', 's' || g, 'charge', '{}', 'main') FROM generate_series(1, 3) g;
		SELECT count(jobguard.finish_attempt(c.attempt_id, '{}')) FROM jobguard.claim('seed', max_jobs => 2) c;
		ANALYZE jobguard.jobs, jobguard.attempts;
	});
	my ($ret, $out, $err) = $node->psql('postgres', qq{
		SET jobguard.fast_path = $fast_path;
		LOAD 'auto_explain';
		SET auto_explain.log_min_duration = 0;
		SET auto_explain.log_nested_statements = on;
		SET jit_above_cost = 0;
		SET jit_inline_above_cost = -1;
		SET jit_optimize_above_cost = -1;
		SET client_min_messages = log;
		\\set ON_ERROR_STOP on
		\\set SHOW_CONTEXT always
		$calls
	});
	is($ret, 0, "fast_path = $fast_path: every call ran") or diag($err);

	# (the foreign key's check, SELECT 1 FROM ONLY ..., is PostgreSQL's own)
	my @plans = grep { $_->[0] =~ /jobguard\.(jobs|attempts)\b/ && $_->[0] !~ /^\s*SELECT 1 FROM ONLY/ }
		nested_plans($err);
	# the fast path runs the claim's two statements through SPI, the SQL
	# path nearly every statement
	cmp_ok(scalar(@plans), '>=', $fast_path eq 'on' ? 2 : 15,
		"fast_path = $fast_path: jobguard's statements were seen");
	my @bad;
	for my $p (@plans)
	{
		my ($query, $plan) = @$p;
		my @why = grep { $plan =~ /\Q$_\E/ } ('Seq Scan on jobs', 'Seq Scan on attempts',
			'Hash Join', 'Merge Join', 'JIT:');
		push @bad, substr($query, 0, 90) . ' ... (' . join(', ', @why) . ")\n$plan" if @why;
	}
	is(scalar(@bad), 0,
		"fast_path = $fast_path: plans made at a few rows read by index, without JIT ("
		  . scalar(@plans) . ' plans)')
	  or diag(join("\n", @bad));

	# and the session itself would have compiled: the test can see JIT
	my $jit = $node->safe_psql('postgres', q{SELECT pg_jit_available()});
	if ($jit eq 't')
	{
		like($err, qr/JIT:/, "fast_path = $fast_path: the session's own plans were JIT-compiled");
	}
	else
	{
		note('JIT is not available on this server: the JIT part checks nothing here');
	}
}

$node->stop;
done_testing();
