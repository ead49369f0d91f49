"""Serving: migrations under concurrent start-up, health, graceful shutdown."""

import asyncio
import dataclasses
import socket
import uuid

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg.conninfo import make_conninfo

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.config import Config, ConfigError
from spanq_server.server import is_loopback, start
from spanq_server.sql import MIGRATIONS

from .helpers import create_queue, until


@pytest.fixture
def empty_database(pg_url):
    """A database with no spanq schema at all."""
    name = f"spanq_e_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(pg_url, dbname=name)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_two_servers_starting_at_once_migrate_once(empty_database):
    config = Config(database_url=empty_database, listen="127.0.0.1:0", pool_min_size=1, metrics_listen="")
    servers = await asyncio.gather(*(start(config) for _ in range(3)))
    try:
        with psycopg.connect(empty_database) as conn:
            versions = [r[0] for r in conn.execute("SELECT version FROM spanq.schema_migrations ORDER BY 1")]
        assert versions == [m.version for m in MIGRATIONS]
        async with grpc.aio.insecure_channel(servers[1].target) as channel:
            await create_queue(queue_pb2_grpc.QueueServiceStub(channel), "works", payload_type=queue_pb2.STRING)
    finally:
        for s in servers:
            await s.stop(0)
    # A restart finds nothing to apply.
    again = await start(config)
    await again.stop(0)


async def test_health_and_graceful_shutdown_ends_streams_with_unavailable(server, stub, channel, waiting):
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service="spanq.v1.QueueService"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    call = stub.Receive(queue_pb2.ReceiveRequest(queue="q"))
    reader = asyncio.ensure_future(call.read())
    await waiting.wait(what="the stream open and idle")
    await server.stop(grace=2)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await reader
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "reconnect" in (failure.value.details() or "")


def test_plaintext_is_refused_off_loopback_by_default():
    assert is_loopback("localhost:50051") and is_loopback("127.0.0.1:0") and is_loopback("[::1]:1")
    assert not is_loopback("0.0.0.0:50051") and not is_loopback("example.com:1")


async def test_refuses_to_serve_plaintext_on_a_public_address(database_url):
    with pytest.raises(ValueError, match="tls-cert"):
        await start(Config(database_url=database_url, listen="0.0.0.0:0"))


@pytest.mark.parametrize("taken", ["listen", "metrics_listen"])
async def test_an_address_in_use_is_a_clear_refusal_and_leaves_nothing_running(database_url, taken):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        config = Config(database_url=database_url, listen="127.0.0.1:0", metrics_listen="127.0.0.1:0")
        before = {t for t in asyncio.all_tasks() if not t.done()}
        with pytest.raises(ConfigError, match=f"cannot serve .*on {address}.*give --"):
            await start(dataclasses.replace(config, **{taken: address}))
    # Nothing the failed start began is left behind (the ledger pruner, the listener).
    await until(lambda: {t for t in asyncio.all_tasks() if not t.done()} <= before | {asyncio.current_task()},
                "the failed start's tasks to end", 2)
