"""The Worker against a real jobguard: several workers drain a queue while
their connections are killed, heartbeats keep a long handler's attempt,
handler errors become failed attempts retried per backoff, a lost claim is
picked up again, attempts of an earlier process under the worker's name are
not run again, and a restart of the server is survived.  (Exactly once under
every failure: test_exactly_once.py.  SIGTERM: see test_docs.py, which runs
the documented example as a process.)"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import time
import uuid
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional

import psycopg
import pytest

import jobguard
from jobguard import Claimed, ProviderRefused, RetryLater, Worker, WorkerStats

Conn = psycopg.Connection[Any]


def fresh_op(conn: Conn, backoff: Optional[str] = None) -> str:
    """A new operation (claims of one test see only its jobs), with an
    open output contract and the given retry backoff."""
    op = "op-" + uuid.uuid4().hex[:12]
    conn.execute("SELECT jobguard.define_operation(%s, '{\"type\": \"object\"}', %s::interval)",
                 (op, backoff))
    return op


def submit_n(conn: Conn, op: str, n: int, params: Optional[Dict[str, Any]] = None
             ) -> List[jobguard.JobId]:
    """Submit n jobs of operation op in one submit_many; their ids."""
    out = jobguard.submit_many(conn, [jobguard.Request("alice", uuid.uuid4().hex, op,
                                                       {**(params or {}), "n": i}, "main-psp")
                                      for i in range(n)])
    assert not any(o.refused for o in out)
    return [o.job_id for o in out if o.job_id is not None]


def start(worker: Worker, **run_kw: Any) -> "threading.Thread":
    """Run the worker in a thread (no signal handlers there); the thread
    keeps its stats in worker.stats."""
    t = threading.Thread(target=lambda: worker.run(handle_signals=False, **run_kw))
    t.start()
    return t


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll check() until it is true, failing after the given seconds."""
    end = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def assert_one_success_each(conninfo: str, jobs: List[jobguard.JobId]) -> None:
    """Every job succeeded, with exactly one attempt and that one succeeded."""
    with psycopg.connect(conninfo, autocommit=True) as c:
        for job_id in jobs:
            states = [a["state"] for a in jobguard.attempts(c, job_id)]
            assert states == ["succeeded"], (job_id, states)
            assert jobguard.job_state(c, job_id) == "succeeded"


def test_workers_drain_the_queue_through_killed_connections(database: str, conn: Conn) -> None:
    """4 workers drain 120 jobs while their backends are terminated now and
    then: every job has exactly one attempt, succeeded; every handler ran
    once; the workers reconnected and reported every result."""
    op = fresh_op(conn)
    jobs = submit_n(conn, op, 120)
    calls: Dict[int, int] = collections.Counter()
    lock = threading.Lock()

    def handler(job: Claimed) -> Dict[str, Any]:
        """Count the call, work a little, return a result."""
        with lock:
            calls[job.job_id] += 1
        time.sleep(0.01)
        return {"done": job.params["n"]}

    prefix = "drain-" + uuid.uuid4().hex[:6]
    conninfo = f"dbname={database}"
    workers = [Worker(handler, conninfo=conninfo, name=f"{prefix}-{i}", operations=[op],
                      batch=5, timeout=30, wait=1, reconnect_min=0.05) for i in range(4)]
    # exactly these workers' backends (their application_names): never
    # another test's
    appnames = [f"{w.name} ({role})" for w in workers
                for role in ("jobguard worker", "jobguard heartbeat")]
    threads = [start(w, until_idle=True) for w in workers]
    kills = 0
    while any(t.is_alive() for t in threads) and kills < 6:
        time.sleep(0.2)
        row = conn.execute("""SELECT count(*) FROM (
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = %s AND application_name = ANY (%s)
             ORDER BY random() LIMIT 1) t""", (database, appnames)).fetchone()
        kills += row[0] if row else 0
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert kills >= 3
    assert_one_success_each(conninfo, jobs)
    assert sorted(calls) == sorted(jobs) and set(calls.values()) == {1}
    total = WorkerStats()
    for w in workers:
        for field in ("claimed", "adopted", "won", "failed", "report_errors", "reconnects"):
            setattr(total, field, getattr(total, field) + getattr(w.stats, field))
    assert (total.won, total.failed, total.report_errors) == (120, 0, 0)
    assert total.claimed + total.adopted == 120
    assert total.reconnects >= 1


def test_heartbeats_keep_a_long_handler_in_time(database: str, conn: Conn) -> None:
    """With a 1 s timeout, a 2.5 s handler's attempt is still started at its
    end when the worker heartbeats every 0.25 s, and unknown when the
    heartbeat comes too rarely; both results are reported."""
    seen: Dict[str, str] = {}

    def handler(job: Claimed) -> Dict[str, Any]:
        """Work 2.5 s, then look at the attempt's state from outside."""
        time.sleep(2.5)
        with psycopg.connect(dbname=database, autocommit=True) as c:
            row = c.execute("SELECT state FROM jobguard.attempt_overview WHERE attempt_id = %s",
                            (job.attempt_id,)).fetchone()
        assert row is not None
        seen[job.operation] = row[0]
        return {}

    beating, rare = fresh_op(conn), fresh_op(conn)
    job_beating = submit_n(conn, beating, 1)[0]
    job_rare = submit_n(conn, rare, 1)[0]
    w1 = Worker(handler, conninfo=f"dbname={database}", operations=[beating], timeout=1,
                heartbeat_every=0.25, wait=0)
    w2 = Worker(handler, conninfo=f"dbname={database}", operations=[rare], timeout=1,
                heartbeat_every=30, wait=0)
    threads = [start(w1, until_idle=True), start(w2, until_idle=True)]
    for t in threads:
        t.join(30)
    assert seen == {beating: "started", rare: "unknown"}
    assert w1.stats.heartbeats >= 5 and w1.stats.heartbeats_refused == 0
    assert w2.stats.heartbeats == 0
    assert (w1.stats.won, w2.stats.won) == (1, 1)   # a late result still wins the free slot
    assert jobguard.job_state(conn, job_beating) == jobguard.job_state(conn, job_rare) == "succeeded"


def test_handler_errors_fail_the_attempt_and_retry_per_backoff(database: str, conn: Conn) -> None:
    """A refusal (ProviderRefused) fails the attempt with its text; the job
    is claimed again after the operation's backoff (0.5 s), or after
    RetryLater's retry_in (1.2 s), and then succeeds."""
    op = fresh_op(conn, "0.5 seconds")
    plain, later = submit_n(conn, op, 2)
    called: Dict[int, List[float]] = collections.defaultdict(list)

    def handler(job: Claimed) -> Dict[str, Any]:
        """Note the time; fail each job's first attempt, one way per job."""
        called[job.job_id].append(time.monotonic())
        if job.attempt_no == 1 and job.job_id == plain:
            raise ProviderRefused("card declined")
        if job.attempt_no == 1:
            raise RetryLater("provider busy", retry_in=timedelta(seconds=1.2))
        return {"attempt": job.attempt_no}

    w = Worker(handler, conninfo=f"dbname={database}", operations=[op], batch=2, wait=2)
    start(w, until_idle=True).join(30)
    assert (w.stats.failed, w.stats.won) == (2, 2)
    for job_id, error, gap in ((plain, "ProviderRefused: card declined", 0.5),
                               (later, "RetryLater: provider busy", 1.2)):
        a1, a2 = jobguard.attempts(conn, job_id)
        assert (a1["state"], a1["error"], a2["state"]) == ("failed", error, "succeeded")
        first, second = called[job_id]
        assert second - first >= gap
        assert jobguard.job(conn, job_id)["result"] == {"attempt": 2}


def test_a_claim_whose_answer_was_lost_is_picked_up(database: str, conn: Conn,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Attempts begun by a claim of the worker whose answer never came back
    (the connection broke after the commit) are found by the worker's name
    once it has reconnected, and run, once each."""
    op = fresh_op(conn)
    jobs = submit_n(conn, op, 2)
    name = "adopt-" + uuid.uuid4().hex[:6]
    lost: List[int] = []
    real_claim = jobguard.api.claim

    def claim_losing_its_answer(c: Conn, *args: Any, **kw: Any) -> List[Claimed]:
        """The first claim runs on the server; then its connection breaks."""
        got = real_claim(c, *args, **kw)
        if got and not lost:
            lost.extend(g.attempt_id for g in got)
            c.close()
            raise psycopg.OperationalError("the connection broke after the claim")
        return got
    monkeypatch.setattr(jobguard.api, "claim", claim_losing_its_answer)
    handled: List[int] = []
    w = Worker(lambda job: handled.append(job.attempt_id) or {}, conninfo=f"dbname={database}",
               name=name, operations=[op], batch=2, wait=0)
    start(w, until_idle=True).join(30)
    assert len(lost) == 2 and handled == lost
    assert (w.stats.adopted, w.stats.claimed, w.stats.won) == (2, 0, 2)
    assert_one_success_each(f"dbname={database}", jobs)


def test_attempts_of_its_name_from_before_it_started_are_not_run(database: str,
                                                                 conn: Conn) -> None:
    """Open attempts recorded with the worker's name before it started (an
    earlier process under that name may have run their handler) are marked
    unknown, not run."""
    op = fresh_op(conn)
    jobs = submit_n(conn, op, 2)
    name = "earlier-" + uuid.uuid4().hex[:6]
    earlier = jobguard.claim(conn, name, [op], max_jobs=2)
    handled: List[int] = []
    w = Worker(lambda job: handled.append(job.attempt_id) or {}, conninfo=f"dbname={database}",
               name=name, operations=[op], wait=0)
    start(w, until_idle=True).join(30)
    assert handled == []
    assert (w.stats.marked_unknown, w.stats.adopted, w.stats.claimed) == (2, 0, 0)
    for c in earlier:
        row = conn.execute("SELECT state FROM jobguard.attempt_overview WHERE attempt_id = %s",
                           (c.attempt_id,)).fetchone()
        assert row is not None and row[0] == "unknown"
    assert [jobguard.job_state(conn, j) for j in jobs] == ["unknown", "unknown"]


@pytest.mark.skipif(not os.environ.get("JOBGUARD_TEST_RESTART"),
                    reason="JOBGUARD_TEST_RESTART (set by make test) says how to restart the cluster")
def test_worker_survives_a_server_restart(database: str, conn: Conn) -> None:
    """The cluster restarts while a worker drains 40 jobs: it reconnects
    with backoff and every job ends with exactly one succeeded attempt."""
    op = fresh_op(conn)
    jobs = submit_n(conn, op, 40)
    done: List[int] = []

    def handler(job: Claimed) -> Dict[str, Any]:
        """Work a little and note the job."""
        time.sleep(0.03)
        done.append(job.job_id)
        return {}

    conninfo = f"dbname={database}"
    w = Worker(handler, conninfo=conninfo, operations=[op], batch=4, wait=0.5,
               reconnect_min=0.1, reconnect_max=1)
    t = start(w)
    try:
        wait_for(lambda: len(done) >= 8, 20, "8 jobs before the restart")
        subprocess.run(os.environ["JOBGUARD_TEST_RESTART"], shell=True, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def all_done() -> bool:
            """Whether every job has succeeded (a new connection each time)."""
            try:
                with psycopg.connect(conninfo, autocommit=True) as c:
                    row = c.execute("""SELECT count(*) FROM jobguard.job_overview
                                        WHERE operation = %s AND state = 'succeeded'""",
                                    (op,)).fetchone()
                return row is not None and row[0] == len(jobs)
            except psycopg.OperationalError:
                return False
        wait_for(all_done, 60, "all jobs after the restart")
    finally:
        w.stop()
        t.join(30)
    assert w.stats.reconnects >= 1 and w.stats.report_errors == 0
    assert_one_success_each(conninfo, jobs)
