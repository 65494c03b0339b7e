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

A handler per provider: ``Worker(handlers={"stripe": call_stripe, "adyen":
call_adyen})`` runs each attempt with the handler of the provider its row
names (``job.provider``: the job's own, or a fallback its failover route
chose, ``job.failover`` True), and never claims a row for a provider it
has no handler for (claim's ``providers``, 1.3; on a 1.2 database claim's
``provider``, each in turn).  One handler may read ``job.provider`` itself.

The decisions are made once, in ``jobguard.loop`` (without I/O); this
module drives them on psycopg connections and a heartbeat thread, and
``jobguard.aio`` drives the same on asyncio.

Exactly once: the handler runs at most once per attempt.  An attempt whose
handler was called is never run again by this worker, whatever its report
met; open attempts of the worker's name that were there before it started
(an earlier process under the same name may have run their handler) are
marked unknown, not run.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from types import FrameType
from typing import Any, Callable, Dict, Iterator, Optional

import psycopg

from . import api
from .api import Claimed
from .loop import (MAX_ERROR, NOT_REPORTABLE, OWN_OPEN_ATTEMPTS, REPORT_TRIES, Call,
                   Connect, Disconnected, Driving, Execute, InProgress, Invoke, Pause, ProviderRefused,
                   RetryLater, Steps, WorkerCore, WorkerStats, error_text, is_refusal,
                   retry_in_of, retryable, unrecordable)

__all__ = ["Worker", "WorkerStats", "RetryLater", "ProviderRefused", "InProgress", "Handler"]

# the names this module had before the loop's rules moved to jobguard.loop
_ = (MAX_ERROR, NOT_REPORTABLE, OWN_OPEN_ATTEMPTS, REPORT_TRIES, error_text, is_refusal,
     retry_in_of, retryable, unrecordable)

log = logging.getLogger("jobguard.worker")

#: what a worker calls for each claimed job; its return value is the result
Handler = Callable[[Claimed], Any]
Conn = psycopg.Connection[Any]


class Link:
    """One psycopg connection of a loop, and the effects of ``jobguard.loop``
    performed on it (one thread drives it)."""

    def __init__(self, loop: Any) -> None:
        """A link of ``loop`` (its conninfo, connect_kwargs, events)."""
        self._loop = loop
        self._conn: Optional[Conn] = None

    def drive(self, steps: Steps[Any]) -> Any:
        """Run a generator of ``jobguard.loop`` to its end on this link,
        performing each effect it yields; return its value."""
        driving = Driving(steps)
        for effect in driving:
            try:
                driving.send(self.perform(effect))
            except BaseException as err:   # the generator decides what it means
                driving.throw(err)
        return driving.value

    def perform(self, effect: Any) -> Any:
        """Do what one effect asks."""
        if isinstance(effect, (Call, Execute)):
            conn = self._conn
            assert conn is not None, "a statement before Connect"
            try:
                if isinstance(effect, Call):
                    return getattr(api, effect.name)(conn, *effect.args)
                return api._rows(conn, effect.sql, effect.params)
            except psycopg.Error as err:
                if conn.closed or conn.broken or api.stale_statement(err):
                    self.close()
                    raise Disconnected(err) from err
                raise
        if isinstance(effect, Invoke):
            return effect.fn(effect.arg)
        if isinstance(effect, Pause):
            if effect.until is None:
                time.sleep(effect.seconds)
                return False
            return getattr(self._loop, effect.until).wait(effect.seconds)
        if isinstance(effect, Connect):
            if self._conn is not None and not self._conn.closed:
                return False
            self._conn = psycopg.connect(self._loop.conninfo, autocommit=True,
                                         application_name=effect.appname,
                                         **api.connect_options(self._loop.connect_kwargs))
            return True
        raise TypeError(f"not an effect: {effect!r}")

    def close(self) -> None:
        """Close the connection, if any."""
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None


@contextlib.contextmanager
def signals_stop(loop: Any, handle_signals: bool) -> Iterator[None]:
    """While in it (with ``handle_signals``, in the main thread): SIGTERM
    and SIGINT call ``loop.stop()``; a second one raises KeyboardInterrupt."""
    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        """SIGTERM / SIGINT: stop; a second signal interrupts the call."""
        if loop.stopping:
            raise KeyboardInterrupt
        log.info("%s: %s received, stopping after the current job", loop.name,
                 signal.Signals(signum).name)
        loop.stop()
    previous: Dict[int, Any] = {}
    if handle_signals and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Worker(WorkerCore):
    """Claims jobs and runs ``handler`` on each; see the module's docstring."""

    def _setup(self) -> None:
        """Its events and its two connections (the loop's, the heartbeats')."""
        self._stopping = threading.Event()
        self._beat_stop = threading.Event()
        self._main = Link(self)
        self._beat = Link(self)

    def run(self, *, until_idle: bool = False, handle_signals: bool = True) -> WorkerStats:
        """Claim and handle jobs until ``stop()`` (or, with ``until_idle``,
        until claims found nothing for ``wait``); return the stats.
        ``handle_signals`` (in the main thread): SIGTERM and SIGINT call
        ``stop()``; a second one raises KeyboardInterrupt."""
        beater = threading.Thread(target=self._beat.drive, args=(self._beat_loop(),),
                                  name=f"{self.name} heartbeat", daemon=True)
        with signals_stop(self, handle_signals):
            beater.start()
            try:
                self._main.drive(self._loop(until_idle))
            finally:
                self._beat_stop.set()
                beater.join()
                self._main.close()
                self._beat.close()
        return self.stats
