"""The API functions against a real jobguard: results, types and every
error class with its parsed fields."""

from __future__ import annotations

import pickle
import threading
import time
import uuid
from datetime import timedelta
from typing import Any, List

import psycopg
import pytest

import jobguard
from jobguard import (AttemptInFlight, AttemptNotFound, AttemptsExhausted, IdempotencyKeyReused,
                      InvalidTransition, JobClosed, JobguardError, JobNotFound,
                      ProviderNotCertified, ResultMismatch)

Conn = psycopg.Connection[Any]


def key() -> str:
    """A fresh idempotency key."""
    return "k-" + uuid.uuid4().hex


def new_job(conn: Conn, **kw: Any) -> jobguard.JobId:
    """Submit a new charge job and return its id."""
    return jobguard.submit(conn, "alice", key(), "charge", {"amount": 1}, "main-psp", **kw).job_id


def test_submit_accepts_a_dict_and_replays(conn: Conn) -> None:
    """A dict is accepted for params; an equal request replays the job."""
    k = key()
    first = jobguard.submit(conn, "alice", k, "charge", {"amount": 10, "tags": ["a"]}, "main-psp")
    again = jobguard.submit(conn, "alice", k, "charge", {"tags": ["a"], "amount": 10}, "main-psp")
    assert first.created and not again.created
    assert again.job_id == first.job_id and isinstance(first.job_id, int)
    j = jobguard.job(conn, first.job_id)
    assert j["params"] == {"amount": 10, "tags": ["a"]}
    assert j["state"] == "pending" and j["attempts"] == 0


def test_lifecycle_won_lost_and_job_reads(conn: Conn) -> None:
    """Cancel, fail over, won and lost, and what job() and attempts() read."""
    job_id = new_job(conn)
    a1 = jobguard.begin_attempt(conn, job_id, timeout=timedelta(minutes=5))
    assert jobguard.job_state(conn, job_id) == "running"
    assert jobguard.mark_unknown(conn, a1) == "unknown"
    assert jobguard.cancel_attempt(conn, a1, "failing over") == "cancelled"
    a2 = jobguard.begin_attempt(conn, job_id, provider="backup-psp", timeout=5)
    assert jobguard.finish(conn, a2, {"charge_id": "bk"}) == "won"
    assert jobguard.finish(conn, a1, {"charge_id": "mn"}) == "lost"
    assert jobguard.finish(conn, a1, {"charge_id": "mn"}) == "lost"   # repeated: same outcome
    j = jobguard.job(conn, job_id)
    assert (j["state"], j["completed_by"], j["result"]) == ("succeeded", a2, {"charge_id": "bk"})
    rows = jobguard.attempts(conn, job_id)
    assert [(a["attempt_no"], a["state"], a["provider"]) for a in rows] == [
        (1, "lost", "main-psp"), (2, "succeeded", "backup-psp")]
    assert rows[0]["lost_to"] == a2 and rows[0]["lost_result"] == {"charge_id": "mn"}


def test_rejected_result_and_fail(conn: Conn) -> None:
    """A result breaking the contract is rejected; fail opens the gate."""
    job_id = new_job(conn)
    a1 = jobguard.begin_attempt(conn, job_id)
    assert jobguard.finish(conn, a1, ["not", "an", "object"]) == "rejected"
    a2 = jobguard.begin_attempt(conn, job_id)
    assert jobguard.fail(conn, a2, "card declined") == "failed"
    assert jobguard.job_state(conn, job_id) == "pending"


def test_attempt_key_replays_own_begin(conn: Conn) -> None:
    """A begin retried with its attempt_key gets its own attempt back."""
    job_id = new_job(conn)
    a = jobguard.begin_attempt(conn, job_id, attempt_key="w1:1")
    assert jobguard.begin_attempt(conn, job_id, attempt_key="w1:1") == a


def test_idempotency_key_reused(conn: Conn) -> None:
    """JG001 carries the existing job, owner, key and what differs."""
    k = key()
    first = jobguard.submit(conn, "bob", k, "charge", {"amount": 1}, "main-psp")
    with pytest.raises(IdempotencyKeyReused) as ei:
        jobguard.submit(conn, "bob", k, "charge", {"amount": 2}, "main-psp")
    e = ei.value
    assert (e.sqlstate, e.condition) == ("JG001", "idempotency_key_reused")
    assert e.job_id == first.job_id
    assert (e.owner_id, e.idempotency_key) == ("bob", k)
    assert e.differs_in is not None and "params" in e.differs_in
    assert e.hint is not None and str(first.job_id) in e.hint


def test_errors_are_psycopg_errors_and_registered(conn: Conn) -> None:
    """psycopg itself raises the classes; they are psycopg errors and pickle."""
    # raised by psycopg itself from plain SQL, caught by the psycopg classes
    with pytest.raises(psycopg.DatabaseError) as ei:
        conn.execute("SELECT jobguard.job_state(987654321)")
    assert type(ei.value) is JobNotFound
    assert isinstance(ei.value, psycopg.Error) and isinstance(ei.value, JobguardError)
    assert ei.value.job_id == 987654321
    assert psycopg.errors.lookup("JG001") is IdempotencyKeyReused
    assert psycopg.errors.lookup("ATTEMPT_IN_FLIGHT") is AttemptInFlight
    # one class per SPEC condition, JG001 .. JG010
    assert [c for c in jobguard.BY_SQLSTATE if c.startswith("JG")] == [
        f"JG{i:03d}" for i in range(1, 11)]
    # picklable, as psycopg promises for its errors, fields included
    back = pickle.loads(pickle.dumps(ei.value))
    assert type(back) is JobNotFound and back.job_id == 987654321


def test_translate_maps_a_plain_database_error(conn: Conn) -> None:
    """translate() turns a plain DatabaseError with a JG code into its class."""
    # what the client does should psycopg ever raise a JG code unregistered
    with pytest.raises(JobNotFound) as ei:
        conn.execute("SELECT jobguard.job_state(987654322)")
    plain = psycopg.DatabaseError(*ei.value.args, info=ei.value.pgresult)
    plain.sqlstate = "JG008"
    t = jobguard.translate(plain)
    assert type(t) is JobNotFound and t.job_id == 987654322 and t.__cause__ is plain


def test_attempt_in_flight_names_the_blocker(conn: Conn) -> None:
    """JG002 names the blocking attempt, its number, provider and state."""
    job_id = new_job(conn)
    a = jobguard.begin_attempt(conn, job_id, timeout=60)
    with pytest.raises(AttemptInFlight) as ei:
        jobguard.begin_attempt(conn, job_id)
    e = ei.value
    assert (e.job_id, e.blocking_attempt_id, e.blocking_attempt_no) == (job_id, a, 1)
    assert (e.blocking_provider, e.blocking_state) == ("main-psp", "started")
    assert e.deadline is not None


def test_job_closed_succeeded_and_cancelled(conn: Conn) -> None:
    """JG003 tells a succeeded job (completed_by) from a cancelled one."""
    job_id = new_job(conn)
    a = jobguard.begin_attempt(conn, job_id)
    jobguard.finish(conn, a, {"charge_id": "x"})
    with pytest.raises(JobClosed) as ei:
        jobguard.begin_attempt(conn, job_id)
    assert (ei.value.job_id, ei.value.completed_by, ei.value.cancelled) == (job_id, a, False)
    with pytest.raises(JobClosed) as ei:
        jobguard.cancel_job(conn, job_id, "too late")
    assert ei.value.completed_by == a

    other = new_job(conn)
    assert jobguard.cancel_job(conn, other, "customer changed their mind") == "cancelled"
    with pytest.raises(JobClosed) as ei:
        jobguard.begin_attempt(conn, other)
    assert (ei.value.job_id, ei.value.completed_by, ei.value.cancelled) == (other, None, True)


def test_provider_not_certified(conn: Conn) -> None:
    """JG004 names the provider, the operation and the job."""
    job_id = new_job(conn)
    with pytest.raises(ProviderNotCertified) as ei:
        jobguard.begin_attempt(conn, job_id, provider="cheap-psp")
    e = ei.value
    assert (e.provider, e.operation, e.job_id) == ("cheap-psp", "charge", job_id)


def test_attempts_exhausted(conn: Conn) -> None:
    """JG005 names the job and its max_attempts."""
    job_id = new_job(conn, max_attempts=1)
    jobguard.fail(conn, jobguard.begin_attempt(conn, job_id), "boom")
    with pytest.raises(AttemptsExhausted) as ei:
        jobguard.begin_attempt(conn, job_id)
    assert (ei.value.job_id, ei.value.max_attempts) == (job_id, 1)
    assert jobguard.job_state(conn, job_id) == "failed"


def test_invalid_transition_and_result_mismatch(conn: Conn) -> None:
    """JG006 names the attempt and its state; JG007 the attempt."""
    job_id = new_job(conn)
    a = jobguard.begin_attempt(conn, job_id)
    jobguard.fail(conn, a, "boom")
    with pytest.raises(InvalidTransition) as ei:
        jobguard.cancel_attempt(conn, a, "again")
    assert (ei.value.attempt_id, ei.value.job_id, ei.value.state) == (a, job_id, "failed")
    b = jobguard.begin_attempt(conn, job_id)
    jobguard.finish(conn, b, {"charge_id": "one"})
    with pytest.raises(ResultMismatch) as em:
        jobguard.finish(conn, b, {"charge_id": "two"})
    assert (em.value.attempt_id, em.value.job_id) == (b, job_id)


def test_attempt_not_found_and_argument_errors(conn: Conn) -> None:
    """JG009, and psycopg's own classes for 22004 and 22023."""
    with pytest.raises(AttemptNotFound) as ei:
        jobguard.finish(conn, jobguard.AttemptId(987654321), {"charge_id": "x"})
    assert ei.value.attempt_id == 987654321
    with pytest.raises(jobguard.NullValueNotAllowed):
        jobguard.submit(conn, "alice", key(), "charge", None, "main-psp")
    with pytest.raises(jobguard.InvalidParameterValue):
        jobguard.submit(conn, "alice", key(), "", {}, "main-psp")
    with pytest.raises(jobguard.InvalidParameterValue):
        jobguard.begin_attempt(conn, new_job(conn), timeout=0)


def test_a_refused_call_leaves_the_transaction_to_the_caller(database: str) -> None:
    """In the caller's transaction an error aborts it, as any SQL error."""
    # in the caller's own transaction: the error aborts it, as any SQL error
    with psycopg.connect(dbname=database) as c:
        job_id = new_job(c)
        with pytest.raises(JobNotFound):
            jobguard.job(c, jobguard.JobId(987654323))
        c.rollback()
        with pytest.raises(JobNotFound):
            jobguard.job(c, job_id)   # rolled back with it


def test_await_job_wakes_on_the_result(database: str, conn: Conn) -> None:
    """await_job returns the state at the timeout, and wakes on a result."""
    job_id = new_job(conn)
    a = jobguard.begin_attempt(conn, job_id)
    assert jobguard.await_job(conn, job_id, 0.1) == "running"
    states: List[str] = []

    def waiter() -> None:
        """Wait for the job on a connection of its own."""
        with psycopg.connect(dbname=database, autocommit=True) as c:
            states.append(jobguard.await_job(c, job_id, timedelta(seconds=20)))

    t = threading.Thread(target=waiter)
    start = time.monotonic()
    t.start()
    time.sleep(0.3)
    jobguard.finish(conn, a, {"charge_id": "z"})
    t.join()
    assert states == ["succeeded"] and time.monotonic() - start < 10


def test_concurrent_identical_submits_are_one_job(database: str) -> None:
    """Eight concurrent identical submits: one job, one created."""
    k = key()
    results: List[jobguard.Submitted] = []
    lock = threading.Lock()

    def click() -> None:
        """One double-click, on a connection of its own."""
        with psycopg.connect(dbname=database, autocommit=True) as c:
            r = jobguard.submit(c, "carol", k, "charge", {"amount": 3}, "main-psp")
            with lock:
                results.append(r)

    threads = [threading.Thread(target=click) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.job_id for r in results}) == 1
    assert sorted(r.created for r in results) == [False] * 7 + [True]


def test_await_job_is_refused_under_repeatable_read(database: str) -> None:
    """await_job under REPEATABLE READ: the server's 0A000, as psycopg's class."""
    with psycopg.connect(dbname=database) as c:
        job_id = new_job(c)
        c.commit()
        c.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            jobguard.await_job(c, job_id, 1)


def test_the_worker_side(conn: Conn) -> None:
    """submit_many's rows, claim, heartbeat, a retry held back, JG006 late."""
    op = "render-" + uuid.uuid4().hex[:8]   # its own operation: other tests' jobs stay put
    rows = jobguard.submit_many(conn, [
        jobguard.Request("dora", "m1", op, {"n": 1}, "main-psp"),
        jobguard.Request("dora", "m1", op, {"n": 1}, "main-psp"),
        jobguard.Request("dora", "m1", op, {"n": 2}, "main-psp"),
        jobguard.Request(None, "m2", op, {}, "main-psp"),  # type: ignore[arg-type]
    ])
    assert [(r.ord, r.created, r.sqlstate) for r in rows] == [
        (1, True, None), (2, False, None), (3, False, "JG001"), (4, False, "22004")]
    assert rows[1].job_id == rows[0].job_id
    assert rows[2].sqlstate is not None
    assert jobguard.BY_SQLSTATE[rows[2].sqlstate] is IdempotencyKeyReused

    [c] = jobguard.claim(conn, "py-1", operations=[op], timeout=60, max_jobs=5)
    assert c.job_id == rows[0].job_id
    assert jobguard.claim(conn, "py-2", operations=[op]) == []
    deadline = jobguard.heartbeat(conn, c.attempt_id, timedelta(hours=1))
    assert deadline.timestamp() - time.time() > 3500
    assert jobguard.fail(conn, c.attempt_id, "busy", retry_in=3600) == "failed"
    assert jobguard.claim(conn, "py-1", operations=[op]) == []
    with pytest.raises(InvalidTransition):
        jobguard.heartbeat(conn, c.attempt_id)
