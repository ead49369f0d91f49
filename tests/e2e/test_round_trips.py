"""What the database sees per message of a one-at-a-time worker (max_batch_size 1,
max_outstanding 1, each message acked before the next): a lease and an ack, nothing
else. max_outstanding still holds when the server cannot know what freed room (acks
and renewals through SQL or another server): it recounts then (held.py).

Each server here polls every 30 s unless the test says otherwise, so a message that
comes within seconds came from what the server knew, not from a poll.
"""

import contextlib
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import grpc
import pytest

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.ground.config import Config
from spanq_server.server import start

from ..helpers import ack, create_queue, duration, open_stream, plain, renew, send, text_message, until


@pytest.fixture
def server_config(server_config: Config) -> Config:
    return dataclasses.replace(server_config, poll_interval=timedelta(seconds=30))


@contextlib.contextmanager
def checkouts(store: Any) -> Iterator[Counter[str]]:
    """Counts the server's database transactions: each ``_read`` (an autocommitted statement,
    such as a lease or a grouped ack) and each ``_transaction`` (every transaction of the
    store's, Store.transaction included) is one commit the database sees."""
    counts: Counter[str] = Counter()
    originals = {name: getattr(store, name) for name in ("_read", "_transaction")}

    def counting(name: str) -> Any:
        @contextlib.asynccontextmanager
        async def wrapped(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            counts[name] += 1
            async with originals[name](*args, **kwargs) as conn:
                yield conn
        return wrapped

    for name in originals:
        setattr(store, name, counting(name))
    try:
        yield counts
    finally:
        for name in originals:
            delattr(store, name)


async def test_a_one_at_a_time_worker_costs_a_lease_and_an_ack_per_message(stub, server):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    n = 20
    await send(stub, "tasks", *[text_message(f"m{i:02}", str(i)) for i in range(n + 1)])
    async with open_stream(stub, "tasks", max_batch_size=1, max_outstanding=1, lease_duration=duration(60)) as s:
        first = await s.next()
        with checkouts(server.store) as counts:
            await ack(stub, "tasks", first)
            for _ in range(n):
                m = await s.next(timeout=2)
                await ack(stub, "tasks", m)
            await s.quiet(0.2)  # nothing left: the last ack's lease finds none, and the stream waits
    # Per message: its lease and its ack (a statement that commits by itself). Past the
    # last: one empty lease and the waiting stream's look at the next deliver_time.
    assert sum(counts.values()) <= 2 * (n + 1) + 2, counts
    assert len({plain(m.key)[0] for m in s.received}) == n + 1


async def test_a_lease_renewed_elsewhere_still_holds_the_streams_slot(stub, server, sql, clock):
    """Renewed through SQL, the server does not know the new token: past the first lease's
    end it recounts, finds the renewed lease, and leases nothing more."""
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", text_message("a", "x"), text_message("b", "y"))
    async with open_stream(stub, "tasks", lease_duration=duration(10), max_outstanding=1) as s:
        m = await s.next()
        new = sql.execute("SELECT spanq_new_lease_token FROM spanq.renewlease_tasks(%s, interval '60 seconds')",
                          ([m.lease_token],)).fetchone()[0]
        sql.commit()
        assert new and new.split(".")[0] == m.lease_token.split(".")[0]
        clock.advance(timedelta(seconds=20))  # past the first lease; the renewed one holds the slot
        await s.quiet()
        await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[queue_pb2.AckMessage(key=m.key, lease_token=new)]))
        other = await s.next(timeout=2)  # the ack through this server names the renewed token: room
    assert plain(other.key) != plain(m.key)


async def test_an_ack_by_key_alone_frees_the_slot_at_once(stub, server):
    """Without a token the server cannot tell whose lease an ack settled: the streams of the
    queue recount rather than wait for the poll."""
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("a", "x"), text_message("b", "y"))
    async with open_stream(stub, "tasks", lease_duration=duration(60), max_outstanding=1) as s:
        m = await s.next()
        await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[queue_pb2.AckMessage(key=m.key)]))
        other = await s.next(timeout=2)
    assert plain(other.key) != plain(m.key)


@contextlib.asynccontextmanager
async def polling_every(server_config: Config, seconds: float) -> AsyncIterator[queue_pb2_grpc.QueueServiceStub]:
    """A server of its own that polls every ``seconds``; yields a stub to it."""
    running = await start(dataclasses.replace(server_config, poll_interval=timedelta(seconds=seconds)))
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            yield queue_pb2_grpc.QueueServiceStub(channel)
    finally:
        await running.stop(0)


async def test_an_ack_in_sql_frees_the_slot_at_the_poll(server_config, sql):
    """Acks the server never sees free room when it recounts, at its poll."""
    async with polling_every(server_config, 0.5) as stub:
        await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
        await send(stub, "tasks", text_message("a", "x"), text_message("b", "y"))
        async with open_stream(stub, "tasks", lease_duration=duration(60), max_outstanding=1) as s:
            m = await s.next()
            sql.execute("DELETE FROM tasks WHERE spanq_lease_token = %s", (m.lease_token,))
            sql.commit()
            other = await s.next(timeout=5)
    assert plain(other.key) != plain(m.key)


async def test_an_ack_in_sql_frees_the_slot_at_the_poll_while_other_streams_ack_here(server_config, sql):
    """Another stream's acks through the server wake every stream of the queue, more often than
    the poll: the full stream still recounts at the poll interval, not only at its lease's end."""
    async with polling_every(server_config, 0.5) as stub:
        await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
        await send(stub, "tasks", *[text_message(f"m{i:03}", str(i)) for i in range(200)])
        async with open_stream(stub, "tasks", lease_duration=duration(60), max_outstanding=1) as a:
            m = await a.next()
            sql.execute("DELETE FROM tasks WHERE spanq_lease_token = %s", (m.lease_token,))
            sql.commit()
            async with open_stream(stub, "tasks", lease_duration=duration(60), max_outstanding=1) as b:
                async def acked_until_room() -> bool:  # an ack through the server every ~0.1 s, for up to 3 s
                    await ack(stub, "tasks", await b.next())
                    return len(a.received) > 1

                await until(acked_until_room, "room for the stream whose message was acked in SQL", 3, 0.1)


async def test_a_nack_frees_the_slot(stub, server):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(60))
    await send(stub, "tasks", text_message("a", "x"), text_message("b", "y"))
    async with open_stream(stub, "tasks", lease_duration=duration(60), max_outstanding=1) as s:
        m = await s.next()
        await renew(stub, "tasks", m.lease_token, seconds=0)
        other = await s.next(timeout=2)
        await ack(stub, "tasks", other)
    assert plain(other.key) != plain(m.key)
