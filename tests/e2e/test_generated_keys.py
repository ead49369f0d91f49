"""A queue with a generated key column (made by the Spanner front-end's CREATE QUEUE ...
AS (expr) STORED) through spanq.v1's whole life cycle, against a real server and PostgreSQL:
ordering keys, Peek, a dead letter, its redrive and a replay of the archive each move the whole
key once the message exists, and every re-send (redrive, replay) lets the database compute the
generated column again rather than write it."""

from datetime import timedelta

from google.protobuf import field_mask_pb2

import farmhash  # type: ignore[import-untyped]
from spanq_proto.v1 import queue_pb2

from ..helpers import ack, duration, key, open_stream, plain, send, spanner_ddl, until, value

SHARDED = ("CREATE QUEUE {name} (Shard INT64 AS (MOD(ABS(FARM_FINGERPRINT(Id)), 8)) STORED, Id STRING(MAX) NOT NULL, "
           "Payload STRING(MAX) NOT NULL) PRIMARY KEY (Shard, Id)")


def shard(message_id: str) -> int:
    unsigned = farmhash.fingerprint64(message_id)
    return abs(unsigned - 2**64 if unsigned >= 2**63 else unsigned) % 8


def whole(message_id: str) -> list[object]:
    """A message's key as spanq.v1 returns it (INT64 as a decimal string)."""
    return [str(shard(message_id)), message_id]


async def test_dead_letters_redrive_replay_ordering_and_peek_move_the_whole_key(server, stub, channel, clock, sql):
    done = await spanner_ddl(channel, SHARDED.format(name="Tasks"), SHARDED.format(name="Graveyard"))
    assert not done.HasField("error"), done.error
    await stub.UpdateQueue(queue_pb2.UpdateQueueRequest(
        queue=queue_pb2.Queue(name="tasks", max_delivery_attempts=1, dead_letter_queue="graveyard",
                              initial_backoff=duration(0), archive_duration=duration(86400),
                              enable_message_ordering=True),
        update_mask=field_mask_pb2.FieldMask(paths=["max_delivery_attempts", "dead_letter_queue", "initial_backoff",
                                                    "archive_duration", "enable_message_ordering"])))
    sent = await send(stub, "tasks",
                      queue_pb2.SendMessage(key=key("a"), payload=value("first"), ordering_key="o"),
                      queue_pb2.SendMessage(key=key("b"), payload=value("second"), ordering_key="o"),
                      queue_pb2.SendMessage(key=key("c"), payload=value("alone")))
    assert [plain(k) for k in sent.keys] == [whole("a"), whole("b"), whole("c")]
    peeked = (await stub.Peek(queue_pb2.PeekRequest(queue="tasks"))).messages
    assert sorted(plain(m.key)[1] for m in peeked) == ["a", "b", "c"]
    assert all(plain(m.key) == whole(plain(m.key)[1]) for m in peeked)

    async with open_stream(stub, "tasks", lease_duration=duration(30)) as s:
        first = [await s.next(), await s.next()]  # "a" (the head of "o") and "c"; "b" waits behind "a"
        by_id = {plain(m.key)[1]: m for m in first}
        assert sorted(by_id) == ["a", "c"] and plain(by_id["a"].key) == whole("a")
        await s.quiet()
        await ack(stub, "tasks", by_id["c"])  # archived, whole key
        # A nack at the last attempt: the next lease dead-letters "a" and "b" (its key's next) comes.
        await stub.RenewLease(queue_pb2.RenewLeaseRequest(queue="tasks", lease_tokens=[by_id["a"].lease_token],
                                                          lease_duration=duration(0), reason="poison"))
        second = await s.next()
        assert plain(second.key) == whole("b")
        await ack(stub, "tasks", second)
    dead = (await stub.Peek(queue_pb2.PeekRequest(queue="graveyard"))).messages
    assert [(plain(m.key), m.dead_letter.source_queue, m.dead_letter.last_failure) for m in dead] == [
        (whole("a"), "tasks", "poison")]
    assert sql.execute("SELECT shard, id FROM graveyard").fetchall() == [(shard("a"), "a")]

    # Redrive and replay send messages again: the database computes the shard again, alike.
    async for _ in stub.Redrive(queue_pb2.RedriveRequest(queue="graveyard", to="tasks")):
        pass
    clock.advance(timedelta(seconds=1))
    async for _ in stub.Replay(queue_pb2.ReplayRequest(queue="tasks")):
        pass
    stored = await until(lambda: sql.execute("SELECT shard, id, payload FROM tasks ORDER BY id").fetchall(),
                         "the redriven and replayed messages")
    assert stored == [(shard("a"), "a", "first"), (shard("b"), "b", "second"), (shard("c"), "c", "alone")]
    assert sql.execute("SELECT count(*) FROM graveyard").fetchone() == (0,)
