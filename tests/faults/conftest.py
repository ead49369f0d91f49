"""Real faults, bounded: restarted, killed and replicated PostgreSQL servers, cut database
connections, PgBouncer between spanq and PostgreSQL, and the soaks (`make chaos` runs them
longer)."""

from collections.abc import Iterator

import pytest

from ..pgbouncer import PgBouncer, ensure_installed
from ..servers import server, server_config, waiting  # noqa: F401  (fixtures)


@pytest.fixture(scope="session")
def pgbouncer_installed() -> None:
    missing = ensure_installed()
    if missing:
        pytest.skip(missing)


@pytest.fixture
def pgbouncer(pgbouncer_installed: None, database_url: str) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode in front of the test's database."""
    bouncer = PgBouncer(database_url, "transaction")
    yield bouncer
    bouncer.stop()
