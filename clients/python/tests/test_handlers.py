"""A handler per provider (1.3): ``Worker(handlers={...})`` and
``AsyncWorker(handlers={...})`` run each attempt with the handler of the
provider its row names, and never claim a row for a provider they have no
handler for — on a 1.3 database through claim's ``providers``, on a 1.2
database (not updated yet) through claim's ``provider``, each in turn.  One
handler may read ``job.provider`` and ``job.failover`` itself."""

from __future__ import annotations

import collections
import threading
import uuid
from typing import Any, Callable, Dict, Iterator, List

import psycopg
import pytest

from jobguard import (AsyncWorker, Claimed, ProviderRefused, Request, Worker, WorkerStats,
                      submit_many)
from conftest import run_until_idle, scratch_database

Conn = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def v12_database() -> Iterator[str]:
    """A database whose jobguard is at 1.2 (served by the 1.3 library)."""
    with scratch_database("v12db", "1.2") as db:
        yield db


@pytest.fixture(params=["current", "1.2"])
def any_database(request: pytest.FixtureRequest, database: str) -> str:
    """The test database at the default version, and one at 1.2."""
    if request.param == "1.2":
        return str(request.getfixturevalue("v12_database"))
    return database


def has_routes(conn: Conn) -> bool:
    """Whether the database has 1.3's failover routes and claim's providers."""
    return bool(conn.execute(
        "SELECT to_regprocedure('jobguard.set_failover(text, text[], integer)') IS NOT NULL"
        " AND to_regprocedure('jobguard.claim(text, text[], interval, integer, text,"
        " interval, text[])') IS NOT NULL").fetchone()[0])


def submit(conn: Conn, op: str, providers: Dict[str, int]) -> Dict[str, List[int]]:
    """For each provider, that many new jobs of op; their ids by provider."""
    out: Dict[str, List[int]] = {}
    for provider, n in providers.items():
        got = submit_many(conn, [Request("alice", f"{op}-{provider}-{i}", op, {"i": i}, provider,
                                         max_attempts=3) for i in range(n)])
        assert not any(o.refused for o in got)
        out[provider] = [o.job_id for o in got if o.job_id is not None]
    return out


def drain(kind: str, database: str, op: str, workers: int = 1, **options: Any) -> List[WorkerStats]:
    """Run ``workers`` workers of ``kind`` ('thread' or 'asyncio') with the
    options given until no claim finds work; their stats."""
    kw: Dict[str, Any] = dict(conninfo=f"dbname={database}", operations=[op], wait=0.6)
    kw.update(options)
    cls = Worker if kind == "thread" else AsyncWorker
    stats = run_until_idle(kind, [cls(**kw) for _ in range(workers)], 60)
    assert all(s.claim_errors == 0 for s in stats), stats
    return stats


def recording(seen: Dict[str, List[Any]], lock: threading.Lock,
              as_: str) -> Callable[[Claimed], Any]:
    """A handler that records, under ``as_``, each job it ran (its id, the
    row's provider, failover) and answers."""
    def handler(job: Claimed) -> Any:
        """Record the call; the provider's answer."""
        with lock:
            seen[as_].append((job.job_id, job.provider, job.failover))
        return {"charge_id": f"{as_}_{job.job_id}"}
    return handler


def attempts_by_job(conn: Conn, op: str) -> Dict[int, List[Any]]:
    """Each job of op: its attempts' (provider, state), in order."""
    rows = conn.execute("""
        SELECT j.job_id, array_agg(ARRAY[a.provider, a.state] ORDER BY a.attempt_no)
                         FILTER (WHERE a.attempt_id IS NOT NULL)
          FROM jobguard.job_overview j
          LEFT JOIN jobguard.attempt_overview a USING (job_id)
         WHERE j.operation = %s GROUP BY j.job_id""", (op,)).fetchall()
    return {job_id: [tuple(a) for a in (attempts or [])] for job_id, attempts in rows}


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_each_attempt_runs_the_handler_of_its_provider(any_database: str, kind: str) -> None:
    """Two workers with handlers for psp-a and psp-b drain jobs of psp-a,
    psp-b and psp-c: each psp-a and psp-b job ran once, with its own
    provider's handler; no psp-c job was ever claimed (no attempt)."""
    op = f"hmap-{kind}-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dbname=any_database, autocommit=True) as conn:
        jobs = submit(conn, op, {"psp-a": 6, "psp-b": 5, "psp-c": 4})
    seen: Dict[str, List[Any]] = collections.defaultdict(list)
    lock = threading.Lock()
    stats = drain(kind, any_database, op, workers=2,
                  handlers={"psp-a": recording(seen, lock, "a"),
                            "psp-b": recording(seen, lock, "b")})
    assert sorted(seen["a"]) == [(j, "psp-a", False) for j in jobs["psp-a"]]
    assert sorted(seen["b"]) == [(j, "psp-b", False) for j in jobs["psp-b"]]
    assert sum(s.claimed for s in stats) == 11 and sum(s.won for s in stats) == 11
    with psycopg.connect(dbname=any_database, autocommit=True) as conn:
        attempts = attempts_by_job(conn, op)
    for provider in ("psp-a", "psp-b"):
        assert all(attempts[j] == [(provider, "succeeded")] for j in jobs[provider])
    assert all(attempts[j] == [] for j in jobs["psp-c"])


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_one_handler_reads_the_provider_of_the_row(any_database: str, kind: str) -> None:
    """Without handlers, every row is claimed, and the one handler sees
    each row's provider (and failover False for a job's own provider)."""
    op = f"hone-{kind}-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dbname=any_database, autocommit=True) as conn:
        jobs = submit(conn, op, {"psp-a": 3, "psp-c": 2})
    seen: Dict[str, List[Any]] = collections.defaultdict(list)
    drain(kind, any_database, op, handler=recording(seen, threading.Lock(), "one"))
    assert sorted(seen["one"]) == sorted([(j, "psp-a", False) for j in jobs["psp-a"]]
                                         + [(j, "psp-c", False) for j in jobs["psp-c"]])


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_a_provider_and_handlers_claim_only_that_provider(any_database: str, kind: str) -> None:
    """``provider`` with ``handlers``: only that provider's rows."""
    op = f"hprov-{kind}-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dbname=any_database, autocommit=True) as conn:
        jobs = submit(conn, op, {"psp-a": 2, "psp-b": 2})
    seen: Dict[str, List[Any]] = collections.defaultdict(list)
    lock = threading.Lock()
    drain(kind, any_database, op, provider="psp-b",
          handlers={"psp-a": recording(seen, lock, "a"), "psp-b": recording(seen, lock, "b")})
    assert seen["a"] == [] and sorted(j for j, _, _ in seen["b"]) == jobs["psp-b"]


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_a_failover_runs_the_fallbacks_handler(database: str, conn: Conn, kind: str) -> None:
    """1.3: a job of psp-a whose attempt psp-a refused moves along its
    route to the certified psp-b; a worker with a handler for psp-a only
    never claims it again, one with psp-b's handler runs it (failover
    True), and its result is the job's."""
    if not has_routes(conn):
        pytest.skip("the database has no failover routes (jobguard before 1.3)")
    op = f"hfail-{kind}-{uuid.uuid4().hex[:8]}"
    conn.execute("SELECT jobguard.certify_provider(%s, 'psp-b')", (op,))
    conn.execute("SELECT jobguard.set_failover(%s, ARRAY['psp-b'])", (op,))
    [job] = submit(conn, op, {"psp-a": 1})["psp-a"]
    calls: Dict[str, List[Any]] = collections.defaultdict(list)

    def refusing(job: Claimed) -> Any:
        """psp-a says no."""
        calls["a"].append((job.job_id, job.provider, job.failover))
        raise ProviderRefused("card declined at psp-a", retry_in=0)
    first = drain(kind, database, op, handlers={"psp-a": refusing})
    assert calls["a"] == [(job, "psp-a", False)] and first[0].failed == 1
    again = drain(kind, database, op, handlers={"psp-a": refusing})
    assert again[0].claimed == 0 and len(calls["a"]) == 1
    seen: Dict[str, List[Any]] = collections.defaultdict(list)
    drain(kind, database, op, handlers={"psp-b": recording(seen, threading.Lock(), "b")})
    assert seen["b"] == [(job, "psp-b", True)]
    assert attempts_by_job(conn, op)[job] == [("psp-a", "failed"), ("psp-b", "succeeded")]


def test_handler_options_are_checked() -> None:
    """One handler or handlers, not both nor neither; handlers map names to
    callables; a provider given must have a handler."""
    ok = lambda job: {}  # noqa: E731
    for cls in (Worker, AsyncWorker):
        with pytest.raises(TypeError):
            cls(ok, handlers={"psp-a": ok})
        with pytest.raises(TypeError):
            cls()
        with pytest.raises(TypeError):
            cls(handlers={})
        with pytest.raises(TypeError):
            cls(handlers={"psp-a": "not callable"})
        with pytest.raises(ValueError):
            cls(handlers={"psp-a": ok}, provider="psp-b")
        assert cls(handlers={"psp-a": ok}, provider="psp-a").handlers == {"psp-a": ok}
