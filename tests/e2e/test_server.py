"""Serving: migrations under concurrent start-up, health, graceful shutdown."""

import asyncio
import dataclasses
import socket
import subprocess
import sys
import uuid

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg.conninfo import make_conninfo

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.cli import parse_config
from spanq_server.ground.config import Config, ConfigError
from spanq_server.server import is_loopback, start
from spanq_server.sql import MIGRATIONS

from ..helpers import create_queue, until


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


def test_serve_knows_which_addresses_are_its_defaults():
    assert parse_config(["serve"], {}).default_listens == {"metrics", "ui"}
    assert parse_config(["serve", "--ui-listen", "localhost:9999"], {}).default_listens == {"metrics"}
    assert parse_config(["serve"], {"SPANQ_METRICS_LISTEN": "localhost:9464"}).default_listens == {"ui"}


@pytest.mark.parametrize("taken", ["metrics_listen", "ui_listen"])
async def test_a_default_port_taken_costs_that_endpoint_alone(database_url, taken, caplog):
    """A second server on one host (or anything on 9464/9465): `spanq serve` without --ui-listen or
    --metrics-listen warns and serves gRPC; one of them given explicitly still stops it."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        config = Config(database_url=database_url, listen="127.0.0.1:0",
                        **{"metrics_listen": "off", "ui_listen": "off", taken: address})
        with pytest.raises(ConfigError, match=f"cannot serve .* on {address}"):
            await start(config)
        running = await start(dataclasses.replace(config, default_listens=frozenset({"metrics", "ui"})))
        try:
            assert (running.metrics_port, running.ui_port, running.dashboard) == (None, None, None)
            async with grpc.aio.insecure_channel(running.target) as channel:
                health = health_pb2_grpc.HealthStub(channel)
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            await running.stop(0)
    [warning] = [r for r in caplog.records if r.levelname == "WARNING" and address in r.getMessage()]
    assert "serving without" in warning.getMessage() and "Address already in use" in warning.getMessage()


def test_an_explicit_ui_listen_that_cannot_bind_stops_serve_with_one_line(database_url):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "spanq_server", "serve", "--database-url", database_url, "--listen", "127.0.0.1:0",
             "--metrics-listen", "off", "--ui-listen", address, "--log-level", "WARNING"],
            capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"spanq: cannot serve the dashboard on {address}: Address already in use; give --ui-listen another "
        "HOST:PORT, or off"), done.stderr
    assert "Traceback" not in done.stderr
