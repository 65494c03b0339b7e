"""doc/clients.md's Python example is examples/quickstart.py, verbatim, and
it runs as the doc says; its PL/pgSQL block runs too, and the form the doc
warns about fails."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import psycopg
import pytest

HERE = pathlib.Path(__file__).resolve().parent
CLIENT = HERE.parent
DOC = CLIENT.parent.parent / "doc" / "clients.md"
EXAMPLE = CLIENT / "examples" / "quickstart.py"


def doc_block(marker: str) -> str:
    """The fenced code block that follows the HTML comment ``marker``."""
    text = DOC.read_text()
    m = re.search(re.escape(marker) + r"\s*```[a-z]*\n(.*?)```", text, re.S)
    assert m, f"{DOC} has no code block after {marker}"
    return m.group(1)


def test_doc_example_is_the_tested_file() -> None:
    """The doc's Python block is examples/quickstart.py."""
    assert doc_block("<!-- example: clients/python/examples/quickstart.py -->") == EXAMPLE.read_text()


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
