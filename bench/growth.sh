# bench/growth.sh: 'bench/run --growth' — does jobguard stay fast, small
# and flat as it ages?  Sourced by bench/run after the cluster is up (it
# provides sql, pgbench_run, PAYLOAD, MACHINE, CLIENTS, OUT, RESULTS).
#
#   (a) scale   submit_new, lifecycle and claim with 5 million jobs (each with its
#               succeeded attempt) already stored, against an empty table,
#               alternating the two databases; plus the scans the fast path
#               adds (pg_stat_user_tables) and the plans of the SQL path's
#               statements (auto_explain of one submit, begin and finish)
#   (b) bloat   after 1 million lifecycles: bytes per job of table and
#               indexes, and how many finishing UPDATEs were HOT
#   (c) memory  those 1 million lifecycles run in ONE backend (a procedure
#               committing after every call, like a worker would): the
#               backend's memory (pg_backend_memory_contexts) along the way
#   (d) flow    claim by priority at FLOW_JOBS stored jobs (5 priorities,
#               20 % scheduled ahead) against an empty table, and the
#               lifecycle under a never-binding max_in_flight against no
#               policy (bench/flow.sh)
#
# Tunables (environment): GROWTH_JOBS (5000000), GROWTH_LIFECYCLES (1000000),
# BENCH_SECONDS (5 here), BENCH_ROUNDS (5 here), GROWTH_WARMUP (5 s per
# workload and database, not measured, after loading), BENCH_PUBLISH=0.
# A report with a FAIL in it is not published and the run exits non-zero.

GROWTH_JOBS=${GROWTH_JOBS:-5000000}
GROWTH_LIFECYCLES=${GROWTH_LIFECYCLES:-1000000}
GROWTH_SECONDS=${BENCH_SECONDS:-5}
GROWTH_ROUNDS=${BENCH_ROUNDS:-5}
GROWTH_WARMUP=${GROWTH_WARMUP:-5}
RESULT='{"charge": "ch_42", "status": "paid"}'
GREPORT=$RESULTS/growth.md
: >"$OUT/growth-report.md"
say() { echo "$*" | tee -a "$OUT/growth-report.md"; }
section() { say ""; say "## $*"; say ""; }
elapsed() { echo "$(($(date +%s) - started)) s"; }

for db in jg_empty jg_big jg_life; do
	psql -X -q -c "CREATE DATABASE $db" postgres
	PGDATABASE=$db sql -c "CREATE EXTENSION jobguard"
done

say "# jobguard growth benchmark"
say ""
say "- machine: $MACHINE"
say "- shared_buffers 512MB, fsync on, synchronous_commit off, pgbench -M prepared"
say "- jobguard fast path: $(PGDATABASE=jg_big sql -c "SELECT jobguard.fast_path_status()")"
say "- run: $(date -u '+%Y-%m-%d %H:%M UTC')"

# ------------------------------------------------------------ (a) scale

echo "jobguard: loading $GROWTH_JOBS succeeded jobs into jobguard.jobs ($(elapsed))"
t0=$(date +%s)
# Straight into the tables, as superuser: the rows jobguard itself would
# have written for one submit, one begin and one winning finish each.  The
# foreign key triggers are skipped (session_replication_role): the rows are
# consistent by construction.
PGDATABASE=jg_big sql -c "SET session_replication_role = replica" \
	-c "SET synchronous_commit = off" \
	-c "INSERT INTO jobguard.jobs (id, owner_id, idempotency_key, operation, params, provider,
			version, completed_by, result, created_at, completed_at)
		SELECT g, 'owner-' || (g % 10000), 'load-' || g, 'charge', '$PAYLOAD', 'stripe',
			2, $GROWTH_JOBS + g, '$RESULT', now() - interval '1 day', now() - interval '1 day'
		  FROM generate_series(1, $GROWTH_JOBS) g" \
	-c "INSERT INTO jobguard.attempts (id, job_id, attempt_no, provider, state, read_version,
			started_at, deadline, finished_at)
		SELECT $GROWTH_JOBS + g, g, 1, 'stripe', 'succeeded', 1, now() - interval '1 day',
			now() - interval '1 day' + interval '30 seconds', now() - interval '1 day'
		  FROM generate_series(1, $GROWTH_JOBS) g" \
	-c "SELECT setval('jobguard.id_seq', 2 * $GROWTH_JOBS)" \
	>/dev/null
PGDATABASE=jg_big sql -c "VACUUM ANALYZE jobguard.jobs" -c "VACUUM ANALYZE jobguard.attempts"
load_s=$(($(date +%s) - t0))
big_size=$(PGDATABASE=jg_big sql -c "SELECT pg_size_pretty(pg_total_relation_size('jobguard.jobs') + pg_total_relation_size('jobguard.attempts'))")

section "(a) Scale: $GROWTH_JOBS stored jobs vs an empty table"
say "Loaded $GROWTH_JOBS jobs with their attempts in ${load_s} s (INSERT ... SELECT, VACUUM ANALYZE); jobs + attempts with indexes: $big_size."
say "Each run: ${GROWTH_SECONDS} s; the two databases alternate, $GROWTH_ROUNDS rounds; before every run the empty one is emptied, and the jobs earlier runs added to the big one are deleted and vacuumed away, so that both hold before each run what they held before the first. Before the first round each workload runs ${GROWTH_WARMUP} s on each database, not measured: a freshly loaded table is not yet in the buffer cache, which says nothing about a table that has grown in use."
say ""

for db in jg_big jg_empty; do
	for w in submit_new lifecycle claim; do
		PGDATABASE=$db pgbench_run "$BENCH/workloads/jobguard_$w.pgbench" 8 off \
			"$GROWTH_WARMUP" "$OUT/growth-warmup-$w-$db.log" >/dev/null
	done
done

# Before every run each database goes back to what it held before the
# first: nothing in the empty one, the loaded jobs in the big one (what the
# runs added, ids above the loaded ones, is deleted and vacuumed away, as
# the empty one's is truncated).  Without this the big database would hold
# the jobs that submit_new left pending, and each claim there would take
# ten of them where the empty one's takes the one just submitted.
reset_database() {
	if [ "$1" = jg_empty ]; then
		PGDATABASE=$1 sql -c "TRUNCATE jobguard.attempts, jobguard.jobs"
	else
		PGDATABASE=$1 sql -c "DELETE FROM jobguard.jobs WHERE id > 2 * $GROWTH_JOBS" \
			-c "VACUUM (INDEX_CLEANUP ON) jobguard.jobs, jobguard.attempts"
	fi
}

SRAW=$OUT/growth-tps.tsv
: >"$SRAW"
for round in $(seq 1 "$GROWTH_ROUNDS"); do
	for c in $CLIENTS; do
		for w in submit_new lifecycle claim; do
			order="jg_empty jg_big"
			[ $((round % 2)) = 0 ] && order="jg_big jg_empty"
			for db in $order; do
				reset_database $db
				res=$(PGDATABASE=$db pgbench_run "$BENCH/workloads/jobguard_$w.pgbench" "$c" off \
					"$GROWTH_SECONDS" "$OUT/growth-$w-c$c-$db-r$round.log")
				tps=${res%% *}
				printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$w" "$c" "$db" "$tps" >>"$SRAW"
				printf '  round %s  %-11s  %s clients  %-8s  %9.0f tps\n' "$round" "$w" "$c" "$db" "$tps"
			done
		done
	done
done
say "| workload | clients | TPS empty | TPS with $GROWTH_JOBS jobs | ratio | result (≥ 0.80) |"
say "|---|---:|---:|---:|---:|---|"
awk -F'\t' '
	function median(list,    a, n, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{ cell = $2 "\t" $3; tps[$1, cell, $4] = $5; rounds[$1] = 1; if (!(cell in order)) order[cell] = ++n }
	END {
		for (cell in order) {
			e = ""; b = ""; r = ""
			for (k in rounds) {
				e = e " " tps[k, cell, "jg_empty"]; b = b " " tps[k, cell, "jg_big"]
				r = r " " tps[k, cell, "jg_big"] / tps[k, cell, "jg_empty"]
			}
			split(cell, f, "\t"); m = median(r)
			printf "%d| %s | %s | %.0f | %.0f | %.2f | %s |\n", order[cell], f[1], f[2], median(e), median(b), m, (m >= 0.8 ? "PASS" : "FAIL")
		}
	}' "$SRAW" | sort -n | cut -d'|' -f2- | sed 's/^/|/' | tee -a "$OUT/growth-report.md"

# The fast path (src/rows.c) runs no SQL: it reads and writes through the
# tables' unique indexes only.  Shown by the server's own counters: one
# lifecycle and one replayed submit in the big database, in one
# transaction, and the sequential and index scans of jobs and attempts they
# made, as that transaction's own counters say (pg_stat_get_xact_numscans:
# this backend only, so the sweeper's work meanwhile is not counted).
scans=$(PGDATABASE=jg_big psql -X -q -At -v ON_ERROR_STOP=1 <<EOF | tail -1
BEGIN;
SELECT job_id AS jid FROM jobguard.submit('fast', 'k1', 'charge', '$PAYLOAD', 'stripe') \gset
SELECT jobguard.submit('fast', 'k1', 'charge', '$PAYLOAD', 'stripe') IS NOT NULL;
SELECT jobguard.begin_attempt(:jid) AS aid \gset
SELECT jobguard.finish_attempt(:aid, '$RESULT') IS NOT NULL;
SELECT sum(pg_stat_get_xact_numscans(c.oid)),
	   sum((SELECT sum(pg_stat_get_xact_numscans(i.indexrelid)) FROM pg_index i WHERE i.indrelid = c.oid))
  FROM pg_class c
 WHERE c.oid IN ('jobguard.jobs'::regclass, 'jobguard.attempts'::regclass);
COMMIT;
EOF
)
seq_added=${scans%|*}
idx_added=${scans#*|}
section "Scans of the fast path ($GROWTH_JOBS jobs stored)"
say "One submit, one replayed submit, one begin and one finish, in one transaction, made $seq_added sequential and $idx_added index scans of jobs and attempts (pg_stat_get_xact_numscans)."
if [ "$seq_added" -eq 0 ] && [ "$idx_added" -gt 0 ]; then
	say ""
	say "PASS: the fast path reaches jobs and attempts through indexes only."
else
	say ""
	say "FAIL: the fast path scanned a whole table."
fi

# The plans of the SQL statements that stand in for the fast path (when a
# user has added a trigger, or jobguard.fast_path is off), in the big
# database: auto_explain of nested statements for one lifecycle and one
# replayed submit.
PLANS=$OUT/growth-plans.txt
PGDATABASE=jg_big psql -X -q -v ON_ERROR_STOP=1 >/dev/null 2>"$PLANS" <<EOF
SET jobguard.fast_path = off;
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_level = notice;
SET client_min_messages = notice;
SELECT job_id AS jid FROM jobguard.submit('plans', 'k1', 'charge', '$PAYLOAD', 'stripe') \gset
SELECT jobguard.submit('plans', 'k1', 'charge', '$PAYLOAD', 'stripe');
SELECT jobguard.begin_attempt(:jid) AS aid \gset
SELECT jobguard.finish_attempt(:aid, '$RESULT');
EOF
section "Plans of the SQL path's hot statements (jobguard.fast_path = off; auto_explain, $GROWTH_JOBS jobs stored)"
say "| statement run by jobguard | plan nodes touching tables |"
say "|---|---|"
awk '
	/Query Text:/ { if (q != "") print q "\t" nodes; q = $0; sub(/.*Query Text: /, "", q); nodes = ""; next }
	/(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan|Bitmap Index Scan|Insert on|Update on|LockRows)/ {
		n = $0; sub(/^[ \t]*(->)?[ \t]*/, "", n); sub(/  \(cost.*/, "", n); sub(/ \(cost.*/, "", n)
		nodes = nodes (nodes == "" ? "" : "; ") n
	}
	END { if (q != "") print q "\t" nodes }' "$PLANS" |
	grep -v "^SELECT jobguard\.\|^SELECT job_id AS jid" |
	awk -F'\t' '{ q = $1; if (length(q) > 90) q = substr(q, 1, 87) "..."; gsub(/\|/, "\\|", q); printf "| `%s` | %s |\n", q, $2 }' |
	tee -a "$OUT/growth-report.md"
if grep -q "Seq Scan on \(jobs\|attempts\)" "$PLANS"; then
	say ""
	say "FAIL: a hot statement scans a whole table (see bench/out/growth-plans.txt)."
else
	say ""
	say "PASS: every hot statement reaches jobs and attempts through an index (full plans: bench/out/growth-plans.txt)."
fi

# ------------------------------------------------------------ (b) + (c)

echo "jobguard: $GROWTH_LIFECYCLES lifecycles in one backend ($(elapsed))"
PGDATABASE=jg_life sql >/dev/null <<EOF
CREATE PROCEDURE public.lifecycles(n integer, prefix text)
LANGUAGE plpgsql AS \$\$
DECLARE
	jid bigint;
	aid bigint;
BEGIN
	FOR i IN 1..n LOOP
		SELECT s.job_id INTO jid FROM jobguard.submit('worker', prefix || i, 'charge', '$PAYLOAD', 'stripe') s;
		COMMIT;
		aid := jobguard.begin_attempt(jid);
		COMMIT;
		IF jobguard.finish_attempt(aid, '$RESULT') <> 'won' THEN
			RAISE EXCEPTION 'attempt % did not win', aid;
		END IF;
		COMMIT;
	END LOOP;
END
\$\$;
EOF
WARMUP=10000
STEPS=10
per_step=$(((GROWTH_LIFECYCLES - WARMUP) / STEPS))
MEM=$OUT/growth-memory.tsv
{
	echo "SET synchronous_commit = off;"
	echo "CALL public.lifecycles($WARMUP, 'warm-');"
	echo "SELECT $WARMUP, sum(total_bytes), sum(used_bytes), count(*), round(extract(epoch FROM clock_timestamp()), 3) FROM pg_backend_memory_contexts;"
	for i in $(seq 1 $STEPS); do
		echo "CALL public.lifecycles($per_step, 'step$i-');"
		echo "SELECT $((WARMUP + i * per_step)), sum(total_bytes), sum(used_bytes), count(*), round(extract(epoch FROM clock_timestamp()), 3) FROM pg_backend_memory_contexts;"
	done
} | PGDATABASE=jg_life sql -F$'\t' >"$MEM"
sleep 2		# let the backend's table statistics reach pg_stat_user_tables

section "(b) Bloat: sizes after $GROWTH_LIFECYCLES lifecycles (autovacuum on)"
PGDATABASE=jg_life sql -F$'\t' -c "
	WITH n AS (SELECT count(*)::numeric AS jobs FROM jobguard.jobs)
	SELECT c.relname, pg_size_pretty(pg_relation_size(c.oid)), round(pg_relation_size(c.oid) / n.jobs),
		   pg_size_pretty(pg_indexes_size(c.oid)), round(pg_indexes_size(c.oid) / n.jobs),
		   pg_size_pretty(pg_total_relation_size(c.oid)), round(pg_total_relation_size(c.oid) / n.jobs),
		   s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd,
		   round(100.0 * s.n_tup_hot_upd / nullif(s.n_tup_upd, 0), 1), s.n_dead_tup, s.autovacuum_count
	  FROM n, pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
	 WHERE c.oid IN ('jobguard.jobs'::regclass, 'jobguard.attempts'::regclass)
	 ORDER BY c.relname DESC" >"$OUT/growth-bloat.tsv"
say "| table | heap | heap B/job | indexes | indexes B/job | total | total B/job | inserts | updates | HOT updates | HOT % | dead rows | autovacuums |"
say "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
sed 's/\t/ | /g; s/^/| /; s/$/ |/' "$OUT/growth-bloat.tsv" | tee -a "$OUT/growth-report.md"
PGDATABASE=jg_life sql -F$'\t' -c "
	SELECT c.relname, pg_size_pretty(pg_relation_size(c.oid)),
		   round(pg_relation_size(c.oid) / (SELECT count(*) FROM jobguard.jobs)::numeric, 1)
	  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
	 WHERE i.indrelid IN ('jobguard.jobs'::regclass, 'jobguard.attempts'::regclass)
	 ORDER BY 1" >"$OUT/growth-indexes.tsv"
say ""
say "| index | size | B/job |"
say "|---|---:|---:|"
sed 's/\t/ | /g; s/^/| /; s/$/ |/' "$OUT/growth-indexes.tsv" | tee -a "$OUT/growth-report.md"
jobs_hot=$(awk -F'\t' '$1 == "jobs" { print $11 }' "$OUT/growth-bloat.tsv")
say ""
say "The finishing compare-and-swap UPDATE of jobguard.jobs was HOT for ${jobs_hot:-?} % of the updates."
say "(An attempt's closing UPDATE changes state, a column the partial indexes of jobguard.attempts name in their predicates, so it can never be HOT.)"

section "(c) Memory: $GROWTH_LIFECYCLES lifecycles in one backend"
say "A procedure calls submit, begin_attempt and finish_attempt, committing after each call; the same session reads pg_backend_memory_contexts."
say ""
say "| lifecycles done | total_bytes | used_bytes | contexts | lifecycles/s since previous |"
say "|---:|---:|---:|---:|---:|"
awk -F'\t' '{ rate = NR > 1 && $5 > t ? sprintf("%.0f", ($1 - n) / ($5 - t)) : ""
	printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, rate; n = $1; t = $5 }' "$MEM" | tee -a "$OUT/growth-report.md"
read -r mem_before mem_after <<<"$(awk -F'\t' 'NR == 1 { b = $2 } { a = $2 } END { print b, a }' "$MEM")"
growth_bytes=$((mem_after - mem_before))
say ""
if [ "$growth_bytes" -le 262144 ]; then
	say "PASS: flat — the backend's memory changed by $growth_bytes bytes over $((GROWTH_LIFECYCLES - WARMUP)) lifecycles after the $WARMUP warm-up ones (limit: +256 kB)."
else
	say "FAIL: the backend grew by $growth_bytes bytes over $((GROWTH_LIFECYCLES - WARMUP)) lifecycles."
fi

# (d) flow control: claim order at size, and the cost of a limit
. "$BENCH/flow.sh"

say ""
say "Total time of bench/run --growth: $(elapsed)."
# a failed target publishes nothing, and the run fails
nfailed=$(grep -c 'FAIL' "$OUT/growth-report.md" || true)
if [ "$nfailed" != 0 ]; then
	echo "jobguard: $nfailed lines of the growth report say FAIL: not published (bench/out/growth-report.md)" >&2
	exit 1
fi
if [ "${BENCH_PUBLISH:-1}" != 1 ]; then
	echo "jobguard: BENCH_PUBLISH=0: not published (bench/out/growth-report.md)"
	exit 0
fi
cp "$OUT/growth-report.md" "$GREPORT"
# the tables the docs include, cut from the report, and the docs updated
"$BENCH/fragments" growth
"$ROOT/scripts/docs-bench" --write
echo
echo "jobguard: wrote bench/results/growth.md"
