"""jobguard for asyncio: ``AsyncConnection`` (the API as coroutines on
psycopg's ``AsyncConnection``), ``AsyncWorker`` and ``AsyncReconciler``
(the loops of ``jobguard.Worker`` and ``jobguard.Reconciler``: the same
decisions, ``jobguard.loop``'s, driven on the event loop).

Each call runs the same statement as its synchronous twin in
``jobguard.api`` (the steps are shared, not copied), with the same
arguments, results and exception classes::

    async with await AsyncConnection.connect("dbname=app", autocommit=True) as jg:
        sub = await jg.submit("alice", "order-42", "charge", {"amount": 5}, "main-psp")
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal

from types import TracebackType
from typing import (Any, Awaitable, Callable, Dict, Iterator, List, Optional, Sequence,
                    Type, TypeVar, Union)

import psycopg
from psycopg.rows import dict_row

from . import api
from .api import Claimed, Steps
from .errors import translate
from .ids import AttemptId
from .loop import (Call, Connect, Disconnected, Driving, Execute, Invoke, Pause, ReconcilerCore,
                   ReconcilerStats, WorkerCore, WorkerStats)

__all__ = ["AsyncConnection", "AsyncWorker", "AsyncHandler", "AsyncReconciler"]

log = logging.getLogger("jobguard.worker")
R = TypeVar("R")
AConn = psycopg.AsyncConnection[Any]
#: what an AsyncWorker calls for each claimed job: a coroutine function (or
#: a plain function) whose result is the job's result
AsyncHandler = Callable[[Claimed], Union[Awaitable[Any], Any]]


async def rows(conn: AConn, sql: str, args: Sequence[Any]) -> List[Dict[str, Any]]:
    """Run one statement and return its rows as dicts; a jobguard SQLSTATE
    comes out as its class (``api._rows`` on an async connection)."""
    try:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, args, prepare=api.prepare_flag())
            return await cur.fetchall()
    except psycopg.Error as err:
        new = translate(err)
        if new is err:
            raise
        raise new from err


async def run(conn: AConn, steps: Steps[R]) -> R:
    """Run a call's steps (``jobguard.api.<call>.steps(conn, ...)``) on an
    async connection; a jobguard SQLSTATE comes out as its class."""
    sql, params = next(steps)
    found = await rows(conn, sql, params)
    try:
        steps.send(found)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise RuntimeError("a call runs one statement")


def _method(name: str) -> Any:
    """The AsyncConnection method running api.<name>'s steps."""
    call = getattr(api, name)

    async def method(self: "AsyncConnection", *args: Any, **kwargs: Any) -> Any:
        return await run(self.conn, call.steps(self.conn, *args, **kwargs))
    method.__name__ = name
    method.__qualname__ = f"AsyncConnection.{name}"
    method.__doc__ = call.__doc__
    method.__signature__ = inspect.signature(call.steps).replace(  # type: ignore[attr-defined]
        parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                    *list(inspect.signature(call.steps).parameters.values())[1:]])
    return method


class AsyncConnection:
    """The jobguard API on a ``psycopg.AsyncConnection``: every function of
    ``jobguard`` (``submit``, ``begin_attempt``, ``finish``, ``claim``, ...)
    as a coroutine method without the connection argument.  ``conn`` is the
    psycopg connection (its transactions are yours, as in the sync API)."""

    submit: Callable[..., Awaitable[api.Submitted]]
    begin_attempt: Callable[..., Awaitable[AttemptId]]
    finish: Callable[..., Awaitable[api.Outcome]]
    fail: Callable[..., Awaitable[str]]
    mark_unknown: Callable[..., Awaitable[str]]
    cancel_attempt: Callable[..., Awaitable[str]]
    cancel_job: Callable[..., Awaitable[str]]
    job_state: Callable[..., Awaitable[api.JobState]]
    job: Callable[..., Awaitable[api.Job]]
    attempts: Callable[..., Awaitable[List[api.Attempt]]]
    await_job: Callable[..., Awaitable[api.JobState]]
    claim: Callable[..., Awaitable[List[Claimed]]]
    heartbeat: Callable[..., Awaitable[Any]]
    submit_many: Callable[..., Awaitable[List[api.SubmitOutcome]]]
    claim_unknown: Callable[..., Awaitable[List[api.Unknown]]]
    finish_many: Callable[..., Awaitable[List[api.FinishOutcome]]]
    provider_key: Callable[..., Awaitable[Optional[str]]]

    def __init__(self, conn: AConn) -> None:
        """Wrap an open psycopg AsyncConnection."""
        self.conn = conn

    @classmethod
    async def connect(cls, conninfo: str = "", **kwargs: Any) -> "AsyncConnection":
        """Open a psycopg AsyncConnection (same arguments) and wrap it."""
        return cls(await psycopg.AsyncConnection.connect(conninfo, **api.connect_options(kwargs)))

    async def close(self) -> None:
        """Close the connection."""
        await self.conn.close()

    async def __aenter__(self) -> "AsyncConnection":
        """``async with``: the connection, closed at the end."""
        return self

    async def __aexit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        """Close the connection."""
        await self.close()


for _name in ("submit", "begin_attempt", "finish", "fail", "mark_unknown", "cancel_attempt",
              "cancel_job", "job_state", "job", "attempts", "await_job", "claim", "heartbeat",
              "submit_many", "claim_unknown", "finish_many", "provider_key"):
    setattr(AsyncConnection, _name, _method(_name))


class ALink:
    """One async psycopg connection of a loop, and the effects of
    ``jobguard.loop`` performed on it (one task drives it)."""

    def __init__(self, loop: Any) -> None:
        """A link of ``loop`` (its conninfo, connect_kwargs, events)."""
        self._loop = loop
        self._conn: Optional[AConn] = None

    async def drive(self, steps: Any) -> Any:
        """Run a generator of ``jobguard.loop`` to its end on this link
        (see ``jobguard.worker.Link.drive``); return its value."""
        driving = Driving(steps)
        for effect in driving:
            try:
                driving.send(await self.perform(effect))
            except BaseException as err:   # the generator decides what it means
                driving.throw(err)
        return driving.value

    async def perform(self, effect: Any) -> Any:
        """Do what one effect asks."""
        if isinstance(effect, (Call, Execute)):
            conn = self._conn
            assert conn is not None, "a statement before Connect"
            try:
                if isinstance(effect, Call):
                    return await run(conn, getattr(api, effect.name).steps(conn, *effect.args))
                return await rows(conn, effect.sql, effect.params)
            except psycopg.Error as err:
                if conn.closed or conn.broken or api.stale_statement(err):
                    await self.close()
                    raise Disconnected(err) from err
                raise
        if isinstance(effect, Invoke):
            value = effect.fn(effect.arg)
            return (await value) if inspect.isawaitable(value) else value
        if isinstance(effect, Pause):
            if effect.until is None:
                await asyncio.sleep(effect.seconds)
                return False
            event = getattr(self._loop, effect.until)
            try:
                await asyncio.wait_for(event.wait(), effect.seconds)
            except asyncio.TimeoutError:
                pass
            return event.is_set()
        if isinstance(effect, Connect):
            if self._conn is not None and not self._conn.closed:
                return False
            self._conn = await psycopg.AsyncConnection.connect(
                self._loop.conninfo, autocommit=True, application_name=effect.appname,
                **api.connect_options(self._loop.connect_kwargs))
            return True
        raise TypeError(f"not an effect: {effect!r}")

    async def close(self) -> None:
        """Close the connection, if any."""
        if self._conn is not None:
            try:
                await self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None


@contextlib.contextmanager
def signals_stop(loop: Any, handle_signals: bool) -> Iterator[None]:
    """While in it (with ``handle_signals``): SIGTERM and SIGINT call
    ``loop.stop()``; a second one cancels the running task."""
    events = asyncio.get_running_loop()
    me = asyncio.current_task()
    installed: List[int] = []

    def on_signal(sig: int) -> None:
        """First signal: stop; a second one cancels the run."""
        if loop.stopping and me is not None:
            me.cancel()
            return
        log.info("%s: %s received, stopping after the current job", loop.name,
                 signal.Signals(sig).name)
        loop.stop()
    if handle_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                events.add_signal_handler(sig, on_signal, sig)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):
                pass
    try:
        yield
    finally:
        for sig in installed:
            events.remove_signal_handler(sig)


class AsyncWorker(WorkerCore):
    """``jobguard.Worker`` on asyncio: the same loop, options, stats and
    guarantees (the handler runs at most once per attempt; only a refusal
    fails an attempt, a result that cannot be sent marks it unknown, a
    report that meets a server error is tried again; a cut-off claim's attempts
    are adopted; open attempts of its name from before it started are
    marked unknown; ``handlers`` a handler per provider), with ``await
    handler(job)`` (a plain function's value is used as is) and heartbeats
    as a task on a connection of its own.  ``run()`` is a coroutine; with
    ``handle_signals`` SIGTERM and SIGINT call ``stop()`` (a second one
    cancels the run)."""

    def _setup(self) -> None:
        """Its events and its two connections (the loop's, the heartbeats')."""
        self._stopping = asyncio.Event()
        self._beat_stop = asyncio.Event()
        self._main = ALink(self)
        self._beat = ALink(self)

    async def run(self, *, until_idle: bool = False, handle_signals: bool = True) -> WorkerStats:
        """Claim and handle jobs until stop() (or, with until_idle, until
        claims found nothing for wait); return the stats."""
        with signals_stop(self, handle_signals):
            beater = asyncio.create_task(self._beat.drive(self._beat_loop()))
            try:
                await self._main.drive(self._loop(until_idle))
            finally:
                self._beat_stop.set()
                await beater
                await self._main.close()
                await self._beat.close()
        return self.stats


class AsyncReconciler(ReconcilerCore):
    """``jobguard.Reconciler`` on asyncio: the same loop, options, stats and
    guarantees (reconcile is called at most once per row of one
    claim_unknown call; each answer is reported once), with ``await
    reconcile(attempt)`` (a plain function's value is used as is).
    ``run()`` is a coroutine; with ``handle_signals`` SIGTERM and SIGINT
    call ``stop()`` (a second one cancels the run)."""

    def _setup(self) -> None:
        """Its event and its connection."""
        self._stopping = asyncio.Event()
        self._link = ALink(self)

    async def run(self, *, until_idle: bool = False,
                  handle_signals: bool = True) -> ReconcilerStats:
        """Lease and reconcile until stop() (or, with until_idle, until a
        round finds nothing); return the stats."""
        with signals_stop(self, handle_signals):
            try:
                await self._link.drive(self._loop(until_idle))
            finally:
                await self._link.close()
        return self.stats
