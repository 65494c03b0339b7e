"""jobguard for Python: the jobguard SQL API on psycopg 3, with one
exception class per jobguard SQLSTATE, distinct job and attempt id types,
a worker loop on claim (``Worker``), a reconciler loop on claim_unknown
(``Reconciler``), the same for asyncio (``AsyncConnection``,
``AsyncWorker``, ``AsyncReconciler``), their decisions written once
(``jobguard.loop``), and the certification runner (``certify``; the
command line ``python3 -m jobguard certify``).

Importing this package registers the exception classes with psycopg.
"""

from .api import (Attempt, AttemptState, Claimed, FinishOutcome, Job, JobState, Outcome,
                  Request, Seconds, Submitted, SubmitOutcome, Unknown, attempts, await_job,
                  begin_attempt, cancel_attempt, cancel_job, claim, claim_unknown, fail, finish,
                  finish_many, heartbeat, job, job_state, mark_unknown, provider_key, submit,
                  submit_many)
from .errors import (BY_SQLSTATE, AttemptInFlight, AttemptNotFound, AttemptsExhausted,
                     IdempotencyKeyReused, InvalidParameterValue, InvalidTransition, JobClosed,
                     JobguardError, JobNotFound, NullValueNotAllowed, ProviderNotCertified,
                     ResultMismatch, translate)
from .ids import AttemptId, JobId
from .worker import Handler, InProgress, ProviderRefused, RetryLater, Worker, WorkerStats
from .reconciler import Reconcile, Reconciler, ReconcilerStats
from .aio import AsyncConnection, AsyncHandler, AsyncReconciler, AsyncWorker
from .certify import CertifyError, CertifyReport, Failure, PayloadRightsRequired, certify

__version__ = "1.1.0"

__all__ = [
    "AttemptId", "JobId", "Submitted", "Job", "Attempt", "JobState", "AttemptState",
    "Outcome", "Seconds", "Claimed", "Request", "SubmitOutcome",
    "submit", "begin_attempt", "finish", "fail", "mark_unknown", "cancel_attempt",
    "cancel_job", "job_state", "job", "attempts", "await_job",
    "claim", "heartbeat", "submit_many",
    "Unknown", "FinishOutcome", "claim_unknown", "finish_many", "provider_key",
    "Worker", "WorkerStats", "RetryLater", "ProviderRefused", "InProgress", "Handler",
    "Reconciler", "ReconcilerStats", "Reconcile",
    "AsyncConnection", "AsyncWorker", "AsyncHandler", "AsyncReconciler",
    "certify", "CertifyReport", "Failure", "CertifyError", "PayloadRightsRequired",
    "JobguardError", "IdempotencyKeyReused", "AttemptInFlight", "JobClosed",
    "ProviderNotCertified", "AttemptsExhausted", "InvalidTransition", "ResultMismatch",
    "JobNotFound", "AttemptNotFound", "NullValueNotAllowed", "InvalidParameterValue",
    "BY_SQLSTATE", "translate",
]
