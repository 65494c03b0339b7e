"""jobguard for Python: the jobguard SQL API on psycopg 3, with one
exception class per jobguard SQLSTATE and distinct job and attempt id types.

Importing this package registers the exception classes with psycopg.
"""

from .api import (Attempt, Job, JobState, AttemptState, Outcome, Seconds, Submitted,
                  attempts, await_job, begin_attempt, cancel_attempt, cancel_job, fail,
                  finish, job, job_state, mark_unknown, submit)
from .errors import (BY_SQLSTATE, AttemptInFlight, AttemptNotFound, AttemptsExhausted,
                     IdempotencyKeyReused, InvalidParameterValue, InvalidTransition, JobClosed,
                     JobguardError, JobNotFound, NullValueNotAllowed, ProviderNotCertified,
                     ResultMismatch, translate)
from .ids import AttemptId, JobId

__version__ = "1.0.0"

__all__ = [
    "AttemptId", "JobId", "Submitted", "Job", "Attempt", "JobState", "AttemptState",
    "Outcome", "Seconds",
    "submit", "begin_attempt", "finish", "fail", "mark_unknown", "cancel_attempt",
    "cancel_job", "job_state", "job", "attempts", "await_job",
    "JobguardError", "IdempotencyKeyReused", "AttemptInFlight", "JobClosed",
    "ProviderNotCertified", "AttemptsExhausted", "InvalidTransition", "ResultMismatch",
    "JobNotFound", "AttemptNotFound", "NullValueNotAllowed", "InvalidParameterValue",
    "BY_SQLSTATE", "translate",
]
