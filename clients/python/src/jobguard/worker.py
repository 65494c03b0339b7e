"""A worker loop on ``jobguard.claim()``.

``Worker(handler).run()`` claims jobs (a batch at a time, waiting for work
when there is none), calls ``handler(job)`` for each, and reports: the
handler's return value is the result (``finish``; with ``batch`` > 1 the
batch's results are recorded together by one ``finish_many`` when the batch
ends), an exception fails the attempt (``fail``; ``ProviderRefused`` says
"the provider said no", ``RetryLater``, or any exception with a
``retry_in`` attribute, holds the retry back that long) — only the
provider's refusal fails an attempt.  Any other exception, and
``InProgress`` ("the provider says this key is still being processed"),
marks it unknown (``mark_unknown``), never failed: a failed attempt's
successor gets a new provider key, and the first request may have been
done, or may still be running.  Send
``job.provider_key`` to the provider as its idempotency key; a redrive
(``job.redrive``) is the same request again under the same key, and runs
the same handler.  A result that cannot be
sent (None, not JSON, too large for the server) marks the attempt unknown,
the reason logged.  A report that meets any other server error (a
statement timeout, a serialization failure, a shutdown, a lost
connection) is tried again, the same report; one that still cannot be
recorded leaves the attempt open (its deadline makes it unknown).  It is
never failed for that: the provider did the work.  A server error in
``claim`` is logged and the claim tried again with backoff.  While a batch is held, a
background thread heartbeats its attempts on a connection of its own, so a
long handler keeps its attempt.  A lost connection is reopened with
backoff; a report is repeated on the new connection (``finish`` with an
equal result is idempotent), and attempts that a lost ``claim`` of this
worker began are found again by the worker's name and run.  ``stop()`` (or
SIGTERM / SIGINT while ``run()`` is in the main thread) lets the current
job finish and report, hands the rest of the batch back
(``cancel_attempt``) and returns.

Exactly once: the handler runs at most once per attempt.  An attempt whose
handler was called is never run again by this worker, whatever its report
met; open attempts of the worker's name that were there before it started
(an earlier process under the same name may have run their handler) are
marked unknown, not run.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import psycopg
from psycopg.rows import dict_row

from . import api
from .api import Claimed, Seconds
from .errors import AttemptNotFound, InvalidTransition, ResultMismatch
from .ids import AttemptId

__all__ = ["Worker", "WorkerStats", "RetryLater", "ProviderRefused", "InProgress", "Handler"]

log = logging.getLogger("jobguard.worker")

#: what a worker calls for each claimed job; its return value is the result
Handler = Callable[[Claimed], Any]
Conn = psycopg.Connection[Any]
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
                      AND p.cancel_reason = 'redriven as attempt ' || a.attempt_id) AS redrive
      FROM jobguard.attempt_overview a
      JOIN jobguard.job_overview j ON j.job_id = a.job_id
     WHERE a.worker = %s AND a.state IN ('started', 'unknown')
       AND a.attempt_id <> ALL (%s::bigint[])
     ORDER BY a.attempt_id"""

#: the SQLSTATEs of a finish that can never be recorded by this attempt
#: (not open, a different result, no such attempt): a report error, as the
#: exceptions InvalidTransition, ResultMismatch, AttemptNotFound of finish
NOT_REPORTABLE = ("JG006", "JG007", "JG009")

#: how many times in all a report is tried that meets a server error on an
#: intact connection that is not a refusal of it (lost connections are
#: tried again until the worker gives up, as before)
REPORT_TRIES = 6


def retryable(err: BaseException) -> bool:
    """Whether a statement that raised ``err`` on an intact connection may
    be tried again as it was: anything but jobguard's own refusals (JG...)
    and the errors of a value the server cannot take (classes 22 and 54: a
    result that cannot be sent).  A statement timeout, a serialization
    failure, a lock timeout or an unexpected error are tried again."""
    state = getattr(err, "sqlstate", None) or ""
    return not (state.startswith("JG") or state[:2] in ("22", "54"))


def is_refusal(err: BaseException) -> bool:
    """Whether a handler's exception says the provider refused (it did not
    do the work): ``ProviderRefused`` and its subclasses, or any exception
    with a ``retry_in`` attribute.  Only these fail an attempt."""
    return isinstance(err, ProviderRefused) or retry_in_of(err) is not None


def error_text(err: BaseException) -> str:
    """The error an attempt records for a handler's exception."""
    return f"{type(err).__name__}: {err}"[:MAX_ERROR]


def retry_in_of(err: BaseException) -> Optional[Seconds]:
    """The delay an exception asks for its retry (its ``retry_in``), or None."""
    retry_in = getattr(err, "retry_in", None)
    return retry_in if isinstance(retry_in, (timedelta, int, float)) else None


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


def _secs(value: Seconds) -> float:
    """Seconds as a float, from a timedelta or a number."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


#: what _run_one returns when nothing is left to record
_REPORTED = object()


class _GaveUp(Exception):
    """The server could not be reached and the worker is no longer waiting for it."""


class _Lost(Exception):
    """The connection was lost during a statement that is not repeated blindly."""


class _Link:
    """One connection for one thread, opened again with backoff when lost."""

    def __init__(self, worker: "Worker", role: str, give_up: Callable[[], bool]) -> None:
        """A link for ``worker``; ``role`` names it in application_name;
        ``give_up()`` true makes reconnecting stop (``_GaveUp``)."""
        self._worker = worker
        self._appname = f"{worker.name} ({role})"[:63]
        self._give_up = give_up
        self._conn: Optional[Conn] = None
        self._ever = False

    def connect(self) -> Conn:
        """The open connection, opening one (with backoff) if there is none."""
        delay = self._worker.reconnect_min
        while self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(self._worker.conninfo, autocommit=True,
                                             application_name=self._appname,
                                             **api.connect_options(self._worker.connect_kwargs))
            except psycopg.OperationalError as err:
                if self._give_up():
                    raise _GaveUp(str(err)) from err
                log.warning("%s: cannot connect (%s); again in %.1fs", self._appname,
                            str(err).strip(), delay)
                time.sleep(delay)
                delay = min(delay * 2, self._worker.reconnect_max)
                continue
            if self._ever:
                self._worker._count("reconnects")
            self._ever = True
        return self._conn

    def call(self, fn: Callable[[Conn, int], T], retry: bool, transient: int = 0) -> T:
        """``fn(conn, tries)`` on the connection.  When the connection is
        lost: with ``retry``, reconnect and call again (``tries`` counts the
        earlier calls), else raise ``_Lost``.  A server error on an intact
        connection that is ``retryable`` is tried again, with backoff, up to
        ``transient`` more times; other errors propagate."""
        tries = 0
        delay = self._worker.reconnect_min
        while True:
            conn = self.connect()
            try:
                return fn(conn, tries)
            except psycopg.Error as err:
                if not (conn.closed or conn.broken):
                    if transient <= 0 or not retryable(err) or self._give_up():
                        raise
                    transient -= 1
                    tries += 1
                    self._worker._count("report_retries")
                    log.warning("%s: %s; trying the same statement again in %.1fs",
                                self._appname, str(err).strip(), delay)
                    time.sleep(delay)
                    delay = min(delay * 2, self._worker.reconnect_max)
                    continue
                log.warning("%s: connection lost (%s)", self._appname, str(err).strip())
                self.close()
                if not retry:
                    raise _Lost(str(err)) from err
                if self._give_up():
                    raise _GaveUp(str(err)) from err
                tries += 1
                time.sleep(delay)
                delay = min(delay * 2, self._worker.reconnect_max)

    def close(self) -> None:
        """Close the connection, if any."""
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None


def _set_options(w: Any, handler: Any, conninfo: str, name: Optional[str],
                 operations: Optional[Sequence[str]], provider: Optional[str], batch: int,
                 timeout: Seconds, wait: Seconds, heartbeat_every: Optional[Seconds],
                 reconnect_min: Seconds, reconnect_max: Seconds, shutdown_grace: Seconds,
                 connect_kwargs: Optional[Dict[str, Any]]) -> None:
    """The options a Worker and an AsyncWorker share, checked and set on w."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    w.handler = handler
    w.conninfo = conninfo
    w.connect_kwargs = dict(connect_kwargs or {})
    w.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    w.operations = list(operations) if operations is not None else None
    w.provider = provider
    w.batch = batch
    w.timeout = _secs(timeout)
    w.wait = _secs(wait)
    w.heartbeat_every = (_secs(heartbeat_every) if heartbeat_every is not None
                         else w.timeout / 3)
    if w.timeout <= 0 or w.wait < 0 or w.heartbeat_every <= 0:
        raise ValueError("timeout and heartbeat_every must be positive, wait not negative")
    w.reconnect_min = _secs(reconnect_min)
    w.reconnect_max = _secs(reconnect_max)
    w.shutdown_grace = _secs(shutdown_grace)
    w.stats = WorkerStats()

class Worker:
    """Claims jobs and runs ``handler`` on each; see the module's docstring."""

    def __init__(self, handler: Handler, *, conninfo: str = "", name: Optional[str] = None,
                 operations: Optional[Sequence[str]] = None, provider: Optional[str] = None,
                 batch: int = 1, timeout: Seconds = 30, wait: Seconds = 2,
                 heartbeat_every: Optional[Seconds] = None, reconnect_min: Seconds = 0.1,
                 reconnect_max: Seconds = 5, shutdown_grace: Seconds = 30,
                 connect_kwargs: Optional[Dict[str, Any]] = None) -> None:
        """``conninfo`` and ``connect_kwargs`` go to ``psycopg.connect`` (the
        PG* environment fills in the rest); ``name`` is recorded on each
        attempt (default: host, pid and a random part — give a stable one to
        have a restarted worker pick up its own open attempts);
        ``operations``, ``provider``, ``batch`` (max_jobs), ``timeout`` and
        ``wait`` go to ``claim``; heartbeats every ``heartbeat_every``
        (default a third of ``timeout``); reconnects wait ``reconnect_min``
        doubling up to ``reconnect_max``; once stopped, a report is tried
        for at most ``shutdown_grace``."""
        _set_options(self, handler, conninfo, name, operations, provider, batch, timeout, wait,
                     heartbeat_every, reconnect_min, reconnect_max, shutdown_grace,
                     connect_kwargs)
        self._stats_lock = threading.Lock()
        self._held: Dict[AttemptId, Claimed] = {}     # claimed, not yet reported
        self._ran: set[AttemptId] = set()     # handler called, report not done
        self._unreported: set[AttemptId] = set()   # of those, reports that never got through
        self._untouchable: set[AttemptId] = set()  # open attempts never to run
        self._started_up = False      # the open attempts found at start were dealt with
        self._claim_lost = False      # a claim's answer was lost: look for what it began
        self._claim_delay = 0.0       # the wait after the last failed claim
        self._finish_many: Optional[bool] = None   # the database has finish_many
        self._held_lock = threading.Lock()
        self._stopping = threading.Event()
        self._stopped_at = 0.0
        self._beat_stop = threading.Event()
        self._main = _Link(self, "jobguard worker", self._main_gives_up)
        self._beat = _Link(self, "jobguard heartbeat", self._beat_stop.is_set)

    # -- control ---------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop: the current job finishes and reports,
        no more are claimed.  Safe from another thread or a signal handler."""
        if not self._stopping.is_set():
            self._stopped_at = time.monotonic()
            self._stopping.set()

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` was called."""
        return self._stopping.is_set()

    def run(self, *, until_idle: bool = False, handle_signals: bool = True) -> WorkerStats:
        """Claim and handle jobs until ``stop()`` (or, with ``until_idle``,
        until claims found nothing for ``wait``); return the stats.
        ``handle_signals`` (in the main thread): SIGTERM and SIGINT call
        ``stop()``; a second one raises KeyboardInterrupt."""
        previous: Dict[int, Any] = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        beater = threading.Thread(target=self._beat_loop, name=f"{self.name} heartbeat",
                                  daemon=True)
        beater.start()
        try:
            idle_since = time.monotonic()
            while not self._stopping.is_set():
                try:
                    jobs = self._next_jobs()
                except _GaveUp:
                    break
                if jobs:
                    self._run_batch(jobs)
                    idle_since = time.monotonic()
                elif (until_idle and not self._claim_lost
                      and time.monotonic() - idle_since >= self.wait):
                    break
        finally:
            self._beat_stop.set()
            beater.join()
            self._main.close()
            self._beat.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.stats

    def _on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        """SIGTERM / SIGINT: stop; a second signal interrupts the handler."""
        if self._stopping.is_set():
            raise KeyboardInterrupt
        log.info("%s: %s received, stopping after the current job", self.name,
                 signal.Signals(signum).name)
        self.stop()

    def _main_gives_up(self) -> bool:
        """Whether the main connection stops reconnecting: once stopped, at
        once if nothing is held, else after shutdown_grace."""
        if not self._stopping.is_set():
            return False
        with self._held_lock:
            holding = bool(self._held)
        return not holding or time.monotonic() - self._stopped_at > self.shutdown_grace

    def _count(self, name: str, n: int = 1) -> None:
        """Add n to one of the stats."""
        with self._stats_lock:
            setattr(self.stats, name, getattr(self.stats, name) + n)

    # -- claiming --------------------------------------------------------

    def _next_jobs(self) -> List[Claimed]:
        """The next batch: at start, the open attempts of the worker's name
        from before (marked unknown, never run); after a claim whose answer
        was lost, the attempts it began (adopted: their handler never ran);
        otherwise what claim hands out."""
        self._main.connect()
        try:
            if not self._started_up:
                for job in self._main.call(self._own_open_attempts, retry=True):
                    self._mark_earlier(job)
                self._started_up = True
            if self._claim_lost:
                adopted = self._main.call(self._own_open_attempts, retry=True)
                self._claim_lost = False
                if adopted:
                    self._count("adopted", len(adopted))
                    log.info("%s: picked up %d open attempts of its own", self.name,
                             len(adopted))
                    return adopted
        except _Lost:
            return []
        except psycopg.Error as err:
            self._claim_failed(err)
            return []
        # a claim that waited begins its attempts when the work came (their
        # whole timeout ahead); waiting at most a third of the timeout per
        # claim keeps the loop responsive to shutdown and to its own lease
        wait = min(self.wait, self.timeout / 3)
        try:
            jobs = self._main.call(
                lambda conn, _: api.claim(conn, self.name, self.operations, self.timeout,
                                          self.batch, self.provider, wait), retry=False)
        except _Lost:
            self._claim_lost = True   # the next round finds whatever that claim began
            return []
        except psycopg.Error as err:
            self._claim_failed(err)
            return []
        self._claim_delay = 0.0
        self._count("claimed", len(jobs))
        return jobs

    def _claim_failed(self, err: psycopg.Error) -> None:
        """A claim (or the look-up of its own open attempts) met a server
        error: log it, wait (doubling from reconnect_min up to
        reconnect_max, or until stopped) and let the loop try again.  Its
        transaction was rolled back, but the next round looks for open
        attempts of this worker all the same."""
        self._count("claim_errors")
        self._claim_lost = True
        self._claim_delay = min(max(self._claim_delay * 2, self.reconnect_min),
                                self.reconnect_max)
        log.error("%s: claim failed (%s); again in %.1fs", self.name,
                  str(err).strip(), self._claim_delay)
        self._stopping.wait(self._claim_delay)

    def _mark_earlier(self, job: Claimed) -> None:
        """An open attempt of this worker's name from before it started:
        whether its handler ran is unknown, so it is not run again.
        ``mark_unknown`` says so (a late report still goes through the
        compare-and-swap), and this worker never touches it again."""
        self._untouchable.add(job.attempt_id)

        def mark(conn: Conn, tries: int) -> str:
            """One try at mark_unknown."""
            try:
                return api.mark_unknown(conn, job.attempt_id)
            except InvalidTransition:
                return "gone"   # closed meanwhile
        try:
            if self._main.call(mark, retry=True) == "unknown":
                self._count("marked_unknown")
        except (_GaveUp, psycopg.Error) as err:
            self._count("report_errors")
            log.error("%s: could not mark attempt %d of job %d unknown: %s", self.name,
                      job.attempt_id, job.job_id, err)
        log.warning("%s: attempt %d of job %d was open from before this worker started; "
                    "not run again (its handler may have run)", self.name, job.attempt_id,
                    job.job_id)

    def _own_open_attempts(self, conn: Conn, tries: int) -> List[Claimed]:
        """This worker's started or unknown attempts that it does not hold
        and whose handler it never called."""
        with self._held_lock:
            held = list(self._held)
        held += list(self._ran) + list(self._untouchable)
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(OWN_OPEN_ATTEMPTS, (self.name, held), prepare=api.prepare_flag())
            return [api.claimed(r) for r in cur.fetchall()]

    # -- running ---------------------------------------------------------

    def _run_batch(self, jobs: List[Claimed]) -> None:
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
                        self._release(rest)
                    return
                try:
                    result = self._run_one(job)
                except BaseException:
                    self._drop(job)
                    raise
                if result is _REPORTED:
                    self._drop(job)
                else:
                    done.append((job, result))
                    if self.batch == 1:
                        self._record(done)
                        done = []
        finally:
            self._record(done)

    def _drop(self, job: Claimed) -> None:
        """The job's attempt is no longer held (reported, or given up)."""
        with self._held_lock:
            self._held.pop(job.attempt_id, None)

    def _run_one(self, job: Claimed) -> Any:
        """Call the handler; report its error at once, and return its result
        to be recorded (``_REPORTED`` when there is nothing to record).  The
        attempt is marked as run before the handler is called: nothing runs
        it again, whatever happens to its report."""
        if job.attempt_id in self._ran or job.attempt_id in self._untouchable:
            log.error("%s: attempt %d was run already; not again", self.name, job.attempt_id)
            return _REPORTED
        self._ran.add(job.attempt_id)
        try:
            result = self.handler(job)
        except InProgress:
            if self._report_in_progress(job):
                self._count("in_progress")
        except Exception as err:  # the handler's failure, whatever it is
            if not is_refusal(err):
                if self._report_unknown(job, f"the handler raised {error_text(err)}"):
                    self._count("handler_errors")
            elif self._report_failure(job, error_text(err), retry_in_of(err)):
                self._count("failed")
        else:
            why = unrecordable(result)
            if why is None:
                return result
            self._report_unrecorded(job, why)
        self._forget(job)
        return _REPORTED

    def _record(self, done: List[Tuple[Claimed, Any]]) -> None:
        """Record the results of handlers that ran: one, or a database
        without finish_many, with finish_attempt each; more with one
        finish_many, each refused row handled as finish's error would be.
        No handler is ever run again, whatever the reports meet."""
        if not done:
            return
        try:
            if len(done) == 1 or not self._has_finish_many():
                for job, result in done:
                    self._report_result(job, result)
                return
            self._report_many(done)
        finally:
            for job, _ in done:
                self._forget(job)
                self._drop(job)

    def _has_finish_many(self) -> bool:
        """Whether the database has finish_many (1.2); asked once."""
        if self._finish_many is None:
            try:
                self._finish_many = bool(self._main.call(
                    lambda conn, _: conn.execute(
                        "SELECT to_regprocedure('jobguard.finish_many(bigint[], jsonb[])')"
                        " IS NOT NULL", prepare=api.prepare_flag()).fetchone()[0],  # type: ignore[index]
                    retry=True))
            except (_GaveUp, psycopg.Error):
                return False   # this time: finish_attempt each
        return self._finish_many

    def _report_many(self, done: List[Tuple[Claimed, Any]]) -> None:
        """finish_many for the batch; repeated after a lost connection (an
        equal result gets the same outcome).  A call the server refuses as a
        whole falls back to finish_attempt each."""
        try:
            rows = self._main.call(
                lambda conn, _: api.finish_many(conn, [j.attempt_id for j, _ in done],
                                                [r for _, r in done]), retry=True,
                transient=REPORT_TRIES - 1)
        except (_GaveUp, _Lost) as err:
            for job, _ in done:
                self._count("report_errors")
                self._unreported.add(job.attempt_id)
                log.error("%s: could not report the result of attempt %d of job %d: %s",
                          self.name, job.attempt_id, job.job_id, err)
            return
        except psycopg.Error as err:
            log.warning("%s: finish_many refused the batch (%s); finishing one by one",
                        self.name, str(err).strip())
            for job, result in done:
                self._report_result(job, result)
            return
        for (job, result), row in zip(done, rows):
            if row.outcome is not None:
                self._count(row.outcome)
            elif row.sqlstate in NOT_REPORTABLE:
                self._count("report_errors")
                self._unreported.add(job.attempt_id)
                log.error("%s: could not report the result of attempt %d of job %d: %s",
                          self.name, job.attempt_id, job.job_id, row.message)
            elif retryable(row):
                self._report_result(job, result)   # the same report, alone, tried again
            else:
                self._report_unrecorded(job, f"finish_many refused it ({row.sqlstate}: "
                                             f"{row.message})")

    def _report_in_progress(self, job: Claimed) -> bool:
        """The provider says the key is still being processed: mark the
        attempt unknown (never fail it).  True once it is unknown."""
        return self._report_unknown(job, "it is still in progress at the provider")

    def _report_unknown(self, job: Claimed, why: str) -> bool:
        """Mark the attempt unknown (the provider may have done the work:
        redrive or reconciliation decide), the reason logged; tried again
        like every report.  True once it is unknown.  The attempt stays
        open, so no look-up of this worker's own open attempts may run it
        again: it is untouchable from here on."""
        self._untouchable.add(job.attempt_id)
        def mark(conn: Conn, tries: int) -> str:
            """One try at mark_unknown; a repeat finding it unknown is done."""
            try:
                return api.mark_unknown(conn, job.attempt_id)
            except InvalidTransition as err:
                if tries > 0 and err.state == "unknown":
                    return "unknown"
                raise
        try:
            self._main.call(mark, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self._count("report_errors")
            self._unreported.add(job.attempt_id)
            log.error("%s: could not mark attempt %d of job %d unknown: %s", self.name,
                      job.attempt_id, job.job_id, err)
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

    def _report_result(self, job: Claimed, result: Any) -> None:
        """finish the attempt; repeated after a lost connection or a server
        error that is no refusal (an equal result gets the same outcome).
        A result the server cannot take (too large, not valid jsonb) marks
        the attempt unknown instead; one that still cannot be recorded
        leaves it open."""
        refused: List[psycopg.Error] = []

        def finish(conn: Conn, tries: int) -> str:
            """One try at finish_attempt."""
            try:
                return api.finish(conn, job.attempt_id, result)
            except (InvalidTransition, AttemptNotFound, ResultMismatch):
                raise
            except psycopg.Error as err:
                if conn.closed or conn.broken or retryable(err):
                    raise
                refused.append(err)   # the server cannot take this result
                return "refused"
        try:
            outcome = self._main.call(finish, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self._count("report_errors")
            self._unreported.add(job.attempt_id)
            log.error("%s: could not report the result of attempt %d of job %d: %s",
                      self.name, job.attempt_id, job.job_id, err)
            return
        if outcome == "refused":
            err = refused[-1]
            self._report_unrecorded(
                job, f"finish_attempt refused it ({err.sqlstate or 'error'}: "
                     f"{str(err).strip()})")
        else:
            self._count(outcome)

    def _report_unrecorded(self, job: Claimed, why: str) -> None:
        """The handler's result cannot be sent: mark the attempt unknown
        (the provider may have done the work), the reason logged."""
        text = f"UnrecordableResult: the handler's result cannot be recorded: {why}"
        log.error("%s: attempt %d of job %d: %s", self.name, job.attempt_id, job.job_id, text)
        if self._report_unknown(job, text[:MAX_ERROR]):
            self._count("unrecorded")

    def _report_failure(self, job: Claimed, error: str, retry_in: Optional[Seconds]) -> bool:
        """fail the attempt (with retry_in); after a lost connection a
        repeat that finds it failed already counts as done.  True once it
        is failed."""
        def fail(conn: Conn, tries: int) -> str:
            """One try at fail_attempt."""
            try:
                return api.fail(conn, job.attempt_id, error, retry_in)
            except InvalidTransition as err:
                if tries > 0 and err.state == "failed":
                    return "failed"
                raise
        try:
            self._main.call(fail, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self._count("report_errors")
            self._unreported.add(job.attempt_id)
            log.error("%s: could not fail attempt %d of job %d: %s", self.name, job.attempt_id,
                      job.job_id, err)
            return False
        return True

    def _release(self, job: Claimed) -> None:
        """Hand back a claimed attempt that will not run: cancel it, so that
        claim hands the job out again (it counts towards max_attempts)."""
        def cancel(conn: Conn, tries: int) -> str:
            """One try at cancel_attempt."""
            try:
                return api.cancel_attempt(conn, job.attempt_id,
                                          f"worker {self.name} stopped before running it")
            except InvalidTransition as err:
                if tries > 0 and err.state == "cancelled":
                    return "cancelled"
                raise
        try:
            self._main.call(cancel, retry=True)
        except (_GaveUp, psycopg.Error) as err:
            self._count("report_errors")
            log.error("%s: could not hand back attempt %d of job %d: %s", self.name,
                      job.attempt_id, job.job_id, err)
        else:
            self._count("released")
        finally:
            with self._held_lock:
                self._held.pop(job.attempt_id, None)

    # -- heartbeats ------------------------------------------------------

    def _beat_loop(self) -> None:
        """Every heartbeat_every, push back the deadline of each held attempt
        (on the heartbeat connection, reconnecting when it is lost)."""
        refused: set[AttemptId] = set()
        while not self._beat_stop.wait(self.heartbeat_every):
            with self._held_lock:
                ids = [a for a in self._held if a not in refused]
            for attempt_id in ids:
                if self._beat_stop.is_set():
                    return
                try:
                    self._beat.call(lambda conn, _: api.heartbeat(conn, attempt_id), retry=False)
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
                except _Lost:
                    break  # the next round reconnects
                except _GaveUp:
                    return
                except psycopg.Error as err:
                    log.warning("%s: heartbeat failed: %s", self.name, err)
