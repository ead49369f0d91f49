"""Lease safety over a real socket: a message a client read is never leased to another
stream while its first lease lasts, however the first stream ends (issue 20).

gRPC reports a send's end late: a client that reads a response and cancels (or drops its
channel) at once is sometimes seen cancelled before the server's write of that response
returns. Such a write raises, and a stream that gave back what it was writing handed the
message to the next stream with the same delivery attempt, the first holder's ack then
refused. It is a race on the host's scheduling, so each case loops ITERATIONS times
(SPANQ_CHAOS_SCALE times more in `make chaos`), against a server in its own process (with
client and server on one event loop the cancel never overtook the write's end). Seen from
outside at 1 in 150 (cancel) to 1 in 20 (drop). Here, against the old code, it showed only
with the server busy on another queue (2 of 300 drops), not on a quiet server (0 in about
3,000): tests/store/test_lease_rule.py pins the same defect without a race.
"""

import os
import time
from collections.abc import Awaitable, Callable, Iterator

import grpc
import pytest

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from ..helpers import create_queue, duration, send, text_message, until
from ..spawned import free_port, spawn_server, wait_serving_sync

SCALE = int(os.environ.get("SPANQ_CHAOS_SCALE", "1"))
ITERATIONS = 300 * SCALE
LEASE = 60  # seconds: far longer than any one iteration, so every check is within the first lease
PAYLOAD = "x" * 100_000


@pytest.fixture
def target(database_url: str) -> Iterator[str]:
    """A server in its own process that allows ONE stream per queue: a second Receive is
    accepted only once the server has ended the first stream (and started any give-back)."""
    port = free_port()
    process = spawn_server(database_url, port, "--max-streams-per-queue", "1")
    try:
        wait_serving_sync(f"127.0.0.1:{port}")
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(60)


async def _cancel(call: grpc.aio.UnaryStreamCall, channel: grpc.aio.Channel) -> None:
    call.cancel()


async def _drop(call: grpc.aio.UnaryStreamCall, channel: grpc.aio.Channel) -> None:
    await channel.close()


async def _read(call: grpc.aio.UnaryStreamCall) -> queue_pb2.ReceiveResponse:
    response = await call.read()
    assert isinstance(response, queue_pb2.ReceiveResponse), response  # not EOF: the stream goes on
    return response


def _named(messages: list[queue_pb2.ReceivedMessage], name: str) -> bool:
    return any(m.key.values[0].string_value == name for m in messages)


async def _first_response(stub: queue_pb2_grpc.QueueServiceStub, max_batch_size: int
                          ) -> tuple[grpc.aio.UnaryStreamCall, queue_pb2.ReceiveResponse]:
    """A new stream and its first response, once the server has ended the stream before it."""
    async def opened() -> tuple[grpc.aio.UnaryStreamCall, queue_pb2.ReceiveResponse] | None:
        call = stub.Receive(queue_pb2.ReceiveRequest(queue="q", max_batch_size=max_batch_size))
        try:
            return call, await _read(call)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:  # not: the stream before is still open
                raise
            return None

    found: tuple[grpc.aio.UnaryStreamCall, queue_pb2.ReceiveResponse] = await until(
        opened, "the stream before to end", interval=0.001)
    return found


async def _up_to(stub: queue_pb2_grpc.QueueServiceStub, marker: str) -> list[queue_pb2.ReceivedMessage]:
    """What a new stream gets up to the marker."""
    call, response = await _first_response(stub, 10)
    got = list(response.messages)
    while not _named(got, marker):
        got.extend((await _read(call)).messages)
    call.cancel()
    return got


@pytest.mark.timeout(120 * SCALE)
@pytest.mark.parametrize("end", [_cancel, _drop], ids=["cancel", "drop the channel"])
async def test_a_message_read_then_the_call_ended_is_not_leased_again_within_its_lease(
        target: str, end: Callable[[grpc.aio.UnaryStreamCall, grpc.aio.Channel], Awaitable[None]]) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        await create_queue(stub, "q", payload_type=queue_pb2.STRING, lease_duration=duration(LEASE))
        twice: list[str] = []
        refused: list[str] = []
        started = time.monotonic()
        for i in range(ITERATIONS):
            await send(stub, "q", text_message(f"m{i}", PAYLOAD))
            async with grpc.aio.insecure_channel(target) as own:
                call, response = await _first_response(queue_pb2_grpc.QueueServiceStub(own), 1)
                [first] = response.messages
                await end(call, own)

            # A message given back would come before the marker (it gets its old deliver_time back).
            await send(stub, "q", text_message(f"marker{i}", "x"))
            got = await _up_to(stub, f"marker{i}")
            if _named(got, f"m{i}"):
                twice.append(f"m{i}")
            try:  # the first holder's ack, with its token
                await stub.Ack(queue_pb2.AckRequest(queue="q", acks=[
                    queue_pb2.AckMessage(key=first.key, lease_token=first.lease_token)]))
            except grpc.aio.AioRpcError as exc:
                refused.append(f"m{i}: {exc.code().name} {exc.details()}")
            # Whatever the second stream took, gone: the next iteration starts empty.
            await stub.Ack(queue_pb2.AckRequest(queue="q", ignore_not_found=True,
                                                acks=[queue_pb2.AckMessage(key=m.key) for m in got]))
        took = time.monotonic() - started
    print(f"\n{end.__name__}: {ITERATIONS} iterations in {took:.1f} s")
    assert twice == [], f"leased again within the first lease, in {len(twice)} of {ITERATIONS}: {twice}"
    assert refused == [], f"the first holder's ack refused in {len(refused)} of {ITERATIONS}: {refused[:3]}"
