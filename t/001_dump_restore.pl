# pg_dump and restore keep everything jobguard holds: jobs, attempts,
# results, lost results, contracts and certifications.  After a restore an
# old key still replays to its old job, and new jobs get fresh ids.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dump');
$node->init;
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
CREATE EXTENSION jobguard;
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"]}');
SELECT jobguard.certify_provider('charge', 'adyen', '{"suite": "charge-v3", "passed": 48}');

-- a job won by a fallback, with a late primary result that lost
SELECT job_id AS j FROM jobguard.submit('alice', 'order-1', 'charge', '{"amount": 100}', 'stripe') \gset
SELECT jobguard.begin_attempt(:j, timeout => '1 hour') AS a1 \gset
SELECT jobguard.mark_unknown(:a1);
SELECT jobguard.cancel_attempt(:a1, 'stripe stalled');
SELECT jobguard.begin_attempt(:j, 'adyen') AS a2 \gset
SELECT jobguard.finish_attempt(:a2, '{"id": "ady_1"}');
SELECT jobguard.finish_attempt(:a1, '{"id": "ch_late"}');
-- a rejected result, then a failure
SELECT job_id AS j FROM jobguard.submit('alice', 'order-2', 'charge', '{"amount": 5}', 'stripe', 3) \gset
SELECT jobguard.begin_attempt(:j) AS a \gset
SELECT jobguard.finish_attempt(:a, '{"no_id": true}');
SELECT jobguard.begin_attempt(:j) AS a \gset
SELECT jobguard.fail_attempt(:a, 'card declined');
-- a cancelled job, a running one, a pending one
SELECT job_id AS j FROM jobguard.submit('bob', 'order-1', 'charge', '{"amount": 7}', 'stripe') \gset
SELECT jobguard.cancel_job(:j, 'customer cancelled');
SELECT job_id AS j FROM jobguard.submit('bob', 'order-2', 'charge', '{"amount": 8}', 'stripe') \gset
SELECT jobguard.begin_attempt(:j, timeout => '1 hour', attempt_key => 'worker-1');
SELECT jobguard.submit('carol', 'order-1', 'refund', '[1, 2, 3]', 'stripe');
SELECT jobguard.revoke_provider('charge', 'adyen');
SELECT jobguard.certify_provider('charge', 'worldpay');
});

# Everything jobguard stores, as one canonical text.
my $everything = q{
SELECT string_agg(t, E'\n') FROM (
  SELECT 'job ' || j::text AS t FROM jobguard.jobs j
  UNION ALL SELECT 'attempt ' || a::text FROM jobguard.attempts a
  UNION ALL SELECT 'operation ' || o::text FROM jobguard.operations o
  UNION ALL SELECT 'certification ' || c::text FROM jobguard.certifications c
  ORDER BY 1) s
};
my $before = $node->safe_psql('app', $everything);
like($before, qr/ch_late/, 'the lost result is stored before the dump');

my $dump = PostgreSQL::Test::Utils::tempdir() . '/app.dump';
$node->command_ok(
	[ 'pg_dump', '--format=custom', '--file', $dump, $node->connstr('app') ],
	'pg_dump of a database using jobguard');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '--dbname', $node->connstr('restored'), $dump ],
	'pg_restore into a new database');

my $after = $node->safe_psql('restored', $everything);
is($after, $before, 'jobs, attempts, results, lost results, contracts and certifications all restored');
is($node->safe_psql('restored', 'SELECT count(*) FROM jobguard.check_invariants()'),
	'0', 'every invariant holds after the restore');

# an old key replays to its old job
is($node->safe_psql('restored',
		q{SELECT job_id || ' ' || created FROM jobguard.submit('alice', 'order-1', 'charge', '{"amount": 100}', 'stripe')}),
	$node->safe_psql('app', q{SELECT id || ' false' FROM jobguard.jobs WHERE owner_id = 'alice' AND idempotency_key = 'order-1'}),
	'a replay of an old key returns the old job');
my ($code, $out, $err) = $node->psql('restored',
	q{SELECT jobguard.submit('alice', 'order-1', 'charge', '{"amount": 999}', 'stripe')});
like($err, qr/already used for a different request/, 'a changed request for an old key is still a conflict');

# new jobs and attempts get fresh ids: the id sequence they share came along
my $max_job = $node->safe_psql('restored', 'SELECT max(id) FROM jobguard.jobs');
my $max_attempt = $node->safe_psql('restored', 'SELECT max(id) FROM jobguard.attempts');
my $new_job = $node->safe_psql('restored',
	q{SELECT job_id FROM jobguard.submit('dave', 'order-1', 'charge', '{}', 'stripe') WHERE created});
cmp_ok($new_job, '>', $max_job, 'a new job gets an id above every restored one');
my $new_attempt = $node->safe_psql('restored', "SELECT jobguard.begin_attempt($new_job)");
cmp_ok($new_attempt, '>', $max_attempt, 'a new attempt gets an id above every restored one');

# the restored contract, certifications and gate are in force
is($node->safe_psql('restored', "SELECT jobguard.finish_attempt($new_attempt, '{\"wrong\": 1}')"),
	'rejected', 'the restored contract rejects a breaking result');
($code, $out, $err) = $node->psql('restored', "SELECT jobguard.begin_attempt($new_job, 'adyen')");
like($err, qr/not certified/, 'the revoked certification stays revoked');
like($node->safe_psql('restored', "SELECT jobguard.begin_attempt($new_job, 'worldpay')"),
	qr/^\d+$/, 'the restored certification lets the fallback begin');
my $running = $node->safe_psql('restored',
	q{SELECT job_id FROM jobguard.job_overview WHERE owner_id = 'bob' AND idempotency_key = 'order-2'});
($code, $out, $err) = $node->psql('restored', "SELECT jobguard.begin_attempt($running)");
like($err, qr/already has an attempt in flight/, 'the restored open attempt still closes the gate');
is($node->safe_psql('restored',
		"SELECT jobguard.begin_attempt($running, timeout => '1 hour', attempt_key => 'worker-1') IS NOT NULL"),
	't', 'its worker can still replay its begin');

$node->stop;
done_testing();
