"""A real PostgreSQL for the store's tests (a pytest plugin module): one server per test
session (per pytest-xdist worker, each in its own network), one new database per test.

Tests load it with ``pytest_plugins = ["tests.postgres_fixture"]``. Where PostgreSQL is missing
and cannot be installed (not root, no apt-get), the tests that need it skip with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pgserver import PostgresServer, postgres_server
from tests.sysdeps import CannotInstall


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    try:
        with postgres_server() as server:
            yield server
    except CannotInstall as missing:
        pytest.skip(str(missing))


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> Iterator[str]:
    """A new empty database of the session's server: its URL, password included."""
    url = postgres.create_database()
    try:
        yield url
    finally:
        postgres.drop_database(url)
