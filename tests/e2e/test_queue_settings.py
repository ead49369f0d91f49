"""A live queue's settings over a real socket and PostgreSQL: UpdateQueue (lease, backoff,
dead-lettering, with CreateQueue's checks and nothing changed on bad input) and the durable
pauses of send and delivery (disable_send, disable_delivery) on both the gRPC and the SQL
surface, and migration 0011 from the schema before it."""

import json
from datetime import timedelta

import grpc
import pytest
from google.protobuf import field_mask_pb2

from spanq_proto.v1 import queue_pb2
from spanq_server.store import Store

from ..helpers import (
    create_queue, duration, error_of, key, open_stream, plain, renew, send, streams_idle, text_message, value,
)


async def update(stub, name: str, *paths: str, **fields) -> queue_pb2.Queue:
    return await stub.UpdateQueue(queue_pb2.UpdateQueueRequest(
        queue=queue_pb2.Queue(name=name, **fields), update_mask=field_mask_pb2.FieldMask(paths=list(paths))))


def rows(sql, queue: str) -> list[tuple]:
    return sql.execute(f"SELECT id, payload, spanq_delivery_attempt FROM {queue} ORDER BY id").fetchall()


async def test_update_queue_changes_the_settings_named_and_only_those(stub, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, lease_duration=duration(10))
    await create_queue(stub, "graveyard", payload_type=queue_pb2.STRING)
    updated = await update(stub, "tasks", "lease_duration", "max_delivery_attempts", "dead_letter_queue",
                           lease_duration=duration(45), max_delivery_attempts=3, dead_letter_queue="graveyard",
                           max_backoff=duration(7))  # not in the mask: left alone
    assert updated.lease_duration.ToTimedelta() == timedelta(seconds=45)
    assert (updated.max_delivery_attempts, updated.dead_letter_queue) == (3, "graveyard")
    assert updated.max_backoff.ToTimedelta() == timedelta(hours=1)
    assert await stub.GetQueue(queue_pb2.GetQueueRequest(name="tasks")) == updated
    # psql's receive function grants the new default lease at once.
    await send(stub, "tasks", text_message("k", "one"))
    [(lease,)] = sql.execute("SELECT r.spanq_lease_expiration_timestamp - statement_timestamp() "
                             "FROM spanq.receive_tasks() AS r").fetchall()
    assert lease == timedelta(seconds=45)
    # Removing the dead-letter pair (both, as they go together) and a default back.
    cleared = await update(stub, "tasks", "max_delivery_attempts", "dead_letter_queue", "lease_duration")
    assert (cleared.max_delivery_attempts, cleared.dead_letter_queue) == (0, "")
    assert cleared.lease_duration.ToTimedelta() == timedelta(seconds=10)
    # The dead-letter queue is free again: it can be dropped.
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="graveyard"))


async def test_a_dead_letter_queue_named_later_takes_the_next_failed_message(stub, sql, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await create_queue(stub, "graveyard", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("k", "poison"))
    async with open_stream(stub, "tasks") as stream:
        first = await stream.next()
        await update(stub, "tasks", "max_delivery_attempts", "dead_letter_queue", max_delivery_attempts=1,
                     dead_letter_queue="graveyard")
        await renew(stub, "tasks", first.lease_token, seconds=0)  # a nack: due again at once
        await stream.quiet()
    # The open stream's next lease ran the new function: past 1 attempt it moved.
    assert rows(sql, "tasks") == []
    assert rows(sql, "graveyard") == [("k", "poison", 0)]


@pytest.mark.parametrize("paths, fields, code, words", [
    ((), {}, grpc.StatusCode.INVALID_ARGUMENT, "update_mask names no field"),
    (("key_columns",), {"key_columns": [queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64)]},
     grpc.StatusCode.INVALID_ARGUMENT, "key_columns cannot change"),
    (("payload_type",), {"payload_type": queue_pb2.JSON}, grpc.StatusCode.INVALID_ARGUMENT,
     "payload_type cannot change"),
    (("parent_table",), {"parent_table": "shops"}, grpc.StatusCode.INVALID_ARGUMENT, "parent_table cannot change"),
    (("colour",), {}, grpc.StatusCode.INVALID_ARGUMENT, "not a setting of a queue"),
    (("lease_duration",), {"lease_duration": duration(0.5)}, grpc.StatusCode.INVALID_ARGUMENT,
     "lease_duration must be between 1s and 12h"),
    (("initial_backoff",), {"initial_backoff": duration(7200)}, grpc.StatusCode.INVALID_ARGUMENT,
     "initial_backoff <= max_backoff"),
    (("max_delivery_attempts",), {"max_delivery_attempts": 3}, grpc.StatusCode.INVALID_ARGUMENT, "go together"),
    (("max_delivery_attempts", "dead_letter_queue"), {"max_delivery_attempts": 3, "dead_letter_queue": "nowhere"},
     grpc.StatusCode.INVALID_ARGUMENT, "'nowhere' does not exist"),
    (("max_delivery_attempts", "dead_letter_queue"), {"max_delivery_attempts": 3, "dead_letter_queue": "numbers"},
     grpc.StatusCode.INVALID_ARGUMENT, "same key columns and payload type"),
    (("max_delivery_attempts", "dead_letter_queue"), {"max_delivery_attempts": 3, "dead_letter_queue": "tasks"},
     grpc.StatusCode.INVALID_ARGUMENT, "its own dead-letter queue"),
    (("max_delivery_attempts", "dead_letter_queue"), {"max_delivery_attempts": 5000, "dead_letter_queue": "spare"},
     grpc.StatusCode.INVALID_ARGUMENT, "max_delivery_attempts must be between 1 and 1000"),
    (("message_retention_duration",), {"message_retention_duration": duration(0.5)},
     grpc.StatusCode.INVALID_ARGUMENT, "message_retention_duration must be between 1s and 8784h"),
    (("message_retention_duration",), {"message_retention_duration": duration(400 * 86400)},
     grpc.StatusCode.INVALID_ARGUMENT, "message_retention_duration must be at most 8784h"),
    (("archive_duration",), {"archive_duration": duration(0.5)},
     grpc.StatusCode.INVALID_ARGUMENT, "archive_duration must be between 1s and 8784h"),
])
async def test_bad_updates_are_refused_and_change_nothing(stub, sql, paths, fields, code, words):
    before = await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, lease_duration=duration(20))
    await create_queue(stub, "spare", payload_type=queue_pb2.STRING)
    await create_queue(stub, "numbers", payload_type=queue_pb2.STRING,
                       key_columns=[queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64)])
    function = sql.execute("SELECT prosrc FROM pg_proc WHERE proname = 'receive_tasks'").fetchone()
    got, message, _ = await error_of(update(stub, "tasks", *paths, **fields))
    assert (got, words in message) == (code, True), message
    assert await stub.GetQueue(queue_pb2.GetQueueRequest(name="tasks")) == before
    assert sql.execute("SELECT prosrc FROM pg_proc WHERE proname = 'receive_tasks'").fetchone() == function


async def test_update_of_a_missing_queue_is_not_found(stub):
    got, message, _ = await error_of(update(stub, "ghost", "lease_duration", lease_duration=duration(5)))
    assert got == grpc.StatusCode.NOT_FOUND and "'ghost' does not exist" in message


# -- pause and resume ------------------------------------------------------------------------------


async def test_paused_sends_are_refused_and_nothing_is_stored(stub, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("a", "before"))
    paused = await update(stub, "tasks", "disable_send", disable_send=True)
    assert (paused.disable_send, paused.disable_delivery) == (True, False)
    got, message, info = await error_of(send(stub, "tasks", text_message("b", "during")))
    assert got == grpc.StatusCode.FAILED_PRECONDITION and "sending disabled" in message
    assert info.get("queue") == "tasks"
    commit = queue_pb2.CommitRequest(mutations=[queue_pb2.Mutation(send=queue_pb2.SendRequest(
        queue="tasks", messages=[text_message("c", "in a commit")]))])
    got, _, _ = await error_of(stub.Commit(commit))
    assert got == grpc.StatusCode.FAILED_PRECONDITION
    assert rows(sql, "tasks") == [("a", "before", 0)]
    # Receiving and acking go on while sends are paused.
    [(token,)] = sql.execute("SELECT spanq_lease_token FROM spanq.receive_tasks()").fetchall()
    await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[queue_pb2.AckMessage(key=key("a"),
                                                                                 lease_token=token)]))
    await update(stub, "tasks", "disable_send", disable_send=False)
    await send(stub, "tasks", text_message("b", "after"))
    assert rows(sql, "tasks") == [("b", "after", 0)]


async def test_paused_delivery_keeps_streams_open_and_held_leases_settle(stub, sql, waiting):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, lease_duration=duration(30))
    await send(stub, "tasks", text_message("held", "leased before the pause"),
               text_message("renewed", "leased before the pause"))
    async with open_stream(stub, "tasks", max_batch_size=2) as stream:
        held, other = await stream.take(2)
        paused = await update(stub, "tasks", "disable_delivery", disable_delivery=True)
        assert paused.disable_delivery
        waiting.clear()
        await send(stub, "tasks", text_message("new", "sent while paused"))  # sends are still taken
        await streams_idle(waiting, "tasks")  # woken by the send, it leased nothing and waits again
        assert stream.pending() == 0 and not stream.task.done()
        # psql's receive function leases nothing either; the stored message is ready.
        assert sql.execute("SELECT * FROM spanq.receive_tasks(10)").fetchall() == []
        assert sql.execute("SELECT spanq_lease_token IS NULL FROM tasks WHERE id = 'new'").fetchone() == (True,)
        # Leases held from before the pause renew and ack.
        [r] = (await renew(stub, "tasks", other.lease_token, seconds=60)).leases
        assert r.new_lease_token
        acked = await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
            queue_pb2.AckMessage(key=held.key, lease_token=held.lease_token),
            queue_pb2.AckMessage(key=other.key, lease_token=r.new_lease_token)]))
        assert [a.acked for a in acked.results] == [True, True]
        # Resumed: the open stream delivers at once (woken, not at its next poll).
        await update(stub, "tasks", "disable_delivery", disable_delivery=False)
        resumed = await stream.next()
        assert (plain(resumed.key), resumed.payload) == (["new"], value("sent while paused"))


async def test_another_server_sees_an_update_within_the_cache_bound(server_config, clock, stub, sql, waiting):
    """Delivery pauses at the update's commit everywhere (the receive function holds it) and
    resumes promptly (the notification wakes the other server's streams); the send pause
    reaches the other server when its cached definition is read again (queues.CACHE_SECONDS)."""
    from spanq_proto.v1 import queue_pb2_grpc
    from spanq_server.server import start

    from ..helpers import until

    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    other_server = await start(server_config, clock=clock)
    try:
        async with grpc.aio.insecure_channel(other_server.target) as channel:
            other = queue_pb2_grpc.QueueServiceStub(channel)
            await send(other, "tasks", text_message("a", "sent through the other server"))  # caches the queue there
            async with open_stream(other, "tasks") as stream:
                assert plain((await stream.next()).key) == ["a"]
                await update(stub, "tasks", "disable_delivery", "disable_send", disable_delivery=True,
                             disable_send=True)
                waiting.clear()
                sql.execute("INSERT INTO tasks (id, payload) VALUES ('b', 'by SQL')")  # notifies the other server
                await streams_idle(waiting, "tasks")
                assert stream.pending() == 0
                await update(stub, "tasks", "disable_delivery", disable_delivery=False)
                assert plain((await stream.next()).key) == ["b"]

            async def refused() -> bool:
                try:
                    await send(other, "tasks", text_message("c", "maybe"))
                except grpc.aio.AioRpcError as exc:
                    return exc.code() == grpc.StatusCode.FAILED_PRECONDITION
                return False

            await until(refused, "the other server refusing sends", timeout=10)
    finally:
        await other_server.stop(0)


async def test_paused_delivery_survives_a_restart(server_config, clock, stub, sql):
    from spanq_server.server import start

    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await update(stub, "tasks", "disable_delivery", "disable_send", disable_delivery=True, disable_send=True)
    again = await start(server_config, clock=clock)
    try:
        async with grpc.aio.insecure_channel(again.target) as channel:
            from spanq_proto.v1 import queue_pb2_grpc
            other = queue_pb2_grpc.QueueServiceStub(channel)
            got = await other.GetQueue(queue_pb2.GetQueueRequest(name="tasks"))
            assert (got.disable_send, got.disable_delivery) == (True, True)
            code, _, _ = await error_of(send(other, "tasks", text_message("a", "x")))
            assert code == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        await again.stop(0)
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('b', 'by SQL')")
    assert sql.execute("SELECT * FROM spanq.receive_tasks(10)").fetchall() == []


async def test_migration_0011_leaves_existing_queues_unpaused_and_kept(stub, sql, database_url):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("a", "kept"))
    # The catalog as before migration 0011.
    sql.execute("ALTER TABLE spanq.queues DROP COLUMN disable_send, DROP COLUMN disable_delivery, "
                "DROP COLUMN message_retention, DROP COLUMN archive_duration")
    sql.execute("DROP TABLE spanq.archive_tasks")
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 11")
    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [11]
        queue = await store.queue_get("tasks")
        assert queue is not None and (queue.disable_send, queue.disable_delivery) == (False, False)
        assert (queue.message_retention_duration, queue.archive_duration) == (None, None)
    # The store made the queue its archive, empty.
    assert sql.execute("SELECT count(*) FROM spanq.archive_tasks").fetchone() == (0,)
    assert [row[0] for row in sql.execute("SELECT id FROM spanq.receive_tasks(10)").fetchall()] == ["a"]


# -- message retention (Spanner's ROW DELETION POLICY) ----------------------------------------------


async def test_messages_past_the_retention_are_deleted_leased_or_not_and_counted(server, stub, sql, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    got = await update(stub, "tasks", "message_retention_duration", message_retention_duration=duration(60))
    assert got.message_retention_duration.ToTimedelta() == timedelta(seconds=60)
    await send(stub, "tasks", text_message("a", "old, leased"), text_message("b", "old"))
    [(token,)] = sql.execute("SELECT spanq_lease_token FROM spanq.receive_tasks()").fetchall()
    clock.advance(timedelta(seconds=61))
    await send(stub, "tasks", text_message("c", "new"))
    assert await server.expiry.expire() == (2, 0)
    assert rows(sql, "tasks") == [("c", "new", 0)]
    assert server.metrics.registry.get_sample_value("spanq_queue_messages_expired_total", {"queue": "tasks"}) == 2
    # The holder of a deleted message's lease learns it is gone.
    code, _, _ = await error_of(stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
        queue_pb2.AckMessage(key=key("a"), lease_token=token)])))
    assert code == grpc.StatusCode.OUT_OF_RANGE
    # Without a retention nothing expires.
    cleared = await update(stub, "tasks", "message_retention_duration")
    assert not cleared.HasField("message_retention_duration")
    clock.advance(timedelta(days=30))
    assert await server.expiry.expire() == (0, 0)
    assert rows(sql, "tasks") == [("c", "new", 0)]


# -- the archive of acked messages ----------------------------------------------------------------


def archive(sql, queue: str) -> list[tuple]:
    return sql.execute(f"SELECT id, payload, spanq_delivery_attempt, spanq_ack_request_id FROM spanq.archive_{queue} "
                       "ORDER BY spanq_ack_time, id").fetchall()


async def test_acks_keep_messages_in_the_archive_with_when_and_by_which_request(server, stub, sql, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await update(stub, "tasks", "archive_duration", archive_duration=duration(3600))
    await send(stub, "tasks", *(text_message(k, f"job {k}") for k in ("a", "b", "c", "d")))
    async with open_stream(stub, "tasks", max_batch_size=4) as stream:
        got = {plain(m.key)[0]: m for m in await stream.take(4)}
    # A unary Ack (a commit group), a Commit, an Ack run alone (ignore_not_found, one key gone), and SQL.
    await stub.Ack(queue_pb2.AckRequest(queue="tasks", request_id="req-a", acks=[
        queue_pb2.AckMessage(key=got["a"].key, lease_token=got["a"].lease_token)]))
    clock.advance(timedelta(seconds=10))
    await stub.Commit(queue_pb2.CommitRequest(request_id="req-b", mutations=[queue_pb2.Mutation(
        ack=queue_pb2.AckRequest(queue="tasks", acks=[queue_pb2.AckMessage(key=got["b"].key)]))]))
    clock.advance(timedelta(seconds=10))
    acked = await stub.Ack(queue_pb2.AckRequest(queue="tasks", request_id="req-c", ignore_not_found=True, acks=[
        queue_pb2.AckMessage(key=got["c"].key), queue_pb2.AckMessage(key=key("gone"))]))
    assert [r.acked for r in acked.results] == [True, False]
    assert archive(sql, "tasks") == [("a", "job a", 1, "req-a"), ("b", "job b", 1, "req-b"),
                                     ("c", "job c", 1, "req-c")]
    assert rows(sql, "tasks") == [("d", "job d", 1)]
    # Peek browses it in ack order, a page at a time.
    first = await stub.Peek(queue_pb2.PeekRequest(queue="tasks", archived=True, page_size=2))
    assert [(plain(m.key), m.state, m.ack_request_id) for m in first.messages] == [
        (["a"], queue_pb2.PeekedMessage.ACKED, "req-a"), (["b"], queue_pb2.PeekedMessage.ACKED, "req-b")]
    assert first.messages[1].ack_time.ToDatetime() > first.messages[0].ack_time.ToDatetime()
    rest = await stub.Peek(queue_pb2.PeekRequest(queue="tasks", archived=True, page_token=first.next_page_token))
    assert [plain(m.key) for m in rest.messages] == [["c"]] and not rest.next_page_token
    # Pruned once past the archive_duration (c, acked 10 s after b, is not yet); all that is
    # left once archiving stops.
    clock.advance(timedelta(seconds=3595))
    assert await server.expiry.expire() == (0, 2)
    assert archive(sql, "tasks") == [("c", "job c", 1, "req-c")]
    await update(stub, "tasks", "archive_duration")
    await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[queue_pb2.AckMessage(key=got["d"].key)]))
    assert rows(sql, "tasks") == [] and len(archive(sql, "tasks")) == 1  # deleted, not archived
    assert await server.expiry.expire() == (0, 1)
    assert archive(sql, "tasks") == []
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="tasks"))
    assert sql.execute("SELECT to_regclass('spanq.archive_tasks')").fetchone() == (None,)


# -- the SDK and the command line ------------------------------------------------------------------


async def test_sdk_update_queue_sync_and_aio(server):
    import spanq
    import spanq.aio

    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("tasks", payload_type="STRING")
        await client.create_queue("graveyard", payload_type="STRING")
        got = await client.update_queue("tasks", lease_duration=30, max_delivery_attempts=2,
                                        dead_letter_queue="graveyard", disable_delivery=True)
        assert (got.lease_duration, got.max_delivery_attempts, got.dead_letter_queue) == (
            timedelta(seconds=30), 2, "graveyard")
        assert (got.disable_send, got.disable_delivery) == (False, True)
        assert (await client.stats("tasks")).disable_delivery
        with pytest.raises(spanq.InvalidArgument, match="go together"):
            await client.update_queue("tasks", dead_letter_queue=None)
        assert (await client.get_queue("tasks")).dead_letter_queue == "graveyard"

    def blocking() -> spanq.Queue:
        with spanq.Client(server.target) as sync_client:
            sync_client.update_queue("tasks", disable_send=True)
            with pytest.raises(spanq.FailedPrecondition, match="sending disabled"):
                sync_client.send("tasks", "refused", key="k")
            return sync_client.update_queue("tasks", disable_send=False, disable_delivery=False,
                                            max_delivery_attempts=None, dead_letter_queue=None)

    import asyncio
    back = await asyncio.to_thread(blocking)
    assert (back.disable_send, back.disable_delivery, back.dead_letter_queue) == (False, False, None)


async def test_sdk_create_queue_takes_every_setting_sync_and_aio(server, sql):
    import spanq
    import spanq.aio

    def stored(name: str) -> tuple:
        return sql.execute("SELECT disable_send, disable_delivery, message_retention, archive_duration, "
                           "max_delivery_attempts, dead_letter_queue FROM spanq.queues WHERE name = %s",
                           [name]).fetchone()

    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("graveyard", payload_type="STRING")
        got = await client.create_queue("tasks", payload_type="STRING", disable_send=True, disable_delivery=True,
                                        message_retention_duration=7200, archive_duration=timedelta(hours=1),
                                        max_delivery_attempts=3, dead_letter_queue="graveyard", initial_backoff=0)
        assert (got.disable_send, got.disable_delivery, got.message_retention_duration, got.archive_duration) == (
            True, True, timedelta(hours=2), timedelta(hours=1))
        assert got.initial_backoff == timedelta(0)
        # exist_ok compares the retentions too (not the pauses: an operator may have lifted them since).
        same = await client.create_queue("tasks", payload_type="STRING", archive_duration=3600, exist_ok=True)
        assert same == got
        with pytest.raises(spanq.AlreadyExists, match="archive_duration"):
            await client.create_queue("tasks", payload_type="STRING", archive_duration=60, exist_ok=True)
        with pytest.raises(spanq.InvalidArgument, match="archive_duration must be between"):
            await client.create_queue("bad", archive_duration=0.5)
    assert stored("tasks") == (True, True, timedelta(hours=2), timedelta(hours=1), 3, "graveyard")
    assert stored("bad") is None

    def blocking() -> spanq.Queue:
        with spanq.Client(server.target) as sync_client:
            return sync_client.create_queue("paused", disable_delivery=True, message_retention_duration=60)

    import asyncio
    made = await asyncio.to_thread(blocking)
    assert (made.disable_send, made.disable_delivery, made.message_retention_duration) == (
        False, True, timedelta(minutes=1))
    assert stored("paused") == (False, True, timedelta(minutes=1), None, None, None)


async def test_cli_queue_create_takes_every_setting(server, sql):
    from ..tools.test_cli import one_line, spanq_cli

    t = server.target
    code, out, err = await spanq_cli(t, "queue", "create", "tasks", "--payload-type", "string", "--archive", "3600",
                                     "--message-retention", "7200", "--disable-send", "--disable-delivery", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["archive_duration"], shown["message_retention_duration"], shown["disable_send"],
            shown["disable_delivery"]) == (3600.0, 7200.0, True, True)
    assert sql.execute("SELECT disable_send, disable_delivery, message_retention, archive_duration FROM spanq.queues "
                       "WHERE name = 'tasks'").fetchone() == (True, True, timedelta(hours=2), timedelta(hours=1))
    code, out, err = await spanq_cli(t, "queue", "create", "plain", "--archive", "0", "--json")
    assert code == 0 and json.loads(out)["archive_duration"] is None, err
    code, _, err = await spanq_cli(t, "queue", "create", "bad", "--archive", "0.5")
    assert code == 2 and "archive_duration must be between" in one_line(err)
    assert sql.execute("SELECT count(*) FROM spanq.queues WHERE name = 'bad'").fetchone() == (0,)


async def test_cli_queue_update_pause_and_resume(server):
    from ..tools.test_cli import one_line, spanq_cli

    t = server.target
    code, _, err = await spanq_cli(t, "queue", "create", "tasks", "--payload-type", "string")
    assert code == 0, err
    code, out, err = await spanq_cli(t, "queue", "update", "tasks", "--lease-duration", "45",
                                     "--max-backoff", "60", "--message-retention", "3600", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["lease_duration"], shown["max_backoff"], shown["message_retention_duration"]) == (45.0, 60.0, 3600.0)
    code, out, err = await spanq_cli(t, "queue", "update", "tasks", "--message-retention", "0", "--json")
    assert code == 0 and json.loads(out)["message_retention_duration"] is None, err
    code, out, err = await spanq_cli(t, "queue", "update", "tasks", "--archive", "60", "--json")
    assert code == 0 and json.loads(out)["archive_duration"] == 60.0, err
    code, _, err = await spanq_cli(t, "send", "tasks", "kept", "--key", "k")
    code, _, err = await spanq_cli(t, "receive", "tasks", "--ack")
    assert code == 0, err
    code, out, err = await spanq_cli(t, "peek", "tasks", "--archived")
    assert code == 0 and out.split("\n")[0].split()[:4] == ["KEY", "ACKED", "BY", "REQUEST"], out
    assert out.split("\n")[1].split()[0] == "k" and "kept" in out
    code, _, err = await spanq_cli(t, "queue", "update", "tasks")
    assert code == 2 and "at least one setting" in one_line(err)
    code, _, err = await spanq_cli(t, "queue", "update", "tasks", "--max-delivery-attempts", "3")
    assert code == 2 and "go together" in one_line(err)
    code, _, err = await spanq_cli(t, "queue", "update", "ghost", "--lease-duration", "5")
    assert code == 3
    code, out, err = await spanq_cli(t, "queue", "pause", "tasks", "--send")
    assert code == 0 and out.split("\n")[1].split()[-2] == "send", out
    code, _, err = await spanq_cli(t, "send", "tasks", "x", "--key", "a")
    assert code == 7 and "sending disabled" in one_line(err)
    code, out, _ = await spanq_cli(t, "queue", "pause", "tasks")  # both
    assert code == 0 and "send, delivery" in out
    code, out, _ = await spanq_cli(t, "stats", "tasks")
    assert code == 0 and out.split("\n")[1].split()[-2:] == ["send,", "delivery"]
    code, out, _ = await spanq_cli(t, "queue", "resume", "tasks", "--send", "--json")
    assert code == 0 and (json.loads(out)["disable_send"], json.loads(out)["disable_delivery"]) == (False, True)
    code, out, _ = await spanq_cli(t, "queue", "resume", "tasks")
    assert code == 0 and out.split("\n")[1].split()[-2] == "-"


# -- the dashboard ---------------------------------------------------------------------------------

from ..tools.test_dashboard import LIVE, browser, chromium, http_post, open_page, ui  # noqa: E402,F401  (fixtures)


@pytest.mark.asyncio(loop_scope="module")  # the loop of the browser (test_dashboard's chromium, one per module)
async def test_dashboard_pauses_and_resumes_from_the_queue_page(ui, browser):
    from playwright.async_api import expect

    import spanq.aio

    async with spanq.aio.Client(ui.target) as client:
        await client.create_queue("work", key_columns=[("id", "INT64")], payload_type="STRING")
        page = await open_page(browser, ui.ui_port, "#/queue/work")
        await expect(page.locator("#paused")).to_have_text("no", timeout=LIVE)
        await page.click("#pause-delivery")
        await expect(page.locator("#paused")).to_have_text("delivery", timeout=LIVE)
        assert (await client.get_queue("work")).disable_delivery
        await page.click("#pause-send")
        await expect(page.locator("#paused")).to_have_text("send, delivery", timeout=LIVE)
        await page.click("#resume-delivery")
        await expect(page.locator("#paused")).to_have_text("send", timeout=LIVE)
        got = await client.get_queue("work")
        assert (got.disable_send, got.disable_delivery) == (True, False)
    host = f"127.0.0.1:{ui.ui_port}"
    # Another site's page cannot pause (JSON from this origin only); bad bodies change nothing.
    assert (await http_post(host, "/api/queues/work/pause", "text/plain", "", '{"disable_send": false}'))[0] == 400
    foreign = await http_post(host, "/api/queues/work/pause", "application/json", "http://evil.example",
                              '{"disable_send": false}')
    assert foreign[0] == 403
    for body in ('{}', '{"disable_send": "no"}', '{"disable_send": false, "colour": 1}'):
        status, answer = await http_post(host, "/api/queues/work/pause", "application/json", f"http://{host}", body)
        assert status == 400 and "disable_send" in answer, (body, answer)
    async with spanq.aio.Client(ui.target) as client:
        assert (await client.get_queue("work")).disable_send
