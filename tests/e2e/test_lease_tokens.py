"""Lease tokens that carry their message's key (migration 0010): a renewal, an ack by
token and a stream's held count find the row by primary key, so a lease writes no
entry into the token index, which keeps only tokens without a key (keys too long for
a 200-character token, and tokens granted before the migration). A token is still
good only while it is the row's own."""

import base64
import re

import grpc
import pytest

from spanq_proto.v1 import queue_pb2
from spanq_server.store import Store

from ..helpers import ack, create_queue, duration, error_of, key, receive_some, renew, send, text_message, value

UNKEYED = "spanq_lease_token IS NOT NULL AND substr(spanq_lease_token, length(spanq_lease_token) - 32, 1) <> '~'"
"""The token index's predicate: the rows it holds."""

KEYS = [
    ["a.b~c,d*2E%x ü", "-9223372036854775808", base64.b64encode(b"\x00.~,").decode(), "0001-01-01T00:00:00Z", True],
    ["plain", "42", "", "2026-06-30T23:59:59.999999Z", False],
    ["", "9223372036854775807", base64.b64encode(b"\xff" * 8).decode(), "9999-12-31T23:59:59.999999Z", True],
]


def indexed(sql, queue: str) -> int:
    return sql.execute(f"SELECT count(*) FROM {queue} WHERE {UNKEYED}").fetchone()[0]  # test-owned names


@pytest.fixture
async def mixed(stub):
    """Queue `mixed`, keyed by one column of every key type."""
    types = [("s", queue_pb2.STRING), ("i", queue_pb2.INT64), ("b", queue_pb2.BYTES), ("t", queue_pb2.TIMESTAMP),
             ("f", queue_pb2.BOOL)]
    await create_queue(stub, "mixed", payload_type=queue_pb2.STRING,
                       key_columns=[queue_pb2.KeyColumn(name=n, type=t) for n, t in types])
    await send(stub, "mixed", *[queue_pb2.SendMessage(key=key(*k), payload=value(f"m{i}")) for i, k in enumerate(KEYS)])
    return "mixed"


async def test_tokens_carry_keys_of_every_type_and_leases_write_no_token_index_entry(stub, sql, mixed):
    got = await receive_some(stub, mixed, len(KEYS), max_batch_size=10, lease_duration=duration(30))
    assert len(got) == len(KEYS)
    assert all(len(m.lease_token) <= 200 and "~" in m.lease_token for m in got)
    assert indexed(sql, mixed) == 0
    [definition] = sql.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'spanq_lt_mixed'").fetchone()
    assert "WHERE ((spanq_lease_token IS NOT NULL) AND" in definition
    # Renewal finds each row by the key its token carries, and gives a new token.
    renewed = await renew(stub, mixed, *[m.lease_token for m in got], seconds=30)
    fresh = {r.old_lease_token: r.new_lease_token for r in renewed.leases}
    assert all(fresh[m.lease_token] and fresh[m.lease_token] != m.lease_token for m in got)
    # The old tokens are stale: they renew nothing and cannot ack.
    stale = await renew(stub, mixed, *[m.lease_token for m in got], seconds=30)
    assert not any(r.new_lease_token for r in stale.leases)
    code, _, _ = await error_of(ack(stub, mixed, got[0]))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    # The new ones ack, every message.
    for m in got:
        m.lease_token = fresh[m.lease_token]
    acked = await ack(stub, mixed, *got)
    assert all(r.acked for r in acked.results)
    assert sql.execute("SELECT count(*) FROM mixed").fetchone() == (0,)


async def test_a_key_too_long_for_a_token_gets_one_the_token_index_finds(stub, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    long_key = "k" * 300
    await send(stub, "tasks", text_message(long_key, "long"), text_message("short", "short"))
    got = {m.key.values[0].string_value: m for m in await receive_some(stub, "tasks", 2, max_batch_size=10)}
    long_token, short_token = got[long_key].lease_token, got["short"].lease_token
    assert len(long_token) <= 200 and "~" not in long_token and "~" in short_token
    assert indexed(sql, "tasks") == 1
    [r] = (await renew(stub, "tasks", long_token, seconds=30)).leases
    assert r.new_lease_token and r.new_lease_token != long_token and "~" not in r.new_lease_token
    got[long_key].lease_token = r.new_lease_token
    assert all(a.acked for a in (await ack(stub, "tasks", got[long_key], got["short"])).results)
    assert indexed(sql, "tasks") == 0


async def test_a_token_made_up_for_another_key_is_refused_and_garbage_is_no_error(stub, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("a", "1"), text_message("b", "2"))
    got = {m.key.values[0].string_value: m for m in await receive_some(stub, "tasks", 2, max_batch_size=10)}
    a, b = got["a"].lease_token, got["b"].lease_token
    # a's token with b's key: it names b's row, but is not b's token.
    forged = re.sub(r"\.a~", ".b~", a)
    assert forged != a and forged != b
    renewed = await renew(stub, "tasks", forged, seconds=30)
    assert not any(r.new_lease_token for r in renewed.leases)
    code, _, _ = await error_of(stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
        queue_pb2.AckMessage(key=key("b"), lease_token=forged)])))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    garbage = ["~" + "0" * 32, "x.1.~" + "0" * 32, "x.99999999999999999999.zz,zz~" + "f" * 32, "." * 40, "~" * 40,
               "p.1." + "9" * 30 + "~" + "0" * 32]
    assert not any(r.new_lease_token for r in (await renew(stub, "tasks", *garbage, seconds=30)).leases)
    assert sql.execute("SELECT * FROM spanq.renewlease_tasks(%s)", [garbage]).fetchall() == []
    # b's lease is untouched: its own token still renews.
    [r] = (await renew(stub, "tasks", b, seconds=30)).leases
    assert r.new_lease_token


async def test_migration_0010_keeps_leases_granted_before_it(stub, sql, database_url):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    # The queue as before migration 0010: a token index of every token, and leases under
    # tokens without their key (one for a stream 'old', one for psql's 'sql').
    sql.execute("DROP INDEX spanq_lt_tasks")
    sql.execute("CREATE UNIQUE INDEX spanq_lt_tasks ON tasks (spanq_lease_token) WHERE spanq_lease_token IS NOT NULL")
    sql.execute("INSERT INTO tasks (id, payload) VALUES ('k1', 'one'), ('k2', 'two')")
    tokens = {"k1": "old.1999999999000000." + "ab" * 16, "k2": "sql.1999999999000000." + "cd" * 16}
    for k, token in tokens.items():
        sql.execute("UPDATE tasks SET spanq_lease_token = %s, spanq_lease_expiration_timestamp = now() + interval "
                    "'1 minute', deliver_time = now() + interval '1 minute' WHERE id = %s", [token, k])
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 10")

    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [10]
        [definition] = sql.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'spanq_lt_tasks'").fetchone()
        assert "<> '~'" in definition
        # The narrowed index still holds the old tokens: a stream's held count finds its own,
        # with or without the tokens it was told.
        queue = await store.queue_get("tasks")
        assert queue is not None
        assert list(await store.leases_held(queue, "old", [], None)) == [tokens["k1"]]
        assert list(await store.leases_held(queue, "old", [tokens["k1"]], None)) == [tokens["k1"]]
    # An old token renews, to one that carries its key; the other acks by key and token.
    [r] = (await renew(stub, "tasks", tokens["k1"], seconds=30)).leases
    assert re.fullmatch(r"old\.\d{16}\.k1~[0-9a-f]{32}", r.new_lease_token)
    acked = await stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
        queue_pb2.AckMessage(key=key("k1"), lease_token=r.new_lease_token),
        queue_pb2.AckMessage(key=key("k2"), lease_token=tokens["k2"])]))
    assert [a.acked for a in acked.results] == [True, True]
