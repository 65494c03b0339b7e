"""One exception class per jobguard SQLSTATE (class JG), for psycopg 3.

Each class is registered with psycopg under its SQLSTATE, so psycopg itself
raises it from any statement that hits the error, also from your own SQL
(``conn.execute("SELECT jobguard.submit(...)")``), as soon as this module is
imported.  psycopg raises codes it does not know as ``psycopg.DatabaseError``;
these classes subclass exactly that, so ``except psycopg.DatabaseError`` and
``except psycopg.Error`` keep catching them.

The fields a caller acts on (the existing job's id, the blocking attempt,
...) are parsed from the server's message and DETAIL into attributes; a
field the message does not carry is ``None``.  The SQLSTATE decides the
class; the text is only read for these fields.
"""

from __future__ import annotations

import re
from typing import Any, Callable, ClassVar, Dict, List, Optional, Tuple, Type

import psycopg
from psycopg import errors as _pgerrors

from .ids import AttemptId, JobId

__all__ = [
    "JobguardError",
    "IdempotencyKeyReused",
    "AttemptInFlight",
    "JobClosed",
    "ProviderNotCertified",
    "AttemptsExhausted",
    "InvalidTransition",
    "ResultMismatch",
    "JobNotFound",
    "AttemptNotFound",
    "NullValueNotAllowed",
    "InvalidParameterValue",
    "BY_SQLSTATE",
    "translate",
]

# (attribute, "message" or "detail", pattern, converter): the first group
# of the pattern, converted, becomes the attribute.
_Field = Tuple[str, str, str, Callable[[str], Any]]


class JobguardError(psycopg.DatabaseError):
    """Base class of every jobguard error (SQLSTATE class JG)."""

    #: the SPEC's condition name, e.g. ``"idempotency_key_reused"``
    condition: ClassVar[str] = ""
    _fields: ClassVar[List[_Field]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Build the error as psycopg does, then parse its fields."""
        super().__init__(*args, **kwargs)
        texts = {"message": self.diag.message_primary or "",
                 "detail": self.diag.message_detail or ""}
        for name, source, pattern, convert in self._fields:
            m = re.search(pattern, texts[source])
            setattr(self, name, convert(m.group(1)) if m else None)

    @property
    def detail(self) -> Optional[str]:
        """The server's DETAIL line, if any."""
        return self.diag.message_detail

    @property
    def hint(self) -> Optional[str]:
        """The server's HINT line, if any."""
        return self.diag.message_hint


def _job(s: str) -> JobId:
    """A job id parsed from a message."""
    return JobId(int(s))


def _attempt(s: str) -> AttemptId:
    """An attempt id parsed from a message."""
    return AttemptId(int(s))


class IdempotencyKeyReused(JobguardError, code="JG001", name="IDEMPOTENCY_KEY_REUSED"):
    """JG001: the owner's key was used for a different request.

    ``job_id`` is the existing job; ``differs_in`` names what differs."""

    condition = "idempotency_key_reused"
    job_id: Optional[JobId]
    idempotency_key: Optional[str]
    owner_id: Optional[str]
    differs_in: Optional[str]
    _fields = [
        ("job_id", "detail", r"^Job (\d+) was submitted", _job),
        ("idempotency_key", "message", r'^idempotency key "(.*)" of owner ".*" was', str),
        ("owner_id", "message", r'^idempotency key ".*" of owner "(.*)" was', str),
        ("differs_in", "detail", r"this request differs in (.*)\.$", str),
    ]


class AttemptInFlight(JobguardError, code="JG002", name="ATTEMPT_IN_FLIGHT"):
    """JG002: an open attempt (started or unknown) blocks a new one.

    ``blocking_attempt_id`` and ``blocking_state`` name it."""

    condition = "attempt_in_flight"
    job_id: Optional[JobId]
    blocking_attempt_id: Optional[AttemptId]
    blocking_attempt_no: Optional[int]
    blocking_provider: Optional[str]
    blocking_state: Optional[str]
    deadline: Optional[str]
    _fields = [
        ("job_id", "message", r"^job (\d+) already has", _job),
        ("blocking_attempt_id", "detail", r"^Attempt (\d+) ", _attempt),
        ("blocking_attempt_no", "detail", r"^Attempt \d+ \(number (\d+),", int),
        ("blocking_provider", "detail", r'provider "(.*)"\) is', str),
        ("blocking_state", "detail", r"\) is (\w+);", str),
        ("deadline", "detail", r"its deadline (?:is|was) (.*)\.$", str),
    ]


class JobClosed(JobguardError, code="JG003", name="JOB_CLOSED"):
    """JG003: the job succeeded (``completed_by`` holds the winning attempt)
    or was cancelled (``cancelled`` is true)."""

    condition = "job_closed"
    job_id: Optional[JobId]
    completed_by: Optional[AttemptId]
    cancelled: Optional[bool]
    _fields = [
        ("job_id", "message", r"^job (\d+) has", _job),
        ("completed_by", "detail", r"^Attempt (\d+) holds its result", _attempt),
        ("cancelled", "message", r"^job \d+ has (been cancelled|already succeeded)",
         lambda s: s == "been cancelled"),
    ]


class ProviderNotCertified(JobguardError, code="JG004", name="PROVIDER_NOT_CERTIFIED"):
    """JG004: a fallback provider is not certified for the job's operation."""

    condition = "provider_not_certified"
    provider: Optional[str]
    operation: Optional[str]
    job_id: Optional[JobId]
    _fields = [
        ("provider", "message", r'^provider "(.*)" is not certified', str),
        ("operation", "message", r'for operation "(.*)"$', str),
        ("job_id", "detail", r"^Job (\d+) targets", _job),
    ]


class AttemptsExhausted(JobguardError, code="JG005", name="ATTEMPTS_EXHAUSTED"):
    """JG005: the job has used all of its ``max_attempts``."""

    condition = "attempts_exhausted"
    job_id: Optional[JobId]
    max_attempts: Optional[int]
    _fields = [
        ("job_id", "message", r"^job (\d+) has used", _job),
        ("max_attempts", "message", r"all of its (\d+) attempts", int),
    ]


class InvalidTransition(JobguardError, code="JG006", name="INVALID_TRANSITION"):
    """JG006: the attempt's state does not allow the transition."""

    condition = "invalid_transition"
    attempt_id: Optional[AttemptId]
    job_id: Optional[JobId]
    state: Optional[str]
    _fields = [
        ("attempt_id", "message", r"^attempt (\d+) ", _attempt),
        ("job_id", "message", r"^attempt \d+ of job (\d+) ", _job),
        ("state", "message", r": it is (\w+)$", str),
    ]


class ResultMismatch(JobguardError, code="JG007", name="RESULT_MISMATCH"):
    """JG007: the attempt already reported a different result."""

    condition = "result_mismatch"
    attempt_id: Optional[AttemptId]
    job_id: Optional[JobId]
    _fields = [
        ("attempt_id", "message", r"^attempt (\d+) ", _attempt),
        ("job_id", "message", r"^attempt \d+ of job (\d+) ", _job),
    ]


class JobNotFound(JobguardError, code="JG008", name="JOB_NOT_FOUND"):
    """JG008: no job with that id."""

    condition = "job_not_found"
    job_id: Optional[JobId]
    _fields = [("job_id", "message", r"^job (\d+) does not exist", _job)]


class AttemptNotFound(JobguardError, code="JG009", name="ATTEMPT_NOT_FOUND"):
    """JG009: no attempt with that id."""

    condition = "attempt_not_found"
    attempt_id: Optional[AttemptId]
    _fields = [("attempt_id", "message", r"^attempt (\d+) does not exist", _attempt)]


# psycopg's own classes for the two standard codes jobguard raises
NullValueNotAllowed = _pgerrors.NullValueNotAllowed  # 22004
InvalidParameterValue = _pgerrors.InvalidParameterValue  # 22023

#: SQLSTATE -> the class raised for it
BY_SQLSTATE: Dict[str, Type[psycopg.DatabaseError]] = {
    cls.sqlstate: cls  # type: ignore[misc]
    for cls in (IdempotencyKeyReused, AttemptInFlight, JobClosed, ProviderNotCertified,
                AttemptsExhausted, InvalidTransition, ResultMismatch, JobNotFound,
                AttemptNotFound, NullValueNotAllowed, InvalidParameterValue)
}


def translate(err: psycopg.Error) -> psycopg.Error:
    """Return the jobguard class for an error psycopg raised as a plain
    ``DatabaseError`` (only if its registration did not take), else ``err``."""
    cls = BY_SQLSTATE.get(err.sqlstate or "")
    if cls is None or isinstance(err, cls) or err.pgresult is None:
        return err
    new = cls(*err.args, info=err.pgresult)
    new.__cause__ = err
    return new
