# Proxy credentials (jobguard_proxy 1.1): the shards ask every client role
# for its password, and the proxy holds each one in that role's own user
# mapping, never in the foreign server's options and never in a mapping
# for PUBLIC.  A mapped client role works through the proxy, in the scope of
# the shard role it is mapped to; a role without a mapping is refused (no
# fallback); a wrong password in a mapping is refused by the shard;
# check_shards works through a mapping to a reader, which has no rights on
# the shards' tables; two client roles of two scopes do not see each
# other's jobs through the proxy; a client cannot create or alter its own
# user mapping (to run as another shard role); configure_proxy refuses a password in
# every form libpq reads one; the 1.0 -> 1.1 update refuses while a
# password or a PUBLIC mapping is left.
#
# Needs the plproxy and jobguard_proxy extensions installed (make test
# installs them).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $n = 2;

# shard roles: name => [password, how jobguard grants it]
my %shard_roles = (
	shop_shard => [ 'shop-secret', q{jobguard.grant_client('shop_shard', 'shop')} ],
	blog_shard => [ 'blog-secret', q{jobguard.grant_client('blog_shard', 'blog')} ],
	ops_shard => [ 'ops-secret', q{jobguard.grant_reader('ops_shard')} ],);

# ------------------------------------------------------------- set-up

my @shards;
for my $k (0 .. $n - 1)
{
	my $node = PostgreSQL::Test::Cluster->new("shard$k");
	$node->init;
	$node->start;
	$node->safe_psql('postgres', "CREATE DATABASE shard$k");
	$node->safe_psql("shard$k", "CREATE EXTENSION jobguard; SELECT jobguard.configure_shard($k, $n);");
	for my $role (sort keys %shard_roles)
	{
		my ($password, $grant) = @{ $shard_roles{$role} };
		$node->safe_psql("shard$k", "CREATE ROLE $role LOGIN PASSWORD '$password'; SELECT $grant;");
	}
	# the test's own superuser keeps trust; every other role must give its
	# password (the proxy connects through the socket: "local" lines)
	my $superuser = $node->safe_psql('postgres', 'SELECT current_user');
	open my $hba, '>', $node->data_dir . '/pg_hba.conf' or die "pg_hba.conf: $!";
	print $hba "local all $superuser trust\nlocal all all scram-sha-256\n";
	close $hba;
	$node->reload;
	push @shards, $node;
}

# on_shard: run SQL on shard k as its superuser
sub on_shard
{
	my ($k, $sql) = @_;
	return $shards[$k]->safe_psql("shard$k", $sql);
}

my ($ret, $out, $err) = $shards[0]->psql('shard0', 'SELECT 1',
	connstr => $shards[0]->connstr('shard0') . ' user=shop_shard password=wrong');
like($err, qr/password authentication failed for user "shop_shard"/,
	'the shards check the passwords of client roles');

my $proxy = PostgreSQL::Test::Cluster->new('proxy');
$proxy->init;
$proxy->start;
is($proxy->safe_psql('postgres',
		q{SELECT string_agg(name, ',' ORDER BY name) FROM pg_available_extensions
		   WHERE name IN ('plproxy', 'jobguard_proxy')}),
	'jobguard_proxy,plproxy', 'plproxy and jobguard_proxy are installed')
  or BAIL_OUT('install postgresql-15-plproxy and the proxy extension (make -C proxy install)');

my $connstrs = join(', ',
	map { "'host=" . $shards[$_]->host . ' port=' . $shards[$_]->port . " dbname=shard$_ connect_timeout=5'" }
	  0 .. $n - 1);
my $server_options_sql = q{SELECT array_to_string(srvoptions, ' ') FROM pg_foreign_server WHERE srvname = 'jobguard_shards'};

# the proxy's roles: app_shop and app_blog mapped to the shop and blog
# client roles of the shards, app_badpass to shop_shard with a wrong
# password, app_nomap with no mapping at all; the proxy's superuser mapped
# to the reader ops_shard
my (undef, undef, $grant_warnings) = $proxy->psql('postgres', qq{
SET client_min_messages = warning;
CREATE EXTENSION jobguard_proxy CASCADE;
SELECT jobguard.configure_proxy($connstrs);
CREATE ROLE app_shop LOGIN;
CREATE ROLE app_blog LOGIN;
CREATE ROLE app_badpass LOGIN;
CREATE ROLE app_nomap LOGIN;
CREATE USER MAPPING FOR app_shop SERVER jobguard_shards OPTIONS (user 'shop_shard', password 'shop-secret');
CREATE USER MAPPING FOR app_blog SERVER jobguard_shards OPTIONS (user 'blog_shard', password 'blog-secret');
CREATE USER MAPPING FOR app_badpass SERVER jobguard_shards OPTIONS (user 'shop_shard', password 'guessed');
CREATE USER MAPPING FOR CURRENT_USER SERVER jobguard_shards OPTIONS (user 'ops_shard', password 'ops-secret');
SELECT jobguard.grant_client(r) FROM unnest(ARRAY['app_shop', 'app_blog', 'app_badpass', 'app_nomap']) r;
}, on_error_die => 1);
like($grant_warnings, qr/WARNING:  role "app_nomap" has no user mapping for server jobguard_shards/,
	'grant_client warns about the role without a user mapping');
unlike($grant_warnings, qr/role "app_(shop|blog|badpass)" has no user mapping/, 'and only about it');
is($proxy->safe_psql('postgres', q{SELECT count(*) FROM pg_user_mappings WHERE srvname = 'jobguard_shards' AND umuser = 0}),
	'0', 'configure_proxy made no user mapping for PUBLIC');

# as_role: run SQL on the proxy as a role; returns (stdout, stderr with
# the SQLSTATE)
sub as_role
{
	my ($role, $sql) = @_;
	my ($r, $o, $e) = $proxy->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		connstr => $proxy->connstr('postgres') . " user=$role");
	return ($o, $e);
}

# ---------------------------------------- check_shards without table rights

is($proxy->safe_psql('postgres',
		'SELECT string_agg(format($$%s:%s/%s:%s$$, partition, shard_no, shard_count, ok), $$ $$ ORDER BY partition) FROM jobguard.check_shards()'),
	join(' ', map { "$_:$_/$n:t" } 0 .. $n - 1),
	'check_shards through a mapping to a reader of the shards: partition k is shard k of 2');
is(on_shard(0, q{SELECT has_table_privilege('ops_shard', 'jobguard.shard', 'SELECT')
	|| ' ' || has_table_privilege('ops_shard', 'jobguard.jobs', 'SELECT')}),
	'false false', 'that reader has no rights on the shard tables');

# ------------------------------------------------ a mapped client role works

my ($shop_job, $e) = as_role('app_shop',
	q{SELECT job_id FROM jobguard.submit('dana', 'order-1', 'charge', '{"card": "4242"}', 'stripe')});
like($shop_job, qr/^\d+$/, 'a mapped client role submits through the proxy') or diag($e);
my $shop_shard = $shop_job % $n;
is(on_shard($shop_shard, "SELECT scope || ' ' || owner_id FROM jobguard.jobs WHERE id = $shop_job"),
	'shop dana', "the job is in the scope of the shard role it is mapped to (shop)");
my ($shop_attempt) = as_role('app_shop', "SELECT jobguard.begin_attempt($shop_job)");
like($shop_attempt, qr/^\d+$/, 'it begins an attempt');
is((as_role('app_shop', qq{SELECT jobguard.finish_attempt($shop_attempt, '{"id": "ch_1"}')}))[0],
	'won', 'and finishes it');
is((as_role('app_shop', "SELECT state || ' ' || params::text FROM jobguard.job($shop_job)"))[0],
	'succeeded {"card": "4242"}', 'and reads its job back');

# ---------------------------------------------- two scopes through the proxy

my ($blog_row) = as_role('app_blog',
	q{SELECT job_id || ' ' || created FROM jobguard.submit('dana', 'order-1', 'charge', '{"post": 7}', 'wp')});
my ($blog_job, $blog_created) = split / /, $blog_row;
ok($blog_created eq 'true' && $blog_job != $shop_job,
	'the same owner and key from the other scope is a new job, not JG001');
for my $probe (
	[ "SELECT jobguard.job_state($shop_job)", 'JG008', 'job_state' ],
	[ "SELECT * FROM jobguard.job($shop_job)", 'JG008', 'job' ],
	[ "SELECT * FROM jobguard.attempts_of($shop_job)", 'JG008', 'attempts_of' ],
	[ "SELECT jobguard.cancel_job($shop_job, 'mine now')", 'JG008', 'cancel_job' ],
	[ "SELECT jobguard.begin_attempt($shop_job)", 'JG008', 'begin_attempt' ],
	[ qq{SELECT jobguard.finish_attempt($shop_attempt, '{"id": "forged"}')}, 'JG009', 'finish_attempt' ],
	[ "SELECT jobguard.fail_attempt($shop_attempt, 'x')", 'JG009', 'fail_attempt' ])
{
	my ($sql, $code, $what) = @$probe;
	my ($o, $e2) = as_role('app_blog', $sql);
	like($e2, qr/\b$code\b/, "the blog's role gets $code from $what on the shop's ids");
}
my ($o, $e3) = as_role('app_shop', "SELECT jobguard.job_state($blog_job)");
like($e3, qr/\bJG008\b/, "and the shop's role JG008 on the blog's job");
is(on_shard($shop_shard, "SELECT state || ' ' || result::text FROM jobguard.job_overview WHERE job_id = $shop_job"),
	'succeeded {"id": "ch_1"}', "the shop's job is untouched");

# ---------------------------------------------- no mapping, wrong password

# (PostgreSQL 17 names the server too: 'for user "app_nomap", server ...')
($o, $e) = as_role('app_nomap', q{SELECT * FROM jobguard.submit('eve', 'k', 'charge', '{}', 'stripe')});
like($e, qr/\b42704\b.*user mapping not found for (user )?"app_nomap"/,
	'a client role without a user mapping is refused (42704), no PUBLIC fallback');
($o, $e) = as_role('app_nomap', "SELECT jobguard.job_state($shop_job)");
like($e, qr/user mapping not found for (user )?"app_nomap"/, 'for id-routed calls as well');
($o, $e) = as_role('app_badpass', q{SELECT * FROM jobguard.submit('eve', 'k', 'charge', '{}', 'stripe')});
like($e, qr/password authentication failed for user "shop_shard"/,
	'a mapping with a wrong password is refused by the shard');
is(join(',', map { on_shard($_, q{SELECT count(*) FROM jobguard.jobs WHERE owner_id = 'eve'}) } 0 .. $n - 1),
	join(',', (0) x $n), 'neither wrote anything');

# ------------------------------------- a client cannot choose its shard role

# USAGE on the foreign server, which PL/Proxy needs, lets a role create and
# alter its own user mapping: pointed at the shards' superuser (trusted on
# their sockets here), the blog's role would read and cancel the shop's
# job.  jobguard_proxy's event trigger refuses it.
my $shard_superuser = $shards[0]->safe_psql('postgres', 'SELECT current_user');
($o, $e) = as_role('app_blog',
	"ALTER USER MAPPING FOR CURRENT_USER SERVER jobguard_shards OPTIONS (SET user '$shard_superuser')");
like($e, qr/\b42501\b.*only the owner of server jobguard_shards may create or alter its user mappings/,
	'a client cannot point its own user mapping at another shard role (42501)');
($o, $e) = as_role('app_blog',
	"ALTER USER MAPPING FOR CURRENT_USER SERVER jobguard_shards OPTIONS (DROP password)");
like($e, qr/\b42501\b/, 'nor change its password');
($o, $e) = as_role('app_nomap',
	"CREATE USER MAPPING FOR CURRENT_USER SERVER jobguard_shards OPTIONS (user '$shard_superuser')");
like($e, qr/\b42501\b/, 'a client without a mapping cannot create one for itself');
is($proxy->safe_psql('postgres',
		q{SELECT string_agg(usename || ':' || array_to_string(umoptions, ' '), ', ' ORDER BY usename) FROM pg_user_mappings
		   WHERE srvname = 'jobguard_shards' AND usename IN ('app_blog', 'app_nomap')}),
	'app_blog:user=blog_shard password=blog-secret', 'the mappings are as the proxy\'s owner made them');
($o, $e) = as_role('app_blog', "SELECT params FROM jobguard.job($shop_job)");
like($e, qr/\bJG008\b/, "the blog's role still runs as the blog's shard role: the shop's job does not exist for it");
($o, $e) = as_role('app_blog', "SELECT jobguard.cancel_job($shop_job, 'taken over')");
like($e, qr/\bJG008\b/, "and cannot cancel it");
is($proxy->safe_psql('postgres',
		q{ALTER USER MAPPING FOR app_badpass SERVER jobguard_shards OPTIONS (SET password 'guessed');
		  SELECT 'altered'}),
	'altered', "the proxy's superuser still manages the mappings");

# --------------------------------------------------- who reads credentials

is((as_role('app_blog', q{SELECT usename || ':' || coalesce(array_to_string(umoptions, ' '), 'hidden')
	FROM pg_user_mappings WHERE srvname = 'jobguard_shards' AND usename IN ('app_shop', 'app_blog') ORDER BY 1}))[0],
	"app_blog:user=blog_shard password=blog-secret\napp_shop:hidden",
	"a client role reads its own mapping's options, not another role's");
my ($options) = as_role('app_nomap', $server_options_sql);
ok($options =~ /p0=host=/ && $options !~ /password/i,
	"the server's options, which every role reads, hold no password");

# ------------------------------------- configure_proxy refuses passwords

my @with_password = (
	'host=db password=s3cret',
	'host=db  password = s3cret',
	"host=db password='s3 cret'",
	q{host=db password='it\\'s'},
	"host=db\tpassword\n=s3cret",
	'host=db PASSWORD=s3cret',
	'host=db sslpassword=s3cret',
	q{dbname='host=db password=s3cret'},
	'postgresql://shop_shard:s3cret@db/shard0',
	'postgres://shop_shard:@db/shard0',
	'postgresql://db/shard0?sslmode=prefer&password=s3cret',
	'postgresql://db/shard0?pass%77ord=s3cret');
for my $connstr (@with_password)
{
	my ($r, $o2, $e4) = $proxy->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT jobguard.configure_proxy('host=db0', \$cs\$$connstr\$cs\$)");
	(my $shown = $connstr) =~ s/\n/\\n/g;
	$shown =~ s/\t/\\t/g;
	ok($e4 =~ /\b22023\b.*the connection string of shard 1 contains an? (ssl)?password/
		  && $e4 =~ /HINT:.*(CREATE USER MAPPING|client key)/
		  && $e4 !~ /s3cret/,
		"configure_proxy refuses $shown, without repeating it") or diag($e4);
}
my ($r5, $o5, $e5) = $proxy->psql('postgres', q{SELECT jobguard.configure_proxy('host=db0', 'host=db password=''unterminated')});
like($e5, qr/connection string of shard 1 is not valid/, 'and a string libpq could not read');
unlike($proxy->safe_psql('postgres', $server_options_sql), qr/s3cret|db0/,
	'a refused call changes nothing');
for my $connstr ('host=db passwordfile=x', 'host=db application_name=password', 'postgresql://shop%3Ax@db/shard0')
{
	is($proxy->safe_psql('postgres',
			"SELECT coalesce(jobguard.conninfo_secret('$connstr'), 'none')"),
		'none', "$connstr carries no password");
}

# ----------------------------------------------------- updating from 1.0

$proxy->safe_psql('postgres', 'CREATE DATABASE old_proxy');
$proxy->safe_psql('old_proxy', q{
SET client_min_messages = warning;
CREATE EXTENSION jobguard_proxy VERSION '1.0' CASCADE;
SELECT jobguard.configure_proxy('host=db0 password=s3cret', 'host=db1');
});
($r5, $o5, $e5) = $proxy->psql('old_proxy', "\\set VERBOSITY verbose\nALTER EXTENSION jobguard_proxy UPDATE");
like($e5, qr/\b55000\b.*contain passwords.*DETAIL:.*p0\b/s,
	'the update refuses while a connection string holds a password');
$proxy->safe_psql('old_proxy', q{SELECT jobguard.configure_proxy('host=db0', 'host=db1')});
($r5, $o5, $e5) = $proxy->psql('old_proxy', "\\set VERBOSITY verbose\nALTER EXTENSION jobguard_proxy UPDATE");
like($e5, qr/\b55000\b.*user mapping for PUBLIC/, 'and while the user mapping for PUBLIC exists');
$proxy->safe_psql('old_proxy', q{
DROP USER MAPPING FOR PUBLIC SERVER jobguard_shards;
ALTER EXTENSION jobguard_proxy UPDATE;
});
is($proxy->safe_psql('old_proxy', q{SELECT extversion FROM pg_extension WHERE extname = 'jobguard_proxy'}),
	'1.3', 'then it updates to 1.3, through 1.1 and 1.2');
my $functions = q{SELECT string_agg(p.oid::regprocedure || ' ' || md5(pg_get_functiondef(p.oid))
	|| ' ' || coalesce(obj_description(p.oid, 'pg_proc'), '-') || ' ' || coalesce(p.proacl::text, '-'), E'\n' ORDER BY p.oid::regprocedure::text)
	FROM pg_proc p WHERE p.pronamespace = 'jobguard'::regnamespace};
$proxy->safe_psql('postgres', 'CREATE DATABASE new_proxy');
$proxy->safe_psql('new_proxy', 'SET client_min_messages = warning; CREATE EXTENSION jobguard_proxy CASCADE;');
is($proxy->safe_psql('old_proxy', $functions), $proxy->safe_psql('new_proxy', $functions),
	'the updated functions are those of a fresh 1.1');

$proxy->stop;
$_->stop for @shards;
done_testing();
