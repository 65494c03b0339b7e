# The worker side through the proxy (jobguard_proxy 1.1), on two shards:
# submit_many splits a batch by owner and returns the rows in input order,
# numbered as given (refusals and in-batch replays included); claim takes
# jobs from a named shard, or from the shards in turn until max_jobs;
# heartbeat and fail_attempt(retry_in) reach the attempt's shard;
# define_operation sets the retry policy on every shard; finish_many (1.2)
# sends each result to its attempt's shard; a failover route (1.3) set on
# every shard moves a refused job to its certified fallback, claim's
# providers and failover pass through, and a pause reaches every shard.
# Also: a 1.0 proxy updates to 1.3.
#
# Needs the plproxy and jobguard_proxy extensions installed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $n = 2;
my @shards;
for my $k (0 .. $n - 1)
{
	my $node = PostgreSQL::Test::Cluster->new("shard$k");
	$node->init;
	$node->start;
	$node->safe_psql('postgres', "CREATE DATABASE shard$k");
	$node->safe_psql("shard$k",
		"CREATE EXTENSION jobguard; SELECT jobguard.configure_shard($k, $n);");
	push @shards, $node;
}
my $proxy = PostgreSQL::Test::Cluster->new('proxy');
$proxy->init;
$proxy->start;
my $connstrs = join(', ',
	map { "'host=" . $shards[$_]->host . ' port=' . $shards[$_]->port . " dbname=shard$_'" } 0 .. $n - 1);

# a 1.0 proxy updates to 1.1
$proxy->safe_psql('postgres', "CREATE DATABASE updated");
$proxy->safe_psql('updated', qq{
SET client_min_messages = warning;
CREATE EXTENSION plproxy;
CREATE EXTENSION jobguard_proxy VERSION '1.0';
ALTER EXTENSION jobguard_proxy UPDATE;
});
is($proxy->safe_psql('updated',
		q{SELECT extversion FROM pg_extension WHERE extname = 'jobguard_proxy'}),
	'1.3', 'a 1.0 proxy updates to 1.3, through 1.1 and 1.2');
is($proxy->safe_psql('updated', q{
	SELECT string_agg(p.oid::regprocedure::text, ' ' ORDER BY 1) FROM pg_proc p
	 WHERE p.pronamespace = 'jobguard'::regnamespace
	   AND p.proname IN ('claim', 'heartbeat', 'submit_many', 'fail_attempt', 'define_operation')}),
	$proxy->safe_psql('postgres', q{
	SET client_min_messages = warning;
	CREATE EXTENSION jobguard_proxy CASCADE;
	SELECT string_agg(p.oid::regprocedure::text, ' ' ORDER BY 1) FROM pg_proc p
	 WHERE p.pronamespace = 'jobguard'::regnamespace
	   AND p.proname IN ('claim', 'heartbeat', 'submit_many', 'fail_attempt', 'define_operation')}),
	'the updated proxy has the functions of a fresh install');
$proxy->safe_psql('postgres', "SELECT jobguard.configure_proxy($connstrs); CREATE USER MAPPING FOR CURRENT_USER SERVER jobguard_shards;");

sub proxy { return $proxy->safe_psql('postgres', $_[0]); }

sub proxy_error
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $proxy->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return $ret == 0 ? "(no error; returned '$out')" : $err;
}

# owners that land on shard 0 and on shard 1
my %owner;
for my $i (1 .. 100)
{
	my $k = proxy("SELECT jobguard.route_owner('owner-$i') & ($n - 1)");
	$owner{$k} //= "owner-$i";
	last if keys %owner == $n;
}
my ($o0, $o1) = ($owner{0}, $owner{1});

# ------------------------------------------------------------- submit_many

my $rows = proxy(qq{
	SELECT string_agg(format('%s:%s:%s:%s', ord, created, coalesce(sqlstate, '-'),
							 coalesce(job_id % $n, -1)), ' ' ORDER BY ord)
	  FROM jobguard.submit_many(
		ARRAY['$o0', '$o1', '$o0', '$o1', NULL, '$o1', '$o0'],
		ARRAY['a', 'b', 'c', 'b', 'e', 'f', 'a'],
		ARRAY['render', 'render', 'render', 'render', 'render', 'render', 'render'],
		ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 2}', '{}', '{"n": 6}', '{"n": 9}']::jsonb[],
		ARRAY['p', 'p', 'p', 'p', 'p', 'p', 'p'])});
is($rows,
	"1:t:-:0 2:t:-:1 3:t:-:0 4:f:-:1 5:f:22004:-1 6:t:-:1 7:f:JG001:0",
	'submit_many: rows in input order, each job on its owner\'s shard, replay and refusals in place');
like(proxy(q{SELECT message FROM jobguard.submit_many(ARRAY['', NULL], ARRAY['k', 'k'],
		ARRAY['render', 'render'], ARRAY['{}', '{}']::jsonb[], ARRAY['p', 'p']) WHERE ord = 2}),
	qr/^owner_id of request 2 must not be null$/, 'a refused row names its request by its input number');
like(proxy_error(q{SELECT * FROM jobguard.submit_many(ARRAY['a'], ARRAY['k', 'l'], ARRAY['op'],
		ARRAY['{}']::jsonb[], ARRAY['p'])}),
	qr/22023/, 'submit_many: unequal arrays are 22023 for the whole call');
is(proxy(q{SELECT count(*) FROM jobguard.submit_many('{}', '{}', '{}', '{}', '{}')}), 0,
	'submit_many: an empty batch');

# ------------------------------------------------------------- claim

# four runnable jobs: a, c on shard 0; b, f on shard 1
is(proxy(q{SELECT string_agg((job_id % 2)::text, ',' ORDER BY job_id) FROM jobguard.claim('w1', shard => 1, max_jobs => 10)}),
	'1,1', 'claim(shard => 1) takes the jobs of shard 1 only');
my $got = proxy(q{SELECT string_agg((job_id % 2)::text, ',' ORDER BY job_id) FROM jobguard.claim('w2', max_jobs => 10)});
is($got, '0,0', 'claim without a shard goes on to the next shard while it has fewer than max_jobs');
is(proxy(q{SELECT count(*) FROM jobguard.claim('w3', max_jobs => 10)}), 0, 'then nothing is runnable anywhere');
proxy(qq{SELECT count(*) FROM jobguard.submit_many(ARRAY['$o0', '$o1'], ARRAY['g', 'h'],
	ARRAY['render', 'render'], ARRAY['{}', '{}']::jsonb[], ARRAY['p', 'p'])});
my @turns = map { proxy(q{SELECT string_agg((job_id % 2)::text, ',') FROM jobguard.claim('w4')}) } 1 .. 2;
is(join(' ', sort @turns), '0 1', 'one job per call: the shards take turns');
is(proxy(q{SELECT count(*) FROM jobguard.claim('w5', wait => '200 milliseconds')}), 0,
	'claim with wait returns nothing when nothing comes');
like(proxy_error(q{SELECT * FROM jobguard.claim('w', wait => '-1 second')}), qr/22023/,
	'a negative wait is 22023');

# ------------------------------------------------------------- heartbeat, backoff

my $attempt = $shards[1]->safe_psql('shard1',
	q{SELECT attempt_id FROM jobguard.attempt_overview WHERE worker = 'w1' ORDER BY 1 LIMIT 1});
ok(proxy(qq{SELECT jobguard.heartbeat($attempt, '1 hour') > now() + interval '59 minutes'}) eq 't',
	'heartbeat through the proxy extends the attempt on its shard');
proxy(q{SELECT jobguard.define_operation('render', '{}', '1 minute', '10 minutes')});
is(join(',', map { $shards[$_]->safe_psql("shard$_", q{SELECT retry_backoff FROM jobguard.operations}) } 0 .. $n - 1),
	'00:01:00,00:01:00', 'define_operation sets the retry policy on every shard');
proxy(qq{SELECT jobguard.fail_attempt($attempt, 'busy', retry_in => '5 minutes')});
is($shards[1]->safe_psql('shard1', qq{
	SELECT j.not_before > now() + interval '4 minutes' FROM jobguard.jobs j
	  JOIN jobguard.attempts a ON a.job_id = j.id WHERE a.id = $attempt}),
	't', 'fail_attempt(retry_in) through the proxy holds the job back on its shard');
is(proxy(q{SELECT count(*) FROM jobguard.claim('w6', shard => 1)}), 0,
	'claim honours the backoff on the shard');

# ------------------------------------------------------------- finish_many

# open attempts of the claims above: two on shard 0, one on shard 1
my ($a0, $b0) = split /\n/, $shards[0]->safe_psql('shard0',
	q{SELECT attempt_id FROM jobguard.attempt_overview WHERE state = 'started' ORDER BY 1 LIMIT 2});
my ($a1) = $shards[1]->safe_psql('shard1',
	q{SELECT attempt_id FROM jobguard.attempt_overview WHERE state = 'started' ORDER BY 1 LIMIT 1});
ok($a0 && $b0 && $a1, 'open attempts on both shards to finish');
is(proxy(qq{
	SELECT string_agg(format('%s:%s:%s:%s', ord, coalesce(attempt_id::text, '-'),
							 coalesce(outcome, '-'), coalesce(sqlstate, '-')), ' ' ORDER BY ord)
	  FROM jobguard.finish_many(ARRAY[$a1, $a0, NULL, $a1, $b0, $a0],
								ARRAY['{"n": 1}', '{"n": 2}', '{}', '{"n": 1}', '{"n": 3}', '{"n": 9}']::jsonb[])}),
	"1:$a1:won:- 2:$a0:won:- 3:-:-:22004 4:$a1:won:- 5:$b0:won:- 6:$a0:-:JG007",
	'finish_many: each element on its shard, rows in input order, repeats decided by the first');
like(proxy(q{SELECT message FROM jobguard.finish_many(ARRAY[NULL, 1]::bigint[], ARRAY['{}', NULL]::jsonb[]) WHERE ord = 2}),
	qr/^element 2 of /, 'finish_many: a shard\'s message names the element as numbered in the input');
is($shards[0]->safe_psql('shard0', qq{SELECT result FROM jobguard.jobs j JOIN jobguard.attempts a ON a.job_id = j.id WHERE a.id = $a0}),
	'{"n": 2}', 'finish_many: the result is on the attempt\'s shard');
like(proxy_error(q{SELECT * FROM jobguard.finish_many(ARRAY[1], '{}')}), qr/22023/,
	'finish_many: unequal arrays are 22023 for the whole call');
is(proxy(q{SELECT count(*) FROM jobguard.finish_many('{}', '{}')}), 0, 'finish_many: an empty batch');

# ------------------------------------------------------------- liveness (1.2)

# claim's provider key: the one the shard stored for the attempt
proxy(qq{SELECT count(*) FROM jobguard.submit_many(ARRAY['$o0', '$o1'], ARRAY['r0', 'r1'],
	ARRAY['mail', 'mail'], ARRAY['{}', '{}']::jsonb[], ARRAY['smtp', 'smtp'])});
my %claimed = map { split /\|/ } split /\n/,
	proxy(q{SELECT attempt_id || '|' || provider_key FROM jobguard.claim('w8', operations => '{mail}', timeout => '1 second', max_jobs => 2)});
is(scalar(keys %claimed), 2, 'claim through the proxy: one attempt per shard, each with its provider key');
for my $id (sort keys %claimed)
{
	is(proxy("SELECT jobguard.provider_key($id)"), $claimed{$id},
		"provider_key($id) through the proxy is the key claim returned");
}
# the policy on every shard, the limits divided among them
proxy(q{SELECT jobguard.set_provider_policy('smtp', dedupes_for => '1 day', max_in_flight => 5, max_per_second => 10)});
is(join(' ', map { $shards[$_]->safe_psql("shard$_",
		q{SELECT dedupes_for || ',' || max_in_flight || ',' || max_per_second FROM jobguard.provider_policies WHERE provider = 'smtp'}) } 0 .. $n - 1),
	'1 day,2,5 1 day,2,5', 'set_provider_policy: on every shard, the limits divided among them');
# the attempts go unknown; a reconciler leases them from both shards
sleep 2;
my @leased = split /\n/, proxy(q{SELECT attempt_id || ',' || redrivable FROM jobguard.claim_unknown('r', max_rows => 5)});
is(join(' ', sort @leased), join(' ', map { "$_,true" } sort keys %claimed),
	'claim_unknown through the proxy leases the unknown attempts of every shard, redrivable');
is(proxy(q{SELECT count(*) FROM jobguard.claim_unknown('r2', max_rows => 5)}), 0,
	'claim_unknown: another reconciler gets none while the leases last');
my ($first) = sort keys %claimed;
my $redriven = proxy("SELECT jobguard.redrive_attempt($first)");
ok($redriven =~ /^\d+$/ && $redriven != $first, 'redrive_attempt through the proxy begins a new attempt');
is(proxy("SELECT jobguard.provider_key($redriven)"), $claimed{$first}, 'the redrive sends the same provider key');
like(proxy_error("SELECT jobguard.redrive_attempt($first)"), qr/JG006/, 'a second redrive of the same attempt is JG006');

# ------------------------------------------------------------- failover (1.3)

# a route on every shard; the fallback certified on every shard
proxy(q{SELECT jobguard.certify_provider('pay', 'adyen')});
proxy(q{SELECT jobguard.set_failover('pay', '{adyen}')});
is(join(' ', map { $shards[$_]->safe_psql("shard$_",
		q{SELECT operation || ':' || providers::text || ':' || after_failures FROM jobguard.failover_routes}) } 0 .. $n - 1),
	'pay:{adyen}:1 pay:{adyen}:1', 'set_failover through the proxy: the route on every shard');
proxy(qq{SELECT count(*) FROM jobguard.submit_many(ARRAY['$o0', '$o1'], ARRAY['f0', 'f1'],
	ARRAY['pay', 'pay'], ARRAY['{}', '{}']::jsonb[], ARRAY['stripe', 'stripe'])});
is(proxy(q{SELECT string_agg(provider || ':' || failover, ' ') FROM jobguard.claim('w9', operations => '{pay}', max_jobs => 2)}),
	'stripe:false stripe:false', 'the first attempts run against the jobs\' own provider');
for my $k (0 .. $n - 1)
{
	$shards[$k]->safe_psql("shard$k", q{SELECT jobguard.fail_attempt(attempt_id, 'card declined')
		FROM jobguard.attempt_overview WHERE worker = 'w9' AND state = 'started'});
}
# an adyen worker through the proxy: each shard's route chooses adyen now
my %routed = map { split /\|/ } split /\n/,
	proxy(q{SELECT attempt_id || '|' || provider || ':' || failover FROM jobguard.claim('w10', operations => '{pay}', max_jobs => 2, providers => '{adyen}')});
is(join(' ', sort values %routed), 'adyen:true adyen:true',
	'claim(providers => ...) through the proxy: both jobs fail over to adyen, failover true');
for my $id (sort keys %routed)
{
	isnt(proxy("SELECT jobguard.provider_key($id)"),
		$shards[$id % $n]->safe_psql("shard" . ($id % $n), qq{SELECT provider_key FROM jobguard.attempts
			WHERE job_id = (SELECT job_id FROM jobguard.attempts WHERE id = $id) AND provider = 'stripe'}),
		"the fallback attempt $id has a key of its own");
}
like(proxy_error(q{SELECT * FROM jobguard.claim('w', provider => 'adyen', providers => '{adyen}')}), qr/22023/,
	'provider and providers at once: 22023 from the shard');
# a pause reaches every shard
proxy(q{SELECT jobguard.set_provider_policy('adyen', paused => true)});
is(join(' ', map { $shards[$_]->safe_psql("shard$_",
		q{SELECT paused FROM jobguard.provider_policies WHERE provider = 'adyen'}) } 0 .. $n - 1),
	't t', 'set_provider_policy(paused => true) through the proxy: paused on every shard');
proxy(q{SELECT jobguard.set_provider_policy('adyen', paused => false)});

$proxy->stop;
$_->stop for @shards;
done_testing();
