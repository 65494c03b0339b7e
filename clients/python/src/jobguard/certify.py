"""The certification runner (SPEC 1.3, "Certification is earned"): a
fallback provider is certified for an operation only after its handler ran
on real inputs and every output kept the operation's contract.

    report = jobguard.certify(conn, "charge", "adyen", call_adyen)   # sample=50 | inputs=path
    report.certified, report.failures

The inputs are the params of the operation's most recent succeeded jobs
(``sample``, default 50), or the lines of a file (``inputs``: one JSON
object a line, ``{"params": ..., "job_id": n, "result": ...}``, job_id and
result optional; result is the winning result ``compare`` is given).  The
handler runs once on each, as a ``Worker`` would run it against the
candidate provider — point it at the provider's test mode where it has
one.  Each output is checked with ``jobguard.check_result`` and, with
``compare``, against the winning result of the same job.
``certify_provider`` is called only when every input passed, with the
evidence ``{"runner", "contract_version", "inputs", "passed", "failed": 0,
"sample", "job_ids", "started_at", "ended_at"}``; otherwise nothing is
certified and the report lists each failure (job id, path, message).

Reading inputs needs payload rights (an operator, or a reader granted with
``payloads => true``): without them, ``PayloadRightsRequired``.  Certifying
needs an administrator of jobguard (the extension's owner or a superuser).
The command line is ``python3 -m jobguard certify`` (``jobguard.__main__``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import api
from .api import Claimed
from .ids import AttemptId, JobId
from .loop import error_text, unrecordable

__all__ = ["certify", "CertifyReport", "Failure", "CertifyError", "PayloadRightsRequired"]

#: how many recent succeeded jobs a run replays unless told
DEFAULT_SAMPLE = 50

#: the params and winning result of an operation's most recent succeeded
#: jobs; params is never NULL in a job, so NULL is the view hiding it
RECENT = """
    SELECT job_id, provider, params, result, params IS NULL AS hidden
      FROM jobguard.job_overview
     WHERE operation = %s AND state = 'succeeded'
     ORDER BY completed_at DESC, job_id DESC
     LIMIT %s"""

#: the winning results of the jobs named
RESULTS = """
    SELECT job_id, result, params IS NULL AS hidden
      FROM jobguard.job_overview
     WHERE job_id = ANY (%s::bigint[])"""

#: the operation's current contract version (no row: not defined)
CONTRACT_VERSION = "SELECT contract_version FROM jobguard.operations WHERE operation = %s"

#: the contract version a certification was recorded under (1.3; NULL
#: before, read through to_jsonb so that a 1.2 database answers too)
CERTIFIED_UNDER = """
    SELECT (to_jsonb(c) ->> 'contract_version')::bigint AS contract_version
      FROM jobguard.certification_overview c
     WHERE c.operation = %s AND c.provider = %s"""


def runner_name() -> str:
    """The evidence's ``runner``: this client and its version."""
    from . import __version__
    return f"jobguard-python {__version__}"


class CertifyError(Exception):
    """The run could not take place (no inputs, a bad inputs file, not an
    administrator, the contract changed meanwhile): nothing was certified."""


class PayloadRightsRequired(CertifyError):
    """The caller may not read the params of the operation's jobs, so there
    is nothing real to replay."""

    def __init__(self, operation: str, detail: str = "") -> None:
        """Say what is needed, and what the server said."""
        super().__init__(
            f'the certification runner reads the params of operation "{operation}"\'s jobs, '
            "which needs payload rights: run it as a jobguard operator "
            "(jobguard.grant_operator) or as a role granted "
            "jobguard.grant_reader(role, scope, payloads => true)"
            + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class Failure:
    """One input that did not pass: its job (None for a file line without
    one), where it came from, the path in the output, and why."""

    job_id: Optional[int]
    where: str
    path: str
    message: str

    def __str__(self) -> str:
        """As the command line prints it."""
        return f"{self.where}: {self.path}: {self.message}"


@dataclass
class CertifyReport:
    """What a run found, and whether it certified the provider."""

    certified: bool
    operation: str
    provider: str
    contract_version: Optional[int]
    sample: str                 #: "recent" or "file"
    inputs: int
    passed: int
    failed: int
    failures: List[Failure] = field(default_factory=list)
    job_ids: List[int] = field(default_factory=list)
    #: what certify_provider was given (None unless certified)
    evidence: Optional[Dict[str, Any]] = None


@dataclass
class _Input:
    """One input to replay."""

    job_id: Optional[int]
    own_provider: Optional[str]
    params: Any
    winning: Any
    has_winning: bool
    where: str


def _rows(conn: Any, sql: str, args: Tuple[Any, ...], operation: str) -> List[Dict[str, Any]]:
    """The rows of one statement reading jobs; a refusal to read them is
    ``PayloadRightsRequired``."""
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, args, prepare=api.prepare_flag())
            return cur.fetchall()
    except psycopg.errors.InsufficientPrivilege as err:
        raise PayloadRightsRequired(operation, str(err).strip()) from err


def _recent_inputs(conn: Any, operation: str, n: int) -> List[_Input]:
    """Up to n inputs from the operation's most recent succeeded jobs."""
    rows = _rows(conn, RECENT, (operation, n), operation)
    if any(r["hidden"] for r in rows):
        raise PayloadRightsRequired(operation, "params read as NULL")
    return [_Input(int(r["job_id"]), r["provider"], r["params"], r["result"], True,
                   f"job {r['job_id']}") for r in rows]


def _file_inputs(path: str) -> List[_Input]:
    """The inputs of a file, one JSON object a line (blank lines skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as err:
        raise CertifyError(f"cannot read the inputs file {path}: {err}") from err
    out: List[_Input] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as err:
            raise CertifyError(f"{path}:{i}: not JSON ({err})") from err
        if not isinstance(value, dict) or value.get("params") is None:
            raise CertifyError(f'{path}:{i}: each line must be an object with "params" '
                               '(and optionally "job_id" and "result")')
        job_id = value.get("job_id")
        if job_id is not None and (isinstance(job_id, bool) or not isinstance(job_id, int)):
            raise CertifyError(f'{path}:{i}: "job_id" must be an integer')
        out.append(_Input(job_id, None, value["params"], value.get("result"),
                          "result" in value, f"job {job_id}" if job_id is not None
                          else f"{path}:{i}"))
    return out


def _winning_results(conn: Any, operation: str, inputs: List[_Input]) -> None:
    """The winning result of each file input that names a job but gives
    none (for compare)."""
    want = [i for i in inputs if not i.has_winning and i.job_id is not None]
    if not want:
        return
    rows = _rows(conn, RESULTS, ([i.job_id for i in want],), operation)
    if any(r["hidden"] for r in rows):
        raise PayloadRightsRequired(operation, "results read as NULL")
    found = {int(r["job_id"]): r["result"] for r in rows}
    for i in want:
        if found.get(i.job_id) is not None:
            i.winning, i.has_winning = found[i.job_id], True


def _contract_version(conn: Any, operation: str) -> Optional[int]:
    """The operation's current contract_version (None: no contract)."""
    try:
        row = conn.execute(CONTRACT_VERSION, (operation,), prepare=api.prepare_flag()).fetchone()
    except psycopg.errors.InsufficientPrivilege as err:
        raise CertifyError("certifying a provider needs an administrator of jobguard (the "
                           f"extension's owner or a superuser): {str(err).strip()}") from err
    return None if row is None or row[0] is None else int(row[0])


def _value(got: Any) -> Any:
    """A handler's (or compare's) value; an awaitable is awaited."""
    if not inspect.isawaitable(got):
        return got

    async def wait() -> Any:
        """Await it."""
        return await got
    return asyncio.run(wait())


def first_difference(a: Any, b: Any, path: str = "$") -> Optional[str]:
    """The path of the first place where two JSON values differ, or None
    when they are equal."""
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                       and not isinstance(a, bool) and not isinstance(b, bool)):
        return path
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}"
            diff = first_difference(a[key], b[key], f"{path}.{key}")
            if diff is not None:
                return diff
        return None
    if isinstance(a, list):
        for n in range(max(len(a), len(b))):
            if n >= len(a) or n >= len(b):
                return f"{path}[{n}]"
            diff = first_difference(a[n], b[n], f"{path}[{n}]")
            if diff is not None:
                return diff
        return None
    return None if a == b else path


def _compared(said: Any, output: Any, winning: Any) -> Optional[Tuple[str, str]]:
    """What compare said, as None (the same) or (path, message): True
    passes; False or None fails at the first difference; a string is the
    message; a (path, message) pair or a dict with them is the failure."""
    if said is True:
        return None
    if said is False or said is None:
        return (first_difference(output, winning) or "$",
                "the output differs from the winning result of the same job")
    if isinstance(said, str):
        return ("$", said)
    if isinstance(said, tuple) and len(said) == 2 and all(isinstance(s, str) for s in said):
        return (said[0], said[1])
    if isinstance(said, dict) and isinstance(said.get("message"), str):
        return (str(said.get("path") or "$"), said["message"])
    return ("$", f"compare returned {said!r}; expected True, False, a message or "
                 "(path, message)")


def _violation(text: str) -> Tuple[str, str]:
    """check_result's text ("$.a: ...") as (path, message)."""
    m = re.match(r"^(\$\S*): (.*)$", text, re.S)
    return (m.group(1), m.group(2)) if m else ("$", text)


def _check(conn: Any, operation: str, provider: str, handler: Callable[[Claimed], Any],
           compare: Optional[Callable[..., Any]], tag: str, item: _Input,
           n: int) -> Optional[Failure]:
    """Run the handler on one input and judge its output: None (passed)
    or the failure."""
    def failed(path: str, message: str) -> Failure:
        """This input's failure."""
        return Failure(item.job_id, item.where, path, message)
    job = Claimed(AttemptId(0), JobId(item.job_id or 0), 0, operation, provider, item.params,
                  datetime.now(timezone.utc), f"jgcert-{tag}-{n}", False,
                  item.own_provider is not None and item.own_provider != provider, True)
    try:
        output = _value(handler(job))
    except Exception as err:  # the handler's failure, whatever it is: this input failed
        return failed("$", f"the handler raised {error_text(err)}")
    why = unrecordable(output)
    if why is not None:
        return failed("$", f"the output cannot be recorded: {why}")
    violation = conn.execute("SELECT jobguard.check_result(%s, %s)", (operation, Jsonb(output)),
                             prepare=api.prepare_flag()).fetchone()[0]
    if violation is not None:
        return failed(*_violation(violation))
    if compare is not None:
        if not item.has_winning:
            return failed("$", 'no winning result to compare with (give "result" or '
                               '"job_id" in the inputs file)')
        try:
            said = _value(compare(output, item.winning, job))
        except Exception as err:  # compare's own failure: this input failed
            return failed("$", f"compare raised {error_text(err)}")
        diff = _compared(said, output, item.winning)
        if diff is not None:
            return failed(*diff)
    return None


def certify(conn: Any, operation: str, provider: str, handler: Callable[[Claimed], Any],
            sample: Optional[int] = None, inputs: Optional[str] = None,
            compare: Optional[Callable[..., Any]] = None) -> CertifyReport:
    """Run the certification of ``provider`` for ``operation`` on the
    psycopg connection ``conn`` (see the module's docstring) and return
    the report; the provider is certified (``report.certified``) only
    when every input passed.  ``handler(job)`` gets a ``Claimed`` as a
    Worker's would (``provider`` the candidate, ``provider_key`` a key of
    this run, ``certification`` True, ``attempt_id`` 0: there is no
    attempt); ``sample`` (default 50) recent succeeded jobs, or
    ``inputs`` a file; ``compare(output, winning, job)`` returns True,
    False, a message or (path, message).  Raises ``CertifyError`` (or
    ``PayloadRightsRequired``) when the run cannot take place."""
    if not callable(handler):
        raise TypeError("handler must be callable")
    if compare is not None and not callable(compare):
        raise TypeError("compare must be callable")
    if sample is not None and inputs is not None:
        raise TypeError("give sample or inputs, not both")
    n = DEFAULT_SAMPLE if sample is None else sample
    if inputs is None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError("sample must be a positive integer")
    started_at = datetime.now(timezone.utc)
    if inputs is None:
        items = _recent_inputs(conn, operation, n)
    else:
        items = _file_inputs(inputs)
        if compare is not None:
            _winning_results(conn, operation, items)
    if not items:
        raise CertifyError(f"the inputs file {inputs} has no inputs" if inputs is not None
                           else f'operation "{operation}" has no succeeded jobs the runner can '
                                "read: nothing to replay")
    version = _contract_version(conn, operation)
    tag = uuid.uuid4().hex[:12]
    failures = [f for f in (_check(conn, operation, provider, handler, compare, tag, item, i)
                            for i, item in enumerate(items, 1)) if f is not None]
    report = CertifyReport(False, operation, provider, version,
                           "file" if inputs is not None else "recent", len(items),
                           len(items) - len(failures), len(failures), failures,
                           [i.job_id for i in items if i.job_id is not None])
    if failures:
        return report
    evidence = {"runner": runner_name(), "contract_version": version, "inputs": len(items),
                "passed": len(items), "failed": 0, "sample": report.sample,
                "job_ids": report.job_ids, "started_at": started_at.isoformat(),
                "ended_at": datetime.now(timezone.utc).isoformat()}
    _certify_under(conn, operation, provider, version, evidence)
    report.certified, report.evidence = True, evidence
    return report


def _certify_under(conn: Any, operation: str, provider: str, version: Optional[int],
                   evidence: Dict[str, Any]) -> None:
    """certify_provider with the evidence, in one transaction that sees the
    contract still at the version the inputs were checked against, and
    (1.3) the certification recorded under it; otherwise CertifyError,
    nothing written."""
    try:
        with conn.transaction():
            now = _contract_version(conn, operation)
            if now != version:
                raise CertifyError(f'the contract of operation "{operation}" changed during '
                                   f"the run (version {version} to {now}); nothing certified: "
                                   "run it again")
            conn.execute("SELECT jobguard.certify_provider(%s, %s, %s)",
                         (operation, provider, Jsonb(evidence)), prepare=api.prepare_flag())
            row = conn.execute(CERTIFIED_UNDER, (operation, provider),
                               prepare=api.prepare_flag()).fetchone()
            if row is not None and row[0] is not None and row[0] != version:
                raise CertifyError(f'the contract of operation "{operation}" changed during '
                                   f"the run (version {version} to {row[0]}); nothing "
                                   "certified: run it again")
    except psycopg.errors.InsufficientPrivilege as err:
        raise CertifyError("certifying a provider needs an administrator of jobguard (the "
                           f"extension's owner or a superuser): {str(err).strip()}") from err
