"""jobguard for asyncio: ``AsyncConnection`` (the API as coroutines on
psycopg's ``AsyncConnection``) and ``AsyncWorker`` (the worker loop of
``jobguard.Worker``, on the event loop).

Each call runs the same statement as its synchronous twin in
``jobguard.api`` (the steps are shared, not copied), with the same
arguments, results and exception classes::

    async with await AsyncConnection.connect("dbname=app", autocommit=True) as jg:
        sub = await jg.submit("alice", "order-42", "charge", {"amount": 5}, "main-psp")
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import time

from types import TracebackType
from typing import (Any, Awaitable, Callable, Dict, List, Optional, Sequence, Set, Tuple, Type,
                    TypeVar, Union)

import psycopg
from psycopg.rows import dict_row

from . import api
from .api import Claimed, Seconds, Steps
from .errors import AttemptNotFound, InvalidTransition, ResultMismatch, translate
from .ids import AttemptId
from .reconciler import (ReconcilerStats, _set_reconciler_options, answer_of, count_outcomes,
                         result_answer)
from .worker import (MAX_ERROR, NOT_REPORTABLE, OWN_OPEN_ATTEMPTS, REPORT_TRIES, InProgress,
                     WorkerStats, _set_options, error_text, is_refusal, retry_in_of, retryable,
                     unrecordable)

__all__ = ["AsyncConnection", "AsyncWorker", "AsyncHandler", "AsyncReconciler"]

log = logging.getLogger("jobguard.worker")
R = TypeVar("R")
AConn = psycopg.AsyncConnection[Any]
#: what an AsyncWorker calls for each claimed job: a coroutine function (or
#: a plain function) whose result is the job's result
AsyncHandler = Callable[[Claimed], Union[Awaitable[Any], Any]]


async def run(conn: AConn, steps: Steps[R]) -> R:
    """Run a call's steps (``jobguard.api.<call>.steps(conn, ...)``) on an
    async connection; a jobguard SQLSTATE comes out as its class."""
    sql, params = next(steps)
    try:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params, prepare=api.prepare_flag())
            rows = await cur.fetchall()
    except psycopg.Error as err:
        new = translate(err)
        if new is err:
            raise
        raise new from err
    try:
        steps.send(rows)
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


#: what _run_one returns when nothing is left to record
_REPORTED = object()


class _GaveUp(Exception):
    """The server could not be reached and the worker is no longer waiting for it."""


class _Lost(Exception):
    """The connection was lost during a statement that is not repeated blindly."""


class _ALink:
    """One async connection for one task, opened again with backoff when lost."""

    def __init__(self, worker: "AsyncWorker", role: str, give_up: Callable[[], bool]) -> None:
        """A link for worker; role names it in application_name."""
        self._worker = worker
        self._appname = f"{worker.name} ({role})"[:63]
        self._give_up = give_up
        self._conn: Optional[AConn] = None
        self._ever = False

    async def connect(self) -> AConn:
        """The open connection, opening one (with backoff) if there is none."""
        delay = self._worker.reconnect_min
        while self._conn is None or self._conn.closed:
            try:
                self._conn = await psycopg.AsyncConnection.connect(
                    self._worker.conninfo, autocommit=True, application_name=self._appname,
                    **api.connect_options(self._worker.connect_kwargs))
            except psycopg.OperationalError as err:
                if self._give_up():
                    raise _GaveUp(str(err)) from err
                log.warning("%s: cannot connect (%s); again in %.1fs", self._appname,
                            str(err).strip(), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._worker.reconnect_max)
                continue
            if self._ever:
                self._worker.stats.reconnects += 1
            self._ever = True
        return self._conn

    async def call(self, fn: Callable[[AConn, int], Awaitable[R]], retry: bool,
                   transient: int = 0) -> R:
        """await fn(conn, tries); on a lost connection: with retry, reconnect
        and call again, else raise _Lost.  A retryable server error on an
        intact connection is tried again up to ``transient`` more times
        (see ``_Link.call``).  Other errors propagate."""
        tries = 0
        delay = self._worker.reconnect_min
        while True:
            conn = await self.connect()
            try:
                return await fn(conn, tries)
            except psycopg.Error as err:
                if not (conn.closed or conn.broken):
                    if transient <= 0 or not retryable(err) or self._give_up():
                        raise
                    transient -= 1
                    tries += 1
                    self._worker.stats.report_retries += 1
                    log.warning("%s: %s; trying the same statement again in %.1fs",
                                self._appname, str(err).strip(), delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self._worker.reconnect_max)
                    continue
                log.warning("%s: connection lost (%s)", self._appname, str(err).strip())
                await self.close()
                if not retry:
                    raise _Lost(str(err)) from err
                if self._give_up():
                    raise _GaveUp(str(err)) from err
                tries += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._worker.reconnect_max)

    async def close(self) -> None:
        """Close the connection, if any."""
        if self._conn is not None:
            try:
                await self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None


class AsyncWorker:
    """``jobguard.Worker`` on asyncio: the same loop, options, stats and
    guarantees (the handler runs at most once per attempt; only a refusal
    fails an attempt, a result that cannot be sent marks it unknown, a
    report that meets a server error is tried again; a cut-off claim's attempts
    are adopted; open attempts of its name from before it started are
    marked unknown), with ``await handler(job)`` (a plain function's value
    is used as is) and heartbeats as a task on a connection of its own.
    ``run()`` is a coroutine; with ``handle_signals`` SIGTERM and SIGINT call
    ``stop()`` (a second one cancels the run)."""

    def __init__(self, handler: AsyncHandler, *, conninfo: str = "", name: Optional[str] = None,
                 operations: Optional[Sequence[str]] = None, provider: Optional[str] = None,
                 batch: int = 1, timeout: Seconds = 30, wait: Seconds = 2,
                 heartbeat_every: Optional[Seconds] = None, reconnect_min: Seconds = 0.1,
                 reconnect_max: Seconds = 5, shutdown_grace: Seconds = 30,
                 connect_kwargs: Optional[Dict[str, Any]] = None) -> None:
        """The options of ``jobguard.Worker``."""
        _set_options(self, handler, conninfo, name, operations, provider, batch, timeout, wait,
                     heartbeat_every, reconnect_min, reconnect_max, shutdown_grace,
                     connect_kwargs)
        self._held: Dict[AttemptId, Claimed] = {}
        self._ran: Set[AttemptId] = set()
        self._unreported: Set[AttemptId] = set()
        self._untouchable: Set[AttemptId] = set()
        self._started_up = False
        self._claim_lost = False
        self._claim_delay = 0.0   # the wait after the last failed claim
        self._finish_many: Optional[bool] = None
        self._stopping = asyncio.Event()
        self._stopped_at = 0.0
        self._beat_stop = asyncio.Event()
        self._main = _ALink(self, "jobguard worker", self._main_gives_up)
        self._beat = _ALink(self, "jobguard heartbeat", self._beat_stop.is_set)

    def stop(self) -> None:
        """The current job finishes and reports, nothing more is claimed."""
        if not self._stopping.is_set():
            self._stopped_at = time.monotonic()
            self._stopping.set()

    @property
    def stopping(self) -> bool:
        """True once stop() was called."""
        return self._stopping.is_set()

    def _main_gives_up(self) -> bool:
        """Once stopped: at once if nothing is held, else after shutdown_grace."""
        if not self._stopping.is_set():
            return False
        return not self._held or time.monotonic() - self._stopped_at > self.shutdown_grace

    async def run(self, *, until_idle: bool = False, handle_signals: bool = True) -> WorkerStats:
        """Claim and handle jobs until stop() (or, with until_idle, until
        claims found nothing for wait); return the stats."""
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        installed: List[int] = []
        if handle_signals:
            def on_signal(sig: int) -> None:
                """First signal: stop; a second one cancels the run."""
                if self._stopping.is_set() and me is not None:
                    me.cancel()
                    return
                log.info("%s: %s received, stopping after the current job", self.name,
                         signal.Signals(sig).name)
                self.stop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, on_signal, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        beater = asyncio.create_task(self._beat_loop())
        try:
            idle_since = time.monotonic()
            while not self._stopping.is_set():
                try:
                    jobs = await self._next_jobs()
                except _GaveUp:
                    break
                if jobs:
                    await self._run_batch(jobs)
                    idle_since = time.monotonic()
                elif (until_idle and not self._claim_lost
                      and time.monotonic() - idle_since >= self.wait):
                    break
        finally:
            self._beat_stop.set()
            await beater
            await self._main.close()
            await self._beat.close()
            for sig in installed:
                loop.remove_signal_handler(sig)
        return self.stats

    async def _next_jobs(self) -> List[Claimed]:
        """At start, the earlier open attempts of its name (marked unknown);
        after a cut-off claim, the attempts it began; otherwise a claim."""
        try:
            if not self._started_up:
                for job in await self._main.call(self._own_open_attempts, retry=True):
                    await self._mark_earlier(job)
                self._started_up = True
            if self._claim_lost:
                adopted = await self._main.call(self._own_open_attempts, retry=True)
                self._claim_lost = False
                if adopted:
                    self.stats.adopted += len(adopted)
                    log.info("%s: picked up %d open attempts of its own", self.name,
                             len(adopted))
                    return adopted
        except _Lost:
            return []
        except psycopg.Error as err:
            await self._claim_failed(err)
            return []
        wait = min(self.wait, self.timeout / 3)

        async def claim(conn: AConn, tries: int) -> List[Claimed]:
            """One claim."""
            return await run(conn, api.claim.steps(conn, self.name, self.operations,
                                                   self.timeout, self.batch, self.provider,
                                                   wait))
        try:
            jobs = await self._main.call(claim, retry=False)
        except _Lost:
            self._claim_lost = True
            return []
        except psycopg.Error as err:
            await self._claim_failed(err)
            return []
        self._claim_delay = 0.0
        self.stats.claimed += len(jobs)
        return jobs

    async def _claim_failed(self, err: psycopg.Error) -> None:
        """A claim met a server error: logged, a backoff wait (see
        ``Worker._claim_failed``), and the loop tries again."""
        self.stats.claim_errors += 1
        self._claim_lost = True
        self._claim_delay = min(max(self._claim_delay * 2, self.reconnect_min),
                                self.reconnect_max)
        log.error("%s: claim failed (%s); again in %.1fs", self.name,
                  str(err).strip(), self._claim_delay)
        try:
            await asyncio.wait_for(self._stopping.wait(), self._claim_delay)
        except asyncio.TimeoutError:
            pass

    async def _mark_earlier(self, job: Claimed) -> None:
        """An open attempt of its name from before it started: not run;
        marked unknown, never touched again."""
        self._untouchable.add(job.attempt_id)

        async def mark(conn: AConn, tries: int) -> str:
            """One try at mark_unknown."""
            try:
                return await run(conn, api.mark_unknown.steps(conn, job.attempt_id))
            except InvalidTransition:
                return "gone"
        try:
            if await self._main.call(mark, retry=True) == "unknown":
                self.stats.marked_unknown += 1
        except (_GaveUp, psycopg.Error) as err:
            self.stats.report_errors += 1
            log.error("%s: could not mark attempt %d unknown: %s", self.name, job.attempt_id,
                      err)
        log.warning("%s: attempt %d of job %d was open from before this worker started; "
                    "not run again (its handler may have run)", self.name, job.attempt_id,
                    job.job_id)

    async def _own_open_attempts(self, conn: AConn, tries: int) -> List[Claimed]:
        """Its started or unknown attempts not held and never run."""
        skip = list(self._held) + list(self._ran) + list(self._untouchable)
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(OWN_OPEN_ATTEMPTS, (self.name, skip), prepare=api.prepare_flag())
            return [api.claimed(r) for r in await cur.fetchall()]

    async def _run_batch(self, jobs: List[Claimed]) -> None:
        """Handle the batch in order; once stopping, hand back the rest.
        Results are recorded when the batch ends (one finish_many), or at
        once when batch is 1; a job stays held until then."""
        self._held.update((job.attempt_id, job) for job in jobs)
        done: List[Tuple[Claimed, Any]] = []
        try:
            for i, job in enumerate(jobs):
                if self._stopping.is_set():
                    for rest in jobs[i:]:
                        await self._release(rest)
                    return
                try:
                    result = await self._run_one(job)
                except BaseException:
                    self._held.pop(job.attempt_id, None)
                    raise
                if result is _REPORTED:
                    self._held.pop(job.attempt_id, None)
                else:
                    done.append((job, result))
                    if self.batch == 1:
                        await self._record(done)
                        done = []
        finally:
            await self._record(done)

    async def _run_one(self, job: Claimed) -> Any:
        """Call the handler once; report its error at once, return its
        result to be recorded (_REPORTED: nothing to record)."""
        if job.attempt_id in self._ran or job.attempt_id in self._untouchable:
            log.error("%s: attempt %d was run already; not again", self.name, job.attempt_id)
            return _REPORTED
        self._ran.add(job.attempt_id)
        try:
            result = self.handler(job)
            if inspect.isawaitable(result):
                result = await result
        except InProgress:
            if await self._report_in_progress(job):
                self.stats.in_progress += 1
        except Exception as err:  # the handler's failure, whatever it is
            if not is_refusal(err):
                if await self._report_unknown(job, f"the handler raised {error_text(err)}"):
                    self.stats.handler_errors += 1
            elif await self._report_failure(job, error_text(err), retry_in_of(err)):
                self.stats.failed += 1
        else:
            why = unrecordable(result)
            if why is None:
                return result
            await self._report_unrecorded(job, why)
        self._forget(job)
        return _REPORTED

    def _forget(self, job: Claimed) -> None:
        """Reported: no longer a run attempt, unless its report never got through."""
        if job.attempt_id not in self._unreported:
            self._ran.discard(job.attempt_id)

    async def _record(self, done: List[Tuple[Claimed, Any]]) -> None:
        """Record the results of handlers that ran (see Worker._record)."""
        if not done:
            return
        try:
            if len(done) == 1 or not await self._has_finish_many():
                for job, result in done:
                    await self._report_result(job, result)
                return
            await self._report_many(done)
        finally:
            for job, _ in done:
                self._forget(job)
                self._held.pop(job.attempt_id, None)

    async def _has_finish_many(self) -> bool:
        """Whether the database has finish_many (1.2); asked once."""
        if self._finish_many is None:
            async def ask(conn: AConn, tries: int) -> bool:
                """One look at the catalog."""
                cur = await conn.execute(
                    "SELECT to_regprocedure('jobguard.finish_many(bigint[], jsonb[])') IS NOT NULL",
                    prepare=api.prepare_flag())
                row = await cur.fetchone()
                return bool(row and row[0])
            try:
                self._finish_many = await self._main.call(ask, retry=True)
            except (_GaveUp, psycopg.Error):
                return False
        return self._finish_many

    async def _report_many(self, done: List[Tuple[Claimed, Any]]) -> None:
        """finish_many for the batch (see Worker._report_many)."""
        async def many(conn: AConn, tries: int) -> List[api.FinishOutcome]:
            """One try at finish_many."""
            return await run(conn, api.finish_many.steps(
                conn, [j.attempt_id for j, _ in done], [r for _, r in done]))
        try:
            rows = await self._main.call(many, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, _Lost) as err:
            for job, _ in done:
                self.stats.report_errors += 1
                self._unreported.add(job.attempt_id)
                log.error("%s: could not report the result of attempt %d of job %d: %s",
                          self.name, job.attempt_id, job.job_id, err)
            return
        except psycopg.Error as err:
            log.warning("%s: finish_many refused the batch (%s); finishing one by one",
                        self.name, str(err).strip())
            for job, result in done:
                await self._report_result(job, result)
            return
        for (job, result), row in zip(done, rows):
            if row.outcome is not None:
                setattr(self.stats, row.outcome, getattr(self.stats, row.outcome) + 1)
            elif row.sqlstate in NOT_REPORTABLE:
                self.stats.report_errors += 1
                self._unreported.add(job.attempt_id)
                log.error("%s: could not report the result of attempt %d of job %d: %s",
                          self.name, job.attempt_id, job.job_id, row.message)
            elif retryable(row):
                await self._report_result(job, result)   # the same report, alone, again
            else:
                await self._report_unrecorded(job, f"finish_many refused it ({row.sqlstate}: "
                                                   f"{row.message})")

    async def _report_in_progress(self, job: Claimed) -> bool:
        """The provider says the key is still being processed: mark_unknown,
        never fail.  True once it is unknown."""
        return await self._report_unknown(job, "it is still in progress at the provider")

    async def _report_unknown(self, job: Claimed, why: str) -> bool:
        """mark_unknown, the reason logged, tried again like every report
        (see ``Worker._report_unknown``).  True once it is unknown; never
        run again by this worker (it stays open)."""
        self._untouchable.add(job.attempt_id)
        async def mark(conn: AConn, tries: int) -> str:
            """One try at mark_unknown; a repeat finding it unknown is done."""
            try:
                return await run(conn, api.mark_unknown.steps(conn, job.attempt_id))
            except InvalidTransition as err:
                if tries > 0 and err.state == "unknown":
                    return "unknown"
                raise
        log.warning("%s: attempt %d of job %d marked unknown: %s", self.name,
                    job.attempt_id, job.job_id, why)
        try:
            await self._main.call(mark, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self.stats.report_errors += 1
            self._unreported.add(job.attempt_id)
            log.error("%s: could not mark attempt %d of job %d unknown: %s", self.name,
                      job.attempt_id, job.job_id, err)
            return False
        return True

    async def _report_result(self, job: Claimed, result: Any) -> None:
        """finish, repeated after a lost connection or a retryable server
        error; a result the server cannot take marks the attempt unknown."""
        refused: List[psycopg.Error] = []

        async def finish(conn: AConn, tries: int) -> str:
            """One try at finish_attempt."""
            try:
                return await run(conn, api.finish.steps(conn, job.attempt_id, result))
            except (InvalidTransition, AttemptNotFound, ResultMismatch):
                raise
            except psycopg.Error as err:
                if conn.closed or conn.broken or retryable(err):
                    raise
                refused.append(err)
                return "refused"
        try:
            outcome = await self._main.call(finish, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self.stats.report_errors += 1
            self._unreported.add(job.attempt_id)
            log.error("%s: could not report the result of attempt %d of job %d: %s",
                      self.name, job.attempt_id, job.job_id, err)
            return
        if outcome == "refused":
            err = refused[-1]
            await self._report_unrecorded(
                job, f"finish_attempt refused it ({err.sqlstate or 'error'}: "
                     f"{str(err).strip()})")
        else:
            setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)

    async def _report_unrecorded(self, job: Claimed, why: str) -> None:
        """Mark the attempt unknown: its result cannot be sent (the reason logged)."""
        text = f"UnrecordableResult: the handler's result cannot be recorded: {why}"
        log.error("%s: attempt %d of job %d: %s", self.name, job.attempt_id, job.job_id, text)
        if await self._report_unknown(job, text[:MAX_ERROR]):
            self.stats.unrecorded += 1

    async def _report_failure(self, job: Claimed, error: str,
                              retry_in: Optional[Seconds]) -> bool:
        """fail the attempt; a repeat finding it failed counts as done."""
        async def fail(conn: AConn, tries: int) -> str:
            """One try at fail_attempt."""
            try:
                return await run(conn, api.fail.steps(conn, job.attempt_id, error, retry_in))
            except InvalidTransition as err:
                if tries > 0 and err.state == "failed":
                    return "failed"
                raise
        try:
            await self._main.call(fail, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self.stats.report_errors += 1
            self._unreported.add(job.attempt_id)
            log.error("%s: could not fail attempt %d of job %d: %s", self.name, job.attempt_id,
                      job.job_id, err)
            return False
        return True

    async def _release(self, job: Claimed) -> None:
        """Hand back a claimed attempt that will not run (cancel_attempt)."""
        async def cancel(conn: AConn, tries: int) -> str:
            """One try at cancel_attempt."""
            try:
                return await run(conn, api.cancel_attempt.steps(
                    conn, job.attempt_id, f"worker {self.name} stopped before running it"))
            except InvalidTransition as err:
                if tries > 0 and err.state == "cancelled":
                    return "cancelled"
                raise
        try:
            await self._main.call(cancel, retry=True)
        except (_GaveUp, psycopg.Error) as err:
            self.stats.report_errors += 1
            log.error("%s: could not hand back attempt %d of job %d: %s", self.name,
                      job.attempt_id, job.job_id, err)
        else:
            self.stats.released += 1
        finally:
            self._held.pop(job.attempt_id, None)

    async def _beat_loop(self) -> None:
        """Every heartbeat_every, push back the deadline of each held attempt."""
        refused: Set[AttemptId] = set()
        while True:
            try:
                await asyncio.wait_for(self._beat_stop.wait(), self.heartbeat_every)
                return
            except asyncio.TimeoutError:
                pass
            for attempt_id in [a for a in self._held if a not in refused]:
                if self._beat_stop.is_set():
                    return

                async def beat(conn: AConn, tries: int, a: AttemptId = attempt_id) -> Any:
                    """One heartbeat."""
                    return await run(conn, api.heartbeat.steps(conn, a))
                try:
                    await self._beat.call(beat, retry=False)
                    self.stats.heartbeats += 1
                except (InvalidTransition, AttemptNotFound) as err:
                    refused.add(attempt_id)
                    reported = (isinstance(err, InvalidTransition)
                                and err.state in ("succeeded", "lost", "failed"))
                    if attempt_id in self._held and not reported:
                        self.stats.heartbeats_refused += 1
                        log.warning("%s: heartbeat refused: %s", self.name, err)
                except _Lost:
                    break
                except _GaveUp:
                    return
                except psycopg.Error as err:
                    log.warning("%s: heartbeat failed: %s", self.name, err)


class AsyncReconciler:
    """``jobguard.Reconciler`` on asyncio: the same loop, options, stats and
    guarantees (reconcile is called at most once per row of one
    claim_unknown call; each answer is reported once), with ``await
    reconcile(attempt)`` (a plain function's value is used as is).
    ``run()`` is a coroutine; with ``handle_signals`` SIGTERM and SIGINT
    call ``stop()`` (a second one cancels the run)."""

    def __init__(self, reconcile: Callable[[api.Unknown], Any], *, conninfo: str = "",
                 name: Optional[str] = None, operations: Optional[Sequence[str]] = None,
                 batch: int = 10, older_than: Seconds = 0, lease: Seconds = 30,
                 wait: Seconds = 2, reconnect_min: Seconds = 0.1, reconnect_max: Seconds = 5,
                 shutdown_grace: Seconds = 30,
                 connect_kwargs: Optional[Dict[str, Any]] = None) -> None:
        """The options of ``jobguard.Reconciler``."""
        _set_reconciler_options(self, reconcile, conninfo, name, operations, batch, older_than,
                                lease, wait, reconnect_min, reconnect_max, shutdown_grace,
                                connect_kwargs)
        self._stopping = asyncio.Event()
        self._stopped_at = 0.0
        self._link = _ALink(self, "jobguard reconciler", self._gives_up)  # type: ignore[arg-type]
        self._lease_delay = 0.0   # the wait after the last failed claim_unknown

    def stop(self) -> None:
        """The current call finishes, the batch's answers are reported."""
        if not self._stopping.is_set():
            self._stopped_at = time.monotonic()
            self._stopping.set()

    @property
    def stopping(self) -> bool:
        """True once stop() was called."""
        return self._stopping.is_set()

    def _gives_up(self) -> bool:
        """Once stopped, reconnecting ends after shutdown_grace."""
        return (self._stopping.is_set()
                and time.monotonic() - self._stopped_at > self.shutdown_grace)

    async def run(self, *, until_idle: bool = False,
                  handle_signals: bool = True) -> ReconcilerStats:
        """Lease and reconcile until stop() (or, with until_idle, until a
        round finds nothing); return the stats."""
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        installed: List[int] = []
        if handle_signals:
            def on_signal(sig: int) -> None:
                """First signal: stop; a second one cancels the run."""
                if self._stopping.is_set() and me is not None:
                    me.cancel()
                    return
                self.stop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, on_signal, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):
                    pass

        async def lease(conn: AConn, tries: int) -> List[api.Unknown]:
            """One claim_unknown."""
            return await run(conn, api.claim_unknown.steps(conn, self.name, self.operations,
                                                           self.batch, self.older_than,
                                                           self.lease))
        try:
            while not self._stopping.is_set():
                try:
                    rows = await self._link.call(lease, retry=True)
                except _GaveUp:
                    break
                except psycopg.Error as err:
                    self.stats.claim_errors += 1
                    self._lease_delay = min(max(self._lease_delay * 2, self.reconnect_min),
                                            self.reconnect_max)
                    log.error("%s: claim_unknown failed (%s); again in %.1fs", self.name,
                              str(err).strip(), self._lease_delay)
                    try:
                        await asyncio.wait_for(self._stopping.wait(), self._lease_delay)
                    except asyncio.TimeoutError:
                        pass
                    continue
                self._lease_delay = 0.0
                self.stats.claimed += len(rows)
                if rows:
                    await self._run_batch(rows)
                elif until_idle:
                    break
                else:
                    try:
                        await asyncio.wait_for(self._stopping.wait(), self.wait)
                    except asyncio.TimeoutError:
                        pass
        finally:
            await self._link.close()
            for sig in installed:
                loop.remove_signal_handler(sig)
        return self.stats

    async def _run_batch(self, rows: List[api.Unknown]) -> None:
        """Ask reconcile about each row once, then report."""
        asked: Set[int] = set()
        results: List[Tuple[api.Unknown, Any]] = []
        try:
            for row in rows:
                if self._stopping.is_set():
                    break
                if row.attempt_id in asked:
                    continue
                asked.add(row.attempt_id)
                try:
                    value = self.reconcile(row)
                    if inspect.isawaitable(value):
                        value = await value
                except Exception as err:  # classified as the sync loop does
                    failure = err
                    answer = answer_of(self, row, lambda: _raise(failure))
                else:
                    answer = result_answer(self, row, value)
                if answer is None:
                    continue
                if answer[0] == "fail":
                    await self._fail(row, *answer[1])
                else:
                    results.append((row, answer[1]))
        finally:
            await self._finish(results)

    async def _fail(self, row: api.Unknown, error: str, retry_in: Optional[Seconds]) -> None:
        """fail_attempt; a repeat that finds it failed counts as done."""
        async def fail(conn: AConn, tries: int) -> str:
            """One try at fail_attempt."""
            try:
                return await run(conn, api.fail.steps(conn, row.attempt_id, error, retry_in))
            except InvalidTransition as err:
                if tries > 0 and err.state == "failed":
                    return "failed"
                raise
        try:
            await self._link.call(fail, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self.stats.report_errors += 1
            log.error("%s: could not fail attempt %d of job %d: %s", self.name, row.attempt_id,
                      row.job_id, err)
        else:
            self.stats.failed += 1

    async def _finish(self, results: List[Tuple[api.Unknown, Any]]) -> None:
        """finish_many for the answered results."""
        if not results:
            return
        rows = [row for row, _ in results]

        async def many(conn: AConn, tries: int) -> List[api.FinishOutcome]:
            """One try at finish_many."""
            return await run(conn, api.finish_many.steps(conn, [r.attempt_id for r in rows],
                                                         [res for _, res in results]))
        try:
            outcomes = await self._link.call(many, retry=True, transient=REPORT_TRIES - 1)
        except (_GaveUp, psycopg.Error) as err:
            self.stats.report_errors += len(rows)
            log.error("%s: could not report %d results: %s", self.name, len(rows), err)
            return
        count_outcomes(self, rows, outcomes)


def _raise(err: BaseException) -> Any:
    """Raise err (to classify an exception a coroutine raised)."""
    raise err
