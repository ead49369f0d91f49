"""The operator's RPCs against a real server and PostgreSQL, through the SDK:
GetQueueStats (counts by state, oldest ready age, rates), Peek (delivery order,
paging, system columns, no lease taken), Purge (all, or sent before a time) and
Redrive (default target, batches, rate, interrupted and resumed with nothing
lost or duplicated, conflicts left in place)."""

import asyncio
import base64
from datetime import datetime, timedelta, timezone

import grpc
import pytest

import spanq
import spanq.aio
from spanq_proto.v1 import queue_pb2

from ..helpers import error_of, until_settled


async def dead_letter_pair(client: spanq.aio.Client, *, attempts: int = 1) -> None:
    await client.create_queue("dead", key_columns=[("id", "INT64")], payload_type="STRING")
    await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING",
                              max_delivery_attempts=attempts, dead_letter_queue="dead")


def keys(sql, table: str) -> list[int]:
    return [row[0] for row in sql.execute(f'SELECT id FROM "{table}" ORDER BY id').fetchall()]


async def test_stats_count_messages_by_state(server, clock, sql):
    async with spanq.aio.Client(server.target) as client:
        await dead_letter_pair(client)
        for i in range(3):
            await client.send("work", f"m{i}", key=i)
        await client.send("work", "later", key=10, delay=3600)
        await client.send("dead", "buried", key=99)
        [leased] = await client.receive("work", 1, lease_duration=60)
        clock.advance(timedelta(seconds=5))  # the two ready ones are 5 s old

        stats = await client.stats("work")
        assert (stats.ready, stats.scheduled, stats.leased, stats.dead_lettered) == (2, 1, 1, 1)
        assert stats.dead_letter_queue == "dead" and stats.name == "work"
        assert timedelta(seconds=5) <= stats.oldest_ready_age < timedelta(seconds=30)
        assert stats.send_rate == pytest.approx(4 / 60) and stats.ack_rate == 0
        assert stats.read_time is not None

        # A nack puts the message in backoff: scheduled, not ready (and not leased).
        await client.nack("work", leased)
        stats = await client.stats("work")
        assert (stats.ready, stats.scheduled, stats.leased) == (2, 2, 0)
        [m] = await client.receive("work", 1)
        await client.ack("work", m)
        assert (await client.stats("work")).ack_rate == pytest.approx(1 / 60)

        dead = await client.stats("dead")
        assert (dead.ready, dead.dead_lettered, dead.dead_letter_queue) == (1, 0, None)
        await client.purge("dead")
        assert (await client.stats("dead")).oldest_ready_age == timedelta(0)
        with pytest.raises(spanq.NotFound):
            await client.stats("nope")


async def test_peek_browses_in_delivery_order_without_leasing(server, clock):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("tasks", key_columns=[("id", "INT64")], payload_type="JSON")
        now = datetime.now(timezone.utc)
        await client.send("tasks", {"n": 3}, key=3, deliver_time=now + timedelta(hours=2))
        await client.send_many("tasks", [spanq.OutgoingMessage({"n": i}, i) for i in (5, 1, 4)])
        await client.send("tasks", {"n": 2}, key=2, deliver_time=now + timedelta(hours=1))
        [leased] = await client.receive("tasks", 1, lease_duration=60)

        seen: list[spanq.PeekedMessage] = []
        token = ""
        while True:
            page = await client.peek("tasks", page_size=2, page_token=token)
            assert len(page.messages) <= 2
            seen.extend(page.messages)
            token = page.next_page_token
            if not token:
                break
        assert [m.deliver_time for m in seen] == sorted(m.deliver_time for m in seen)
        by_key = {m.key[0]: m for m in seen}
        assert sorted(by_key) == [1, 2, 3, 4, 5]
        assert by_key[leased.key[0]].state == "LEASED"
        assert by_key[leased.key[0]].lease_expiration_time is not None
        assert by_key[leased.key[0]].delivery_attempt == 1
        assert by_key[2].state == by_key[3].state == "SCHEDULED" and by_key[2].payload == {"n": 2}
        assert [m.state for m in seen].count("READY") == 2
        assert all(m.lease_expiration_time is None for m in seen if m.state != "LEASED")

        # Peeking took no lease: the two ready messages are still there to receive.
        got = await client.receive("tasks", 10, timeout=1)
        assert len(got) == 2

        code, message, _ = await error_of(client._stub().Peek(queue_pb2.PeekRequest(queue="tasks", page_token="zz")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in message


async def test_purge_all_or_sent_before(server, clock, sql):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("jobs", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send_many("jobs", [spanq.OutgoingMessage("old", i) for i in range(3)])
        clock.advance(timedelta(hours=1))
        cut = clock.now()
        clock.advance(timedelta(seconds=1))
        await client.send_many("jobs", [spanq.OutgoingMessage("new", i) for i in range(3, 5)])
        [m] = await client.receive("jobs", 1)  # a leased message goes too

        assert await client.purge("jobs", sent_before=cut) == 3
        assert keys(sql, "jobs") == [3, 4]
        assert await client.purge("jobs") == 2
        assert keys(sql, "jobs") == []
        assert await client.purge("jobs") == 0
        with pytest.raises(spanq.MessageGone):
            await client.ack("jobs", m)


async def test_redrive_moves_dead_letters_back_in_batches(server, sql):
    async with spanq.aio.Client(server.target) as client:
        await dead_letter_pair(client)
        await client.send_many("dead", [spanq.OutgoingMessage(f"d{i}", i) for i in range(25)])
        seen: list[spanq.RedriveProgress] = []
        final = await client.redrive("dead", batch_size=10, on_progress=seen.append)
        assert final == spanq.RedriveProgress(moved=25, remaining=0, skipped=0, to="work", done=True)
        assert [p.moved for p in seen] == [10, 20, 25, 25]
        assert keys(sql, "work") == list(range(25)) and keys(sql, "dead") == []
        # Back as new: attempt 0, deliverable now.
        [m] = await client.receive("work", 1)
        assert m.delivery_attempt == 1 and m.payload.startswith("d")


async def test_redrive_interrupted_and_resumed_loses_and_duplicates_nothing(server, sql):
    async with spanq.aio.Client(server.target) as client:
        await dead_letter_pair(client)
        await client.send_many("dead", [spanq.OutgoingMessage(f"d{i}", i) for i in range(40)])
        # Cancel a slow redrive (5 a second, one batch a second) after its first batch.
        first = asyncio.Event()
        task = asyncio.create_task(client.redrive("dead", rate=5, on_progress=lambda p: first.set()))
        await asyncio.wait_for(first.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        # The server sees the cancellation between batches: each batch commits whole or not at all.
        work, dead = await until_settled(lambda: (keys(sql, "work"), keys(sql, "dead")), "the redrive to stop")
        assert 5 <= len(work) < 40 and len(work) % 5 == 0
        assert sorted(work + dead) == list(range(40))  # each message in exactly one queue

        final = await client.redrive("dead", to="work")
        assert final.moved == 40 - len(work) and final.remaining == 0
        assert keys(sql, "work") == list(range(40)) and keys(sql, "dead") == []


async def test_redrive_leaves_keys_the_target_holds_and_checks_its_target(server, sql):
    async with spanq.aio.Client(server.target) as client:
        await dead_letter_pair(client)
        await client.send_many("dead", [spanq.OutgoingMessage(f"d{i}", i) for i in range(4)])
        await client.send("work", "already here", key=2)
        final = await client.redrive("dead")
        assert (final.moved, final.remaining, final.skipped) == (3, 1, 1)
        assert keys(sql, "dead") == [2]
        assert sql.execute("SELECT payload FROM work WHERE id = 2").fetchone()[0] == "already here"

        await client.create_queue("other", key_columns=[("id", "INT64")], payload_type="STRING",
                                  max_delivery_attempts=3, dead_letter_queue="dead")
        with pytest.raises(spanq.InvalidArgument, match="queues other, work name it"):
            await client.redrive("dead")
        await client.create_queue("texts", payload_type="STRING")
        with pytest.raises(spanq.FailedPrecondition, match="key column types"):
            await client.redrive("dead", to="texts")
        with pytest.raises(spanq.InvalidArgument, match="no queue names it"):
            await client.redrive("texts")
        with pytest.raises(spanq.InvalidArgument, match="into itself"):
            await client.redrive("dead", to="dead")
        with pytest.raises(spanq.InvalidArgument, match="rate"):
            await client.redrive("dead", to="other", rate=-1)
        final = await client.redrive("dead", to="other", max_messages=1)
        assert (final.moved, final.remaining) == (1, 0)


async def test_peek_pages_through_composite_keys_that_share_a_deliver_time(server):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("events", key_columns=[("at", "TIMESTAMP"), ("tag", "BYTES"), ("n", "INT64")],
                                  payload_type="BYTES")
        at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
        sent = [(at, bytes([b]), n) for b in (0, 255) for n in (2**62, -1)]
        later = datetime.now(timezone.utc) + timedelta(hours=1)  # one deliver_time, given (so not staggered)
        await client.send_many("events", [spanq.OutgoingMessage(b"x", k, deliver_time=later) for k in sent])
        seen = []
        token = ""
        for _ in range(10):
            page = await client.peek("events", page_size=1, page_token=token)
            seen.extend(m.key for m in page.messages)
            token = page.next_page_token
            if not token:
                break
        assert seen == sorted(sent)  # ties on deliver_time go in key order, none skipped or repeated


def test_rates_count_the_last_minute_only():
    from spanq_server.metrics.rates import Rates

    now = [1000.0]
    rates = Rates(clock=lambda: now[0])
    rates.add("q", "sent", 30)
    now[0] += 30
    rates.add("q", "sent", 30)
    assert rates.rate("q", "sent") == 1.0 and rates.rate("q", "acked") == 0.0
    now[0] += 45  # the first 30 are now older than a minute
    assert rates.rate("q", "sent") == 0.5
    now[0] += 60
    assert rates.rate("q", "sent") == 0.0
    rates.add("q", "acked", 6)
    rates.forget("q")
    assert rates.rate("q", "acked") == 0.0


def token_of(data: str) -> str:
    return base64.urlsafe_b64encode(data.encode()).decode()


async def test_a_page_token_of_deep_json_is_invalid_argument(server, stub, sql):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("tasks", key_columns=[("id", "INT64")], payload_type="STRING")
        await client.send_many("tasks", [spanq.OutgoingMessage(f"m{i}", i) for i in range(3)])
    token = token_of("[" * 30_000 + "]" * 30_000)  # deeper than the JSON decoder goes
    code, message, _ = await error_of(stub.Peek(queue_pb2.PeekRequest(queue="tasks", page_token=token)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, message
    assert "page_token is not one this server returned" in message
    assert keys(sql, "tasks") == [0, 1, 2]
    assert sql.execute("SELECT count(*) FROM tasks WHERE spanq_delivery_attempt > 0").fetchone() == (0,)


MAX_REDRIVE_RATE = 1_000_000
"""docs/operations.md's limit of a redrive's rate."""


async def test_redrive_takes_a_finite_rate_up_to_its_limit(server, stub, sql):
    async with spanq.aio.Client(server.target) as client:
        await dead_letter_pair(client)
        await client.send_many("dead", [spanq.OutgoingMessage(f"d{i}", i) for i in range(5)])
    for rate in (float("inf"), float("-inf"), float("nan"), MAX_REDRIVE_RATE * 2, -1.0):
        code, message, _ = await error_of(anext(aiter(stub.Redrive(queue_pb2.RedriveRequest(queue="dead", rate=rate)))))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (rate, message)
        assert f"rate must be 0 (no limit) or a positive number of messages a second up to {MAX_REDRIVE_RATE:,}" \
            in message, message
        assert (keys(sql, "dead"), keys(sql, "work")) == ([0, 1, 2, 3, 4], [])
    done = [p async for p in stub.Redrive(queue_pb2.RedriveRequest(queue="dead", rate=MAX_REDRIVE_RATE))]
    assert done[-1].done and done[-1].moved == 5 and keys(sql, "work") == [0, 1, 2, 3, 4]
