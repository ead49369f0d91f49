"""The stream roster (domain/receive/roster.py): every server on one database reports
its open Receive streams to spanq.stream_roster, so that the dashboard of any of them
lists the consumers of all. Two real servers on one real PostgreSQL."""

import asyncio
import dataclasses
import json
import urllib.request
from typing import Any

import grpc
from psycopg.types.json import Jsonb

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start
from spanq_server.store import Store

from ..helpers import create_queue, open_stream, until


def api(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
        return json.loads(answer.read())


async def test_two_servers_on_one_database_list_each_others_consumers(server_config, clock, sql):
    a = await start(dataclasses.replace(server_config, ui_listen="127.0.0.1:0"), clock=clock)
    b = await start(server_config, clock=clock)
    try:
        assert a.ui_port is not None and a.roster is not None and b.roster is not None
        async with grpc.aio.insecure_channel(a.target) as on_a, grpc.aio.insecure_channel(b.target) as on_b:
            await create_queue(queue_pb2_grpc.QueueServiceStub(on_a), "tasks", payload_type=queue_pb2.STRING)
            async with open_stream(queue_pb2_grpc.QueueServiceStub(on_b), "tasks", max_outstanding=4):
                def listed() -> Any:
                    found = api(a.ui_port, "/api/queues/tasks/consumers")
                    return found if found["streams"] else None

                found = await until(lambda: asyncio.to_thread(listed), "b's stream on a's list", 10, 0.1)
                [stream] = found["streams"]
                assert (stream["server"], stream["max_outstanding"], stream["queue"]) == (b.roster.server, 4, "tasks")
                assert stream["reported_ago"] < 10 and found["server"] == a.roster.server != b.roster.server
                streams = await asyncio.to_thread(api, a.ui_port, "/api/streams")
                assert (streams["open_streams"], streams["queues"][0]["streams"]) == (1, 1)
        # b's stream ended: its row goes at once (an idle server keeps none).
        await until(lambda: sql.execute("SELECT count(*) FROM spanq.stream_roster").fetchone() == (0,),
                    "b's row withdrawn", 10, 0.1)
    finally:
        await b.stop(0)
        await a.stop(0)
    assert api_rows(sql) == []


def api_rows(sql: Any) -> list[Any]:
    return sql.execute("SELECT server FROM spanq.stream_roster").fetchall()


async def test_a_stopping_server_withdraws_its_streams(server_config, clock, sql):
    b = await start(server_config, clock=clock)
    stopped = False
    try:
        async with grpc.aio.insecure_channel(b.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
            async with open_stream(stub, "tasks"):
                await until(lambda: api_rows(sql) == [(b.roster.server,)], "b's row", 10, 0.05)
                await b.stop(0)  # with the stream still open: shutdown ends it, then withdraws the row
                stopped = True
                assert api_rows(sql) == []
    finally:
        if not stopped:
            await b.stop(0)


async def test_a_dead_servers_row_is_left_out_then_pruned(server, stub, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    stream = {"queue": "tasks", "peer": "ipv4:10.0.0.9:1234", "opened_at": "2026-01-01T00:00:00+00:00", "held": 0,
              "delivered": 0, "max_outstanding": 1, "max_batch_size": 1, "lease_duration_seconds": 10.0}
    for instance, age in (("dead", "1 hour"), ("alive", "0 s")):
        sql.execute("INSERT INTO spanq.stream_roster VALUES (%s, %s, %s, statement_timestamp() - %s::interval)",
                    (instance, f"server {instance}", Jsonb([stream]), age))
    assert [r.server for r in await server.roster.elsewhere("tasks")] == ["server alive"]
    assert await server.roster.elsewhere("other") == []
    assert await server.roster.counts() == {"tasks": 1}
    async with open_stream(stub, "tasks"):  # this server reports, and deletes the dead one's row
        await until(lambda: sorted(r[0] for r in sql.execute("SELECT instance FROM spanq.stream_roster"))
                    == sorted(["alive", server.roster._instance]), "the dead row pruned", 10, 0.05)
        assert await server.roster.counts() == {"tasks": 2}


async def test_migration_0016_adds_the_stream_roster(database_url, sql):
    sql.execute("DROP TABLE spanq.stream_roster")
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 16")
    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [16]
    assert sql.execute("SELECT count(*) FROM spanq.stream_roster").fetchone() == (0,)


async def test_a_localhost_client_over_ipv6_is_listed_by_its_address(server_config, clock):
    """`localhost` is ::1 first on most machines: gRPC's peer string encodes its brackets
    (ipv6:%5B::1%5D:PORT), which the list shows decoded."""
    running = await start(dataclasses.replace(server_config, listen="[::1]:0", ui_listen="127.0.0.1:0"), clock=clock)
    try:
        async with grpc.aio.insecure_channel(f"[::1]:{running.port}") as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
            async with open_stream(stub, "tasks"):
                def listed() -> Any:
                    return api(running.ui_port, "/api/queues/tasks/consumers")["streams"]

                [stream] = await until(lambda: asyncio.to_thread(listed), "the stream listed", 10, 0.05)
                assert stream["peer"].startswith("ipv6:[::1]:"), stream["peer"]
    finally:
        await running.stop(0)


async def test_a_failed_report_is_tried_again_and_said_once(server, stub, sql, caplog):
    """The roster's table unreachable (renamed away) when a stream opens: the report fails, is said
    once, and is made at a heartbeat once the table is back, with no stream opening or closing."""
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    sql.execute("ALTER TABLE spanq.stream_roster RENAME TO stream_roster_away")
    try:
        async with open_stream(stub, "tasks"):
            await until(lambda: any("could not report" in r.getMessage() for r in caplog.records),
                        "the failed report said", 10, 0.05)
            sql.execute("ALTER TABLE spanq.stream_roster_away RENAME TO stream_roster")
            await until(lambda: api_rows(sql) == [(server.roster.server,)], "the report made again", 15, 0.1)
            assert sum("could not report" in r.getMessage() for r in caplog.records) == 1
    finally:
        sql.execute("ALTER TABLE IF EXISTS spanq.stream_roster_away RENAME TO stream_roster")
