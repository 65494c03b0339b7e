"""Exactly once: a worker calls a handler at most once per attempt, under
every failure a handler or the server can produce: an exception, undefined
results (None, not JSON), a result over jobguard.max_payload_size, a result
breaking the output contract, the worker's backend terminated while its
finish waits, the server restarted while its finish waits.  Every handler
call is counted per attempt; every attempt of the worker is counted in the
database; each attempt ran exactly once.  Run for the thread worker
(``Worker``) and the asyncio one (``AsyncWorker``)."""

from __future__ import annotations

import asyncio
import collections
import os
import re
import subprocess
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

import psycopg
import pytest

import jobguard
from jobguard import AsyncWorker, Claimed, Worker

MAX_ATTEMPTS = 2
RESTART = os.environ.get("JOBGUARD_TEST_RESTART")

#: what the handler does on each attempt of a job of that kind: (what its
#: attempts must end as, what their error must say, what cuts the finish)
CASES: Dict[str, tuple[List[str], Optional[str], Optional[str]]] = {
    "ok": (["succeeded"], None, None),
    # only a refusal fails an attempt: another exception, or a result that
    # cannot be sent, leaves it unknown (the provider may have done the work)
    "refused": (["failed", "failed"], r"^ProviderRefused: refused", None),
    "raises": (["unknown"], None, None),
    "none": (["unknown"], None, None),
    "not_json": (["unknown"], None, None),
    "nan": (["unknown"], None, None),
    "too_large": (["unknown"], None, None),
    "contract": (["failed", "failed"], r"charge_id", None),
    "dropped": (["succeeded"], None, "terminate"),
    "restarted": (["succeeded"], None, "restart"),
}


def query(conninfo: str, sql: str, args: Any = None) -> List[Any]:
    """One statement on a connection of its own (the restart case kills
    the others); its rows."""
    with psycopg.connect(conninfo, autocommit=True) as c:
        return c.execute(sql, args).fetchall()


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll check() until it is true (a server restarting counts as not
    yet), failing after the given seconds."""
    end = time.monotonic() + seconds
    while True:
        try:
            if check():
                return
        except psycopg.OperationalError:
            pass
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def cut_mid_finish(conninfo: str, locker: psycopg.Connection[Any], name: str, how: str,
                   cuts: List[str], statements: List[str]) -> None:
    """Once the worker's backend waits in finish_attempt (or finish_many)
    for the lock held on the attempt's row, terminate that backend (or
    restart the server), then let the lock go; note what was cut, and the
    statement."""
    pids: List[int] = []

    def waiting() -> bool:
        """Whether the worker's backend waits for the lock in its finish."""
        # exactly the worker's own main connection, in this test's database
        rows = query(conninfo, """SELECT pid, query FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = %s
              AND wait_event_type = 'Lock'
              AND (query LIKE '%%finish_attempt%%' OR query LIKE '%%finish_many%%')""",
                     (f"{name} (jobguard worker)",))
        pids[:] = [r[0] for r in rows]
        statements[:] = [r[1] for r in rows[:1]]
        return bool(pids)
    try:
        wait_for(waiting, 20, "the worker waiting in finish_attempt")
        if how == "terminate":
            assert query(conninfo, "SELECT pg_terminate_backend(%s)", (pids[0],)) == [(True,)]
            locker.rollback()
        else:
            subprocess.run(RESTART or "false", shell=True, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cuts.append(how)
    finally:
        try:
            locker.close()
        except psycopg.Error:
            pass


def run_worker(kind: str, handler: Callable[[Claimed], Any], conninfo: str, name: str, op: str,
               done: Callable[[], bool], batch: int) -> Any:
    """Run a worker of the given kind and batch size until done(); its stats."""
    kw: Dict[str, Any] = dict(conninfo=conninfo, name=name, operations=[op], wait=0.2, batch=batch,
                              reconnect_min=0.05, reconnect_max=0.5,
                              connect_kwargs={"options": "-c jobguard.max_payload_size=1kB"})
    if kind == "thread":
        w = Worker(handler, **kw)
        t = threading.Thread(target=lambda: w.run(handle_signals=False))
        t.start()
        try:
            wait_for(done, 90, "every job to end")
        finally:
            w.stop()
            t.join(60)
        return w.stats

    async def main() -> Any:
        """Run the asyncio worker beside the wait (the wait in a thread)."""
        async def ahandler(job: Claimed) -> Any:
            """The handler, in a thread: its cut waits block."""
            return await asyncio.to_thread(handler, job)
        aw = AsyncWorker(ahandler, **kw)
        running = asyncio.create_task(aw.run(handle_signals=False))
        try:
            await asyncio.to_thread(wait_for, done, 90, "every job to end")
        finally:
            aw.stop()
            await running
        return aw.stats
    return asyncio.run(main())


@pytest.mark.parametrize("kind,batch", [("thread", 1), ("asyncio", 1), ("thread", 4),
                                        ("asyncio", 4)])
def test_each_handler_runs_exactly_once_per_attempt(database: str, kind: str,
                                                    batch: int) -> None:
    """Every failure a handler or the server can produce: each attempt's
    handler ran exactly once, and every attempt ended as its case says.
    With batch 4 the results go in one finish_many, and the cut hits it
    (one cut case only: two in one batch would race for the same wait)."""
    conninfo = f"dbname={database}"
    cases = [k for k, v in CASES.items()
             if (RESTART or v[2] != "restart") and not (batch > 1 and k == "restarted")]
    op = "op-" + uuid.uuid4().hex[:12]
    query(conninfo, """SELECT jobguard.define_operation(%s,
        '{"type": "object", "required": ["charge_id"]}', '0.1 seconds')""", (op,))
    jobs: Dict[str, int] = {}
    with psycopg.connect(conninfo, autocommit=True) as c:
        for case in cases:
            jobs[case] = jobguard.submit(c, "alice", uuid.uuid4().hex, op, {"kind": case},
                                         "main-psp", MAX_ATTEMPTS).job_id
    name = "once-" + uuid.uuid4().hex[:6]
    calls: Dict[int, int] = collections.Counter()
    calls_lock = threading.Lock()
    cuts: List[str] = []
    cutters: List[threading.Thread] = []
    statements: List[str] = []

    def handler(job: Claimed) -> Any:
        """Count the call; then do what the job's case says."""
        with calls_lock:
            calls[job.attempt_id] += 1
        case = job.params["kind"]
        if case == "refused":
            raise jobguard.ProviderRefused("refused", retry_in=0)
        if case == "raises":
            raise ValueError("raised")
        if case == "none":
            return None
        if case == "not_json":
            return {"charge_id": object()}
        if case == "nan":
            return {"charge_id": float("nan")}
        if case == "too_large":
            return {"charge_id": "x" * 4096}
        if case == "contract":
            return {"no_charge_id": True}
        if case in ("dropped", "restarted"):
            # hold the attempt's row: the finish that follows waits for it
            locker = psycopg.connect(conninfo)
            locker.execute("SELECT 1 FROM jobguard.attempts WHERE id = %s FOR UPDATE",
                           (job.attempt_id,))
            t = threading.Thread(target=cut_mid_finish, args=(conninfo, locker, name,
                                                              CASES[case][2], cuts,
                                                              statements))
            t.start()
            cutters.append(t)
            return {"charge_id": case}
        return {"charge_id": "ok"}

    def done() -> bool:
        """Every job ended, or a handler ran twice for one attempt."""
        with calls_lock:
            if any(n > 1 for n in calls.values()):
                return True
        rows = query(conninfo, """SELECT count(*) FROM jobguard.job_overview
                                   WHERE operation = %s
                                     AND state IN ('succeeded', 'failed', 'unknown')""",
                     (op,))
        return bool(rows[0][0] == len(cases))

    stats = run_worker(kind, handler, conninfo, name, op, done, batch)
    for t in cutters:
        t.join(60)
    assert {a: n for a, n in calls.items() if n != 1} == {}
    assert sorted(cuts) == sorted(CASES[k][2] for k in cases if CASES[k][2])
    if batch > 1:   # the cut hit the batch's finish_many
        assert statements and "finish_many" in statements[0], statements
    # every attempt of the worker, in the database, ran exactly once
    rows = query(conninfo, """SELECT attempt_id, job_id, state, error
                                FROM jobguard.attempt_overview WHERE worker = %s
                               ORDER BY attempt_id""", (name,))
    assert sorted(r[0] for r in rows) == sorted(calls)
    for case in cases:
        mine = [r for r in rows if r[1] == jobs[case]]
        expect, error, _ = CASES[case]
        assert [r[2] for r in mine] == expect, case
        for r in mine:
            assert error is None or re.search(error, r[3]), (case, r[3])
    assert stats.reconnects >= 1 and stats.adopted == 0
