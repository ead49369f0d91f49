"""The Spanner front-end (google.spanner.v1 on the spanq port), through Google's own client
and its messages, against a real server and PostgreSQL."""

import asyncio
from typing import Any

import pytest

from ..servers import await_idle_streams, channel, server, server_config, stub, waiting  # noqa: F401  (fixtures)


@pytest.fixture
def spanner_env(monkeypatch: pytest.MonkeyPatch, server: Any) -> None:
    """Google's client pointed at the test server, as at Spanner's emulator (a module may
    define its own)."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.target)


def make_database(project: str, instance_id: str, database_id: str, ddl: list[str]) -> Any:
    """What an application's set-up does: the instance if it is missing, then the database with its DDL."""
    from google.cloud import spanner

    instance = spanner.Client(project=project).instance(instance_id)
    if not instance.exists():
        instance.create().result(timeout=30)
    database = instance.database(database_id, ddl_statements=ddl)
    database.create().result(timeout=30)
    return database


def ddl_of(database: Any) -> list[str]:
    """GetDatabaseDdl's statements, as the client reloads them."""
    database.reload()
    return list(database.ddl_statements)


def run(fn: Any, *args: Any) -> Any:
    """A call of Google's (blocking) client off the event loop the test server runs on."""
    return asyncio.to_thread(fn, *args)
