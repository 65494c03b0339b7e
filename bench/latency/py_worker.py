"""bench/latency/py_worker.py: one jobguard Python client Worker for latency.js.

Run by bench/latency/latency.js, one process per worker (as Python workers
are deployed: one per core, not threads sharing the GIL):

    python3 py_worker.py NAME BATCH

Connects as the PG* environment says, refuses to start unless the fast
path and synchronous_commit are on in such a session, prints "ready", then
runs a Worker (the client's defaults, batch BATCH) whose handler
notes the job's number (params["i"]) and the wall-clock time it started,
in milliseconds since the epoch, until SIGTERM.  It then prints one JSON
line: those pairs and the Worker's stats, so that latency.js can count
every job's handling and time it.
"""

import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python", "src"))

import psycopg  # noqa: E402

from jobguard import Worker  # noqa: E402


def main() -> None:
    """Check the session, then run one Worker until SIGTERM and report."""
    name, batch = sys.argv[1], int(sys.argv[2])
    with psycopg.connect("") as conn:
        fp, sc = conn.execute("SELECT jobguard.fast_path_status(),"
                              " current_setting('synchronous_commit')").fetchone()
    if fp != "on" or sc != "on":
        print(f"py_worker: fast path {fp!r}, synchronous_commit {sc!r} in a measured session",
              file=sys.stderr)
        sys.exit(1)
    started = []

    def handler(job):
        started.append((job.params["i"], time.time() * 1000.0))
        return {}

    worker = Worker(handler, name=name, batch=batch)
    print("ready", flush=True)
    stats = worker.run(handle_signals=True)
    print(json.dumps({"started": started, "stats": dataclasses.asdict(stats)}), flush=True)


if __name__ == "__main__":
    main()
