"""Delivery end to end over a real socket and PostgreSQL: send, receive, ack, scheduled
messages, leases, renewal, nack, redelivery backoff, push wake-ups, max_outstanding,
max_duration, dead letters.

Every server in this module polls only every 30 s (see ``server_config``), so a test
that needs a message within a second proves a push wake-up, never a poll. Time moves
with ``clock.advance``, which also wakes the streams, never with sleeps.
"""

import asyncio
import dataclasses
import random
import time
from datetime import timedelta

import grpc
import psycopg
import pytest

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.ground.config import Config
from spanq_server.server import start

from ..helpers import (
    ack, create_queue, duration, error_of, key, open_stream, plain, receive_some, renew, send, stamp, text_message,
    until,
)

POLL = timedelta(seconds=30)


@pytest.fixture
def server_config(server_config: Config) -> Config:
    """The default config, but polling so rarely that only wake-ups can deliver in time."""
    return dataclasses.replace(server_config, poll_interval=POLL)


def stored(sql, queue: str) -> list[str]:
    """The ids of the messages stored in a (default-keyed) queue, straight from the table."""
    return [row[0] for row in sql.execute(f'SELECT id FROM "{queue}" ORDER BY id').fetchall()]


# -- send, receive, ack -----------------------------------------------------------


async def test_strings_array_syntax_would_mangle_are_stored_exactly(stub, sql):
    """A Send's keys and STRING payloads reach PostgreSQL as array literals (cheaper than
    psycopg's list dumpers): quotes, backslashes, braces, commas, spaces, NULL and the
    empty string must be stored as sent, and a NUL still refused."""
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    tricky = ['"', "\\", '\\"', "{a,b}", "a, b", " padded ", "NULL", "", "é漢🙂", "line\nbreak", "{}", "\\x00"]
    await send(stub, "tasks", *(text_message(f"k{i}:{t}", t) for i, t in enumerate(tricky)))
    rows = sql.execute("SELECT id, payload FROM tasks").fetchall()
    assert sorted(rows) == sorted((f"k{i}:{t}", t) for i, t in enumerate(tricky))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await send(stub, "tasks", text_message("nul", "a\x00b"), text_message("fine", "x"))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(sql.execute("SELECT id FROM tasks").fetchall()) == len(tricky)


async def test_send_receive_ack_fields(stub, clock, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    before_send = clock.now()
    await send(stub, "tasks", text_message("k1", "hello"))
    after_send = clock.now()

    async with open_stream(stub, "tasks", lease_duration=duration(30)) as s:
        before = clock.now()
        m = await s.next()
        after = clock.now()
        assert plain(m.key) == ["k1"]
        assert plain(m.payload) == "hello"
        assert m.delivery_attempt == 1
        assert m.lease_token
        assert m.last_batch_message
        assert before_send <= stamp(m.enqueue_time) <= after_send
        assert stamp(m.deliver_time) == stamp(m.enqueue_time)  # unscheduled: deliverable when sent
        expires = stamp(m.lease_expiration_time)
        assert before + timedelta(seconds=30) <= expires <= after + timedelta(seconds=30)

        acked = await ack(stub, "tasks", m)
        assert [(plain(r.key), r.acked) for r in acked.results] == [(["k1"], True)]
        assert stored(sql, "tasks") == []
        await s.quiet()

    code, _, info = await error_of(ack(stub, "tasks", m))
    assert code == grpc.StatusCode.OUT_OF_RANGE and info["reason"] == "MESSAGE_NOT_FOUND"
    ignored = await stub.Ack(queue_pb2.AckRequest(
        queue="tasks", acks=[queue_pb2.AckMessage(key=m.key)], ignore_not_found=True))
    assert [r.acked for r in ignored.results] == [False]


async def test_queue_default_lease_is_used(stub, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, lease_duration=duration(42))
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks") as s:
        before = clock.now()
        m = await s.next()
        after = clock.now()
    assert before + timedelta(seconds=42) <= stamp(m.lease_expiration_time) <= after + timedelta(seconds=42)


async def test_a_held_message_is_not_delivered_to_another_stream(stub, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as first:
        await first.next()
        async with open_stream(stub, "tasks") as second:
            clock.advance(timedelta(seconds=9))
            await second.quiet()
            await first.quiet()


async def test_receive_unknown_queue_is_not_found(stub):
    async with open_stream(stub, "nope") as s:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await s.task
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


# -- scheduled messages -------------------------------------------------------------


async def test_delayed_message_is_not_delivered_early(stub, clock):
    await create_queue(stub, "later", payload_type=queue_pb2.STRING)
    sent_at = clock.now()
    await send(stub, "later", text_message("d", "delayed", delay=duration(3600)))
    async with open_stream(stub, "later") as s:
        await s.quiet()
        clock.advance(timedelta(minutes=59))
        await s.quiet()
        clock.advance(timedelta(minutes=1, seconds=1))
        m = await s.next(timeout=2)
    assert plain(m.key) == ["d"] and m.delivery_attempt == 1
    assert sent_at + timedelta(hours=1) <= stamp(m.deliver_time) <= sent_at + timedelta(hours=1, seconds=5)


async def test_deliver_time_is_honoured_and_past_means_now(stub, clock):
    await create_queue(stub, "later", payload_type=queue_pb2.STRING)
    at = clock.now() + timedelta(hours=2)
    message = text_message("at", "scheduled")
    message.deliver_time.FromDatetime(at)
    past = text_message("past", "now")
    past.deliver_time.FromDatetime(clock.now() - timedelta(days=1))
    await send(stub, "later", message, past)
    async with open_stream(stub, "later") as s:
        first = await s.next()
        assert plain(first.key) == ["past"]
        assert stamp(first.deliver_time) >= stamp(first.enqueue_time)  # the past means now
        await ack(stub, "later", first)
        clock.advance(timedelta(hours=2) - timedelta(seconds=5))
        await s.quiet()
        clock.advance(timedelta(seconds=10))
        m = await s.next(timeout=2)
    assert plain(m.key) == ["at"]
    assert abs(stamp(m.deliver_time) - at) < timedelta(milliseconds=1)


# -- leases: expiry, redelivery, backoff, renewal, nack ----------------------------------


async def test_expired_lease_is_redelivered_with_new_token(stub, clock, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        first = await s.next()
        assert first.delivery_attempt == 1
        clock.advance(timedelta(seconds=11))
        second = await s.next(timeout=2)
    assert plain(second.key) == ["k"] and plain(second.payload) == "x"
    assert second.delivery_attempt == 2
    assert second.lease_token and second.lease_token != first.lease_token
    assert stamp(second.enqueue_time) == stamp(first.enqueue_time)

    code, message, info = await error_of(ack(stub, "tasks", first))
    assert code == grpc.StatusCode.FAILED_PRECONDITION, message
    assert info["reason"] == "LEASE_NOT_HELD"
    assert stored(sql, "tasks") == ["k"]  # the stale ack deleted nothing
    # The stale token cannot be renewed either; the current one acks.
    renewed = await renew(stub, "tasks", first.lease_token, seconds=30)
    assert renewed.leases[0].old_lease_token == first.lease_token and renewed.leases[0].new_lease_token == ""
    await ack(stub, "tasks", second)
    assert stored(sql, "tasks") == []


async def test_stale_ack_in_a_batch_acks_nothing(stub, clock, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", text_message("a", "1"), text_message("b", "2"))
    async with open_stream(stub, "tasks", lease_duration=duration(10), max_batch_size=1) as s:
        a, b = sorted(await s.take(2), key=lambda m: plain(m.key))
        await renew(stub, "tasks", b.lease_token, seconds=60)  # b's token is now superseded
        code, _, info = await error_of(ack(stub, "tasks", a, b))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and info["reason"] == "LEASE_NOT_HELD"
    assert stored(sql, "tasks") == ["a", "b"]  # all or nothing


async def test_redelivery_backoff_is_honoured(stub, clock):
    # Attempt n waits min(max_backoff, initial_backoff * 2^(n-1)) after its lease ends.
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING,
                       initial_backoff=duration(60), max_backoff=duration(100))
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        first = await s.next()
        clock.advance(timedelta(seconds=10 + 50))  # lease over, 50 s into a 60 s backoff
        await s.quiet()
        clock.advance(timedelta(seconds=11))
        second = await s.next(timeout=2)
        assert second.delivery_attempt == 2
        # Deliverable again exactly one backoff after the lease ended.
        assert stamp(second.deliver_time) == stamp(first.lease_expiration_time) + timedelta(seconds=60)
        clock.advance(timedelta(seconds=10 + 95))  # backoff 2: min(100, 60 * 2) = 100 s
        await s.quiet()
        clock.advance(timedelta(seconds=6))
        third = await s.next(timeout=2)
        assert third.delivery_attempt == 3
    assert len({first.lease_token, second.lease_token, third.lease_token}) == 3


async def test_late_ack_is_accepted_until_the_message_is_leased_again(stub, clock, sql):
    # "No longer current" means the lease went to another receiver: an expired lease whose
    # message is still in its backoff can still be acked with its token.
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(60))
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        m = await s.next()
        clock.advance(timedelta(seconds=30))
        renewed = await renew(stub, "tasks", m.lease_token, seconds=30)
        assert renewed.leases[0].new_lease_token == ""  # too late to renew an expired lease
        acked = await ack(stub, "tasks", m)
        assert [r.acked for r in acked.results] == [True]
        clock.advance(timedelta(seconds=60))
        await s.quiet()
    assert stored(sql, "tasks") == []


async def test_default_backoff_is_one_second(stub, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks", lease_duration=duration(5)) as s:
        await s.next()
        clock.advance(timedelta(seconds=5.2))
        await s.quiet()
        clock.advance(timedelta(seconds=1))
        assert (await s.next(timeout=2)).delivery_attempt == 2


async def test_renew_lease_prevents_redelivery(stub, clock, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        m = await s.next()
        before = clock.now()
        response = await renew(stub, "tasks", m.lease_token, seconds=60)
        after = clock.now()
        [lease] = response.leases
        assert lease.old_lease_token == m.lease_token
        assert lease.new_lease_token and lease.new_lease_token != m.lease_token
        expires = stamp(lease.lease_expiration_time)
        assert before + timedelta(seconds=60) <= expires <= after + timedelta(seconds=60)

        clock.advance(timedelta(seconds=30))  # past the original lease, inside the renewed one
        await s.quiet()

        # The old token is superseded: renewing or acking with it fails, the message stays.
        again = await renew(stub, "tasks", m.lease_token, seconds=60)
        assert again.leases[0].old_lease_token == m.lease_token and again.leases[0].new_lease_token == ""
        code, _, info = await error_of(ack(stub, "tasks", m))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and info["reason"] == "LEASE_NOT_HELD"
        assert stored(sql, "tasks") == ["k"]

        acked = await stub.Ack(queue_pb2.AckRequest(
            queue="tasks", acks=[queue_pb2.AckMessage(key=m.key, lease_token=lease.new_lease_token)]))
        assert [r.acked for r in acked.results] == [True]
        clock.advance(timedelta(seconds=60))
        await s.quiet()
    assert stored(sql, "tasks") == []


async def test_a_renewed_lease_still_counts_against_max_outstanding(stub, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", text_message("a", "x"), text_message("b", "y"))
    async with open_stream(stub, "tasks", lease_duration=duration(10), max_outstanding=1) as s:
        m = await s.next()
        renewed = await renew(stub, "tasks", m.lease_token, seconds=60)
        assert renewed.leases[0].new_lease_token.split(".")[0] == m.lease_token.split(".")[0]
        clock.advance(timedelta(seconds=20))  # past the first lease: only the renewed one holds the slot
        await s.quiet()
        await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
            queue_pb2.AckMessage(key=m.key, lease_token=renewed.leases[0].new_lease_token)]))
        other = await s.next(timeout=2)
    assert plain(other.key) != plain(m.key) and other.delivery_attempt == 1


async def test_renewed_lease_expires_and_is_redelivered(stub, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        m = await s.next()
        await renew(stub, "tasks", m.lease_token, seconds=20)
        clock.advance(timedelta(seconds=15))
        await s.quiet()
        clock.advance(timedelta(seconds=6))
        again = await s.next(timeout=2)
    assert again.delivery_attempt == 2


async def test_renew_of_an_acked_message_returns_no_token(stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks") as s:
        m = await s.next()
    await ack(stub, "tasks", m)
    response = await renew(stub, "tasks", m.lease_token, "sql.unknown", seconds=30)
    assert [(r.old_lease_token, r.new_lease_token) for r in response.leases] == [
        (m.lease_token, ""), ("sql.unknown", "")]


async def test_renew_with_a_token_twice_answers_each_the_same_lease(stub, clock):
    """One entry per token, in order, as for any RenewLease: a token named twice gets the
    same entry twice (one renewal, one new token), in a RenewLease and in a Commit alike."""
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("a", "x"), text_message("b", "x"))
    async with open_stream(stub, "tasks") as s:
        a, b = await s.take(2)
    response = await renew(stub, "tasks", a.lease_token, b.lease_token, a.lease_token, seconds=30)
    first, other, again = response.leases
    assert first == again and first.old_lease_token == a.lease_token and first.new_lease_token
    assert other.old_lease_token == b.lease_token and other.new_lease_token not in ("", first.new_lease_token)
    committed = await stub.Commit(queue_pb2.CommitRequest(mutations=[queue_pb2.Mutation(
        renew_lease=queue_pb2.RenewLeaseRequest(queue="tasks", lease_tokens=[first.new_lease_token] * 2,
                                                lease_duration=duration(30)))]))
    once, twice = committed.results[0].renew_lease.leases
    assert once == twice and once.new_lease_token not in ("", first.new_lease_token)
    # That one new token holds the lease: it acks.
    acked = await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
        queue_pb2.AckMessage(key=a.key, lease_token=once.new_lease_token)]))
    assert [r.acked for r in acked.results] == [True]


async def test_nack_redelivers_at_once_without_backoff(stub, clock, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks", lease_duration=duration(60)) as s:
        m = await s.next()
        response = await renew(stub, "tasks", m.lease_token, seconds=0)
        [released] = response.leases
        assert released.old_lease_token == m.lease_token and released.new_lease_token == ""
        again = await s.next(timeout=1)  # no clock change: the nack itself wakes the stream
    assert plain(again.key) == ["k"] and again.delivery_attempt == 2 and again.lease_token != m.lease_token
    code, _, info = await error_of(ack(stub, "tasks", m))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and info["reason"] == "LEASE_NOT_HELD"
    assert stored(sql, "tasks") == ["k"]


async def test_nack_redelivers_after_backoff(stub, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(20))
    await send(stub, "tasks", text_message("k", "x"))
    async with open_stream(stub, "tasks", lease_duration=duration(60)) as s:
        m = await s.next()
        await renew(stub, "tasks", m.lease_token, seconds=0)
        await s.quiet()
        clock.advance(timedelta(seconds=15))
        await s.quiet()
        clock.advance(timedelta(seconds=6))
        again = await s.next(timeout=2)
    assert again.delivery_attempt == 2


# -- push, not poll -------------------------------------------------------------------


async def _idle_stream_roundtrip(stub, s, deliver, waiting) -> float:
    """Once the stream waits again (``waiting`` was cleared before its last delivery), times
    how long ``deliver()`` takes to reach it."""
    await waiting.wait(match=lambda v: v.queue == "tasks", what="the stream to wait again")
    assert s.pending() == 0
    started = time.monotonic()
    await deliver()
    m = await s.next(timeout=3)
    elapsed = time.monotonic() - started
    await ack(stub, "tasks", m, with_token=False)
    return elapsed


async def test_send_wakes_an_idle_stream_at_once(stub, server, waiting):
    assert server.config.poll_interval == POLL
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    async with open_stream(stub, "tasks") as s:
        # A first round trip so the stream has certainly started and gone to sleep.
        waiting.clear()
        await send(stub, "tasks", text_message("warm", "x"))
        await ack(stub, "tasks", await s.next())
        elapsed = await _idle_stream_roundtrip(stub, s, lambda: send(stub, "tasks", text_message("k", "x")),
                                               waiting)
    assert elapsed < 1.0


async def test_this_servers_sends_and_nacks_wake_its_streams_without_listen(stub, server, waiting):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await asyncio.wait_for(server.wakeups.connected.wait(), 5)
    await server.wakeups.stop()  # no notifications any more: only the direct wake-up is left
    assert not server.wakeups.listening
    async with open_stream(stub, "tasks", lease_duration=duration(60)) as s:
        waiting.clear()
        await send(stub, "tasks", text_message("warm", "x"))
        await ack(stub, "tasks", await s.next())
        elapsed = await _idle_stream_roundtrip(stub, s, lambda: send(stub, "tasks", text_message("k", "x")),
                                               waiting)
        assert elapsed < 1.0

        waiting.clear()
        await send(stub, "tasks", text_message("n", "x"))
        m = await s.next()
        await waiting.wait(what="the stream to wait again")
        started = time.monotonic()
        await renew(stub, "tasks", m.lease_token, seconds=0)
        again = await s.next(timeout=3)
        assert time.monotonic() - started < 1.0 and again.delivery_attempt == 2


async def test_plain_sql_insert_wakes_an_idle_stream(stub, server, sql, waiting):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await asyncio.wait_for(server.wakeups.connected.wait(), 5)
    async with open_stream(stub, "tasks") as s:
        waiting.clear()
        await send(stub, "tasks", text_message("warm", "x"))
        await ack(stub, "tasks", await s.next())

        async def insert() -> None:
            await asyncio.to_thread(sql.execute, "INSERT INTO tasks (id, payload) VALUES ('from-psql', 'hi')")

        elapsed = await _idle_stream_roundtrip(stub, s, insert, waiting)
    assert elapsed < 1.0
    assert s.received[-1].payload.string_value == "hi"


async def test_listener_reconnects_after_its_connection_is_killed(stub, server, sql, waiting):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await asyncio.wait_for(server.wakeups.connected.wait(), 5)
    killed = sql.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND query ILIKE 'LISTEN%%' AND pid <> pg_backend_pid()").fetchall()
    assert killed == [(True,)]
    await until(lambda: not server.wakeups.connected.is_set(), "the listener to notice", 5)
    await asyncio.wait_for(server.wakeups.connected.wait(), 5)
    async with open_stream(stub, "tasks") as s:
        waiting.clear()
        await send(stub, "tasks", text_message("warm", "x"))
        await ack(stub, "tasks", await s.next())

        async def insert() -> None:
            await asyncio.to_thread(sql.execute, "INSERT INTO tasks (id, payload) VALUES ('after', 'hi')")

        elapsed = await _idle_stream_roundtrip(stub, s, insert, waiting)
    assert elapsed < 1.0


async def test_send_through_another_server_wakes_an_idle_stream(stub, server, server_config, waiting):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await asyncio.wait_for(server.wakeups.connected.wait(), 5)
    other = await start(server_config)
    try:
        async with grpc.aio.insecure_channel(other.target) as channel:
            other_stub = queue_pb2_grpc.QueueServiceStub(channel)
            async with open_stream(stub, "tasks") as s:
                waiting.clear()
                await send(other_stub, "tasks", text_message("warm", "x"))
                await ack(other_stub, "tasks", await s.next(timeout=3))
                elapsed = await _idle_stream_roundtrip(
                    stub, s, lambda: send(other_stub, "tasks", text_message("k", "x")), waiting)
            assert elapsed < 1.0
            assert plain(s.received[-1].key) == ["k"]
    finally:
        await other.stop(0)


async def test_nack_through_another_server_wakes_an_idle_stream(stub, server, server_config, waiting):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await asyncio.wait_for(server.wakeups.connected.wait(), 5)
    other = await start(server_config)
    try:
        async with grpc.aio.insecure_channel(other.target) as channel:
            other_stub = queue_pb2_grpc.QueueServiceStub(channel)
            await send(stub, "tasks", text_message("k", "x"))
            async with open_stream(stub, "tasks", lease_duration=duration(60)) as s:
                m = await s.next()
                await waiting.wait(what="the stream to wait after its one message")
                started = time.monotonic()
                await renew(other_stub, "tasks", m.lease_token, seconds=0)
                again = await s.next(timeout=3)
                assert time.monotonic() - started < 1.0
            assert again.delivery_attempt == 2
    finally:
        await other.stop(0)


# -- flow control and stream lifetime -----------------------------------------------------


async def test_max_outstanding_holds(stub, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", *[text_message(f"m{i:02}", str(i)) for i in range(20)])
    async with open_stream(stub, "tasks", max_outstanding=5, max_batch_size=3, lease_duration=duration(60)) as s:
        held = await s.take(5)
        await s.quiet()
        assert len(s.received) == 5

        await ack(stub, "tasks", *held[:2])
        more = await s.take(2, timeout=2)
        await s.quiet()
        assert len(s.received) == 7
        held = held[2:] + more

        # A nack frees room too (and the nacked message may come straight back).
        await renew(stub, "tasks", held[0].lease_token, seconds=0)
        await s.take(1, timeout=2)
        await s.quiet()

        # Expired leases free room: after 60 s every lease has lapsed, and the stream refills to 5.
        clock.advance(timedelta(seconds=61))
        await s.take(5, timeout=2)
        await s.quiet()
    keys = [plain(m.key)[0] for m in s.received]
    assert len(keys) == 13


async def test_max_outstanding_counts_only_this_streams_leases(stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", *[text_message(f"m{i:02}", str(i)) for i in range(6)])
    async with open_stream(stub, "tasks", max_outstanding=2, lease_duration=duration(60)) as a:
        await a.take(2)
        async with open_stream(stub, "tasks", max_outstanding=2, lease_duration=duration(60)) as b:
            await b.take(2)
            await a.quiet(0.2)
            await b.quiet(0.2)
    assert len({m.lease_token for m in a.received + b.received}) == 4
    assert not {plain(m.key)[0] for m in a.received} & {plain(m.key)[0] for m in b.received}


async def test_one_send_arrives_as_one_batch_with_last_batch_message(stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", *[text_message(f"m{i}", str(i)) for i in range(5)])
    call = stub.Receive(queue_pb2.ReceiveRequest(queue="tasks", max_batch_size=3))
    try:
        first = await asyncio.wait_for(call.read(), 5)
        second = await asyncio.wait_for(call.read(), 5)
    finally:
        call.cancel()
    assert [m.last_batch_message for m in first.messages] == [False, False, True]
    assert [m.last_batch_message for m in second.messages] == [False, True]
    assert len({plain(m.key)[0] for m in [*first.messages, *second.messages]}) == 5


async def test_the_messages_of_one_send_are_delivered_in_the_order_sent(stub, clock):
    await create_queue(stub, "ordered", payload_type=queue_pb2.STRING)
    keys = [f"m{i:03d}" for i in random.Random(14).sample(range(100), 100)]  # not the keys' own order
    await send(stub, "ordered", *[text_message(k, k) for k in keys])
    later = [f"d{i:03d}" for i in random.Random(15).sample(range(20), 20)]
    await send(stub, "ordered", *[text_message(k, k, delay=duration(60)) for k in later])
    got = await receive_some(stub, "ordered", 100, max_batch_size=100)
    assert [plain(m.key)[0] for m in got] == keys
    assert stamp(got[0].deliver_time) == stamp(got[0].enqueue_time)
    await ack(stub, "ordered", *got)
    clock.advance(timedelta(seconds=61))
    got = await receive_some(stub, "ordered", 20, max_batch_size=7)  # across batches too
    assert [plain(m.key)[0] for m in got] == later


async def test_one_sends_messages_do_not_tie_on_deliver_time(stub, sql):
    # Receive takes messages by deliver_time; ties would come out in whatever order the plan reads them
    # (the deliver_time index's heap order, or a sort's), so the order sent must be in deliver_time itself.
    await create_queue(stub, "ordered", payload_type=queue_pb2.STRING)
    keys = [f"m{i:03d}" for i in random.Random(14).sample(range(100), 100)]
    await send(stub, "ordered", *[text_message(k, k) for k in keys[:50]],
               *[text_message(k, k, delay=duration(0)) for k in keys[50:]])
    rows = sql.execute("SELECT id, deliver_time - spanq_enqueue_time FROM ordered ORDER BY deliver_time").fetchall()
    assert [row[0] for row in rows] == keys
    assert [row[1] for row in rows] == [timedelta(microseconds=i) for i in range(100)]


async def test_cancelled_streams_are_released(stub, server):
    # Streams cancelled while they wait for pool connections (there are more streams than
    # connections): the race in which Python 3.11's asyncio.wait_for, inside psycopg_pool,
    # swallowed the cancellation and left zombie streams behind. Many rounds, because the
    # race is narrow.
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    for round in range(15):
        streams = [open_stream(stub, "tasks") for _ in range(24)]
        for st in streams:
            await st.__aenter__()
        await asyncio.sleep(round / 1000)  # the test: each round cancels a moment later, to hit the race
        for st in streams:
            await st.__aexit__(None, None, None)
        await until(lambda: server.receiver.open_streams() == 0, "every stream released", 3)


async def test_a_batch_leased_for_a_cancelled_stream_is_given_back(stub, server, sql, database_url):
    # A table lock holds the stream's lease statement; the client leaves while it waits.
    # When the lock goes, the statement leases the message for nobody: the server must
    # undo that lease (token, deliver_time, attempt as before), not leave it to expire.
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("k", "x"))
    columns = 'deliver_time, spanq_lease_token, spanq_delivery_attempt FROM "tasks"'
    before = sql.execute(f"SELECT {columns}").fetchall()
    with psycopg.connect(database_url) as locker:
        locker.execute('LOCK TABLE "tasks" IN EXCLUSIVE MODE')
        call = stub.Receive(queue_pb2.ReceiveRequest(queue="tasks"))
        await until(lambda: sql.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%receive_tasks%'"
        ).fetchone()[0] == 1, "the lease statement to wait on the lock", 5)
        call.cancel()
        await until(lambda: server.receiver.open_streams() == 0, "the stream to end", 5)
        locker.rollback()
    await until(lambda: sql.execute(f"SELECT {columns}").fetchall() == before, "the lease given back", 5)
    # And a new stream gets it at once, as its first delivery.
    got = await receive_some(stub, "tasks", 1, timeout=5)
    assert [(plain(m.key), m.delivery_attempt) for m in got] == [(["k"], 1)]


async def test_max_duration_ends_the_stream_normally(stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("k", "x"))
    started = time.monotonic()
    call = stub.Receive(queue_pb2.ReceiveRequest(queue="tasks", max_duration=duration(0.8)))
    got = [m async for response in call for m in response.messages]
    elapsed = time.monotonic() - started
    assert await call.code() == grpc.StatusCode.OK
    assert [plain(m.key) for m in got] == [["k"]]
    assert 0.7 <= elapsed < 3.0  # ends by itself, long before the 30 s poll


async def test_max_duration_ends_a_stream_at_max_outstanding(stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("a", "x"), text_message("b", "y"))
    started = time.monotonic()
    call = stub.Receive(queue_pb2.ReceiveRequest(queue="tasks", max_duration=duration(0.5), max_outstanding=1))
    got = [m async for response in call for m in response.messages]
    assert await call.code() == grpc.StatusCode.OK
    assert len(got) == 1
    assert time.monotonic() - started < 3.0


async def test_bad_receive_arguments_are_invalid(stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    for field, value in [("max_batch_size", -1), ("max_batch_size", 1001), ("max_outstanding", -1),
                         ("lease_duration", duration(0.5)), ("max_duration", duration(7200))]:
        call = stub.Receive(queue_pb2.ReceiveRequest(queue="tasks", **{field: value}))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for _ in call:
                pass
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field


# -- dead letters ---------------------------------------------------------------------


async def test_dead_letter_after_max_delivery_attempts(stub, clock, sql):
    await create_queue(stub, "graveyard", payload_type=queue_pb2.STRING)
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0),
                       max_delivery_attempts=2, dead_letter_queue="graveyard")
    await send(stub, "tasks", text_message("k", "poison"), text_message("ok", "fine"))
    async with open_stream(stub, "tasks", lease_duration=duration(10), max_batch_size=1) as s:
        first = await s.take(2)
        good = next(m for m in first if plain(m.key) == ["ok"])
        await ack(stub, "tasks", good)
        clock.advance(timedelta(seconds=11))
        second = await s.next(timeout=2)
        assert plain(second.key) == ["k"] and second.delivery_attempt == 2
        clock.advance(timedelta(seconds=11))
        await s.quiet()  # a third delivery would exceed max_delivery_attempts
    assert stored(sql, "tasks") == []
    assert stored(sql, "graveyard") == ["k"]

    async with open_stream(stub, "graveyard") as dead:
        m = await dead.next()
    assert plain(m.key) == ["k"] and plain(m.payload) == "poison" and m.delivery_attempt == 1
    assert stamp(m.enqueue_time) == stamp(first[0].enqueue_time) or stamp(m.enqueue_time) == stamp(
        first[1].enqueue_time)


async def test_dead_letter_queue_must_match(stub):
    await create_queue(stub, "graveyard", payload_type=queue_pb2.BYTES)
    code, _, _ = await error_of(create_queue(stub, "tasks", payload_type=queue_pb2.STRING,
                                             max_delivery_attempts=2, dead_letter_queue="graveyard"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _, _ = await error_of(create_queue(stub, "tasks", payload_type=queue_pb2.BYTES,
                                             max_delivery_attempts=2, dead_letter_queue="missing"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# -- send atomicity ---------------------------------------------------------------------


async def test_duplicate_key_send_stores_nothing(stub, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("dup", "first"))
    code, message, info = await error_of(send(stub, "tasks", text_message("new", "x"), text_message("dup", "y")))
    assert code == grpc.StatusCode.ALREADY_EXISTS, message
    assert info["reason"] == "MESSAGE_ALREADY_EXISTS"
    assert stored(sql, "tasks") == ["dup"]
    assert sql.execute("SELECT payload FROM tasks").fetchone()[0] == "first"


async def test_duplicate_key_within_one_send_stores_nothing(stub, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    code, _, _ = await error_of(send(stub, "tasks", text_message("a", "x"), text_message("a", "y")))
    assert code in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INVALID_ARGUMENT)
    assert stored(sql, "tasks") == []


async def test_send_to_unknown_queue_is_not_found(stub):
    code, _, info = await error_of(send(stub, "nope", text_message("a", "x")))
    assert code == grpc.StatusCode.NOT_FOUND and info["reason"] == "QUEUE_NOT_FOUND"


async def test_generated_keys_are_distinct_and_stable(stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    sent = await send(stub, "tasks", *[text_message(None, str(i)) for i in range(10)])
    keys = [plain(k)[0] for k in sent.keys]
    assert len(set(keys)) == 10
    async with open_stream(stub, "tasks") as s:
        got = await s.take(10)
    assert sorted(plain(m.key)[0] for m in got) == sorted(keys)
    assert {plain(m.key)[0]: plain(m.payload) for m in got} == {k: str(i) for i, k in enumerate(keys)}


async def test_message_with_key_list_for_generated_queue(stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    sent = await send(stub, "tasks", queue_pb2.SendMessage(key=key(), payload=text_message("x", "p").payload))
    assert len(plain(sent.keys[0])[0]) == 36
