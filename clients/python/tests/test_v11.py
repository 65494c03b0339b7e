"""The 1.1 functions against a real jobguard: claim, heartbeat, fail with
retry_in, submit_many's per-row outcomes, and the DETAIL that says an id is
of the other kind."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any, List

import psycopg
import pytest

import jobguard
from jobguard import (AttemptNotFound, Claimed, IdempotencyKeyReused, InvalidTransition,
                      JobNotFound, Request)

Conn = psycopg.Connection[Any]


def fresh_op(conn: Conn, backoff: str = "") -> str:
    """A new operation name (so that claims see only this test's jobs),
    defined with an open contract and the given retry backoff."""
    op = "op-" + uuid.uuid4().hex[:12]
    conn.execute("SELECT jobguard.define_operation(%s, '{\"type\": \"object\"}', %s::interval)",
                 (op, backoff or None))
    return op


def submit_n(conn: Conn, op: str, n: int) -> List[jobguard.JobId]:
    """Submit n jobs of operation op; their ids in order."""
    return [jobguard.submit(conn, "alice", uuid.uuid4().hex, op, {"n": i}, "main-psp").job_id
            for i in range(n)]


def test_claim_hands_out_typed_attempts_oldest_first(conn: Conn) -> None:
    """claim begins attempts on the oldest runnable jobs, records the worker,
    and returns nothing when nothing is runnable."""
    op = fresh_op(conn)
    jobs = submit_n(conn, op, 3)
    got = jobguard.claim(conn, "w-typed", [op], timeout=60, max_jobs=2)
    assert [c.job_id for c in got] == jobs[:2]
    c = got[0]
    assert isinstance(c, Claimed) and isinstance(c.deadline, datetime)
    assert (c.attempt_no, c.operation, c.provider, c.params) == (1, op, "main-psp", {"n": 0})
    assert c.attempt_id not in jobs
    assert jobguard.attempts(conn, c.job_id)[0]["worker"] == "w-typed"
    assert jobguard.job_state(conn, c.job_id) == "running"
    assert [x.job_id for x in jobguard.claim(conn, "w-typed", [op], max_jobs=5)] == jobs[2:]
    assert jobguard.claim(conn, "w-typed", [op]) == []


def test_claim_waits_for_a_submit(database: str, conn: Conn) -> None:
    """claim(wait=...) returns the job submitted while it waited."""
    op = fresh_op(conn)
    got: List[Claimed] = []

    def waiter() -> None:
        """Claim with a wait, on a connection of its own."""
        with psycopg.connect(dbname=database, autocommit=True) as c:
            got.extend(jobguard.claim(c, "w-wait", [op], wait=10))

    t = threading.Thread(target=waiter)
    start = time.monotonic()
    t.start()
    time.sleep(0.3)
    job_id = submit_n(conn, op, 1)[0]
    t.join()
    assert [c.job_id for c in got] == [job_id]
    assert time.monotonic() - start < 5


def test_heartbeat_extends_until_the_deadline_passes(conn: Conn) -> None:
    """heartbeat returns a later deadline; past the deadline it is JG006."""
    op = fresh_op(conn)
    submit_n(conn, op, 1)
    c = jobguard.claim(conn, "w-beat", [op], timeout=0.5)[0]
    later = jobguard.heartbeat(conn, c.attempt_id, extend_by=timedelta(minutes=5))
    assert later - c.deadline > timedelta(minutes=4)
    assert jobguard.heartbeat(conn, c.attempt_id) < later   # back to its own timeout (0.5 s)
    time.sleep(0.8)
    with pytest.raises(InvalidTransition) as exc:
        jobguard.heartbeat(conn, c.attempt_id)
    assert (exc.value.attempt_id, exc.value.state) == (c.attempt_id, "unknown")


def test_fail_with_retry_in_holds_claim_back(conn: Conn) -> None:
    """fail(retry_in) keeps claim away from the job until then; an explicit
    begin_attempt is not held back."""
    op = fresh_op(conn)
    job_id = submit_n(conn, op, 1)[0]
    c = jobguard.claim(conn, "w-retry", [op])[0]
    assert jobguard.fail(conn, c.attempt_id, "503", retry_in=timedelta(hours=1)) == "failed"
    assert jobguard.job_state(conn, job_id) == "pending"
    assert jobguard.claim(conn, "w-retry", [op]) == []
    assert jobguard.begin_attempt(conn, job_id) > 0


def test_fail_without_retry_in_applies_the_backoff(conn: Conn) -> None:
    """fail() without retry_in applies the operation's retry_backoff."""
    op = fresh_op(conn, "0.6 seconds")
    submit_n(conn, op, 1)
    c = jobguard.claim(conn, "w-backoff", [op])[0]
    jobguard.fail(conn, c.attempt_id, "boom")
    assert jobguard.claim(conn, "w-backoff", [op]) == []
    again = jobguard.claim(conn, "w-backoff", [op], wait=5)
    assert [x.attempt_no for x in again] == [2]


def test_submit_many_returns_every_outcome_as_data(conn: Conn) -> None:
    """Created, replayed and refused requests are rows; nothing is raised,
    and the refused rows wrote nothing."""
    op = fresh_op(conn)
    k = uuid.uuid4().hex
    existing = jobguard.submit(conn, "bob", k, op, {"a": 1}, "p").job_id
    new = uuid.uuid4().hex
    out = jobguard.submit_many(conn, [
        Request("bob", new, op, {"a": 2}, "p", max_attempts=3),   # created
        Request("bob", k, op, {"a": 1}, "p"),                     # replay of existing
        Request("bob", k, op, {"a": 9}, "p"),                     # JG001
        Request("bob", "", op, {}, "p"),                          # 22023
        Request("bob", uuid.uuid4().hex, op, None, "p"),          # 22004
        Request("bob", new, op, {"a": 2}, "p", max_attempts=3),   # replay within the call
    ])
    assert [o.ord for o in out] == [1, 2, 3, 4, 5, 6]
    assert [(o.created, o.sqlstate) for o in out] == [
        (True, None), (False, None), (False, "JG001"), (False, "22023"), (False, "22004"),
        (False, None)]
    assert [o.refused for o in out] == [False, False, True, True, True, False]
    assert out[1].job_id == existing and out[5].job_id == out[0].job_id
    assert out[2].job_id == existing and out[2].error_class is IdempotencyKeyReused
    assert out[2].message is not None and "differs in params" in out[2].message
    assert out[3].job_id is None and out[3].error_class is psycopg.errors.InvalidParameterValue
    assert out[4].error_class is psycopg.errors.NullValueNotAllowed
    assert out[0].error_class is None
    assert jobguard.job(conn, out[0].job_id)["max_attempts"] == 3   # type: ignore[arg-type]
    n = conn.execute("SELECT count(*) FROM jobguard.job_overview WHERE operation = %s",
                     (op,)).fetchone()
    assert n == (2,)
    assert jobguard.submit_many(conn, []) == []


def test_ids_of_the_other_kind_are_named_in_the_error(conn: Conn) -> None:
    """JG008 / JG009 say, in a field, that the number is an id of the other kind."""
    op = fresh_op(conn)
    job_id = submit_n(conn, op, 1)[0]
    attempt_id = jobguard.claim(conn, "w-ids", [op])[0].attempt_id
    with pytest.raises(JobNotFound) as jnf:
        jobguard.cancel_job(conn, attempt_id, "x")  # type: ignore[arg-type]
    assert (jnf.value.job_id, jnf.value.attempt_id) == (attempt_id, attempt_id)
    with pytest.raises(AttemptNotFound) as anf:
        jobguard.heartbeat(conn, job_id)  # type: ignore[arg-type]
    assert (anf.value.attempt_id, anf.value.job_id) == (job_id, job_id)
    with pytest.raises(JobNotFound) as missing:
        jobguard.job_state(conn, jobguard.JobId(987654321))
    assert missing.value.attempt_id is None
