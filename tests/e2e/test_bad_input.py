"""Bad input gets the status code DESIGN.md gives it, a message that says
what was wrong, and changes nothing already stored.

Every test starts from `stored`: a queue with messages (one of them leased)
and a plain table `y`, so that an injected `DROP TABLE y`, a stray lease or
a half-applied batch would all show in the before/after snapshot of every
table in the database.
"""

import asyncio
import base64
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2
from psycopg import sql as pgsql

from spanq_proto.v1 import queue_pb2
from spanq_server.ground.config import Limits

from ..helpers import create_queue, duration, error_of, key, plain, receive_some, send, text_message, until, value

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
EXISTS = grpc.StatusCode.ALREADY_EXISTS
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED

YEAR = 365 * 24 * 3600


# -- helpers --------------------------------------------------------------------


def snapshot(sql: psycopg.Connection) -> dict[str, Any]:
    """Everything stored: the catalog and ledger, every relation and function, every table's rows."""
    out: dict[str, Any] = {}
    out["relations"] = sql.execute(
        "SELECT n.nspname, c.relname, c.relkind FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname IN ('public', 'spanq') ORDER BY 1, 2"
    ).fetchall()
    out["functions"] = sql.execute(
        "SELECT n.nspname, p.proname, pg_get_function_identity_arguments(p.oid) FROM pg_proc AS p"
        " JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname IN ('public', 'spanq') ORDER BY 1, 2, 3"
    ).fetchall()
    for schema, table, kind in out["relations"]:
        if kind == "r":
            rows = sql.execute(pgsql.SQL("SELECT * FROM {}").format(pgsql.Identifier(schema, table))).fetchall()
            out[f"{schema}.{table}"] = sorted(rows, key=repr)
    assert "spanq.queues" in out and "public.tasks" in out
    return out


@dataclasses.dataclass
class Stored:
    sql: psycopg.Connection
    lease_token: str
    """The current lease of message ["a"] of queue tasks."""

    def snapshot(self) -> dict[str, Any]:
        return snapshot(self.sql)


@pytest.fixture
async def stored(stub, sql) -> Stored:
    """Queue `tasks` (key id STRING, STRING payload) holding a leased message "a", a
    deliverable "b" and a scheduled "c"; plain table `y` holding one row."""
    await create_queue(stub, "tasks", key_columns=[queue_pb2.KeyColumn(name="id", type=queue_pb2.STRING)],
                       payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("a", "first"))
    [leased] = await receive_some(stub, "tasks", 1, max_batch_size=1, lease_duration=duration(3600))
    assert plain(leased.key) == ["a"]
    await send(stub, "tasks", text_message("b", "second"), text_message("c", "later", delay=duration(3600)))
    sql.execute("CREATE TABLE y (id integer PRIMARY KEY, note text)")
    sql.execute("INSERT INTO y VALUES (1, 'keep me')")
    return Stored(sql, leased.lease_token)


async def expect(awaitable: Awaitable[Any], code: grpc.StatusCode, *fragments: str) -> tuple[str, dict[str, Any]]:
    """The call fails with `code`, an ErrorInfo reason, and a message naming each fragment."""
    got, message, info = await error_of(awaitable)
    assert got == code, f"expected {code.name}, got {got.name}: {message}"
    assert message.strip(), f"a {code.name} error must say what was wrong"
    for fragment in fragments:
        assert fragment.lower() in message.lower(), f"{fragment!r} is not in the message {message!r}"
    assert info.get("reason"), f"no ErrorInfo reason on {code.name}: {message}"
    return message, info


async def first_response(call: Any, timeout: float = 5) -> Any:
    """The first response of a Receive stream (an error raises AioRpcError); cancels the stream."""
    try:
        return await asyncio.wait_for(call.read(), timeout)
    finally:
        call.cancel()


def dur(seconds: int, nanos: int = 0) -> duration_pb2.Duration:
    """A raw Duration, also ones helpers.duration cannot build (negative, mixed signs)."""
    return duration_pb2.Duration(seconds=seconds, nanos=nanos)


def stamp(when: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(when)
    return out


def q(name: str, **fields: Any) -> queue_pb2.CreateQueueRequest:
    return queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(name=name, **fields))


def col(name: str, type_: int = queue_pb2.STRING) -> queue_pb2.KeyColumn:
    return queue_pb2.KeyColumn(name=name, type=type_)


def send_req(queue: str, *messages: queue_pb2.SendMessage) -> queue_pb2.SendRequest:
    return queue_pb2.SendRequest(queue=queue, messages=list(messages))


def ack_req(queue: str, *keys: struct_pb2.ListValue, **fields: Any) -> queue_pb2.AckRequest:
    return queue_pb2.AckRequest(queue=queue, acks=[queue_pb2.AckMessage(key=k) for k in keys], **fields)


def every_rpc(stub: Any, name: str) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """One otherwise valid call of every RPC that names a queue."""
    return [
        ("GetQueue", lambda: stub.GetQueue(queue_pb2.GetQueueRequest(name=name))),
        ("DropQueue", lambda: stub.DropQueue(queue_pb2.DropQueueRequest(name=name))),
        ("Send", lambda: stub.Send(send_req(name, text_message("new", "hello")))),
        ("Receive", lambda: first_response(stub.Receive(queue_pb2.ReceiveRequest(queue=name, max_duration=duration(1))))),
        ("Ack", lambda: stub.Ack(ack_req(name, key("b")))),
        ("RenewLease", lambda: stub.RenewLease(queue_pb2.RenewLeaseRequest(
            queue=name, lease_tokens=["abc.def"], lease_duration=duration(10)))),
        ("Commit", lambda: stub.Commit(queue_pb2.CommitRequest(mutations=[
            queue_pb2.Mutation(send=send_req(name, text_message("new", "hello")))]))),
    ]


# -- names ------------------------------------------------------------------------

BAD_NAMES = [
    'x"; DROP TABLE y; --',  # SQL after a double quote
    "x'; DROP TABLE y; --",  # ... after a single quote
    "tasks; DROP TABLE y",
    "y CASCADE",
    "public.y",
    "café",  # unicode
    "ｔａｓｋｓ",  # fullwidth letters
    "tas\u212as",  # KELVIN SIGN, whose Unicode lower case is k: a look-alike of "tasks"
    "Tasks",  # uppercase
    "",
    "a" * 300,
    "1tasks",
    "_tasks",
    "task-s",
    "tasks\n",
    "tasks\x00",
]


async def test_bad_queue_name_is_invalid_for_every_rpc(stub, stored):
    before = stored.snapshot()
    for name in BAD_NAMES + ["a" * 49]:  # a queue name has at most 48 characters
        calls = [("CreateQueue", lambda: stub.CreateQueue(q(name)))] + every_rpc(stub, name)
        for rpc, call in calls:
            message, info = await expect(call(), INVALID, "queue name", "lowercase letters")
            assert info["reason"] == "INVALID_ARGUMENT", (rpc, name)
            assert repr(name)[:40] in message, (rpc, message)
        await expect(stub.ListQueues(queue_pb2.ListQueuesRequest(page_token=name or "!")), INVALID, "page_token")
    assert stored.snapshot() == before


async def test_longest_names_are_accepted(stub, stored):
    """The limits are exact: 48 characters for a queue, 63 for a key column."""
    name, column = "q" * 48, "k" * 63
    created = await create_queue(stub, name, key_columns=[col(column)], payload_type=queue_pb2.STRING)
    assert created.name == name and created.key_columns[0].name == column
    assert plain((await send(stub, name, text_message("k1", "hi"))).keys[0]) == ["k1"]
    assert stored.sql.execute(pgsql.SQL("SELECT {} FROM {}").format(
        pgsql.Identifier(column), pgsql.Identifier(name))).fetchall() == [("k1",)]


async def test_bad_key_column_name_is_invalid(stub, stored):
    before = stored.snapshot()
    for column in BAD_NAMES + ["k" * 64, "payload", "deliver_time", "spanq_lease_token", "ctid", "xmin", "tableoid"]:
        message, _ = await expect(stub.CreateQueue(q("fresh", key_columns=[col("id"), col(column)])), INVALID,
                                  "key column")
        assert repr(column)[:40] in message, message
    assert stored.snapshot() == before


async def test_bad_queue_definitions_are_invalid(stub, stored):
    before = stored.snapshot()
    bad = {
        "duplicate key column": q("fresh", key_columns=[col("id"), col("id")]),
        "17 key columns": q("fresh", key_columns=[col(f"k{i}") for i in range(17)]),
        "key column JSON": q("fresh", key_columns=[col("id", queue_pb2.JSON)]),
        "key column unknown type": q("fresh", key_columns=[col("id", 99)]),
        "key column unspecified type": q("fresh", key_columns=[col("id", queue_pb2.TYPE_CODE_UNSPECIFIED)]),
        "payload INT64": q("fresh", payload_type=queue_pb2.INT64),
        "payload unknown type": q("fresh", payload_type=42),
        "parent_table injection": q("fresh", key_columns=[col("id")], parent_table='y"; DROP TABLE y; --'),
        "parent_table missing": q("fresh", key_columns=[col("id")], parent_table="nosuch"),
        "parent_table without key columns": q("fresh", parent_table="y"),
        "dead_letter_queue injection": q("fresh", max_delivery_attempts=3, dead_letter_queue="x'; DROP TABLE y"),
        "dead_letter_queue missing": q("fresh", max_delivery_attempts=3, dead_letter_queue="nosuch"),
        "dead_letter_queue alone": q("fresh", dead_letter_queue="tasks"),
        "max_delivery_attempts alone": q("fresh", max_delivery_attempts=3),
        "max_delivery_attempts negative": q("fresh", max_delivery_attempts=-1, dead_letter_queue="tasks"),
        "dead_letter_queue itself": q("fresh", max_delivery_attempts=3, dead_letter_queue="fresh"),
        "dead_letter_queue of another shape": q("fresh", payload_type=queue_pb2.JSON, max_delivery_attempts=3,
                                                dead_letter_queue="tasks"),
    }
    for what, request in bad.items():
        message, _ = await expect(stub.CreateQueue(request), INVALID)
        assert any(word in message for word in ("key column", "payload_type", "parent", "dead", "delivery")), \
            (what, message)
    assert stored.snapshot() == before


# -- unknown queues -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["nosuch", "y"], ids=["no-such-name", "plain-table-not-a-queue"])
async def test_unknown_queue_is_not_found_for_every_rpc(stub, stored, name):
    before = stored.snapshot()
    for rpc, call in every_rpc(stub, name):
        _, info = await expect(call(), NOT_FOUND, repr(name))
        assert info["reason"] == "QUEUE_NOT_FOUND", rpc
    assert stored.snapshot() == before


async def test_dropped_queue_is_not_found_for_every_rpc(stub, stored):
    await create_queue(stub, "gone", payload_type=queue_pb2.STRING)
    await send(stub, "gone", text_message(None, "soon dropped"))
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="gone"))
    before = stored.snapshot()
    for rpc, call in every_rpc(stub, "gone"):
        _, info = await expect(call(), NOT_FOUND, "'gone'")
        assert info["reason"] == "QUEUE_NOT_FOUND", rpc
    assert stored.snapshot() == before


# -- durations and times -------------------------------------------------------------

BAD_LEASES = [dur(-1), dur(100 * YEAR), dur(0, 500_000_000), dur(13 * 3600), dur(1, -5), dur(-1, -5)]


async def test_bad_receive_durations_are_invalid(stub, stored):
    before = stored.snapshot()
    for lease in BAD_LEASES:
        request = queue_pb2.ReceiveRequest(queue="tasks", lease_duration=lease, max_duration=duration(1))
        await expect(first_response(stub.Receive(request)), INVALID, "lease_duration")
    for length in [dur(-1), dur(2 * 3600), dur(100 * YEAR), dur(0, -1)]:
        request = queue_pb2.ReceiveRequest(queue="tasks", max_duration=length)
        await expect(first_response(stub.Receive(request)), INVALID, "max_duration")
    # Message "b" was deliverable all along: no stream leased it.
    assert stored.snapshot() == before


async def test_bad_renew_durations_are_invalid(stub, stored):
    before = stored.snapshot()
    for lease in [dur(-1), dur(100 * YEAR), dur(13 * 3600), dur(1, -5)]:
        request = queue_pb2.RenewLeaseRequest(queue="tasks", lease_tokens=[stored.lease_token], lease_duration=lease)
        await expect(stub.RenewLease(request), INVALID, "lease_duration")
    assert stored.snapshot() == before  # the lease is neither renewed nor released


async def test_bad_queue_durations_are_invalid(stub, stored):
    before = stored.snapshot()
    for field in ("lease_duration", "initial_backoff", "max_backoff"):
        for length in [dur(-1), dur(100 * YEAR), dur(1, -5)]:
            await expect(stub.CreateQueue(q("fresh", **{field: length})), INVALID, field)
    await expect(stub.CreateQueue(q("fresh", lease_duration=dur(0, 500_000_000))), INVALID, "lease_duration")
    await expect(stub.CreateQueue(q("fresh", lease_duration=dur(13 * 3600))), INVALID, "lease_duration")
    await expect(stub.CreateQueue(q("fresh", max_backoff=dur(25 * 3600))), INVALID, "max_backoff")
    await expect(stub.CreateQueue(q("fresh", initial_backoff=dur(7200), max_backoff=dur(3600))), INVALID, "backoff")
    assert stored.snapshot() == before


async def test_bad_schedules_are_invalid_and_store_nothing(stub, stored):
    before = stored.snapshot()
    now = datetime.now(timezone.utc)
    bad = {
        "delay": [dur(-1), dur(-1, -5), dur(1, -5), dur(367 * 24 * 3600), dur(100 * YEAR)],
        "deliver_time": [stamp(now + timedelta(days=3650)), stamp(now + timedelta(days=367)),
                         timestamp_pb2.Timestamp(seconds=10**12),  # after year 9999: not a Timestamp
                         timestamp_pb2.Timestamp(seconds=-10**12),  # before year 1
                         timestamp_pb2.Timestamp(seconds=0, nanos=-1)],
    }
    for field, values in bad.items():
        for v in values:
            # A valid message first: the batch is all or nothing.
            batch = [text_message("new", "ok"), text_message("newer", "bad", **{field: v})]
            await expect(stub.Send(send_req("tasks", *batch)), INVALID, field)
            await expect(stub.Commit(queue_pb2.CommitRequest(mutations=[
                queue_pb2.Mutation(send=send_req("tasks", batch[0])),
                queue_pb2.Mutation(send=send_req("tasks", batch[1]))])), INVALID, field)
    assert stored.snapshot() == before
    # The bounds themselves are fine: 366 days ahead, and a time in the past (which means now).
    await send(stub, "tasks", text_message("edge", "late", delay=duration(366 * 24 * 3600)),
               text_message("past", "now", deliver_time=stamp(now - timedelta(days=3650))))


async def test_the_schedule_bound_follows_the_servers_clock(stub, stored, clock):
    """366 days ahead of the server's clock (here advanced by 30 days), not of this host's."""
    clock.advance(timedelta(days=30))
    now = clock.now()
    await send(stub, "tasks", text_message("in-bound", "x", deliver_time=stamp(now + timedelta(days=365))))
    await expect(stub.Send(send_req("tasks", text_message("past-bound", "x",
                                                          deliver_time=stamp(now + timedelta(days=367))))),
                 INVALID, "deliver_time")


# -- payloads -----------------------------------------------------------------------


class TestPayloadLimit:
    @pytest.fixture
    def server_config(self, server_config):
        return dataclasses.replace(server_config, limits=Limits(max_payload_bytes=1024))

    async def test_payload_over_the_limit_is_exhausted_and_stores_nothing(self, stub, stored):
        await create_queue(stub, "blobs", payload_type=queue_pb2.BYTES)
        await create_queue(stub, "docs", payload_type=queue_pb2.JSON)
        before = stored.snapshot()
        over = {
            "tasks": [value("x" * 1025), value("é" * 513)],  # 1,026 bytes in 513 characters
            "blobs": [value(base64.b64encode(b"\xff" * 1025).decode())],
            "docs": [value({"k": "x" * 1020}), value(["x" * 600, "y" * 600])],
        }
        for queue, payloads in over.items():
            for payload in payloads:
                ok = queue_pb2.SendMessage(key=key("ok"), payload=value(
                    "fine" if queue == "tasks" else {"fine": 1} if queue == "docs" else "ZmluZQ=="))
                big = queue_pb2.SendMessage(key=key("big"), payload=payload)
                _, info = await expect(stub.Send(send_req(queue, ok, big)), EXHAUSTED, "payload", "1024")
                assert info["reason"] == "LIMIT_EXCEEDED"
                await expect(stub.Commit(queue_pb2.CommitRequest(mutations=[
                    queue_pb2.Mutation(send=send_req("tasks", text_message("ok", "fine"))),
                    queue_pb2.Mutation(send=send_req(queue, big))])), EXHAUSTED, "payload", "1024")
        assert stored.snapshot() == before
        # Exactly at the limit is fine: 1,024 bytes, whatever their encoding on the wire.
        await send(stub, "tasks", text_message("at", "x" * 1024), text_message("at2", "é" * 512))
        await send(stub, "blobs", queue_pb2.SendMessage(payload=value(base64.b64encode(b"\xff" * 1024).decode())))


async def test_default_payload_limit_is_one_mebibyte(stub, stored):
    before = stored.snapshot()
    await expect(stub.Send(send_req("tasks", text_message("big", "x" * (1024 * 1024 + 1)))),
                 EXHAUSTED, "payload", "1048576")
    assert stored.snapshot() == before
    await send(stub, "tasks", text_message("big", "x" * (1024 * 1024)))


async def test_wrong_payload_type_is_invalid(stub, stored):
    await create_queue(stub, "blobs", payload_type=queue_pb2.BYTES)
    await create_queue(stub, "docs", payload_type=queue_pb2.JSON)
    before = stored.snapshot()
    nan = struct_pb2.Value(number_value=float("nan"))
    nul_key = struct_pb2.Value()
    nul_key.struct_value.fields["a\x00"].string_value = "x"
    bad = {
        "tasks": [value(42), value(True), value(None), value({"a": 1}), value(["x"]), value("a\x00b"), None],
        "blobs": [value("not base64!"), value("YQ"), value(42), value({"a": 1}), value("YQ==\n"), None],
        "docs": [nan, value("a\x00b"), nul_key, struct_pb2.Value(), None],
    }
    fine = {"tasks": value("fine"), "blobs": value("ZmluZQ=="), "docs": value({"fine": 1})}
    for queue, payloads in bad.items():
        for payload in payloads:
            ok = queue_pb2.SendMessage(key=key("ok"), payload=fine[queue])
            message = queue_pb2.SendMessage(key=key("new"), payload=payload)
            await expect(stub.Send(send_req(queue, ok, message)), INVALID, "payload")
    assert stored.snapshot() == before


def nested_list(depth: int) -> struct_pb2.Value:
    data: Any = 1
    for _ in range(depth):
        data = [data]
    return value(data)


async def test_json_no_client_could_decode_is_invalid_on_send_and_commit(stub, stored):
    # Protobuf decoders stop at 100 nested messages: a deeper payload would be stored and then
    # break every Receive of its queue. 30 levels are the limit, arrays or objects.
    await create_queue(stub, "docs", payload_type=queue_pb2.JSON)
    before = stored.snapshot()
    ok = queue_pb2.SendMessage(key=key("ok"), payload=value({"fine": 1}))
    deep = queue_pb2.SendMessage(key=key("deep"), payload=nested_list(31))
    await expect(stub.Send(send_req("docs", ok, deep)), INVALID, "message 1", "nested more than 30")
    await expect(stub.Commit(queue_pb2.CommitRequest(mutations=[queue_pb2.Mutation(send=send_req("docs", ok, deep))])),
                 INVALID, "message 1", "nested more than 30")
    assert stored.snapshot() == before
    await stub.Send(send_req("docs", queue_pb2.SendMessage(key=key("at-limit"), payload=nested_list(30))))


# -- keys ---------------------------------------------------------------------------

TYPED_COLUMNS = [col("n", queue_pb2.INT64), col("s"), col("b", queue_pb2.BYTES), col("t", queue_pb2.TIMESTAMP),
                 col("f", queue_pb2.BOOL)]
GOOD_KEY = ["42", "a", "YQ==", "2026-01-02T03:04:05Z", True]
BAD_KEY_VALUES: list[tuple[int, Any]] = [
    # INT64
    (0, "abc"), (0, "1.5"), (0, 1.5), (0, "9223372036854775808"), (0, "-9223372036854775809"),
    (0, 1e19), (0, 2.0**53 + 2), (0, "--5"), (0, "+-5"), (0, ""), (0, "0x10"), (0, "١٢"), (0, True), (0, None),
    (0, {"n": 1}), (0, [1]), (0, "1e3"),
    # STRING
    (1, 42), (1, True), (1, None), (1, ["a"]), (1, "a\x00b"),
    # BYTES
    (2, "not base64!"), (2, "YQ"), (2, 5), (2, "YQ==\n"),
    # TIMESTAMP
    (3, "yesterday"), (3, "2026-13-01T00:00:00Z"), (3, "2026-01-02 03:04:05Z"), (3, "2026-01-02T03:04:05"),
    (3, "0000-01-01T00:00:00Z"), (3, "10000-01-01T00:00:00Z"), (3, 1767323045),
    # BOOL
    (4, "true"), (4, 1), (4, None),
]


async def test_wrong_key_type_or_arity_is_invalid(stub, stored):
    await create_queue(stub, "typed", key_columns=TYPED_COLUMNS, payload_type=queue_pb2.STRING)
    await send(stub, "typed", queue_pb2.SendMessage(key=key(*GOOD_KEY), payload=value("kept")))
    before = stored.snapshot()
    for index, bad in BAD_KEY_VALUES:
        k = list(GOOD_KEY)
        k[index] = bad
        column = TYPED_COLUMNS[index].name
        good = queue_pb2.SendMessage(key=key("1", *GOOD_KEY[1:]), payload=value("ok"))
        message = queue_pb2.SendMessage(key=key(*k), payload=value("bad"))
        await expect(stub.Send(send_req("typed", good, message)), INVALID, f"key column {column!r}")
        await expect(stub.Ack(ack_req("typed", key(*GOOD_KEY), key(*k))), INVALID, f"key column {column!r}")
    for k in [[], GOOD_KEY[:4], GOOD_KEY + ["extra"]]:
        message = queue_pb2.SendMessage(key=key(*k), payload=value("bad"))
        await expect(stub.Send(send_req("typed", message)), INVALID, "5 key column(s)", f"{len(k)} value(s)")
        await expect(stub.Ack(ack_req("typed", key(*k))), INVALID, "5 key column(s)")
    # A keyed queue needs its key; a generated-key queue's single STRING key still checks arity and type.
    await expect(stub.Send(send_req("typed", queue_pb2.SendMessage(payload=value("bad")))), INVALID, "needs a key")
    await expect(stub.Send(send_req("tasks", text_message("x", "y"), queue_pb2.SendMessage(
        key=key("a", "b"), payload=value("z")))), INVALID, "key column")
    assert stored.snapshot() == before
    # The edges of each type are accepted.
    for k in [["9223372036854775807", "", "", "0001-01-01T00:00:00Z", False],
              ["-9223372036854775808", "é", "/w==", "9999-12-31T23:59:59.999999Z", True],
              [2**53, "x", "", "2026-01-02T03:04:05+01:00", True]]:
        await stub.Send(send_req("typed", queue_pb2.SendMessage(key=key(*k), payload=value("edge"))))


# -- request sizes ------------------------------------------------------------------


async def test_bad_sizes_are_invalid(stub, stored):
    before = stored.snapshot()
    many = [text_message(f"m{i}", "x") for i in range(1001)]
    await expect(stub.Send(send_req("tasks")), INVALID, "at least one")
    await expect(stub.Send(send_req("tasks", *many)), INVALID, "at most 1000")
    await expect(stub.Ack(ack_req("tasks")), INVALID, "at least one")
    await expect(stub.Ack(ack_req("tasks", *[key(f"m{i}") for i in range(1001)])), INVALID, "at most 1000")
    await expect(stub.Ack(ack_req("tasks", key("b"), key("b"))), INVALID, "twice")
    await expect(stub.RenewLease(queue_pb2.RenewLeaseRequest(queue="tasks", lease_duration=duration(5))),
                 INVALID, "at least one")
    for token in ["", "x" * 201, "a\x00b"]:
        await expect(stub.RenewLease(queue_pb2.RenewLeaseRequest(
            queue="tasks", lease_tokens=[stored.lease_token, token], lease_duration=duration(5))),
            INVALID, "lease token")
    for token in ["x" * 201, "a\x00b", "\x00"]:  # an ack's token is optional, but when given it is a token
        await expect(stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[
            queue_pb2.AckMessage(key=key("b"), lease_token=token)])), INVALID, "lease token")
    for field, bad in [("max_batch_size", -1), ("max_batch_size", 1001), ("max_outstanding", -1),
                       ("max_outstanding", 100_001)]:
        request = queue_pb2.ReceiveRequest(queue="tasks", max_duration=duration(1), **{field: bad})
        await expect(first_response(stub.Receive(request)), INVALID, field)
    for size in [-1, 1001]:
        await expect(stub.ListQueues(queue_pb2.ListQueuesRequest(page_size=size)), INVALID, "page_size")
    await expect(stub.Commit(queue_pb2.CommitRequest()), INVALID, "mutation")
    await expect(stub.Commit(queue_pb2.CommitRequest(mutations=[queue_pb2.Mutation()])), INVALID, "mutation")
    assert stored.snapshot() == before


# -- existing names -------------------------------------------------------------------


async def test_existing_queue_is_already_exists_and_unchanged(stub, stored):
    original = await stub.GetQueue(queue_pb2.GetQueueRequest(name="tasks"))
    before = stored.snapshot()
    for request in [q("tasks"), q("tasks", key_columns=[col("n", queue_pb2.INT64)], payload_type=queue_pb2.JSON)]:
        _, info = await expect(stub.CreateQueue(request), EXISTS, "'tasks'")
        assert info["reason"] == "QUEUE_ALREADY_EXISTS"
    assert stored.snapshot() == before
    assert await stub.GetQueue(queue_pb2.GetQueueRequest(name="tasks")) == original


async def test_name_of_an_existing_relation_or_type_is_already_exists(stub, stored):
    stored.sql.execute("CREATE VIEW v AS SELECT * FROM y")
    stored.sql.execute("CREATE SEQUENCE counter")
    stored.sql.execute("CREATE TYPE mood AS ENUM ('happy', 'sad')")
    before = stored.snapshot()
    # y: a plain table; spanq_dt_tasks: the index of queue tasks; mood: a type, which a table would shadow.
    for name in ["y", "v", "counter", "spanq_dt_tasks", "mood"]:
        _, info = await expect(stub.CreateQueue(q(name, key_columns=[col("id")])), EXISTS, repr(name))
        assert info["reason"] == "QUEUE_ALREADY_EXISTS"
        await expect(stub.GetQueue(queue_pb2.GetQueueRequest(name=name)), NOT_FOUND)
    assert stored.snapshot() == before


# -- limits ---------------------------------------------------------------------------


class TestQueueLimit:
    @pytest.fixture
    def server_config(self, server_config):
        return dataclasses.replace(server_config, limits=Limits(max_queues=2))

    async def test_too_many_queues_is_exhausted(self, stub, stored):
        await create_queue(stub, "second")  # with tasks: the limit
        before = stored.snapshot()
        _, info = await expect(stub.CreateQueue(q("third")), EXHAUSTED, "2 queues", "maximum")
        assert info["reason"] == "LIMIT_EXCEEDED"
        await expect(stub.GetQueue(queue_pb2.GetQueueRequest(name="third")), NOT_FOUND)
        assert stored.snapshot() == before
        # Room again after a drop.
        await stub.DropQueue(queue_pb2.DropQueueRequest(name="second"))
        await create_queue(stub, "third")


async def wait_for_streams(server: Any, n: int, timeout: float = 10) -> None:
    """Until the server counts `n` open Receive streams."""
    await until(lambda: server.receiver.open_streams() == n, f"{n} open streams", timeout, 0.01)


class TestStreamLimit:
    @pytest.fixture
    def server_config(self, server_config):
        return dataclasses.replace(server_config, limits=Limits(max_streams_per_queue=3))

    async def test_stream_past_the_limit_is_exhausted(self, stub, stored, server):
        await create_queue(stub, "other")
        # Only the scheduled message stays deliverable-later; nothing for the streams to lease.
        await stub.Ack(ack_req("tasks", key("b")))
        before = stored.snapshot()
        streams = [stub.Receive(queue_pb2.ReceiveRequest(queue="tasks")) for _ in range(3)]
        try:
            await wait_for_streams(server, 3)
            _, info = await expect(first_response(stub.Receive(queue_pb2.ReceiveRequest(queue="tasks"))),
                                   EXHAUSTED, "'tasks'", "3 open Receive streams")
            assert info["reason"] == "LIMIT_EXCEEDED"
            # The limit is per queue.
            other = stub.Receive(queue_pb2.ReceiveRequest(queue="other", max_duration=duration(0.2)))
            assert [r async for r in other] == [] and await other.code() == grpc.StatusCode.OK
            assert stored.snapshot() == before
            # Closing a stream makes room for another.
            streams.pop().cancel()
            await wait_for_streams(server, 2)
            again = stub.Receive(queue_pb2.ReceiveRequest(queue="tasks", max_duration=duration(0.2)))
            assert [r async for r in again] == [] and await again.code() == grpc.StatusCode.OK
        finally:
            for s in streams:
                s.cancel()
        await wait_for_streams(server, 0)


async def test_stream_limit_at_the_default_of_1000(stub, stored, server):
    await stub.Ack(ack_req("tasks", key("b")))
    streams = [stub.Receive(queue_pb2.ReceiveRequest(queue="tasks")) for _ in range(1000)]
    try:
        await wait_for_streams(server, 1000, timeout=30)
        await expect(first_response(stub.Receive(queue_pb2.ReceiveRequest(queue="tasks"))),
                     EXHAUSTED, "1000 open Receive streams")
    finally:
        for s in streams:
            s.cancel()
    await wait_for_streams(server, 0)


# -- whole commits, responses and bytes that do not decode ------------------------------


async def test_a_commits_limit_counts_all_its_mutations(stub, stored):
    # 2 sends of 600 messages each: every mutation is under the 1000 of a request, the Commit is not.
    before = stored.snapshot()
    sends = [queue_pb2.Mutation(send=send_req("tasks", *[text_message(f"m{j}-{i}", "x") for i in range(600)]))
             for j in range(2)]
    await expect(stub.Commit(queue_pb2.CommitRequest(request_id="big-commit", mutations=sends)), INVALID,
                 "at most 1000", "1200", "split")
    acks = queue_pb2.Mutation(ack=ack_req("tasks", *[key(f"m{i}") for i in range(600)], ignore_not_found=True))
    await expect(stub.Commit(queue_pb2.CommitRequest(mutations=[sends[0], acks])), INVALID, "at most 1000")
    assert stored.snapshot() == before
    # At the limit it commits.
    fits = [queue_pb2.Mutation(send=send_req("tasks", *[text_message(f"m{j}-{i}", "x") for i in range(500)]))
            for j in range(2)]
    reply = await stub.Commit(queue_pb2.CommitRequest(request_id="fits", mutations=fits))
    assert sum(len(r.send.keys) for r in reply.results) == 1000


async def test_a_response_a_client_cannot_receive_is_refused_before_it_commits(stub, stored):
    # 400 keys of 11 kB: the request (4.4 MB) is within the server's 16 MiB, its response (the keys
    # again) over the 4 MiB a default client receives. Refused, nothing stored; not committed and then
    # lost to the client's RESOURCE_EXHAUSTED, so that a resend would not duplicate it.
    before = stored.snapshot()
    big = [text_message(f"{i:04d}" + "k" * 11_000, "x") for i in range(400)]
    _, info = await expect(stub.Send(queue_pb2.SendRequest(queue="tasks", request_id="big-keys", messages=big)),
                           EXHAUSTED, "response", f"{Limits().max_response_bytes}-byte limit",
                           "nothing was committed")
    assert info["reason"] == "LIMIT_EXCEEDED"
    await expect(stub.Commit(queue_pb2.CommitRequest(mutations=[queue_pb2.Mutation(send=send_req("tasks", *big))])),
                 EXHAUSTED, "nothing was committed")
    assert stored.snapshot() == before


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field, encoded by hand."""
    length, size = b"", len(data)
    while True:
        length += bytes([size & 0x7F | (0x80 if size > 0x7F else 0)])
        size >>= 7
        if not size:
            break
    return bytes([number << 3 | 2]) + length + data


def nested_json_send(levels: int) -> bytes:
    """A SendRequest whose payload is a JSON array nested ``levels`` deep (protobuf's own
    classes cannot build one past their depth limit)."""
    value = struct_pb2.Value(string_value="x").SerializeToString()
    for _ in range(levels):
        value = _field(6, _field(1, value))  # Value.list_value { values: value }
    message = key("new").SerializeToString()
    return _field(1, b"tasks") + _field(2, _field(1, message) + _field(2, value))


UNDECODABLE = [
    # invalid UTF-8 in a string field (the queue name)
    ("spanq.v1.QueueService/Send", send_req("tasks", text_message("new", "x")).SerializeToString().replace(
        b"tasks", b"t\xffsks")),
    # a corrupt protobuf: a field whose length runs past the end
    ("spanq.v1.QueueService/Send", b"\x0a\x05ab"),
    # a JSON payload nested 60 levels (past protobuf's 100-message depth)
    ("spanq.v1.QueueService/Send", nested_json_send(60)),
    ("spanq.v1.QueueService/Commit", b"\x12\x80\x80"),
    ("spanq.v1.QueueService/Receive", b"\x0a\x05ab"),  # a server stream
    ("google.spanner.v1.Spanner/Commit", b"\x0a\x05ab"),  # the Spanner front-end
    ("google.spanner.v1.Spanner/ExecuteStreamingSql", b"\x0a\x01\xff"),
]


@pytest.mark.parametrize("method, data", UNDECODABLE, ids=[
    "bad-utf8", "corrupt", "json-60-deep", "commit", "receive-stream", "spanner-commit", "spanner-stream"])
async def test_a_request_that_does_not_decode_is_invalid_and_logged_once(channel, stored, caplog, method, data):
    caplog.set_level(logging.INFO)
    before = stored.snapshot()
    streaming = method.endswith(("Receive", "ExecuteStreamingSql"))
    call = (channel.unary_stream if streaming else channel.unary_unary)(f"/{method}")
    for _ in range(3):
        if streaming:
            got = call(data)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await got.read()
            failed = caught.value
        else:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(data)
            failed = caught.value
        assert failed.code() == INVALID, failed
        assert "does not decode" in failed.details() and method in failed.details()
    assert stored.snapshot() == before
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    lines = [r.getMessage() for r in caplog.records if "did not decode" in r.getMessage()]
    assert len(lines) == 1 and method in lines[0]
