#!/usr/bin/python3
"""The server log of one fuzz phase, for scripts/run-fuzz.

  scanlog.py LOG START END LABEL COUNTS_FILE

Reads LOG from byte START to END (the phase's part) and prints a
pg_regress-style line "test LABEL ... ok" or "... FAILED" with each
finding: a server process that died (a signal, PANIC, an assertion, the
postmaster reinitializing), an error of class XX or 58 (the fuzz database
logs with log_error_verbosity = verbose, so its lines carry the SQLSTATE),
or a planted operator that ran as another role (its WARNING), each with
the STATEMENT the server logged after it.  Writes the SQLSTATEs of the
ERROR lines it saw, counted, to COUNTS_FILE (one "CODE N" a line).
"""

import collections
import re
import sys

CRASH = re.compile(r"terminated by signal|was terminated by exception|PANIC:|TRAP:|"
                   r"all server processes terminated|terminating any other active server processes")
CODED = re.compile(r"\b(ERROR|FATAL|PANIC|WARNING):  ([0-9A-Z]{5}): (.*)")
PLANTED = "jobguard-fuzz: planted operator"


def main():
    """Scan the part of the log, print the line and the findings."""
    path, start, end, label, counts_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    with open(path, "rb") as f:
        f.seek(start)
        text = f.read(max(0, end - start)).decode("utf-8", "replace")
    lines = text.splitlines()
    findings = []
    codes = collections.Counter()
    seen = set()
    for i, line in enumerate(lines):
        stmt = ""
        for nxt in lines[i + 1:i + 8]:
            if "STATEMENT:  " in nxt:
                stmt = nxt.split("STATEMENT:  ", 1)[1]
                break
        m = CODED.search(line)
        if m and m.group(1) == "ERROR":
            codes[m.group(2)] += 1
        what = None
        if CRASH.search(line):
            what = "server process died: " + line.strip()
        elif m and m.group(2)[:2] in ("XX", "58"):
            what = "%s %s: %s" % (m.group(1), m.group(2), m.group(3))
        elif PLANTED in line:
            what = "planted operator ran as another role: " + line.split(PLANTED, 1)[1].strip()
        if what:
            key = re.sub(r"\d+", "N", what)
            if key in seen:
                continue
            seen.add(key)
            findings.append((what, stmt))
    print("test %s ... %s" % (label, "FAILED" if findings else "ok"))
    for what, stmt in findings[:20]:
        print("  FINDING %s: %s" % (label, what[:400]))
        if stmt:
            print("    reproduce: %s;" % (stmt if len(stmt) < 2000 else stmt[:2000] + " ..."))
    if len(findings) > 20:
        print("  ... and %d more findings of other kinds" % (len(findings) - 20))
    with open(counts_file, "w") as f:
        for code, n in codes.most_common():
            f.write("%s %d\n" % (code, n))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
