"""The 1.2 parts of the clients against a real jobguard: the provider key
and redrive reach the handler, InProgress marks the attempt unknown (never
failed), a batch's results are recorded by one finish_many (refused rows
handled as finish's errors; a 1.1 database gets finish_attempt each), and
the Reconciler (sync and async) reports what reconcile says, once per row.

The tests of provider keys, redrive and claim_unknown need liveness's 1.2
functions; on a database without them they are skipped, saying so."""

from __future__ import annotations

import asyncio
import collections
import re
import threading
import uuid
from typing import Any, Dict, Iterator, List, Optional

import psycopg
import pytest

import jobguard
from jobguard import (AsyncReconciler, AsyncWorker, Claimed, InProgress, ProviderRefused,
                      Reconciler, RetryLater, Unknown, Worker)

from conftest import scratch_database

Conn = psycopg.Connection[Any]


def fresh_op(conn: Conn, schema: str = '{"type": "object"}') -> str:
    """A new operation (claims of one test see only its jobs)."""
    op = "op-" + uuid.uuid4().hex[:12]
    conn.execute("SELECT jobguard.define_operation(%s, %s)", (op, schema))
    return op


def submit_n(conn: Conn, op: str, params: List[Dict[str, Any]],
             provider: str = "main-psp") -> List[jobguard.JobId]:
    """Submit one job of op per params, in one submit_many (one attempt
    each: a failed job is not run again); their ids."""
    out = jobguard.submit_many(conn, [jobguard.Request("alice", uuid.uuid4().hex, op, p, provider,
                                                       max_attempts=1)
                                      for p in params])
    assert not any(o.refused for o in out)
    return [o.job_id for o in out if o.job_id is not None]


def states(conn: Conn, job_id: jobguard.JobId) -> List[str]:
    """The states of the job's attempts, in order."""
    return [a["state"] for a in jobguard.attempts(conn, job_id)]


def has_function(conn: Conn, signature: str) -> bool:
    """Whether the database has that jobguard function."""
    row = conn.execute("SELECT to_regprocedure(%s) IS NOT NULL", (signature,)).fetchone()
    return bool(row and row[0])


def needs_1_2_liveness(conn: Conn) -> None:
    """Skip unless the database has the 1.2 liveness functions."""
    if not has_function(conn, "jobguard.claim_unknown(text, text[], integer, interval, interval)"):
        pytest.skip("the database has no jobguard.claim_unknown (1.2 liveness)")


def run_worker(handler: Any, database: str, op: str, kind: str = "thread",
               **options: Any) -> Any:
    """A Worker (kind "thread") or an AsyncWorker (kind "asyncio") over op's
    jobs, run until idle; it is returned for its stats."""
    if kind == "asyncio":
        aw = AsyncWorker(handler, conninfo=f"dbname={database}", operations=[op], wait=0.3,
                         **options)
        asyncio.run(aw.run(until_idle=True, handle_signals=False))
        return aw
    w = Worker(handler, conninfo=f"dbname={database}", operations=[op], wait=0.3,
               **options)
    w.run(until_idle=True, handle_signals=False)
    return w


# -- the Worker ------------------------------------------------------------

def test_in_progress_marks_the_attempt_unknown_never_failed(database: str, conn: Conn) -> None:
    """A handler raising InProgress leaves its attempt unknown (the job
    blocked, no retry with a new key); ProviderRefused and RetryLater fail."""
    op = fresh_op(conn)
    busy, no, later = submit_n(conn, op, [{"k": "busy"}, {"k": "no"}, {"k": "later"}])

    def handler(job: Claimed) -> Any:
        """The provider's three answers."""
        if job.params["k"] == "busy":
            raise InProgress("idempotency_key_in_use")
        if job.params["k"] == "no":
            raise ProviderRefused("card declined")
        raise RetryLater("rate limited", 3600)
    w = run_worker(handler, database, op, batch=3)
    assert states(conn, busy) == ["unknown"]
    assert jobguard.job_state(conn, busy) == "unknown"
    assert states(conn, no) == ["failed"] and states(conn, later) == ["failed"]
    assert jobguard.attempts(conn, no)[0]["error"] == "ProviderRefused: card declined"
    assert (w.stats.in_progress, w.stats.failed, w.stats.report_errors) == (1, 2, 0)
    assert isinstance(RetryLater("x", 1), ProviderRefused)


def test_a_batch_is_recorded_by_one_finish_many_when_it_ends(database: str,
                                                            conn: Conn) -> None:
    """batch=4: while the batch's handlers run, the earlier ones' results are
    not recorded yet (their attempts stay started, heartbeaten); after it,
    all are.  batch=1 records each at once."""
    for batch, recorded_before_next in ((4, False), (1, True)):
        op = fresh_op(conn)
        jobs = submit_n(conn, op, [{"n": i} for i in range(4)])
        seen: Dict[int, List[str]] = {}

        def handler(job: Claimed) -> Any:
            """Look at the earlier jobs' attempts, then return a result."""
            with psycopg.connect(dbname=database, autocommit=True) as c:
                seen[job.params["n"]] = [states(c, j)[0] for j in jobs[:job.params["n"]]]
            return {"n": job.params["n"]}
        w = run_worker(handler, database, op, batch=batch)
        assert w.stats.won == 4 and w.stats.report_errors == 0
        assert [states(conn, j) for j in jobs] == [["succeeded"]] * 4
        want = "succeeded" if recorded_before_next else "started"
        assert seen[3] == [want] * 3, (batch, seen)


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_refused_rows_of_finish_many_are_handled_as_finish_errors(database: str, conn: Conn,
                                                                 kind: str) -> None:
    """In one finish_many: a won row, a rejected row (contract), a row over
    max_payload_size (54000: cannot be sent, marked unknown, once), and a row whose
    attempt was failed meanwhile (JG006: a report error, nothing written).
    No handler ran twice."""
    op = fresh_op(conn, '{"type": "object", "required": ["ok"]}')
    jobs = submit_n(conn, op, [{"k": k} for k in ("won", "rejected", "large", "closed")])
    calls: Dict[int, int] = collections.Counter()

    def handler(job: Claimed) -> Any:
        """One result per kind; 'closed' fails its own attempt first."""
        calls[job.attempt_id] += 1
        kind = job.params["k"]
        if kind == "closed":
            with psycopg.connect(dbname=database, autocommit=True) as c:
                jobguard.fail(c, job.attempt_id, "failed by someone else", 3600)
        if kind == "rejected":
            return {"no_ok": True}
        if kind == "large":
            return {"ok": "x" * 4096}
        return {"ok": kind}
    w = run_worker(handler, database, op, kind, batch=4,
                   connect_kwargs={"options": "-c jobguard.max_payload_size=1kB"})
    assert set(calls.values()) == {1} and len(calls) == 4
    won, rejected, large, closed = (jobguard.attempts(conn, j)[0] for j in jobs)
    assert won["state"] == "succeeded"
    assert rejected["state"] == "failed" and "ok" in rejected["error"]
    assert large["state"] == "unknown"
    assert closed["state"] == "failed" and closed["error"] == "failed by someone else"
    assert (w.stats.won, w.stats.rejected, w.stats.unrecorded, w.stats.report_errors) == \
        (1, 1, 1, 1)


@pytest.fixture
def v11_database() -> Iterator[str]:
    """A database whose jobguard is at 1.1 (served by a later library)."""
    with scratch_database("v11db", "1.1") as db:
        yield db


def test_a_1_1_database_gets_finish_attempt_each_and_no_provider_key(v11_database: str) -> None:
    """On 1.1 there is no finish_many and claim has no provider_key or
    redrive: a batch is recorded with finish_attempt each; the job's
    provider_key is None, redrive False."""
    with psycopg.connect(dbname=v11_database, autocommit=True) as conn:
        assert not has_function(conn, "jobguard.finish_many(bigint[], jsonb[])")
        op = fresh_op(conn)
        jobs = submit_n(conn, op, [{"n": i} for i in range(3)])
        got: List[Claimed] = []

        def handler(job: Claimed) -> Any:
            """Keep the job; return a result."""
            got.append(job)
            return {"n": job.params["n"]}
        w = run_worker(handler, v11_database, op, batch=3)
        assert (w.stats.won, w.stats.report_errors) == (3, 0)
        assert [states(conn, j) for j in jobs] == [["succeeded"]] * 3
        assert [(j.provider_key, j.redrive) for j in got] == [(None, False)] * 3


def test_the_async_worker_batches_and_marks_in_progress_unknown(database: str,
                                                                conn: Conn) -> None:
    """AsyncWorker: InProgress -> unknown; a batch's results recorded at its
    end (the earlier attempts still started while later handlers run)."""
    op = fresh_op(conn)
    jobs = submit_n(conn, op, [{"n": 0}, {"n": 1}, {"n": 2, "busy": True}])
    seen: Dict[int, List[str]] = {}

    async def handler(job: Claimed) -> Any:
        """Look at the earlier jobs, then answer."""
        async with await psycopg.AsyncConnection.connect(dbname=database, autocommit=True) as c:
            cur = await c.execute("""SELECT state FROM jobguard.attempt_overview
                                      WHERE job_id = ANY (%s) ORDER BY job_id""",
                                  (jobs[:job.params["n"]],))
            seen[job.params["n"]] = [r[0] for r in await cur.fetchall()]
        if job.params.get("busy"):
            raise InProgress("still processing")
        return {"n": job.params["n"]}

    w = AsyncWorker(handler, conninfo=f"dbname={database}", operations=[op], batch=3, wait=0.3)
    stats = asyncio.run(w.run(until_idle=True, handle_signals=False))
    assert seen[2] == ["started", "started"]
    assert [states(conn, j) for j in jobs] == [["succeeded"], ["succeeded"], ["unknown"]]
    assert (stats.won, stats.in_progress, stats.failed, stats.report_errors) == (2, 1, 0, 0)


# -- provider keys and redrive (1.2 liveness) ----------------------------

KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_the_handler_gets_the_provider_key_and_a_redrive_the_same_key(database: str,
                                                                     conn: Conn) -> None:
    """job.provider_key is the attempt's key; a redriven attempt (claim
    hands it out once the unknown one is redrivable) runs the same handler
    with redrive True and the same key."""
    needs_1_2_liveness(conn)
    op = fresh_op(conn)
    provider = "psp-" + uuid.uuid4().hex[:8]
    conn.execute("SELECT jobguard.set_provider_policy(%s, dedupes_for => interval '1 day')",
                 (provider,))
    (job_id,) = submit_n(conn, op, [{"n": 1}], provider=provider)
    got: List[Claimed] = []

    def handler(job: Claimed) -> Any:
        """The first call: still in progress; the redrive: done."""
        got.append(job)
        if len(got) == 1:
            raise InProgress("idempotency_key_in_use")
        return {"ok": job.provider_key}
    run_worker(handler, database, op, timeout=0.5)
    assert states(conn, job_id) == ["unknown"]
    assert got[0].provider_key is not None and KEY.match(got[0].provider_key)
    assert got[0].provider_key == jobguard.provider_key(conn, got[0].attempt_id)
    assert got[0].redrive is False
    threading.Event().wait(0.7)   # unknown for at least its own timeout
    run_worker(handler, database, op, timeout=30)
    assert len(got) == 2 and got[1].redrive is True
    assert got[1].provider_key == got[0].provider_key
    assert states(conn, job_id) == ["cancelled", "succeeded"]
    assert jobguard.job(conn, job_id)["result"] == {"ok": got[0].provider_key}


# -- the Reconciler (1.2 liveness) ----------------------------------------

def unknown_jobs(conn: Conn, op: str, kinds: List[str]) -> List[jobguard.JobId]:
    """One job of op per kind, each with an attempt marked unknown."""
    jobs = submit_n(conn, op, [{"k": k} for k in kinds])
    for job_id in jobs:
        jobguard.mark_unknown(conn, jobguard.begin_attempt(conn, job_id, timeout=30))
    return jobs


KINDS = ["done", "no", "dunno", "broken", "busy"]


def reconcile_answer(row: Unknown) -> Any:
    """What the provider says about each kind."""
    kind = row.params["k"]
    if kind == "done":
        return {"charge": row.provider_key}
    if kind == "no":
        raise ProviderRefused("no such charge")
    if kind == "broken":
        raise ConnectionError("provider API down")
    if kind == "busy":
        raise InProgress("still processing")
    return None


def check_reconciled(conn: Conn, jobs: List[jobguard.JobId], stats: Any) -> None:
    """The outcome of reconciling KINDS."""
    done, no, dunno, broken, busy = jobs
    assert states(conn, done) == ["succeeded"]
    assert jobguard.job(conn, done)["result"]["charge"] == \
        jobguard.attempts(conn, done)[0]["provider_key"]
    assert states(conn, no) == ["failed"]
    assert jobguard.attempts(conn, no)[0]["error"] == "ProviderRefused: no such charge"
    assert [states(conn, j) for j in (dunno, broken, busy)] == [["unknown"]] * 3
    assert (stats.claimed, stats.won, stats.failed, stats.left, stats.errors,
            stats.report_errors) == (5, 1, 1, 2, 1, 0)


def test_the_reconciler_reports_what_the_provider_says_once_per_row(database: str,
                                                                   conn: Conn) -> None:
    """A result finishes, ProviderRefused fails, None / InProgress / another
    exception leave the attempt unknown; each row is asked once (the
    leased rows are not handed out again while the lease lasts)."""
    needs_1_2_liveness(conn)
    op = fresh_op(conn)
    jobs = unknown_jobs(conn, op, KINDS)
    calls: Dict[int, int] = collections.Counter()

    def reconcile(row: Unknown) -> Any:
        """Count the call, answer by kind."""
        calls[row.attempt_id] += 1
        return reconcile_answer(row)
    r = Reconciler(reconcile, conninfo=f"dbname={database}", operations=[op], batch=2,
                   lease=60)
    stats = r.run(until_idle=True, handle_signals=False)
    assert len(calls) == 5 and set(calls.values()) == {1}
    check_reconciled(conn, jobs, stats)


def test_the_async_reconciler_does_the_same(database: str, conn: Conn) -> None:
    """AsyncReconciler with a coroutine reconcile: the same outcomes."""
    needs_1_2_liveness(conn)
    op = fresh_op(conn)
    jobs = unknown_jobs(conn, op, KINDS)
    calls: Dict[int, int] = collections.Counter()

    async def reconcile(row: Unknown) -> Any:
        """Count the call, answer by kind."""
        calls[row.attempt_id] += 1
        await asyncio.sleep(0)
        return reconcile_answer(row)
    r = AsyncReconciler(reconcile, conninfo=f"dbname={database}", operations=[op], batch=3,
                        lease=60)
    stats = asyncio.run(r.run(until_idle=True, handle_signals=False))
    assert len(calls) == 5 and set(calls.values()) == {1}
    check_reconciled(conn, jobs, stats)


def test_a_stopped_reconciler_reports_the_batch_so_far_once(database: str, conn: Conn) -> None:
    """stop() during the second call of a batch of four: the two answers
    are reported (once), the other two rows are not asked, and stay unknown."""
    needs_1_2_liveness(conn)
    op = fresh_op(conn)
    jobs = unknown_jobs(conn, op, ["done"] * 4)
    asked: List[int] = []
    holder: List[Optional[Reconciler]] = [None]

    def reconcile(row: Unknown) -> Any:
        """Answer; stop the reconciler during the second call."""
        asked.append(row.attempt_id)
        if len(asked) == 2 and holder[0] is not None:
            holder[0].stop()
        return {"charge": row.provider_key}
    r = Reconciler(reconcile, conninfo=f"dbname={database}", operations=[op], batch=4, lease=60)
    holder[0] = r
    stats = r.run(handle_signals=False)
    assert len(asked) == 2 and len(set(asked)) == 2
    assert sorted(states(conn, j)[0] for j in jobs) == ["succeeded"] * 2 + ["unknown"] * 2
    assert (stats.claimed, stats.won, stats.report_errors) == (4, 2, 0)


def test_reconciler_options_are_checked() -> None:
    """Bad options raise before anything runs, as the Workers' do."""
    with pytest.raises(ValueError):
        Reconciler(lambda row: None, batch=0)
    with pytest.raises(ValueError):
        Reconciler(lambda row: None, lease=0)
    with pytest.raises(ValueError):
        AsyncReconciler(lambda row: None, older_than=-1)
    with pytest.raises(TypeError):
        Reconciler("not callable")  # type: ignore[arg-type]
