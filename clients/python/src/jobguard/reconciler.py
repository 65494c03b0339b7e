"""A reconciler loop on ``jobguard.claim_unknown()`` (1.2).

``Reconciler(reconcile).run()`` leases unknown attempts (a batch at a time,
pausing ``wait`` when there are none) and calls ``reconcile(attempt)`` for
each, an ``Unknown`` row: look the attempt up at its provider by
``attempt.provider_key`` and say what the provider says.

- a returned value (a JSON value): the provider did the work, this is its
  result.  The batch's results are recorded together (``finish_many``)
  when the batch ends; each goes through the compare-and-swap as usual.
- ``ProviderRefused`` raised: the provider did not do it.  The attempt
  fails (``fail``), the gate opens, the next attempt gets a new key.
- None returned (or ``InProgress`` raised): the provider does not know yet;
  the attempt stays unknown and another round asks again once the lease
  ends.  Any other exception (the provider could not be asked) also leaves
  it unknown: only the provider's own "no" may fail an attempt.

Exactly once: ``reconcile`` is called at most once per row of one
``claim_unknown`` call, and each answer is reported once (a report lost
with its connection is repeated on a new one; an equal result gets the
same outcome; one that meets a server error that is no refusal of it — a
statement timeout, a serialization failure — is tried again, and one
that still cannot be recorded leaves the attempt unknown).  A server error
in ``claim_unknown`` is logged and the lease tried again with backoff; it
never ends ``run()``.  ``stop()`` (or SIGTERM / SIGINT while ``run()`` is in the
main thread) lets the current call finish, reports the answers of the
batch so far, and returns; the rest of the batch is not asked (its lease
ends).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psycopg

from . import api
from .api import Seconds, Unknown
from .errors import InvalidTransition
from .worker import (NOT_REPORTABLE, REPORT_TRIES, InProgress, ProviderRefused, _GaveUp, _Link,
                     _secs, error_text, retry_in_of, unrecordable)

__all__ = ["Reconciler", "ReconcilerStats", "Reconcile"]

log = logging.getLogger("jobguard.reconciler")

#: what a reconciler calls for each unknown attempt: its result, or None
Reconcile = Callable[[Unknown], Any]
Conn = psycopg.Connection[Any]


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


def _set_reconciler_options(r: Any, reconcile: Any, conninfo: str, name: Optional[str],
                            operations: Optional[Sequence[str]], batch: int,
                            older_than: Seconds, lease: Seconds, wait: Seconds,
                            reconnect_min: Seconds, reconnect_max: Seconds,
                            shutdown_grace: Seconds,
                            connect_kwargs: Optional[Dict[str, Any]]) -> None:
    """The options a Reconciler and an AsyncReconciler share, checked and set on r."""
    if not callable(reconcile):
        raise TypeError("reconcile must be callable")
    if batch < 1:
        raise ValueError("batch must be at least 1")
    r.reconcile = reconcile
    r.conninfo = conninfo
    r.connect_kwargs = dict(connect_kwargs or {})
    r.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    r.operations = list(operations) if operations is not None else None
    r.batch = batch
    r.older_than = _secs(older_than)
    r.lease = _secs(lease)
    r.wait = _secs(wait)
    if r.lease <= 0 or r.older_than < 0 or r.wait < 0:
        raise ValueError("lease must be positive, older_than and wait not negative")
    r.reconnect_min = _secs(reconnect_min)
    r.reconnect_max = _secs(reconnect_max)
    r.shutdown_grace = _secs(shutdown_grace)
    r.stats = ReconcilerStats()


#: what one reconcile call answered: ("finish", result), ("fail", (error,
#: retry_in)) or None (left unknown)
Answer = Optional[Tuple[str, Any]]


def answer_of(r: Any, row: Unknown, call: Callable[[], Any]) -> Answer:
    """Classify one reconcile call (``call()`` returns its value or raises),
    counting what is left unknown."""
    try:
        result = call()
    except InProgress:
        r.stats.left += 1
        return None
    except ProviderRefused as err:
        return ("fail", (error_text(err), retry_in_of(err)))
    except Exception as err:  # the provider could not be asked: still unknown
        r.stats.errors += 1
        log.warning("%s: reconciling attempt %d of job %d raised %s; left unknown", r.name,
                    row.attempt_id, row.job_id, error_text(err))
        return None
    return result_answer(r, row, result)


def result_answer(r: Any, row: Unknown, result: Any) -> Answer:
    """The answer for a returned value: None leaves the attempt unknown; a
    value that cannot be recorded is an error (left unknown: the provider
    did the work, so the attempt must not fail)."""
    if result is None:
        r.stats.left += 1
        return None
    why = unrecordable(result)
    if why is not None:
        r.stats.errors += 1
        log.error("%s: attempt %d of job %d: the result cannot be recorded (%s); left unknown",
                  r.name, row.attempt_id, row.job_id, why)
        return None
    return ("finish", result)


def count_outcomes(r: Any, rows: List[Unknown], outcomes: List[api.FinishOutcome]) -> None:
    """Count finish_many's outcomes; a refused row is a report error."""
    for row, out in zip(rows, outcomes):
        if out.outcome is not None:
            setattr(r.stats, out.outcome, getattr(r.stats, out.outcome) + 1)
        else:
            r.stats.report_errors += 1
            level = logging.ERROR if out.sqlstate not in NOT_REPORTABLE else logging.WARNING
            log.log(level, "%s: the result of attempt %d of job %d was refused: %s %s", r.name,
                    row.attempt_id, row.job_id, out.sqlstate, out.message)


class Reconciler:
    """Leases unknown attempts and runs ``reconcile`` on each; see the module's docstring."""

    def __init__(self, reconcile: Reconcile, *, conninfo: str = "", name: Optional[str] = None,
                 operations: Optional[Sequence[str]] = None, batch: int = 10,
                 older_than: Seconds = 0, lease: Seconds = 30, wait: Seconds = 2,
                 reconnect_min: Seconds = 0.1, reconnect_max: Seconds = 5,
                 shutdown_grace: Seconds = 30,
                 connect_kwargs: Optional[Dict[str, Any]] = None) -> None:
        """``conninfo`` and ``connect_kwargs`` go to ``psycopg.connect``;
        ``name`` (the reconciler's, default host, pid and a random part),
        ``operations``, ``batch`` (max_rows), ``older_than`` and ``lease`` go
        to ``claim_unknown``; ``wait`` is the pause after a round that found
        nothing; reconnects wait ``reconnect_min`` doubling up to
        ``reconnect_max``; once stopped, a report is tried for at most
        ``shutdown_grace``."""
        _set_reconciler_options(self, reconcile, conninfo, name, operations, batch, older_than,
                                lease, wait, reconnect_min, reconnect_max, shutdown_grace,
                                connect_kwargs)
        self._stopping = threading.Event()
        self._stopped_at = 0.0
        self._link = _Link(self, "jobguard reconciler", self._gives_up)  # type: ignore[arg-type]
        self._lease_delay = 0.0   # the wait after the last failed claim_unknown

    def stop(self) -> None:
        """The current call finishes, the batch's answers are reported, no
        more are leased.  Safe from another thread or a signal handler."""
        if not self._stopping.is_set():
            self._stopped_at = time.monotonic()
            self._stopping.set()

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` was called."""
        return self._stopping.is_set()

    def _gives_up(self) -> bool:
        """Once stopped, reconnecting ends after shutdown_grace."""
        return (self._stopping.is_set()
                and time.monotonic() - self._stopped_at > self.shutdown_grace)

    def _count(self, name: str, n: int = 1) -> None:
        """Add n to one of the stats (what _Link calls)."""
        setattr(self.stats, name, getattr(self.stats, name) + n)

    def run(self, *, until_idle: bool = False, handle_signals: bool = True) -> ReconcilerStats:
        """Lease and reconcile until ``stop()`` (or, with ``until_idle``,
        until a round finds nothing); return the stats.  ``handle_signals``
        (in the main thread): SIGTERM and SIGINT call ``stop()``; a second
        one raises KeyboardInterrupt."""
        previous: Dict[int, Any] = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            while not self._stopping.is_set():
                try:
                    rows = self._link.call(
                        lambda conn, _: api.claim_unknown(conn, self.name, self.operations,
                                                          self.batch, self.older_than,
                                                          self.lease), retry=True)
                except _GaveUp:
                    break
                except psycopg.Error as err:
                    delay = self._lease_failed(err)
                    self._stopping.wait(delay)
                    continue
                self._lease_delay = 0.0
                self.stats.claimed += len(rows)
                if rows:
                    self._run_batch(rows)
                elif until_idle:
                    break
                else:
                    self._stopping.wait(self.wait)
        finally:
            self._link.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.stats

    def _lease_failed(self, err: psycopg.Error) -> float:
        """claim_unknown met a server error: log and count it; the wait
        before the next try (doubling from reconnect_min up to
        reconnect_max)."""
        self.stats.claim_errors += 1
        self._lease_delay = min(max(self._lease_delay * 2, self.reconnect_min),
                                self.reconnect_max)
        log.error("%s: claim_unknown failed (%s); again in %.1fs", self.name,
                  str(err).strip(), self._lease_delay)
        return self._lease_delay

    def _on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        """SIGTERM / SIGINT: stop; a second signal interrupts the call."""
        if self._stopping.is_set():
            raise KeyboardInterrupt
        self.stop()

    def _run_batch(self, rows: List[Unknown]) -> None:
        """Ask reconcile about each row once, in order (until stopped), then
        report: failures at once, results with one finish_many."""
        asked: set[int] = set()
        results: List[Tuple[Unknown, Any]] = []
        try:
            for row in rows:
                if self._stopping.is_set():
                    break
                if row.attempt_id in asked:
                    continue
                asked.add(row.attempt_id)
                answer = answer_of(self, row, lambda: self.reconcile(row))
                if answer is None:
                    continue
                if answer[0] == "fail":
                    self._fail(row, *answer[1])
                else:
                    results.append((row, answer[1]))
        finally:
            self._finish(results)

    def _fail(self, row: Unknown, error: str, retry_in: Optional[Seconds]) -> None:
        """fail_attempt (the provider said no); a repeat after a lost
        connection that finds it failed counts as done."""
        def fail(conn: Conn, tries: int) -> str:
            """One try at fail_attempt."""
            try:
                return api.fail(conn, row.attempt_id, error, retry_in)
            except InvalidTransition as err:
                if tries > 0 and err.state == "failed":
                    return "failed"
                raise
        try:
            self._link.call(fail, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self.stats.report_errors += 1
            log.error("%s: could not fail attempt %d of job %d: %s", self.name, row.attempt_id,
                      row.job_id, err)
        else:
            self.stats.failed += 1

    def _finish(self, results: List[Tuple[Unknown, Any]]) -> None:
        """finish_many for the answered results (repeated after a lost
        connection: an equal result gets the same outcome)."""
        if not results:
            return
        rows = [row for row, _ in results]
        try:
            outcomes = self._link.call(
                lambda conn, _: api.finish_many(conn, [r.attempt_id for r in rows],
                                                [res for _, res in results]), retry=True,
                transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self.stats.report_errors += len(rows)
            log.error("%s: could not report %d results: %s", self.name, len(rows), err)
            return
        count_outcomes(self, rows, outcomes)
