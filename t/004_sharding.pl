# Scaling out: four shards behind a PL/Proxy proxy (the jobguard_proxy
# extension).  Through the proxy, the design's breakpoints hold as on one
# database: a double-click from several clients is one job, a changed
# request is JG001, a timed-out attempt is unknown and keeps the gate shut
# (JG002), and after a cancel and a fallback the reverse-order finish has
# exactly one winner.  Each owner's jobs live on exactly one shard, and the
# owners spread over all four.  A stopped shard fails the calls of its own
# owners with a clear error while the others go on; after its restart
# everything is intact.
#
# Needs the plproxy and jobguard_proxy extensions installed (make test
# installs them); it installs nothing itself.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $n = 4;

# ------------------------------------------------------------- set-up

my @shards;
for my $k (0 .. $n - 1)
{
	my $node = PostgreSQL::Test::Cluster->new("shard$k");
	$node->init;
	$node->start;
	# the database is named after the shard, so that errors name it
	$node->safe_psql('postgres', "CREATE DATABASE shard$k");
	$node->safe_psql("shard$k",
		"CREATE EXTENSION jobguard; SELECT jobguard.configure_shard($k, $n);");
	push @shards, $node;
}

my $proxy = PostgreSQL::Test::Cluster->new('proxy');
$proxy->init;
$proxy->start;
my $available = $proxy->safe_psql('postgres',
	q{SELECT string_agg(name, ',' ORDER BY name) FROM pg_available_extensions
	   WHERE name IN ('plproxy', 'jobguard_proxy')});
is($available, 'jobguard_proxy,plproxy', 'plproxy and jobguard_proxy are installed')
  or BAIL_OUT('install postgresql-15-plproxy and the proxy extension (make -C proxy install)');

my $connstrs = join(', ',
	map { "'host=" . $shards[$_]->host . ' port=' . $shards[$_]->port . " dbname=shard$_ connect_timeout=5'" }
	  0 .. $n - 1);
$proxy->safe_psql('postgres', qq{
SET client_min_messages = warning;
CREATE EXTENSION jobguard_proxy CASCADE;
SELECT jobguard.configure_proxy($connstrs);
-- no mapping for PUBLIC: the test's superuser gets one of its own, as the
-- same role on the shards (which trust it); t/006 maps client roles
CREATE USER MAPPING FOR CURRENT_USER SERVER jobguard_shards;
});
is($proxy->safe_psql('postgres',
		'SELECT string_agg(format($$%s:%s/%s:%s$$, partition, shard_no, shard_count, ok), $$ $$ ORDER BY partition) FROM jobguard.check_shards()'),
	join(' ', map { "$_:$_/$n:t" } 0 .. $n - 1),
	'check_shards: partition k is shard k of 4');

# proxy: run SQL on the proxy; returns stdout, dies on error
sub proxy { return $proxy->safe_psql('postgres', $_[0]); }

# proxy_error: run SQL on the proxy that must fail; returns stderr (with
# the SQLSTATE, VERBOSITY verbose)
sub proxy_error
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $proxy->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return $ret == 0 ? "(no error; returned '$out')" : $err;
}

# shard_of: the shard PL/Proxy routes an owner to
sub shard_of
{
	return proxy("SELECT jobguard.route_owner('$_[0]') & ($n - 1)");
}

# on_shard: run SQL on shard k directly
sub on_shard
{
	my ($k, $sql) = @_;
	return $shards[$k]->safe_psql("shard$k", $sql);
}

# ------------------------------------------------------ the double-click

# Eight clients submit the same request at the same moment: they queue on
# an advisory lock held by a ninth session, which then lets them all go.
my ($lock_in, $lock_out, $lock_err) = ('', '', '');
my $lock = IPC::Run::start(
	[ 'psql', '-X', '-At', '-d', $proxy->connstr('postgres') ],
	'<', \$lock_in, '>', \$lock_out, '2>', \$lock_err);
$lock_in .= "SELECT 'locked' FROM pg_advisory_lock(4242);\n";
my $timeout = IPC::Run::timer($PostgreSQL::Test::Utils::timeout_default);
$lock->pump until $lock_out =~ /locked/ || $timeout->is_expired;
like($lock_out, qr/locked/, 'the starting gate is closed');

my $clients = 8;
my @clicks;
for my $c (1 .. $clients)
{
	my %click = (out => '', err => '');
	$click{handle} = IPC::Run::start(
		[
			'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1',
			'-d', $proxy->connstr('postgres'),
			'-c', 'SELECT pg_advisory_lock_shared(4242)',
			'-c', q{SELECT job_id || ' ' || created FROM jobguard.submit('dana', 'checkout-1', 'charge', '{"amount": 4200}', 'stripe')}
		],
		'>', \$click{out}, '2>', \$click{err});
	push @clicks, \%click;
}
ok($proxy->poll_query_until('postgres',
		"SELECT count(*) = $clients FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"),
	"all $clients clients wait at the gate");
$lock_in .= "SELECT pg_advisory_unlock(4242);\n\\q\n";
$lock->finish;

my %job_ids;
my ($created, $errors) = (0, '');
for my $click (@clicks)
{
	$click->{handle}->finish;
	$errors .= $click->{err};
	if ($click->{out} =~ /^(\d+) (true|false)$/m)
	{
		$job_ids{$1}++;
		$created++ if $2 eq 'true';
	}
}
is($errors, '', 'no client of the double-click saw an error');
is(scalar(keys %job_ids), 1, 'all clients got the same job');
is((values %job_ids)[0], $clients, "all $clients clients got an answer");
is($created, 1, 'exactly one client saw created = true');
my ($dana_job) = keys %job_ids;
my $dana_shard = shard_of('dana');
is($dana_job % $n, $dana_shard, "the job id names the owner's shard ($dana_shard)");
is(join(',', map { on_shard($_, q{SELECT count(*) FROM jobguard.jobs WHERE owner_id = 'dana'}) } 0 .. $n - 1),
	join(',', map { $_ == $dana_shard ? 1 : 0 } 0 .. $n - 1),
	"one job, on the owner's shard only");

# -------------------------------------------------- errors keep SQLSTATE

my $err = proxy_error(
	q{SELECT * FROM jobguard.submit('dana', 'checkout-1', 'charge', '{"amount": 9999}', 'stripe')});
like($err, qr/\bJG001\b/, 'a changed request through the proxy is JG001');
like($err, qr/already used for a different request/, 'with the message of the shard');
like($err, qr/DETAIL:.*Job $dana_job was submitted with this key/, 'and its detail');
is(on_shard($dana_shard, q{SELECT params->>'amount' FROM jobguard.jobs WHERE owner_id = 'dana'}),
	'4200', 'the existing job is untouched');

like(proxy_error(q{SELECT * FROM jobguard.submit(NULL, 'k', 'charge', '{}', 'stripe')}),
	qr/\b22004\b.*owner_id/, 'a NULL owner_id is 22004, not a routing error');
like(proxy_error(q{SELECT * FROM jobguard.submit('dana', repeat('k', 256), 'charge', '{}', 'stripe')}),
	qr/\b22023\b/, 'a too long key is 22023');
like(proxy_error('SELECT jobguard.begin_attempt(NULL)'),
	qr/\b22004\b.*job_id/, 'a NULL job_id is 22004');
like(proxy_error('SELECT jobguard.finish_attempt(NULL, $${}$$)'),
	qr/\b22004\b.*attempt_id/, 'a NULL attempt_id is 22004');
my $missing = $dana_job + 1000 * $n;
like(proxy_error("SELECT jobguard.job_state($missing)"), qr/\bJG008\b/, 'an unknown job is JG008');
like(proxy_error("SELECT jobguard.finish_attempt($missing, '{}')"), qr/\bJG009\b/,
	'an unknown attempt is JG009');

# ------------------------------------------- contracts go to every shard

proxy(q{
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["id"]}');
SELECT jobguard.certify_provider('charge', 'adyen', '{"suite": "charge-v3"}');
});
is(join(',', map { on_shard($_,
		q{SELECT count(*) FROM jobguard.certification_overview WHERE provider = 'adyen' AND certified}) } 0 .. $n - 1),
	join(',', (1) x $n), 'certify_provider reached every shard');
is(join(',', map { on_shard($_, q{SELECT output_contract FROM jobguard.operations WHERE operation = 'charge'}) } 0 .. $n - 1),
	join(',', ('{"type": "object", "required": ["id"]}') x $n), 'define_operation reached every shard');
is(proxy(q{SELECT jobguard.check_result('charge', '{"no_id": 1}')}),
	'$: missing required key "id"', 'check_result through the proxy');
like(proxy_error(q{SELECT jobguard.define_operation('charge', '{"format": "x"}')}),
	qr/\b22023\b/, 'a malformed contract is 22023');

# ----------------------------------------- the gate, and the reverse race

my $a1 = proxy("SELECT jobguard.begin_attempt($dana_job, timeout => '1 second', attempt_key => 'worker-1')");
is($a1 % $n, $dana_shard, "the attempt id names the job's shard");
is(proxy("SELECT jobguard.begin_attempt($dana_job, attempt_key => 'worker-1')"), $a1,
	'a worker repeating its own begin gets its own attempt');
ok($proxy->poll_query_until('postgres', "SELECT jobguard.job_state($dana_job) = 'unknown'"),
	'after its 1 s timeout the job is unknown');
$err = proxy_error("SELECT jobguard.begin_attempt($dana_job, 'adyen')");
like($err, qr/\bJG002\b/, 'a second begin while the first is unknown is JG002');
like($err, qr/DETAIL:.*unknown/, 'naming the open attempt as unknown');

is(proxy("SELECT jobguard.cancel_attempt($a1, 'stripe stalled; failing over')"), 'cancelled',
	'an operator cancels the stalled attempt');
like(proxy_error("SELECT jobguard.begin_attempt($dana_job, 'worldpay')"), qr/\bJG004\b/,
	'an uncertified fallback is JG004');
my $a2 = proxy("SELECT jobguard.begin_attempt($dana_job, 'adyen')");
ok($a2 =~ /^\d+$/ && $a2 != $a1, 'the certified fallback begins');
is(proxy(qq{SELECT jobguard.finish_attempt($a2, '{"id": "ady_77"}')}), 'won', 'the fallback finishes first and wins');
is(proxy(qq{SELECT jobguard.finish_attempt($a1, '{"id": "ch_13"}')}), 'lost', 'the late primary loses');
is(proxy(qq{SELECT jobguard.finish_attempt($a1, '{"id": "ch_13"}')}), 'lost', 'and repeating its report changes nothing');
is(proxy("SELECT state || ' ' || version || ' ' || completed_by || ' ' || result FROM jobguard.job($dana_job)"),
	qq{succeeded 2 $a2 {"id": "ady_77"}}, 'job(): one winner, its result');
is(proxy("SELECT string_agg(attempt_no || ' ' || provider || ' ' || state || ' ' || coalesce(lost_to::text, '-') || ' ' || coalesce(lost_result::text, '-'), '; ' ORDER BY attempt_no) FROM jobguard.attempts_of($dana_job)"),
	qq{1 stripe lost $a2 {"id": "ch_13"}; 2 adyen succeeded - -}, 'attempts_of(): the loser keeps its result for the refund');
is(proxy("SELECT jobguard.await($dana_job, '1 second')"), 'succeeded', 'await through the proxy');
like(proxy_error("SELECT jobguard.begin_attempt($dana_job)"), qr/\bJG003\b/, 'the job is closed (JG003)');

# ------------------------------------------- owners and their shards

my $owners = 200;
proxy(qq{
SELECT count(*) FROM generate_series(1, $owners) i, generate_series(1, 2) k,
	LATERAL jobguard.submit('owner-' || i, 'key-' || k, 'charge', jsonb_build_object('i', i, 'k', k), 'stripe') s;
});
my %expected = split /[|\n]/,
  proxy(qq{SELECT 'owner-' || i, jobguard.route_owner('owner-' || i) & ($n - 1) FROM generate_series(1, $owners) i});
my (%found, @per_shard, $misplaced_ids);
for my $k (0 .. $n - 1)
{
	my $rows = on_shard($k, q{SELECT owner_id, count(*) FROM jobguard.jobs WHERE owner_id LIKE 'owner-%' GROUP BY owner_id});
	for my $row (split /\n/, $rows)
	{
		my ($owner, $count) = split /\|/, $row;
		push @{ $found{$owner} }, "$k:$count";
	}
	$per_shard[$k] = $rows eq '' ? 0 : scalar(split /\n/, $rows);
	$misplaced_ids .= on_shard($k, "SELECT string_agg(id::text, ',') FROM jobguard.jobs WHERE id % $n <> $k")
	  . on_shard($k, "SELECT string_agg(id::text, ',') FROM jobguard.attempts WHERE id % $n <> $k");
}
my @wrong = grep { !$found{$_} || @{ $found{$_} } != 1 || $found{$_}[0] ne "$expected{$_}:2" } keys %expected;
is(scalar(@wrong), 0, "each of $owners owners has both jobs on exactly its own shard")
  or diag('misplaced: ' . join(', ', map { "$_ => " . join('/', @{ $found{$_} || [] }) } @wrong[ 0 .. ($#wrong < 4 ? $#wrong : 4) ]));
ok((grep { $_ >= 20 } @per_shard) == $n, 'the owners spread over all four shards (' . join(', ', @per_shard) . ')');
is($misplaced_ids, '', 'on shard k every job and attempt id is k modulo 4');

# --------------------------------------------------- a shard goes down

my $down = $dana_shard;
my @down_owners = grep { $expected{$_} == $down } sort keys %expected;
my @up_owners = grep { $expected{$_} != $down } sort keys %expected;
my $jobs_on_down = 'SELECT id, owner_id, idempotency_key, version, completed_by FROM jobguard.jobs ORDER BY id';
my $jobs_before = on_shard($down, $jobs_on_down);

$shards[$down]->stop('fast');
$err = proxy_error(qq{SELECT * FROM jobguard.submit('$down_owners[0]', 'key-3', 'charge', '{}', 'stripe')});
like($err, qr/jobguard\.submit.*connection to server .* failed/s,
	"a submit for an owner of the stopped shard $down fails with a connection error");
$err = proxy_error("SELECT jobguard.job_state($dana_job)");
like($err, qr/connection to server .* failed/, 'so does a call for a job on it');

my $up_job = proxy(qq{SELECT job_id FROM jobguard.submit('$up_owners[0]', 'key-3', 'charge', '{}', 'stripe')});
like($up_job, qr/^\d+$/, 'other owners still submit');
my $up_attempt = proxy("SELECT jobguard.begin_attempt($up_job)");
is(proxy(qq{SELECT jobguard.finish_attempt($up_attempt, '{"id": "while-down"}')}), 'won',
	'and run their jobs to the end');
is(proxy(q{SELECT count(*) FROM (SELECT jobguard.submit(o, 'key-4', 'charge', '{}', 'stripe') FROM unnest(ARRAY[}
		. join(',', map { "'$_'" } @up_owners[ 0 .. 19 ]) . q{]::text[]) o) s}),
	'20', 'twenty more owners on the other shards submit');

$shards[$down]->start;
is(on_shard($down, $jobs_on_down), $jobs_before, 'the restarted shard kept every job as it was');
is(proxy(q{SELECT count(*) FILTER (WHERE NOT created) || ' of ' || count(*) FROM unnest(ARRAY[}
		. join(',', map { "'$_'" } @down_owners) . q{]) o, generate_series(1, 2) k,
		LATERAL jobguard.submit(o, 'key-' || k, 'charge', jsonb_build_object('i', substr(o, 7)::int, 'k', k), 'stripe') s}),
	2 * scalar(@down_owners) . ' of ' . 2 * scalar(@down_owners),
	'every earlier job of its owners replays (created = false) through the proxy');
is(proxy("SELECT state FROM jobguard.job($dana_job)"), 'succeeded', 'the double-clicked job is intact');
my $new_job = proxy(qq{SELECT job_id FROM jobguard.submit('$down_owners[0]', 'key-3', 'charge', '{}', 'stripe')});
is($new_job % $n, $down, 'its owners submit new jobs again, on their shard');

for my $k (0 .. $n - 1)
{
	is(on_shard($k, q{SELECT coalesce(string_agg(invariant || ': ' || detail, '; '), '') FROM jobguard.check_invariants()}),
		'', "check_invariants() is empty on shard $k");
}
is(proxy('SELECT count(*) FROM jobguard.check_invariants()'), '0', 'and through the proxy');

$proxy->stop;
$_->stop for @shards;
done_testing();
