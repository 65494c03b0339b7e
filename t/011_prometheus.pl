# monitoring/queries.yaml with the real prometheus-postgres-exporter
# (Debian's package, installed by scripts/common.sh): the exporter runs as
# a jobguard reader (grant_reader) against a preloaded cluster, on a free
# loopback port, and /metrics shows the jobguard_* series with the values
# jobguard.stats() gives.
use strict;
use warnings;
use File::Basename qw(dirname);
use HTTP::Tiny;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $exporter = '/usr/bin/prometheus-postgres-exporter';
ok(-x $exporter, 'prometheus-postgres-exporter is installed') or BAIL_OUT('no exporter');
my $queries = dirname(__FILE__) . '/../monitoring/queries.yaml';
ok(-f $queries, 'monitoring/queries.yaml exists');

my $node = PostgreSQL::Test::Cluster->new('prometheus');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'jobguard'
jobguard.database = 'postgres'
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION jobguard;
CREATE ROLE jobguard_exporter LOGIN;
SELECT jobguard.grant_reader('jobguard_exporter');
SELECT jobguard.define_operation('extract', '{"type": "object", "required": ["name"]}');
});
# five jobs: one won, one rejected, one overdue (unknown), two pending
my @jobs = split /\n/, $node->safe_psql('postgres',
	q{SELECT s.job_id FROM generate_series(1, 5) g, jobguard.submit('o', g::text, 'extract', '{}', 'p') s ORDER BY 1});
$node->safe_psql('postgres', q{SELECT jobguard.submit('o', '1', 'extract', '{}', 'p')});
my $won = $node->safe_psql('postgres', "SELECT jobguard.begin_attempt($jobs[0])");
my $rejected = $node->safe_psql('postgres', "SELECT jobguard.begin_attempt($jobs[1])");
$node->safe_psql('postgres', "SELECT jobguard.begin_attempt($jobs[2], timeout => '1 millisecond')");
$node->safe_psql('postgres', qq{SELECT jobguard.finish_attempt($won, '{"name": "x"}')});
$node->safe_psql('postgres', qq{SELECT jobguard.finish_attempt($rejected, '{"no": 1}')});
$node->psql('postgres', q{SELECT jobguard.submit('o', '1', 'extract', '{"x": 1}', 'p')});
$node->psql('postgres', "SELECT jobguard.begin_attempt($jobs[2])");

my $port = PostgreSQL::Test::Cluster::get_free_port();
my $dsn = sprintf('host=%s port=%d user=jobguard_exporter dbname=postgres sslmode=disable',
	$node->host, $node->port);
my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	[
		$exporter, "--web.listen-address=127.0.0.1:$port",
		"--extend.query-path=$queries", '--disable-default-metrics',
		'--disable-settings-metrics'
	],
	'>', \$out, '2>', \$err,
	init => sub { $ENV{DATA_SOURCE_NAME} = $dsn });

my $http = HTTP::Tiny->new(timeout => 10);
my $metrics = '';
for (1 .. 100)
{
	my $res = $http->get("http://127.0.0.1:$port/metrics");
	if ($res->{success} && $res->{content} =~ /^jobguard_/m)
	{
		$metrics = $res->{content};
		last;
	}
	sleep(0.2);
}
$h->kill_kill;
ok($metrics ne '', 'scraped /metrics') or diag("exporter stderr:\n$err");
note(join("\n", grep { /^jobguard/ } split /\n/, $metrics));

my @series = sort map { /^(jobguard_[a-z_]+)/ ? $1 : () } split /\n/, $metrics;
my %seen = map { $_ => 1 } @series;
for my $name (qw(jobguard_jobs_count jobguard_attempts_count jobguard_submits_created_total
	jobguard_submits_replayed_total jobguard_submits_conflicted_total jobguard_gate_refusals_total
	jobguard_finishes_won_total jobguard_finishes_lost_total jobguard_finishes_rejected_total
	jobguard_sweeper_marked_unknown_total jobguard_purged_jobs_total
	jobguard_unknown_attempts_oldest_age_seconds))
{
	ok($seen{$name}, "series $name is exported");
}
# values
my %value;
for my $line (split /\n/, $metrics)
{
	next unless $line =~ /^(jobguard_[a-z_]+)(\{[^}]*\})? (\S+)$/;
	my ($name, $labels, $v) = ($1, $2 // '', $3);
	my ($state) = $labels =~ /state="([a-z]+)"/;
	$value{ $name . (defined $state ? ".$state" : '') } = $v + 0;
}
is($value{'jobguard_jobs_count.pending'}, 3, 'jobguard_jobs_count{state="pending"}');
is($value{'jobguard_submits_created_total'}, 5, 'submits created');
is($value{'jobguard_submits_replayed_total'}, 1, 'submits replayed');
is($value{'jobguard_submits_conflicted_total'}, 1, 'submits conflicted');
is($value{'jobguard_gate_refusals_total'}, 1, 'gate refusals');
is($value{'jobguard_finishes_won_total'}, 1, 'finishes won');
is($value{'jobguard_finishes_rejected_total'}, 1, 'finishes rejected');
cmp_ok($value{'jobguard_unknown_attempts_oldest_age_seconds'} // -1, '>', 0, 'the overdue attempt has an age');
is($value{'jobguard_unknown_attempts_open'}, 1, 'one unknown attempt');

$node->stop('fast');
done_testing();
