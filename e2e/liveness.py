#!/usr/bin/env python3
"""The liveness end-to-end test (e2e/run-liveness runs it; make test counts
its lines).

Jobs against a provider that deduplicates by idempotency key
(e2e/fake_provider.py; its policy has dedupes_for, so unknown attempts are
redriven) are drained by Python and Node Workers, with a Python and a Node
Reconciler beside them, while the test SIGKILLs workers and reconcilers,
holds every new request at the provider past the workers' patience,
stalls single requests and drops replies.  At the end:

  - every job succeeded, with exactly one succeeded attempt;
  - the provider performed exactly one effect per job, and the job's result
    is that effect's answer;
  - no attempt called the provider twice; no key named two jobs;
  - a job's attempts used one provider key (no failed attempt in between)
    or a new key only after a failed attempt;
  - some jobs were redriven; none was left blocked or cancelled by hand;
  - jobguard.check_invariants() is empty.

Prints pg_regress-style lines ("test liveness e2e: ... ok") and one line
with the counts: "liveness e2e: jobs=... effects=... redrives=...".
Needs PG* naming a database with jobguard 1.2 and the clients' paths
(PYTHONPATH, NODE_PATH) set by e2e/run-liveness.
"""

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from typing import Any, Dict, List, Tuple

import psycopg

from fake_provider import FakeProvider

HERE = os.path.dirname(os.path.abspath(__file__))
failures = 0


def check(name: str, ok: bool, detail: str = "") -> None:
    """One pg_regress-style line."""
    global failures
    if not ok:
        failures += 1
    print(f"test liveness e2e: {name} ... {'ok' if ok else 'FAILED'}"
          + (f" ({detail})" if detail and not ok else ""), flush=True)


class Fleet:
    """The worker and reconciler processes, started, killed and replaced."""

    def __init__(self, env: Dict[str, str], logdir: str) -> None:
        """No process yet."""
        self.env, self.logdir = env, logdir
        self.procs: Dict[str, Tuple[subprocess.Popen[bytes], str, str]] = {}
        self.serial = 0
        self.kills = Counter[str]()

    def spawn(self, lang: str, role: str) -> None:
        """Start one process: lang python or node, role worker or reconciler."""
        self.serial += 1
        name = f"e2e-{lang}-{role}-{self.serial}"
        cmd = ([sys.executable, os.path.join(HERE, "liveness_worker.py")] if lang == "python"
               else ["node", os.path.join(HERE, "liveness_worker.js")]) + [role, name]
        out = open(os.path.join(self.logdir, name + ".out"), "wb")
        err = open(os.path.join(self.logdir, name + ".err"), "wb")
        self.procs[name] = (subprocess.Popen(cmd, env=self.env, stdout=out, stderr=err), lang, role)

    def kill_one(self, rng: random.Random) -> str:
        """SIGKILL one running process (workers three times as often as
        reconcilers) and start another of its kind in its place."""
        alive = [n for n, (p, _, _) in self.procs.items() if p.poll() is None]
        weights = [3 if self.procs[n][2] == "worker" else 1 for n in alive]
        name = rng.choices(alive, weights)[0]
        proc, lang, role = self.procs.pop(name)
        proc.kill()
        proc.wait()
        self.kills[f"{lang} {role}"] += 1
        self.spawn(lang, role)
        return name

    def died(self) -> List[str]:
        """Processes that ended by themselves (none should)."""
        return [n for n, (p, _, _) in self.procs.items() if p.poll() is not None]

    def stop(self) -> Tuple[List[Dict[str, Any]], List[str]]:
        """SIGTERM every process; their stats lines, and those that did not
        stop cleanly within 20 s (then killed)."""
        for p, _, _ in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        stats, unclean = [], []
        for name, (p, _, _) in self.procs.items():
            try:
                rc = p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                rc = -9
            if rc != 0:
                unclean.append(f"{name}: exit {rc}: {self.tail(name)}")
            with open(os.path.join(self.logdir, name + ".out")) as f:
                for line in f:
                    if line.startswith("stats "):
                        _, role, n, js = line.split(" ", 3)
                        stats.append({"role": role, "name": n, **json.loads(js)})
        return stats, unclean

    def tail(self, name: str) -> str:
        """The last lines of a process's stderr."""
        with open(os.path.join(self.logdir, name + ".err"), errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-3:])


def exporter_checks(conn: psycopg.Connection[Any], metric: Dict[str, Any]) -> None:
    """monitoring/queries.yaml through the real prometheus-postgres-exporter
    on what the run left, plus a job blocked at a provider that does not
    deduplicate and one past its window (a 1-second dedupes_for is within
    the 1-minute margin: never redrivable): the liveness, provider, policy
    and blocked series, with the values of stats() and blocked_jobs."""
    exporter = "/usr/bin/prometheus-postgres-exporter"
    if not os.access(exporter, os.X_OK):
        check("prometheus-postgres-exporter is installed", False, exporter)
        return
    conn.execute("SELECT jobguard.set_provider_policy('short', dedupes_for => '1 second')")
    for provider in ("manual", "short"):
        job = conn.execute("SELECT job_id FROM jobguard.submit('shop', %s, 'refund', '{}', %s)",
                           (f"blocked-{provider}", provider)).fetchone()[0]
        attempt = conn.execute("SELECT jobguard.begin_attempt(%s)", (job,)).fetchone()[0]
        conn.execute("SELECT jobguard.mark_unknown(%s)", (attempt,))
    # preloaded, the sweeper counts blocked.* each round: wait for its count
    # of the two (none of the drained jobs is left blocked)
    for _ in range(50):
        metric = dict(conn.execute("SELECT metric, value FROM jobguard.stats()").fetchall())
        if metric.get("blocked.jobs") == 2:
            break
        time.sleep(0.1)
    check("stats() counts the two blocked jobs (blocked.jobs)", metric.get("blocked.jobs") == 2,
          f"blocked.jobs={metric.get('blocked.jobs')}")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    dsn = (f"host={os.environ.get('PGHOST', '')} port={os.environ.get('PGPORT', '5432')} "
           f"user={os.environ.get('PGUSER', 'postgres')} "
           f"dbname={os.environ.get('PGDATABASE', 'postgres')} sslmode=disable")
    proc = subprocess.Popen(
        [exporter, f"--web.listen-address=127.0.0.1:{port}",
         f"--extend.query-path={os.path.join(HERE, '..', 'monitoring', 'queries.yaml')}",
         "--disable-default-metrics", "--disable-settings-metrics"],
        env=dict(os.environ, DATA_SOURCE_NAME=dsn),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    text = ""
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as res:
                    text = res.read().decode()
                if "jobguard_blocked_jobs" in text:
                    break
            except OSError:
                pass
            time.sleep(0.2)
    finally:
        proc.kill()
        _, err = proc.communicate()
    series: Dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r'^(jobguard_[a-z_]+)(?:\{(.*)\})? (\S+)$', line)
        if m:
            labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', m.group(2) or ""))
            key = m.group(1) + (f"{{{labels['provider']}}}" if "provider" in labels else "")
            series[key] = float(m.group(3))
    want = {
        "jobguard_liveness_redrives_total": metric.get("redrives"),
        "jobguard_liveness_reconciled_total": metric.get("reconciled"),
        "jobguard_liveness_blocked_jobs": metric.get("blocked.jobs"),
        "jobguard_provider_in_flight{psp}": metric.get("provider.psp.in_flight"),
        "jobguard_provider_policy_dedupes_for_seconds{psp}": 3600,
        "jobguard_provider_policy_max_in_flight{psp}": 100,
        "jobguard_blocked_jobs{manual}": 1,
        "jobguard_blocked_redrivable{manual}": 0,
        "jobguard_blocked_past_redrive_window{manual}": 0,
        "jobguard_blocked_jobs{short}": 1,
        "jobguard_blocked_past_redrive_window{short}": 1,
    }
    for what, keys in (("liveness, policy and blocked", [k for k in want if not k.startswith("jobguard_provider_in")]),
                       ("flow control (provider in flight)", [k for k in want if k.startswith("jobguard_provider_in")])):
        wrong = {k: (series.get(k), want[k]) for k in keys
                 if want[k] is None or series.get(k) != float(want[k])}
        check(f"prometheus-postgres-exporter exports the {what} series of monitoring/queries.yaml "
              "with their values", not wrong,
              f"(got, want): {wrong}; exporter: {err.decode(errors='replace')[-300:]}")
    print("liveness e2e: exported " + ", ".join(f"{k}={series.get(k)}" for k in want), flush=True)


def main() -> int:
    """Set up, drain under faults, check."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--chaos-seconds", type=float, default=20)
    ap.add_argument("--limit-seconds", type=float, default=100)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--clients", default="python,node",
                    help="the clients whose Workers and Reconcilers run (comma-separated)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print(f"liveness e2e: seed {args.seed}", flush=True)

    conn = psycopg.connect(autocommit=True)
    # the provider deduplicates for an hour; a limit far above the fleet's
    # 16 claimed attempts, so that flow control counts its attempts in flight
    conn.execute("SELECT jobguard.set_provider_policy('psp', dedupes_for => '1 hour', max_in_flight => 100)")
    n = args.jobs
    rows = conn.execute(
        """SELECT count(*) FILTER (WHERE created) FROM jobguard.submit_many(
             (SELECT array_agg('shop'::text) FROM generate_series(1, %(n)s)),
             (SELECT array_agg('order-' || g) FROM generate_series(1, %(n)s) g),
             (SELECT array_agg('charge'::text) FROM generate_series(1, %(n)s)),
             (SELECT array_agg(jsonb_build_object('amount', g)) FROM generate_series(1, %(n)s) g),
             (SELECT array_agg('psp'::text) FROM generate_series(1, %(n)s)),
             (SELECT array_agg(10) FROM generate_series(1, %(n)s)))""", {"n": n}).fetchone()
    check(f"{n} jobs submitted", rows is not None and rows[0] == n, f"created {rows}")

    provider = FakeProvider(seed=args.seed, stall_seconds=4.0)
    port = provider.start()
    logdir = tempfile.mkdtemp(prefix="jobguard-e2e-")
    env = dict(os.environ, PROVIDER_URL=f"http://127.0.0.1:{port}", HTTP_TIMEOUT="1.5",
               ATTEMPT_TIMEOUT="2", RECONCILE_AFTER="2")
    fleet = Fleet(env, logdir)
    langs = args.clients.split(",")
    for lang in langs:
        for _ in range(4 // len(langs)):
            fleet.spawn(lang, "worker")
        fleet.spawn(lang, "reconciler")

    # chaos: single stalls and dropped replies, one stall of everything
    # new past the workers' patience and the attempts' timeout, a kill
    # every two seconds; then faults off and the fleet drains what is left
    started = time.monotonic()
    provider.faults(stall_p=0.08, drop_p=0.08)
    stalled_all = False
    next_kill = started + 1.5
    done = 0
    while True:
        now = time.monotonic()
        t = now - started
        if not stalled_all and t >= 6:
            provider.stall_all(5.0)
            stalled_all = True
        if t < args.chaos_seconds and now >= next_kill:
            fleet.kill_one(rng)
            next_kill = now + 2.0
        if t >= args.chaos_seconds and provider.stall_p:
            provider.faults(0.0, 0.0)
        done = conn.execute(
            "SELECT count(*) FROM jobguard.jobs j WHERE jobguard.job_state(j.id) = 'succeeded'"
        ).fetchone()[0]
        if (done == n and t >= args.chaos_seconds) or t > args.limit_seconds or fleet.died():
            break
        time.sleep(0.25)
    elapsed = time.monotonic() - started
    died = fleet.died()
    stats, unclean = fleet.stop()
    provider.stop()

    check("no worker or reconciler ended by itself", not died,
          "; ".join(f"{d}: {fleet.tail(d)}" for d in died))
    check("every worker and reconciler stopped cleanly at SIGTERM", not unclean, "; ".join(unclean))

    states = dict(conn.execute(
        "SELECT jobguard.job_state(j.id), count(*) FROM jobguard.jobs j GROUP BY 1").fetchall())
    check(f"every job succeeded within {args.limit_seconds:.0f} s", states == {"succeeded": n},
          f"states {states} after {elapsed:.0f} s")

    per_job = conn.execute(
        """SELECT j.id, j.result, count(a.*) FILTER (WHERE a.state = 'succeeded') AS won,
                  count(a.*) FILTER (WHERE a.state = 'failed') AS failed,
                  count(DISTINCT o.provider_key) AS keys
             FROM jobguard.jobs j
             JOIN jobguard.attempts a ON a.job_id = j.id
             JOIN jobguard.attempt_overview o ON o.attempt_id = a.id
            GROUP BY j.id, j.result""").fetchall()
    twice = [r[0] for r in per_job if r[2] != 1]
    check("every job has exactly one succeeded attempt", len(per_job) == n and not twice,
          f"{len(per_job)} jobs with attempts; not exactly one win: {twice[:10]}")
    effects = Counter(e["job_id"] for e in provider.effects)
    answer = {e["job_id"]: {"charge_id": e["charge_id"]} for e in provider.effects}
    check("the provider performed exactly one effect per job",
          len(provider.effects) == n and len(effects) == n and set(effects.values()) == {1},
          f"{len(provider.effects)} effects for {len(effects)} jobs; "
          f"more than one: {[j for j, c in effects.items() if c > 1][:10]}")
    wrong = [r[0] for r in per_job if r[1] != answer.get(r[0])]
    check("each job's result is the provider's answer for it", not wrong, f"jobs {wrong[:10]}")
    check("no attempt called the provider twice, no key named two jobs, every key well formed",
          max(provider.posts_per_attempt.values(), default=0) <= 1
          and not provider.counts["key_reused_for_another_job"] and not provider.counts["bad_keys"],
          f"{provider.counts}, most posts of one attempt "
          f"{max(provider.posts_per_attempt.values(), default=0)}")
    new_key_without_failure = [r[0] for r in per_job if r[4] > r[3] + 1]
    check("a job's attempts kept one provider key unless an attempt failed",
          not new_key_without_failure, f"jobs {new_key_without_failure[:10]}")

    redrives, reconciled_failed, by_hand = conn.execute(
        """SELECT count(*) FILTER (WHERE cancel_reason LIKE 'redriven as attempt %%'),
                  count(*) FILTER (WHERE state = 'failed'),
                  count(*) FILTER (WHERE cancel_reason NOT LIKE 'redriven as attempt %%')
             FROM jobguard.attempts""").fetchone()
    check("some jobs were redriven", redrives > 0, f"{redrives} redrives")
    blocked = conn.execute("SELECT count(*) FROM jobguard.blocked_jobs").fetchone()[0]
    check("none waited for a person (nothing blocked, no cancel but redrives)",
          blocked == 0 and by_hand == 0, f"{blocked} blocked, {by_hand} other cancels")
    broken = conn.execute("SELECT * FROM jobguard.check_invariants()").fetchall()
    check("jobguard.check_invariants() is empty", not broken, str(broken[:5]))
    metric = dict(conn.execute("SELECT metric, value FROM jobguard.stats()").fetchall())

    check("stats() counts the redrives the attempts show", metric.get("redrives") == redrives,
          f"stats() redrives={metric.get('redrives')}, attempts redriven={redrives}")
    exporter_checks(conn, metric)

    recon = [s for s in stats if s["role"] == "reconciler"]
    work = [s for s in stats if s["role"] == "worker"]
    reconciled = sum(s.get("finished", 0) + s.get("failed", 0) for s in recon)
    in_progress = sum(s.get("in_progress", s.get("inProgress", 0)) for s in work)
    print(f"liveness e2e: jobs={n} succeeded={states.get('succeeded', 0)} "
          f"effects={len(provider.effects)} redrives={redrives} "
          f"reconciliations={metric.get('reconciled')} "
          f"(of them {reconciled_failed} failed: keys the provider never saw; the reconcilers "
          f"alive at the end reported {reconciled}) "
          f"kills={sum(fleet.kills.values())} ({', '.join(f'{k}: {v}' for k, v in sorted(fleet.kills.items()))}) "
          f"provider: posts={provider.counts['posts']} replays={provider.counts['replays']} "
          f"in_progress={provider.counts['in_progress']} stalls={provider.counts['stalls']} "
          f"drops={provider.counts['drops']} lookups={provider.counts['lookups']}; "
          f"workers' InProgress reports={in_progress}; {elapsed:.0f} s", flush=True)
    if failures:
        print(f"liveness e2e: logs kept in {logdir}", flush=True)
    else:
        subprocess.run(["rm", "-rf", logdir], check=False)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
