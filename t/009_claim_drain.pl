# Real clients drain a queue with claim(): 8 worker processes, each its own
# connection, claim up to 10 jobs at a time and finish them, until nothing
# is runnable.  5,000 jobs (submitted with submit_many) must end with
# exactly one succeeded attempt each, no worker may see an error (no
# JG002: claims pass over each other's jobs), and check_invariants() must
# be empty — once with the fast path, once with jobguard.fast_path = off.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $jobs = 5000;
my $workers = 8;

my $node = PostgreSQL::Test::Cluster->new('drain');
$node->init;
$node->append_conf('postgresql.conf', "max_connections = 40\n");
$node->start;

# one worker: claim, commit, finish each, commit; stop when a claim is empty
my $worker_sql = q{
DO $$
DECLARE
	ids bigint[];
	a bigint;
BEGIN
	LOOP
		ids := ARRAY(SELECT c.attempt_id FROM jobguard.claim(:'worker', max_jobs => 10) c);
		COMMIT;
		EXIT WHEN cardinality(ids) = 0;
		FOREACH a IN ARRAY ids LOOP
			PERFORM jobguard.finish_attempt(a, jsonb_build_object('by', :'worker'));
		END LOOP;
		COMMIT;
	END LOOP;
END
$$;
};
# psql substitutes :'worker' only outside dollar quotes: pass it in a GUC
$worker_sql =~ s/:'worker'/current_setting('jg.worker')/g;

foreach my $pass ('on', 'off')
{
	my $db = "drain_$pass";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION jobguard');
	$node->safe_psql($db, "ALTER DATABASE $db SET jobguard.fast_path = $pass");

	# 5,000 jobs in five calls of submit_many
	my $created = $node->safe_psql($db, qq{
		SELECT count(*) FILTER (WHERE s.created)
		  FROM generate_series(0, $jobs / 1000 - 1) b,
			   LATERAL jobguard.submit_many(
				 ARRAY(SELECT 'owner-' || (i % 97) FROM generate_series(b * 1000 + 1, b * 1000 + 1000) i),
				 ARRAY(SELECT 'key-' || i FROM generate_series(b * 1000 + 1, b * 1000 + 1000) i),
				 array_fill('noop'::text, ARRAY[1000]),
				 ARRAY(SELECT jsonb_build_object('i', i) FROM generate_series(b * 1000 + 1, b * 1000 + 1000) i),
				 array_fill('local'::text, ARRAY[1000])) s});
	is($created, $jobs, "fast path $pass: submit_many created $jobs jobs");
	is($node->safe_psql($db, 'SELECT jobguard.fast_path_status()') =~ /^$pass/ ? 1 : 0, 1,
		"fast path $pass: the sessions see jobguard.fast_path = $pass");

	my @runs;
	foreach my $w (1 .. $workers)
	{
		my ($out, $err) = ('', '');
		my $h = IPC::Run::start(
			[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db),
			  '-c', "SET jg.worker = 'worker-$w'", '-c', $worker_sql ],
			'>', \$out, '2>', \$err);
		push @runs, [ $h, \$out, \$err ];
	}
	my $errors = 0;
	foreach my $r (@runs)
	{
		$r->[0]->finish;
		if ($r->[0]->result != 0 || ${ $r->[2] } ne '')
		{
			$errors++;
			diag("worker failed: ${ $r->[2] }");
		}
	}
	is($errors, 0, "fast path $pass: $workers workers drained the queue without an error (no JG002)");

	is($node->safe_psql($db, q{
		SELECT count(*) FROM jobguard.jobs j
		 WHERE (SELECT count(*) FROM jobguard.attempts a
				 WHERE a.job_id = j.id AND a.state = 'succeeded') <> 1}),
		0, "fast path $pass: every job has exactly one succeeded attempt");
	is($node->safe_psql($db, q{SELECT count(*) FROM jobguard.attempts WHERE state <> 'succeeded'}),
		0, "fast path $pass: no other attempt was ever begun");
	is($node->safe_psql($db, q{SELECT count(*) FROM jobguard.job_overview WHERE state <> 'succeeded'}),
		0, "fast path $pass: every job succeeded");
	cmp_ok($node->safe_psql($db, q{SELECT count(DISTINCT worker) FROM jobguard.attempts}),
		'>', 1, "fast path $pass: the work was shared between workers");
	is($node->safe_psql($db, 'SELECT count(*) FROM jobguard.check_invariants()'),
		0, "fast path $pass: check_invariants() is empty");
}

$node->stop;
done_testing();
