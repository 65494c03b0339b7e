# JobguardCheck: checks the TAP tests share (t/*.pl load it with
# "use lib" on their own directory; prove runs only t/*.pl, not this file).
package JobguardCheck;

use strict;
use warnings;
use Exporter 'import';
use Test::More;

our @EXPORT = qw(amcheck_ok);

# amcheck_ok($node, $db, $what): amcheck on every btree index of jobguard's
# tables (bt_index_parent_check with heapallindexed and rootdescend; on a
# standby, where that cannot lock, bt_index_check with heapallindexed) and
# verify_heapam with check_toast on every table: one test, passing when
# nothing is reported.
sub amcheck_ok
{
	my ($node, $db, $what) = @_;
	my $standby = $node->safe_psql($db, 'SELECT pg_is_in_recovery()') eq 't';
	$node->safe_psql($db, 'CREATE EXTENSION IF NOT EXISTS amcheck') unless $standby;
	my $check = $standby
	  ? 'bt_index_check(i.indexrelid, heapallindexed => true)'
	  : 'bt_index_parent_check(i.indexrelid, heapallindexed => true, rootdescend => true)';
	my ($ret, $out, $err) = $node->psql($db, qq{
SELECT count($check)
  FROM pg_index i
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_class ic ON ic.oid = i.indexrelid
  JOIN pg_am am ON am.oid = ic.relam
 WHERE t.relnamespace = 'jobguard'::regnamespace AND am.amname = 'btree'
   AND i.indisvalid AND i.indisready;
SELECT c.relname || ': ' || v.msg
  FROM pg_class c, verify_heapam(c.oid, check_toast => true) v
 WHERE c.relnamespace = 'jobguard'::regnamespace AND c.relkind = 'r';
});
	my ($indexes, @problems) = split /\n/, $out;
	ok($ret == 0 && defined $indexes && $indexes > 0 && !@problems,
		"$what: amcheck finds no corruption in "
		  . ($indexes // 0) . " indexes and jobguard's tables");
	diag("amcheck: $err @problems") if $ret != 0 || @problems;
	return;
}

1;
