"""Never twice: a report that could not be recorded is unknown, never
failed (SPEC 1.3, "Clients").  Faults are injected at the server, at the
moment of the report: a serialization failure, a statement timeout, a
lock timeout, an unexpected internal error and an administrator's
shutdown of the worker's own backend, each raised by a trigger on the
finish's compare-and-swap the first time only; a real statement timeout
behind a held row lock; a claim that fails once; random faults at one
report in five over a drain by four workers.  In every case each job's
handler ran once and the job ended once: one attempt, succeeded.  The
calls prepare no statement on the server (a transaction-mode pooler
shares the names between clients)."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
import uuid
from typing import Any, Callable, Dict, List

import psycopg
import pytest

import jobguard
from jobguard import AsyncReconciler, AsyncWorker, Claimed, Reconciler, Worker, api
from conftest import run_until_idle, scratch_database

FAULTS = ["40001", "57014", "55P03", "XX000", "terminate"]


def arm(conn: psycopg.Connection[Any], table: str, when: str, kind: str,
        chance: float = 0.0) -> str:
    """Install a trigger that raises ``kind`` (a SQLSTATE, or 'terminate':
    the backend terminates itself) once, at the first row of ``table`` that
    matches ``when``, and after that at each such row with ``chance``; the
    sequence that counts the firings is non-transactional, so a rolled back
    report still counts.  Returns the trigger's name."""
    name = "fault_" + uuid.uuid4().hex[:8]
    action = ("PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5);"
              if kind == "terminate" else
              f"RAISE EXCEPTION 'injected fault {kind}' USING ERRCODE = '{kind}';")
    conn.execute(f"CREATE SEQUENCE public.{name}_n")
    conn.execute(f"""CREATE FUNCTION public.{name}() RETURNS trigger LANGUAGE plpgsql AS $f$
        BEGIN
          IF nextval('public.{name}_n') = 1 OR random() < {chance} THEN {action} END IF;
          RETURN NEW;
        END $f$""")
    conn.execute(f"""CREATE TRIGGER {name} BEFORE {"UPDATE" if "OLD" in when else "INSERT"}
        ON jobguard.{table} FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION public.{name}()""")
    return name


def disarm(conn: psycopg.Connection[Any], table: str, name: str) -> int:
    """Drop the trigger; how often it fired."""
    fired = conn.execute(f"SELECT last_value FROM public.{name}_n").fetchone()[0]
    conn.execute(f"DROP TRIGGER {name} ON jobguard.{table}")
    conn.execute(f"DROP FUNCTION public.{name}()")
    conn.execute(f"DROP SEQUENCE public.{name}_n")
    return int(fired)


#: the finish's compare-and-swap: the job gets its winning attempt
AT_FINISH = "OLD.completed_by IS NULL AND NEW.completed_by IS NOT NULL"


def submit(conn: psycopg.Connection[Any], op: str, n: int) -> List[int]:
    """n new jobs of op (three attempts allowed each); their ids."""
    return [api.submit(conn, "never-twice", f"{op}-{i}", op, {"i": i}, "stripe",
                       max_attempts=3).job_id for i in range(n)]


def ended_once(conn: psycopg.Connection[Any], op: str) -> List[Any]:
    """The jobs of op that did not end as one succeeded attempt, with what
    their attempts ended as."""
    return conn.execute("""
        SELECT j.job_id, j.state, array_agg(a.state ORDER BY a.attempt_no)
          FROM jobguard.job_overview j JOIN jobguard.attempt_overview a USING (job_id)
         WHERE j.operation = %s
         GROUP BY j.job_id, j.state
        HAVING j.state <> 'succeeded' OR count(*) <> 1""", (op,)).fetchall()


def drain(kind: str, database: str, op: str, handler: Callable[[Claimed], Any],
          workers: int = 1, batch: int = 1, **extra: Any) -> List[Any]:
    """Run ``workers`` workers of ``kind`` ('thread' or 'asyncio') on op until
    no claim finds work; their stats."""
    kw: Dict[str, Any] = dict(conninfo=f"dbname={database}", operations=[op], wait=0.5,
                              batch=batch, reconnect_min=0.05, reconnect_max=0.4)
    kw.update(extra)
    if kind == "thread":
        return run_until_idle(kind, [Worker(handler, name=f"{op}-{i}", **kw)
                                     for i in range(workers)])

    async def ahandler(job: Claimed) -> Any:
        """The handler, off the event loop."""
        return await asyncio.to_thread(handler, job)
    return run_until_idle(kind, [AsyncWorker(ahandler, name=f"{op}-{i}", **kw)
                                 for i in range(workers)])


def counting() -> tuple[Callable[[Claimed], Any], collections.Counter[int]]:
    """A handler that counts its calls per job, and the counter."""
    calls: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def handler(job: Claimed) -> Any:
        """Count the call; the provider's answer."""
        with lock:
            calls[job.job_id] += 1
        return {"charge_id": f"ch_{job.job_id}"}
    return handler, calls


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("batch", [1, 3])
def test_a_fault_at_the_report_never_runs_a_job_twice(database: str, conn: Any, kind: str,
                                                      fault: str, batch: int) -> None:
    """The first finish of the run meets the fault; the report is tried
    again, and every job ends with one succeeded attempt, its handler run
    once."""
    op = f"nt_{fault.lower()}_{kind}_{batch}_{uuid.uuid4().hex[:6]}"
    jobs = submit(conn, op, 3)
    trigger = arm(conn, "jobs", AT_FINISH, fault)
    handler, calls = counting()
    try:
        stats = drain(kind, database, op, handler, batch=batch)
    finally:
        fired = disarm(conn, "jobs", trigger)
    assert fired >= 1, "the fault was never injected"
    assert {j: calls[j] for j in jobs} == {j: 1 for j in jobs}
    assert ended_once(conn, op) == []
    assert sum(s.failed for s in stats) == 0


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_a_real_statement_timeout_at_the_finish(database: str, conn: Any, kind: str) -> None:
    """The finish waits for a row lock another session holds past the
    worker's statement_timeout: it is cancelled (57014), tried again, and
    goes through once the lock is gone."""
    op = f"nt_timeout_{kind}_{uuid.uuid4().hex[:6]}"
    [job_id] = submit(conn, op, 1)
    calls: collections.Counter[int] = collections.Counter()

    def handler(job: Claimed) -> Any:
        """Hold the job's row for 1.2 s from another session, then answer."""
        calls[job.job_id] += 1
        locker = psycopg.connect(f"dbname={database}")
        locker.execute("SELECT 1 FROM jobguard.jobs WHERE id = %s FOR UPDATE", (job.job_id,))
        threading.Timer(1.2, locker.close).start()
        return {"charge_id": "ch_1"}
    stats = drain(kind, database, op, handler, wait=0.1,   # a claim's wait within the timeout
                  connect_kwargs={"options": "-c statement_timeout=300"})
    assert calls[job_id] == 1
    assert ended_once(conn, op) == []
    assert sum(s.report_retries for s in stats) >= 1


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_a_claim_that_fails_is_tried_again(database: str, conn: Any, kind: str) -> None:
    """A server error in claim (the attempt's insert raises once) is logged
    and the claim tried again: the loop goes on and the job runs once."""
    op = f"nt_claim_{kind}_{uuid.uuid4().hex[:6]}"
    [job_id] = submit(conn, op, 1)
    trigger = arm(conn, "attempts", "true", "XX000")
    handler, calls = counting()
    try:
        stats = drain(kind, database, op, handler)
    finally:
        disarm(conn, "attempts", trigger)
    assert calls[job_id] == 1
    assert ended_once(conn, op) == []
    assert sum(s.claim_errors for s in stats) == 1


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_random_faults_over_a_drain_by_four_workers(database: str, conn: Any, kind: str) -> None:
    """One finish in five meets a serialization failure, 60 jobs, four
    workers, batches of 2: every handler ran once, every job one succeeded
    attempt."""
    op = f"nt_drain_{kind}_{uuid.uuid4().hex[:6]}"
    jobs = submit(conn, op, 60)
    trigger = arm(conn, "jobs", AT_FINISH, "40001", chance=0.2)
    handler, calls = counting()
    try:
        drain(kind, database, op, handler, workers=4, batch=2)
    finally:
        fired = disarm(conn, "jobs", trigger)
    assert fired > 5
    assert sorted(calls) == sorted(jobs) and set(calls.values()) == {1}
    assert ended_once(conn, op) == []


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_only_a_refusal_fails_an_attempt(database: str, conn: Any, kind: str) -> None:
    """ProviderRefused fails the attempt (the provider did not do the
    work); any other exception and a result that cannot be sent mark it
    unknown: the gate stays closed, no second attempt."""
    op = f"nt_refusal_{kind}_{uuid.uuid4().hex[:6]}"
    refused, raised, unsendable = submit(conn, op, 3)

    def handler(job: Claimed) -> Any:
        """Refuse, raise, or return what cannot be sent, by job."""
        if job.job_id == refused:
            raise jobguard.ProviderRefused("card declined", retry_in=3600)
        if job.job_id == raised:
            raise TimeoutError("read timed out after the request was sent")
        return None
    drain(kind, database, op, handler)
    states = dict(conn.execute("""SELECT job_id, array_agg(state ORDER BY attempt_no)
        FROM jobguard.attempt_overview WHERE job_id = ANY(%s) GROUP BY job_id""",
                               ([refused, raised, unsendable],)).fetchall())
    assert states == {refused: ["failed"], raised: ["unknown"], unsendable: ["unknown"]}


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
@pytest.mark.parametrize("fault", ["40001", "57014", "terminate"])
def test_a_reconciler_report_is_tried_again(database: str, conn: Any, kind: str,
                                            fault: str) -> None:
    """An unknown attempt that the provider did do: the reconciler's
    finish meets the fault, is tried again, and the job succeeds on that
    attempt (no failure, no second attempt)."""
    op = f"nt_rec_{fault.lower()}_{kind}_{uuid.uuid4().hex[:6]}"
    [job_id] = submit(conn, op, 1)
    attempt = api.begin_attempt(conn, job_id)
    api.mark_unknown(conn, attempt)
    trigger = arm(conn, "jobs", AT_FINISH, fault)
    kw: Dict[str, Any] = dict(conninfo=f"dbname={database}", operations=[op],
                              reconnect_min=0.05, reconnect_max=0.4)

    def reconcile(row: api.Unknown) -> Any:
        """The provider did it."""
        return {"charge_id": "ch_rec"}
    try:
        if kind == "thread":
            stats = Reconciler(reconcile, **kw).run(until_idle=True, handle_signals=False)
        else:
            stats = asyncio.run(AsyncReconciler(reconcile, **kw).run(until_idle=True,
                                                                      handle_signals=False))
    finally:
        disarm(conn, "jobs", trigger)
    assert ended_once(conn, op) == []
    assert stats.failed == 0 and stats.won == 1


def test_a_lease_that_fails_is_tried_again(database: str, conn: Any) -> None:
    """A server error in claim_unknown never ends the reconciler's run."""
    op = f"nt_lease_{uuid.uuid4().hex[:6]}"
    [job_id] = submit(conn, op, 1)
    api.mark_unknown(conn, api.begin_attempt(conn, job_id))
    trigger = arm(conn, "reconcile_leases", "true", "XX000")
    rec = Reconciler(lambda row: {"charge_id": "ch_lease"}, conninfo=f"dbname={database}",
                     operations=[op], reconnect_min=0.05, wait=0.1)
    t = threading.Thread(target=lambda: rec.run(handle_signals=False))
    t.start()
    try:
        deadline = time.monotonic() + 30
        while api.job_state(conn, job_id) != "succeeded" and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        rec.stop()
        t.join(30)
        disarm(conn, "reconcile_leases", trigger)
    assert not t.is_alive()
    assert api.job_state(conn, job_id) == "succeeded"
    assert rec.stats.claim_errors >= 1


def test_no_statement_is_prepared_on_the_server(database: str) -> None:
    """psycopg prepares a statement after five executions; the calls never
    let it (behind pgbouncer the names are shared by every client of a
    server connection), on the caller's connection and on the worker's."""
    with psycopg.connect(dbname=database, autocommit=True) as c:
        assert c.prepare_threshold == 5   # psycopg's default: the caller did not opt in
        [job_id] = submit(c, f"nt_prep_{uuid.uuid4().hex[:6]}", 1)
        for _ in range(10):
            api.job_state(c, job_id)
            api.job(c, job_id)
        assert c.execute("SELECT count(*) FROM pg_prepared_statements",
                         prepare=False).fetchone() == (0,)
    op = f"nt_prep_worker_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(dbname=database, autocommit=True) as c:
        submit(c, op, 12)
    seen: List[int] = []
    worker: List[Worker] = []

    def handler(job: Claimed) -> Any:
        """On the worker's own connection: how many statements it prepared."""
        own = worker[0]._main._conn
        assert own is not None
        seen.append(own.execute("SELECT count(*) FROM pg_prepared_statements",
                                prepare=False).fetchone()[0])
        return {"charge_id": "ch_p"}
    worker.append(Worker(handler, conninfo=f"dbname={database}", operations=[op], wait=0.3))
    worker[0].run(until_idle=True, handle_signals=False)
    assert len(seen) == 12 and set(seen) == {0}


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_prepared_claim_made_stale_by_an_update_opens_a_new_connection(kind: str) -> None:
    """With prepare_statements, psycopg prepares the claim on the worker's
    connection; ALTER EXTENSION jobguard UPDATE from 1.2 (claim gains the
    failover column) makes that statement refused there for good (0A000).
    The worker takes it as a lost connection: it opens a new one and goes
    on, every job's handler run once."""
    with scratch_database(f"stale_{kind}", "1.2", setup=[
            """SELECT jobguard.define_operation('op', '{"type": "object"}')"""]) as db:
        with psycopg.connect(dbname=db, autocommit=True) as c:
            for i in range(12):
                api.submit(c, "alice", f"k{i}", "op", {"i": i}, "psp")
        calls: collections.Counter[int] = collections.Counter()

        def handler(job: Claimed) -> Any:
            """The seventh job (its claim prepared: psycopg's sixth run of
            it) updates the extension."""
            calls[job.params["i"]] += 1
            if len(calls) == 7:
                with psycopg.connect(dbname=db, autocommit=True) as u:
                    u.execute("ALTER EXTENSION jobguard UPDATE")
            return {"i": job.params["i"]}
        was = api.prepare_statements
        api.prepare_statements = True
        try:
            loop = (Worker if kind == "thread" else AsyncWorker)(
                handler, conninfo=f"dbname={db}", operations=["op"], batch=1, wait=0.3)
            [stats] = run_until_idle(kind, [loop], seconds=60)
        finally:
            api.prepare_statements = was
        assert dict(calls) == {i: 1 for i in range(12)}
        assert stats.won == 12 and stats.reconnects >= 1
        with psycopg.connect(dbname=db, autocommit=True) as c:
            assert c.execute("""SELECT count(*) FROM jobguard.attempts
                                 WHERE state = 'succeeded'""").fetchone() == (12,)
            assert c.execute("SELECT extversion FROM pg_extension WHERE extname = 'jobguard'"
                             ).fetchone() != ("1.2",)
            # jobguard's own 0A000 (a claim that may wait, in REPEATABLE READ)
            # is not taken for it: a worker would not drop its connection
            c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            with pytest.raises(psycopg.errors.FeatureNotSupported) as refused:
                api.claim(c, "w", ["op"], wait=1)
            c.execute("ROLLBACK")
            assert not api.stale_statement(refused.value)


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_an_attempt_it_marked_unknown_is_never_picked_up_again(database: str, conn: Any,
                                                                kind: str) -> None:
    """The handler of the first job raises (the attempt is marked unknown,
    still open, of this worker's name); the claim of the second job then
    meets a server error, after which the worker looks for open attempts of
    its own that a lost claim began: the unknown one is not among them, and
    its handler never runs again."""
    op = f"nt_adopt_{kind}_{uuid.uuid4().hex[:6]}"
    first, second = submit(conn, op, 2)
    trigger = arm(conn, "attempts", f"NEW.job_id = {second}", "XX000")
    calls: collections.Counter[int] = collections.Counter()

    def handler(job: Claimed) -> Any:
        """The first job's provider call times out; the second answers."""
        calls[job.job_id] += 1
        if job.job_id == first:
            raise TimeoutError("no answer from the provider")
        return {"charge_id": "ch_2"}
    try:
        stats = drain(kind, database, op, handler)
    finally:
        disarm(conn, "attempts", trigger)
    assert dict(calls) == {first: 1, second: 1}
    assert sum(s.claim_errors for s in stats) == 1
    assert api.job_state(conn, first) == "unknown"
    assert api.job_state(conn, second) == "succeeded"
