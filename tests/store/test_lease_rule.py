"""The lease-safety rule (receive.py, docs/semantics.md): a stream gives a lease back only
if no response carrying it was ever handed to the transport. Driven without gRPC: the
write raises CancelledError after it was called, as gRPC does when it processes a client's
cancel before the send it already started reports its end."""

import asyncio
import contextlib
from typing import Any

import pytest

from spanq_server.ground.clock import ManualClock
from spanq_server.ground.model import AckFound, AckItem, LeasedMessage, QueueDef
from spanq_server.domain.receive.stream import Encoded, Handover, Receiver, ReceiveOptions
from spanq_server.store import Store

from .conftest import send


def one_response_each(batch: list[LeasedMessage], max_bytes: int) -> Encoded[LeasedMessage]:
    return Encoded([(m, [m]) for m in batch], [])


async def first_batch(receiver: Receiver, queue: QueueDef) -> list[LeasedMessage]:
    async with contextlib.aclosing(receiver.stream(queue, ReceiveOptions(max_batch_size=10))) as batches:
        async for batch in batches:
            return batch
    raise AssertionError("the stream ended without a batch")


async def test_a_response_handed_to_the_transport_keeps_its_lease_when_the_write_is_cancelled(
        store: Store, receiver: Receiver, queue: QueueDef, clock: ManualClock) -> None:
    await send(store, queue, clock, "a", "b", "c")
    written: list[LeasedMessage] = []

    async def write(m: LeasedMessage) -> None:
        written.append(m)
        if len(written) == 2:  # the bytes of b went out; gRPC reports the client's cancel first
            raise asyncio.CancelledError()

    with pytest.raises(asyncio.CancelledError):
        await receiver.serve(queue, ReceiveOptions(max_batch_size=3), one_response_each, write)
    await receiver.given_back(5)
    assert [m.key for m in written] == [("a",), ("b",)]

    # A second stream, within the first one's lease: it gets c (never handed over, so given
    # back, its attempt as before) and the marker sent now, never a or b.
    await send(store, queue, clock, "marker")
    second = await first_batch(receiver, queue)
    assert [(m.key, m.delivery_attempt) for m in second] == [(("c",), 1), (("marker",), 1)]

    # The first holder still holds a and b: its tokens are current, and its acks succeed.
    assert await store.leases_lapsed(queue, [m.lease_token for m in written], clock.now()) == (0, 2)
    async with store.transaction(queue.name) as handle:
        acks = await store.messages_ack(handle, queue, [AckItem(m.key, m.lease_token) for m in written])
    assert acks == [AckFound.ACKED, AckFound.ACKED]


async def test_a_lease_kept_after_a_cancelled_write_lapses_as_any_other(
        store: Store, receiver: Receiver, queue: QueueDef, clock: ManualClock) -> None:
    await send(store, queue, clock, "a")

    async def write(m: LeasedMessage) -> None:
        raise asyncio.CancelledError()

    with pytest.raises(asyncio.CancelledError):
        await receiver.serve(queue, ReceiveOptions(max_batch_size=1), one_response_each, write)
    await receiver.given_back(5)
    await send(store, queue, clock, "marker")
    assert [m.key for m in await first_batch(receiver, queue)] == [("marker",)]

    clock.advance(queue.lease_duration + queue.max_backoff)  # the lease ran out, then its backoff
    again = await first_batch(receiver, queue)
    assert [(m.key, m.delivery_attempt) for m in again] == [(("a",), 2), (("marker",), 2)]


async def test_a_handover_gives_back_only_what_was_never_handed_to_write() -> None:
    handed: list[str] = []
    messages: dict[str, Any] = {k: object() for k in "abc"}

    async def write(response: str) -> None:
        handed.append(response)
        if response == "b":
            raise ConnectionError("the call broke")

    handover = Handover([(k, [messages[k]]) for k in "abc"])
    with pytest.raises(ConnectionError):
        await handover.write_all(write, 1)
    assert handed == ["a", "b"]
    assert handover.take_back() == [messages["c"]]
    assert handover.take_back() == []  # each once


async def test_a_write_cancelled_before_it_ran_still_counts_as_handed_over() -> None:
    messages: dict[str, Any] = {k: object() for k in "ab"}

    async def write(response: str) -> None:
        await asyncio.sleep(10)

    handover = Handover([(k, [messages[k]]) for k in "ab"])
    task = asyncio.ensure_future(handover.write_all(write, 1))
    await asyncio.sleep(0)  # write("a") was called; whether gRPC began to send it nobody can tell
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert handover.take_back() == [messages["b"]]
