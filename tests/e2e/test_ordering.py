"""Ordering keys end to end, against real servers and PostgreSQL: one key's messages are
delivered one at a time in the order sent, across streams and servers, while other keys
flow; a nack or a lapsed lease holds the key back, a dead-lettered head lets it go on;
psql's INSERT, DELETE and receive function keep the same rules; bad keys are refused on
every write path with nothing stored; ordering is a queue's setting (enable_message_ordering):
a queue without it refuses a keyed message and has no ordering trigger, UpdateQueue turns it
on and off; existing queues get it, off, by migration."""

import asyncio
import collections
import json
import threading
from datetime import datetime, timedelta, timezone

import grpc
import psycopg
import psycopg.sql
import pytest

import spanq
import spanq.aio
import spanq.sql
from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start
from spanq_server.store import Store

from ..helpers import (
    ack, create_queue, duration, error_of, receive_function_of_an_older_shape, renew, send, text_message, until_sync,
)
from ..spanner.test_spanner_client import database, spanner_env  # noqa: F401  (fixtures)

STRING = queue_pb2.STRING


@pytest.fixture
async def jobs(stub):
    await create_queue(stub, "jobs", key_columns=[queue_pb2.KeyColumn(name="id", type=STRING)],
                       payload_type=STRING, initial_backoff=duration(0), max_backoff=duration(60),
                       enable_message_ordering=True)
    return "jobs"


async def dead_lettering(stub, *, graveyard_ordered: bool) -> None:
    """Queue jobs (ordering on) dead-letters after one attempt into graveyard."""
    await create_queue(stub, "graveyard", key_columns=[queue_pb2.KeyColumn(name="id", type=STRING)],
                       payload_type=STRING, enable_message_ordering=graveyard_ordered)
    await create_queue(stub, "jobs", key_columns=[queue_pb2.KeyColumn(name="id", type=STRING)],
                       payload_type=STRING, initial_backoff=duration(0), max_delivery_attempts=1,
                       dead_letter_queue="graveyard", enable_message_ordering=True)


def keyed(k: str, ordering_key: str = "", **fields) -> queue_pb2.SendMessage:
    return text_message(k, k, ordering_key=ordering_key, **fields)


def receive(sql: psycopg.Connection, n: int = 10, now: datetime | None = None) -> list[tuple[str, str | None]]:
    rows = sql.execute("SELECT id, spanq_ordering_key FROM spanq.receive_jobs(%s, '30s', 'sql', %s)",
                       [n, now]).fetchall()
    return rows


def later(seconds: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=seconds)


async def test_a_key_delivers_one_message_at_a_time_in_order_while_others_flow(stub, sql, jobs):
    await send(stub, "jobs", keyed("a1", "a"), keyed("b1", "b"), keyed("a2", "a"), keyed("free1"))
    await send(stub, "jobs", keyed("a3", "a"), keyed("b2", "b"), keyed("free2"))
    assert sorted(receive(sql)) == [("a1", "a"), ("b1", "b"), ("free1", None), ("free2", None)]
    assert receive(sql) == []  # a2 and b2 wait for a1 and b1
    sql.execute("DELETE FROM jobs WHERE id = 'b1'")  # psql's ack
    assert receive(sql) == [("b2", "b")]
    sql.execute("DELETE FROM jobs WHERE id = 'a1'")
    assert receive(sql) == [("a2", "a")]
    sql.execute("DELETE FROM jobs WHERE id IN ('a2', 'b2')")
    assert receive(sql) == [("a3", "a")]
    sql.execute("DELETE FROM jobs WHERE id = 'a3'")
    assert sql.execute("SELECT count(*) FROM jobs").fetchone() == (2,)  # free1, free2, leased
    assert sql.execute("SELECT count(*) FROM spanq.ordering_keys WHERE queue = 'jobs'").fetchone() == (0,)


async def test_a_nack_or_a_lapsed_lease_holds_the_key_and_the_head_comes_back_first(stub, sql, jobs):
    await send(stub, "jobs", keyed("a1", "a"), keyed("a2", "a"), keyed("b1", "b"))
    leased = {r.key.values[0].string_value: r for r in await _leases(stub, 2)}
    assert sorted(leased) == ["a1", "b1"]
    assert leased["a1"].ordering_key == "a"
    await renew(stub, "jobs", leased["a1"].lease_token, seconds=0)  # a nack: redelivered after backoff 0
    await ack(stub, "jobs", leased["b1"])
    assert receive(sql) == [("a1", "a")]  # the head again, not a2
    # That lease lapses (the function's clock an hour on): the head once more, a2 still held.
    assert receive(sql, now=later(3600)) == [("a1", "a")]
    assert sql.execute("SELECT spanq_delivery_attempt FROM jobs WHERE id = 'a1'").fetchone() == (3,)
    sql.execute("DELETE FROM jobs WHERE id = 'a1'")
    assert receive(sql) == [("a2", "a")]


async def _leases(stub, want: int) -> list[queue_pb2.ReceivedMessage]:
    call = stub.Receive(queue_pb2.ReceiveRequest(queue="jobs", max_batch_size=10, lease_duration=duration(30)))
    got: list[queue_pb2.ReceivedMessage] = []
    async for response in call:
        got.extend(response.messages)
        if len(got) >= want:
            break
    call.cancel()
    return got


async def test_a_dead_lettered_head_lets_its_key_go_on_and_keeps_its_key_there(stub, sql):
    await dead_lettering(stub, graveyard_ordered=True)
    await send(stub, "jobs", keyed("a1", "a"), keyed("a2", "a"), keyed("a3", "a"))
    assert receive(sql) == [("a1", "a")]
    # Its one attempt lapsed: the next receive moves it and leases the key's next message
    # on the receive after (a2 was held while that statement looked).
    assert receive(sql, now=later(3600)) == []
    assert receive(sql, now=later(3600)) == [("a2", "a")]
    assert sql.execute("SELECT id, spanq_ordering_key, spanq_dead_letter_source FROM graveyard").fetchall() == [
        ("a1", "a", "jobs")]
    assert sql.execute("SELECT id, deliver_time = 'infinity' FROM jobs ORDER BY id").fetchall() == [
        ("a2", False), ("a3", True)]


async def test_peek_and_stats_show_held_messages(stub, sql, jobs):
    await send(stub, "jobs", keyed("a1", "a"), keyed("a2", "a", delay=duration(5)), keyed("free"))
    page = await stub.Peek(queue_pb2.PeekRequest(queue="jobs"))
    shown = [(m.key.values[0].string_value, m.ordering_key, queue_pb2.PeekedMessage.State.Name(m.state))
             for m in page.messages]
    assert shown == [("a1", "a", "READY"), ("free", "", "READY"), ("a2", "a", "HELD")]
    held = page.messages[2]
    assert held.deliver_time.ToDatetime(timezone.utc) > datetime.now(timezone.utc)  # as sent: 5 s on
    # Pages resume among held messages too.
    token = (await stub.Peek(queue_pb2.PeekRequest(queue="jobs", page_size=2))).next_page_token
    rest = await stub.Peek(queue_pb2.PeekRequest(queue="jobs", page_size=2, page_token=token))
    assert [m.key.values[0].string_value for m in rest.messages] == ["a2"] and not rest.next_page_token
    stats = await stub.GetQueueStats(queue_pb2.GetQueueStatsRequest(name="jobs"))
    assert (stats.ready, stats.scheduled, stats.held) == (2, 0, 1)


@pytest.mark.parametrize("bad", ["x" * 1025, "\0", "é" * 513])
async def test_bad_ordering_keys_are_refused_and_nothing_is_stored(stub, sql, jobs, bad):
    code, message, _ = await error_of(send(stub, "jobs", keyed("ok", "a"), keyed("bad", bad)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "message 1: ordering_key must be 1 to 1024 bytes" in message
    assert sql.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    await send(stub, "jobs", keyed("max", "x" * 1024))  # the limit itself is fine


@pytest.mark.parametrize("bad", ["", "x" * 1025])
def test_psql_insert_refuses_a_bad_ordering_key(sql, jobs, bad):
    with pytest.raises(psycopg.errors.CheckViolation, match="an ordering key is 1 to 1024 bytes"):
        sql.execute("INSERT INTO jobs (id, payload, spanq_ordering_key) VALUES ('k', 'x', %s)", [bad])
    sql.rollback()
    assert sql.execute("SELECT count(*) FROM jobs").fetchone() == (0,)


async def test_psql_insert_delete_and_receive_keep_the_order_and_the_key_is_fixed(stub, sql, jobs):
    sql.execute("INSERT INTO jobs (id, payload, spanq_ordering_key) VALUES ('p1', 'x', 'k'), ('p2', 'x', 'k')")
    await send(stub, "jobs", keyed("p3", "k"))
    assert sql.execute("SELECT id, spanq_ordering_seq, deliver_time = 'infinity' FROM jobs ORDER BY id").fetchall() == [
        ("p1", 1, False), ("p2", 2, True), ("p3", 3, True)]
    with pytest.raises(psycopg.errors.CheckViolation, match="set when it is sent"):
        sql.execute("UPDATE jobs SET spanq_ordering_key = 'other' WHERE id = 'p2'")
    sql.rollback()
    sql.execute("DELETE FROM jobs WHERE id = 'p2'")  # a held one leaves: nothing moves
    assert receive(sql) == [("p1", "k")]
    sql.execute("DELETE FROM jobs WHERE id = 'p1'")
    assert receive(sql) == [("p3", "k")]


def _second_waits_for_first(sql: psycopg.Connection, first_statement: str, second_statement: str) -> None:
    """Runs ``first_statement`` in a transaction left open, then ``second_statement`` and its commit on
    another connection, which must wait on a lock (seen in pg_stat_activity) until the first commits."""
    first = psycopg.connect(sql.info.dsn)
    second = psycopg.connect(sql.info.dsn)
    try:
        first.execute(first_statement)
        pid = second.info.backend_pid
        worker = threading.Thread(target=lambda: (second.execute(second_statement), second.commit()))
        worker.start()
        with psycopg.connect(sql.info.dsn, autocommit=True) as watcher:  # a fresh view of each poll
            until_sync(lambda: watcher.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity "
                                               "WHERE pid = %s", [pid]).fetchone()[0],
                       "the second statement to wait on a lock")
        assert worker.is_alive()
        first.commit()
        worker.join(10)
        assert not worker.is_alive()
    finally:
        first.close()
        second.close()


def test_one_keys_concurrent_sends_take_turns_in_commit_order(sql, jobs):
    _second_waits_for_first(sql, "INSERT INTO jobs (id, payload, spanq_ordering_key) VALUES ('t1', 'x', 'k')",
                            "INSERT INTO jobs (id, payload, spanq_ordering_key) VALUES ('t2', 'x', 'k')")
    assert sql.execute("SELECT id, spanq_ordering_seq, deliver_time = 'infinity' FROM jobs ORDER BY id").fetchall() == [
        ("t1", 1, False), ("t2", 2, True)]


def test_a_send_racing_the_heads_ack_is_never_stranded(sql, jobs):
    sql.execute("INSERT INTO jobs (id, payload, spanq_ordering_key) VALUES ('h', 'x', 'k')")
    sql.commit()
    # The DELETE's trigger holds the key until it commits: the send then finds the head gone.
    _second_waits_for_first(sql, "DELETE FROM jobs WHERE id = 'h'",
                            "INSERT INTO jobs (id, payload, spanq_ordering_key) VALUES ('n', 'x', 'k')")
    assert receive(sql) == [("n", "k")]  # the new head, not held behind a message that is gone


def test_other_keys_never_wait(sql, jobs):
    holder = psycopg.connect(sql.info.dsn)
    try:
        holder.execute("INSERT INTO jobs (id, payload, spanq_ordering_key) VALUES ('a1', 'x', 'a')")
        sql.execute("SET lock_timeout = '2s'")
        sql.execute("INSERT INTO jobs (id, payload, spanq_ordering_key) VALUES ('b1', 'x', 'b')")  # no wait
        sql.commit()
    finally:
        holder.close()


async def test_migration_0013_gives_existing_queues_ordering_keys_disabled(server, stub, sql, jobs, database_url):
    # As before migration 0013: no columns, triggers, functions, index, setting or key table,
    # and a receive function of the old shape.
    await send(stub, "jobs", keyed("old"))
    sql.execute("DROP TRIGGER spanq_ordering_send ON jobs; DROP TRIGGER spanq_ordering_gone ON jobs; "
                "DROP TRIGGER spanq_ordering_fixed ON jobs")
    sql.execute('DROP FUNCTION spanq."keyed_send_jobs", spanq."keyed_gone_jobs", spanq."keyed_fixed_jobs"')
    sql.execute("DROP INDEX spanq_ok_jobs")
    sql.execute("ALTER TABLE jobs DROP COLUMN spanq_ordering_key, DROP COLUMN spanq_ordering_seq, "
                "DROP COLUMN spanq_held_deliver_time")
    sql.execute("ALTER TABLE spanq.archive_jobs DROP COLUMN spanq_ordering_key")
    sql.execute("DROP TABLE spanq.ordering_keys")
    sql.execute("DROP FUNCTION spanq.ordering_off")
    sql.execute("ALTER TABLE spanq.queues DROP COLUMN enable_message_ordering")
    receive_function_of_an_older_shape(sql, "jobs")
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 13")

    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [13]
    assert triggers(sql, "jobs") == ["spanq_ordering_off"]
    assert sql.execute("SELECT to_regclass('spanq_ok_jobs')").fetchone() == (None,)

    assert sql.execute("SELECT enable_message_ordering FROM spanq.queues WHERE name = 'jobs'").fetchone() == (False,)
    # The server's cached definition still says on: the table's trigger refuses the send.
    code, message, _ = await error_of(send(stub, "jobs", keyed("n0", "k")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "spanq queue update jobs --ordering" in message, message
    await update_ordering(stub, True)
    await send(stub, "jobs", keyed("n1", "k"), keyed("n2", "k"))
    assert sorted(receive(sql)) == [("n1", "k"), ("old", None)]
    sql.execute("DELETE FROM jobs WHERE id = 'n1'")
    assert receive(sql) == [("n2", "k")]
    assert sql.execute("SELECT count(*) FROM spanq.archive_jobs WHERE spanq_ordering_key IS NULL").fetchone() == (0,)


# -- ordering as a queue's setting ------------------------------------------------------

ORDERING_TRIGGERS = ["spanq_ordering_fixed", "spanq_ordering_gone", "spanq_ordering_send"]


def triggers(sql: psycopg.Connection, table: str) -> list[str]:
    """The queue table's ordering triggers (pg_trigger)."""
    return [name for (name,) in sql.execute(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname LIKE 'spanq_ordering%%' "
        "ORDER BY tgname", [f"public.{table}"]).fetchall()]


async def update_ordering(stub, on: bool, name: str = "jobs") -> queue_pb2.Queue:
    request = queue_pb2.UpdateQueueRequest(queue=queue_pb2.Queue(name=name, enable_message_ordering=on))
    request.update_mask.paths.append("enable_message_ordering")
    return await stub.UpdateQueue(request)


@pytest.fixture
async def plain(stub):
    await create_queue(stub, "plain", key_columns=[queue_pb2.KeyColumn(name="id", type=STRING)],
                       payload_type=STRING)
    return "plain"


async def test_a_queue_without_ordering_refuses_a_keyed_send_and_has_no_ordering_trigger(stub, sql, plain):
    assert triggers(sql, "plain") == ["spanq_ordering_off"]
    assert sql.execute("SELECT count(*) FROM pg_proc WHERE proname LIKE 'keyed_%%_plain'").fetchone() == (0,)
    assert not (await stub.GetQueue(queue_pb2.GetQueueRequest(name="plain"))).enable_message_ordering
    code, message, _ = await error_of(send(stub, "plain", keyed("p1"), keyed("p2", "k")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "message 1: queue 'plain' does not have message ordering enabled" in message
    assert "enable_message_ordering" in message and "--ordering" in message
    with pytest.raises(psycopg.errors.CheckViolation) as psql_error:
        sql.execute("INSERT INTO plain (id, payload, spanq_ordering_key) VALUES ('p3', 'x', 'k')")
    assert "spanq queue update plain --ordering" in (psql_error.value.diag.message_hint or "")
    sql.rollback()
    sql.execute("INSERT INTO plain (id, payload) VALUES ('p4', 'x')")
    with pytest.raises(psycopg.errors.CheckViolation):  # nor set by an UPDATE
        sql.execute("UPDATE plain SET spanq_ordering_key = 'k' WHERE id = 'p4'")
    sql.rollback()
    await send(stub, "plain", keyed("p5"))  # unkeyed sends go on
    assert sql.execute("SELECT id, spanq_ordering_key FROM plain ORDER BY id").fetchall() == [
        ("p4", None), ("p5", None)]  # nothing of the refused ones stored


async def test_ordering_is_enabled_and_disabled_by_update_queue(stub, sql, plain):
    updated = await update_ordering(stub, True, "plain")
    assert updated.enable_message_ordering
    assert (await stub.GetQueue(queue_pb2.GetQueueRequest(name="plain"))).enable_message_ordering
    assert [q.enable_message_ordering for q in (await stub.ListQueues(queue_pb2.ListQueuesRequest())).queues
            if q.name == "plain"] == [True]
    assert triggers(sql, "plain") == ORDERING_TRIGGERS
    await send(stub, "plain", keyed("a1", "a"), keyed("a2", "a"))
    assert sql.execute("SELECT id, deliver_time = 'infinity' FROM plain ORDER BY id").fetchall() == [
        ("a1", False), ("a2", True)]
    # Off while a2 is held behind a1: refused, nothing changed.
    code, message, _ = await error_of(update_ordering(stub, False, "plain"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "holds messages" in message
    assert triggers(sql, "plain") == ORDERING_TRIGGERS
    assert (await stub.GetQueue(queue_pb2.GetQueueRequest(name="plain"))).enable_message_ordering
    sql.execute("DELETE FROM plain WHERE id = 'a1'")  # a2 is the head now: nothing held
    sql.commit()
    assert not (await update_ordering(stub, False, "plain")).enable_message_ordering
    assert triggers(sql, "plain") == ["spanq_ordering_off"]
    assert sql.execute("SELECT count(*) FROM spanq.ordering_keys WHERE queue = 'plain'").fetchone() == (0,)
    assert sql.execute("SELECT to_regclass('spanq_ok_plain')").fetchone() == (None,)
    assert (await error_of(send(stub, "plain", keyed("a3", "a"))))[0] == grpc.StatusCode.FAILED_PRECONDITION
    sql.execute("DELETE FROM plain WHERE id = 'a2'")  # a keyed message left behind is a plain one now
    sql.commit()
    assert sql.execute("SELECT count(*) FROM plain").fetchone() == (0,)


async def test_a_dead_letter_queue_without_ordering_takes_the_message_without_its_key(stub, sql):
    await dead_lettering(stub, graveyard_ordered=False)
    await send(stub, "jobs", keyed("a1", "a"), keyed("a2", "a"))
    assert receive(sql) == [("a1", "a")]
    assert receive(sql, now=later(3600)) == []  # a1 moves
    assert receive(sql, now=later(3600)) == [("a2", "a")]
    assert sql.execute("SELECT id, spanq_ordering_key FROM graveyard").fetchall() == [("a1", None)]


async def test_a_redrive_into_a_queue_without_ordering_takes_the_messages_without_their_keys(stub, sql):
    await dead_lettering(stub, graveyard_ordered=True)
    await send(stub, "jobs", keyed("a1", "a"))
    assert receive(sql) == [("a1", "a")]
    assert receive(sql, now=later(3600)) == []  # a1 moves, with its key
    assert sql.execute("SELECT id, spanq_ordering_key FROM graveyard").fetchall() == [("a1", "a")]
    await update_ordering(stub, False)
    done = [p async for p in stub.Redrive(queue_pb2.RedriveRequest(queue="graveyard", to="jobs"))]
    assert done[-1].done and done[-1].moved == 1
    assert sql.execute("SELECT id, spanq_ordering_key FROM jobs").fetchall() == [("a1", None)]


# -- one hot key across streams and servers -------------------------------------------


async def test_every_keys_sequence_is_exact_across_streams_and_two_servers(stub, server_config, jobs):
    hot, others, per_key = 150, 12, 15
    other = await start(server_config)
    try:
        async with grpc.aio.insecure_channel(other.target) as channel:
            stubs = [stub, queue_pb2_grpc.QueueServiceStub(channel)]
            expected = {"hot": hot, **{f"k{i}": per_key for i in range(others)}}
            total = sum(expected.values())
            outstanding: dict[str, str] = {}
            seen: dict[str, list[int]] = collections.defaultdict(list)
            overlaps: list[str] = []
            all_in = asyncio.Event()

            async def consume(s: queue_pb2_grpc.QueueServiceStub) -> None:
                call = s.Receive(queue_pb2.ReceiveRequest(queue="jobs", max_batch_size=5,
                                                          lease_duration=duration(30)))
                async for response in call:
                    for m in response.messages:
                        k = m.ordering_key
                        if k in outstanding:
                            overlaps.append(f"{m.payload.string_value} while {outstanding[k]} was out")
                        outstanding[k] = m.payload.string_value
                        seen[k].append(int(m.payload.string_value.split(":")[1]))
                    for m in response.messages:
                        del outstanding[m.ordering_key]  # before the ack: its commit frees the next
                        await ack(s, "jobs", m)
                    if sum(len(v) for v in seen.values()) >= total:
                        all_in.set()

            async def publish(s: queue_pb2_grpc.QueueServiceStub, k: str, n: int) -> None:
                for start_at in range(0, n, 7):  # several Sends, each of several messages
                    batch = [text_message(f"{k}-{i}", f"{k}:{i}", ordering_key=k) for i in range(start_at, min(n, start_at + 7))]
                    await s.Send(queue_pb2.SendRequest(queue="jobs", messages=batch))

            consumers = [asyncio.create_task(consume(stubs[i % 2])) for i in range(6)]
            # Each key's sends alternate between the two servers, awaited in turn: their order is
            # commit order. Keys are sent concurrently.
            await asyncio.gather(publish(stubs[0], "hot", hot),
                                 *[publish(stubs[i % 2], f"k{i}", per_key) for i in range(others)])
            await asyncio.wait_for(all_in.wait(), 60)
            for task in consumers:
                task.cancel()
            await asyncio.gather(*consumers, return_exceptions=True)
    finally:
        await other.stop(0)
    assert overlaps == []
    assert {k: v for k, v in seen.items()} == {k: list(range(n)) for k, n in expected.items()}


# -- the SDK --------------------------------------------------------------------------


async def test_a_failed_publish_pauses_its_key_until_resumed_while_other_keys_go_on(server, sql, jobs):
    sql.execute("INSERT INTO jobs (id, payload) VALUES ('taken', 'x')")
    sql.commit()
    settings = spanq.BatchSettings(max_latency=30, max_messages=100)  # batches leave when flushed
    async with spanq.aio.Client(server.target, batch_settings=settings) as client:
        first = await client.publish("jobs", "x", key="taken", ordering_key="k")  # AlreadyExists
        queued = await client.publish("jobs", "x", key="k2", ordering_key="k")
        other = await client.publish("jobs", "x", key="j1", ordering_key="j")
        await client.flush()
        with pytest.raises(spanq.AlreadyExists):
            await first
        with pytest.raises(spanq.OrderingKeyPaused, match="resume_publish") as paused:
            await queued
        assert (paused.value.queue, paused.value.ordering_key) == ("jobs", "k")
        assert await other == ("j1",)
        later_one = await client.publish("jobs", "x", key="k3", ordering_key="k")  # published after
        await client.flush()
        with pytest.raises(spanq.OrderingKeyPaused):
            await later_one
        client.resume_publish("jobs", "k")
        resumed = await client.publish("jobs", "x", key="k4", ordering_key="k")
        await client.flush()  # else its batch leaves at max_latency, 30 s on
        assert await resumed == ("k4",)
    assert sql.execute("SELECT id FROM jobs ORDER BY id").fetchall() == [("j1",), ("k4",), ("taken",)]


async def test_the_sync_publisher_keeps_one_keys_order_and_resumes(server, sql, jobs):
    def publish() -> list[spanq.Key]:
        with spanq.Client(server.target, batch_settings=spanq.BatchSettings(max_messages=7)) as client:
            futures = [client.publish("jobs", str(i), key=f"m{i:03}", ordering_key="k") for i in range(40)]
            client.resume_publish("jobs", "not paused")  # a no-op
            return [f.result(10) for f in futures]

    assert await asyncio.to_thread(publish) == [(f"m{i:03}",) for i in range(40)]
    assert [r[0] for r in sql.execute("SELECT id FROM jobs ORDER BY spanq_ordering_seq")] == [
        f"m{i:03}" for i in range(40)]


async def test_send_transaction_sql_and_subscribe_carry_the_key(server, sql, jobs):
    got: list[spanq.Message] = []
    done = asyncio.Event()
    async with spanq.aio.Client(server.target) as client:
        await client.send("jobs", "1", key="s1", ordering_key="k")
        await client.commit(spanq.Transaction().send("jobs", "2", key="s2", ordering_key="k"))
        spanq.sql.send(sql, "jobs", "s3", "3", ordering_key="k")
        sql.commit()
        with pytest.raises(spanq.InvalidArgument, match="ordering_key"):
            await client.send("jobs", "x", key="bad", ordering_key="x" * 1025)
        assert [(m.key, m.state, m.ordering_key) for m in (await client.peek("jobs")).messages] == [
            (("s1",), "READY", "k"), (("s2",), "HELD", "k"), (("s3",), "HELD", "k")]
        assert (await client.stats("jobs")).held == 2

        async def handle(message: spanq.Message) -> None:
            got.append(message)
            if len(got) == 3:
                done.set()

        async with client.subscribe("jobs", handle):
            await asyncio.wait_for(done.wait(), 20)
    assert [(m.key, m.ordering_key) for m in got] == [(("s1",), "k"), (("s2",), "k"), (("s3",), "k")]


async def test_the_cli_sends_with_an_ordering_key_and_shows_it(server, stub, jobs):
    from ..tools.test_cli import spanq_cli

    t = server.target
    for k in ("c1", "c2"):
        code, out, err = await spanq_cli(t, "send", "jobs", "hi", "--key", k, "--ordering-key", "k")
        assert code == 0, err
    code, out, err = await spanq_cli(t, "send", "jobs", "hi", "--key", "c3")
    assert code == 0, err
    code, out, err = await spanq_cli(t, "peek", "jobs")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["KEY", "STATE", "ATTEMPTS", "ORDERING", "KEY"], out
    assert [line.split()[:4] for line in lines[1:]] == [
        ["c1", "READY", "0", "k"], ["c3", "READY", "0", "-"], ["c2", "HELD", "0", "k"]], out
    code, out, err = await spanq_cli(t, "peek", "jobs", "--json")
    assert [(m["key"], m["state"], m["ordering_key"]) for m in json.loads(out)] == [
        (["c1"], "READY", "k"), (["c3"], "READY", None), (["c2"], "HELD", "k")]
    code, out, err = await spanq_cli(t, "stats", "jobs")
    assert code == 0 and out.splitlines()[0].split()[:4] == ["QUEUE", "READY", "SCHEDULED", "HELD"], out
    assert out.splitlines()[1].split()[:4] == ["jobs", "2", "0", "1"], out
    code, out, err = await spanq_cli(t, "tail", "jobs", "--max", "3", "--ack")
    assert code == 0, err
    assert sorted(out.splitlines()) == ["c1\tattempt 1\tacked\tordering key k\thi",
                                        "c2\tattempt 1\tacked\tordering key k\thi", "c3\tattempt 1\tacked\thi"]
    code, out, err = await spanq_cli(t, "send", "jobs", "hi", "--key", "c4", "--ordering-key", "x" * 1025)
    assert code != 0 and "ordering_key must be" in err, err


async def test_the_spanner_front_end_receives_one_keys_messages_in_order(database, stub, sql):
    """A Spanner client cannot set an ordering key (Send mutations have no field for one); set by SQL,
    RECEIVE honours it, and a plain SELECT of the queue shows held messages too."""
    [(table,)] = sql.execute("SELECT name FROM spanq.queues").fetchall()
    sql.commit()
    await update_ordering(stub, True, table)
    sql.execute(psycopg.sql.SQL("INSERT INTO {} (userid, messageid, payload, spanq_ordering_key) "
                                "VALUES (1, 'm1', 'x', 'k'), (2, 'm2', 'x', 'k'), (3, 'm3', 'x', NULL)").format(
        psycopg.sql.Identifier(table)))
    sql.commit()

    def receive() -> list[int]:
        with database.snapshot() as snapshot:
            rows = snapshot.execute_sql("SELECT UserId FROM RECEIVE_UserTasks(max_duration => '500ms', "
                                        "max_batch_size => 10)")
            return sorted(row[0] for row in rows)

    def select() -> list[int]:
        with database.snapshot() as snapshot:
            return sorted(row[0] for row in snapshot.execute_sql("SELECT UserId FROM UserTasks"))

    assert await asyncio.to_thread(receive) == [1, 3]
    assert await asyncio.to_thread(select) == [1, 2, 3]
    sql.execute(psycopg.sql.SQL("DELETE FROM {} WHERE userid = 1").format(psycopg.sql.Identifier(table)))
    sql.commit()
    assert await asyncio.to_thread(receive) == [2]


async def test_the_cli_creates_updates_and_lists_the_ordering_setting(server, sql):
    from ..tools.test_cli import spanq_cli

    t = server.target
    code, out, err = await spanq_cli(t, "queue", "create", "ord", "--ordering")
    assert code == 0, err
    code, out, err = await spanq_cli(t, "queue", "create", "unord")
    assert code == 0, err
    code, out, err = await spanq_cli(t, "queues")
    assert code == 0, err
    header, *rows = out.splitlines()
    at = header.split().index("ORDERING") - 1  # "DEAD LETTERS" is two words; these queues have none
    assert {row.split()[0]: row.split()[at] for row in rows} == {"ord": "on", "unord": "-"}, out
    code, out, err = await spanq_cli(t, "send", "unord", "hi", "--ordering-key", "k")
    assert code != 0 and "spanq queue update unord --ordering" in err, err
    code, out, err = await spanq_cli(t, "queue", "update", "unord", "--ordering", "--json")
    assert code == 0 and json.loads(out)["enable_message_ordering"] is True, err
    assert triggers(sql, "unord") == ORDERING_TRIGGERS
    code, out, err = await spanq_cli(t, "queue", "update", "ord", "--no-ordering", "--json")
    assert code == 0 and json.loads(out)["enable_message_ordering"] is False, err
    assert triggers(sql, "ord") == ["spanq_ordering_off"]


async def test_the_sdk_creates_and_updates_the_ordering_setting_sync_and_aio(server):
    async with spanq.aio.Client(server.target) as client:
        assert (await client.create_queue("ord", enable_message_ordering=True)).enable_message_ordering
        created = await client.create_queue("unord")
        assert not created.enable_message_ordering
        with pytest.raises(spanq.FailedPrecondition, match="update_queue"):
            await client.send("unord", b"x", ordering_key="k")
        assert (await client.update_queue("unord", enable_message_ordering=True)).enable_message_ordering
        await client.send("unord", b"x", ordering_key="k")

    def sync() -> None:
        with spanq.Client(server.target) as client:
            assert not client.update_queue("ord", enable_message_ordering=False).enable_message_ordering
            assert {q.name: q.enable_message_ordering for q in client.list_queues()} == {"ord": False, "unord": True}
            with pytest.raises(spanq.FailedPrecondition):
                client.send("ord", b"x", ordering_key="k")

    await asyncio.to_thread(sync)
