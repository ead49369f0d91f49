"""Dead letters that keep their history, against a real server and PostgreSQL: the
source queue, the attempts, when and why (a lease that ran out, a nack's reason),
shown by Peek and in the SQL columns; a key the dead-letter queue holds already is
left in its queue, not lost; the dead-letter count in /metrics (moves by SQL too)."""

import asyncio
import dataclasses
from datetime import timedelta

import grpc
import pytest

import spanq
import spanq.aio
from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.ground.config import Config
from spanq_server.store import Store

from ..helpers import (
    ack, create_queue, duration, error_of, open_stream, plain, receive_some, send, stamp, text_message, until,
)
from .test_metrics import scrape, value


@pytest.fixture
def server_config(server_config: Config) -> Config:
    return dataclasses.replace(server_config, metrics_listen="127.0.0.1:0", metrics_interval=timedelta(0))


async def dead_letter_pair(stub) -> None:
    await create_queue(stub, "graveyard", payload_type=queue_pb2.STRING)
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0),
                       max_backoff=duration(60), max_delivery_attempts=2, dead_letter_queue="graveyard")


async def nack(stub, queue: str, token: str, reason: str = "") -> None:
    await stub.RenewLease(queue_pb2.RenewLeaseRequest(queue=queue, lease_tokens=[token],
                                                      lease_duration=duration(0), reason=reason))


async def peek(stub, queue: str) -> list[queue_pb2.PeekedMessage]:
    return list((await stub.Peek(queue_pb2.PeekRequest(queue=queue))).messages)


def history(sql, table: str) -> list[tuple]:
    return sql.execute(f'SELECT id, spanq_dead_letter_source, spanq_dead_letter_attempts, spanq_last_failure, '
                       f'spanq_dead_letter_time IS NOT NULL FROM "{table}" ORDER BY id').fetchall()


async def test_a_message_whose_leases_ran_out_keeps_its_history(server, stub, clock, sql):
    await dead_letter_pair(stub)
    await send(stub, "tasks", text_message("k", "poison"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        assert (await s.next()).delivery_attempt == 1
        clock.advance(timedelta(seconds=11))
        assert (await s.next()).delivery_attempt == 2
        before = clock.now()
        clock.advance(timedelta(seconds=11))
        await s.quiet()
    assert history(sql, "graveyard") == [("k", "tasks", 2, "lease expired", True)]
    [m] = await peek(stub, "graveyard")
    assert m.dead_letter.source_queue == "tasks" and m.dead_letter.delivery_attempts == 2
    assert m.dead_letter.last_failure == "lease expired"
    assert stamp(m.dead_letter.dead_letter_time) >= before
    async with open_stream(stub, "graveyard") as dead:  # and so does its delivery
        got = await dead.next()
    assert got.delivery_attempt == 1 and got.dead_letter == m.dead_letter
    assert value(await scrape(server), "spanq_queue_messages_dead_lettered_total", queue="tasks") == 1


def attempts(sql, table: str) -> dict[str, tuple[int, bool]]:
    """Each message's stored delivery attempt, and whether a lease token is set."""
    return {k: (n, held) for k, n, held in sql.execute(
        f'SELECT id, spanq_delivery_attempt, spanq_lease_token IS NOT NULL FROM "{table}"').fetchall()}


async def test_only_what_a_stream_sent_past_the_last_message_its_client_settled_gets_its_attempt_back(
        server, stub, clock, sql):
    await create_queue(stub, "marks", payload_type=queue_pb2.STRING, lease_duration=duration(2))
    refunded = lambda: server.metrics.registry.get_sample_value(  # noqa: E731
        "spanq_queue_attempts_refunded_total", {"queue": "marks"}) or 0
    async with grpc.aio.insecure_channel(server.target) as raw_channel:
        raw = queue_pb2_grpc.QueueServiceStub(raw_channel)
        call = raw.Receive(queue_pb2.ReceiveRequest(queue="marks", max_batch_size=2))
        await send(stub, "marks", text_message("a", "x"), text_message("b", "x"))
        first = await call.read()  # the client reads its first response, acks one of it, and reads no more
        await ack(stub, "marks", first.messages[0])
        kept = plain(first.messages[1].key)[0]
        for pair in (("c", "d"), ("e", "f")):  # one batch each (an unproven stream takes one per wake-up)
            await send(stub, "marks", *(text_message(k, "x") for k in pair))
            await until(lambda: all(attempts(sql, "marks").get(k) == (1, True) for k in pair), f"{pair} leased")
        async with open_stream(stub, "marks") as other:  # the stream is not alone on its queue
            await until(lambda: refunded() == 4, "the unread leases' attempts given back")
            # The leases stay where they are; only the attempts of the responses never read came back.
            assert attempts(sql, "marks") == {kept: (1, True), "c": (0, True), "d": (0, True), "e": (0, True),
                                              "f": (0, True)}
            call.cancel()
            clock.advance(timedelta(seconds=2))  # past the backoff
            got = await other.take(5)
            assert {plain(m.key)[0]: m.delivery_attempt for m in got} == {kept: 2, "c": 1, "d": 1, "e": 1, "f": 1}


async def test_a_client_that_disconnects_with_a_message_unsettled_counts_its_attempts(server, stub, clock, sql):
    await dead_letter_pair(stub)
    await send(stub, "tasks", text_message("k", "poison"))
    for attempt in (1, 2):
        async with grpc.aio.insecure_channel(server.target) as crashing:
            call = queue_pb2_grpc.QueueServiceStub(crashing).Receive(queue_pb2.ReceiveRequest(queue="tasks"))
            assert (await call.read()).messages[0].delivery_attempt == attempt
        # The connection closed with the message read and unsettled: its lease runs out.
        await until(lambda: "tasks" not in server.receiver.streams_by_queue(), "the stream gone")
        clock.advance(timedelta(seconds=61))
    assert await receive_some(stub, "tasks", 1, timeout=1) == []
    assert history(sql, "graveyard") == [("k", "tasks", 2, "lease expired", True)]


async def test_a_nacked_message_keeps_the_reason_of_its_last_nack(server, stub, sql):
    await dead_letter_pair(stub)
    await send(stub, "tasks", text_message("k", "poison"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        await nack(stub, "tasks", (await s.next()).lease_token, "ValueError: first")
        await nack(stub, "tasks", (await s.next()).lease_token, "KeyError: 'price'")
        await s.quiet()
    assert history(sql, "graveyard") == [("k", "tasks", 2, "KeyError: 'price'", True)]
    [m] = await peek(stub, "graveyard")
    assert m.dead_letter.last_failure == "KeyError: 'price'"
    # Messages never dead-lettered show no history.
    await send(stub, "tasks", text_message("fresh", "x"))
    [fresh] = await peek(stub, "tasks")
    assert not fresh.HasField("dead_letter")


async def test_a_nack_without_a_reason_says_nacked_and_a_long_reason_is_refused(server, stub, sql):
    await dead_letter_pair(stub)
    await send(stub, "tasks", text_message("k", "poison"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        first = await s.next()
        code, message, _ = await error_of(nack(stub, "tasks", first.lease_token, "x" * 201))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "200" in message
        code, message, _ = await error_of(stub.RenewLease(queue_pb2.RenewLeaseRequest(
            queue="tasks", lease_tokens=[first.lease_token], lease_duration=duration(10), reason="why")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "nack" in message
        await nack(stub, "tasks", first.lease_token, "an old reason")
        await nack(stub, "tasks", (await s.next()).lease_token)
        await s.quiet()
    assert history(sql, "graveyard") == [("k", "tasks", 2, "nacked", True)]


async def test_a_key_the_dead_letter_queue_holds_stays_in_its_queue(server, stub, clock, sql):
    await dead_letter_pair(stub)
    await send(stub, "graveyard", text_message("k", "older"))
    await send(stub, "tasks", text_message("k", "newer"))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        await nack(stub, "tasks", (await s.next()).lease_token, "one")
        await nack(stub, "tasks", (await s.next()).lease_token, "two")
        await s.quiet()
    # Not moved, not lost: the message waits in its queue (not delivered again), the older copy is untouched.
    assert sql.execute("SELECT payload, spanq_delivery_attempt FROM tasks").fetchall() == [("newer", 2)]
    assert sql.execute("SELECT payload FROM graveyard").fetchall() == [("older",)]
    assert value(await scrape(server), "spanq_queue_messages_dead_lettered_total", queue="tasks") == 0
    # Once the older copy is gone, the move is tried again after max_backoff, and goes through.
    sql.execute("DELETE FROM graveyard")
    clock.advance(timedelta(seconds=61))
    async with open_stream(stub, "tasks", lease_duration=duration(10)) as s:
        await s.quiet()
    assert history(sql, "graveyard") == [("k", "tasks", 2, "two", True)]
    assert sql.execute("SELECT payload FROM graveyard").fetchall() == [("newer",)]
    assert sql.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


async def test_moves_by_sql_are_counted_too(server, stub, sql):
    await dead_letter_pair(stub)
    await send(stub, "tasks", text_message("a", "x"), text_message("b", "y"))
    for _ in range(2):  # two attempts each, their leases released at once
        rows = sql.execute("SELECT id, spanq_lease_token FROM spanq.receive_tasks(10)").fetchall()
        assert len(rows) == 2
        sql.execute("SELECT * FROM spanq.renewlease_tasks(%s, '0')", [[r[1] for r in rows]])
    assert sql.execute("SELECT * FROM spanq.receive_tasks(10)").fetchall() == []
    assert [r[:3] for r in history(sql, "graveyard")] == [("a", "tasks", 2), ("b", "tasks", 2)]
    assert value(await scrape(server), "spanq_queue_messages_dead_lettered_total", queue="tasks") == 2


async def test_the_sdk_passes_a_callbacks_exception_and_peek_shows_the_history(server, sql):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("graveyard", payload_type="STRING")
        await client.create_queue("tasks", payload_type="STRING", initial_backoff=0, max_delivery_attempts=2,
                                  dead_letter_queue="graveyard")
        await client.send("tasks", "poison", key="k")
        attempts: list[int] = []

        async def handle(message: spanq.Message) -> None:
            attempts.append(message.delivery_attempt)
            raise KeyError("price" * 100)

        async with client.subscribe("tasks", handle):
            await until(lambda: sql.execute("SELECT count(*) FROM graveyard").fetchone()[0],
                        "the second failure to move it", 10, 0.05)
        [m] = (await client.peek("graveyard")).messages
        assert m.dead_letter is not None and m.dead_letter.source_queue == "tasks"
        assert m.dead_letter.delivery_attempts == 2 == len(attempts)
        reason = m.dead_letter.last_failure
        assert reason.startswith("KeyError: 'pricepricep") and reason.endswith("...") and len(reason) == 200
        [received] = await client.receive("graveyard", 1)
        assert received.dead_letter == m.dead_letter
        await client.nack("graveyard", received)

        # An explicit nack's reason, through Message.nack from receive.
        await client.send("tasks", "also", key="j")
        for why in ("first", "second"):
            [got] = await client.receive("tasks", 1)
            await asyncio.wait_for(got.nack(reason=why), 10)
        assert await client.receive("tasks", 1, timeout=0.5) == []
        [j] = [p for p in (await client.peek("graveyard")).messages if p.key == ("j",)]
        assert j.dead_letter is not None and j.dead_letter.last_failure == "second"


async def test_redrive_sends_each_dead_letter_back_to_its_own_source(server, stub, sql):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("graveyard", payload_type="STRING")
        for name in ("orders", "refunds"):
            await client.create_queue(name, payload_type="STRING", initial_backoff=0, max_delivery_attempts=1,
                                      dead_letter_queue="graveyard")
        await client.send("orders", "o", key="o1")
        await client.send("refunds", "r", key="r1")
        for name in ("orders", "refunds"):  # one attempt (released in SQL), then the next receive moves it
            [(token,)] = sql.execute(f"SELECT spanq_lease_token FROM spanq.receive_{name}(10)").fetchall()
            sql.execute(f"SELECT * FROM spanq.renewlease_{name}(%s, '0')", [[token]])
            assert sql.execute(f"SELECT * FROM spanq.receive_{name}(10)").fetchall() == []
        await client.send("graveyard", "sent here", key="g1")  # recorded no source
        # Two queues name it: the ones with a recorded source go home, the other needs `to`.
        with pytest.raises(spanq.InvalidArgument, match="queues orders, refunds name it"):
            await client.redrive("graveyard")
        assert sql.execute("SELECT count(*) FROM graveyard").fetchone()[0] == 3  # nothing moved
        sql.execute("DELETE FROM graveyard WHERE id = 'g1'")
        final = await client.redrive("graveyard")
        assert (final.moved, final.remaining, final.to) == (2, 0, "orders, refunds")
        assert sql.execute("SELECT id FROM orders").fetchall() == [("o1",)]
        assert sql.execute("SELECT id FROM refunds").fetchall() == [("r1",)]


async def test_migration_0008_gives_existing_queues_the_history(server, stub, sql, database_url):
    await dead_letter_pair(stub)
    # As before migration 0008: no history columns, no counts.
    for table in ("graveyard", "tasks"):
        sql.execute(f"ALTER TABLE {table} DROP COLUMN spanq_last_failure, DROP COLUMN spanq_dead_letter_source, "
                    "DROP COLUMN spanq_dead_letter_attempts, DROP COLUMN spanq_dead_letter_time")
    sql.execute("DROP TABLE spanq.dead_letter_counts")
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 8")

    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [8]

    await send(stub, "tasks", text_message("k", "poison"))
    for _ in range(2):
        [(token,)] = sql.execute("SELECT spanq_lease_token FROM spanq.receive_tasks(10)").fetchall()
        sql.execute("SELECT * FROM spanq.renewlease_tasks(%s, '0')", [[token]])
    assert sql.execute("SELECT * FROM spanq.receive_tasks(10)").fetchall() == []
    assert history(sql, "graveyard") == [("k", "tasks", 2, "nacked", True)]
    assert sql.execute("SELECT queue, total FROM spanq.dead_letter_counts").fetchall() == [("tasks", 1)]
