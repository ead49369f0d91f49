"""The SDK's batching publisher against a real server: messages gathered into
few Sends (counted by the server's own RPC metrics and the commit ledger), one
bad message failing only its own future, flow control that blocks or raises,
flush and close, order, and replay of a batch whose commit outcome was lost."""

import asyncio
import dataclasses
import threading
import time
from collections import Counter

import psycopg
import pytest

import spanq
import spanq.aio
from spanq_server.ground.config import Limits

from ..helpers import until, until_sync

SLOW = spanq.BatchSettings(max_latency=30)
"""Batches leave only when full or flushed: the tests decide when."""


@pytest.fixture
def server_config(server_config):
    return dataclasses.replace(server_config, limits=Limits(max_payload_bytes=1000))


def sends(server) -> Counter[str]:
    """Send RPCs the server answered so far, by status code name (its RPC timing histogram)."""
    out: Counter[str] = Counter()
    for metric in server.rpc_timing.histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count") and sample.labels["method"].endswith("/Send"):
                out[sample.labels["code"]] += int(sample.value)
    return out


async def answered(server, total: int) -> Counter[str]:
    """``sends`` once ``total`` Send RPCs are counted: the timing interceptor counts a call when
    its handler has returned, which may be just after the client has its answer."""
    def counted() -> Counter[str] | None:
        codes = sends(server)
        return codes if sum(codes.values()) >= total else None

    return await until(counted, f"{total} Send answers counted")


def ledger_rows(sql) -> int:
    return sql.execute("SELECT count(*) FROM spanq.commit_ledger").fetchone()[0]


def stored(sql, queue: str) -> list[int]:
    """The queue's INT64 keys in the order they were committed (enqueue_time, then key within a Send)."""
    return [row[0] for row in sql.execute(f'SELECT id FROM "{queue}" ORDER BY spanq_enqueue_time, id')]


# -- batching ------------------------------------------------------------------------------------


async def test_messages_are_gathered_into_sends_by_count_and_flush(server, sql):
    async with spanq.aio.Client(server.target, batch_settings=dataclasses.replace(SLOW, max_messages=100)) as c:
        await c.create_queue("jobs", key_columns=[("id", "INT64")], payload_type="STRING")
        before = ledger_rows(sql)
        futures = [await c.publish("jobs", f"job {i}", key=i) for i in range(250)]
        await until(lambda: sum(f.done() for f in futures) == 200, "200 sends", 10, 0.01)  # two full batches went at once
        assert not any(f.done() for f in futures[200:])  # the rest waits for its latency, or a flush
        await c.flush()
        assert [await f for f in futures] == [(i,) for i in range(250)]
    assert await answered(server, 3) == {"OK": 3}
    assert ledger_rows(sql) - before == 3  # one request id per batch
    assert stored(sql, "jobs") == list(range(250))


async def test_a_batch_leaves_after_max_latency_or_at_max_bytes(server, sql):
    settings = spanq.BatchSettings(max_messages=1000, max_bytes=2500, max_latency=0.05)
    async with spanq.aio.Client(server.target, batch_settings=settings) as c:
        await c.create_queue("blobs", key_columns=[("id", "INT64")])
        started = time.monotonic()
        alone = await c.publish("blobs", b"x", key=0)
        assert await alone == (0,)  # no flush: the timer sent it
        assert time.monotonic() - started >= 0.05
        # Each encoded message is a little over 1,200 bytes (base64): two fit in 2,500, a third does not.
        futures = [await c.publish("blobs", b"y" * 900, key=i) for i in range(1, 7)]
        await c.flush()
        await asyncio.gather(*futures)
    assert await answered(server, 4) == {"OK": 4}  # 1, then 2 + 2 + 2


async def test_the_blocking_client_batches_from_many_threads_keeping_each_threads_order(server, sql):
    await asyncio.to_thread(blocking_producers, server)
    order = stored(sql, "events")
    assert len(order) == 2000
    for t in range(4):
        mine = [k for k in order if k // 10_000 == t]
        assert mine == sorted(mine)
    assert 40 <= sends(server)["OK"] < 2000 / 5  # batched: at least 50 per full Send, never one by one


def blocking_producers(server) -> None:
    # The server runs on the test's loop: the blocking client runs on other threads.
    with spanq.Client(server.target, batch_settings=spanq.BatchSettings(max_messages=50)) as c:
        c.create_queue("events", key_columns=[("id", "INT64")], payload_type="JSON")
        results: dict[int, list[spanq.Future]] = {}

        def producer(t: int) -> None:
            results[t] = [c.publish("events", {"thread": t, "n": n}, key=t * 10_000 + n) for n in range(500)]

        threads = [threading.Thread(target=producer, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        c.flush()
        assert all(f.result() == (t * 10_000 + n,) for t, fs in results.items() for n, f in enumerate(fs))


# -- one bad message ----------------------------------------------------------------------------


async def test_one_bad_message_fails_only_its_own_future(server, sql):
    async with spanq.aio.Client(server.target, batch_settings=SLOW) as c:
        await c.create_queue("orders", key_columns=[("id", "INT64")], payload_type="STRING")
        await c.send("orders", "already here", key=4)
        payloads = {i: f"order {i}" for i in range(12)}
        payloads[7] = "x" * 2000  # over the server's 1,000-byte limit
        futures = [await c.publish("orders", payloads[i], key=i) for i in range(12)]
        duplicate = await c.publish("orders", "again", key=9)  # the same key twice in one batch
        await c.flush()
        outcomes = {i: f.exception() for i, f in enumerate(futures)}
        assert isinstance(outcomes.pop(4), spanq.AlreadyExists)
        assert isinstance(outcomes.pop(7), spanq.ResourceExhausted)
        assert outcomes == dict.fromkeys(outcomes, None)
        with pytest.raises(spanq.AlreadyExists):
            await duplicate
    assert stored(sql, "orders") == [4, 0, 1, 2, 3, 5, 6, 8, 9, 10, 11]  # in order around the culprits
    assert sql.execute("SELECT payload FROM orders WHERE id = 9").fetchone()[0] == "order 9"

    def culprits_counted() -> Counter[str] | None:
        codes = sends(server)
        return codes if codes["ALREADY_EXISTS"] and codes["RESOURCE_EXHAUSTED"] else None

    codes = await until(culprits_counted, "the culprits' Sends counted")  # what the client saw fail, the server counts
    assert codes["OK"] < 12  # split in halves, not sent one by one


async def test_a_payload_that_does_not_match_the_queue_raises_at_once(server):
    async with spanq.aio.Client(server.target) as c:
        await c.create_queue("texts", payload_type="STRING")
        with pytest.raises(spanq.InvalidArgument, match="STRING payloads"):
            await c.publish("texts", b"bytes")
        with pytest.raises(spanq.NotFound):
            await c.publish("no_such_queue", "x")


async def test_a_batch_failing_as_a_whole_fails_each_of_its_futures(server, sql):
    async with spanq.aio.Client(server.target, batch_settings=SLOW) as c:
        await c.create_queue("gone", payload_type="STRING")
        futures = [await c.publish("gone", str(i)) for i in range(5)]
        sql.execute('DROP TABLE "gone" CASCADE')  # behind the server's back: the Send finds no table
        await c.flush()
        assert all(isinstance(f.exception(), spanq.NotFound) for f in futures)
    assert await answered(server, 1) == {"NOT_FOUND": 1}  # not split: no one message is at fault


# -- flow control -------------------------------------------------------------------------------


async def test_flow_control_raises_at_its_limit_when_asked_to(server):
    flow = spanq.PublishFlowControl(max_messages=5, limit_exceeded="raise")
    async with spanq.aio.Client(server.target, batch_settings=SLOW, publish_flow_control=flow) as c:
        await c.create_queue("bounded", payload_type="STRING")
        futures = [await c.publish("bounded", str(i)) for i in range(5)]
        with pytest.raises(spanq.ResourceExhausted, match="publisher flow control"):
            await c.publish("bounded", "one too many")
        await c.flush()
        await asyncio.gather(*futures)
        again = await c.publish("bounded", "room again")
        await c.flush()
        await again


async def test_flow_control_makes_an_async_publish_wait_for_room(server):
    flow = spanq.PublishFlowControl(max_messages=1000, max_bytes=3000)
    async with spanq.aio.Client(server.target, batch_settings=SLOW, publish_flow_control=flow) as c:
        await c.create_queue("bytes_bound")
        first = [await c.publish("bytes_bound", b"z" * 1000) for _ in range(2)]
        waiting = asyncio.ensure_future(c.publish("bytes_bound", b"z" * 1000))
        await until(lambda: c._publisher.gate._waiters, "the publish to wait for room", 10, 0.01)
        assert not waiting.done()  # it waits for room: two of 3,000 bytes' worth are outstanding
        await c.flush()
        await asyncio.gather(*first)
        third = await asyncio.wait_for(waiting, 5)
        await c.flush()
        await third


async def test_flow_control_blocks_a_producer_thread_until_there_is_room(server):
    await asyncio.to_thread(blocked_producer, server)


def blocked_producer(server) -> None:
    flow = spanq.PublishFlowControl(max_messages=5)
    with spanq.Client(server.target, batch_settings=SLOW, publish_flow_control=flow) as c:
        c.create_queue("slow", payload_type="STRING")
        published: list[spanq.Future] = []

        def producer() -> None:
            for i in range(6):
                published.append(c.publish("slow", str(i)))

        thread = threading.Thread(target=producer)
        thread.start()
        until_sync(lambda: len(published) >= 5, "five publishes", 10, 0.01)
        thread.join(0.2)  # time enough for a sixth publish that did not wait (a blocked thread shows nothing)
        assert thread.is_alive() and len(published) == 5  # the sixth waits: five are outstanding
        c.flush()
        thread.join(5)
        assert not thread.is_alive() and len(published) == 6
        c.flush()
        assert [f.result() for f in published] and all(f.done() for f in published)


# -- close -------------------------------------------------------------------------------------


async def test_close_sends_what_was_published_and_refuses_more(server, sql):
    def publish_and_close() -> list[spanq.Future]:
        c = spanq.Client(server.target, batch_settings=SLOW)
        c.create_queue("last_words", payload_type="STRING")
        futures = [c.publish("last_words", str(i)) for i in range(3)]
        c.close()
        with pytest.raises(spanq.Closed):
            c.publish("last_words", "too late")
        return futures

    futures = await asyncio.to_thread(publish_and_close)
    assert all(f.done() and f.exception() is None for f in futures)
    assert sql.execute("SELECT count(*) FROM last_words").fetchone()[0] == 3


async def test_aclose_with_a_timeout_answers_every_future(server, database_url, sql):
    flow = spanq.PublishFlowControl(max_messages=1)
    c = spanq.aio.Client(server.target, batch_settings=spanq.BatchSettings(max_latency=0), publish_flow_control=flow)
    await c.create_queue("stuck", payload_type="STRING")
    holder = await psycopg.AsyncConnection.connect(database_url)
    await holder.execute('LOCK TABLE "stuck" IN ACCESS EXCLUSIVE MODE')  # the Send waits behind it
    try:
        in_flight = await c.publish("stuck", "sent, not answered")
        blocked = asyncio.ensure_future(c.publish("stuck", "never sent"))
        await c.aclose(timeout=0.5)
        # Its Send may still commit once the lock goes: the SDK does not claim it failed.
        assert isinstance(in_flight.exception(0), spanq.CommitOutcomeUnknown)
        with pytest.raises(spanq.Closed):
            await blocked  # waiting for flow-control room when the client closed
    finally:
        await holder.rollback()
        await holder.close()
