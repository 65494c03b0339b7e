"""The jobguard command line: ``python3 -m jobguard certify``.

    python3 -m jobguard certify --operation charge --provider adyen \\
        --handler mymodule:call_adyen [--sample 50 | --inputs file.jsonl] \\
        [--compare mymodule:same] [--dsn "dbname=app"]

Runs the certification runner (``jobguard.certify``) against the database
of the PG* environment (or ``--dsn``).  Exit status: 0 the provider was
certified; 1 an input failed (each failure printed on stderr: job id,
path, message; nothing certified); 2 the run could not take place (bad
arguments, no payload rights, no inputs, not an administrator, a database
error).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Callable, List, Optional, TextIO

import psycopg

from . import api
from .certify import CertifyError, certify, runner_name


class _Usage(Exception):
    """A mistake in the command line (exit 2, with the usage)."""


class _Parser(argparse.ArgumentParser):
    """argparse, raising _Usage instead of exiting."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        """A mistake in the arguments, with the usage of the (sub)command."""
        raise _Usage(f"{message}\n{self.format_usage()}")


def _parser() -> _Parser:
    """The command line's parser."""
    top = _Parser(prog="python3 -m jobguard", description="jobguard's command line")
    sub = top.add_subparsers(dest="command", parser_class=_Parser)
    c = sub.add_parser("certify", help="certify a fallback provider by replaying real inputs",
                       description="Replay real inputs of an operation through a provider's "
                                   "handler; certify the provider only when every output "
                                   "passed the contract (and --compare).")
    c.add_argument("--operation", required=True, help="the operation")
    c.add_argument("--provider", required=True, help="the candidate provider")
    c.add_argument("--handler", required=True, metavar="MODULE:FUNCTION",
                   help="the handler that calls the provider (as a Worker's)")
    source = c.add_mutually_exclusive_group()
    source.add_argument("--sample", type=int, metavar="N",
                        help="replay the N most recent succeeded jobs (default 50)")
    source.add_argument("--inputs", metavar="FILE.jsonl",
                        help='replay the lines of a file: {"params": ..., "job_id"?, "result"?}')
    c.add_argument("--compare", metavar="MODULE:FUNCTION",
                   help="compare(output, winning, job): True, False, a message or "
                        "(path, message)")
    c.add_argument("--dsn", default="", help="the database (default: the PG* environment)")
    return top


def load_function(spec: str, what: str) -> Callable[..., Any]:
    """The function named by "module:attribute" (the module importable
    from the current directory or the path)."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise _Usage(f"--{what} {spec}: give MODULE:FUNCTION")
    try:
        found: Any = importlib.import_module(module)
    except Exception as err:  # whatever importing the user's module raised
        raise _Usage(f"--{what} {spec}: cannot import {module}: {err}") from err
    for part in attr.split("."):
        found = getattr(found, part, None)
    if not callable(found):
        raise _Usage(f"--{what} {spec}: {attr} is not a function of {module}")
    return found  # type: ignore[no-any-return]


def _certify_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The certify subcommand; its exit status."""
    if args.sample is not None and args.sample < 1:
        raise _Usage("--sample must be a positive integer")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")   # MODULE from the current directory
    handler = load_function(args.handler, "handler")
    compare = load_function(args.compare, "compare") if args.compare else None
    with psycopg.connect(args.dsn, autocommit=True, **api.connect_options()) as conn:
        report = certify(conn, args.operation, args.provider, handler, sample=args.sample,
                         inputs=args.inputs, compare=compare)
    what = f"operation {report.operation}, provider {report.provider}"
    if report.certified:
        print(f"certified: {what}: {report.passed} of {report.inputs} inputs passed "
              f"(contract version {report.contract_version}, {runner_name()})", file=out)
        return 0
    for failure in report.failures:
        print(f"failed: {failure}", file=err)
    print(f"not certified: {what}: {report.failed} of {report.inputs} inputs failed", file=err)
    return 1


def main(argv: Optional[List[str]] = None, out: TextIO = sys.stdout,
         err: TextIO = sys.stderr) -> int:
    """The command line; its exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if args.command != "certify":
            raise _Usage(f"a command is required: certify\n{parser.format_usage()}")
        return _certify_command(args, out, err)
    except _Usage as e:
        print(f"jobguard: {str(e).rstrip()}", file=err)
        return 2
    except (CertifyError, psycopg.Error) as e:
        print(f"jobguard certify: {str(e).strip()}", file=err)
        return 2


if __name__ == "__main__":
    sys.exit(main())
