"""bench/node/py_worker.py: one jobguard Python client Worker for drain.js.

Run by bench/node/drain.js, 8 at once, each its own process (as Python
workers are deployed: one per core, not threads sharing the GIL):

    python3 py_worker.py NAME BATCH [prepared]

With "prepared", jobguard.api.prepare_statements is set (psycopg prepares
the statements it runs often).  Connects as the PG* environment says
(drain.js sets PGOPTIONS as for every measured session), refuses to start unless the fast path and
synchronous_commit are on in such a session, prints "ready", waits for
"go" on its standard input (drain.js starts its clock then: the
interpreter's start-up and imports are deployment, not the Worker's
work), then runs a Worker whose no-op handler notes the job's number
(params["i"]) until SIGTERM.  It then prints one JSON line: the numbers it handled and the
Worker's stats, so that drain.js can count every job's handling.
"""

import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python", "src"))

import psycopg  # noqa: E402

import jobguard.api  # noqa: E402
from jobguard import Worker  # noqa: E402


def main() -> None:
    """Check the session, then run one Worker until SIGTERM and report."""
    name, batch = sys.argv[1], int(sys.argv[2])
    jobguard.api.prepare_statements = sys.argv[3:] == ["prepared"]
    with psycopg.connect("") as conn:
        fp, sc = conn.execute("SELECT jobguard.fast_path_status(),"
                              " current_setting('synchronous_commit')").fetchone()
    if fp != "on" or sc != "on":
        print(f"py_worker: fast path {fp!r}, synchronous_commit {sc!r} in a measured session",
              file=sys.stderr)
        sys.exit(1)
    handled = []

    def handler(job):
        handled.append(job.params["i"])
        return {}

    worker = Worker(handler, name=name, batch=batch, wait=1)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        print("py_worker: no \"go\" on standard input", file=sys.stderr)
        sys.exit(1)
    stats = worker.run(handle_signals=True)
    print(json.dumps({"handled": handled, "stats": dataclasses.asdict(stats)}), flush=True)


if __name__ == "__main__":
    main()
