"""The SDK's subscriber against a real server: leases kept alive for slow
callbacks, flow control, reconnection across a server restart, graceful
shutdown, and the sync client's subscriber."""

import asyncio
import dataclasses
import logging
import sys
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest

import spanq
import spanq._subscriber
import spanq.aio
from spanq_server.server import start

from ..helpers import until, until_sync


async def test_a_callback_slower_than_three_leases_is_never_redelivered_while_alive(server, sql, caplog):
    caplog.set_level(logging.WARNING, logger="spanq")
    async with spanq.aio.Client(server.target) as client:
        # A 2 s lease and 7 s callbacks: over three leases, with margin for a loaded machine.
        await client.create_queue("slow", key_columns=[("id", "STRING")], payload_type="STRING",
                                  lease_duration=2, initial_backoff=0)
        await client.send_many("slow", [spanq.OutgoingMessage("work", k) for k in ("a", "b")])
        deliveries: list[tuple[str, int]] = []
        tokens: dict[str, set[str]] = {"a": set(), "b": set()}

        async def slow_async(message: spanq.Message) -> None:
            deliveries.append((message.key[0], message.delivery_attempt))
            for _ in range(28):  # 7 s, watching the lease token change as the leaser renews it
                tokens[message.key[0]].add(message.lease_token)
                await asyncio.sleep(0.25)  # the test: a callback slower than three leases

        def slow_sync(message: spanq.Message) -> None:  # runs on the subscriber's thread pool
            deliveries.append((message.key[0], message.delivery_attempt))
            for _ in range(28):
                tokens[message.key[0]].add(message.lease_token)
                time.sleep(0.25)  # the test: a callback slower than three leases

        one = spanq.FlowControl(max_messages=1)
        async with client.subscribe("slow", slow_async, flow_control=one), \
                client.subscribe("slow", slow_sync, flow_control=one):
            await until(lambda: len(deliveries) == 2, "both deliveries")
            # A free competitor polls all along: had a lease lapsed, it would get the message.
            stolen = []
            while sql.execute("SELECT count(*) FROM slow").fetchone()[0]:
                stolen += await client.receive("slow", timeout=0.2)
        assert sorted(deliveries) == [("a", 1), ("b", 1)] and stolen == []
        assert all(len(seen) >= 4 for seen in tokens.values())  # renewed several times; each new token carried on
        assert not [r for r in caplog.records if "lost the lease" in r.getMessage()]


async def test_flow_control_bounds_the_messages_in_hand(server, sql):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("flow", key_columns=[("id", "INT64")], payload_type="BYTES", lease_duration=2,
                                  initial_backoff=0)
        await client.send_many("flow", [spanq.OutgoingMessage(b"x" * 100, i) for i in range(40)])
        running = peak = 0
        held_peak = 0
        done: set[int] = set()

        async def handle(message: spanq.Message) -> None:
            nonlocal running, peak, held_peak
            running += 1
            peak = max(peak, running)
            held_peak = max(held_peak, subscription.in_hand)
            await asyncio.sleep(0.03)  # work that takes a while, so callbacks overlap
            running -= 1
            done.add(message.key[0])

        subscription = client.subscribe("flow", handle, flow_control=spanq.FlowControl(max_messages=5))
        async with subscription:
            leased_peak = 0

            def sampled_until_done() -> bool:  # the peak of leased rows, sampled while it works
                nonlocal leased_peak
                leased = sql.execute(
                    "SELECT count(*) FROM flow WHERE spanq_lease_expiration_timestamp > now()").fetchone()[0]
                leased_peak = max(leased_peak, leased)
                return len(done) >= 40

            await until(sampled_until_done, "every message", 20, 0.01)
        assert peak <= 5 and held_peak <= 5 and leased_peak <= 5
        assert peak >= 3  # and it does run callbacks side by side

        # By bytes: 100-byte payloads with a 250-byte budget pause after the third message in hand.
        await client.send_many("flow", [spanq.OutgoingMessage(b"y" * 100, i) for i in range(100, 112)])
        done.clear()
        running = peak = held_peak = 0
        subscription = client.subscribe("flow", handle, max_batch_size=1,
                                        flow_control=spanq.FlowControl(max_messages=100, max_bytes=250))
        async with subscription:
            await until(lambda: len(done) == 12, "the byte-limited messages", 15)
        assert held_peak <= 3


def count_receive_streams(client: spanq.aio.Client) -> list[object]:
    """Records each Receive stream the client opens (its request)."""
    stub = client._stub()
    receive, opened = stub.Receive, []

    def counting(request, **kwargs):
        opened.append(request)
        return receive(request, **kwargs)

    stub.Receive = counting
    return opened


async def test_flow_control_pauses_without_reopening_the_stream(server, sql):
    """At max_messages the server holds back on the open stream (its max_outstanding); at max_bytes the
    subscriber stops reading it. Cancelling the stream instead stranded the batch the server had leased
    and not yet sent until its lease expired: here (a manual clock, a 60 s lease) never."""
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("paced", key_columns=[("id", "INT64")], payload_type="BYTES", lease_duration=60)
        await client.send_many("paced", [spanq.OutgoingMessage(b"x" * 100, i) for i in range(40)])
        opened = count_receive_streams(client)
        done: set[int] = set()
        held_peak = 0

        async def handle(message: spanq.Message) -> None:
            nonlocal held_peak
            held_peak = max(held_peak, subscription.in_hand)
            await asyncio.sleep(0.005)  # work that takes a moment, so the window fills
            done.add(message.key[0])

        subscription = client.subscribe("paced", handle, max_batch_size=3,
                                        flow_control=spanq.FlowControl(max_messages=5))
        async with subscription:
            await until(lambda: len(done) == 40, "every message")
        assert sql.execute("SELECT count(*) FROM paced").fetchone()[0] == 0
        assert len(opened) == 1 and opened[0].max_outstanding == 5
        assert 3 <= held_peak <= 5  # paused at the limit many times over, on one stream

        # By bytes: 250 bytes hold two 100-byte payloads; the third (one per response) pauses reading.
        await client.send_many("paced", [spanq.OutgoingMessage(b"y" * 100, i) for i in range(100, 140)])
        opened.clear()
        done.clear()
        held_peak = 0
        subscription = client.subscribe("paced", handle, max_batch_size=1,
                                        flow_control=spanq.FlowControl(max_messages=5, max_bytes=250))
        async with subscription:
            await until(lambda: len(done) == 40, "every message, by bytes")
        assert len(opened) == 1 and held_peak <= 3


async def test_a_stream_opened_narrow_ends_soon_and_loses_no_message(server, sql, monkeypatch):
    """A stream reopened while messages are in hand gets only the room left; it asks the server to end it
    soon (between batches) and reopens wider. Cancelling it to widen it could strand a leased batch (here,
    with a manual clock and a 60 s lease, for good)."""
    monkeypatch.setattr(spanq._subscriber, "NARROW_STREAM_DURATION", timedelta(seconds=0.1))
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("narrow", key_columns=[("id", "INT64")], payload_type="STRING", lease_duration=60)
        await client.send_many("narrow", [spanq.OutgoingMessage("m", i) for i in range(300)])
        opened = count_receive_streams(client)
        done: set[int] = set()
        held_peak = 0

        async def handle(message: spanq.Message) -> None:
            nonlocal held_peak
            held_peak = max(held_peak, subscription.in_hand)
            await asyncio.sleep(0.01 * (message.key[0] % 3))  # uneven work: settled out of order
            done.add(message.key[0])

        subscription = client.subscribe("narrow", handle, max_batch_size=4, stream_duration=0.3,
                                        flow_control=spanq.FlowControl(max_messages=10))
        async with subscription:
            await until(lambda: len(done) == 300, "every message", 30)
            await until(lambda: sql.execute("SELECT count(*) FROM narrow").fetchone()[0] == 0, "all acked")
        assert held_peak <= 10
        durations = {r.max_outstanding == 10: r.max_duration.ToTimedelta() for r in opened}
        assert durations == {True: timedelta(seconds=0.3), False: timedelta(seconds=0.1)}, opened


async def test_the_subscriber_survives_a_server_restart(server, server_config, clock, caplog):
    caplog.set_level(logging.INFO, logger="spanq")
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("jobs", key_columns=[("id", "INT64")], payload_type="JSON")
        seen: Counter[int] = Counter()

        async def handle(message: spanq.Message) -> None:
            seen[message.key[0]] += 1

        replacement = None
        try:
            async with client.subscribe("jobs", handle):
                await client.send_many("jobs", [spanq.OutgoingMessage({"n": i}, i) for i in range(10)])
                await until(lambda: len(seen) == 10, "the first ten")

                await server.stop(0)
                # Sent while no server is up: the send retries (one request_id) until the new one answers.
                sending = asyncio.create_task(
                    client.send_many("jobs", [spanq.OutgoingMessage({"n": i}, i) for i in range(10, 20)]))
                done, _ = await asyncio.wait([sending], timeout=0.5)
                assert not done, "with no server up, the send waits for one"
                replacement = await start(dataclasses.replace(server_config, listen=f"127.0.0.1:{server.port}"),
                                          clock=clock)
                await sending
                await until(lambda: len(seen) == 20, "the ten sent after the restart", 15)
            assert await client.receive("jobs", timeout=0.2) == []  # and acked them all
        finally:
            if replacement is not None:
                await replacement.stop(0)
        assert set(seen) == set(range(20))
        assert any("reconnecting" in r.getMessage() for r in caplog.records)  # the stream did break


async def test_graceful_shutdown_finishes_running_callbacks_and_nacks_the_rest(server, sql):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("batch", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send_many("batch", [spanq.OutgoingMessage("m", i) for i in range(6)])
        started: list[int] = []
        finished: list[int] = []
        failing_seen = threading.Event()

        def handle(message: spanq.Message) -> None:
            key = message.key[0]
            started.append(key)
            if key == 0:
                failing_seen.set()
                raise RuntimeError("a failing callback nacks its message")
            time.sleep(0.3 if key == 1 else 5)  # the test: key 1 finishes within the grace period, the others do not
            finished.append(key)

        subscription = client.subscribe("batch", handle, max_workers=3, shutdown_timeout=0.8)
        await until(lambda: {0, 1} <= set(started) and len(started) >= 3, "callbacks to start")
        subscription.cancel()
        await subscription
        assert subscription.done() and 1 in finished
        rows = dict(sql.execute("SELECT id, spanq_lease_token FROM batch").fetchall())
        assert 1 not in rows  # acked
        assert len(rows) == 5 and all(token is None for token in rows.values())  # the rest: released, not leased


async def test_sync_subscriber_and_message_acks_from_threads(server, sql):
    def consume() -> list[int]:
        got: list[int] = []
        with spanq.Client(server.target) as client:
            client.create_queue("tasks", key_columns=[("id", "INT64")], payload_type="STRING")
            client.send_many("tasks", [spanq.OutgoingMessage(f"task {i}", i) for i in range(8)])

            def handle(message: spanq.Message) -> None:
                if message.key[0] % 2:
                    message.ack().result(5)  # settle it explicitly and wait for the commit
                got.append(message.key[0])

            with client.subscribe("tasks", handle, auto_ack=True) as subscription:
                until_sync(lambda: len(got) >= 8, "every task")
            assert subscription.done()
        return got

    got = await asyncio.to_thread(consume)
    assert sorted(got) == list(range(8))
    assert sql.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


async def test_a_dropped_queue_ends_the_subscription_with_its_error(server):
    async with spanq.aio.Client(server.target) as client:
        subscription = client.subscribe("nowhere", lambda m: None)
        with pytest.raises(spanq.NotFound):
            await asyncio.wait_for(subscription.result(), 10)


async def test_streams_that_end_at_max_duration_are_restarted(server, caplog):
    caplog.set_level(logging.INFO, logger="spanq")
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("ticks", key_columns=[("id", "INT64")], payload_type="STRING")
        seen: list[int] = []
        opened = count_receive_streams(client)
        async with client.subscribe("ticks", lambda m: seen.append(m.key[0]), stream_duration=0.2):
            for i in range(4):  # each send lands after at least one more stream has ended normally
                await until(lambda: len(opened) >= i + 2, "a stream to end and be reopened")
                await client.send("ticks", "tick", key=i)
            await until(lambda: len(seen) == 4, "every tick")
        assert sorted(seen) == [0, 1, 2, 3]
        assert not [r for r in caplog.records if "reconnecting" in r.getMessage()]  # normal ends, no errors


WORKER = """
import sys, time
import spanq

client = spanq.Client(sys.argv[1])

def handle(message):
    print("holding", message.key[0], flush=True)
    time.sleep(60)  # holds the message until the test kills it

client.subscribe("jobs", handle)
time.sleep(60)  # the subscriber runs in its threads until the test kills this process
"""


async def test_a_killed_worker_has_its_message_redelivered_after_the_lease(server):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("jobs", key_columns=[("id", "INT64")], payload_type="STRING",
                                  lease_duration=1, initial_backoff=0)
        await client.send("jobs", "long work", key=7)
        worker = await asyncio.create_subprocess_exec(sys.executable, "-c", WORKER, server.target,
                                                      stdout=asyncio.subprocess.PIPE)
        try:
            line = await asyncio.wait_for(worker.stdout.readline(), 20)
            assert line.split() == [b"holding", b"7"]
            await asyncio.sleep(1.5)  # the test, on the real clock: past its first lease the worker's leaser keeps it
            assert await client.receive("jobs", timeout=0.2) == []
        finally:
            worker.kill()
            await worker.wait()
        killed = time.monotonic()
        [message] = await client.receive("jobs", timeout=5)
        assert message.key == (7,) and message.delivery_attempt == 2
        assert time.monotonic() - killed < 2.5  # about one lease later
        await message.ack()


async def test_callbacks_may_settle_their_messages_every_way(server, sql, caplog):
    caplog.set_level(logging.WARNING, logger="spanq")
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("ways", key_columns=[("id", "INT64")], payload_type="STRING", initial_backoff=0)
        await client.create_queue("next", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send_many("ways", [spanq.OutgoingMessage("m", i) for i in range(5)])
        attempts: Counter[int] = Counter()

        async def handle(message: spanq.Message) -> None:
            key = message.key[0]
            attempts[key] += 1
            if key == 0:
                old = message.lease_token
                lease = await message.renew(30)
                assert lease.new_lease_token == message.lease_token != old
            elif key == 1:
                await client.ack("ways", message)  # a client call on a message the subscriber holds
            elif key == 2:
                async with client.transaction() as tx:
                    tx.ack("ways", message).send("next", "follow-up", key=2)
            elif key == 3 and message.delivery_attempt == 1:
                await message.nack()
            elif key == 4 and message.delivery_attempt == 1:
                raise ValueError("fails once")

        async with client.subscribe("ways", handle):
            await until(lambda: sql.execute("SELECT count(*) FROM ways").fetchone()[0] == 0, "all settled")
        assert attempts == {0: 1, 1: 1, 2: 1, 3: 2, 4: 2}
        assert sql.execute("SELECT id FROM next").fetchall() == [(2,)]
        # Only the failing callback is reported; no ack or renewal went wrong.
        assert [r.getMessage() for r in caplog.records] == [
            "ways: the callback failed on Message(queue='ways', key=(4,), delivery_attempt=1, payload='m'); nacking it"]
