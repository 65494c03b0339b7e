#!/usr/bin/python3
"""jobguard's own hostile calls, for scripts/run-fuzz.

Calls every function of schema jobguard (read from pg_proc, so a new one is
called without a change here) with random and hostile arguments (NULLs,
huge and tiny numbers, 1e400, huge intervals, infinite timestamps, empty,
long and non-ASCII strings, bad jsonb, negative ids, other scopes' ids) in
every transaction context: autocommit, read-only, aborted, savepoint and
ROLLBACK TO, a cursor, PREPARE/EXECUTE, a forced parallel plan, REPEATABLE
READ, SERIALIZABLE, a tiny statement_timeout, and (as the client) a
search_path that puts the client's planted operators first.

A call is a finding when it ends with class XX or 58, loses its
connection, names a parallel operation in its error, overflows (22003,
22008, 22015, 42622) although none of its arguments was extreme, succeeds
in a read-only transaction with a transaction id assigned, succeeds as the
client on an administrative function, makes a planted operator run as
another role (its WARNING), or ends with an SQLSTATE outside the allowed
classes.  Every SQL statement is plain text with literals, so a finding's
statements are its reproduction.

  hostile.py --db DB --user ROLE --admin-user SUPERUSER --seed N --seconds S
             --label NAME --report FILE

Connects with the libpq environment (PGHOST, PGPORT).  Prints a
pg_regress-style line and writes its counts to FILE (JSON).
"""

import argparse
import collections
import json
import random
import re
import sys
import time

import psycopg

# SQLSTATE classes a hostile call may end with: jobguard's refusals (JG),
# bad input (22), constraint (23), transaction state (25), serialization
# and deadlock (40), syntax and privileges (42), feature not supported
# (0A), savepoints (3B), cursors (24, 34), prepared statements (26),
# program limits (54), object state and lock not available (55), and
# 57014, the statement_timeout.
ALLOWED_CLASSES = {"JG", "22", "23", "25", "40", "42", "0A", "3B", "24", "34", "26", "54", "55"}
# "client-decode": psycopg could not read a value the server sent (a
# deadline after year 9999); counted, not a finding
# 2D000: a procedure that commits (purge_batches), CALLed in a transaction block;
# 39P01: a trigger function (table_changed) called as a function
ALLOWED_CODES = {"57014", "2D000", "39P01", "client-decode"}
# out of range: fine only when the call sent an extreme argument
OVERFLOW_CODES = {"22003", "22008", "22015", "42622"}
# functions only operators and administrators may call (the client must
# get an error, never a success)
ADMIN_FUNCTIONS = {
    "grant_client", "grant_reader", "grant_operator", "revoke_client", "apply_grant", "take_back",
    "define_operation", "certify_provider", "revoke_provider", "set_key_policy", "purge",
    "purge_batches", "stats_reset", "configure_shard", "set_provider_policy",
    "grant_flow_routines", "grant_added_routines",
    "mark_refunded", "grant_audit_routines",
}
# functions whose effects (rights, deleted jobs, the shard) a superuser's
# call keeps only inside a transaction rolled back: the run compares roles
# and grants before and after, and needs jobs in every state throughout
ROLLBACK_ONLY = {
    "grant_client", "grant_reader", "grant_operator", "revoke_client", "apply_grant", "take_back",
    "grant_flow_routines", "grant_added_routines", "purge", "purge_batches", "configure_shard",
    "grant_audit_routines",
}
PLANTED = "jobguard-fuzz: planted operator"
CONTEXTS = ["autocommit", "read-only", "aborted", "savepoint", "cursor", "prepared", "parallel",
            "repeatable-read", "serializable", "timeout", "planted-search-path"]


class V:
    """One argument: its SQL literal and whether it is extreme."""

    def __init__(self, sql, extreme=False):
        self.sql = sql
        self.extreme = extreme


def lit(s):
    """A SQL string literal."""
    return "'" + s.replace("'", "''") + "'"


class Gen:
    """Random arguments for every type jobguard takes."""

    def __init__(self, rng, ids, roles):
        self.r = rng
        self.ids = ids
        self.roles = roles

    def names(self):
        """A name: a known one, or a hostile one (empty, long, non-ASCII)."""
        r = self.r
        k = r.random()
        if k < 0.55:
            return V(lit(r.choice(["charge", "refund", "stripe", "slow", "backup", "canary", "fuzz-a",
                                   "fuzz-b", "default", "worker-1", "owner-1", "s-pending-1", "a-pending-1"])))
        if k < 0.7:
            return V(lit(r.choice(["", " ", "\t", "x", "a'b", "ключ", "💳", "NULL", "%s", "\\", "é" * 63, "é" * 62 + "x"])))
        if k < 0.8:
            return V(lit(r.choice(["é", "x", "💳"]) * r.choice([63, 64, 255, 256])), extreme=True)
        if k < 0.85:
            return V(lit("x" * r.choice([1000, 100000])), extreme=True)
        return V(lit("fz-" + str(r.randrange(10 ** 6))))

    def bigint(self):
        """An id: a real one of any kind or scope, or a hostile number."""
        r = self.r
        k = r.random()
        if k < 0.7 and self.ids:
            return V(str(r.choice(self.ids)))
        if k < 0.85:
            return V(r.choice(["0", "-1", "1", "-9223372036854775808", "9223372036854775807", str(r.randrange(10 ** 6))]),
                     extreme=True)
        return V(str(r.randrange(1, 5000)))

    def integer(self):
        """A count, priority, shard number."""
        r = self.r
        if r.random() < 0.6:
            return V(str(r.choice([1, 2, 5, 10, 0, 1000, 16, -1])))
        return V(r.choice(["-2147483648", "2147483647", "1001", "10001", "32768", "-32769", "1024", "2048"]), extreme=True)

    def interval(self):
        """A timeout, delay, window."""
        r = self.r
        if r.random() < 0.6:
            return V(lit(r.choice(["1 second", "30 seconds", "1 minute", "1 hour", "1 day", "0", "1 millisecond",
                                   "-1 second", "2 days"])) + "::interval")
        return V(lit(r.choice(["178000000 years", "-178000000 years", "1 microsecond", "100000 years",
                               "2147483647 days", "2147483647 hours", "-2147483648 days", "1000 years",
                               "9223372036 seconds", "infinity", "P1Y2M3DT4H5M6S"])) + "::interval", extreme=True)

    def numeric(self):
        """A rate."""
        r = self.r
        if r.random() < 0.5:
            return V(r.choice(["1", "10", "0.5", "1000", "0", "-1"]))
        return V(lit(r.choice(["1e-400", "1e400", "NaN", "Infinity", "-Infinity", "1e-20", "1e20", "0.000001",
                               "1e308", "1e-308", "123456789012345678901234567890"])) + "::numeric", extreme=True)

    def timestamptz(self):
        """A run time."""
        r = self.r
        if r.random() < 0.6:
            return V(r.choice(["now()", "now() + interval '1 hour'", "now() - interval '1 day'"]))
        return V(lit(r.choice(["infinity", "-infinity", "294276-12-31 00:00:00+00", "4713-01-01 00:00:00+00 BC",
                               "1970-01-01 00:00:00+00", "2200-01-01 00:00:00+00"])) + "::timestamptz", extreme=True)

    def jsonb(self):
        """A payload or contract, well-formed or not."""
        r = self.r
        k = r.random()
        if k < 0.5:
            return V(lit(r.choice(['{}', '{"id": "ch_1"}', '{"amount": 1}', 'null', '[]', '"s"', '1', 'true',
                                   '{"type": "object"}', '{"type": "object", "required": ["id"]}',
                                   '{"type": "array", "items": {"type": "string"}}', '{"enum": [1, 2]}',
                                   '{"type": "nonsense"}', '{"required": "id"}', '{"properties": 1}',
                                   '{"id": 1e400}', '{"id": "\\u0000"}', '{"id": "ключ"}'])) + "::jsonb")
        if k < 0.6:
            return V(lit(r.choice(['{', 'not json', '{"a":}', ''])) + "::jsonb")
        if k < 0.75:
            d = r.choice([100, 1000, 5000])
            return V(lit('{"a":' * d + '1' + '}' * d) + "::jsonb", extreme=True)
        return V("jsonb_build_object('id', repeat('x', %d))" % r.choice([10, 100000, 2000000]), extreme=True)

    def boolean(self):
        return V(self.r.choice(["true", "false"]))

    def regrole(self):
        """A role: ours, a built-in one, or none."""
        return V(lit(self.r.choice(self.roles + ["postgres", "pg_monitor", "public", "no_such_role", "", "x" * 70])) + "::regrole")

    def value(self, typ):
        """An argument of a pg_catalog type name (arrays included)."""
        r = self.r
        if r.random() < 0.1:
            return V("NULL::" + typ)
        if typ.endswith("[]"):
            base = typ[:-2]
            n = r.choice([0, 1, 2, 3, 5, 10, 1001, 10001])
            if n > 20:
                v = self.value(base)
                return V("array_fill(%s::%s, ARRAY[%d])" % (v.sql, base, n), extreme=True)
            els = [self.value(base) for _ in range(n)]
            return V("ARRAY[%s]::%s" % (", ".join(e.sql for e in els), typ), any(e.extreme for e in els))
        f = {"text": self.names, "bigint": self.bigint, "integer": self.integer, "interval": self.interval,
             "numeric": self.numeric, "timestamp with time zone": self.timestamptz, "jsonb": self.jsonb,
             "boolean": self.boolean, "regrole": self.regrole}.get(typ)
        if f is None:
            return V("NULL::" + typ)
        v = f()
        if typ in ("text", "bigint", "integer", "boolean"):
            v.sql = "%s::%s" % (v.sql, typ)
        return v


class Fuzzer:
    """One role's hostile calls for a bounded time."""

    def __init__(self, args):
        self.a = args
        self.rng = random.Random(args.seed)
        self.calls = 0
        self.episodes = 0
        self.codes = collections.Counter()
        self.contexts = collections.Counter()
        self.findings = {}
        self.client = args.user != args.admin_user
        self.notices = []
        self.admin = self.connect(args.admin_user)
        self.funcs = self.admin.execute("""
            SELECT p.proname, p.prokind, p.proretset, t.typtype = 'c' OR p.proretset OR p.prorettype = 'record'::regtype,
                   ARRAY(SELECT format_type(x, NULL) FROM unnest(p.proargtypes) x), p.pronargdefaults,
                   p.proargnames
              FROM pg_proc p JOIN pg_type t ON t.oid = p.prorettype
             WHERE p.pronamespace = 'jobguard'::regnamespace ORDER BY 1""").fetchall()
        self.roles = [r[0] for r in self.admin.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE 'jobguard_fuzz%'").fetchall()]
        self.ids = []
        self.refresh_ids()
        self.conn = self.connect(args.user)

    def connect(self, user):
        """A connection in autocommit, its notices kept, with safety timeouts."""
        c = psycopg.connect(dbname=self.a.db, user=user, autocommit=True, application_name="jobguard-fuzz",
                             prepare_threshold=None)
        c.add_notice_handler(lambda d: self.notices.append(d.message_primary or ""))
        c.execute("SET statement_timeout = '3s'")
        c.execute("SET lock_timeout = '1s'")
        return c

    def refresh_ids(self):
        """Real ids: jobs and attempts of every state and scope."""
        rows = self.admin.execute("""
            (SELECT job_id FROM jobguard.job_overview ORDER BY random() LIMIT 300)
            UNION ALL (SELECT attempt_id FROM jobguard.attempt_overview ORDER BY random() LIMIT 300)""").fetchall()
        self.ids = [r[0] for r in rows]

    def finding(self, rule, ctx, stmts, code, msg, ep_seed, fn=None):
        """Record a finding once per rule, function and SQLSTATE, counting repeats."""
        if fn is None:
            m = re.search(r"jobguard\.(\w+)\(", stmts[-1]) if stmts else None
            fn = m.group(1) if m else "?"
        key = (rule, fn, code)
        f = self.findings.get(key)
        if f:
            f["count"] += 1
            return
        self.findings[key] = {"rule": rule, "function": fn, "context": ctx, "sqlstate": code,
                              "message": (msg or "")[:300], "episode_seed": ep_seed, "count": 1,
                              "statements": stmts[:]}

    def render(self, fn, gen):
        """A call of fn with random arguments: (sql, extreme, name, is_procedure, returns_rows, types, literals)."""
        name, kind, retset, rows, types, ndef, argnames = fn
        n = len(types)
        k = (n if self.rng.random() < 0.5 else self.rng.randint(n - ndef, n)) if ndef else n
        vals = [gen.value(t) for t in types[:k]]
        named = argnames and self.rng.random() < 0.2 and k == n and all(argnames[:n])
        parts = ["%s => %s" % (argnames[i], v.sql) if named else v.sql for i, v in enumerate(vals)]
        call = "jobguard.%s(%s)" % (name, ", ".join(parts))
        return call, any(v.extreme for v in vals), name, kind == "p", rows, types[:k], [v.sql for v in vals]

    def lifecycle(self, gen, r):
        """Calls that carry one job through its life, with hostile names and
        settings: the operation's contract and retry policy and the
        provider's policy set (by the superuser), then a submit, a chain of
        up to 40 begun and failed attempts, claims, a finish, a heartbeat,
        claim_unknown and stats(), so that a stored value meets the calls
        that read it."""
        op, prov = gen.names(), gen.names()
        key = lit("lc-%d" % r.randrange(10 ** 9))
        sub = "jobguard.submit('lc-owner', %s, %s, '{}', %s)" % (key, op.sql, prov.sql)
        steps = []
        if not self.client:
            b, m = gen.interval(), gen.interval()
            steps.append(("SELECT jobguard.define_operation(%s, %s, %s, %s)" % (op.sql, gen.jsonb().sql, b.sql, m.sql),
                          True, "define_operation"))
            d, n, q = gen.interval(), gen.integer(), gen.numeric()
            steps.append(("SELECT jobguard.set_provider_policy(%s, %s, %s, %s)" % (prov.sql, d.sql, n.sql, q.sql),
                          True, "set_provider_policy"))
        steps.append(("SELECT * FROM " + sub, op.extreme or prov.extreme, "submit"))
        steps.append(("WITH j AS MATERIALIZED (SELECT job_id FROM %s) SELECT count(jobguard.fail_attempt("
                      "jobguard.begin_attempt(j.job_id), 'HTTP 503')) FROM j, generate_series(1, %d)" % (sub, r.choice([1, 3, 40])),
                      op.extreme or prov.extreme, "fail_attempt"))
        steps.append(("SELECT jobguard.finish_attempt(attempt_id, %s) FROM jobguard.claim('lc-worker', ARRAY[%s])"
                      % (gen.jsonb().sql, op.sql), op.extreme, "finish_attempt"))
        steps.append(("SELECT jobguard.heartbeat(attempt_id) FROM jobguard.claim('lc-worker', NULL, '1 hour', 5)",
                      False, "heartbeat"))
        steps.append(("SELECT jobguard.finish_attempt(jobguard.begin_attempt(job_id), '{\"id\": \"x\"}') FROM %s" % sub,
                      op.extreme or prov.extreme, "finish_attempt"))
        steps.append(("SELECT * FROM jobguard.claim_unknown('lc-reconciler', NULL, 10)", False, "claim_unknown"))
        steps.append(("SELECT * FROM jobguard.stats()", False, "stats"))
        steps.append(("SELECT * FROM jobguard.claim('lc-worker', NULL, '1 minute', 10)", False, "claim"))
        # (sql, extreme, name, is_procedure, returns_rows, types, literals): a
        # whole statement, marked by a returns_rows of None
        return [(sql, ext, name, False, None, [], []) for sql, ext, name in steps]

    def run(self, conn, sql, stmts):
        """One statement: None or (sqlstate, message, hint); raises on a lost connection."""
        stmts.append(sql)
        try:
            cur = conn.execute(sql, prepare=False)
            if cur.description:
                cur.fetchall()
            return None
        except RecursionError as e:
            # a jsonb nested deeper than Python's json can load: the
            # harness's own limit, not the server's answer
            return ("client-decode", str(e), "")
        except psycopg.Error as e:
            if isinstance(e, psycopg.DataError) and e.sqlstate is None and not conn.broken:
                return ("client-decode", str(e), "")
            if conn.broken or e.sqlstate is None:
                raise ConnectionError(str(e))
            d = e.diag
            return (e.sqlstate, d.message_primary or "", (d.message_hint or "") + " " + (d.message_detail or ""))

    def judge(self, res, ctx, stmts, extreme, name, ep_seed, is_call=True):
        """Apply the rules to one call's outcome."""
        if res is None:
            if is_call:
                self.codes["ok"] += 1
                if self.client and name in ADMIN_FUNCTIONS:
                    self.finding("administrative function succeeded for the client", ctx, stmts, "ok", "", ep_seed, name)
            return
        code, msg, extra = res
        if is_call:
            self.codes[code] += 1
        cls = code[:2]
        if "parallel" in msg:
            self.finding("error in a parallel operation", ctx, stmts, code, msg, ep_seed, name)
        elif cls in ("XX", "58"):
            self.finding("internal error (class %s)" % cls, ctx, stmts, code, msg, ep_seed, name)
        elif code in OVERFLOW_CODES and not extreme:
            self.finding("out of range without an extreme argument (a stored value?)", ctx, stmts, code, msg, ep_seed, name)
        elif re.search(r"Retry in -\d", extra):
            self.finding("negative retry time in a message", ctx, stmts, code, extra, ep_seed, name)
        elif cls not in ALLOWED_CLASSES and code not in ALLOWED_CODES:
            self.finding("unexpected SQLSTATE", ctx, stmts, code, msg, ep_seed, name)

    def episode(self):
        """One context with one to four calls in it."""
        ep_seed = self.rng.randrange(2 ** 31)
        r = random.Random(ep_seed)
        gen = Gen(r, self.ids, self.roles)
        self.rng, saved = r, self.rng
        try:
            ctxs = CONTEXTS if self.client else CONTEXTS[:-1]
            ctx = r.choice(ctxs)
            if r.random() < 0.3:
                calls = self.lifecycle(gen, r)
            else:
                calls = [self.render(r.choice(self.funcs), gen) for _ in range(r.randint(1, 4))]
            self.contexts[ctx] += 1
            self.notices.clear()
            stmts = []
            try:
                self.in_context(ctx, calls, stmts, ep_seed, r)
            except ConnectionError as e:
                self.finding("connection lost", ctx, stmts, "-", str(e), ep_seed)
                self.conn = self.connect(self.a.user)
            for n in self.notices:
                if n.startswith(PLANTED):
                    self.finding("planted operator ran as another role", ctx, stmts, "WARNING", n, ep_seed,
                                 ",".join(sorted({x[2] for x in calls})))
            self.episodes += 1
        finally:
            self.rng = saved

    def in_context(self, ctx, calls, stmts, ep_seed, r):
        """Run the calls in the context ctx."""
        c = self.conn
        rollback_only = (not self.client) and any(x[2] in ROLLBACK_ONLY for x in calls)
        end = "ROLLBACK" if rollback_only or r.random() < 0.4 else "COMMIT"

        def call_plain(conn, x, wrap=None):
            if x[4] is None:
                sql = x[0]
            else:
                sql = wrap(x) if wrap else (("CALL " if x[3] else ("SELECT * FROM " if x[4] else "SELECT ")) + x[0])
            self.calls += 1
            self.judge(self.run(conn, sql, stmts), ctx, stmts, x[1], x[2], ep_seed)

        if ctx == "parallel":
            # a session of its own: the bug may show on its first call only
            pc = self.connect(self.a.user)
            try:
                if rollback_only:
                    self.run(pc, "BEGIN", stmts)
                for s in ("SET parallel_setup_cost = 0", "SET parallel_tuple_cost = 0",
                          "SET min_parallel_table_scan_size = 0", "SET max_parallel_workers_per_gather = 2"):
                    self.run(pc, s, stmts)
                if r.random() < 0.3:
                    self.run(pc, "SET force_parallel_mode = on", stmts)
                for x in calls:
                    if x[3]:
                        continue
                    if x[4] is None:
                        call_plain(pc, x)
                    elif x[4]:
                        call_plain(pc, x, lambda y: "SELECT (SELECT count(*) FROM %s), count(*) FROM fuzz_big" % y[0])
                    elif r.random() < 0.5:
                        call_plain(pc, x, lambda y: "SELECT %s, count(*) FROM fuzz_big" % y[0])
                    else:
                        call_plain(pc, x, lambda y: "SELECT count(*) FROM fuzz_big WHERE id < 0 OR %s IS NULL" % y[0])
                if rollback_only:
                    self.run(pc, "ROLLBACK", stmts)
            finally:
                pc.close()
            return
        if rollback_only or ctx in ("read-only", "aborted", "savepoint", "cursor", "repeatable-read",
                                   "serializable") or r.random() < 0.3:
            begin = {"read-only": "BEGIN READ ONLY", "repeatable-read": "BEGIN ISOLATION LEVEL REPEATABLE READ",
                     "serializable": "BEGIN ISOLATION LEVEL SERIALIZABLE"}.get(ctx, "BEGIN")
            self.run(c, begin, stmts)
            intx = True
        else:
            intx = False
        try:
            if ctx == "aborted":
                self.run(c, "SELECT 1/0", stmts)
            if ctx == "timeout":
                self.run(c, "SET %sstatement_timeout = '%dms'" % ("LOCAL " if intx else "", r.randint(1, 5)), stmts)
            if ctx == "planted-search-path":
                self.run(c, "SET %ssearch_path = fuzz_planted, pg_catalog, public" % ("LOCAL " if intx else ""), stmts)
            for x in calls:
                if ctx == "savepoint":
                    self.run(c, "SAVEPOINT fz", stmts)
                    call_plain(c, x)
                    self.run(c, "ROLLBACK TO SAVEPOINT fz", stmts)
                    call_plain(c, x)
                elif ctx == "cursor" and not x[3] and x[4] is not None:
                    sql = "DECLARE fzc CURSOR FOR " + ("SELECT * FROM " if x[4] else "SELECT ") + x[0]
                    self.calls += 1
                    self.judge(self.run(c, sql, stmts), ctx, stmts, x[1], x[2], ep_seed)
                    self.judge(self.run(c, "FETCH ALL FROM fzc", stmts), ctx, stmts, x[1], x[2], ep_seed, False)
                    self.run(c, "CLOSE fzc", stmts)
                elif ctx == "prepared" and not x[3] and x[4] is not None:
                    params = ", ".join("$%d" % (i + 1) for i in range(len(x[5])))
                    body = ("SELECT * FROM " if x[4] else "SELECT ") + "jobguard.%s(%s)" % (x[2], params)
                    types = ", ".join(x[5])
                    res = self.run(c, "PREPARE fzp%s AS %s" % ("(%s)" % types if types else "", body), stmts)
                    self.judge(res, ctx, stmts, x[1], x[2], ep_seed, False)
                    for _ in range(r.choice([1, 2, 6])):
                        self.calls += 1
                        ex = "EXECUTE fzp" + ("(%s)" % ", ".join(x[6]) if x[6] else "")
                        self.judge(self.run(c, ex, stmts), ctx, stmts, x[1], x[2], ep_seed)
                    if res is None:
                        self.run(c, "DEALLOCATE fzp", stmts)
                else:
                    call_plain(c, x)
                if ctx == "read-only" and intx:
                    cur = c.execute("SELECT pg_current_xact_id_if_assigned()::text") if c.info.transaction_status == 2 else None
                    xid = cur.fetchone()[0] if cur else None
                    if xid is not None:
                        self.finding("a transaction id assigned in a read-only transaction", ctx, stmts, "ok",
                                     "xid " + xid, ep_seed)
        finally:
            if intx and not c.broken:
                self.run(c, end, stmts)
            if ctx == "prepared" and not c.broken:
                # a prepared statement outlives the transaction that failed
                # to deallocate it
                self.run(c, "DEALLOCATE ALL", stmts)
            if not c.broken:
                if ctx == "timeout" and not intx:
                    self.run(c, "SET statement_timeout = '3s'", stmts)
                if ctx == "planted-search-path" and not intx:
                    self.run(c, "RESET search_path", stmts)

    def main(self):
        """Episodes until the time is up, then the line and the report."""
        stop = time.monotonic() + self.a.seconds
        while time.monotonic() < stop:
            self.episode()
            if self.episodes % 100 == 0:
                self.refresh_ids()
        ok = not self.findings
        print("test %s ... %s" % (self.a.label, "ok" if ok else "FAILED"))
        print("  %s: seed %d, %d episodes, %d calls; contexts: %s" % (
            self.a.label, self.a.seed, self.episodes, self.calls,
            ", ".join("%s %d" % kv for kv in sorted(self.contexts.items()))))
        print("  %s: SQLSTATEs: %s" % (self.a.label, ", ".join("%s %d" % kv for kv in self.codes.most_common())))
        for f in self.findings.values():
            print("  FINDING %s: jobguard.%s, %s (%s x%d), context %s, episode seed %d:\n    %s\n    reproduce (as %s; the last statement is the one that failed):\n      %s" % (
                self.a.label, f["function"], f["rule"], f["sqlstate"], f["count"], f["context"], f["episode_seed"],
                f["message"], self.a.user, ";\n      ".join((s if len(s) < 300 else s[:300] + " ...") for s in f["statements"]) + ";"))
        with open(self.a.report, "w") as fh:
            json.dump({"label": self.a.label, "seed": self.a.seed, "episodes": self.episodes, "calls": self.calls,
                       "sqlstates": dict(self.codes), "findings": list(self.findings.values())}, fh)
        return 0 if ok else 1


def main():
    """Parse the arguments and run."""
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--admin-user", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--report", required=True)
    return Fuzzer(p.parse_args()).main()


if __name__ == "__main__":
    sys.exit(main())
