"""The asyncio API: AsyncConnection runs the same statements as the sync
functions (same results, same exception classes), and AsyncWorker drains a
queue through killed connections with one success per job, heartbeats a
long handler, and leaves the earlier open attempts of its name unrun."""

from __future__ import annotations

import asyncio
import collections
import uuid
from typing import Any, Dict, List

import psycopg
import pytest

import jobguard
from jobguard import AsyncConnection, AsyncWorker, Claimed


def fresh_op(conninfo: str) -> str:
    """A new operation with an open contract."""
    op = "op-" + uuid.uuid4().hex[:12]
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("SELECT jobguard.define_operation(%s, '{\"type\": \"object\"}')", (op,))
    return op


def test_async_connection_lifecycle_and_errors(database: str) -> None:
    """submit, replay, begin, JG002, finish, reads, JG008 — as coroutines."""
    async def main() -> None:
        async with await AsyncConnection.connect(f"dbname={database}", autocommit=True) as jg:
            key = uuid.uuid4().hex
            sub = await jg.submit("alice", key, "charge", {"amount": 5}, "main-psp")
            again = await jg.submit("alice", key, "charge", {"amount": 5}, "main-psp")
            assert sub.created and not again.created and again.job_id == sub.job_id
            with pytest.raises(jobguard.IdempotencyKeyReused) as reused:
                await jg.submit("alice", key, "charge", {"amount": 6}, "main-psp")
            assert reused.value.job_id == sub.job_id and reused.value.unparsed == []
            attempt = await jg.begin_attempt(sub.job_id, timeout=30)
            with pytest.raises(jobguard.AttemptInFlight) as busy:
                await jg.begin_attempt(sub.job_id)
            assert busy.value.blocking_attempt_id == attempt
            assert await jg.finish(attempt, {"charge_id": "c1"}) == "won"
            assert await jg.job_state(sub.job_id) == "succeeded"
            assert (await jg.job(sub.job_id))["result"] == {"charge_id": "c1"}
            assert [a["state"] for a in await jg.attempts(sub.job_id)] == ["succeeded"]
            with pytest.raises(jobguard.JobNotFound):
                await jg.job_state(jobguard.JobId(9000000000000))
            outs = await jg.submit_many([jobguard.Request("bob", uuid.uuid4().hex, "charge", {},
                                                          "main-psp")])
            assert outs[0].created
    asyncio.run(main())


def test_async_workers_drain_through_killed_connections(database: str) -> None:
    """3 AsyncWorkers drain 60 jobs while their backends are terminated:
    one succeeded attempt per job, each handler ran once."""
    conninfo = f"dbname={database}"
    op = fresh_op(conninfo)
    with psycopg.connect(conninfo, autocommit=True) as c:
        jobs = [o.job_id for o in jobguard.submit_many(c, [
            jobguard.Request("alice", uuid.uuid4().hex, op, {"n": i}, "main-psp")
            for i in range(60)])]
    calls: Dict[int, int] = collections.Counter()
    prefix = "adrain-" + uuid.uuid4().hex[:6]

    async def handler(job: Claimed) -> Dict[str, Any]:
        """Count the call, work a little."""
        calls[job.attempt_id] += 1
        await asyncio.sleep(0.01)
        return {"n": job.params["n"]}

    async def main() -> List[Any]:
        workers = [AsyncWorker(handler, conninfo=conninfo, name=f"{prefix}-{i}", operations=[op],
                               batch=4, wait=0.5, reconnect_min=0.05) for i in range(3)]
        appnames = [f"{w.name} ({role})" for w in workers
                    for role in ("jobguard worker", "jobguard heartbeat")]
        running = [asyncio.create_task(w.run(until_idle=True, handle_signals=False))
                   for w in workers]
        kills = 0
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as c:
            while not all(t.done() for t in running) and kills < 4:
                await asyncio.sleep(0.15)
                # one of exactly these workers' backends: never another test's
                cur = await c.execute("""SELECT count(*) FROM (SELECT pg_terminate_backend(pid)
                    FROM pg_stat_activity WHERE datname = %s AND application_name = ANY (%s)
                    ORDER BY random() LIMIT 1) t""", (database, appnames))
                row = await cur.fetchone()
                kills += row[0] if row else 0
        stats = await asyncio.gather(*running)
        assert kills >= 1
        return stats
    stats = asyncio.run(main())
    assert all(n == 1 for n in calls.values())
    with psycopg.connect(conninfo, autocommit=True) as c:
        for job_id in jobs:
            assert [a["state"] for a in jobguard.attempts(c, job_id)] == ["succeeded"]
    assert sum(s.won for s in stats) == 60 and sum(s.report_errors for s in stats) == 0


def test_async_worker_heartbeats_and_earlier_attempts(database: str) -> None:
    """A long handler keeps its attempt started; earlier open attempts of
    the worker's name are marked unknown, not run."""
    conninfo = f"dbname={database}"
    op = fresh_op(conninfo)
    name = "aearly-" + uuid.uuid4().hex[:6]
    with psycopg.connect(conninfo, autocommit=True) as c:
        early = jobguard.submit(c, "alice", uuid.uuid4().hex, op, {}, "main-psp").job_id
        jobguard.claim(c, name, [op])
        late = jobguard.submit(c, "alice", uuid.uuid4().hex, op, {}, "main-psp").job_id
    seen: List[str] = []

    async def handler(job: Claimed) -> Dict[str, Any]:
        """Outlive the timeout; note the attempt's state then."""
        await asyncio.sleep(1.6)
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as c:
            cur = await c.execute("SELECT state FROM jobguard.attempt_overview "
                                  "WHERE attempt_id = %s", (job.attempt_id,))
            row = await cur.fetchone()
            seen.append(row[0] if row else "")
        return {}
    w = AsyncWorker(handler, conninfo=conninfo, name=name, operations=[op], timeout=1,
                    heartbeat_every=0.25, wait=0)
    stats = asyncio.run(w.run(until_idle=True, handle_signals=False))
    assert seen == ["started"] and stats.heartbeats >= 4 and stats.won == 1
    assert (stats.marked_unknown, stats.adopted) == (1, 0)
    with psycopg.connect(conninfo, autocommit=True) as c:
        assert jobguard.job_state(c, early) == "unknown"
        assert jobguard.job_state(c, late) == "succeeded"
