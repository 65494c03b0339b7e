"""jobguard for Python: the jobguard SQL API on psycopg 3, with one
exception class per jobguard SQLSTATE, distinct job and attempt id types,
a worker loop on claim (``Worker``), and the same for asyncio
(``AsyncConnection``, ``AsyncWorker``).

Importing this package registers the exception classes with psycopg.
"""

from .api import (Attempt, AttemptState, Claimed, Job, JobState, Outcome, Request, Seconds,
                  Submitted, SubmitOutcome, attempts, await_job, begin_attempt, cancel_attempt,
                  cancel_job, claim, fail, finish, heartbeat, job, job_state, mark_unknown,
                  submit, submit_many)
from .errors import (BY_SQLSTATE, AttemptInFlight, AttemptNotFound, AttemptsExhausted,
                     IdempotencyKeyReused, InvalidParameterValue, InvalidTransition, JobClosed,
                     JobguardError, JobNotFound, NullValueNotAllowed, ProviderNotCertified,
                     ResultMismatch, translate)
from .ids import AttemptId, JobId
from .worker import Handler, RetryLater, Worker, WorkerStats
from .aio import AsyncConnection, AsyncHandler, AsyncWorker

__version__ = "1.1.0"

__all__ = [
    "AttemptId", "JobId", "Submitted", "Job", "Attempt", "JobState", "AttemptState",
    "Outcome", "Seconds", "Claimed", "Request", "SubmitOutcome",
    "submit", "begin_attempt", "finish", "fail", "mark_unknown", "cancel_attempt",
    "cancel_job", "job_state", "job", "attempts", "await_job",
    "claim", "heartbeat", "submit_many",
    "Worker", "WorkerStats", "RetryLater", "Handler",
    "AsyncConnection", "AsyncWorker", "AsyncHandler",
    "JobguardError", "IdempotencyKeyReused", "AttemptInFlight", "JobClosed",
    "ProviderNotCertified", "AttemptsExhausted", "InvalidTransition", "ResultMismatch",
    "JobNotFound", "AttemptNotFound", "NullValueNotAllowed", "InvalidParameterValue",
    "BY_SQLSTATE", "translate",
]
