#!/usr/bin/python3
"""The server log of one fuzz phase, for scripts/run-fuzz.

  scanlog.py LOG START END LABEL COUNTS_FILE

Reads LOG from byte START to END (the phase's part) and prints a
pg_regress-style line "test LABEL ... ok" or "... FAILED" with each
finding: a server process that died (a signal, PANIC, an assertion, the
postmaster reinitializing), an error of class XX or 58 (the fuzz database
logs with log_error_verbosity = verbose, so its lines carry the SQLSTATE),
(but not 58P01 and 58P02 from PostgreSQL's file functions, which sqlsmith
calls with random names, nor the XX000 of an initdb-only function the
superuser's own statement called), or a planted operator that ran as another role
(its WARNING), each with
the STATEMENT the server logged after it.  Writes the SQLSTATEs of the
ERROR lines it saw, counted, to COUNTS_FILE (one "CODE N" a line).
"""

import collections
import os
import re
import sys

CRASH = re.compile(r"terminated by signal|was terminated by exception|PANIC:|TRAP:|"
                   r"all server processes terminated|terminating any other active server processes")
CODED = re.compile(r"\b(ERROR|FATAL|PANIC|WARNING):  ([0-9A-Z]{5}): (.*)")
PLANTED = "jobguard-fuzz: planted operator"
# PostgreSQL's own file functions, which sqlsmith as a superuser calls with
# random names: their "could not open file" (58P01, 58P02) is no finding
FILE_FUNCTIONS = re.compile(r"\b(pg_read_file|pg_read_binary_file|lo_import|lo_export|pg_stat_file|pg_ls_\w+)\(")
# PostgreSQL's own functions for initdb, which refuse a superuser's call
# afterwards with an internal error by design ("cannot advance OID counter
# anymore"): their XX000 in the superuser's own statement is no finding
INITDB_FUNCTIONS = re.compile(r"\bpg_stop_making_pinned_objects\(")

# jobguard's own C sources: an internal error raised in any other file, by
# a statement that calls no jobguard function, is PostgreSQL's own answer
# to the random SQL (sqlsmith reaches elog()s of the core with odd casts and
# typmods: "invalid INTERVAL typmod", timestamp.c), not jobguard's finding
OWN_SOURCES = frozenset(f for f in os.listdir(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                            "..", "..", "src")) if f.endswith(".c"))
PID = re.compile(r"\[(\d+)\]")
LOCATION = re.compile(r"LOCATION:  .*?, ([\w.-]+\.c):\d+")
CALLS_JOBGUARD = re.compile(r"\bjobguard\s*\.\s*\"?\w+\"?\s*\(")


def core_internal_error(lines, i, stmt):
    """Whether the XX000 of line i was raised in PostgreSQL's own code (its
    LOCATION, logged next, names no jobguard source file) by a statement
    that calls no jobguard function.  Without a LOCATION of the same
    backend (its [pid]; other sessions' lines may come between) it is not."""
    pid = PID.search(lines[i])
    for j in range(i + 1, min(i + 3, len(lines))):
        loc = LOCATION.search(lines[j])
        if loc and pid and PID.search(lines[j]) and PID.search(lines[j]).group(1) == pid.group(1):
            return loc.group(1) not in OWN_SOURCES and not CALLS_JOBGUARD.search(stmt)
    return False


def statement_after(lines, i):
    """The statement logged within 8 lines after line i ("" if none); a
    statement of several lines goes on in lines led by a tab.  Walks only
    the lines it reads: the log of a fuzz chunk can hold millions."""
    for j in range(i + 1, min(i + 8, len(lines))):
        if "STATEMENT:  " in lines[j]:
            parts = [lines[j].split("STATEMENT:  ", 1)[1]]
            k = j + 1
            while k < len(lines) and lines[k].startswith("\t"):
                parts.append(lines[k][1:])
                k += 1
            return "\n".join(parts)
    return ""


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
        m = CODED.search(line)
        if m and m.group(1) == "ERROR":
            codes[m.group(2)] += 1
        what = None
        crash = CRASH.search(line)
        stmt = statement_after(lines, i) if (m or crash or PLANTED in line) else ""
        if crash:
            what = "server process died: " + line.strip()
        elif m and m.group(2)[:2] in ("XX", "58") and not (
                (m.group(2) in ("58P01", "58P02") and FILE_FUNCTIONS.search(stmt))
                or ("superuser" in label and m.group(2) == "XX000" and INITDB_FUNCTIONS.search(stmt))
                or (m.group(2) == "XX000" and core_internal_error(lines, i, stmt))):
            what = "%s %s: %s" % (m.group(1), m.group(2), m.group(3))
        elif PLANTED in line and not ("superuser" in label and "fuzz_planted." in stmt):
            # (the superuser's own statement that names the planted schema
            # called it itself: sqlsmith calls every function it finds)
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
