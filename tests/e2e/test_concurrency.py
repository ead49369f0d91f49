"""Many Receive streams on one queue, over a real socket and PostgreSQL: every message is
delivered, none is held by two streams at once, and max_outstanding holds per stream
while they compete. Two servers on one database share the work the same way."""

import asyncio
import time
from collections import Counter
from datetime import timedelta

import grpc

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start

from ..helpers import ack, create_queue, duration, open_stream, plain, send, text_message, until

STREAMS = 8
MESSAGES = 3000


class AckingConsumer:
    """One Receive stream that acks each response (with its lease tokens) as soon as it arrives."""

    def __init__(self, stub: queue_pb2_grpc.QueueServiceStub, queue: str, index: int,
                 log: list[tuple[int, queue_pb2.ReceivedMessage]], **fields: object) -> None:
        self.stub, self.queue, self.index, self.log = stub, queue, index, log
        self.call = stub.Receive(queue_pb2.ReceiveRequest(queue=queue, **fields))
        self.failed_acks: list[str] = []
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        async for response in self.call:
            messages = list(response.messages)
            self.log.extend((self.index, m) for m in messages)
            try:
                result = await ack(self.stub, self.queue, *messages)
            except grpc.aio.AioRpcError as exc:
                self.failed_acks.append(f"{exc.code()}: {exc.details()}")
                continue
            self.failed_acks.extend(plain(r.key)[0] for r in result.results if not r.acked)

    async def close(self) -> None:
        self.call.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass


async def _wait_for(predicate, timeout: float) -> None:
    await until(predicate, "every message", timeout)


async def _all_acked(sql, queue: str) -> None:
    """Until every message's ack committed: none is left to deliver a second time."""
    await until(lambda: sql.execute(f'SELECT count(*) FROM "{queue}"').fetchone()[0] == 0, "every ack", 10)


async def _all_full(waiting, queue: str, n: int) -> None:
    """Until ``n`` streams were heard waiting for room under max_outstanding: none leases more."""
    await waiting.until(lambda vs: len({v.stream for v in vs if v.queue == queue and v.full}) >= n,
                        what=f"{n} full streams")


async def _send_all(stub: queue_pb2_grpc.QueueServiceStub, queue: str, keys: list[str]) -> None:
    """Sends in requests of 500 messages, several requests at once."""
    chunks = [keys[i:i + 500] for i in range(0, len(keys), 500)]
    await asyncio.gather(*(send(stub, queue, *[text_message(k, f"payload {k}") for k in chunk])
                           for chunk in chunks))


def _check_once_each(log: list[tuple[int, queue_pb2.ReceivedMessage]], keys: list[str]) -> Counter[int]:
    delivered = Counter(plain(m.key)[0] for _, m in log)
    twice = [k for k, n in delivered.items() if n > 1]
    assert not twice, f"{len(twice)} messages delivered more than once, e.g. {twice[:5]}"
    assert set(delivered) == set(keys), f"missing {len(set(keys) - set(delivered))}"
    tokens = [m.lease_token for _, m in log]
    assert len(set(tokens)) == len(tokens), "two deliveries share a lease token"
    assert all(m.delivery_attempt == 1 for _, m in log)
    assert all(plain(m.payload) == f"payload {plain(m.key)[0]}" for _, m in log)
    # Each stream's tokens share that stream's prefix, and no two streams share one.
    prefixes: dict[int, set[str]] = {}
    for index, m in log:
        prefixes.setdefault(index, set()).add(m.lease_token.split(".")[0])
    assert all(len(p) == 1 for p in prefixes.values())
    assert len({next(iter(p)) for p in prefixes.values()}) == len(prefixes)
    return Counter(index for index, _ in log)


async def test_many_acking_streams_receive_every_message_once(stub, sql, await_idle_streams):
    await create_queue(stub, "work", payload_type=queue_pb2.STRING)
    keys = [f"m{i:05}" for i in range(MESSAGES)]
    log: list[tuple[int, queue_pb2.ReceivedMessage]] = []
    consumers = [AckingConsumer(stub, "work", i, log, max_batch_size=20, lease_duration=duration(60))
                 for i in range(STREAMS)]
    try:
        await await_idle_streams("work", STREAMS)  # every stream open and idle before the first send
        started = time.monotonic()
        await _send_all(stub, "work", keys)
        await _wait_for(lambda: len(log) >= MESSAGES, 20)
        elapsed = time.monotonic() - started
        await _all_acked(sql, "work")  # a duplicate delivery would have come before
    finally:
        for c in consumers:
            await c.close()
    per_stream = _check_once_each(log, keys)
    assert len(per_stream) >= STREAMS // 2, f"the work was not shared: {per_stream}"
    assert [f for c in consumers for f in c.failed_acks] == []
    assert sql.execute("SELECT count(*) FROM work").fetchone()[0] == 0
    assert elapsed < 20


async def test_streams_on_two_servers_share_one_queue(stub, server, server_config, sql, await_idle_streams):
    await create_queue(stub, "work", payload_type=queue_pb2.STRING)
    other = await start(server_config)
    try:
        async with grpc.aio.insecure_channel(other.target) as channel:
            other_stub = queue_pb2_grpc.QueueServiceStub(channel)
            keys = [f"m{i:05}" for i in range(1000)]
            log: list[tuple[int, queue_pb2.ReceivedMessage]] = []
            consumers = [AckingConsumer(stub if i % 2 else other_stub, "work", i, log, max_batch_size=10)
                         for i in range(STREAMS)]
            try:
                await await_idle_streams("work", STREAMS)
                await asyncio.gather(_send_all(stub, "work", keys[:500]), _send_all(other_stub, "work", keys[500:]))
                await _wait_for(lambda: len(log) >= len(keys), 15)
                await _all_acked(sql, "work")
            finally:
                for c in consumers:
                    await c.close()
    finally:
        await other.stop(0)
    per_stream = _check_once_each(log, keys)
    assert {i % 2 for i in per_stream} == {0, 1}, f"both servers deliver: {per_stream}"
    assert [f for c in consumers for f in c.failed_acks] == []


async def test_held_leases_partition_the_queue_and_max_outstanding_holds(stub, clock, waiting):
    limit, total = 100, 1000  # 8 streams x 100 < 1000: the limit, not the queue, stops them
    await create_queue(stub, "work", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    keys = [f"m{i:05}" for i in range(total)]
    await _send_all(stub, "work", keys)
    streams = [open_stream(stub, "work", max_outstanding=limit, max_batch_size=30, lease_duration=duration(60))
               for _ in range(STREAMS)]
    opened = [await s.__aenter__() for s in streams]
    try:
        await _wait_for(lambda: sum(len(s.received) for s in opened) >= STREAMS * limit, 15)
        await _all_full(waiting, "work", STREAMS)
        assert [len(s.received) for s in opened] == [limit] * STREAMS
        first = [m for s in opened for m in s.received]
        assert len({plain(m.key)[0] for m in first}) == STREAMS * limit  # no message held twice
        assert len({m.lease_token for m in first}) == STREAMS * limit

        # Acking one stream's messages gives it room again, and only it.
        for s in opened:
            s.received.clear()
            s.drain()
        await ack(stub, "work", *first[:limit])  # stream 0's messages
        refill = await opened[0].take(limit, timeout=5)
        for s in opened[1:]:
            await s.quiet(0.2)
        refilled = {plain(m.key)[0] for m in refill}
        assert len(refilled) == limit and not refilled & {plain(m.key)[0] for m in first}

        # All leases lapse at once: the streams compete for 900 messages, 800 at a time, and still
        # no message is held by two of them.
        for s in opened:
            s.received.clear()
            s.drain()
        waiting.clear()
        clock.advance(timedelta(seconds=61))
        await _wait_for(lambda: sum(len(s.received) for s in opened) >= STREAMS * limit, 15)
        await _all_full(waiting, "work", STREAMS)
        second = [m for s in opened for m in s.received]
        assert [len(s.received) for s in opened] == [limit] * STREAMS
        assert len({plain(m.key)[0] for m in second}) == STREAMS * limit
        assert not {plain(m.key)[0] for m in second} & {plain(m.key)[0] for m in first[:limit]}  # acked: gone
        # The lapsed leases' clients settled nothing past what stream 0 acked, beside other streams:
        # the server cannot tell them from clients that never read, and gave their attempts back
        # (docs/semantics.md, Dead letters: A lease nobody read gives its attempt back).
        assert Counter(m.delivery_attempt for m in second) == {1: STREAMS * limit}
    finally:
        for s in streams:
            await s.__aexit__(None, None, None)


async def test_concurrent_senders_and_one_stream(stub):
    await create_queue(stub, "work", payload_type=queue_pb2.STRING)
    async with open_stream(stub, "work", max_batch_size=100) as s:
        await asyncio.gather(*(send(stub, "work", *[text_message(f"s{j}-{i}", f"payload s{j}-{i}") for i in range(50)])
                               for j in range(20)))
        got = await s.take(1000, timeout=10)
    assert len({plain(m.key)[0] for m in got}) == 1000
    assert s.responses <= 1000 // 2  # batched, not one response per message
