"""The decisions of jobguard's worker loops, written once, without I/O.

``Worker`` and ``AsyncWorker`` (on ``claim``), ``Reconciler`` and
``AsyncReconciler`` (on ``claim_unknown``) are each a thin driver around
the generators of this module, as psycopg's own connections drive its
protocol generators.  A generator here never touches a connection, a clock
that waits, or the user's code: it *yields an effect* and is sent what it
came to (or has the exception thrown in):

- ``Connect(appname)``: have a connection open (sent True when one was
  opened now, False when it was open already; a failure raises
  ``psycopg.OperationalError``);
- ``Call(name, args)``: run ``jobguard.api.<name>`` on the connection, sent
  its value; ``Execute(sql, params)``: run one statement of the loops' own,
  sent its rows as dicts.  A server error comes in as its jobguard class
  (``errors.translate``), a lost connection as ``Disconnected`` (the
  driver has closed it);
- ``Pause(seconds, until)``: wait that long, or less once the event named
  ``until`` is set (None: the whole time); sent whether it was set;
- ``Invoke(fn, arg)``: call the user's handler or reconcile function (the
  async driver awaits what it returns); sent its value, its exception
  thrown in.

The rules they decide (SPEC 1.3, "an unrecorded report is unknown, never
failed"): a report that meets a lost connection or a server error that is
no refusal of it is tried again, the same report, and one that still
cannot be recorded leaves the attempt open; only the provider's refusal
fails an attempt; a result that cannot be sent marks it unknown; a server
error in a claim is logged and the claim tried again with backoff; an
attempt whose handler was called is never run again by this worker.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import (Any, Callable, Dict, Generator, List, Mapping, Optional, Sequence, Set,
                    Tuple, TypeVar)

import psycopg

from . import api
from .api import Claimed, Seconds, Unknown
from .errors import AttemptNotFound, InvalidTransition, ResultMismatch
from .ids import AttemptId

__all__ = ["ProviderRefused", "RetryLater", "InProgress", "WorkerStats", "ReconcilerStats",
           "Connect", "Call", "Execute", "Pause", "Invoke", "Driving", "Disconnected", "WorkerCore",
           "ReconcilerCore"]

log = logging.getLogger("jobguard.worker")
rlog = logging.getLogger("jobguard.reconciler")
T = TypeVar("T")

#: the longest error text a failed attempt records
MAX_ERROR = 4000

#: a worker's started or unknown attempts but those given, as claim rows;
#: provider_key is read through to_jsonb so that a 1.1 database (without
#: the column) gives NULL, and redrive says whether a predecessor was
#: redriven as this attempt
OWN_OPEN_ATTEMPTS = """
    SELECT a.attempt_id, a.job_id, a.attempt_no, j.operation, a.provider, j.params, a.deadline,
           to_jsonb(a) ->> 'provider_key' AS provider_key,
           EXISTS (SELECT 1 FROM jobguard.attempt_overview p
                    WHERE p.job_id = a.job_id AND p.state = 'cancelled'
                      AND p.cancel_reason = 'redriven as attempt ' || a.attempt_id) AS redrive,
           a.provider IS DISTINCT FROM j.provider AS failover
      FROM jobguard.attempt_overview a
      JOIN jobguard.job_overview j ON j.job_id = a.job_id
     WHERE a.worker = %s AND a.state IN ('started', 'unknown')
       AND a.attempt_id <> ALL (%s::bigint[])
     ORDER BY a.attempt_id"""

#: whether a function of the database exists (its regprocedure text given)
HAS_FUNCTION = "SELECT to_regprocedure(%s) IS NOT NULL AS present"

#: the SQLSTATEs of a finish that can never be recorded by this attempt
#: (not open, a different result, no such attempt): a report error, as the
#: exceptions InvalidTransition, ResultMismatch, AttemptNotFound of finish
NOT_REPORTABLE = ("JG006", "JG007", "JG009")

#: how many times in all a report is tried that meets a server error on an
#: intact connection that is not a refusal of it (lost connections are
#: tried again until the worker gives up)
REPORT_TRIES = 6


# -- what a handler may raise ------------------------------------------------

class ProviderRefused(Exception):
    """Raised by a handler or a reconcile callable: the provider said no (it
    did not do the work, and will not).  The attempt fails (``fail``, its
    error this exception's text), the gate opens, and the next attempt gets
    a new provider key; ``retry_in`` (a timedelta or seconds, None: the
    operation's backoff) holds that attempt back."""

    def __init__(self, message: str, retry_in: Optional[Seconds] = None) -> None:
        """Keep the message (the attempt's error) and the delay."""
        super().__init__(message)
        self.retry_in = retry_in


class RetryLater(ProviderRefused):
    """Raised by a handler: fail this attempt, and let ``claim`` hand the job
    out again no sooner than ``retry_in`` (a timedelta or seconds)."""

    def __init__(self, message: str, retry_in: Seconds) -> None:
        """Keep the message (the attempt's error) and the delay."""
        super().__init__(message, retry_in)


class InProgress(Exception):
    """Raised by a handler: the provider says this provider key is still
    being processed (Stripe: 409 ``idempotency_key_in_use``).  Not a
    failure: the attempt is marked unknown (``mark_unknown``), so that a
    redrive or a reconciler asks again under the same key later."""


# -- what the loops count ----------------------------------------------------

@dataclass
class WorkerStats:
    """What a worker did, counted as it went."""

    claimed: int = 0          #: attempts handed out by claim
    adopted: int = 0          #: attempts a lost claim of this worker began, found and run
    marked_unknown: int = 0   #: open attempts of its name from before it started, not run
    won: int = 0              #: results that became the job's result
    lost: int = 0             #: results that lost to another attempt or a cancel
    rejected: int = 0         #: results that broke the output contract
    failed: int = 0           #: attempts failed because the provider refused (ProviderRefused)
    in_progress: int = 0      #: attempts marked unknown because the handler raised InProgress
    handler_errors: int = 0   #: attempts marked unknown because the handler raised another error
    unrecorded: int = 0       #: attempts marked unknown because their result cannot be sent
    report_retries: int = 0   #: reports tried again after a server error that was no refusal
    claim_errors: int = 0     #: claims that met a server error (logged, tried again)
    released: int = 0         #: claimed attempts handed back unrun at shutdown
    report_errors: int = 0    #: reports the server refused or that could not be delivered
    heartbeats: int = 0       #: deadlines pushed back
    heartbeats_refused: int = 0  #: heartbeats refused (the attempt was past its deadline)
    reconnects: int = 0       #: connections opened again after one was lost


@dataclass
class ReconcilerStats:
    """What a reconciler did, counted as it went."""

    claimed: int = 0        #: unknown attempts leased by claim_unknown
    won: int = 0            #: results that became the job's result
    lost: int = 0           #: results that lost to another attempt or a cancel
    rejected: int = 0       #: results that broke the output contract
    failed: int = 0         #: attempts failed: the provider said no (ProviderRefused)
    left: int = 0           #: left unknown: None returned, or InProgress
    errors: int = 0         #: left unknown: reconcile raised, or its result cannot be recorded
    report_errors: int = 0  #: reports the server refused or that could not be delivered
    report_retries: int = 0  #: reports tried again after a server error that was no refusal
    claim_errors: int = 0   #: claim_unknown calls that met a server error (logged, tried again)
    reconnects: int = 0     #: connections opened again after one was lost


# -- the rules, as functions -------------------------------------------------

def retryable(err: BaseException) -> bool:
    """Whether a statement that raised ``err`` on an intact connection may
    be tried again as it was: anything but jobguard's own refusals (JG...)
    and the errors of a value the server cannot take (classes 22 and 54: a
    result that cannot be sent).  A statement timeout, a serialization
    failure, a lock timeout or an unexpected error are tried again."""
    state = getattr(err, "sqlstate", None) or ""
    return not (state.startswith("JG") or state[:2] in ("22", "54"))


def retry_in_of(err: BaseException) -> Optional[Seconds]:
    """The delay an exception asks for its retry (its ``retry_in``), or None."""
    retry_in = getattr(err, "retry_in", None)
    return retry_in if isinstance(retry_in, (timedelta, int, float)) else None


def is_refusal(err: BaseException) -> bool:
    """Whether a handler's exception says the provider refused (it did not
    do the work): ``ProviderRefused`` and its subclasses, or any exception
    with a ``retry_in`` attribute.  Only these fail an attempt."""
    return isinstance(err, ProviderRefused) or retry_in_of(err) is not None


def error_text(err: BaseException) -> str:
    """The error an attempt records for a handler's exception."""
    return f"{type(err).__name__}: {err}"[:MAX_ERROR]


def unrecordable(result: Any) -> Optional[str]:
    """Why a handler's result cannot be a job's result (jobguard records a
    JSON value; SQL NULL is refused), or None when it can be."""
    if result is None:
        return "the handler returned None; a result must be a JSON value other than null"
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as err:
        return f"it is not JSON ({err})"
    return None


def secs(value: Seconds) -> float:
    """Seconds as a float, from a timedelta or a number."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def default_name() -> str:
    """A loop's name when none is given: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# -- effects -----------------------------------------------------------------

@dataclass(frozen=True)
class Connect:
    """Have the driver's connection open (application_name ``appname``)."""

    appname: str


@dataclass(frozen=True)
class Execute:
    """Run one statement on the driver's connection; its rows as dicts."""

    sql: str
    params: Sequence[Any]


@dataclass(frozen=True)
class Call:
    """Run ``jobguard.api.<name>(conn, *args)`` on the driver's connection;
    its value (the function is looked up when it runs)."""

    name: str
    args: Tuple[Any, ...]


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds``, or less once the loop's event ``until`` is set."""

    seconds: float
    until: Optional[str] = None


@dataclass(frozen=True)
class Invoke:
    """Call the user's code: ``fn(arg)``."""

    fn: Callable[[Any], Any]
    arg: Any


Effect = Any
#: a generator of this module: yields effects, is sent what they came to
Steps = Generator[Effect, Any, T]


class Driving:
    """A generator of this module being driven: iterating gives its
    effects; ``send`` or ``throw`` what each came to; ``value`` is what it
    returned once it ends.  A driver is the loop ``for effect in driving:``
    doing each effect its own way (sync, async)."""

    def __init__(self, steps: Steps[Any]) -> None:
        """Drive ``steps`` from its start."""
        self.steps = steps
        self.value: Any = None
        self._raised: Optional[BaseException] = None

    def __iter__(self) -> "Driving":
        """The effects, one at a time."""
        return self

    def __next__(self) -> Effect:
        """The next effect, after sending (or throwing in) what the last
        one came to; StopIteration once the generator returned."""
        sent, raised, self.value, self._raised = self.value, self._raised, None, None
        try:
            return self.steps.send(sent) if raised is None else self.steps.throw(raised)
        except StopIteration as done:
            self.value = done.value
            raise StopIteration from None

    def send(self, value: Any) -> None:
        """What the effect came to."""
        self.value = value

    def throw(self, err: BaseException) -> None:
        """What the effect raised (the generator decides what it means)."""
        self._raised = err


class Disconnected(Exception):
    """What the driver throws in when a statement lost its connection (it
    has closed it); ``error`` is psycopg's exception."""

    def __init__(self, error: BaseException) -> None:
        """Keep the error."""
        super().__init__(str(error))
        self.error = error


class GaveUp(Exception):
    """The server could not be reached and the loop is no longer waiting for it."""


class Lost(Exception):
    """The connection was lost during a statement that is not repeated blindly."""


def statement(name: str, *args: Any) -> Steps[Any]:
    """One call of ``jobguard.api`` (the function named, its arguments
    after the connection) as an effect; its value."""
    return (yield Call(name, args))


def rows_of(sql: str, params: Sequence[Any]) -> Steps[List[Dict[str, Any]]]:
    """One statement of the loops' own, its rows."""
    rows: List[Dict[str, Any]] = yield Execute(sql, params)
    return rows


def has_function(signature: str) -> Steps[bool]:
    """Whether the database has the function (its regprocedure text)."""
    return bool((yield from rows_of(HAS_FUNCTION, (signature,)))[0]["present"])


def once(name: str, *args: Any, done: str) -> Callable[[int], Steps[Any]]:
    """A report to try (and try again): ``jobguard.api.<name>(*args)``; a repeat that
    finds the attempt in state ``done`` already counts as done."""
    def attempt(tries: int) -> Steps[Any]:
        """One try."""
        try:
            return (yield from statement(name, *args))
        except InvalidTransition as err:
            if tries > 0 and err.state == done:
                return done
            raise
    return attempt


class Line:
    """One connection's rules: opened again with backoff when lost, a
    statement tried again after a retryable server error."""

    def __init__(self, loop: Any, role: str, give_up: Callable[[], bool]) -> None:
        """A line of ``loop`` (a worker or reconciler: its name, reconnect
        bounds and ``_count``); ``role`` names it in application_name;
        ``give_up()`` true makes reconnecting stop (``GaveUp``)."""
        self.loop = loop
        self.appname = f"{loop.name} ({role})"[:63]
        self.give_up = give_up
        self.ever = False

    def connect(self) -> Steps[None]:
        """Have the connection open, opening one (with backoff) if there is none."""
        delay = self.loop.reconnect_min
        while True:
            try:
                fresh = yield Connect(self.appname)
            except psycopg.OperationalError as err:
                if self.give_up():
                    raise GaveUp(str(err)) from err
                log.warning("%s: cannot connect (%s); again in %.1fs", self.appname,
                            str(err).strip(), delay)
                yield Pause(delay)
                delay = min(delay * 2, self.loop.reconnect_max)
                continue
            if fresh:
                if self.ever:
                    self.loop._count("reconnects")
                self.ever = True
            return

    def call(self, fn: Callable[[int], Steps[T]], retry: bool, transient: int = 0) -> Steps[T]:
        """``fn(tries)`` on the connection.  When the connection is lost:
        with ``retry``, reconnect and call again (``tries`` counts the
        earlier calls), else raise ``Lost``.  A server error on an intact
        connection that is ``retryable`` is tried again, with backoff, up
        to ``transient`` more times; other errors propagate."""
        tries = 0
        delay = self.loop.reconnect_min
        while True:
            yield from self.connect()
            try:
                return (yield from fn(tries))
            except Disconnected as lost:
                err = lost.error
                log.warning("%s: connection lost (%s)", self.appname, str(err).strip())
                if not retry:
                    raise Lost(str(err)) from err
                if self.give_up():
                    raise GaveUp(str(err)) from err
            except psycopg.Error as err:
                if transient <= 0 or not retryable(err) or self.give_up():
                    raise
                transient -= 1
                self.loop._count("report_retries")
                log.warning("%s: %s; trying the same statement again in %.1fs",
                            self.appname, str(err).strip(), delay)
            tries += 1
            yield Pause(delay)
            delay = min(delay * 2, self.loop.reconnect_max)


# -- what every loop shares --------------------------------------------------

class LoopCore:
    """The state and control every loop has: its name, reconnect bounds,
    stats, and ``stop()``.  The driver sets ``_stopping`` (an event of its
    kind: threading or asyncio) before using it."""

    name: str
    reconnect_min: float
    reconnect_max: float
    shutdown_grace: float
    stats: Any
    _stopping: Any
    _log = log

    def _set_common(self, conninfo: str, name: Optional[str], operations: Optional[Sequence[str]],
                    reconnect_min: Seconds, reconnect_max: Seconds, shutdown_grace: Seconds,
                    connect_kwargs: Optional[Dict[str, Any]]) -> None:
        """The options of every loop."""
        self.conninfo = conninfo
        self.connect_kwargs = dict(connect_kwargs or {})
        self.name = name or default_name()
        self.operations = list(operations) if operations is not None else None
        self.reconnect_min = secs(reconnect_min)
        self.reconnect_max = secs(reconnect_max)
        self.shutdown_grace = secs(shutdown_grace)
        self._stats_lock = threading.Lock()
        self._stopped_at = 0.0

    def stop(self) -> None:
        """Ask the loop to stop: the current call finishes and reports, no
        more are claimed.  Safe from another thread or a signal handler."""
        if not self._stopping.is_set():
            self._stopped_at = time.monotonic()
            self._stopping.set()

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` was called."""
        return bool(self._stopping.is_set())

    def _count(self, name: str, n: int = 1) -> None:
        """Add n to one of the stats."""
        with self._stats_lock:
            setattr(self.stats, name, getattr(self.stats, name) + n)

    def _report(self, line: Line, item: Any, what: str, fn: Callable[[int], Steps[Any]],
                transient: int = REPORT_TRIES - 1) -> Steps[bool]:
        """One report on ``line`` about ``item`` (an attempt: its
        attempt_id and job_id), tried again as every report is; True once
        it got through, False (counted, logged: could not ``what``) when it
        did not."""
        try:
            yield from line.call(fn, retry=True, transient=transient)
        except (GaveUp, psycopg.Error) as err:
            self._count("report_errors")
            self._log.error("%s: could not %s attempt %d of job %d: %s", self.name, what,
                            item.attempt_id, item.job_id, err)
            return False
        return True

    def _backoff(self, delay: float) -> float:
        """The wait after another failed claim round: doubling from
        reconnect_min up to reconnect_max."""
        return min(max(delay * 2, self.reconnect_min), self.reconnect_max)


#: what _run_one returns when nothing is left to record
_REPORTED = object()


class WorkerCore(LoopCore):
    """The worker loop on ``claim`` (``Worker``, ``AsyncWorker``): see the
    docstring of ``jobguard.worker``.  The driver runs ``_loop`` on the main
    connection and ``_beat_loop`` beside it on a connection of its own,
    and sets ``_stopping`` and ``_beat_stop`` (events of its kind)."""

    _beat_stop: Any

    def __init__(self, handler: Optional[Callable[[Claimed], Any]] = None, *,
                 handlers: Optional[Mapping[str, Callable[[Claimed], Any]]] = None,
                 conninfo: str = "", name: Optional[str] = None,
                 operations: Optional[Sequence[str]] = None, provider: Optional[str] = None,
                 batch: int = 1, timeout: Seconds = 30, wait: Seconds = 2,
                 heartbeat_every: Optional[Seconds] = None, reconnect_min: Seconds = 0.1,
                 reconnect_max: Seconds = 5, shutdown_grace: Seconds = 30,
                 connect_kwargs: Optional[Dict[str, Any]] = None) -> None:
        """``handler``, or ``handlers`` (a handler per provider: a row for a
        provider without one is never claimed); ``conninfo`` and
        ``connect_kwargs`` go to ``psycopg.connect`` (the PG* environment
        fills in the rest); ``name`` is recorded on each attempt (default:
        host, pid and a random part — give a stable one to have a restarted
        worker pick up its own open attempts); ``operations``, ``provider``,
        ``batch`` (max_jobs), ``timeout`` and ``wait`` go to ``claim``;
        heartbeats every ``heartbeat_every`` (default a third of
        ``timeout``); reconnects wait ``reconnect_min`` doubling up to
        ``reconnect_max``; once stopped, a report is tried for at most
        ``shutdown_grace``.  The options are checked here, for every
        driver; then the driver's ``_setup()`` makes its events and links."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        if (handler is None) == (handlers is None):
            raise TypeError("give one handler, or handlers (a handler per provider), not both")
        if handlers is not None:
            handlers = dict(handlers)
            if not handlers or not all(isinstance(p, str) and callable(h)
                                       for p, h in handlers.items()):
                raise TypeError("handlers maps provider names to callables, at least one")
            if provider is not None and provider not in handlers:
                raise ValueError(f"provider {provider!r} has no handler in handlers")
        elif not callable(handler):
            raise TypeError("handler must be callable")
        self.handler = handler
        self.handlers = handlers
        self._set_common(conninfo, name, operations, reconnect_min, reconnect_max,
                         shutdown_grace, connect_kwargs)
        self.provider = provider
        self.batch = batch
        self.timeout = secs(timeout)
        self.wait = secs(wait)
        self.heartbeat_every = (secs(heartbeat_every) if heartbeat_every is not None
                                else self.timeout / 3)
        if self.timeout <= 0 or self.wait < 0 or self.heartbeat_every <= 0:
            raise ValueError("timeout and heartbeat_every must be positive, wait not negative")
        self.stats = WorkerStats()
        self._held: Dict[AttemptId, Claimed] = {}   # claimed, not yet reported
        self._held_lock = threading.Lock()
        self._ran: Set[AttemptId] = set()           # handler called, report not done
        self._unreported: Set[AttemptId] = set()    # of those, reports that never got through
        self._untouchable: Set[AttemptId] = set()   # open attempts never to run
        self._started_up = False      # the open attempts found at start were dealt with
        self._claim_lost = False      # a claim's answer was lost: look for what it began
        self._claim_delay = 0.0       # the wait after the last failed claim
        self._finish_many: Optional[bool] = None      # the database has finish_many
        self._claim_providers: Optional[bool] = None  # claim takes providers (1.3)
        self._turn = 0                # whose turn it is, claiming one provider at a time
        self._main_line = Line(self, "jobguard worker", self._main_gives_up)
        self._beat_line = Line(self, "jobguard heartbeat", lambda: self._beat_stop.is_set())
        self._setup()

    def _setup(self) -> None:
        """The driver's: set ``_stopping`` and ``_beat_stop`` (events of its
        kind) and its links."""
        raise NotImplementedError

    def _main_gives_up(self) -> bool:
        """Whether the main connection stops reconnecting: once stopped, at
        once if nothing is held, else after shutdown_grace."""
        if not self._stopping.is_set():
            return False
        with self._held_lock:
            holding = bool(self._held)
        return not holding or time.monotonic() - self._stopped_at > self.shutdown_grace

    def _handler_of(self, job: Claimed) -> Optional[Any]:
        """The handler for the job's attempt: the one of its row's provider
        (``handlers``), or the one handler."""
        if self.handlers is None:
            return self.handler
        return self.handlers.get(job.provider)

    # -- the loop --------------------------------------------------------

    def _loop(self, until_idle: bool) -> Steps[WorkerStats]:
        """Claim and handle jobs until stopped (or, with until_idle, until
        claims found nothing for wait)."""
        idle_since = time.monotonic()
        while not self._stopping.is_set():
            try:
                jobs = yield from self._next_jobs()
            except GaveUp:
                break
            if jobs:
                yield from self._run_batch(jobs)
                idle_since = time.monotonic()
            elif (until_idle and not self._claim_lost
                  and time.monotonic() - idle_since >= self.wait):
                break
        return self.stats

    # -- claiming --------------------------------------------------------

    def _next_jobs(self) -> Steps[List[Claimed]]:
        """The next batch: at start, the open attempts of the worker's name
        from before (marked unknown, never run); after a claim whose answer
        was lost, the attempts it began (adopted: their handler never ran);
        otherwise what claim hands out."""
        yield from self._main_line.connect()
        try:
            if not self._started_up:
                for job in (yield from self._main_line.call(self._own_open_attempts,
                                                            retry=True)):
                    yield from self._mark_earlier(job)
                self._started_up = True
            if self._claim_lost:
                adopted = yield from self._main_line.call(self._own_open_attempts, retry=True)
                self._claim_lost = False
                if adopted:
                    self._count("adopted", len(adopted))
                    log.info("%s: picked up %d open attempts of its own", self.name,
                             len(adopted))
                    return adopted
        except Lost:
            return []
        except psycopg.Error as err:
            yield from self._claim_failed(err)
            return []
        try:
            claim = yield from self._claim_call()
            jobs = yield from self._main_line.call(claim, retry=False)
        except Lost:
            self._claim_lost = True   # the next round finds whatever that claim began
            return []
        except psycopg.Error as err:
            yield from self._claim_failed(err)
            return []
        self._claim_delay = 0.0
        self._count("claimed", len(jobs))
        return jobs

    def _claim_call(self) -> Steps[Callable[[int], Steps[List[Claimed]]]]:
        """The claim of this round.  A claim that waited begins its attempts
        when the work came (their whole timeout ahead); waiting at most a
        third of the timeout per claim keeps the loop responsive to
        shutdown and to its own lease.  With ``handlers`` (and no
        ``provider``, which has one), only rows whose provider has a
        handler: claim's ``providers`` (1.3), or on a 1.2 database
        ``provider`` naming each of them in turn."""
        wait = min(self.wait, self.timeout / 3)
        provider, providers = self.provider, None
        if self.handlers is not None and provider is None:
            names = sorted(self.handlers)
            if self._claim_providers is None:
                self._claim_providers = yield from self._main_line.call(
                    lambda tries: has_function("jobguard.claim(text, text[], interval, integer,"
                                               " text, interval, text[])"), retry=True)
            if self._claim_providers:
                providers = names
            else:
                provider = names[self._turn % len(names)]
                self._turn += 1
                wait = wait / len(names)
        return lambda tries: statement("claim", self.name, self.operations, self.timeout,
                                       self.batch, provider, wait, providers)

    def _claim_failed(self, err: psycopg.Error) -> Steps[None]:
        """A claim (or the look-up of its own open attempts) met a server
        error: log it, wait (doubling from reconnect_min up to
        reconnect_max, or until stopped) and let the loop try again.  Its
        transaction was rolled back, but the next round looks for open
        attempts of this worker all the same."""
        self._count("claim_errors")
        self._claim_lost = True
        self._claim_delay = self._backoff(self._claim_delay)
        log.error("%s: claim failed (%s); again in %.1fs", self.name,
                  str(err).strip(), self._claim_delay)
        yield Pause(self._claim_delay, "_stopping")

    def _mark_earlier(self, job: Claimed) -> Steps[None]:
        """An open attempt of this worker's name from before it started:
        whether its handler ran is unknown, so it is not run again.
        ``mark_unknown`` says so (a late report still goes through the
        compare-and-swap), and this worker never touches it again."""
        self._untouchable.add(job.attempt_id)

        def mark(tries: int) -> Steps[str]:
            """One try at mark_unknown."""
            try:
                return (yield from statement("mark_unknown", job.attempt_id))
            except InvalidTransition:
                return "gone"   # closed meanwhile
        try:
            if (yield from self._main_line.call(mark, retry=True)) == "unknown":
                self._count("marked_unknown")
        except (GaveUp, psycopg.Error) as err:
            self._count("report_errors")
            log.error("%s: could not mark attempt %d of job %d unknown: %s", self.name,
                      job.attempt_id, job.job_id, err)
        log.warning("%s: attempt %d of job %d was open from before this worker started; "
                    "not run again (its handler may have run)", self.name, job.attempt_id,
                    job.job_id)

    def _own_open_attempts(self, tries: int) -> Steps[List[Claimed]]:
        """This worker's started or unknown attempts that it does not hold
        and whose handler it never called."""
        with self._held_lock:
            held = list(self._held)
        held += list(self._ran) + list(self._untouchable)
        rows = yield from rows_of(OWN_OPEN_ATTEMPTS, (self.name, held))
        return [api.claimed(r) for r in rows]

    # -- running ---------------------------------------------------------

    def _run_batch(self, jobs: List[Claimed]) -> Steps[None]:
        """Handle the batch in order, heartbeating all of it meanwhile; once
        stopping, hand back what has not started.  Results are recorded when
        the batch ends (one finish_many), or at once when batch is 1; a job
        stays held (heartbeaten) until its result is recorded."""
        with self._held_lock:
            self._held.update((job.attempt_id, job) for job in jobs)
        done: List[Tuple[Claimed, Any]] = []   # results not recorded yet
        try:
            for i, job in enumerate(jobs):
                if self._stopping.is_set():
                    for rest in jobs[i:]:
                        yield from self._release(rest, f"worker {self.name} stopped before "
                                                       "running it")
                    return
                try:
                    result = yield from self._run_one(job)
                except BaseException:
                    self._drop(job)
                    raise
                if result is _REPORTED:
                    self._drop(job)
                else:
                    done.append((job, result))
                    if self.batch == 1:
                        yield from self._record(done)
                        done = []
        finally:
            yield from self._record(done)

    def _drop(self, job: Claimed) -> None:
        """The job's attempt is no longer held (reported, or given up)."""
        with self._held_lock:
            self._held.pop(job.attempt_id, None)

    def _run_one(self, job: Claimed) -> Steps[Any]:
        """Call the handler; report its error at once, and return its result
        to be recorded (``_REPORTED`` when there is nothing to record).  The
        attempt is marked as run before the handler is called: nothing runs
        it again, whatever happens to its report."""
        if job.attempt_id in self._ran or job.attempt_id in self._untouchable:
            log.error("%s: attempt %d was run already; not again", self.name, job.attempt_id)
            return _REPORTED
        handler = self._handler_of(job)
        if handler is None:   # never claimed so; an earlier attempt of its name
            yield from self._release(job, f"worker {self.name} has no handler for provider "
                                          f"{job.provider}")
            return _REPORTED
        self._ran.add(job.attempt_id)
        try:
            result = yield Invoke(handler, job)
        except InProgress:
            if (yield from self._report_unknown(job, "it is still in progress at the provider")):
                self._count("in_progress")
        except Exception as err:  # the handler's failure, whatever it is
            if not is_refusal(err):
                if (yield from self._report_unknown(job, f"the handler raised {error_text(err)}")):
                    self._count("handler_errors")
            elif (yield from self._report_failure(job, error_text(err), retry_in_of(err))):
                self._count("failed")
        else:
            why = unrecordable(result)
            if why is None:
                return result
            yield from self._report_unrecorded(job, why)
        self._forget(job)
        return _REPORTED

    def _record(self, done: List[Tuple[Claimed, Any]]) -> Steps[None]:
        """Record the results of handlers that ran: one, or a database
        without finish_many, with finish_attempt each; more with one
        finish_many, each refused row handled as finish's error would be.
        No handler is ever run again, whatever the reports meet."""
        if not done:
            return
        try:
            if len(done) == 1 or not (yield from self._has_finish_many()):
                for job, result in done:
                    yield from self._report_result(job, result)
                return
            yield from self._report_many(done)
        finally:
            for job, _ in done:
                self._forget(job)
                self._drop(job)

    def _has_finish_many(self) -> Steps[bool]:
        """Whether the database has finish_many (1.2); asked once."""
        if self._finish_many is None:
            try:
                self._finish_many = yield from self._main_line.call(
                    lambda tries: has_function("jobguard.finish_many(bigint[], jsonb[])"),
                    retry=True)
            except (GaveUp, psycopg.Error):
                return False   # this time: finish_attempt each
        return self._finish_many

    def _unreportable(self, job: Claimed, what: str, why: Any) -> None:
        """A report that never got through: counted, logged, and the attempt
        kept among the run ones (no later look-up runs it again)."""
        self._count("report_errors")
        self._unreported.add(job.attempt_id)
        log.error("%s: could not %s attempt %d of job %d: %s", self.name, what,
                  job.attempt_id, job.job_id, why)

    def _report_many(self, done: List[Tuple[Claimed, Any]]) -> Steps[None]:
        """finish_many for the batch; repeated after a lost connection (an
        equal result gets the same outcome).  A call the server refuses as a
        whole falls back to finish_attempt each."""
        try:
            rows = yield from self._main_line.call(
                lambda tries: statement("finish_many", [j.attempt_id for j, _ in done],
                                        [r for _, r in done]), retry=True,
                transient=REPORT_TRIES - 1)
        except (GaveUp, Lost) as err:
            for job, _ in done:
                self._unreportable(job, "report the result of", err)
            return
        except psycopg.Error as err:
            log.warning("%s: finish_many refused the batch (%s); finishing one by one",
                        self.name, str(err).strip())
            for job, result in done:
                yield from self._report_result(job, result)
            return
        for (job, result), row in zip(done, rows):
            if row.outcome is not None:
                self._count(row.outcome)
            elif row.sqlstate in NOT_REPORTABLE:
                self._unreportable(job, "report the result of", row.message)
            elif retryable(row):
                yield from self._report_result(job, result)   # the same report, alone, again
            else:
                yield from self._report_unrecorded(job, f"finish_many refused it "
                                                        f"({row.sqlstate}: {row.message})")

    def _report_unknown(self, job: Claimed, why: str) -> Steps[bool]:
        """Mark the attempt unknown (the provider may have done the work:
        redrive or reconciliation decide), the reason logged; tried again
        like every report.  True once it is unknown.  The attempt stays
        open, so no look-up of this worker's own open attempts may run it
        again: it is untouchable from here on."""
        self._untouchable.add(job.attempt_id)
        if not (yield from self._report(self._main_line, job, "mark unknown",
                                        once("mark_unknown", job.attempt_id, done="unknown"))):
            self._unreported.add(job.attempt_id)
            return False
        log.warning("%s: attempt %d of job %d marked unknown: %s", self.name,
                    job.attempt_id, job.job_id, why)
        return True

    def _forget(self, job: Claimed) -> None:
        """The attempt was reported: drop it from the run attempts, unless
        its report never got through (then it stays, so that no later
        look-up runs it again)."""
        if job.attempt_id not in self._unreported:
            self._ran.discard(job.attempt_id)

    def _report_result(self, job: Claimed, result: Any) -> Steps[None]:
        """finish the attempt; repeated after a lost connection or a server
        error that is no refusal (an equal result gets the same outcome).
        A result the server cannot take (too large, not valid jsonb) marks
        the attempt unknown instead; one that still cannot be recorded
        leaves it open."""
        refused: List[psycopg.Error] = []

        def finish(tries: int) -> Steps[str]:
            """One try at finish_attempt."""
            try:
                return (yield from statement("finish", job.attempt_id, result))
            except (InvalidTransition, AttemptNotFound, ResultMismatch):
                raise
            except psycopg.Error as err:
                if retryable(err):
                    raise
                refused.append(err)   # the server cannot take this result
                return "refused"
        try:
            outcome = yield from self._main_line.call(finish, retry=True,
                                                      transient=REPORT_TRIES - 1)
        except (GaveUp, psycopg.Error) as err:
            self._unreportable(job, "report the result of", err)
            return
        if outcome == "refused":
            err = refused[-1]
            yield from self._report_unrecorded(
                job, f"finish_attempt refused it ({err.sqlstate or 'error'}: "
                     f"{str(err).strip()})")
        else:
            self._count(outcome)

    def _report_unrecorded(self, job: Claimed, why: str) -> Steps[None]:
        """The handler's result cannot be sent: mark the attempt unknown
        (the provider may have done the work), the reason logged."""
        text = f"UnrecordableResult: the handler's result cannot be recorded: {why}"
        log.error("%s: attempt %d of job %d: %s", self.name, job.attempt_id, job.job_id, text)
        if (yield from self._report_unknown(job, text[:MAX_ERROR])):
            self._count("unrecorded")

    def _report_failure(self, job: Claimed, error: str,
                        retry_in: Optional[Seconds]) -> Steps[bool]:
        """fail the attempt (with retry_in); after a lost connection a
        repeat that finds it failed already counts as done.  True once it
        is failed."""
        if not (yield from self._report(self._main_line, job, "fail",
                                        once("fail", job.attempt_id, error, retry_in,
                                             done="failed"))):
            self._unreported.add(job.attempt_id)
            return False
        return True

    def _release(self, job: Claimed, reason: str) -> Steps[None]:
        """Hand back a claimed attempt that will not run: cancel it, so that
        claim hands the job out again (it counts towards max_attempts)."""
        try:
            if (yield from self._report(self._main_line, job, "hand back",
                                        once("cancel_attempt", job.attempt_id, reason,
                                             done="cancelled"), transient=0)):
                self._count("released")
        finally:
            self._drop(job)

    # -- heartbeats ------------------------------------------------------

    def _beat_loop(self) -> Steps[None]:
        """Every heartbeat_every, push back the deadline of each held attempt
        (on the heartbeat connection, reconnecting when it is lost)."""
        refused: Set[AttemptId] = set()
        while not (yield Pause(self.heartbeat_every, "_beat_stop")):
            with self._held_lock:
                ids = [a for a in self._held if a not in refused]
            for attempt_id in ids:
                if self._beat_stop.is_set():
                    return
                try:
                    yield from self._beat_line.call(
                        lambda tries, a=attempt_id: statement("heartbeat", a), retry=False)
                    self._count("heartbeats")
                except (InvalidTransition, AttemptNotFound) as err:
                    refused.add(attempt_id)
                    reported = (isinstance(err, InvalidTransition)
                                and err.state in ("succeeded", "lost", "failed"))
                    with self._held_lock:
                        still_held = attempt_id in self._held
                    if still_held and not reported:  # too late (unknown), or cancelled
                        self._count("heartbeats_refused")
                        log.warning("%s: heartbeat refused: %s", self.name, err)
                except Lost:
                    break  # the next round reconnects
                except GaveUp:
                    return
                except psycopg.Error as err:
                    log.warning("%s: heartbeat failed: %s", self.name, err)


#: what one reconcile call answered: ("finish", result), ("fail", (error,
#: retry_in)) or None (left unknown)
Answer = Optional[Tuple[str, Any]]


class ReconcilerCore(LoopCore):
    """The reconciler loop on ``claim_unknown`` (``Reconciler``,
    ``AsyncReconciler``): see the docstring of ``jobguard.reconciler``."""

    _log = rlog

    def __init__(self, reconcile: Callable[[Unknown], Any], *, conninfo: str = "",
                 name: Optional[str] = None, operations: Optional[Sequence[str]] = None,
                 batch: int = 10, older_than: Seconds = 0, lease: Seconds = 30,
                 wait: Seconds = 2, reconnect_min: Seconds = 0.1, reconnect_max: Seconds = 5,
                 shutdown_grace: Seconds = 30,
                 connect_kwargs: Optional[Dict[str, Any]] = None) -> None:
        """``conninfo`` and ``connect_kwargs`` go to ``psycopg.connect``;
        ``name`` (the reconciler's, default host, pid and a random part),
        ``operations``, ``batch`` (max_rows), ``older_than`` and ``lease`` go
        to ``claim_unknown``; ``wait`` is the pause after a round that found
        nothing; reconnects wait ``reconnect_min`` doubling up to
        ``reconnect_max``; once stopped, a report is tried for at most
        ``shutdown_grace``.  Checked here, for every driver; then the
        driver's ``_setup()`` makes its event and link."""
        if not callable(reconcile):
            raise TypeError("reconcile must be callable")
        if batch < 1:
            raise ValueError("batch must be at least 1")
        self.reconcile = reconcile
        self._set_common(conninfo, name, operations, reconnect_min, reconnect_max,
                         shutdown_grace, connect_kwargs)
        self.batch = batch
        self.older_than = secs(older_than)
        self.lease = secs(lease)
        self.wait = secs(wait)
        if self.lease <= 0 or self.older_than < 0 or self.wait < 0:
            raise ValueError("lease must be positive, older_than and wait not negative")
        self.stats = ReconcilerStats()
        self._line = Line(self, "jobguard reconciler", self._gives_up)
        self._lease_delay = 0.0   # the wait after the last failed claim_unknown
        self._setup()

    def _setup(self) -> None:
        """The driver's: set ``_stopping`` (an event of its kind) and its link."""
        raise NotImplementedError

    def _gives_up(self) -> bool:
        """Once stopped, reconnecting ends after shutdown_grace."""
        return (self._stopping.is_set()
                and time.monotonic() - self._stopped_at > self.shutdown_grace)

    def _loop(self, until_idle: bool) -> Steps[ReconcilerStats]:
        """Lease and reconcile until stopped (or, with until_idle, until a
        round finds nothing)."""
        while not self._stopping.is_set():
            try:
                rows = yield from self._line.call(
                    lambda tries: statement("claim_unknown", self.name, self.operations,
                                            self.batch, self.older_than, self.lease),
                    retry=True)
            except GaveUp:
                break
            except psycopg.Error as err:
                self._count("claim_errors")
                self._lease_delay = self._backoff(self._lease_delay)
                rlog.error("%s: claim_unknown failed (%s); again in %.1fs", self.name,
                           str(err).strip(), self._lease_delay)
                yield Pause(self._lease_delay, "_stopping")
                continue
            self._lease_delay = 0.0
            self._count("claimed", len(rows))
            if rows:
                yield from self._run_batch(rows)
            elif until_idle:
                break
            else:
                yield Pause(self.wait, "_stopping")
        return self.stats

    def _run_batch(self, rows: List[Unknown]) -> Steps[None]:
        """Ask reconcile about each row once, in order (until stopped), then
        report: failures at once, results with one finish_many."""
        asked: Set[int] = set()
        results: List[Tuple[Unknown, Any]] = []
        try:
            for row in rows:
                if self._stopping.is_set():
                    break
                if row.attempt_id in asked:
                    continue
                asked.add(row.attempt_id)
                answer = yield from self._answer(row)
                if answer is None:
                    continue
                if answer[0] == "fail":
                    yield from self._fail(row, *answer[1])
                else:
                    results.append((row, answer[1]))
        finally:
            yield from self._finish(results)

    def _answer(self, row: Unknown) -> Steps[Answer]:
        """Ask reconcile about one row and classify what it said, counting
        what is left unknown: None (or InProgress) leaves it, ProviderRefused
        fails it, any other exception leaves it (the provider could not be
        asked), a value that cannot be recorded leaves it (the provider did
        the work, so the attempt must not fail)."""
        try:
            result = yield Invoke(self.reconcile, row)
        except InProgress:
            self._count("left")
            return None
        except ProviderRefused as err:
            return ("fail", (error_text(err), retry_in_of(err)))
        except Exception as err:  # the provider could not be asked: still unknown
            self._count("errors")
            rlog.warning("%s: reconciling attempt %d of job %d raised %s; left unknown",
                         self.name, row.attempt_id, row.job_id, error_text(err))
            return None
        if result is None:
            self._count("left")
            return None
        why = unrecordable(result)
        if why is not None:
            self._count("errors")
            rlog.error("%s: attempt %d of job %d: the result cannot be recorded (%s); "
                       "left unknown", self.name, row.attempt_id, row.job_id, why)
            return None
        return ("finish", result)

    def _fail(self, row: Unknown, error: str, retry_in: Optional[Seconds]) -> Steps[None]:
        """fail_attempt (the provider said no); a repeat after a lost
        connection that finds it failed counts as done."""
        if (yield from self._report(self._line, row, "fail",
                                    once("fail", row.attempt_id, error, retry_in,
                                         done="failed"))):
            self._count("failed")

    def _finish(self, results: List[Tuple[Unknown, Any]]) -> Steps[None]:
        """finish_many for the answered results (repeated after a lost
        connection: an equal result gets the same outcome); a refused row
        is a report error."""
        if not results:
            return
        rows = [row for row, _ in results]
        try:
            outcomes = yield from self._line.call(
                lambda tries: statement("finish_many", [r.attempt_id for r in rows],
                                        [res for _, res in results]),
                retry=True, transient=REPORT_TRIES - 1)
        except (GaveUp, psycopg.Error) as err:
            self._count("report_errors", len(rows))
            rlog.error("%s: could not report %d results: %s", self.name, len(rows), err)
            return
        for row, out in zip(rows, outcomes):
            if out.outcome is not None:
                self._count(out.outcome)
            else:
                self._count("report_errors")
                level = logging.ERROR if out.sqlstate not in NOT_REPORTABLE else logging.WARNING
                rlog.log(level, "%s: the result of attempt %d of job %d was refused: %s %s",
                         self.name, row.attempt_id, row.job_id, out.sqlstate, out.message)
