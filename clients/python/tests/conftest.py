"""Fixtures: a database of its own on the cluster named by the PG*
environment variables (jobguard installed there), dropped at the end."""

from __future__ import annotations

import os
from typing import Any, Iterator

import psycopg
import pytest

DB = os.environ.get("JG_PYTHON_DB", "jg_client_python")


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
