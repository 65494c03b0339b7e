"""doc/clients.md's Python example is examples/quickstart.py, verbatim, and
it runs as the doc says."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

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
    assert doc_block("<!-- example: clients/python/examples/quickstart.py -->") == EXAMPLE.read_text()


def test_quickstart_runs(database: str) -> None:
    env = {**os.environ, "PGDATABASE": database,
           "PYTHONPATH": str(CLIENT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == "True won succeeded"
    assert re.fullmatch(r"key reused: job \d+ differs in params", out[1]), out
