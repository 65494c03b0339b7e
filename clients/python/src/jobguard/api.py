"""The jobguard SQL API as typed Python functions on a psycopg 3 connection.

Every function takes the connection first and runs one statement on it, in
the connection's current transaction (so a call can be part of your own
transaction, or autocommit).  jsonb arguments take any JSON-able Python
value (dict, list, str, number, bool); intervals take a ``timedelta`` or
seconds as a number.  Errors are the classes of ``jobguard.errors``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Dict, List, Literal, Optional, Sequence, TypedDict, Union

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from .errors import translate
from .ids import AttemptId, JobId

__all__ = [
    "Submitted", "Job", "Attempt", "JobState", "AttemptState", "Outcome", "Seconds",
    "submit", "begin_attempt", "finish", "fail", "mark_unknown", "cancel_attempt",
    "cancel_job", "job_state", "job", "attempts", "await_job",
]

JobState = Literal["pending", "running", "unknown", "succeeded", "failed", "cancelled"]
AttemptState = Literal["started", "unknown", "cancelled", "succeeded", "lost", "failed"]
Outcome = Literal["won", "lost", "rejected"]
#: an interval: a timedelta, or a number of seconds
Seconds = Union[timedelta, int, float]


@dataclass(frozen=True)
class Submitted:
    """What ``submit`` returns: the job, and whether this call created it."""

    job_id: JobId
    created: bool


class Job(TypedDict):
    """One row of ``jobguard.job()``."""

    job_id: JobId
    owner_id: str
    idempotency_key: str
    operation: str
    provider: str
    params: Any
    max_attempts: Optional[int]
    state: JobState
    version: int
    attempts: int
    completed_by: Optional[AttemptId]
    result: Any
    created_at: datetime
    completed_at: Optional[datetime]
    cancelled_at: Optional[datetime]


class Attempt(TypedDict):
    """One row of ``jobguard.attempts_of()``."""

    attempt_id: AttemptId
    job_id: JobId
    attempt_no: int
    provider: str
    state: AttemptState
    read_version: int
    attempt_key: Optional[str]
    started_at: datetime
    deadline: datetime
    finished_at: Optional[datetime]
    error: Optional[str]
    lost_to: Optional[AttemptId]
    lost_result: Any
    cancelled_at: Optional[datetime]
    cancel_reason: Optional[str]


Conn = psycopg.Connection[Any]


def _json(value: Any) -> Optional[Jsonb]:
    """A value for a jsonb parameter; None stays SQL NULL (jobguard refuses
    it with 22004 where it is required)."""
    if value is None or isinstance(value, Jsonb):
        return value
    return Jsonb(value)


def _interval(value: Optional[Seconds]) -> Optional[timedelta]:
    """A value for an interval parameter."""
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=value)


def _rows(conn: Conn, sql: str, args: Sequence[Any]) -> List[Dict[str, Any]]:
    """Run one statement and return its rows as dicts; a jobguard SQLSTATE
    always comes out as its own class (see ``errors.translate``)."""
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    except psycopg.Error as err:
        new = translate(err)
        if new is err:
            raise
        raise new from err


def _value(conn: Conn, sql: str, args: Sequence[Any]) -> Any:
    """Run a statement returning one value, and return it."""
    return next(iter(_rows(conn, sql, args)[0].values()))


def submit(conn: Conn, owner_id: str, idempotency_key: str, operation: str, params: Any,
           provider: str, max_attempts: Optional[int] = None) -> Submitted:
    """Create the job for (owner_id, idempotency_key), or return the existing
    one for the same request (``created`` False).  Raises
    ``IdempotencyKeyReused`` (its ``job_id`` is the existing job) for a
    different request under the same key."""
    row = _rows(conn, "SELECT job_id, created FROM jobguard.submit(%s, %s, %s, %s, %s, %s)",
                (owner_id, idempotency_key, operation, _json(params), provider, max_attempts))[0]
    return Submitted(JobId(row["job_id"]), row["created"])


def begin_attempt(conn: Conn, job_id: JobId, provider: Optional[str] = None,
                  timeout: Seconds = 30, attempt_key: Optional[str] = None) -> AttemptId:
    """Start the job's next attempt (``provider`` None: the job's own) with a
    deadline ``timeout`` from now, and return its id.  Raises
    ``AttemptInFlight``, ``JobClosed``, ``AttemptsExhausted`` or
    ``ProviderNotCertified`` when the gate says no."""
    return AttemptId(_value(conn, "SELECT jobguard.begin_attempt(%s, %s, %s, %s)",
                            (job_id, provider, _interval(timeout), attempt_key)))


def finish(conn: Conn, attempt_id: AttemptId, result: Any) -> Outcome:
    """Report the attempt's result: ``'won'`` (it is the job's result),
    ``'lost'`` (another attempt won, or the job was cancelled: the result is
    kept on the attempt) or ``'rejected'`` (it broke the output contract)."""
    outcome: Outcome = _value(conn, "SELECT jobguard.finish_attempt(%s, %s)",
                              (attempt_id, _json(result)))
    return outcome


def fail(conn: Conn, attempt_id: AttemptId, error: str) -> Literal["failed"]:
    """Report that the attempt failed; the gate opens for the next one."""
    state: Literal["failed"] = _value(conn, "SELECT jobguard.fail_attempt(%s, %s)",
                                      (attempt_id, error))
    return state


def mark_unknown(conn: Conn, attempt_id: AttemptId) -> Literal["unknown"]:
    """Record that the caller saw a timeout: the attempt is unknown, not failed."""
    state: Literal["unknown"] = _value(conn, "SELECT jobguard.mark_unknown(%s)", (attempt_id,))
    return state


def cancel_attempt(conn: Conn, attempt_id: AttemptId, reason: str) -> Literal["cancelled"]:
    """Stop waiting for an open attempt; its late result still goes through
    the compare-and-swap."""
    state: Literal["cancelled"] = _value(conn, "SELECT jobguard.cancel_attempt(%s, %s)",
                                         (attempt_id, reason))
    return state


def cancel_job(conn: Conn, job_id: JobId, reason: str) -> Literal["cancelled"]:
    """Cancel the job: no new attempts, later results lose."""
    state: Literal["cancelled"] = _value(conn, "SELECT jobguard.cancel_job(%s, %s)",
                                         (job_id, reason))
    return state


def job_state(conn: Conn, job_id: JobId) -> JobState:
    """The job's derived state."""
    state: JobState = _value(conn, "SELECT jobguard.job_state(%s)", (job_id,))
    return state


def job(conn: Conn, job_id: JobId) -> Job:
    """The job, with its derived state, its result and its attempt count."""
    return _rows(conn, "SELECT * FROM jobguard.job(%s)", (job_id,))[0]  # type: ignore[return-value]


def attempts(conn: Conn, job_id: JobId) -> List[Attempt]:
    """The job's attempts, in order."""
    return _rows(conn, "SELECT * FROM jobguard.attempts_of(%s)", (job_id,))  # type: ignore[return-value]


def await_job(conn: Conn, job_id: JobId, timeout: Seconds) -> JobState:
    """Wait until the job succeeds, fails or is cancelled, or ``timeout``
    passes; return its state then.  Needs READ COMMITTED (or autocommit):
    under REPEATABLE READ the server refuses it."""
    state: JobState = _value(conn, "SELECT jobguard.await(%s, %s)",
                             (job_id, _interval(timeout)))
    return state


# ---------------------------------------------------------------------------
# Version 1.1 (SPEC "Version 1.1"): NOT on the server yet, so not here yet.
# Each is one statement through _rows()/_value(), like the functions above:
#
#   claim(conn, worker: str, operations: Sequence[str] | None = None,
#         timeout: Seconds = 30, max_jobs: int = 1, provider: str | None = None,
#         wait: Seconds = 0) -> list[Claimed]
#       SELECT * FROM jobguard.claim(%s, %s, %s, %s, %s, %s)
#       Claimed: attempt_id, job_id, attempt_no, operation, provider, params, deadline
#   heartbeat(conn, attempt_id: AttemptId, extend_by: Seconds | None = None) -> datetime
#       SELECT jobguard.heartbeat(%s, %s)
#   fail(conn, attempt_id, error, retry_in: Seconds | None = None)
#       SELECT jobguard.fail_attempt(%s, %s, %s)
#   submit_many(conn, requests: Sequence[Request]) -> list[SubmitOutcome]
#       SELECT * FROM jobguard.submit_many(%s, %s, %s, %s::jsonb[], %s, %s)
#       SubmitOutcome: ord, job_id, created, sqlstate, message
#       (a refused row carries sqlstate/message; map it with errors.BY_SQLSTATE)
# ---------------------------------------------------------------------------
