"""The pooler pass (scripts/run-pooler-tests): jobguard's SQL and both
clients through pgbouncer in transaction mode, with a pool smaller than
the number of clients.

Environment: PG* name the server itself (the direct connection the
handlers record their runs on and the checks read through); POOLER_PORT
is pgbouncer's port on 127.0.0.1 (its admin console is database
"pgbouncer"); POOLER_DB the test database; NODE_PATH finds the Node
client.  Prints one line per check, "test pooler-... ... ok" or
"... FAILED (why)", each followed by a "# counts" line; exits 1 on any
failure.
"""

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List

import psycopg

import jobguard
from jobguard import aio

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PORT = os.environ["POOLER_PORT"]
DB = os.environ["POOLER_DB"]
USER = os.environ.get("PGUSER", "postgres")
WORKERS = 6            # clients per check, twice pgbouncer's pool of 3
DRAIN_JOBS = 2000
failures = 0


def pooled(db: str = DB) -> str:
    """The conninfo of a database through pgbouncer."""
    return f"host=127.0.0.1 port={PORT} dbname={db} user={USER}"


def direct(db: str = DB) -> psycopg.Connection:
    """A connection to the server itself (PGHOST, PGPORT), autocommit."""
    return psycopg.connect(dbname=db, autocommit=True)


def pooled_env(db: str = DB) -> Dict[str, str]:
    """The environment of a program that connects through pgbouncer."""
    env = dict(os.environ, PGHOST="127.0.0.1", PGPORT=PORT, PGDATABASE=db)
    env.pop("PGOPTIONS", None)
    return env


class Counter(logging.Handler):
    """Counts the warnings and errors the clients log (what they saw)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.n = 0
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        """Count one record, keep its text."""
        self.n += 1
        self.last = record.getMessage()[:200]


logged = Counter()
logging.getLogger().addHandler(logged)
logging.getLogger().setLevel(logging.WARNING)
logging.lastResort = None


def report(name: str, problems: List[str], counts: Dict[str, Any]) -> None:
    """Print a check's pg_regress-style line and its counts."""
    global failures
    if problems:
        failures += 1
        print(f"test {name} ... FAILED ({'; '.join(problems)[:600]})", flush=True)
    else:
        print(f"test {name} ... ok", flush=True)
    print(f"# {name} counts: {json.dumps(counts)}", flush=True)


def check(name: str, fn: Callable[[], Dict[str, Any]]) -> None:
    """Run one check; an exception in it is a failure."""
    problems: List[str] = []
    t0 = time.monotonic()
    try:
        counts = fn(problems)
    except Exception as err:   # the check itself broke: that is a failure too
        problems.append(f"{type(err).__name__}: {err}")
        counts = {}
    counts["seconds"] = round(time.monotonic() - t0, 1)
    report(name, problems, counts)


def fresh_db(name: str) -> None:
    """Drop and create a database with jobguard, on the server itself;
    pgbouncer's idle connections to an older one are closed first."""
    admin("KILL " + name)
    admin("RESUME " + name)
    with direct("postgres") as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {name}")
    with direct(name) as c:
        c.execute("CREATE EXTENSION jobguard")


def admin(command: str) -> str:
    """Run a command on pgbouncer's admin console (simple protocol: psql)."""
    r = subprocess.run(["psql", "-X", "-At", "-F", "|", "-h", "127.0.0.1", "-p", PORT,
                        "-U", USER, "-d", "pgbouncer", "-c", command],
                       capture_output=True, text=True, timeout=30)
    return r.stdout + r.stderr


def swap(how: str) -> int:
    """Replace pgbouncer's server connections of the test database in the
    middle of a drain: 'reconnect' (the admin console's RECONNECT: each is
    closed once released, as server_lifetime does) or 'terminate'
    (pg_terminate_backend of each, whatever it is doing).  Returns how
    many server connections there were."""
    pids = [line.split("|") for line in admin("SHOW SERVERS").splitlines() if "|" in line]
    # columns: type user database state addr port local_addr local_port
    # connect_time request_time wait wait_us close_needed ptr link
    # remote_pid ...
    ours = [int(f[15]) for f in pids if len(f) > 15 and f[2] == DB and f[15].isdigit()]
    if how == "reconnect":
        admin("RECONNECT " + DB)
    else:
        with direct() as c:
            for pid in ours:
                c.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return len(ours)


def submit_direct(op: str, n: int, owner: str) -> None:
    """Submit n jobs of an operation on the server itself."""
    with direct() as c:
        c.execute("""SELECT count(*) FROM jobguard.submit_many(
            array_fill(%s::text, ARRAY[%s]), (SELECT array_agg(%s || g) FROM generate_series(1, %s) g),
            array_fill(%s::text, ARRAY[%s]), array_fill('{}'::jsonb, ARRAY[%s]),
            array_fill('psp'::text, ARRAY[%s]))""", (owner, n, op + "-", n, op, n, n, n))


def db_check(op: str, n: int, client: str, problems: List[str]) -> Dict[str, Any]:
    """The database's and the handlers' view of a drain of n jobs of op:
    every job succeeded with one attempt, and its handler ran once."""
    with direct() as c:
        jobs, succeeded = c.execute(
            "SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') "
            "FROM jobguard.job_overview WHERE operation = %s", (op,)).fetchone()
        attempts, won, multi = c.execute(
            """SELECT count(*), count(*) FILTER (WHERE a.state = 'succeeded'),
                      (SELECT count(*) FROM (SELECT a2.job_id FROM jobguard.attempt_overview a2
                         JOIN jobguard.job_overview j2 USING (job_id) WHERE j2.operation = %s
                         GROUP BY a2.job_id HAVING count(*) > 1) m)
                 FROM jobguard.attempt_overview a JOIN jobguard.job_overview j USING (job_id)
                WHERE j.operation = %s""", (op, op)).fetchone()
        runs, run_jobs, keys_per_job = c.execute(
            """SELECT count(*), count(DISTINCT job_id),
                      coalesce(max(k), 0) FROM pooler_runs
                 LEFT JOIN (SELECT job_id, count(DISTINCT provider_key) k FROM pooler_runs
                             WHERE client = %s GROUP BY job_id) g USING (job_id)
                WHERE client = %s""", (client, client)).fetchone()
    counts = {"jobs": jobs, "succeeded": succeeded, "attempts": attempts,
              "succeeded_attempts": won, "handler_runs": runs, "jobs_handled": run_jobs}
    if jobs != n:
        problems.append(f"{jobs} jobs stored, {n} submitted")
    if succeeded != n or won != n:
        problems.append(f"{succeeded} of {n} jobs succeeded ({won} succeeded attempts)")
    if attempts != n or multi:
        problems.append(f"{attempts} attempts for {n} jobs ({multi} jobs with more than one)")
    if runs != n or run_jobs != n:
        problems.append(f"handlers ran {runs} times for {run_jobs} of {n} jobs")
    if keys_per_job > 1:
        problems.append("a job's handler saw two provider keys")
    return counts


class Recorder:
    """Records each handler run in pooler_runs on a direct connection of
    its thread's own."""

    def __init__(self, client: str) -> None:
        self.client = client
        self.local = threading.local()
        self.lock = threading.Lock()
        self.conns: List[psycopg.Connection] = []

    def __call__(self, job_id: int, attempt_id: int, key: Any) -> None:
        """Record one run."""
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = direct()
            with self.lock:
                self.conns.append(conn)
        conn.execute("INSERT INTO pooler_runs VALUES (%s, %s, %s, %s)",
                     (self.client, job_id, attempt_id, key))

    def close(self) -> None:
        """Close the direct connections."""
        for c in self.conns:
            c.close()


def run_threads(targets: List[Callable[[], Any]], stop: Callable[[], None],
                limit: float) -> List[Any]:
    """Run each target in a thread; after limit seconds call stop() and
    wait a little more.  Returns the results (an exception is a result)."""
    results: List[Any] = [None] * len(targets)

    def body(i: int) -> None:
        try:
            results[i] = targets[i]()
        except BaseException as err:
            results[i] = err
    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(targets))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + limit
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        stop()
        for t in threads:
            t.join(15)
        results = [r if r is not None else TimeoutError(f"not done in {limit} s") for r in results]
    return results


def swapper(client: str, n: int, done: threading.Event, swaps: List[str]) -> threading.Thread:
    """A thread that swaps the server connections once a third of the n
    jobs were handled (RECONNECT) and again at two thirds (terminate)."""
    def body() -> None:
        plan = [(n // 3, "reconnect"), (2 * n // 3, "terminate")]
        with direct() as c:
            while plan and not done.is_set():
                runs = c.execute("SELECT count(*) FROM pooler_runs WHERE client = %s",
                                 (client,)).fetchone()[0]
                if runs >= plan[0][0]:
                    at, how = plan.pop(0)
                    swaps.append(f"{how} at {runs} runs: {swap(how)} server connections")
                time.sleep(0.02)
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


# ---- the checks ----------------------------------------------------------

def readme_sql(problems: List[str]) -> Dict[str, Any]:
    """README.md's ```sql blocks (the tour, the SQL worker loop, the
    limits) through pgbouncer, in order, each raising the errors its fence
    names; then the database holds what the tour and the loop say."""
    db = "jobguard_pooler_readme"
    fresh_db(db)
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"^```sql([^\n]*)\n(.*?)^```$", text, re.S | re.M)
    counts: Dict[str, Any] = {"blocks": len(blocks), "errors": 0}
    for info, body in blocks:
        want = re.search(r"error=([0-9A-Z,]+)", info)
        r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=0", "-v", "VERBOSITY=sqlstate",
                            "-c", r"\set VERBOSITY sqlstate", "-f", "-"],
                           input=body, capture_output=True, text=True, env=pooled_env(db), timeout=120)
        got = re.findall(r"ERROR:\s+([0-9A-Z]{5})", r.stderr)
        counts["errors"] += len(got)
        if got != (want.group(1).split(",") if want else []):
            problems.append(f"block {info.strip() or 'sql'}: errors {got}, expected "
                            f"{want.group(1) if want else 'none'}: {r.stderr.strip()[:200]}")
        other = [l for l in r.stderr.splitlines() if l and not re.search(r"ERROR:\s+[0-9A-Z]{5}", l)]
        if other:
            problems.append(f"psql said: {other[:3]}")
    with direct(db) as c:
        tour = c.execute("SELECT state, result::text FROM jobguard.job(1)").fetchone()
        bob = c.execute("SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) "
                        "FROM jobguard.job_overview WHERE owner_id = 'bob'").fetchone()
    counts.update(tour=list(tour), loop_succeeded=bob[0], loop_jobs=bob[1])
    if tour != ("succeeded", '{"charge_id": "ady_77"}'):
        problems.append(f"the tour's job 1 is {tour}")
    if bob != (25, 25):
        problems.append(f"the SQL loop: {bob[0]} of {bob[1]} jobs succeeded")
    return counts


def quickstart(lang: str) -> Callable[[List[str]], Dict[str, Any]]:
    """A client's quickstart through pgbouncer prints what the README says."""
    def run(problems: List[str]) -> Dict[str, Any]:
        db = f"jobguard_pooler_qs_{lang}"
        fresh_db(db)
        if lang == "python":
            cmd, want = [sys.executable, "clients/python/examples/quickstart.py"], "True won succeeded"
        else:
            cmd, want = ["node", "clients/node/examples/quickstart.js"], "true won succeeded"
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=pooled_env(db), timeout=60)
        lines = r.stdout.strip().splitlines()
        if r.returncode != 0 or lines != [want, "key reused: job 1 differs in params"]:
            problems.append(f"exit {r.returncode}, printed {lines}, stderr {r.stderr.strip()[-300:]}")
        return {"lines": len(lines)}
    return run


def node(command: str, *args: str, limit: float = 150) -> Dict[str, Any]:
    """Run a command of pooler_node.js; its last stdout line is its JSON."""
    r = subprocess.run(["node", os.path.join(HERE, "pooler_node.js"), command, *args],
                       capture_output=True, text=True, timeout=limit,
                       env=dict(os.environ, POOLER_CONNINFO=json.dumps(
                           {"host": "127.0.0.1", "port": int(PORT), "database": DB, "user": USER})))
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"pooler_node.js {command}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def python_submit_many(problems: List[str]) -> Dict[str, Any]:
    """6 threads submit 12 batches of 30 with submit_many through pgbouncer."""
    batches, size = 12, 30
    errors: List[str] = []

    def one(i: int) -> int:
        created = 0
        with psycopg.connect(pooled(), autocommit=True) as c:
            for b in range(batches):
                reqs = [jobguard.Request(f"sm-py-{i}", f"k-{b}-{k}", "pooler-sm-py", {"n": k}, "psp")
                        for k in range(size)]
                try:
                    out = jobguard.submit_many(c, reqs)
                    created += sum(1 for o in out if o.created and not o.refused)
                except Exception as err:
                    errors.append(f"{type(err).__name__}: {err}"[:120])
        return created
    res = run_threads([lambda i=i: one(i) for i in range(WORKERS)], lambda: None, 90)
    want = WORKERS * batches * size
    with direct() as c:
        stored = c.execute("SELECT count(*) FROM jobguard.job_overview WHERE operation = 'pooler-sm-py'"
                           ).fetchone()[0]
    created = sum(r for r in res if isinstance(r, int))
    problems += [f"{len(errors)} errors: {errors[0]}"] if errors else []
    problems += [f"a thread: {r!r}" for r in res if isinstance(r, BaseException)]
    if stored != want or created != want:
        problems.append(f"{stored} of {want} jobs stored, {created} reported created")
    return {"requests": want, "stored": stored, "created": created, "errors": len(errors)}


def node_submit_many(problems: List[str]) -> Dict[str, Any]:
    """The same through the Node client."""
    out = node("submit-many", str(WORKERS))
    with direct() as c:
        stored = c.execute("SELECT count(*) FROM jobguard.job_overview WHERE operation = 'pooler-sm-node'"
                           ).fetchone()[0]
    out["stored"] = stored
    if out["errors"]:
        problems.append(f"{out['errors']} errors: {out.get('first_error')}")
    if stored != out["requests"] or out["created"] != out["requests"]:
        problems.append(f"{stored} of {out['requests']} jobs stored, {out['created']} reported created")
    return out


def python_worker_drain(problems: List[str]) -> Dict[str, Any]:
    """6 Workers drain 2,000 jobs through pgbouncer; the server connections
    are swapped twice mid-drain; each handler ran once, each job has one
    attempt, which succeeded."""
    op, client = "pooler-py-drain", "py-worker"
    submit_direct(op, DRAIN_JOBS, "drain-py")
    rec = Recorder(client)
    before = logged.n

    def handler(job: jobguard.Claimed) -> Any:
        rec(job.job_id, job.attempt_id, job.provider_key)
        return {"charge": job.provider_key}
    workers = [jobguard.Worker(handler, conninfo=pooled(), name=f"py-drain-{i}", operations=[op],
                               batch=4, timeout=60, wait=1.5) for i in range(WORKERS)]
    done, swaps = threading.Event(), []
    sw = swapper(client, DRAIN_JOBS, done, swaps)
    stats = run_threads([lambda w=w: w.run(until_idle=True, handle_signals=False) for w in workers],
                        lambda: [w.stop() for w in workers], 150)
    done.set()
    sw.join(5)
    rec.close()
    counts = db_check(op, DRAIN_JOBS, client, problems)
    counts["swaps"] = swaps
    counts["client_warnings"] = logged.n - before
    problems += [f"a worker: {s!r}"[:200] for s in stats if isinstance(s, BaseException)]
    ok = [vars(s) for s in stats if not isinstance(s, BaseException)]
    for key in ("report_errors", "reconnects", "failed", "unrecorded", "adopted", "marked_unknown"):
        counts[key] = sum(s.get(key, 0) for s in ok)
    if counts["failed"] or counts["unrecorded"]:
        problems.append(f"{counts['failed']} attempts failed, {counts['unrecorded']} unrecorded")
    if len(swaps) < 2:
        problems.append(f"the connections were swapped {len(swaps)} times, not twice")
    if logged.n > before:
        counts["last_warning"] = logged.last
    return counts


def node_worker_drain(problems: List[str]) -> Dict[str, Any]:
    """The same with 6 Node Workers."""
    op, client = "pooler-node-drain", "node-worker"
    submit_direct(op, DRAIN_JOBS, "drain-node")
    done, swaps = threading.Event(), []
    sw = swapper(client, DRAIN_JOBS, done, swaps)
    try:
        out = node("drain", op, str(WORKERS))
    finally:
        done.set()
        sw.join(5)
    counts = db_check(op, DRAIN_JOBS, client, problems)
    counts["swaps"] = swaps
    counts.update(out)
    if out["failed"] or out["unrecorded"]:
        problems.append(f"{out['failed']} attempts failed, {out['unrecorded']} unrecorded")
    if out.get("run_errors"):
        problems.append(f"a worker's run() threw: {out.get('first_error')}")
    if len(swaps) < 2:
        problems.append(f"the connections were swapped {len(swaps)} times, not twice")
    return counts


def unknown_jobs(op: str, n: int) -> None:
    """n jobs of op, each with one attempt marked unknown (on the server)."""
    submit_direct(op, n, "rec-" + op)
    with direct() as c:
        ids = [r[0] for r in c.execute("SELECT attempt_id FROM jobguard.claim('setup', %s, max_jobs => %s)",
                                       ([op], n)).fetchall()]
        for a in ids:
            c.execute("SELECT jobguard.mark_unknown(%s)", (a,))


def python_reconciler(problems: List[str]) -> Dict[str, Any]:
    """6 Reconcilers resolve 300 unknown attempts through pgbouncer: each
    asked once, each job succeeded with its one attempt."""
    op, client, n = "pooler-py-rec", "py-rec", 300
    unknown_jobs(op, n)
    rec = Recorder(client)

    def reconcile(a: Any) -> Any:
        rec(a.job_id, a.attempt_id, a.provider_key)
        return {"found": a.provider_key}
    recs = [jobguard.Reconciler(reconcile, conninfo=pooled(), name=f"py-rec-{i}", operations=[op],
                                batch=5, lease=60, wait=1) for i in range(WORKERS)]
    stats = run_threads([lambda r=r: r.run(until_idle=True, handle_signals=False) for r in recs],
                        lambda: [r.stop() for r in recs], 90)
    rec.close()
    counts = db_check(op, n, client, problems)
    problems += [f"a reconciler: {s!r}"[:200] for s in stats if isinstance(s, BaseException)]
    ok = [vars(s) for s in stats if not isinstance(s, BaseException)]
    for key in ("won", "errors", "report_errors", "reconnects", "left"):
        counts[key] = sum(s.get(key, 0) for s in ok)
    if counts["errors"] or counts["report_errors"]:
        problems.append(f"{counts['errors']} errors, {counts['report_errors']} report errors")
    return counts


def node_reconciler(problems: List[str]) -> Dict[str, Any]:
    """The same with 6 Node Reconcilers."""
    op, client, n = "pooler-node-rec", "node-rec", 300
    unknown_jobs(op, n)
    out = node("reconcile", op, str(WORKERS))
    counts = db_check(op, n, client, problems)
    counts.update(out)
    if out["errors"] or out["reportErrors"] or out.get("run_errors"):
        problems.append(f"{out['errors']} errors, {out['reportErrors']} report errors, "
                        f"{out.get('run_errors')} runs threw: {out.get('first_error')}")
    return counts


def python_aio(problems: List[str]) -> Dict[str, Any]:
    """jobguard.aio through pgbouncer: 6 AsyncWorkers drain 600 jobs, and 6
    AsyncConnections each submit, begin and finish 20 jobs."""
    op, client, n = "pooler-aio", "py-aio", 600
    submit_direct(op, n, "aio")
    rec = Recorder(client)
    before = logged.n
    errors: List[str] = []

    async def handler(job: Any) -> Any:
        await asyncio.to_thread(rec, job.job_id, job.attempt_id, job.provider_key)
        return {"charge": job.provider_key}

    async def calls(i: int) -> int:
        won = 0
        async with await aio.AsyncConnection.connect(pooled(), autocommit=True) as jg:
            for k in range(20):
                try:
                    sub = await jg.submit(f"aio-{i}", f"k-{k}", "pooler-aio-calls", {"k": k}, "psp")
                    a = await jg.begin_attempt(sub.job_id, timeout=30)
                    await jg.heartbeat(a)
                    won += (await jg.finish(a, {"k": k})) == "won"
                except Exception as err:
                    errors.append(f"{type(err).__name__}: {err}"[:150])
        return won

    async def main() -> List[Any]:
        workers = [aio.AsyncWorker(handler, conninfo=pooled(), name=f"aio-{i}", operations=[op],
                                   batch=4, timeout=60, wait=1.5) for i in range(WORKERS)]
        runs = [w.run(until_idle=True, handle_signals=False) for w in workers]
        return await asyncio.wait_for(asyncio.gather(*runs, *[calls(i) for i in range(WORKERS)],
                                                     return_exceptions=True), 120)
    res = asyncio.run(main())
    rec.close()
    counts = db_check(op, n, client, problems)
    stats = [vars(r) for r in res[:WORKERS] if not isinstance(r, BaseException)]
    problems += [f"a task: {r!r}"[:200] for r in res if isinstance(r, BaseException)]
    for key in ("report_errors", "reconnects", "failed", "unrecorded"):
        counts[key] = sum(s.get(key, 0) for s in stats)
    won = sum(r for r in res[WORKERS:] if isinstance(r, int))
    counts.update(calls_won=won, call_errors=len(errors), client_warnings=logged.n - before)
    if errors:
        problems.append(f"{len(errors)} call errors: {errors[0]}")
    if won != WORKERS * 20:
        problems.append(f"{won} of {WORKERS * 20} submit/begin/heartbeat/finish rounds won")
    if counts["failed"] or counts["unrecorded"]:
        problems.append(f"{counts['failed']} attempts failed, {counts['unrecorded']} unrecorded")
    return counts


def python_heartbeats(problems: List[str]) -> Dict[str, Any]:
    """Heartbeats through pgbouncer: 6 threads each heartbeat an attempt 20
    times (every one moves its deadline on), and 6 Workers whose handlers
    outlast the attempt's timeout keep their attempts started by heartbeats."""
    errors: List[str] = []

    def beats(i: int) -> int:
        ok = 0
        with psycopg.connect(pooled(), autocommit=True) as c:
            sub = jobguard.submit(c, f"hb-{i}", "k", "pooler-hb", {}, "psp")
            a = jobguard.begin_attempt(c, sub.job_id, timeout=30)
            last = None
            for _ in range(20):
                try:
                    d = jobguard.heartbeat(c, a)
                    ok += last is None or d >= last
                    last = d
                except Exception as err:
                    errors.append(f"{type(err).__name__}: {err}"[:150])
            if jobguard.finish(c, a, {"beats": ok}) != "won":
                errors.append(f"job {sub.job_id} not won")
        return ok
    res = run_threads([lambda i=i: beats(i) for i in range(WORKERS)], lambda: None, 60)
    counts: Dict[str, Any] = {"heartbeats_sent": WORKERS * 20,
                              "heartbeats_ok": sum(r for r in res if isinstance(r, int)),
                              "errors": len(errors)}
    problems += [f"a thread: {r!r}"[:200] for r in res if isinstance(r, BaseException)]
    if errors:
        problems.append(f"{len(errors)} errors: {errors[0]}")
    if counts["heartbeats_ok"] != WORKERS * 20:
        problems.append(f"{counts['heartbeats_ok']} of {WORKERS * 20} heartbeats got through")

    op, client = "pooler-hb-worker", "py-hb"
    submit_direct(op, WORKERS, "hb-worker")
    rec = Recorder(client)

    def slow(job: jobguard.Claimed) -> Any:
        rec(job.job_id, job.attempt_id, job.provider_key)
        time.sleep(3)        # past the attempt's 2 s timeout: heartbeats keep it
        return {"slow": True}
    workers = [jobguard.Worker(slow, conninfo=pooled(), name=f"hb-{i}", operations=[op], batch=1,
                               timeout=2, heartbeat_every=0.4, wait=1) for i in range(WORKERS)]
    stats = run_threads([lambda w=w: w.run(until_idle=True, handle_signals=False) for w in workers],
                        lambda: [w.stop() for w in workers], 60)
    rec.close()
    counts.update({"worker_" + k: v for k, v in db_check(op, WORKERS, client, problems).items()})
    ok = [vars(s) for s in stats if not isinstance(s, BaseException)]
    counts["worker_heartbeats"] = sum(s["heartbeats"] for s in ok)
    counts["worker_heartbeats_refused"] = sum(s["heartbeats_refused"] for s in ok)
    with direct() as c:
        went_unknown = c.execute(
            """SELECT count(*) FROM jobguard.attempt_overview a JOIN jobguard.job_overview j USING (job_id)
                WHERE j.operation = %s AND a.finished_at > a.deadline""", (op,)).fetchone()[0]
    counts["worker_attempts_past_deadline"] = went_unknown
    if counts["worker_heartbeats_refused"] or went_unknown:
        problems.append(f"{counts['worker_heartbeats_refused']} worker heartbeats refused, "
                        f"{went_unknown} attempts finished past their deadline")
    if counts["worker_heartbeats"] < WORKERS * 3:
        problems.append(f"only {counts['worker_heartbeats']} worker heartbeats")
    return counts


def node_heartbeats(problems: List[str]) -> Dict[str, Any]:
    """6 Node clients each heartbeat an attempt 20 times through pgbouncer."""
    out = node("heartbeats", str(WORKERS))
    if out["errors"]:
        problems.append(f"{out['errors']} errors: {out.get('first_error')}")
    if out["ok"] != out["sent"]:
        problems.append(f"{out['ok']} of {out['sent']} heartbeats got through")
    return out


def session_state(problems: List[str]) -> Dict[str, Any]:
    """What doc/poolers.md says of session state behind a transaction-mode
    pooler, as pgbouncer does it (a database alias with a pool of 2): a
    SET is lost for the client that set it and leaks into another client,
    and a LISTEN's notifications go to whichever client holds the server
    connection next, not to the listener."""
    def conn() -> psycopg.Connection:
        return psycopg.connect(pooled(DB + "_two"), autocommit=True)
    with conn() as a, conn() as b:
        for c in (a, b):           # two server connections in the pool, each
            c.execute("BEGIN")     # with jobguard's library loaded (its settings
            c.execute("SELECT jobguard.fast_path_status()")   # exist unpreloaded too)
        for c in (a, b):
            c.execute("COMMIT")
        a.execute("SET jobguard.notify = off")
        b.execute("BEGIN")         # b holds the server connection a's SET ran on
        seen_a = a.execute("SHOW jobguard.notify").fetchone()[0]
        seen_b = b.execute("SHOW jobguard.notify").fetchone()[0]
        b.execute("COMMIT")
        for c in (a, b):
            c.execute("RESET jobguard.notify")
        got: Dict[str, List[str]] = {"a": [], "b": []}
        a.add_notify_handler(lambda n: got["a"].append(n.payload))
        b.add_notify_handler(lambda n: got["b"].append(n.payload))
        a.execute("LISTEN jobguard_jobs")
        b.execute("BEGIN")
        b.execute("SELECT 1")
        with direct() as d:
            j = d.execute("SELECT job_id FROM jobguard.submit('listen', 'k', 'pooler-listen', '{}', 'psp')"
                          ).fetchone()[0]
            at = d.execute("SELECT jobguard.begin_attempt(%s)", (j,)).fetchone()[0]
            d.execute("SELECT jobguard.finish_attempt(%s, '{}')", (at,))
        time.sleep(0.3)
        for _ in range(3):
            a.execute("SELECT 1")
        b.execute("COMMIT")
        time.sleep(0.3)
        for _ in range(3):
            b.execute("SELECT 1")
        a.execute("UNLISTEN *")
        b.execute("UNLISTEN *")
    counts = {"notify_seen_by_setter": seen_a, "notify_seen_by_other": seen_b,
              "notifications_to_listener": len(got["a"]), "notifications_to_other": len(got["b"])}
    if (seen_a, seen_b) != ("on", "off"):
        problems.append(f"SET jobguard.notify = off: the setter saw {seen_a}, another client {seen_b}")
    if got["a"] or got["b"] != [f"{j}:succeeded"]:
        problems.append(f"LISTEN: the listener got {got['a']}, another client {got['b']}")
    return counts


def waiting_claims(problems: List[str]) -> Dict[str, Any]:
    """A waiting claim holds its server connection: with 3 claims waiting
    (the pool's size) an application's submit through the same pool waits
    for one of them to end; with the workers on a pool of their own (a
    second pgbouncer database entry) it does not."""
    wait = 4.0

    def submit_ms(tag: str) -> float:
        with psycopg.connect(pooled(), autocommit=True) as c:
            t0 = time.monotonic()
            jobguard.submit(c, "app", f"wait-{tag}", "pooler-app", {}, "psp")
            return (time.monotonic() - t0) * 1000

    def claims(db: str) -> List[threading.Thread]:
        def one() -> None:
            with psycopg.connect(pooled(db), autocommit=True) as c:
                jobguard.claim(c, "idle-worker", ["pooler-nothing"], wait=wait)
        ts = [threading.Thread(target=one, daemon=True) for _ in range(3)]
        for t in ts:
            t.start()
        time.sleep(0.5)           # the claims are waiting
        return ts
    alone = submit_ms("alone")
    ts = claims(DB)
    shared = submit_ms("shared")
    for t in ts:
        t.join(wait + 5)
    ts = claims(DB + "_workers")
    own = submit_ms("own")
    for t in ts:
        t.join(wait + 5)
    counts = {"waiting_claims": 3, "pool_size": 3, "claim_wait_s": wait,
              "submit_ms_no_claims": round(alone, 1), "submit_ms_claims_same_pool": round(shared, 1),
              "submit_ms_claims_own_pool": round(own, 1)}
    if shared < 1000:
        problems.append(f"a submit behind 3 waiting claims took only {shared:.0f} ms")
    if own > 1000 or alone > 1000:
        problems.append(f"a submit took {alone:.0f} ms alone, {own:.0f} ms with the workers on their own pool")
    return counts


CHECKS = [
    ("pooler-readme-sql", readme_sql),
    ("pooler-python-quickstart", quickstart("python")),
    ("pooler-node-quickstart", quickstart("node")),
    ("pooler-python-submit-many", python_submit_many),
    ("pooler-node-submit-many", node_submit_many),
    ("pooler-python-worker-drain", python_worker_drain),
    ("pooler-node-worker-drain", node_worker_drain),
    ("pooler-python-reconciler", python_reconciler),
    ("pooler-node-reconciler", node_reconciler),
    ("pooler-python-aio", python_aio),
    ("pooler-python-heartbeats", python_heartbeats),
    ("pooler-node-heartbeats", node_heartbeats),
    ("pooler-session-state", session_state),
    ("pooler-waiting-claims", waiting_claims),
]

if __name__ == "__main__":
    only = sys.argv[1:]
    with direct() as c:
        c.execute("CREATE TABLE IF NOT EXISTS pooler_runs (client text, job_id bigint, "
                  "attempt_id bigint, provider_key text)")
    for name, fn in CHECKS:
        if not only or name in only:
            check(name, fn)
    sys.exit(1 if failures else 0)
