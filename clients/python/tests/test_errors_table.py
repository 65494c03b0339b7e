"""The error classes are generated from src/errors.table, whose templates
say how the server words each error.  Here every error of the table that
has fields is raised on a real server, on both paths (jobguard.fast_path on
and off), from the statements of clients/error-cases.json: each comes out
as its class, no message or DETAIL is left unparsed, and every field of
every class is filled by at least one of them.  A change of wording in C
fails this test instead of silently leaving a field None."""

from __future__ import annotations

import json
import os
import re
import uuid
from typing import Any, Dict, List, Set

import psycopg
import pytest

import jobguard
from jobguard import JobguardError

CASES = os.path.join(os.path.dirname(__file__), "..", "..", "error-cases.json")


def expand(sql: str, k: str) -> str:
    """A case's statement with its placeholders replaced."""
    def job(key: str) -> str:
        """The id of the job submitted with key {k}key."""
        return (f"(SELECT job_id FROM jobguard.job_overview "
                f"WHERE idempotency_key = '{k}{key}')")
    sql = re.sub(r"\{attempt:(\w+)\}", lambda m: (
        f"(SELECT max(attempt_id) FROM jobguard.attempt_overview WHERE job_id = {job(m.group(1))})"),
        sql)
    sql = re.sub(r"\{job:(\w+)\}", lambda m: job(m.group(1)), sql)
    return sql.replace("{k}", k)


@pytest.mark.parametrize("fast_path", ["on", "off"])
def test_every_error_parses_on_a_real_server(database: str, fast_path: str) -> None:
    """Every case raises its code as its class, fully parsed."""
    with open(CASES, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    k = f"errors-{fast_path}-{uuid.uuid4().hex[:6]}-"
    filled: Dict[str, Set[str]] = {}
    with psycopg.connect(dbname=database, autocommit=True) as conn:
        conn.execute(f"SET jobguard.fast_path = {fast_path}")
        row = conn.execute("SHOW jobguard.fast_path").fetchone()
        assert row is not None and row[0] == fast_path
        for case in cases:
            for sql in case["setup"]:
                conn.execute(expand(sql, k))
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(expand(case["raise"], k))
            err = caught.value
            assert err.sqlstate == case["code"], (case, str(err))
            cls = jobguard.BY_SQLSTATE[case["code"]]
            assert isinstance(err, cls) and isinstance(err, JobguardError)
            assert err.unparsed == [], (case["raise"], err.diag.message_primary,
                                        err.diag.message_detail)
            mine = filled.setdefault(case["code"], set())
            mine.update(n for n in err._fields if getattr(err, n) is not None)
    for code, cls in jobguard.BY_SQLSTATE.items():
        fields = getattr(cls, "_fields", {})
        if fields:
            assert filled.get(code) == set(fields), (code, filled.get(code), set(fields))


def test_a_changed_wording_is_seen() -> None:
    """The parser itself: a message no template matches is unparsed."""
    err = jobguard.JobNotFound("x")  # no server result: nothing to parse
    assert err.job_id is None
    cls: Any = jobguard.JobNotFound
    regexes: List[str] = [t[1] for t in cls._templates if t[0] == "message"]
    assert any(re.search(r, "job 42 does not exist") for r in regexes)
    assert not any(re.search(r, "job 42 is not there") for r in regexes)
