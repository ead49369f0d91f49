"""What every layer shares: a real PostgreSQL, for every layer but unit.

The database is DATABASE_URL when set (CI's running server), else an embedded
PostgreSQL started once per session; tests never skip for want of one. The
schema is migrated once into a template database; each test gets its own
database cloned from it, dropped afterwards. Nothing starts until a test asks.

Each layer's folder has its own conftest.py: unit/ refuses the database, store/
opens a Store on it, and e2e/, spanner/, faults/ and tools/ take the server
fixtures they use from servers.py.
"""

import os

# Tests fork (pg_ctl, servers, grpcurl) from a process with gRPC threads; gRPC's
# fork handlers then crash the child at random. Children exec at once, so the
# handlers are not needed. Must be set before grpc is imported.
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

import asyncio  # noqa: E402
import pathlib
import signal
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from spanq_server.ground.clock import ManualClock
from spanq_server.store import Store

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# SIGTERM (`timeout`, CI cancelling a job) would end pytest at once: no fixture finalizer, no
# atexit handler, and the PostgreSQL servers, PgBouncers and spanq servers the session started
# would outlive it. As an interrupt, pytest unwinds and stops each of them.
if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _terminated)


def _with_db(url: str, dbname: str) -> str:
    return make_conninfo(url, dbname=dbname)


@pytest.fixture(scope="session")
def pg_url() -> str:
    """A PostgreSQL server URL (its maintenance database)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    from spanq_server.embedded import start_embedded

    return start_embedded(ROOT / ".spanq" / "test")


@pytest.fixture(scope="session")
def template_db(pg_url: str) -> Iterator[str]:
    name = f"spanq_template_{os.getpid()}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')

    async def migrate() -> None:
        async with Store(_with_db(pg_url, name), min_size=1, max_size=1) as store:
            await store.migrate()

    asyncio.run(migrate())
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def database_url(pg_url: str, template_db: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"spanq_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield _with_db(pg_url, name)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def clock() -> ManualClock:
    """The server's clock: real time plus an offset the test advances instead of sleeping."""
    return ManualClock()


@pytest.fixture
def sql(database_url: str) -> Iterator[psycopg.Connection]:
    """A plain autocommit psql-like connection to the test's database."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn
