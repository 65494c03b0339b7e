"""The README's Python example is examples/quickstart.py and doc/clients.md's
worker example examples/worker.py, verbatim, and they run as the doc says (the worker: a
retry after RetryLater, and a clean stop on SIGTERM); its PL/pgSQL block
runs too, and the form the doc warns about fails."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Iterator, List

import psycopg
import pytest

import jobguard

HERE = pathlib.Path(__file__).resolve().parent
CLIENT = HERE.parent
DOC = CLIENT.parent.parent / "doc" / "clients.md"
README = CLIENT.parent.parent / "README.md"
EXAMPLE = CLIENT / "examples" / "quickstart.py"
WORKER = CLIENT / "examples" / "worker.py"


def doc_block(marker: str, doc: pathlib.Path = DOC) -> str:
    """The fenced code block of doc that follows the HTML comment ``marker``."""
    text = doc.read_text()
    m = re.search(re.escape(marker) + r"\s*```[a-z]*(?: [a-z=]+)*\n(.*?)```", text, re.S)
    assert m, f"{doc} has no code block after {marker}"
    return m.group(1)


def test_doc_example_is_the_tested_file() -> None:
    """The README's Python block is examples/quickstart.py."""
    assert doc_block("<!-- example: clients/python/examples/quickstart.py -->",
                     README) == EXAMPLE.read_text()


def test_doc_worker_example_is_the_tested_file() -> None:
    """The doc's worker block is examples/worker.py."""
    assert doc_block("<!-- example: clients/python/examples/worker.py -->") == WORKER.read_text()


def example_env(database: str) -> dict[str, str]:
    """The environment an example runs in: the test database, the client's source."""
    return {**os.environ, "PGDATABASE": database,
            "PYTHONPATH": str(CLIENT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def wait_for(check: Callable[[], Any], seconds: float, what: str) -> Any:
    """Poll check() until it returns something true, and return that."""
    end = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def test_worker_example_retries_and_stops_on_sigterm(database: str) -> None:
    """examples/worker.py retries a busy job after RetryLater's 2 s; on
    SIGTERM during a 1.5 s job it finishes that job, hands back the rest of
    its batch, claims nothing more and exits 0."""
    with psycopg.connect(dbname=database, autocommit=True) as c:
        def submit(params: dict[str, Any]) -> int:
            """Submit one send-email job; its id."""
            return jobguard.submit(c, "shop", uuid.uuid4().hex, "send-email", params,
                                   "smtp").job_id

        def states(job_id: int) -> List[str]:
            """The states of the job's attempts, in order."""
            return [a["state"] for a in jobguard.attempts(c, job_id)]  # type: ignore[arg-type]

        busy = submit({"to": "ann@example.com", "busy": True})
        proc = subprocess.Popen([sys.executable, str(WORKER)], env=example_env(database),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: states(busy) == ["failed", "succeeded"], 15, "the retried job")
            slow = [o.job_id for o in jobguard.submit_many(c, [  # one statement: one batch
                jobguard.Request("shop", uuid.uuid4().hex, "send-email",
                                 {"to": f"u{i}@example.com", "seconds": 1.5}, "smtp")
                for i in range(3)])]
            wait_for(lambda: states(slow[0]) == ["started"], 10, "the first slow job to start")
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        assert out.splitlines() == [f"sent {busy} to ann@example.com",
                                    f"sent {slow[0]} to u0@example.com"], out
        assert [states(j) for j in slow] == [["succeeded"], ["cancelled"], ["cancelled"]]
        assert jobguard.job(c, busy)["result"] == {"sent_to": "ann@example.com"}  # type: ignore[arg-type]
        assert "SIGTERM received" in err
        a1, a2 = jobguard.attempts(c, busy)  # type: ignore[arg-type]
        assert a1["error"] == "RetryLater: mail server busy"


def test_quickstart_runs(database: str) -> None:
    """examples/quickstart.py prints what the doc says."""
    env = {**os.environ, "PGDATABASE": database,
           "PYTHONPATH": str(CLIENT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == "True won succeeded"
    assert re.fullmatch(r"key reused: job \d+ differs in params", out[1]), out


def test_plpgsql_block_catches_by_sqlstate(database: str) -> None:
    """The doc's PL/pgSQL block catches JG001; the condition name is refused."""
    block = doc_block("<!-- example: clients/python/tests/test_docs.py PLPGSQL -->")
    notices: list[str] = []
    with psycopg.connect(dbname=database, autocommit=True) as c:
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        c.execute("""SELECT jobguard.submit('alice', 'order-42', 'charge',
            '{"amount": 1999, "currency": "EUR"}', 'main-psp')""")
        c.execute(block)
        assert len(notices) == 1 and re.fullmatch(
            r"key reused: Job \d+ was submitted with this key; this request differs in params\.",
            notices[0]), notices
        # what the doc says does not work: the condition name
        with pytest.raises(psycopg.errors.UndefinedObject, match="unrecognized exception condition"):
            c.execute(block.replace("SQLSTATE 'JG001'", "idempotency_key_reused"))


DRAIN = CLIENT / "examples" / "drain.py"


def test_readme_drain_loop_is_the_tested_file() -> None:
    """The client README's hand-written loop is examples/drain.py."""
    assert doc_block("<!-- example: clients/python/examples/drain.py -->",
                     CLIENT / "README.md") == DRAIN.read_text()


@pytest.fixture
def drain_database() -> Iterator[str]:
    """A database of its own (the loop drains every "charge" job there)."""
    from conftest import scratch_database
    with scratch_database("drain", setup=["""SELECT jobguard.define_operation('charge',
            '{"type": "object", "required": ["charge_id"]}')"""]) as db:
        yield db


def test_drain_loop_drains_more_jobs_than_a_batch_once_each(drain_database: str) -> None:
    """examples/drain.py drains 250 jobs (3 batches), an in-progress one and
    one the provider declines: each of the 250 succeeded with one attempt
    and its provider key as the result's key; the in-progress one is
    unknown, not failed; only the declined one failed."""
    database = drain_database
    with psycopg.connect(dbname=database, autocommit=True) as c:
        out = jobguard.submit_many(c, [jobguard.Request("shop", uuid.uuid4().hex, "charge",
                                                        {"n": i}, "main-psp")
                                       for i in range(250)])
        jobs = [o.job_id for o in out if o.job_id is not None]
        busy = jobguard.submit(c, "shop", uuid.uuid4().hex, "charge", {"in_progress": True},
                               "main-psp").job_id
        declined = jobguard.submit(c, "shop", uuid.uuid4().hex, "charge", {"declined": True},
                                   "main-psp", max_attempts=1).job_id
        run = subprocess.run([sys.executable, str(DRAIN)], env=example_env(database),
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.splitlines() == ["drained 252"], run.stdout
        rows = c.execute("""SELECT j.job_id, j.state, j.result, a.n, a.key
                              FROM jobguard.job_overview j,
                                   LATERAL (SELECT count(*) AS n,
                                                   max(to_jsonb(x) ->> 'provider_key') AS key
                                              FROM jobguard.attempt_overview x
                                             WHERE x.job_id = j.job_id) a
                             WHERE j.job_id = ANY (%s)""", (jobs,)).fetchall()
        assert len(rows) == 250
        for job_id, state, result, n, key in rows:
            assert (state, n) == ("succeeded", 1), job_id
            assert result == {"charge_id": f"ch_{job_id}", "key": key}
        assert [a["state"] for a in jobguard.attempts(c, busy)] == ["unknown"]
        assert [a["state"] for a in jobguard.attempts(c, declined)] == ["failed"]
