"""Unit tests: no PostgreSQL, no server, no DATABASE_URL. A test here that asks for the
database fails and says where it belongs; the server fixtures (servers.py) are not here."""

import pytest


@pytest.fixture(scope="session")
def pg_url() -> str:
    pytest.fail("a unit test uses no PostgreSQL: a test that needs one belongs in tests/store (a Store, no "
                "server) or tests/e2e (a server)")
