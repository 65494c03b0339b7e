"""The loops' decisions without a database: ``jobguard.loop`` yields effects
and is sent what they came to, so a test can drive it by hand — the very
generators ``Worker``, ``AsyncWorker``, ``Reconciler`` and
``AsyncReconciler`` run — and script every answer: a report that meets a
serialization failure, a lost connection, a statement timeout each time; a
claim that fails; a handler that raises; a database with or without
claim's providers."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple

import psycopg
import pytest

from jobguard import Claimed, ProviderRefused, Unknown
from jobguard.api import FinishOutcome
from jobguard.ids import AttemptId, JobId
from jobguard.loop import (HAS_FUNCTION, OWN_OPEN_ATTEMPTS, Call, Connect, Disconnected,
                           Driving, Execute, Invoke, Pause, ReconcilerCore, WorkerCore)


class Core(WorkerCore):
    """The worker's decisions with plain events (no driver)."""

    def _setup(self) -> None:
        """Events only: the test is the driver."""
        self._stopping = threading.Event()
        self._beat_stop = threading.Event()


class RCore(ReconcilerCore):
    """The reconciler's decisions with a plain event (no driver)."""

    def _setup(self) -> None:
        """An event only: the test is the driver."""
        self._stopping = threading.Event()


def job(n: int, provider: str = "psp-a") -> Claimed:
    """A claimed job n."""
    return Claimed(AttemptId(100 + n), JobId(n), 1, "charge", provider, {"n": n},
                   datetime.now(timezone.utc), f"key-{n}")


class Script:
    """Answers the effects of one run: ``calls`` answers each api call by
    name (a list consumed in order: a value, or an exception to raise),
    the statements of the loop's own get ``rows``; every effect is kept."""

    def __init__(self, calls: Dict[str, List[Any]],
                 rows: Optional[Callable[[Execute], Any]] = None) -> None:
        """The answers."""
        self.calls = calls
        self.rows = rows or (lambda e: [])
        self.effects: List[Any] = []
        self.connected = False

    def answer(self, effect: Any) -> Any:
        """What one effect comes to (or raises)."""
        self.effects.append(effect)
        if isinstance(effect, Connect):
            fresh, self.connected = not self.connected, True
            return fresh
        if isinstance(effect, Pause):
            return False
        if isinstance(effect, Invoke):
            return effect.fn(effect.arg)
        if isinstance(effect, Execute):
            return self.rows(effect)
        assert isinstance(effect, Call), effect
        answers = self.calls[effect.name]
        value = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(value, BaseException):
            if isinstance(value, Disconnected):
                self.connected = False
            raise value
        return value

    def names(self) -> List[str]:
        """The api calls made, in order."""
        return [e.name for e in self.effects if isinstance(e, Call)]


def drive(steps: Any, script: Script) -> Any:
    """Drive a generator of jobguard.loop to its end with the script."""
    driving = Driving(steps)
    for effect in driving:
        try:
            driving.send(script.answer(effect))
        except BaseException as err:
            driving.throw(err)
    return driving.value


def worker(handler: Any = None, **options: Any) -> Core:
    """A worker core that stops at the first claim finding nothing."""
    return Core(handler, name="w", wait=0, reconnect_min=0, reconnect_max=0, **options)


def counted(result: Any) -> Tuple[Callable[[Claimed], Any], List[int]]:
    """A handler that counts its calls and answers ``result`` (raises it
    if it is an exception)."""
    calls: List[int] = []

    def handler(j: Claimed) -> Any:
        """Count; answer."""
        calls.append(j.job_id)
        if isinstance(result, BaseException):
            raise result
        return result
    return handler, calls


def test_a_finish_meeting_serialization_failures_is_tried_again() -> None:
    """Two 40001s at the finish, then it is recorded: the same finish
    three times, the handler once, nothing failed."""
    handler, calls = counted({"charge_id": "ch"})
    w = worker(handler)
    s = Script({"claim": [[job(1)], []],
                "finish": [psycopg.errors.SerializationFailure("conflict"),
                           psycopg.errors.SerializationFailure("conflict"), "won"]})
    stats = drive(w._loop(until_idle=True), s)
    assert calls == [1]
    assert s.names() == ["claim", "finish", "finish", "finish", "claim"]
    assert (stats.won, stats.report_retries, stats.failed, stats.report_errors) == (1, 2, 0, 0)


def test_a_report_that_never_gets_through_leaves_the_attempt_open() -> None:
    """A statement timeout at every try: six finishes, then the attempt
    is left (a report error), never failed nor marked unknown, and kept
    among those the worker never runs again."""
    handler, calls = counted({"charge_id": "ch"})
    w = worker(handler)
    s = Script({"claim": [[job(2)], []],
                "finish": [psycopg.errors.QueryCanceled("statement timeout")]})
    stats = drive(w._loop(until_idle=True), s)
    assert calls == [2] and s.names().count("finish") == 6
    assert "fail" not in s.names() and "mark_unknown" not in s.names()
    assert (stats.report_errors, stats.report_retries, stats.failed) == (1, 5, 0)
    assert AttemptId(102) in w._ran and AttemptId(102) in w._unreported


def test_a_finish_cut_off_is_repeated_on_a_new_connection() -> None:
    """The connection breaks at the finish: the worker reconnects and
    sends the same finish again."""
    handler, calls = counted({"charge_id": "ch"})
    w = worker(handler)
    s = Script({"claim": [[job(3)], []],
                "finish": [Disconnected(psycopg.OperationalError("server closed")), "won"]})
    stats = drive(w._loop(until_idle=True), s)
    assert calls == [3] and s.names() == ["claim", "finish", "finish", "claim"]
    assert (stats.won, stats.reconnects) == (1, 1)


def test_only_a_refusal_fails_and_any_other_error_is_unknown() -> None:
    """ProviderRefused fails the attempt; a timeout of the provider call
    marks it unknown; neither runs the handler again."""
    for raised, call, stat in [(ProviderRefused("declined", retry_in=5), "fail", "failed"),
                               (TimeoutError("no answer"), "mark_unknown", "handler_errors")]:
        handler, calls = counted(raised)
        w = worker(handler)
        s = Script({"claim": [[job(4)], []], call: [call if call == "fail" else "unknown"]})
        stats = drive(w._loop(until_idle=True), s)
        assert calls == [4] and s.names() == ["claim", call, "claim"]
        assert getattr(stats, stat) == 1
        if call == "fail":
            [effect] = [e for e in s.effects if isinstance(e, Call) and e.name == "fail"]
            assert effect.args == (AttemptId(104), "ProviderRefused: declined", 5)


def test_a_failed_claim_is_logged_and_tried_again_with_backoff() -> None:
    """A server error in claim: counted, a pause until stopped, a look for
    attempts a claim of this worker began, then a claim again."""
    handler, calls = counted({"charge_id": "ch"})
    w = Core(handler, name="w", wait=0, reconnect_min=0.25, reconnect_max=1)
    s = Script({"claim": [psycopg.errors.InternalError_("boom"), [job(5)], []],
                "finish": ["won"]})
    stats = drive(w._loop(until_idle=True), s)
    assert calls == [5] and stats.claim_errors == 1 and stats.won == 1
    pauses = [e for e in s.effects if isinstance(e, Pause)]
    assert pauses == [Pause(0.25, "_stopping")]
    looks = [e for e in s.effects if isinstance(e, Execute) and e.sql == OWN_OPEN_ATTEMPTS]
    assert len(looks) == 2   # at start, and after the failed claim


def claim_args(s: Script) -> List[Tuple[Any, ...]]:
    """The (provider, providers) of each claim made."""
    return [(e.args[4], e.args[6]) for e in s.effects
            if isinstance(e, Call) and e.name == "claim"]


def test_handlers_claim_with_providers_or_one_provider_in_turn() -> None:
    """With handlers: claim's providers where the database has it; else
    one provider a claim, in turn; each job runs its provider's handler."""
    for has, expected in [(True, [(None, ["psp-a", "psp-b"])] * 2),
                          (False, [("psp-a", None), ("psp-b", None)])]:
        a, a_calls = counted({"charge_id": "a"})
        b, b_calls = counted({"charge_id": "b"})
        w = worker(handlers={"psp-b": b, "psp-a": a})
        s = Script({"claim": [[job(6, "psp-b"), job(7, "psp-a")], []], "finish": ["won"]},
                   rows=lambda e: [{"present": has}] if e.sql == HAS_FUNCTION else [])
        drive(w._loop(until_idle=True), s)
        assert claim_args(s) == expected
        assert (a_calls, b_calls) == ([7], [6])


def test_a_row_without_a_handler_is_handed_back_unrun() -> None:
    """A row for a provider without a handler (an adopted attempt) is
    cancelled, its handler never called."""
    a, a_calls = counted({"charge_id": "a"})
    w = worker(handlers={"psp-a": a})
    s = Script({"claim": [[job(8, "psp-z")], []], "cancel_attempt": ["cancelled"]},
               rows=lambda e: [{"present": True}] if e.sql == HAS_FUNCTION else [])
    stats = drive(w._loop(until_idle=True), s)
    assert a_calls == [] and "cancel_attempt" in s.names() and stats.released == 1


def unknown(n: int) -> Unknown:
    """A leased unknown attempt n."""
    return Unknown(AttemptId(200 + n), JobId(n), "charge", "psp-a", f"key-{n}", {"n": n},
                   datetime.now(timezone.utc), False)


def test_the_reconcilers_finish_many_is_tried_again() -> None:
    """The reconciler's finish_many meets a 40001 once: the same call
    again; reconcile was asked once per row; a refusal fails its row."""
    asked: List[int] = []

    def reconcile(u: Unknown) -> Any:
        """Found for row 1, refused for row 2, not known for row 3."""
        asked.append(u.job_id)
        if u.job_id == 2:
            raise ProviderRefused("never charged")
        return {"charge_id": "ch"} if u.job_id == 1 else None
    r = RCore(reconcile, name="r", wait=0, reconnect_min=0, reconnect_max=0)
    out = FinishOutcome(0, AttemptId(201), "won", None, None)
    s = Script({"claim_unknown": [[unknown(1), unknown(2), unknown(3)], []],
                "fail": ["failed"],
                "finish_many": [psycopg.errors.SerializationFailure("conflict"), [out]]})
    stats = drive(r._loop(until_idle=True), s)
    assert asked == [1, 2, 3]
    assert s.names() == ["claim_unknown", "fail", "finish_many", "finish_many", "claim_unknown"]
    assert (stats.won, stats.failed, stats.left, stats.report_retries) == (1, 1, 1, 1)


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), SystemExit(3)])
def test_an_interrupt_in_the_handler_still_reports_nothing_twice(raised: BaseException) -> None:
    """A KeyboardInterrupt (a second SIGINT) in the handler ends the loop
    with it; the attempt stays among the run ones."""
    handler, calls = counted(raised)
    w = worker(handler)
    s = Script({"claim": [[job(9)], []]})
    with pytest.raises(type(raised)):
        drive(w._loop(until_idle=True), s)
    assert calls == [9] and s.names() == ["claim"] and AttemptId(109) in w._ran
