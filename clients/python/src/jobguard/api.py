"""The jobguard SQL API as typed Python functions on a psycopg 3 connection.

Every function takes the connection first and runs one statement on it, in
the connection's current transaction (so a call can be part of your own
transaction, or autocommit).  jsonb arguments take any JSON-able Python
value (dict, list, str, number, bool); intervals take a ``timedelta`` or
seconds as a number.  Errors are the classes of ``jobguard.errors``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import (Any, Callable, Dict, Generator, Generic, List, Literal, Optional, ParamSpec,
                    Sequence, Tuple, Type, TypedDict, TypeVar, Union)

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from .errors import BY_SQLSTATE, translate
from .ids import AttemptId, JobId

__all__ = [
    "Submitted", "Job", "Attempt", "JobState", "AttemptState", "Outcome", "Seconds",
    "Claimed", "Request", "SubmitOutcome",
    "submit", "begin_attempt", "finish", "fail", "mark_unknown", "cancel_attempt",
    "cancel_job", "job_state", "job", "attempts", "await_job",
    "claim", "heartbeat", "submit_many",
    "Unknown", "FinishOutcome", "claim_unknown", "finish_many", "provider_key",
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
    scope: str


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
    worker: Optional[str]


@dataclass(frozen=True)
class Claimed:
    """One job that ``claim`` handed out, with the attempt begun on it."""

    attempt_id: AttemptId
    job_id: JobId
    attempt_no: int
    operation: str
    provider: str
    params: Any
    deadline: datetime
    #: the attempt's provider key (1.2): send it to the provider as its own
    #: idempotency key; None on a 1.1 database
    provider_key: Optional[str] = None
    #: True when claim redrove a stalled attempt: the same request again,
    #: under the same provider key (1.2; False on a 1.1 database)
    redrive: bool = False
    #: True when the attempt runs against a fallback on the job's failover
    #: route, not the job's own provider (1.3; False before)
    failover: bool = False
    #: True when the certification runner (``jobguard.certify``) calls the
    #: handler on a replayed input: no attempt (``attempt_id`` 0), the
    #: provider is the candidate; point the handler at its test mode
    certification: bool = False


@dataclass(frozen=True)
class Unknown:
    """One unknown attempt that ``claim_unknown`` handed to a reconciler, to
    look up at the provider by its provider key (1.2)."""

    attempt_id: AttemptId
    job_id: JobId
    operation: str
    provider: str
    provider_key: str
    params: Any
    unknown_since: datetime
    redrivable: bool


@dataclass(frozen=True)
class FinishOutcome:
    """The outcome of one element of ``finish_many`` (1.2).

    Decided: ``outcome`` is what ``finish`` would have returned.  Refused:
    ``outcome`` is None, ``sqlstate`` and ``message`` say why (the error
    ``finish`` would have raised), and nothing was written for it."""

    ord: int
    attempt_id: AttemptId
    outcome: Optional[Outcome]
    sqlstate: Optional[str]
    message: Optional[str]

    @property
    def refused(self) -> bool:
        """True if the element was refused (nothing written for it)."""
        return self.outcome is None

    @property
    def error_class(self) -> Optional[Type[psycopg.DatabaseError]]:
        """The exception class ``finish`` would have raised, None if decided."""
        if self.outcome is not None:
            return None
        return BY_SQLSTATE.get(self.sqlstate or "", psycopg.DatabaseError)


@dataclass(frozen=True)
class Request:
    """One request for ``submit_many``: the arguments of ``submit``."""

    owner_id: str
    idempotency_key: str
    operation: str
    params: Any
    provider: str
    max_attempts: Optional[int] = None


@dataclass(frozen=True)
class SubmitOutcome:
    """The outcome of one request of ``submit_many``.

    Accepted: ``sqlstate`` is None, ``created`` says whether this call
    created the job.  Refused: ``sqlstate`` and ``message`` say why (the
    error ``submit`` would have raised); ``job_id`` is the existing job for
    ``JG001`` and None otherwise, and nothing was written."""

    ord: int
    job_id: Optional[JobId]
    created: bool
    sqlstate: Optional[str]
    message: Optional[str]

    @property
    def refused(self) -> bool:
        """True if the request was refused (nothing written for it)."""
        return self.sqlstate is not None

    @property
    def error_class(self) -> Optional[Type[psycopg.DatabaseError]]:
        """The exception class ``submit`` would have raised for this row
        (``IdempotencyKeyReused`` for JG001, ...), None if accepted."""
        if self.sqlstate is None:
            return None
        return BY_SQLSTATE.get(self.sqlstate, psycopg.DatabaseError)


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


#: Whether the calls may let psycopg prepare their statements on the server
#: (its ``prepare_threshold``).  Off: behind a transaction-mode pooler
#: (pgbouncer) a prepared statement's name is shared by every client of a
#: server connection, and a call can run another client's statement.  Set
#: it to True only where every connection is a session of its own (direct,
#: or a session-mode pooler).
prepare_statements = False


def prepare_flag() -> Optional[bool]:
    """The ``prepare`` argument for ``execute``: False (never prepare) unless
    ``prepare_statements`` is set, then None (psycopg's own threshold)."""
    return None if prepare_statements else False


def stale_statement(err: BaseException) -> bool:
    """Whether ``err`` refuses a statement psycopg prepared on its
    connection before ``ALTER EXTENSION jobguard UPDATE`` changed the
    columns of its result (0A000, "cached plan must not change result
    type"; only with ``prepare_statements``).  The refusal comes at the
    statement's bind, before anything ran, and lasts as long as the
    connection: a Worker or Reconciler opens a new one (as after a lost
    connection); a caller of these functions should too."""
    if not isinstance(err, psycopg.errors.FeatureNotSupported):
        return False
    return (err.diag.source_function == "RevalidateCachedQuery"
            or "cached plan must not change result type" in str(err))


def connect_options(connect_kwargs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The keyword arguments for a connection the client opens itself: no
    server-side prepared statements (``prepare_threshold=None``) unless
    ``prepare_statements`` is set or the caller names a threshold."""
    options: Dict[str, Any] = {} if prepare_statements else {"prepare_threshold": None}
    options.update(connect_kwargs or {})
    return options


def _rows(conn: Conn, sql: str, args: Sequence[Any]) -> List[Dict[str, Any]]:
    """Run one statement and return its rows as dicts; a jobguard SQLSTATE
    always comes out as its own class (see ``errors.translate``).  Never a
    prepared statement unless ``prepare_statements`` is set."""
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, args, prepare=prepare_flag())
            return cur.fetchall()
    except psycopg.Error as err:
        new = translate(err)
        if new is err:
            raise
        raise new from err


P = ParamSpec("P")
R = TypeVar("R")
#: a call's steps: yields its one statement (SQL, arguments), is sent the
#: rows, returns the call's value.  The same steps run on a psycopg
#: Connection (the functions of this module) and on an AsyncConnection
#: (jobguard.aio), so each statement is written once.
Steps = Generator[Tuple[str, Sequence[Any]], List[Dict[str, Any]], R]


class Statement(Generic[P, R]):
    """A call of the API: its steps, run on a connection when called."""

    def __init__(self, steps: Callable[P, Steps[R]]) -> None:
        """Wrap the steps (a generator function taking the connection first)."""
        self.steps = steps
        functools.update_wrapper(self, steps)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the call on its connection (the first argument)."""
        conn: Conn = args[0]  # type: ignore[assignment]
        gen = self.steps(*args, **kwargs)
        sql, params = next(gen)
        try:
            gen.send(_rows(conn, sql, params))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        raise RuntimeError(f"{self.steps.__name__} runs one statement")


def _first(rows: List[Dict[str, Any]]) -> Any:
    """The one value of a statement's one row."""
    return next(iter(rows[0].values()))


@Statement
def submit(conn: Conn, owner_id: str, idempotency_key: str, operation: str, params: Any,
           provider: str, max_attempts: Optional[int] = None) -> Steps[Submitted]:
    """Create the job for (owner_id, idempotency_key), or return the existing
    one for the same request (``created`` False).  Raises
    ``IdempotencyKeyReused`` (its ``job_id`` is the existing job) for a
    different request under the same key."""
    row = (yield "SELECT job_id, created FROM jobguard.submit(%s, %s, %s, %s, %s, %s)",
                (owner_id, idempotency_key, operation, _json(params), provider, max_attempts))[0]
    return Submitted(JobId(row["job_id"]), row["created"])


@Statement
def begin_attempt(conn: Conn, job_id: JobId, provider: Optional[str] = None,
                  timeout: Seconds = 30, attempt_key: Optional[str] = None) -> Steps[AttemptId]:
    """Start the job's next attempt (``provider`` None: the job's own) with a
    deadline ``timeout`` from now, and return its id.  Raises
    ``AttemptInFlight``, ``JobClosed``, ``AttemptsExhausted`` or
    ``ProviderNotCertified`` when the gate says no."""
    return AttemptId(_first((yield "SELECT jobguard.begin_attempt(%s, %s, %s, %s)",
                            (job_id, provider, _interval(timeout), attempt_key))))


@Statement
def finish(conn: Conn, attempt_id: AttemptId, result: Any) -> Steps[Outcome]:
    """Report the attempt's result: ``'won'`` (it is the job's result),
    ``'lost'`` (another attempt won, or the job was cancelled: the result is
    kept on the attempt) or ``'rejected'`` (it broke the output contract)."""
    outcome: Outcome = _first((yield "SELECT jobguard.finish_attempt(%s, %s)",
                              (attempt_id, _json(result))))
    return outcome


@Statement
def fail(conn: Conn, attempt_id: AttemptId, error: str,
         retry_in: Optional[Seconds] = None) -> Steps[Literal["failed"]]:
    """Report that the attempt failed; the gate opens for the next one.
    ``claim`` hands the job out again no sooner than ``retry_in`` from now
    (None: the operation's retry backoff; no backoff: at once).  An explicit
    ``begin_attempt`` is not held back."""
    if retry_in is None:  # the two-argument form: the operation's policy applies
        state: Literal["failed"] = _first((yield "SELECT jobguard.fail_attempt(%s, %s)",
                                          (attempt_id, error)))
    else:
        state = _first((yield "SELECT jobguard.fail_attempt(%s, %s, %s)",
                       (attempt_id, error, _interval(retry_in))))
    return state


@Statement
def mark_unknown(conn: Conn, attempt_id: AttemptId) -> Steps[Literal["unknown"]]:
    """Record that the caller saw a timeout: the attempt is unknown, not failed."""
    state: Literal["unknown"] = _first((yield "SELECT jobguard.mark_unknown(%s)", (attempt_id,)))
    return state


@Statement
def cancel_attempt(conn: Conn, attempt_id: AttemptId, reason: str) -> Steps[Literal["cancelled"]]:
    """Stop waiting for an open attempt; its late result still goes through
    the compare-and-swap."""
    state: Literal["cancelled"] = _first((yield "SELECT jobguard.cancel_attempt(%s, %s)",
                                         (attempt_id, reason)))
    return state


@Statement
def cancel_job(conn: Conn, job_id: JobId, reason: str) -> Steps[Literal["cancelled"]]:
    """Cancel the job: no new attempts, later results lose."""
    state: Literal["cancelled"] = _first((yield "SELECT jobguard.cancel_job(%s, %s)",
                                         (job_id, reason)))
    return state


@Statement
def job_state(conn: Conn, job_id: JobId) -> Steps[JobState]:
    """The job's derived state."""
    state: JobState = _first((yield "SELECT jobguard.job_state(%s)", (job_id,)))
    return state


@Statement
def job(conn: Conn, job_id: JobId) -> Steps[Job]:
    """The job, with its derived state, its result and its attempt count."""
    return (yield "SELECT * FROM jobguard.job(%s)", (job_id,))[0]  # type: ignore[return-value]


@Statement
def attempts(conn: Conn, job_id: JobId) -> Steps[List[Attempt]]:
    """The job's attempts, in order."""
    return (yield "SELECT * FROM jobguard.attempts_of(%s)", (job_id,))  # type: ignore[return-value]


@Statement
def await_job(conn: Conn, job_id: JobId, timeout: Seconds) -> Steps[JobState]:
    """Wait until the job succeeds, fails or is cancelled, or ``timeout``
    passes; return its state then.  Needs READ COMMITTED (or autocommit):
    under REPEATABLE READ the server refuses it."""
    state: JobState = _first((yield "SELECT jobguard.await(%s, %s)",
                             (job_id, _interval(timeout))))
    return state


@Statement
def claim(conn: Conn, worker: str, operations: Optional[Sequence[str]] = None,
          timeout: Seconds = 30, max_jobs: int = 1, provider: Optional[str] = None,
          wait: Seconds = 0, providers: Optional[Sequence[str]] = None) -> Steps[List[Claimed]]:
    """Begin an attempt on each of up to ``max_jobs`` runnable jobs (oldest
    first; ``operations`` None: any) for ``worker``, each with a deadline
    ``timeout`` from now, and return them; an empty list when nothing is
    runnable.  ``provider`` None runs each against the provider its job's
    route chooses (its own, or a certified fallback: ``failover``); a
    provider given serves only attempts against it.  ``providers`` (1.3)
    serves only attempts whose chosen provider is in the list (None: any).
    ``wait`` > 0: wait up to that long for work (READ COMMITTED or
    autocommit only).  Commit promptly: the attempts' deadlines run from
    the claim."""
    # every column: 1.3 adds failover, 1.2 provider_key and redrive, a 1.1
    # database (served by a later library) has the first seven only
    args = [worker, None if operations is None else list(operations), _interval(timeout),
            max_jobs, provider, _interval(wait)]
    if providers is None:   # the form every version has
        sql = "SELECT * FROM jobguard.claim(%s, %s::text[], %s, %s, %s, %s)"
    else:
        sql = "SELECT * FROM jobguard.claim(%s, %s::text[], %s, %s, %s, %s, %s::text[])"
        args.append(list(providers))
    rows = yield sql, args
    return [claimed(r) for r in rows]


def claimed(r: Dict[str, Any]) -> Claimed:
    """A Claimed from a row of claim (or of the same columns); failover is
    absent before 1.3, provider_key and redrive on a 1.1 database."""
    return Claimed(AttemptId(r["attempt_id"]), JobId(r["job_id"]), r["attempt_no"],
                   r["operation"], r["provider"], r["params"], r["deadline"],
                   r.get("provider_key"), bool(r.get("redrive") or False),
                   bool(r.get("failover") or False))


@Statement
def heartbeat(conn: Conn, attempt_id: AttemptId,
              extend_by: Optional[Seconds] = None) -> Steps[datetime]:
    """Push back the deadline of a started attempt that has not timed out to
    ``extend_by`` from now (None: the timeout it began with); return the new
    deadline.  Raises ``InvalidTransition`` (JG006) once the attempt is past
    its deadline (unknown) or no longer started."""
    deadline: datetime = _first((yield "SELECT jobguard.heartbeat(%s, %s)",
                                (attempt_id, _interval(extend_by))))
    return deadline


@Statement
def submit_many(conn: Conn, requests: Sequence[Request]) -> Steps[List[SubmitOutcome]]:
    """Submit many requests in one statement; one outcome per request, in
    order.  A refused request (JG001, 22004, 22023) is an outcome carrying
    its SQLSTATE and message, not an exception, and does not stop the
    others; only a call that is wrong as a whole raises."""
    limits = [r.max_attempts for r in requests]
    rows = (yield """SELECT ord, job_id, created, sqlstate, message
                            FROM jobguard.submit_many(%s::text[], %s::text[], %s::text[],
                                                      %s::jsonb[], %s::text[], %s::integer[])
                           ORDER BY ord""",
                 ([r.owner_id for r in requests], [r.idempotency_key for r in requests],
                  [r.operation for r in requests], [_json(r.params) for r in requests],
                  [r.provider for r in requests],
                  None if all(m is None for m in limits) else limits))
    return [SubmitOutcome(r["ord"], None if r["job_id"] is None else JobId(r["job_id"]),
                          bool(r["created"]), r["sqlstate"], r["message"]) for r in rows]


@Statement
def claim_unknown(conn: Conn, worker: str, operations: Optional[Sequence[str]] = None,
                  max_rows: int = 1, older_than: Seconds = 0,
                  lease: Seconds = 30) -> Steps[List[Unknown]]:
    """Lease up to ``max_rows`` unknown attempts (unknown for at least
    ``older_than``; ``operations`` None: any) to ``worker`` for ``lease``, to
    look up at the provider by provider key; no other reconciler gets them
    while the lease lasts.  Report what the provider says with ``finish``
    (or ``finish_many``), ``fail``, or nothing (still unknown).  1.2."""
    rows = (yield """SELECT attempt_id, job_id, operation, provider, provider_key, params,
                                 unknown_since, redrivable
                            FROM jobguard.claim_unknown(%s, %s::text[], %s, %s, %s)""",
                 (worker, None if operations is None else list(operations), max_rows,
                  _interval(older_than), _interval(lease)))
    return [Unknown(AttemptId(r["attempt_id"]), JobId(r["job_id"]), r["operation"],
                    r["provider"], r["provider_key"], r["params"], r["unknown_since"],
                    bool(r["redrivable"])) for r in rows]


@Statement
def finish_many(conn: Conn, attempt_ids: Sequence[AttemptId],
                results: Sequence[Any]) -> Steps[List[FinishOutcome]]:
    """Report many results in one statement; one outcome per element, in
    order, each what ``finish`` would have answered for it alone.  A refused
    element (JG006, JG007, JG009, 22004, 54000) is an outcome carrying its
    SQLSTATE and message, not an exception, and does not stop the others.
    1.2."""
    rows = (yield """SELECT ord, attempt_id, outcome, sqlstate, message
                            FROM jobguard.finish_many(%s::bigint[], %s::jsonb[])
                           ORDER BY ord""",
                 (list(attempt_ids), [_json(r) for r in results]))
    return [FinishOutcome(r["ord"], None if r["attempt_id"] is None  # type: ignore[arg-type]
                          else AttemptId(r["attempt_id"]), r["outcome"], r["sqlstate"],
                          r["message"]) for r in rows]


@Statement
def provider_key(conn: Conn, attempt_id: AttemptId) -> Steps[Optional[str]]:
    """The attempt's provider key (1.2)."""
    key: Optional[str] = _first((yield "SELECT jobguard.provider_key(%s)", (attempt_id,)))
    return key
