# The launcher (jobguard preloaded, jobguard.database left empty): every
# database where jobguard is installed gets a sweeper and a notifier by
# itself, a database without it keeps none, DROP DATABASE is not blocked by
# them, a stopped worker or launcher comes back without doubling, and
# jobguard.database, when set, is a filter whose unknown names are one
# WARNING each, not a loop of FATALs.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('launcher');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'jobguard'
jobguard.sweep_interval = '200ms'
});
$node->start;

# workers: "kind@database" of jobguard's workers, sorted
sub workers
{
	return $node->safe_psql('postgres', q{
SELECT coalesce(string_agg(replace(backend_type, 'jobguard ', '') || '@' || coalesce(datname, '-'), ' '
                           ORDER BY backend_type, datname), '')
  FROM pg_stat_activity WHERE backend_type LIKE 'jobguard %'});
}

ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'jobguard launcher'}),
	'the launcher runs');

# A database created after start, jobguard installed there, never named anywhere.
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE plain');
$node->safe_psql('app', 'CREATE EXTENSION jobguard');
my $attempt = $node->safe_psql('app',
	q{SELECT jobguard.begin_attempt(job_id, timeout => '300 milliseconds')
	    FROM jobguard.submit('alice', 'k1', 'charge', '{}', 'stripe')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM pg_stat_activity WHERE datname = 'app'
		    AND backend_type IN ('jobguard sweeper', 'jobguard notifier')}),
	'the new database got a sweeper and a notifier by itself');
ok($node->poll_query_until('app', "SELECT state = 'unknown' FROM jobguard.attempts WHERE id = $attempt"),
	'its sweeper marks an overdue attempt unknown');
# (a second of rounds: the probe of the plain database has come and gone)
sleep 2;
is(workers(), 'launcher@- notifier@app sweeper@app',
	'no worker stays in the databases without jobguard (plain, postgres)');

# await() there is woken through the notifier's database slot
my $job = $node->safe_psql('app', q{SELECT job_id FROM jobguard.submit('alice', 'k2', 'charge', '{}', 'stripe')});
my $second = $node->safe_psql('app', "SELECT jobguard.begin_attempt($job)");
$node->safe_psql('app', "SELECT jobguard.finish_attempt($second, '{}')");
is($node->safe_psql('app', "SELECT jobguard.await($job, '1 second')"), 'succeeded', 'await sees the end');

# A sweeper stopped by an administrator is started again, once.
my $sweeper = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper' AND datname = 'app'});
kill 'TERM', $sweeper;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'jobguard sweeper'"
		  . " AND datname = 'app' AND pid <> $sweeper"),
	'the launcher started the stopped sweeper again');

# A launcher stopped by an administrator comes back (the postmaster restarts
# it) and starts no second pair of workers where its predecessor's still run.
my $launcher = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'jobguard launcher'});
my $pair = $node->safe_psql('postgres',
	q{SELECT string_agg(pid::text, ' ' ORDER BY pid) FROM pg_stat_activity WHERE datname = 'app'
	   AND backend_type IN ('jobguard sweeper', 'jobguard notifier')});
kill 'TERM', $launcher;
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'jobguard launcher' AND pid <> $launcher"),
	'the launcher came back');
sleep 3;
is($node->safe_psql('postgres',
		q{SELECT string_agg(pid::text, ' ' ORDER BY pid) FROM pg_stat_activity WHERE datname = 'app'
		   AND backend_type IN ('jobguard sweeper', 'jobguard notifier')}),
	$pair, 'the new launcher kept the running workers and started no others');

# Someone who may not drop the database does not stop its workers.
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');
my ($code, $out, $err) = $node->psql('postgres', 'DROP DATABASE app', extra_params => [ '-U', 'mallory' ]);
like($err, qr/must be owner of database app/, 'a non-owner cannot drop the database');
is($node->safe_psql('postgres',
		q{SELECT string_agg(pid::text, ' ' ORDER BY pid) FROM pg_stat_activity WHERE datname = 'app'
		   AND backend_type IN ('jobguard sweeper', 'jobguard notifier')}),
	$pair, '... and its attempt stopped no worker');

# DROP DATABASE is not kept waiting (or refused) by the workers connected there.
($code, $out, $err) = $node->psql('postgres', 'DROP DATABASE app');
is($code, 0, 'DROP DATABASE of a served database succeeds') or diag($err);
sleep 2;
is(workers(), 'launcher@-', 'no worker is left for the dropped database');

# ALTER DATABASE ... RENAME of a served database works too, and the
# renamed database is served again after the hold.
$node->safe_psql('postgres', 'CREATE DATABASE app2');
$node->safe_psql('app2', 'CREATE EXTENSION jobguard');
$node->safe_psql('app2', q{SELECT jobguard.submit('bob', 'k1', 'charge', '{}', 'stripe')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM pg_stat_activity WHERE datname = 'app2' AND backend_type LIKE 'jobguard %'}),
	'the second database is served');
($code, $out, $err) = $node->psql('postgres', 'ALTER DATABASE app2 RENAME TO app3');
is($code, 0, 'ALTER DATABASE RENAME of a served database succeeds') or diag($err);

# jobguard.database as a filter, with a name that names no database.
$node->append_conf('postgresql.conf', q{jobguard.database = 'app3, nosuchdb'});
$node->safe_psql('postgres', 'CREATE DATABASE unlisted');
$node->safe_psql('unlisted', 'CREATE EXTENSION jobguard');
my $log_offset = -s $node->logfile;
$node->restart;
$node->safe_psql('unlisted', q{SELECT jobguard.submit('carol', 'k1', 'charge', '{}', 'stripe')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM pg_stat_activity WHERE datname = 'app3' AND backend_type LIKE 'jobguard %'}),
	'the listed database is served');
sleep 5;
is(workers(), 'launcher@- notifier@app3 sweeper@app3', 'the unlisted database is not served');
my $log = substr(slurp_file($node->logfile), $log_offset);
my @warnings = ($log =~ /WARNING:  database "nosuchdb" named in "jobguard.database" does not exist/g);
is(scalar @warnings, 1, 'a listed database that does not exist is one WARNING');
unlike($log, qr/FATAL:  database "nosuchdb" does not exist/, 'and no worker fails trying to connect to it');
unlike($log, qr/PANIC|terminated by signal/, 'no crash');
done_testing();
