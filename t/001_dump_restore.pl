# pg_dump and restore keep everything jobguard holds: jobs, attempts,
# results, lost results, contracts and certifications.  After a restore an
# old key still replays to its old job, and new jobs get fresh ids.
# Operator actions and refund records (1.3) come along too.
#
# Who may dump and restore (doc/security.md, "Who may install, dump and
# restore"): a database owner who is not a superuser cannot dump a database
# where a superuser installed jobguard ("permission denied for schema
# jobguard": jobguard's data is every scope's); the documented dump of its
# own objects leaves jobguard out entirely; a superuser's dump, restored
# into another cluster after the roles, keeps every scope, grant and
# privilege, the regrole columns restored by role name.  A granted role
# dropped without its revoke function (DROP OWNED BY, DROP ROLE) leaves
# its grant behind as a bare OID: check_invariants() names it, and the
# dump leaves it out, so that the role holding that OID in the other
# cluster inherits nothing.
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
-- the lost result settled (1.3): a refund record, and its operator action
SELECT jobguard.mark_refunded(:a1, 're_late_1');
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
-- key policies and scope grants are configuration that must survive too
SELECT jobguard.set_key_policy('charge', retention => '30 days', identity => ARRAY['amount'],
							   after_failure => 'new_job');
SELECT jobguard.set_key_policy('refund', retention => '1 hour');
-- and provider policies (1.2)
SELECT jobguard.set_provider_policy('stripe', dedupes_for => '1 day', max_in_flight => 50);
DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dump_shop') THEN CREATE ROLE dump_shop; END IF;
END $$;
SELECT jobguard.grant_client('dump_shop', 'shop');
SET ROLE dump_shop;
SELECT jobguard.submit('dave', 'order-1', 'charge', '{"amount": 9}', 'stripe');
RESET ROLE;
});

# Everything jobguard stores, as one canonical text.
my $everything = q{
SELECT string_agg(t, E'\n') FROM (
  SELECT 'job ' || j::text AS t FROM jobguard.jobs j
  UNION ALL SELECT 'attempt ' || a::text FROM jobguard.attempts a
  UNION ALL SELECT 'operation ' || o::text FROM jobguard.operations o
  UNION ALL SELECT 'certification ' || c::text FROM jobguard.certifications c
  UNION ALL SELECT 'policy ' || (p.operation, p.retention, p.identity, p.after_failure)::text
    FROM jobguard.policies p
  UNION ALL SELECT 'grant ' || (g.role, g.kind, g.scope, g.payloads)::text FROM jobguard.grants g
  UNION ALL SELECT 'provider policy ' || (p.provider, p.dedupes_for, p.max_in_flight, p.max_per_second)::text
    FROM jobguard.provider_policy p
  UNION ALL SELECT 'operator action ' || o::text FROM jobguard.operator_actions o
  UNION ALL SELECT 'refund ' || r::text FROM jobguard.refunds r
  ORDER BY 1) s
};
my $before = $node->safe_psql('app', $everything);
like($before, qr/ch_late/, 'the lost result is stored before the dump');
like($before, qr/operator action \(\d+,[^\n]*,mark_refunded,/, 'the operator actions are stored before the dump');
like($before, qr/refund \(\d+,re_late_1,/, 'and the refund record');

my $dump = PostgreSQL::Test::Utils::tempdir() . '/app.dump';
$node->command_ok(
	[ 'pg_dump', '--format=custom', '--file', $dump, $node->connstr('app') ],
	'pg_dump of a database using jobguard');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '--dbname', $node->connstr('restored'), $dump ],
	'pg_restore into a new database');

my $after = $node->safe_psql('restored', $everything);
is($after, $before, 'jobs, attempts, results, lost results, contracts, certifications, key policies and scope grants all restored');
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

# the restored refund is in force, and new operator actions are numbered
# after the restored ones: their sequence came along
my $lost = $node->safe_psql('restored', q{SELECT attempt_id FROM jobguard.lost_results});
is($node->safe_psql('restored', "SELECT refund_reference FROM jobguard.lost_results WHERE attempt_id = $lost"),
	're_late_1', 'the restored lost result shows its refund');
($code, $out, $err) = $node->psql('restored', "SELECT jobguard.mark_refunded($lost, 're_other')");
like($err, qr/already marked refunded with another reference/, 'another reference for the restored refund is refused');
my $max_action = $node->safe_psql('restored', 'SELECT max(id) FROM jobguard.operator_actions');
$node->safe_psql('restored', "SELECT jobguard.mark_refunded($lost, 're_late_1')");
is($node->safe_psql('restored', "SELECT action FROM jobguard.operator_actions WHERE id > $max_action"),
	'mark_refunded', 'a new operator action gets an id above every restored one');

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

# provider keys came along (every attempt's, in the text above too), and
# the restored running job's next attempt against its provider goes on
# with its key, as a redrive would
my $dumped_max = $node->safe_psql('app', 'SELECT max(id) FROM jobguard.attempts');
my $keys = qq{SELECT string_agg(id || ':' || provider_key, ',' ORDER BY id) FROM jobguard.attempts
	WHERE id <= $dumped_max};
is($node->safe_psql('restored', $keys), $node->safe_psql('app', $keys),
	'every attempt keeps its provider key through dump and restore');
my $running_key = $node->safe_psql('restored',
	"SELECT provider_key FROM jobguard.attempts WHERE job_id = $running AND state = 'started'");
like($running_key, qr/^[0-9a-f]{32}$/, 'the restored open attempt has its key');
is($node->safe_psql('restored', qq{
	SELECT jobguard.cancel_attempt(id, 'moved') FROM jobguard.attempts
	 WHERE job_id = $running AND state = 'started';
	SELECT jobguard.begin_attempt($running, timeout => '1 hour') AS next \\gset
	SELECT jobguard.provider_key(:next);}),
	"cancelled\n$running_key", 'the next attempt against the same provider sends the restored key');

# the restored key policy and scope grants are in force
is($node->safe_psql('restored',
		q{SELECT created FROM jobguard.submit('alice', 'order-1', 'charge', '{"amount": 100, "trace": "x"}', 'stripe')}),
	'f', 'the restored identity policy makes a different trace id a replay');
is($node->safe_psql('restored',
		q{SET ROLE dump_shop; SELECT jobguard.caller_scope() || ' ' || (SELECT count(*) FROM jobguard.job_overview)}),
	'shop 1', 'the restored grant keeps the client role in its scope, seeing its own job only');

# ------------------------------------------- who may dump and restore

# A database owned by a role that is no superuser; a superuser installed
# jobguard there, and two client scopes, a reader and an operator use it.
$node->safe_psql('postgres', q{
CREATE ROLE app_owner LOGIN;
CREATE ROLE shop_app LOGIN;
CREATE ROLE blog_app LOGIN;
CREATE ROLE audit LOGIN;
CREATE ROLE ops LOGIN;
CREATE DATABASE owned OWNER app_owner;
});
$node->safe_psql('owned', q{
CREATE EXTENSION jobguard;
SELECT jobguard.grant_client('shop_app', 'shop');
SELECT jobguard.grant_client('blog_app', 'blog');
SELECT jobguard.grant_reader('audit', 'shop');
SELECT jobguard.grant_operator('ops');
});
# An operator dropped without revoke_operator: its row stays behind as a
# bare OID, which the dump must not carry to a cluster where another role
# has that OID.
$node->safe_psql('postgres', 'CREATE ROLE gone_ops LOGIN');
$node->safe_psql('owned', q{SELECT jobguard.grant_operator('gone_ops')});
my $gone_oid = $node->safe_psql('owned', q{SELECT 'gone_ops'::regrole::oid});
$node->safe_psql('owned', 'DROP OWNED BY gone_ops');
$node->safe_psql('postgres', 'DROP ROLE gone_ops');
is($node->safe_psql('owned', q{SELECT invariant || ': ' || detail FROM jobguard.check_invariants()}),
	"a grant names an existing role: the operator grant of role OID $gone_oid, which was dropped",
	"check_invariants() names the dropped role's grant");

# as_role: run SQL in a database of a node as a role; dies on error
sub as_role
{
	my ($n, $db, $role, $sql) = @_;
	return $n->safe_psql($db, $sql, connstr => $n->connstr($db) . " user=$role");
}
my $shop_job = as_role($node, 'owned', 'shop_app',
	q{SELECT job_id FROM jobguard.submit('dana', 'order-1', 'charge', '{"card": "4242"}', 'stripe')});
my $blog_job = as_role($node, 'owned', 'blog_app',
	q{SELECT job_id FROM jobguard.submit('dana', 'order-1', 'publish', '{"post": 7}', 'wp')});
as_role($node, 'owned', 'app_owner', 'CREATE TABLE orders (id integer PRIMARY KEY); INSERT INTO orders VALUES (1), (2);');

my $dir = PostgreSQL::Test::Utils::tempdir();
$node->command_fails_like(
	[ 'pg_dump', '--format=custom', '--file', "$dir/by_owner.dump", $node->connstr('owned') . ' user=app_owner' ],
	# (PostgreSQL 18's pg_dump reads sequences with pg_get_sequence_data(),
	# which answers NULL to a role that may not read the sequence: pg_dump
	# then stops at jobguard's sequence instead of at its schema)
	qr/permission denied for schema jobguard|failed to get data for sequence "[a-z_]+"; user may lack SELECT privilege/,
	"the database owner's pg_dump fails: jobguard's tables are not its to read");
$node->command_ok(
	[
		'pg_dump', '--exclude-schema=jobguard', '--extension=plpgsql', '--file', "$dir/own_objects.sql",
		$node->connstr('owned') . ' user=app_owner'
	],
	'the database owner dumps its own objects, leaving jobguard out');
my $own_objects = slurp_file("$dir/own_objects.sql");
like($own_objects, qr/CREATE TABLE public\.orders/, 'that dump has its tables');
unlike($own_objects, qr/jobguard/, 'and nothing of jobguard: no extension, no privileges, no data');

# The superuser's dump, with the roles dumped first.
$node->command_ok([ 'pg_dumpall', '--roles-only', '--file', "$dir/roles.sql", '--dbname', $node->connstr('postgres') ],
	'the roles are dumped with pg_dumpall --roles-only');
$node->command_ok([ 'pg_dump', '--format=custom', '--file', "$dir/owned.dump", $node->connstr('owned') ],
	"a superuser's pg_dump of that database");

# Restored into another cluster, where the roles get other OIDs.
my $other = PostgreSQL::Test::Cluster->new('other');
$other->init;
$other->start;
$other->safe_psql('postgres', 'CREATE ROLE someone_else; CREATE ROLE and_another; CREATE DATABASE early;');
$other->command_fails_like(
	[ 'pg_restore', '--exit-on-error', '--dbname', $other->connstr('early'), "$dir/owned.dump" ],
	qr/role "\w+" does not exist/,
	'restored before the roles exist, it stops at the first role it names');
# the dump of the roles also holds the cluster's own superuser, which
# exists already: psql reports that one error and goes on
$other->command_ok([ 'psql', '-X', '-q', '-d', $other->connstr('postgres'), '-f', "$dir/roles.sql" ],
	'the roles restored first');
# a member of the blog's client role gets the dropped operator's OID here
# (fresh roles take the next OIDs of this younger cluster)
my $intruder_oid = $other->safe_psql('postgres', qq{
DO \$\$
DECLARE
	n integer := 0;
BEGIN
	LOOP
		EXECUTE format('CREATE ROLE filler_%s', n);
		EXIT WHEN (SELECT oid FROM pg_roles WHERE rolname = 'filler_' || n) >= $gone_oid;
		n := n + 1;
	END LOOP;
	EXECUTE format('ALTER ROLE filler_%s RENAME TO intruder', n);
END \$\$;
ALTER ROLE intruder LOGIN;
GRANT blog_app TO intruder;
SELECT 'intruder'::regrole::oid;
});
is($intruder_oid, $gone_oid, "a role of the other cluster has the dropped operator's OID");
$other->safe_psql('postgres', 'CREATE DATABASE owned OWNER app_owner');
$other->command_ok(
	[ 'pg_restore', '--exit-on-error', '--dbname', $other->connstr('owned'), "$dir/owned.dump" ],
	'after the roles, the superuser restores it');

my $grants = q{SELECT string_agg(format('%s %s %s %s', role, kind, scope, payloads), ', ' ORDER BY role::text) FROM jobguard.grants};
my $live_grants = $grants . q{ WHERE role::oid IN (SELECT oid FROM pg_roles)};
is($other->safe_psql('owned', $grants), $node->safe_psql('owned', $live_grants),
	"every grant of a role that exists restored: clients, reader and operator with their scopes, not the dropped role's");
is(as_role($other, 'owned', 'intruder', 'SELECT jobguard.caller_scope() || $$ $$ || count(*) FROM jobguard.job_overview'),
	'blog 1', "the role with the dropped operator's OID is what its membership makes it: the blog's client, no operator");
my ($iret, $iout, $ierr) = $other->psql('owned', "SELECT jobguard.cancel_job($shop_job, 'taken over')",
	connstr => $other->connstr('owned') . ' user=intruder');
like($ierr, qr/job $shop_job does not exist/, "and it cannot cancel the shop's job");
is($other->safe_psql('owned', 'SELECT count(*) FROM jobguard.check_invariants()'), '0',
	'no grant of a dropped role in the restored database');
isnt($other->safe_psql('owned', q{SELECT 'shop_app'::regrole::oid}), $node->safe_psql('owned', q{SELECT 'shop_app'::regrole::oid}),
	'by role name: the roles have other OIDs there');
my $scoped = q{SELECT string_agg(format('%s %s %s %s', scope, owner_id, idempotency_key, params), ', ' ORDER BY id) FROM jobguard.jobs};
is($other->safe_psql('owned', $scoped), $node->safe_psql('owned', $scoped), 'every job restored in its scope');
is(as_role($other, 'owned', 'shop_app', q{SELECT string_agg(job_id || ' ' || params::text, ', ') FROM jobguard.job_overview}),
	qq{$shop_job {"card": "4242"}}, 'the shop sees its own job only');
is(as_role($other, 'owned', 'blog_app',
		q{SELECT job_id || ' ' || created FROM jobguard.submit('dana', 'order-1', 'publish', '{"post": 7}', 'wp')}),
	"$blog_job false", 'the blog replays its key to its own job: the privileges came along');
my $ret;
($ret, $out, $err) = $other->psql('owned', "SELECT jobguard.job_state($shop_job)",
	connstr => $other->connstr('owned') . ' user=blog_app');
like($err, qr/job $shop_job does not exist/, "the blog still cannot see the shop's job");
is(as_role($other, 'owned', 'audit', 'SELECT count(*) || $$ $$ || count(params) FROM jobguard.job_overview'),
	'1 0', 'the reader of the shop reads its job, without payloads');
is(as_role($other, 'owned', 'ops', 'SELECT count(*) FROM jobguard.job_overview'), '2', 'the operator reads both scopes');
my $actions = q{SELECT string_agg(format('%s %s %s %s', id, action, target, acting_as), ', ' ORDER BY id) FROM jobguard.operator_actions};
is(as_role($other, 'owned', 'ops', $actions), $node->safe_psql('owned', $actions),
	'the operator reads the restored operator actions (the grants made before the dump)');
($ret, $out, $err) = $other->psql('owned', 'SELECT count(*) FROM jobguard.operator_actions',
	connstr => $other->connstr('owned') . ' user=audit');
like($err, qr/permission denied for table operator_actions/, 'the reader of one scope may not read them');
is($other->safe_psql('owned', 'SELECT string_agg(id::text, $$,$$ ORDER BY id) FROM orders'), '1,2',
	"the owner's own table came along");

# Restored by another superuser, CREATE EXTENSION would run as that role in
# a schema the dump gives to the extension's owner: the install check
# refuses it.  --role makes the restore run as the extension's owner.
my $extension_owner = $node->safe_psql('owned', q{SELECT extowner::regrole FROM pg_extension WHERE extname = 'jobguard'});
$other->safe_psql('postgres', 'CREATE ROLE other_admin SUPERUSER LOGIN; CREATE DATABASE by_other OWNER app_owner; CREATE DATABASE as_owner OWNER app_owner;');
$other->command_fails_like(
	[ 'pg_restore', '--exit-on-error', '--dbname', $other->connstr('by_other') . ' user=other_admin', "$dir/owned.dump" ],
	qr/schema "jobguard" already exists and is owned by role "\Q$extension_owner\E"/,
	'another superuser restoring it is refused by the install check');
$other->command_ok(
	[
		'pg_restore', '--exit-on-error', "--role=$extension_owner",
		'--dbname', $other->connstr('as_owner') . ' user=other_admin', "$dir/owned.dump"
	],
	"with --role=<the extension's owner> it restores");
is($other->safe_psql('as_owner', $grants), $node->safe_psql('owned', $live_grants), 'with every grant');
$other->stop;

$node->stop;
done_testing();
