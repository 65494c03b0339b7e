"""Distinct id types, so that a job id is never passed where an attempt id
belongs (a type checker catches it; at run time both are plain ints)."""

from typing import NewType

__all__ = ["JobId", "AttemptId"]

JobId = NewType("JobId", int)
AttemptId = NewType("AttemptId", int)
