"""Message priorities end to end: higher first among deliverable messages, by
deliver_time within one priority, on a Receive stream, the SDK and the SQL receive
function; scheduled and leased messages of a higher priority wait their turn; bad
priorities are refused on every write path and nothing is stored."""

import asyncio
from datetime import datetime, timedelta, timezone

import grpc
import psycopg
import psycopg.sql
import pytest

import spanq
import spanq.aio
from spanq_proto.v1 import queue_pb2

from ..helpers import create_queue, error_of, receive_some, send, text_message
from ..spanner.test_spanner_client import database, spanner_env  # noqa: F401  (fixtures)

STRING = queue_pb2.STRING


@pytest.fixture
async def jobs(stub):
    await create_queue(stub, "jobs", key_columns=[queue_pb2.KeyColumn(name="id", type=STRING)],
                       payload_type=STRING)
    return "jobs"


def keys(messages) -> list[str]:
    return [m.key.values[0].string_value for m in messages]


async def test_higher_priorities_are_delivered_first_and_fifo_within_one(stub, jobs):
    # Sent low to high, one Send each: each priority's messages in the order sent.
    sent = [("a", 0), ("b", 5), ("c", 0), ("d", 9), ("e", 5), ("f", 1)]
    for k, p in sent:
        await send(stub, "jobs", text_message(k, k, priority=p))
    got = await receive_some(stub, "jobs", 6, max_batch_size=10)
    assert keys(got) == ["d", "b", "e", "f", "a", "c"]
    assert [m.priority for m in got] == [9, 5, 5, 1, 0, 0]
    assert [m.last_batch_message for m in got] == [False] * 5 + [True]


async def test_a_batch_fills_from_the_top_down(stub, sql, jobs):
    await send(stub, "jobs", *[text_message(f"low{i}", "x") for i in range(3)],
               *[text_message(f"high{i}", "x", priority=3) for i in range(3)])
    rows = sql.execute("SELECT id, spanq_priority, spanq_last_batch_message FROM spanq.receive_jobs(4)").fetchall()
    assert rows == [("high0", 3, False), ("high1", 3, False), ("high2", 3, False), ("low0", 0, True)]
    assert sql.execute("SELECT id FROM spanq.receive_jobs(4)").fetchall() == [("low1",), ("low2",)]


async def test_scheduled_and_leased_messages_of_a_higher_priority_do_not_block_lower_ones(stub, sql, jobs):
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    scheduled = text_message("later", "x", priority=9)
    scheduled.deliver_time.FromDatetime(later)
    await send(stub, "jobs", scheduled, text_message("held", "x", priority=8))
    assert sql.execute("SELECT id FROM spanq.receive_jobs(1)").fetchall() == [("held",)]
    await send(stub, "jobs", text_message("now", "x"))
    assert sql.execute("SELECT id FROM spanq.receive_jobs(5)").fetchall() == [("now",)]


async def test_an_expired_lease_comes_back_at_its_priority(stub, sql, jobs):
    await send(stub, "jobs", text_message("urgent", "x", priority=7), text_message("routine", "x"))
    assert sql.execute("SELECT id FROM spanq.receive_jobs(1)").fetchall() == [("urgent",)]
    # Its lease and backoff run out (moved back by hand): it is first again.
    sql.execute("UPDATE jobs SET deliver_time = now() - interval '1 second' WHERE id = 'urgent'")
    rows = sql.execute("SELECT id, spanq_delivery_attempt FROM spanq.receive_jobs(5)").fetchall()
    assert rows == [("urgent", 2), ("routine", 1)]


async def test_the_sdk_sends_and_reads_priorities(server, jobs):
    async with spanq.aio.Client(server.target) as client:
        await client.send("jobs", "x", key="low")
        await client.send_many("jobs", [spanq.OutgoingMessage("x", "top", priority=9)])
        await client.commit(spanq.Transaction().send("jobs", "x", key="mid", priority=4))
        assert [(m.key, m.priority) for m in (await client.peek("jobs")).messages] == [
            (("low",), 0), (("top",), 9), (("mid",), 4)]
        got = await client.receive("jobs", 3)
        assert [(m.key, m.priority) for m in got] == [(("top",), 9), (("mid",), 4), (("low",), 0)]
        with pytest.raises(spanq.InvalidArgument, match="priority must be an int between 0 and 9"):
            await client.send("jobs", "x", key="bad", priority=10)


@pytest.mark.parametrize("priority", [-1, 10, 1 << 20])
async def test_bad_priorities_are_refused_and_nothing_is_stored(stub, sql, jobs, priority):
    bad = text_message("bad", "x", priority=priority)
    for call in (send(stub, "jobs", text_message("good", "x"), bad),
                 stub.Commit(queue_pb2.CommitRequest(mutations=[queue_pb2.Mutation(
                     send=queue_pb2.SendRequest(queue="jobs", messages=[text_message("good", "x"), bad]))]))):
        code, message, _ = await error_of(call)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert f"message 1: priority must be between 0 and 9, got {priority}" in message
    with pytest.raises((psycopg.errors.CheckViolation, psycopg.errors.NumericValueOutOfRange)):
        sql.execute("INSERT INTO jobs (id, payload, spanq_priority) VALUES ('bad', 'x', %s)", [priority])
    assert sql.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


async def test_the_spanner_front_end_delivers_higher_priorities_first(database, sql):
    """A Spanner client cannot set a priority (Send mutations have no field for one); set in SQL, it
    orders RECEIVE too, whatever RECEIVE's own priority argument says."""
    from ..spanner.test_spanner_client import b64

    def send() -> None:
        with database.batch() as batch:
            for i in range(3):
                batch.send(queue="UserTasks", key=[i, f"m{i}"], payload=b64(b"x"))

    await asyncio.to_thread(send)
    [(table,)] = sql.execute("SELECT name FROM spanq.queues").fetchall()
    sql.execute(psycopg.sql.SQL("UPDATE {} SET spanq_priority = 5 WHERE messageid = 'm2'").format(
        psycopg.sql.Identifier(table)))

    def receive() -> list[int]:
        with database.snapshot() as snapshot:
            rows = snapshot.execute_sql("SELECT UserId FROM RECEIVE_UserTasks(max_duration => '500ms', "
                                        "max_batch_size => 10, priority => 'LOW')")
            return [row[0] for row in rows]

    assert await asyncio.to_thread(receive) == [2, 0, 1]
