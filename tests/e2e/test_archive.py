"""Replay of a queue's archive over a real socket and PostgreSQL: the range (ack times, keys)
sent back with fresh attempts, live keys skipped and counted, idempotent under its request_id
and resumable after a cancel, bad input refused with nothing changed; the SDK (sync and aio)."""

import asyncio
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from spanq_proto.v1 import queue_pb2

from ..helpers import create_queue, duration, error_of, key, open_stream, plain, send, text_message
from .test_queue_settings import archive, update


async def replay(stub, queue: str = "tasks", **fields: Any) -> list[queue_pb2.ReplayProgress]:
    return [p async for p in stub.Replay(queue_pb2.ReplayRequest(queue=queue, **fields))]


def live(sql, queue: str = "tasks") -> list[tuple]:
    return sql.execute(f"SELECT id, payload, spanq_delivery_attempt, spanq_headers, spanq_priority FROM {queue} "
                       "ORDER BY id").fetchall()


def stamp(when) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(when)
    return out


async def archived_queue(stub, clock, *batches: tuple[str, ...]) -> list:
    """Queue tasks (STRING, archive 1 h) whose messages were each received once (attempt 1)
    then acked, batch after batch, 10 s apart; the ack time of each batch."""
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, archive_duration=duration(3600))
    keys = [k for b in batches for k in b]
    await send(stub, "tasks", *(text_message(k, f"job {k}", headers={"h": k}, priority=i % 10)
                                for i, k in enumerate(keys)))
    async with open_stream(stub, "tasks", max_batch_size=len(keys)) as stream:
        got = {plain(m.key)[0]: m for m in await stream.take(len(keys))}
    times = []
    for i, batch in enumerate(batches):
        times.append(clock.now())
        await stub.Ack(queue_pb2.AckRequest(queue="tasks", request_id=f"ack-{i}", acks=[
            queue_pb2.AckMessage(key=got[k].key, lease_token=got[k].lease_token) for k in batch]))
        clock.advance(timedelta(seconds=10))
    return times


async def test_a_replay_sends_its_range_back_fresh_and_skips_live_keys(stub, sql, clock):
    acked = await archived_queue(stub, clock, ("a",), ("b", "c"), ("d",))
    await send(stub, "tasks", text_message("c", "c sent again"))
    progress = await replay(stub, start_time=stamp(acked[1]), end_time=stamp(acked[2]), request_id="r1")
    assert [(p.sent, p.skipped, p.remaining, p.done, p.replayed, p.request_id) for p in progress] == [
        (1, 1, 0, True, False, "r1")]
    # b is back as sent, never delivered; c (live again) is untouched; a and d were out of range.
    assert live(sql) == [("b", "job b", 0, {"h": "b"}, 1), ("c", "c sent again", 0, None, 0)]
    assert len(archive(sql, "tasks")) == 4  # the archive keeps what it held
    async with open_stream(stub, "tasks", max_batch_size=2) as stream:
        got = {plain(m.key)[0]: m for m in await stream.take(2)}
    assert (got["b"].delivery_attempt, got["b"].payload.string_value) == (1, "job b")
    await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[queue_pb2.AckMessage(key=got["b"].key)]))
    # The same request_id again: its recorded progress, nothing sent (b, acked again, stays gone).
    again = await replay(stub, start_time=stamp(acked[1]), end_time=stamp(acked[2]), request_id="r1")
    assert [(p.sent, p.skipped, p.done, p.replayed) for p in again] == [(1, 1, True, True)]
    assert [r[0] for r in live(sql)] == ["c"]


async def test_a_replay_without_an_end_stops_at_its_start_and_bounds_keys(stub, sql, clock):
    await archived_queue(stub, clock, ("a", "b", "c", "d", "e"))
    progress = await replay(stub, start_key=key("b"), end_key=key("d"), batch_size=2, request_id="keys")
    assert [(p.sent, p.skipped, p.remaining, p.done) for p in progress] == [(2, 0, 1, False), (3, 0, 0, True)]
    assert [r[0] for r in live(sql)] == ["b", "c", "d"]
    # Received and acked again (archived anew, after the replay began), they are not replayed
    # again by a later call of the same replay, which is done.
    async with open_stream(stub, "tasks", max_batch_size=3) as stream:
        got = await stream.take(3)
    await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[queue_pb2.AckMessage(key=m.key) for m in got]))
    again = await replay(stub, start_key=key("b"), end_key=key("d"), request_id="keys")
    assert [(p.sent, p.replayed) for p in again] == [(3, True)] and live(sql) == []


async def test_a_cancelled_replay_continues_under_its_request_id_and_sends_none_twice(stub, sql, clock):
    await archived_queue(stub, clock, ("a",), ("b",), ("c",), ("d",))
    call = stub.Replay(queue_pb2.ReplayRequest(queue="tasks", batch_size=1, rate=2, request_id="slow"))
    first = await call.read()
    call.cancel()
    assert (first.sent, first.done) == (1, False)
    sent_before = len(live(sql))
    assert 1 <= sent_before < 4
    rest = await replay(stub, batch_size=3, request_id="slow")
    # Counts over both calls; a restart from the beginning would have skipped what was sent.
    assert (rest[-1].sent, rest[-1].skipped, rest[-1].done, rest[-1].replayed) == (4, 0, True, False)
    assert [r[0] for r in live(sql)] == ["a", "b", "c", "d"]


async def test_two_calls_of_one_replay_at_once_take_turns_and_send_each_message_once(stub, sql, clock):
    await archived_queue(stub, clock, tuple("abcdefghij"))
    both = await asyncio.gather(*(replay(stub, batch_size=1, request_id="twice") for _ in range(2)))
    # Shared counts: had both sent one batch, the second would have found its keys live (skipped).
    assert {(p[-1].sent, p[-1].skipped, p[-1].done) for p in both} == {(10, 0, True)}
    assert sum(len(p) for p in both) >= 10 and [r[0] for r in live(sql)] == list("abcdefghij")


@pytest.mark.parametrize("fields, code, says", [
    (dict(queue="nope"), grpc.StatusCode.NOT_FOUND, "nope"),
    (dict(queue="plain"), grpc.StatusCode.FAILED_PRECONDITION, "keeps no archive"),
    (dict(end_time=timestamp_pb2.Timestamp(seconds=100), start_time=timestamp_pb2.Timestamp(seconds=200)),
     grpc.StatusCode.INVALID_ARGUMENT, "must be after start_time"),
    (dict(start_key=key("a", "b")), grpc.StatusCode.INVALID_ARGUMENT, "start_key"),
    (dict(batch_size=1001), grpc.StatusCode.INVALID_ARGUMENT, "batch_size must be between 0 and 1000"),
    (dict(request_id="ack-0"), grpc.StatusCode.INVALID_ARGUMENT, "was used for another request"),
])
async def test_bad_replays_are_refused_and_change_nothing(stub, sql, clock, fields, code, says):
    await archived_queue(stub, clock, ("a", "b"))
    await create_queue(stub, "plain", payload_type=queue_pb2.STRING)
    fields = {"queue": "tasks", **fields}
    got_code, message, _ = await error_of(replay(stub, **fields))
    assert got_code == code and says in message, message
    assert live(sql) == [] and len(archive(sql, "tasks")) == 2


async def test_a_replay_of_a_paused_queue_or_another_range_under_its_id_is_refused(stub, sql, clock):
    await archived_queue(stub, clock, ("a", "b"))
    await replay(stub, end_key=key("a"), request_id="once")
    code, message, _ = await error_of(replay(stub, end_key=key("b"), request_id="once"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "another replay's range" in message
    await update(stub, "tasks", "disable_send", disable_send=True)
    code, message, _ = await error_of(replay(stub, request_id="paused"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "disable_send" in message
    assert [r[0] for r in live(sql)] == ["a"]


# -- the SDK ----------------------------------------------------------------------------------------


async def test_sdk_replay_sync_and_aio(server, stub, sql, clock):
    import spanq
    import spanq.aio

    acked = await archived_queue(stub, clock, ("a",), ("b",))
    target = f"127.0.0.1:{server.port}"
    seen: list[spanq.ReplayProgress] = []
    async with spanq.aio.Client(target) as client:
        final = await client.replay("tasks", start_time=acked[1], on_progress=seen.append)
        assert (final.sent, final.skipped, final.done, final.replayed) == (1, 0, True, False)
        assert seen[-1] == final and final.request_id
        again = await client.replay("tasks", start_time=acked[1], request_id=final.request_id)
        assert (again.sent, again.replayed) == (1, True)
        with pytest.raises(spanq.FailedPrecondition, match="keeps no archive"):
            await client.create_queue("plain")
            await client.replay("plain")
    assert [r[0] for r in live(sql)] == ["b"]

    def sync() -> spanq.ReplayProgress:
        with spanq.Client(target) as client:
            return client.replay("tasks", end_time=acked[1], batch_size=1)

    final = await asyncio.to_thread(sync)
    assert (final.sent, final.done) == (1, True)
    assert [r[0] for r in live(sql)] == ["a", "b"]
