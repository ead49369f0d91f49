"""Per-key concurrency and a queue-wide rate limit (Queue.max_in_flight_per_key,
Queue.rate_limit), held in PostgreSQL: on the SQL surface (spanq.receive_<queue> in
psql), across streams on two servers (a checked history of leases and acks), set and
changed by CreateQueue and UpdateQueue with their checks, shown by GetQueueStats; and
migration 0014 from the schema before it."""

from datetime import timedelta

import grpc
import pytest
from google.protobuf import field_mask_pb2

from spanq_proto.v1 import queue_pb2
from spanq_server.store import Store

from ..helpers import create_queue, duration, error_of, send, text_message

KEYS = [queue_pb2.KeyColumn(name="tenant", type=queue_pb2.STRING), queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64)]


async def update(stub, name: str, *paths: str, **fields) -> queue_pb2.Queue:
    return await stub.UpdateQueue(queue_pb2.UpdateQueueRequest(
        queue=queue_pb2.Queue(name=name, **fields), update_mask=field_mask_pb2.FieldMask(paths=list(paths))))


def tenant_message(tenant: str, n: int, payload: str = "p") -> queue_pb2.SendMessage:
    from ..helpers import key, value
    return queue_pb2.SendMessage(key=key(tenant, n), payload=value(payload))


def psql_receive(sql, queue: str, batch: int, now=None) -> list[tuple]:
    return sql.execute(f"SELECT tenant, n FROM spanq.receive_{queue}(%s, now => %s)", (batch, now)).fetchall()


async def test_psql_receive_leases_no_more_per_key_than_the_limit(stub, sql, clock):
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING, max_in_flight_per_key=2)
    await send(stub, "tasks", *[tenant_message(t, n) for t in ("a", "b") for n in range(5)])
    got = psql_receive(sql, "tasks", 10)
    assert sorted(got) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert psql_receive(sql, "tasks", 10) == []  # each tenant is at its limit
    # An ack frees one of a's.
    sql.execute("DELETE FROM tasks WHERE tenant = 'a' AND n = 0")
    assert psql_receive(sql, "tasks", 10) == [("a", 2)]


async def test_psql_receive_takes_no_more_than_the_rate_limits_tokens(stub, sql):
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING, rate_limit=2.0,
                       rate_limit_burst=3)
    await send(stub, "tasks", *[tenant_message("a", n) for n in range(20)])
    [(start,)] = sql.execute("SELECT refill_time FROM spanq.rate_buckets WHERE queue = 'tasks'").fetchall()
    t0 = start + timedelta(seconds=60)  # long quiet: the bucket holds its burst, no more
    assert len(psql_receive(sql, "tasks", 10, t0)) == 3
    assert psql_receive(sql, "tasks", 10, t0) == []
    assert len(psql_receive(sql, "tasks", 10, t0 + timedelta(seconds=0.4))) == 0  # 0.8 of a token
    assert len(psql_receive(sql, "tasks", 10, t0 + timedelta(seconds=1.6))) == 3  # 3.2 tokens
    # An earlier clock (a statement that waited for the bucket) adds nothing.
    assert psql_receive(sql, "tasks", 10, t0) == []
    stats = await stub.GetQueueStats(queue_pb2.GetQueueStatsRequest(name="tasks"))
    assert stats.rate_limited == 7 + 10 + 10 + 7 + 10  # what was ready for each batch, less what it got
