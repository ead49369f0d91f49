"""What a Receive stream must survive: its queue dropped and created again on
another server, responses too large for a client, rows it cannot encode.
Real servers on real sockets over a real PostgreSQL."""

import asyncio
import dataclasses
from datetime import timedelta

import grpc
import pytest

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.ground.config import ConfigError, Limits
from spanq_server.server import start

from ..helpers import ack, create_queue, duration, key, open_stream, plain, send, text_message, until, value


async def test_a_stream_notices_its_queue_was_dropped_and_created_again_on_another_server(
        stub, server, server_config, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await asyncio.wait_for(server.wakeups.connected.wait(), 5)
    other = await start(server_config)
    try:
        async with grpc.aio.insecure_channel(other.target) as channel:
            b = queue_pb2_grpc.QueueServiceStub(channel)
            async with open_stream(stub, "tasks") as s:
                await send(stub, "tasks", text_message("warm", "x"))
                await ack(stub, "tasks", await s.next())  # the stream is live and idle
                await b.DropQueue(queue_pb2.DropQueueRequest(name="tasks"))
                await create_queue(b, "tasks", key_columns=[queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64)],
                                   payload_type=queue_pb2.BYTES)
                await b.Send(queue_pb2.SendRequest(queue="tasks", messages=[
                    queue_pb2.SendMessage(key=key(7), payload=value("AAE="))]))
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await asyncio.wait_for(s.task, 10)
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND, raised.value.details()
        assert "created again" in (raised.value.details() or "")
        # The new queue's message was not leased by the stale stream.
        assert sql.execute('SELECT n, spanq_lease_token, spanq_delivery_attempt FROM "tasks"').fetchall() == [
            (7, None, 0)]
    finally:
        await other.stop(0)


async def test_a_stream_opened_after_another_server_created_the_queue_again_receives_from_the_new_one(
        stub, server, server_config, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await stub.GetQueue(queue_pb2.GetQueueRequest(name="tasks"))  # this server now holds the definition
    other = await start(server_config)
    try:
        async with grpc.aio.insecure_channel(other.target) as channel:
            b = queue_pb2_grpc.QueueServiceStub(channel)
            await b.DropQueue(queue_pb2.DropQueueRequest(name="tasks"))
            await create_queue(b, "tasks", key_columns=[queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64)],
                               payload_type=queue_pb2.BYTES)
            await b.Send(queue_pb2.SendRequest(queue="tasks", messages=[
                queue_pb2.SendMessage(key=key(7), payload=value("AAE="))]))
        # Opened after the re-create, on the server that held the old definition: the new queue's.
        async with open_stream(stub, "tasks") as s:
            got = await s.next()
        assert plain(got.key) == ["7"]
    finally:
        await other.stop(0)


# -- responses are sized by bytes -------------------------------------------------------

MIB = 1024 * 1024


async def test_a_batch_larger_than_a_client_accepts_arrives_in_several_responses(stub):
    await create_queue(stub, "big", payload_type=queue_pb2.STRING)
    await stub.Send(queue_pb2.SendRequest(queue="big", messages=[
        text_message(f"k{i}", str(i) * MIB) for i in range(5)]))  # each at the 1 MiB payload limit
    # A default client (4 MiB receive limit): one 5.2 MB response would fail RESOURCE_EXHAUSTED.
    async with open_stream(stub, "big", max_batch_size=5) as s:
        got = await s.take(5, timeout=10)
        assert s.responses >= 2
    assert sorted(m.payload.string_value[0] for m in got) == list("01234")
    assert [m.last_batch_message for m in got] == [False] * 4 + [True]


async def test_the_response_limit_is_configurable(server_config, clock):
    config = dataclasses.replace(server_config, limits=Limits(max_payload_bytes=600, max_response_bytes=5000))
    running = await start(config, clock=clock)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "small", payload_type=queue_pb2.STRING)
            await stub.Send(queue_pb2.SendRequest(queue="small", messages=[
                text_message(f"k{i}", "x" * 500) for i in range(30)]))
            responses = []
            call = stub.Receive(queue_pb2.ReceiveRequest(queue="small", max_batch_size=30))
            async for response in call:
                responses.append(response)
                if sum(len(r.messages) for r in responses) == 30:
                    break
            call.cancel()
    finally:
        await running.stop(0)
    assert len(responses) > 1 and all(r.ByteSize() <= 5000 for r in responses)
    assert [m.last_batch_message for r in responses for m in r.messages] == [False] * 29 + [True]
    with pytest.raises(ConfigError, match="max-response-bytes"):
        Limits(max_payload_bytes=600, max_response_bytes=4000)  # 600 bytes in base64 would not fit


# -- rows that no client can receive ---------------------------------------------------------


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def undeliverable(server, queue: str) -> float:  # type: ignore[no-untyped-def]
    return server.metrics.registry.get_sample_value("spanq_queue_messages_undeliverable_total", {"queue": queue}) or 0


async def test_rows_sql_wrote_that_no_client_can_receive_go_to_the_dead_letter_queue(stub, server, sql):
    await create_queue(stub, "docs_dead", payload_type=queue_pb2.JSON)
    await create_queue(stub, "docs", payload_type=queue_pb2.JSON, dead_letter_queue="docs_dead",
                       max_delivery_attempts=5)
    sql.execute("INSERT INTO docs (id, payload) VALUES ('ok1', '{\"a\": 1}'), (%s, %s), (%s, %s), (%s, %s), "
                "('ok2', '[2]')",
                ["overflow", '{"n": 1' + "0" * 400 + "}", "deep", nested(200), "deeper", nested(5000)])
    async with open_stream(stub, "docs", max_batch_size=10) as s:
        got = await s.take(2)
        await s.quiet()
    assert sorted(m.key.values[0].string_value for m in got) == ["ok1", "ok2"]
    assert [m.last_batch_message for m in got][-1] is True
    assert sorted(r[0] for r in sql.execute("SELECT id FROM docs_dead").fetchall()) == ["deep", "deeper", "overflow"]
    assert sorted(r[0] for r in sql.execute("SELECT id FROM docs").fetchall()) == ["ok1", "ok2"]
    assert undeliverable(server, "docs") == 3

    # A TIMESTAMP key of 'infinity' (Python has no such datetime) goes the same way.
    at = [queue_pb2.KeyColumn(name="at", type=queue_pb2.TIMESTAMP)]
    await create_queue(stub, "events_dead", key_columns=at, payload_type=queue_pb2.STRING)
    await create_queue(stub, "events", key_columns=at, payload_type=queue_pb2.STRING, dead_letter_queue="events_dead",
                       max_delivery_attempts=5)
    sql.execute("INSERT INTO events (at, payload) VALUES ('infinity', 'bad'), ('2026-01-02T03:04:05Z', 'good')")
    async with open_stream(stub, "events", max_batch_size=10) as s:
        [m] = await s.take(1)
        await s.quiet()
    assert m.payload.string_value == "good"
    assert sql.execute("SELECT at::text, payload FROM events_dead").fetchall() == [("infinity", "bad")]


async def test_an_undeliverable_row_without_a_dead_letter_queue_stays_and_is_logged_once(
        stub, server, sql, clock, caplog):
    await create_queue(stub, "docs", payload_type=queue_pb2.JSON, initial_backoff=duration(0))
    sql.execute("INSERT INTO docs (id, payload) VALUES ('deep', %s), ('ok', '{}')", [nested(200)])
    async with open_stream(stub, "docs", max_batch_size=10, lease_duration=duration(10)) as s:
        [m] = await s.take(1)
        assert m.key.values[0].string_value == "ok"
        await ack(stub, "docs", m)
        clock.advance(timedelta(seconds=11))  # the bad row's lease ends: it is leased (and skipped) again

        def attempts() -> int:
            return sql.execute("SELECT spanq_delivery_attempt FROM docs WHERE id = 'deep'").fetchone()[0]

        await until(lambda: attempts() >= 2, "the bad row leased a second time")
        await send(stub, "docs", queue_pb2.SendMessage(key=key("later"), payload=value({"b": 2})))
        [later] = await s.take(1)  # the stream lives on
    assert later.key.values[0].string_value == "later"
    logged = [r for r in caplog.records if "cannot be delivered" in r.getMessage() and "deep" in r.getMessage()]
    assert len(logged) == 1 and "nested more than 30" in logged[0].getMessage()
    assert undeliverable(server, "docs") == 1
    assert sql.execute("SELECT count(*) FROM docs WHERE id = 'deep'").fetchone() == (1,)
