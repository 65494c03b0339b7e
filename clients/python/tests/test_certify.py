"""The certification runner (1.3): ``jobguard.certify`` and ``python3 -m
jobguard certify`` replay real inputs through a candidate provider's
handler and certify it only when every output passed the contract (and
the comparison); the evidence has the SPEC's shape; a failing input, a
comparison mismatch or missing payload rights certify nothing."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import uuid
from datetime import datetime
from typing import Any, Iterator, List, Tuple

import psycopg
import pytest

import jobguard
from jobguard import (CertifyError, Claimed, PayloadRightsRequired, Request, Worker,
                      certify, submit_many)

Conn = psycopg.Connection[Any]
SRC = pathlib.Path(__file__).resolve().parent.parent / "src"

#: the operation's contract: a string charge_id, an integer amount
CONTRACT = {"type": "object", "required": ["charge_id", "amount"],
            "properties": {"charge_id": {"type": "string"}, "amount": {"type": "integer"}}}


def succeeded_jobs(conn: Conn, database: str, n: int) -> Tuple[str, List[int]]:
    """A new operation with the contract and n jobs of it, drained by a
    Worker (each result {"charge_id": "ch_<i>", "amount": i}); the
    operation and the job ids, oldest first."""
    op = f"cert-{uuid.uuid4().hex[:10]}"
    conn.execute("SELECT jobguard.define_operation(%s, %s)", (op, json.dumps(CONTRACT)))
    got = submit_many(conn, [Request("alice", f"{op}-{i}", op, {"i": i}, "main-psp")
                             for i in range(n)])
    ids = [o.job_id for o in got if o.job_id is not None]
    w = Worker(lambda job: {"charge_id": f"ch_{job.params['i']}", "amount": job.params["i"]},
               conninfo=f"dbname={database}", operations=[op], wait=0.3)
    assert w.run(until_idle=True, handle_signals=False).won == n
    return op, ids


def same_charge(job: Claimed) -> Any:
    """A candidate that honours the contract: the same result as main-psp."""
    return {"charge_id": f"ch_{job.params['i']}", "amount": job.params["i"]}


def certification(conn: Conn, op: str, provider: str) -> Any:
    """The certification row of (op, provider): certified, evidence; None if none."""
    return conn.execute("SELECT certified, evidence FROM jobguard.certification_overview"
                        " WHERE operation = %s AND provider = %s", (op, provider)).fetchone()


def contract_version(conn: Conn, op: str) -> int:
    """The operation's current contract version."""
    return int(conn.execute("SELECT contract_version FROM jobguard.operations"
                            " WHERE operation = %s", (op,)).fetchone()[0])


def test_a_passing_run_certifies_with_the_evidence(database: str, conn: Conn) -> None:
    """Every recent job replayed through a candidate that keeps the
    contract: certified, the evidence exactly the SPEC's, the handler
    called once per input with the candidate as provider and a key of
    the run; sample=3 takes the three most recent jobs."""
    op, ids = succeeded_jobs(conn, database, 5)
    calls: List[Claimed] = []

    def candidate(job: Claimed) -> Any:
        """Record the call; answer as main-psp did."""
        calls.append(job)
        return same_charge(job)
    report = certify(conn, op, "psp-b", candidate, sample=3)
    assert report.certified and report.failures == []
    assert (report.inputs, report.passed, report.failed, report.sample) == (3, 3, 0, "recent")
    assert sorted(report.job_ids) == sorted(ids[-3:])
    assert sorted(c.job_id for c in calls) == sorted(ids[-3:])
    assert all(c.provider == "psp-b" and c.certification and c.failover and c.attempt_id == 0
               for c in calls)
    assert len({c.provider_key for c in calls}) == 3
    row = certification(conn, op, "psp-b")
    assert row is not None and row[0] is True
    evidence = row[1]
    assert evidence == report.evidence
    assert sorted(evidence) == sorted(["runner", "contract_version", "inputs", "passed",
                                       "failed", "sample", "job_ids", "started_at",
                                       "ended_at"])
    assert evidence["runner"] == f"jobguard-python {jobguard.__version__}"
    assert evidence["contract_version"] == contract_version(conn, op)
    assert (evidence["inputs"], evidence["passed"], evidence["failed"]) == (3, 3, 0)
    assert evidence["sample"] == "recent" and sorted(evidence["job_ids"]) == sorted(ids[-3:])
    assert (datetime.fromisoformat(evidence["started_at"])
            <= datetime.fromisoformat(evidence["ended_at"]))


def test_a_failing_input_certifies_nothing(database: str, conn: Conn) -> None:
    """One output breaks the contract, another handler raises: nothing is
    certified, and each failure names its job, the path and the message."""
    op, ids = succeeded_jobs(conn, database, 4)

    def candidate(job: Claimed) -> Any:
        """Breaks the contract for job 1, raises for job 2."""
        if job.params["i"] == 1:
            return {"charge_id": 17, "amount": 1}
        if job.params["i"] == 2:
            raise TimeoutError("no answer from psp-c")
        return same_charge(job)
    report = certify(conn, op, "psp-c", candidate)
    assert not report.certified and report.evidence is None
    assert (report.inputs, report.passed, report.failed) == (4, 2, 2)
    failures = {f.job_id: f for f in report.failures}
    assert failures[ids[1]].path == "$.charge_id"
    assert failures[ids[1]].message == "expected string, got number"
    assert str(failures[ids[1]]) == f"job {ids[1]}: $.charge_id: expected string, got number"
    assert failures[ids[2]].path == "$"
    assert "TimeoutError: no answer from psp-c" in failures[ids[2]].message
    assert certification(conn, op, "psp-c") is None


def test_a_compare_mismatch_certifies_nothing(database: str, conn: Conn) -> None:
    """Outputs that keep the contract but differ from the job's winning
    result fail the comparison at the first differing path; a compare
    that returns a message fails with it."""
    op, ids = succeeded_jobs(conn, database, 3)

    def candidate(job: Claimed) -> Any:
        """Keeps the contract; job 0's amount is off by one."""
        out = same_charge(job)
        if job.params["i"] == 0:
            out["amount"] += 1
        return out
    report = certify(conn, op, "psp-d", candidate, compare=lambda out, win, job: out == win)
    assert not report.certified and report.failed == 1
    [failure] = report.failures
    assert (failure.job_id, failure.path) == (ids[0], "$.amount")
    assert "differs from the winning result" in failure.message
    said = certify(conn, op, "psp-d", candidate,
                   compare=lambda out, win, job: True if out == win else "amounts differ")
    assert [(f.job_id, f.path, f.message) for f in said.failures] == \
        [(ids[0], "$", "amounts differ")]
    assert certification(conn, op, "psp-d") is None
    good = certify(conn, op, "psp-d", same_charge, compare=lambda out, win, job: out == win)
    assert good.certified and good.passed == 3


@pytest.fixture
def reader_role(conn: Conn) -> Iterator[str]:
    """A login role that reads every scope without payloads; dropped after."""
    role = f"jg_reader_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {role} LOGIN")
    conn.execute("SELECT jobguard.grant_reader(%s::regrole, NULL, payloads => false)", (role,))
    yield role
    conn.execute("SELECT jobguard.revoke_client(%s::regrole)", (role,))
    conn.execute(f"DROP OWNED BY {role}")
    conn.execute(f"DROP ROLE {role}")


def test_without_payload_rights_a_clear_error(database: str, conn: Conn,
                                              reader_role: str) -> None:
    """A reader without payloads sees the jobs but not their params: the
    runner says payload rights are needed, and certifies nothing."""
    op, _ = succeeded_jobs(conn, database, 2)
    called: List[int] = []
    with psycopg.connect(dbname=database, user=reader_role, autocommit=True) as mine:
        with pytest.raises(PayloadRightsRequired) as err:
            certify(mine, op, "psp-e", lambda job: called.append(1) or same_charge(job))
    assert "payload rights" in str(err.value) and "payloads => true" in str(err.value)
    assert called == [] and certification(conn, op, "psp-e") is None


def test_an_inputs_file(database: str, conn: Conn, tmp_path: pathlib.Path) -> None:
    """Inputs from a file: sample "file", the job ids the lines name; a
    line's result is what compare gets, a line naming only its job gets
    that job's winning result; a bad line is a CertifyError."""
    op, ids = succeeded_jobs(conn, database, 2)
    path = tmp_path / "inputs.jsonl"
    path.write_text(json.dumps({"params": {"i": 7}, "result": {"charge_id": "ch_7",
                                                               "amount": 7}}) + "\n\n"
                    + json.dumps({"params": {"i": 1}, "job_id": ids[1]}) + "\n")
    report = certify(conn, op, "psp-f", same_charge, inputs=str(path),
                     compare=lambda out, win, job: out == win)
    assert report.certified and report.sample == "file" and report.job_ids == [ids[1]]
    assert report.evidence is not None and report.evidence["sample"] == "file"
    path.write_text('{"job_id": 3}\n')
    with pytest.raises(CertifyError, match="params"):
        certify(conn, op, "psp-f", same_charge, inputs=str(path))
    with pytest.raises(TypeError):
        certify(conn, op, "psp-f", same_charge, sample=3, inputs=str(path))


def test_a_stale_contract_version_is_not_certified_under(database: str, conn: Conn) -> None:
    """The contract redefined while the handler ran: nothing certified."""
    op, _ = succeeded_jobs(conn, database, 2)

    def redefining(job: Claimed) -> Any:
        """Answer, after the contract changed under the run."""
        with psycopg.connect(dbname=database, autocommit=True) as other:
            other.execute("SELECT jobguard.define_operation(%s, %s)",
                          (op, json.dumps({**CONTRACT, "required": ["charge_id"]})))
        return same_charge(job)
    with pytest.raises(CertifyError, match="changed during the run"):
        certify(conn, op, "psp-g", redefining, sample=1)
    assert certification(conn, op, "psp-g") is None


def run_cli(database: str, cwd: pathlib.Path, *args: str,
            user: str = "") -> subprocess.CompletedProcess[str]:
    """``python3 -m jobguard certify ...`` in cwd against the database."""
    env = dict(os.environ, PYTHONPATH=str(SRC), PGDATABASE=database)
    if user:
        env["PGUSER"] = user
    return subprocess.run([sys.executable, "-m", "jobguard", "certify", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


def test_the_command_line(database: str, conn: Conn, tmp_path: pathlib.Path,
                          reader_role: str) -> None:
    """Exit 0 and the certification when every input passed; 1 with each
    failure printed (job id, path, message) when one failed or differed;
    2 without payload rights, and for a handler that cannot be loaded."""
    op, ids = succeeded_jobs(conn, database, 3)
    (tmp_path / "handlers_cli.py").write_text(textwrap.dedent('''
        """Candidate providers for the certification runner's test."""

        def good(job):
            """Keeps the contract, and main-psp's results."""
            return {"charge_id": f"ch_{job.params['i']}", "amount": job.params["i"]}

        def off(job):
            """Keeps the contract; job 2's amount differs."""
            out = good(job)
            out["amount"] += job.params["i"] == 2
            return out

        def bad(job):
            """Breaks the contract for job 0."""
            return {"charge_id": None, "amount": 0} if job.params["i"] == 0 else good(job)

        def same(out, win, job):
            """The comparison: equal results."""
            return out == win
        '''))
    failed = run_cli(database, tmp_path, "--operation", op, "--provider", "psp-h",
                     "--handler", "handlers_cli:bad")
    assert failed.returncode == 1, failed.stderr
    assert f"failed: job {ids[0]}: $.charge_id: expected string, got null" in failed.stderr
    assert "not certified" in failed.stderr and "1 of 3 inputs failed" in failed.stderr
    differs = run_cli(database, tmp_path, "--operation", op, "--provider", "psp-h",
                      "--handler", "handlers_cli:off", "--compare", "handlers_cli:same",
                      "--sample", "3")
    assert differs.returncode == 1, differs.stderr
    assert f"failed: job {ids[2]}: $.amount: " in differs.stderr
    assert certification(conn, op, "psp-h") is None
    refused = run_cli(database, tmp_path, "--operation", op, "--provider", "psp-h",
                      "--handler", "handlers_cli:good", user=reader_role)
    assert refused.returncode == 2 and "payload rights" in refused.stderr
    missing = run_cli(database, tmp_path, "--operation", op, "--provider", "psp-h",
                      "--handler", "handlers_cli:nothing")
    assert missing.returncode == 2 and "not a function" in missing.stderr
    ok = run_cli(database, tmp_path, "--operation", op, "--provider", "psp-h",
                 "--handler", "handlers_cli:good", "--compare", "handlers_cli:same")
    assert ok.returncode == 0, ok.stderr
    assert f"certified: operation {op}, provider psp-h: 3 of 3 inputs passed" in ok.stdout
    row = certification(conn, op, "psp-h")
    assert row is not None and row[0] is True and row[1]["inputs"] == 3
