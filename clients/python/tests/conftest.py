"""Fixtures: a database of its own on the cluster named by the PG*
environment variables (jobguard installed there, at its default version,
or at JG_EXTENSION_VERSION: the client works against a database that was
not updated yet), dropped at the end."""

from __future__ import annotations

import os
from typing import Any, Iterator

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


@pytest.fixture(scope="session")
def database() -> Iterator[str]:
    """Create the test database with jobguard, a contract and a certified
    fallback provider; drop it after the session."""
    _admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    _admin(f"CREATE DATABASE {DB}")
    with psycopg.connect(dbname=DB, autocommit=True) as c:
        if VERSION:
            c.execute(sql.SQL("CREATE EXTENSION jobguard VERSION {}").format(sql.Literal(VERSION)))
        else:
            c.execute("CREATE EXTENSION jobguard")
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
