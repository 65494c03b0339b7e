"""Fixtures: a database of its own on the cluster named by the PG*
environment variables (jobguard installed there, at its default version,
or at JG_EXTENSION_VERSION: the client works against a database that was
not updated yet), dropped at the end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from typing import Any, Iterator, List, Sequence

import psycopg
from psycopg import sql
import pytest

DB = os.environ.get("JG_PYTHON_DB", "jg_client_python")
#: the version of jobguard the test database gets (empty: the default)
VERSION = os.environ.get("JG_EXTENSION_VERSION", "")


def _admin(sql: str) -> None:
    """Run one statement in the maintenance database, outside a transaction."""
    with psycopg.connect(dbname="postgres", autocommit=True) as c:
        c.execute(sql)


def install(c: psycopg.Connection[Any], version: str) -> None:
    """CREATE EXTENSION jobguard, at ``version`` (empty: the default)."""
    c.execute(sql.SQL("CREATE EXTENSION jobguard VERSION {}").format(sql.Literal(version))
              if version else "CREATE EXTENSION jobguard")


@contextlib.contextmanager
def scratch_database(suffix: str, version: str = VERSION,
                     setup: Sequence[str] = ()) -> Iterator[str]:
    """A database of its own (the test database's name and ``suffix``) with
    jobguard at ``version`` (empty: the default) and the ``setup``
    statements run; dropped at the end."""
    db = f"{DB}_{suffix}"
    _admin(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    _admin(f"CREATE DATABASE {db}")
    with psycopg.connect(dbname=db, autocommit=True) as c:
        install(c, version)
        for statement in setup:
            c.execute(statement)
    try:
        yield db
    finally:
        _admin(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def run_until_idle(kind: str, loops: Sequence[Any], seconds: float = 120) -> List[Any]:
    """Run the loops (Workers or Reconcilers for ``kind`` 'thread', their
    async forms for 'asyncio') until each finds no work; one that has not
    ended after ``seconds`` is stopped.  Their stats."""
    if kind == "thread":
        threads = [threading.Thread(target=lambda w=w: w.run(until_idle=True,
                                                              handle_signals=False))
                   for w in loops]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds)
        for w in loops:
            w.stop()
        for t in threads:
            t.join(seconds)
        return [w.stats for w in loops]

    async def main() -> List[Any]:
        """The asyncio loops, together."""
        runs = asyncio.gather(*(w.run(until_idle=True, handle_signals=False) for w in loops))
        try:
            await asyncio.wait_for(asyncio.shield(runs), seconds)
        except asyncio.TimeoutError:
            for w in loops:
                w.stop()
            await runs
        return [w.stats for w in loops]
    return asyncio.run(main())


@pytest.fixture(scope="session")
def database() -> Iterator[str]:
    """Create the test database with jobguard, a contract and a certified
    fallback provider; drop it after the session."""
    _admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    _admin(f"CREATE DATABASE {DB}")
    with psycopg.connect(dbname=DB, autocommit=True) as c:
        install(c, VERSION)
        c.execute("""SELECT jobguard.define_operation('charge',
            '{"type": "object", "required": ["charge_id"]}')""")
        c.execute("SELECT jobguard.certify_provider('charge', 'backup-psp')")
    yield DB
    _admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


@pytest.fixture
def conn(database: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test database."""
    with psycopg.connect(dbname=database, autocommit=True) as c:
        yield c
