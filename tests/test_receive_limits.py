"""What a Receive stream must survive: its queue dropped and created again on
another server, responses too large for a client, rows it cannot encode.
Real servers on real sockets over a real PostgreSQL."""

import asyncio

import grpc
import pytest

from spanq._proto.spanq.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start

from .helpers import ack, create_queue, key, open_stream, send, text_message, value


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
