#!/usr/bin/env perl
# examples/failover/retrying_client.pl: a jobguard client that survives a
# primary failover.  It runs the lifecycle of many intents (submit,
# begin_attempt, finish_attempt, with cancels, fallbacks, failures and late
# finishes) through a libpq connection string that names every node with
# target_session_attrs=read-write, and writes one line per ACKNOWLEDGED
# result to its output file.
#
# The rule it shows: a call whose connection broke may or may not have
# committed, so the client reconnects and sends the very same call again,
# with the same idempotency key, attempt_key and result.  submit,
# begin_attempt with an attempt_key, finish_attempt ('won', 'lost') and
# cancel_job answer a resend exactly as they answered the first send.
# cancel_attempt, fail_attempt and a finish_attempt that was 'rejected'
# refuse a second send with JG006; the client then reads the attempt and
# takes "already cancelled" / "already failed with my error" / "failed with
# my result's contract violation" as its answer.  doc/high-availability.md explains the rules;
# t/008_failover.pl runs eight of these clients across a real failover.
#
# usage: retrying_client.pl --conninfo STR --client N --out FILE
#            [--intents N] [--stop-file FILE] [--deadline SECONDS] [--drop-answers]
#
# --drop-answers plays a connection lost after every commit: each call is
# sent, its answer thrown away, and sent again; the second answer must
# agree with the first.
use strict;
use warnings;
use DBI;
use Getopt::Long;
use IO::Handle;
use Time::HiRes qw(time sleep);

my %opt = (intents => 1_000_000, deadline => 120, 'stop-file' => '');
GetOptions(\%opt, 'conninfo=s', 'client=i', 'out=s', 'intents=i', 'stop-file=s', 'deadline=i',
	'drop-answers')
  or die "usage: $0 --conninfo STR --client N --out FILE [--intents N] [--stop-file F] [--deadline S]\n";
defined $opt{$_} or die "--$_ is required\n" for qw(conninfo client out);

my $give_up_at = time() + $opt{deadline};
open(my $out, '>', $opt{out}) or die "cannot write $opt{out}: $!\n";
$out->autoflush(1);

my $dbh;					# the current connection, or undef
my $down_since;				# when the current outage began, or undef

# record: write one line of the client's log.
sub record
{
	print $out join(' ', @_), "\n";
	return;
}

# connection: the open connection, or a new one to whichever node accepts
# writes now (libpq tries the hosts in order); waits while none does.
sub connection
{
	return $dbh if $dbh;
	for (;;)
	{
		$dbh = DBI->connect("dbi:Pg:$opt{conninfo}", '', '',
			{ AutoCommit => 1, RaiseError => 0, PrintError => 0 });
		return $dbh if $dbh;
		record('connect_refused', sprintf('%.3f', time()));
		die "client $opt{client}: no writable node before the deadline\n" if time() > $give_up_at;
		sleep(0.05);
	}
}

# answered: true for an SQLSTATE that is the server's answer to the call
# itself (jobguard's JG codes, bad arguments), false for one that only says
# the call did not get through (connection lost, read-only node, shutdown,
# serialization failure): those calls are sent again.
sub answered
{
	my ($state) = @_;
	return $state =~ /^(JG|22|23|42)/;
}

# call: run one statement and return ('ok', first row) or ('error',
# sqlstate, message).  A call that did not get through is sent again,
# unchanged, on a new connection, until it gets an answer.
sub call
{
	my ($name, $sql, @args) = @_;
	my $resent = 0;
	my $dropped;				# the answer thrown away (--drop-answers)
	for (;;)
	{
		my $db = connection();
		my $row = $db->selectrow_arrayref($sql, undef, @args);
		my $state = $db->state // '';
		if ($row || answered($state))
		{
			my $answer = $row ? $row->[0] : $state;
			if (defined $down_since)
			{
				record('outage', sprintf('%.3f', time() - $down_since));
				$down_since = undef;
			}
			if ($opt{'drop-answers'} && !defined $dropped)
			{
				$dropped = $answer;
				$resent++;
				next;
			}
			record('resent', $name, $answer) if $resent;
			# a resend of a call that had an answer gets the same one
			# (cancel_attempt and fail_attempt answer JG006 instead)
			record('unexpected', $name, "resend answered $answer, first send $dropped")
			  if defined $dropped && $row && $dropped ne $answer;
			return $row ? ('ok', $row) : ('error', $state, $db->errstr // '');
		}
		record('interrupted', $name, $state || '-', sprintf('%.3f', time()));
		$down_since //= time();
		$resent++;
		$dbh->disconnect if $dbh;
		$dbh = undef;
		die "client $opt{client}: $name got no answer before the deadline\n" if time() > $give_up_at;
	}
}

# expect: run a call that must return a value, return it; anything else is
# logged as unexpected (the test counts those lines).
sub expect
{
	my ($name, $sql, @args) = @_;
	my ($status, @rest) = call($name, $sql, @args);
	return $rest[0] if $status eq 'ok';
	record('unexpected', $name, $rest[0], ($rest[1] // '') =~ s/\s+/ /gr);
	return undef;
}

# submit: the job for this intent; a resend returns the same job.
sub submit
{
	my ($owner, $key, $i) = @_;
	my $row = expect('submit',
		q{SELECT job_id, created FROM jobguard.submit($1, $2, 'charge', $3::jsonb, 'stripe')},
		$owner, $key, qq({"intent": $i})) or return undef;
	record('submit', $row->[0], $key);
	return $row->[0];
}

# begin: begin an attempt under its attempt_key; a resend returns the
# attempt the first send began (it is still open).
sub begin
{
	my ($job, $attempt_key, $provider) = @_;
	my $row = expect('begin_attempt', q{SELECT jobguard.begin_attempt($1, $2, '60 seconds', $3)},
		$job, $provider, $attempt_key) or return undef;
	record('begin', $job, $row->[0]);
	return $row->[0];
}

# finish: report a result; a resend with the same result returns the same
# 'won' or 'lost'.  A 'rejected' result is not kept, so its resend meets a
# failed attempt (JG006): read the attempt back, and if it failed with the
# contract violation of this very result, the answer was 'rejected'.  Logs
# the outcome, and an unexpected one as such.
sub finish
{
	my ($attempt, $result, $want) = @_;
	my ($status, $value, $message) =
	  call('finish_attempt', q{SELECT jobguard.finish_attempt($1, $2::jsonb)}, $attempt, $result);
	my $outcome = $status eq 'ok' ? $value->[0] : undef;
	if ($status eq 'error' && $value eq 'JG006')
	{
		my $row = expect('read_attempt',
			q{SELECT a.state = 'failed' AND a.error = format('result breaks the output contract of operation "%s": %s',
			         j.operation, jobguard.check_result(j.operation, $2::jsonb))
			    FROM jobguard.attempt_overview a JOIN jobguard.job_overview j ON j.job_id = a.job_id
			   WHERE a.attempt_id = $1}, $attempt, $result);
		if ($row && $row->[0])
		{
			record('confirmed', 'finish_attempt', $attempt);
			$outcome = 'rejected';
		}
	}
	return record('unexpected', 'finish_attempt', $value, ($message // '') =~ s/\s+/ /gr)
	  unless defined $outcome;
	record('finish', $attempt, $outcome);
	record('unexpected', 'finish_attempt', $attempt, "$outcome instead of $want") if $outcome ne $want;
	return;
}

# attempt_state: the attempt's effective state and error, read back.
sub attempt_state
{
	my ($attempt) = @_;
	my $row = expect('read_attempt',
		q{SELECT state, coalesce(error, '') FROM jobguard.attempt_overview WHERE attempt_id = $1},
		$attempt);
	return $row ? @$row : ('', '');
}

# cancel_attempt: cancel once.  A resend after a lost connection meets the
# attempt already cancelled (JG006): read it, and take 'cancelled' as the
# answer.
sub cancel_attempt
{
	my ($attempt, $reason) = @_;
	my ($status, $value, $message) =
	  call('cancel_attempt', q{SELECT jobguard.cancel_attempt($1, $2)}, $attempt, $reason);
	if ($status eq 'error' && $value eq 'JG006' && (attempt_state($attempt))[0] eq 'cancelled')
	{
		record('confirmed', 'cancel_attempt', $attempt);
		$status = 'ok';
	}
	return record('unexpected', 'cancel_attempt', $value, $message =~ s/\s+/ /gr) if $status ne 'ok';
	record('cancel_attempt', $attempt);
	return;
}

# fail_attempt: report a failure once; on JG006 the attempt already failed
# with this very error means the first send committed.
sub fail_attempt
{
	my ($attempt, $error) = @_;
	my ($status, $value, $message) =
	  call('fail_attempt', q{SELECT jobguard.fail_attempt($1, $2)}, $attempt, $error);
	if ($status eq 'error' && $value eq 'JG006')
	{
		my ($state, $stored) = attempt_state($attempt);
		if ($state eq 'failed' && $stored eq $error)
		{
			record('confirmed', 'fail_attempt', $attempt);
			$status = 'ok';
		}
	}
	return record('unexpected', 'fail_attempt', $value, $message =~ s/\s+/ /gr) if $status ne 'ok';
	record('fail', $attempt);
	return;
}

# cancel_job: cancelling a cancelled job answers 'cancelled' again, so a
# resend needs nothing special.
sub cancel_job
{
	my ($job, $reason) = @_;
	expect('cancel_job', q{SELECT jobguard.cancel_job($1, $2)}, $job, $reason) or return;
	record('cancel_job', $job);
	return;
}

# intent: the whole lifecycle of intent $i; the shape depends on $i only.
sub intent
{
	my ($i) = @_;
	my $key = "c$opt{client}-$i";
	my $job = submit("client-$opt{client}", $key, $i) // return;
	my $first = begin($job, "$key/1", undef) // return;
	my $shape = $i % 10;
	if ($shape == 3)
	{
		# a result that breaks the contract is rejected; a second try wins
		finish($first, '{"broken": true}', 'rejected');
		my $second = begin($job, "$key/2", undef) // return;
		finish($second, qq({"id": "$key/2"}), 'won');
	}
	elsif ($shape == 5)
	{
		# the provider stalls: cancel, fall back, and the late result loses
		cancel_attempt($first, 'stalled');
		my $second = begin($job, "$key/2", 'adyen') // return;
		finish($second, qq({"id": "$key/2"}), 'won');
		finish($first, qq({"id": "$key/1"}), 'lost');
	}
	elsif ($shape == 7)
	{
		# the customer cancels; the provider's late result loses
		cancel_job($job, 'customer cancelled');
		finish($first, qq({"id": "$key/1"}), 'lost');
	}
	elsif ($shape == 9)
	{
		# the provider declines; the next attempt wins
		fail_attempt($first, "declined $key/1");
		my $second = begin($job, "$key/2", undef) // return;
		finish($second, qq({"id": "$key/2"}), 'won');
	}
	else
	{
		finish($first, qq({"id": "$key/1"}), 'won');
	}
	return;
}

my $done = 0;
while ($done < $opt{intents} && time() < $give_up_at)
{
	last if $opt{'stop-file'} ne '' && -e $opt{'stop-file'};
	intent(++$done);
}
record('done', $done);
$dbh->disconnect if $dbh;
close($out);
