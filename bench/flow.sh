# bench/flow.sh: the flow-control part of 'bench/run --growth' (sourced by
# bench/growth.sh, with its say, section, sql, pgbench_run, PAYLOAD, RESULT,
# OUT; bench/flow-local runs it alone on a throwaway cluster).
#
#   (d) claim by priority: submit one job of 5 priorities, claim and finish
#       (bench/workloads/jobguard_claim_priority.pgbench) with FLOW_JOBS
#       jobs stored — priorities from 5 levels, 20 % of them pending and
#       scheduled a day ahead, the rest succeeded — against an empty
#       table; target: ratio >= 0.80.
#   (e) limits: the lifecycle (submit, begin, finish) against a provider
#       whose max_in_flight never binds, against one with no policy;
#       target: ratio >= 0.90.
#   (f) failover routes (1.3): submit, claim and fail, claim again (the
#       route chooses the certified fallback) and finish
#       (bench/workloads/jobguard_claim_failover.pgbench), with the jobs of
#       (d) stored — each pending one with a failed attempt — and a route
#       on their operation, against an empty table with the same route;
#       target: ratio >= 0.80.
#
# Tunables: FLOW_JOBS (GROWTH_JOBS, 5000000), FLOW_SECONDS (GROWTH_SECONDS),
# FLOW_ROUNDS (GROWTH_ROUNDS), FLOW_CLIENTS (8).

FLOW_JOBS=${FLOW_JOBS:-${GROWTH_JOBS:-5000000}}
FLOW_SECONDS=${FLOW_SECONDS:-${GROWTH_SECONDS:-5}}
FLOW_ROUNDS=${FLOW_ROUNDS:-${GROWTH_ROUNDS:-5}}
FLOW_CLIENTS=${FLOW_CLIENTS:-8}

for db in jg_flow_empty jg_flow_big jg_flow_nopolicy jg_flow_policy; do
	psql -X -q -c "CREATE DATABASE $db" postgres
	PGDATABASE=$db sql -c "CREATE EXTENSION jobguard"
done
PGDATABASE=jg_flow_policy sql -c "SELECT jobguard.set_provider_policy('stripe', max_in_flight => 1000000)" >/dev/null

# The stored jobs: priority g % 5; one in five (g % 5 = 1, so of every
# priority) pending and due tomorrow; the others succeeded, each with its
# winning attempt (as bench/growth.sh loads them).
flow_t0=$(date +%s)
PGDATABASE=jg_flow_big sql -c "SET session_replication_role = replica" \
	-c "SET synchronous_commit = off" \
	-c "INSERT INTO jobguard.jobs (id, owner_id, idempotency_key, operation, params, provider,
			version, completed_by, result, created_at, completed_at, priority, not_before)
		SELECT g, 'owner-' || (g % 10000), 'load-' || g, 'charge', '$PAYLOAD', 'stripe',
			CASE WHEN g % 5 = 1 THEN 1 ELSE 2 END,
			CASE WHEN g % 5 = 1 THEN NULL ELSE $FLOW_JOBS + g END,
			CASE WHEN g % 5 = 1 THEN NULL ELSE '$RESULT'::jsonb END,
			now() - interval '1 day',
			CASE WHEN g % 5 = 1 THEN NULL ELSE now() - interval '1 day' END,
			(g % 5)::smallint,
			CASE WHEN g % 5 = 1 THEN now() + interval '1 day' END
		  FROM generate_series(1, $FLOW_JOBS) g" \
	-c "INSERT INTO jobguard.attempts (id, job_id, attempt_no, provider, state, read_version,
			started_at, deadline, finished_at)
		SELECT $FLOW_JOBS + g, g, 1, 'stripe', 'succeeded', 1, now() - interval '1 day',
			now() - interval '1 day' + interval '30 seconds', now() - interval '1 day'
		  FROM generate_series(1, $FLOW_JOBS) g WHERE g % 5 <> 1" \
	-c "SELECT setval('jobguard.id_seq', 2 * $FLOW_JOBS)" >/dev/null
PGDATABASE=jg_flow_big sql -c "VACUUM ANALYZE jobguard.jobs" -c "VACUUM ANALYZE jobguard.attempts"
flow_load_s=$(($(date +%s) - flow_t0))

# (f): the stored jobs again, each pending one with a failed attempt against
# its own provider, and a route with a certified fallback on 'charge'; the
# reference is an empty table with the same route
psql -X -q -c "CREATE DATABASE jg_flow_routed TEMPLATE jg_flow_big" postgres
psql -X -q -c "CREATE DATABASE jg_flow_routed_empty" postgres
PGDATABASE=jg_flow_routed_empty sql -c "CREATE EXTENSION jobguard"
PGDATABASE=jg_flow_routed sql -c "SET session_replication_role = replica" \
	-c "INSERT INTO jobguard.attempts (id, job_id, attempt_no, provider, state, read_version,
			started_at, deadline, finished_at, error, tries)
		SELECT 2 * $FLOW_JOBS + g, g, 1, 'stripe', 'failed', 1, now() - interval '1 day',
			now() - interval '1 day' + interval '30 seconds', now() - interval '1 day', 'declined', 1
		  FROM generate_series(1, $FLOW_JOBS) g WHERE g % 5 = 1" \
	-c "SELECT setval('jobguard.id_seq', 3 * $FLOW_JOBS)" \
	-c "VACUUM ANALYZE jobguard.attempts" >/dev/null
for db in jg_flow_routed jg_flow_routed_empty; do
	PGDATABASE=$db sql -c "SELECT jobguard.certify_provider('charge', 'adyen')" \
		-c "SELECT jobguard.set_failover('charge', '{adyen,braintree}')" >/dev/null
done

flow_reset() {
	case $1 in
		jg_flow_big)
			PGDATABASE=$1 sql -c "DELETE FROM jobguard.jobs WHERE id > 2 * $FLOW_JOBS" \
				-c "VACUUM (INDEX_CLEANUP ON) jobguard.jobs, jobguard.attempts" ;;
		jg_flow_routed)
			PGDATABASE=$1 sql -c "DELETE FROM jobguard.jobs WHERE id > 3 * $FLOW_JOBS" \
				-c "VACUUM (INDEX_CLEANUP ON) jobguard.jobs, jobguard.attempts" ;;
		*) PGDATABASE=$1 sql -c "TRUNCATE jobguard.attempts, jobguard.jobs" ;;
	esac
}

# flow_ratio label workload db_a db_b target: FLOW_ROUNDS alternating runs
# of workload on db_a (the reference) and db_b; a table row with the median
# TPS of each and the median of the per-round ratios b / a.
flow_ratio() {
	local label=$1 workload=$2 a=$3 b=$4 target=$5 raw=$OUT/flow-$3-$4.tsv round db order res
	: >"$raw"
	for db in $a $b; do
		PGDATABASE=$db pgbench_run "$BENCH/workloads/$workload" "$FLOW_CLIENTS" off \
			"${GROWTH_WARMUP:-5}" "$OUT/flow-warmup-$db.log" >/dev/null
	done
	for round in $(seq 1 "$FLOW_ROUNDS"); do
		order="$a $b"
		[ $((round % 2)) = 0 ] && order="$b $a"
		for db in $order; do
			flow_reset "$db"
			res=$(PGDATABASE=$db pgbench_run "$BENCH/workloads/$workload" "$FLOW_CLIENTS" off \
				"$FLOW_SECONDS" "$OUT/flow-$db-r$round.log")
			printf '%s\t%s\t%s\n' "$round" "$db" "${res%% *}" >>"$raw"
			printf '  round %s  %-16s  %9.0f tps\n' "$round" "$db" "${res%% *}"
		done
	done
	awk -F'\t' -v a="$a" -v b="$b" -v label="$label" -v target="$target" -v c="$FLOW_CLIENTS" '
		function median(list,    x, n, i, j, t) {
			n = split(list, x, " ")
			for (i = 2; i <= n; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] > t; j--) x[j + 1] = x[j]; x[j + 1] = t }
			return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
		}
		{ tps[$1, $2] = $3; rounds[$1] = 1 }
		END {
			for (k in rounds) { ta = ta " " tps[k, a]; tb = tb " " tps[k, b]; r = r " " tps[k, b] / tps[k, a] }
			m = median(r)
			printf "| %s | %s | %.0f | %.0f | %.2f | %s |\n", label, c, median(ta), median(tb), m,
				(m >= target ? "PASS" : "FAIL") " (>= " target ")"
		}' "$raw" | tee -a "$OUT/growth-report.md"
}

section "(d) Flow control: claim order and limits"
say "Loaded $FLOW_JOBS jobs in ${flow_load_s} s: priorities 0 to 4, one in five pending and scheduled a day ahead (in jobs_run_order, never due), the others succeeded. Each run ${FLOW_SECONDS} s, $FLOW_ROUNDS rounds alternating the two databases, each reset before every run."
say ""
say "| measured | clients | TPS reference | TPS measured | ratio | result |"
say "|---|---:|---:|---:|---:|---|"
flow_ratio "claim by priority, $FLOW_JOBS jobs stored vs empty" jobguard_claim_priority.pgbench \
	jg_flow_empty jg_flow_big 0.8
flow_ratio "lifecycle, max_in_flight never binding vs no policy" jobguard_lifecycle.pgbench \
	jg_flow_nopolicy jg_flow_policy 0.9
flow_ratio "claim, fail, fail over with a route, $FLOW_JOBS jobs stored (pending ones failed once) vs empty" \
	jobguard_claim_failover.pgbench jg_flow_routed_empty jg_flow_routed 0.8
