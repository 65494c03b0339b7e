# The preloaded sweeper purges by the key policies' retention every
# jobguard.purge_interval, one small batch per transaction: an operation's
# ended jobs older than its retention go, the rest stay (a newer job, a job
# with an open attempt, an operation without a retention), and it does
# nothing while purge_interval is 0.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('retention');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'jobguard'
jobguard.database = 'postgres'
jobguard.sweep_interval = '100ms'
jobguard.purge_interval = '0'
jobguard.purge_batch_size = 3
log_min_messages = 'log'
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION jobguard;
SELECT jobguard.set_key_policy('chat', retention => '1 hour');
-- ten old chats that ended, one old chat still open, one new chat that
-- ended, and old charges (no retention): only the ten may go
SELECT jobguard.finish_attempt(jobguard.begin_attempt(job_id), '{}')
  FROM generate_series(1, 10) n, jobguard.submit('dana', 'old-' || n, 'chat', '{}', 'llm') s;
SELECT jobguard.begin_attempt(job_id, timeout => '1 day')
  FROM jobguard.submit('dana', 'old-open', 'chat', '{}', 'llm');
SELECT jobguard.finish_attempt(jobguard.begin_attempt(job_id), '{}')
  FROM jobguard.submit('dana', 'new', 'chat', '{}', 'llm');
SELECT jobguard.finish_attempt(jobguard.begin_attempt(job_id), '{}')
  FROM generate_series(1, 3) n, jobguard.submit('dana', 'charge-' || n, 'charge', '{}', 'psp') s;
UPDATE jobguard.jobs SET created_at = created_at - interval '2 hours',
	   completed_at = completed_at - interval '2 hours'
 WHERE idempotency_key LIKE 'old-%' OR operation = 'charge';
UPDATE jobguard.attempts SET started_at = started_at - interval '2 hours',
	   finished_at = finished_at - interval '2 hours'
 WHERE job_id IN (SELECT id FROM jobguard.jobs WHERE idempotency_key LIKE 'old-%' OR operation = 'charge');
});
my $keys = q{SELECT string_agg(idempotency_key, ' ' ORDER BY id) FROM jobguard.jobs};
my $all = $node->safe_psql('postgres', $keys);

# purge_interval 0: the sweeper leaves them all alone
sleep 1;
is($node->safe_psql('postgres', $keys), $all, 'with purge_interval 0 the sweeper purges nothing');

# purge_interval on: the old ended chats go, in batches of 3, within a few intervals
my $log_offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "jobguard.purge_interval = '200ms'");
$node->reload;
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM jobguard.jobs WHERE idempotency_key LIKE 'old-%' AND idempotency_key <> 'old-open'}),
	'the sweeper purged the chats older than their retention');
is($node->safe_psql('postgres', $keys),
	'old-open new charge-1 charge-2 charge-3',
	'an open old chat, a new chat and the charges without a retention stay');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobguard.attempts a
	 WHERE NOT EXISTS (SELECT 1 FROM jobguard.jobs j WHERE j.id = a.job_id)}),
	'0', 'their attempts went with them');
ok($node->wait_for_log(qr/jobguard purged 10 jobs of operation "chat" older than its retention/, $log_offset),
	'the sweeper logged what it purged');
is($node->safe_psql('postgres', 'SELECT count(*) FROM jobguard.check_invariants()'), '0',
	'every invariant holds');

$node->stop;
done_testing();
