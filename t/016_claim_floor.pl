# The claim floor (jobguard preloaded): claim() searches the index of jobs
# not yet succeeded or cancelled from the oldest job that can still be
# claimed, not from its start.  Jobs that finished leave dead entries at
# the start of that index until VACUUM; searched from the start, every
# claim steps over all of them.
#
# 1. With 20,000 finished jobs and autovacuum off, a claim reads a handful
#    of pages of that index preloaded, and every page of the 20,000 dead
#    entries without preload (the same claim, the same table: the test
#    sees the difference it is about).  Pages, not entries: a scan marks
#    the entries it finds dead, and later scans skip them without counting
#    them, but still read their pages.
# 2. The floor is computed by the sweeper; with it computed once and then
#    frozen (sweep_interval of an hour), every commit that makes an older
#    job runnable must lower it at once: a failed attempt, a cancelled
#    unknown attempt, a result rejected by the contract, and new jobs whose
#    ids start again from 1 (TRUNCATE ... RESTART IDENTITY).  Each such job
#    is claimed at once; with the floor left high it would not be.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $finished = 20000;

my $node = PostgreSQL::Test::Cluster->new('floor');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'jobguard'
jobguard.database = 'postgres'
jobguard.sweep_interval = '100ms'
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobguard;
	ALTER TABLE jobguard.jobs SET (autovacuum_enabled = off);
	ALTER TABLE jobguard.attempts SET (autovacuum_enabled = off);
	SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["ok"]}');
});

# pages of jobs_claim_order and jobs_run_order (claim's order since 1.2,
# bounded by the time floor) read by the statements of $sql (and their
# output)
sub claim_order_reads
{
	my ($sql) = @_;
	my $read = q{SELECT pg_stat_force_next_flush();
		SELECT sum(idx_blks_read + idx_blks_hit) FROM pg_statio_user_indexes
		 WHERE indexrelid IN ('jobguard.jobs_claim_order'::regclass, 'jobguard.jobs_run_order'::regclass)};
	my $before = $node->safe_psql('postgres', $read);
	my $out = $node->safe_psql('postgres', $sql);
	return ($node->safe_psql('postgres', $read) - $before, $out);
}

# ---------------------------------------------------------------- 1

$node->safe_psql('postgres', qq{
	SELECT count(*) FROM generate_series(0, $finished / 1000 - 1) b,
		LATERAL jobguard.submit_many(
			ARRAY(SELECT 'o' FROM generate_series(1, 1000) i),
			ARRAY(SELECT 'done-' || (b * 1000 + i) FROM generate_series(1, 1000) i),
			array_fill('charge'::text, ARRAY[1000]),
			array_fill('{}'::jsonb, ARRAY[1000]),
			array_fill('p'::text, ARRAY[1000])) s;
});
$node->safe_psql('postgres', q{
	DO $$
	BEGIN
		LOOP
			PERFORM jobguard.finish_attempt(c.attempt_id, '{"ok": true}')
			   FROM jobguard.claim('drain', max_jobs => 1000) c;
			EXIT WHEN NOT FOUND;
			COMMIT;
		END LOOP;
	END $$;
});
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobguard.job_overview WHERE state = 'succeeded'}),
	$finished, "$finished jobs claimed and finished");

# the sweeper computes the floor within its interval
my $claim_one = q{
	SELECT jobguard.submit('o', 'new-' || clock_timestamp(), 'charge', '{}', 'p');
	SELECT count(jobguard.finish_attempt(c.attempt_id, '{"ok": true}'))
	  FROM jobguard.claim('w', max_jobs => 10) c;
};
my ($reads, $got);
foreach my $try (1 .. 100)
{
	($reads, $got) = claim_order_reads($claim_one);
	last if $reads <= 15;
	sleep 0.1 if $try < 100;
}
is((split /\n/, $got)[-1], 1, 'preloaded: the claim took the job just submitted');
cmp_ok($reads, '<=', 15, "preloaded: submit, claim and finish read $reads pages of jobs_claim_order, not those of the $finished dead entries");

$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
$node->restart;
($reads, $got) = claim_order_reads($claim_one);
is((split /\n/, $got)[-1], 1, 'not preloaded: the claim took the job just submitted');
cmp_ok($reads, '>=', 40, "not preloaded: they read $reads pages, searching from the start");

# ---------------------------------------------------------------- 2

# Four jobs in flight (an hour's timeout), then the floor computed once
# and frozen: no claimable job, so it is the newest job's id, above the
# first three.
my ($j1, $j2, $j3) = split /\n/, $node->safe_psql('postgres', q{
	SELECT (jobguard.submit('o', 'f-' || i, 'charge', '{}', 'p')).job_id FROM generate_series(1, 4) i;
});
my %attempt = map { split /\|/ } split /\n/, $node->safe_psql('postgres', q{
	SELECT job_id, attempt_id FROM jobguard.claim('w', max_jobs => 4, timeout => '1 hour')});
is(scalar(keys %attempt), 4, 'four jobs claimed and left in flight');

$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'jobguard'
jobguard.sweep_interval = '1h'
});
$node->restart;
foreach my $try (1 .. 100)
{
	($reads, $got) = claim_order_reads(q{SELECT count(*) FROM jobguard.claim('w', max_jobs => 10)});
	last if $reads <= 5;
	sleep 0.1;
}
is($got, 0, 'nothing is claimable');
cmp_ok($reads, '<=', 5, "the floor is computed (above the jobs in flight: $reads pages read) and then left as it is");

# claim_after: run $sql, then claim: the job ids claimed
sub claim_after
{
	my ($sql) = @_;
	$node->safe_psql('postgres', $sql);
	return $node->safe_psql('postgres', q{
		SELECT string_agg(job_id::text, ',' ORDER BY job_id) FROM jobguard.claim('w', max_jobs => 10)});
}

is(claim_after("SELECT jobguard.fail_attempt($attempt{$j1}, 'HTTP 503', retry_in => '0 seconds')"),
	$j1, 'a failed attempt lowers the floor: its job is claimed at once');
is(claim_after("SELECT jobguard.mark_unknown($attempt{$j2}); SELECT jobguard.cancel_attempt($attempt{$j2}, 'checked: not done')"),
	$j2, 'a cancelled unknown attempt lowers the floor: its job is claimed at once');
is(claim_after("SELECT jobguard.finish_attempt($attempt{$j3}, '{\"no\": 1}')"),
	$j3, 'a result the contract rejects lowers the floor: its job is claimed at once');
is(claim_after(q{
	TRUNCATE jobguard.attempts, jobguard.jobs RESTART IDENTITY;
	SELECT jobguard.submit('o', 'again', 'charge', '{}', 'p');}),
	1, 'a new job with an id below the floor (identity restarted) is claimed at once');
is($node->safe_psql('postgres', 'SELECT count(*) FROM jobguard.check_invariants()'),
	0, 'check_invariants() is empty');

$node->stop;
done_testing();
