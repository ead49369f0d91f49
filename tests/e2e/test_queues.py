"""Queue administration and message shapes over a real socket and PostgreSQL: create, get,
list with paging, drop (table and SQL functions gone), composite typed keys, JSON and
BYTES payloads, parent tables with ON DELETE CASCADE, and the SQL surface."""

import base64
import dataclasses
from datetime import datetime, timedelta, timezone

import grpc
import pytest

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.ground.config import Limits
from spanq_server.server import start

from ..helpers import (
    ack, create_queue, duration, error_of, key, open_stream, plain, send, spanner_ddl, value,
)


def column(name: str, type_: int) -> queue_pb2.KeyColumn:
    return queue_pb2.KeyColumn(name=name, type=type_)


def functions(sql, queue: str) -> list[str]:
    """The queue's SQL functions in schema spanq, from the PostgreSQL catalog."""
    return [row[0] for row in sql.execute(
        "SELECT p.proname FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'spanq' AND p.proname IN (%s, %s) ORDER BY p.proname",
        (f"receive_{queue}", f"renewlease_{queue}"),
    ).fetchall()]


def table_exists(sql, name: str) -> bool:
    return sql.execute("SELECT to_regclass(format('public.%%I', %s::text)) IS NOT NULL", (name,)).fetchone()[0]


# -- create, get, list, drop --------------------------------------------------------------


async def test_create_and_get_queue(stub, sql):
    created = await create_queue(
        stub, "orders", key_columns=[column("shop", queue_pb2.INT64), column("order_id", queue_pb2.STRING)],
        payload_type=queue_pb2.JSON, lease_duration=duration(30), initial_backoff=duration(2),
        max_backoff=duration(600),
    )
    assert created.name == "orders"
    assert [(c.name, c.type) for c in created.key_columns] == [("shop", queue_pb2.INT64),
                                                                ("order_id", queue_pb2.STRING)]
    assert created.payload_type == queue_pb2.JSON
    assert created.lease_duration.ToTimedelta() == timedelta(seconds=30)
    assert created.initial_backoff.ToTimedelta() == timedelta(seconds=2)
    assert created.max_backoff.ToTimedelta() == timedelta(seconds=600)
    assert abs(created.create_time.ToDatetime(tzinfo=timezone.utc) - datetime.now(timezone.utc)) < timedelta(minutes=1)

    got = await stub.GetQueue(queue_pb2.GetQueueRequest(name="orders"))
    assert got == created

    # A queue is a plain table with its functions beside it.
    assert table_exists(sql, "orders")
    assert functions(sql, "orders") == ["receive_orders", "renewlease_orders"]
    columns = [row[0] for row in sql.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'public.orders'::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum").fetchall()]
    assert columns[:4] == ["shop", "order_id", "payload", "deliver_time"]


async def test_queue_defaults(stub):
    created = await create_queue(stub, "plain")
    assert [(c.name, c.type) for c in created.key_columns] == [("id", queue_pb2.STRING)]
    assert created.payload_type == queue_pb2.BYTES
    assert created.lease_duration.ToTimedelta() == timedelta(seconds=10)
    assert created.initial_backoff.ToTimedelta() == timedelta(seconds=1)
    assert created.max_backoff.ToTimedelta() == timedelta(hours=1)
    assert created.max_delivery_attempts == 0 and created.dead_letter_queue == "" and created.parent_table == ""
    zero = await create_queue(stub, "nobackoff", initial_backoff=duration(0))
    assert zero.initial_backoff.ToTimedelta() == timedelta(0)


async def test_create_existing_queue_or_table_is_already_exists(stub, sql):
    await create_queue(stub, "orders")
    code, _, info = await error_of(create_queue(stub, "orders"))
    assert code == grpc.StatusCode.ALREADY_EXISTS and info["reason"] == "QUEUE_ALREADY_EXISTS"
    sql.execute("CREATE TABLE customers (id bigint PRIMARY KEY)")
    code, _, _ = await error_of(create_queue(stub, "customers"))
    assert code == grpc.StatusCode.ALREADY_EXISTS


INVALID_DEFINITIONS = [
    {"name": "Orders"},
    {"name": "1orders"},
    {"name": "orders; drop table x"},
    {"name": "o" * 49},
    {"name": ""},
    {"name": "q", "key_columns": [column("payload", queue_pb2.STRING)]},
    {"name": "q", "key_columns": [column("spanq_x", queue_pb2.STRING)]},
    {"name": "q", "key_columns": [column("Bad Name", queue_pb2.STRING)]},
    {"name": "q", "key_columns": [column("a", queue_pb2.STRING), column("a", queue_pb2.INT64)]},
    {"name": "q", "key_columns": [column("a", queue_pb2.JSON)]},
    {"name": "q", "key_columns": [column("a", queue_pb2.TYPE_CODE_UNSPECIFIED)]},
    {"name": "q", "payload_type": queue_pb2.INT64},
    {"name": "q", "lease_duration": duration(0.5)},
    {"name": "q", "initial_backoff": duration(10), "max_backoff": duration(5)},
    {"name": "q", "max_delivery_attempts": 3},
    {"name": "q", "dead_letter_queue": "q"},
    {"name": "q", "parent_table": "nosuchtable", "key_columns": [column("a", queue_pb2.INT64)]},
]


async def test_invalid_queue_definitions(stub, sql):
    for fields in INVALID_DEFINITIONS:
        fields = dict(fields)
        name = fields.pop("name")
        code, message, _ = await error_of(create_queue(stub, name, **fields))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, fields, message)
        assert message  # says what was wrong
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone()[0] == 0
    assert sql.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0


async def test_list_queues_pages(stub):
    names = ["q_c", "q_a", "q_e", "q_b", "q_d"]
    for name in names:
        await create_queue(stub, name)
    seen, token, pages = [], "", 0
    while True:
        page = await stub.ListQueues(queue_pb2.ListQueuesRequest(page_size=2, page_token=token))
        pages += 1
        assert len(page.queues) <= 2
        seen.extend(q.name for q in page.queues)
        token = page.next_page_token
        if not token:
            break
        assert pages < 10
    assert seen == sorted(names) and pages == 3

    everything = await stub.ListQueues(queue_pb2.ListQueuesRequest())
    assert [q.name for q in everything.queues] == sorted(names) and everything.next_page_token == ""
    exact = await stub.ListQueues(queue_pb2.ListQueuesRequest(page_size=5))
    assert len(exact.queues) == 5 and exact.next_page_token == ""

    code, _, _ = await error_of(stub.ListQueues(queue_pb2.ListQueuesRequest(page_token="not a token!")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _, _ = await error_of(stub.ListQueues(queue_pb2.ListQueuesRequest(page_size=-1)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_drop_queue_removes_table_and_functions(stub, sql):
    await create_queue(stub, "orders", payload_type=queue_pb2.STRING)
    await create_queue(stub, "keep", payload_type=queue_pb2.STRING)
    await send(stub, "orders", queue_pb2.SendMessage(key=key("a"), payload=value("x")))
    assert functions(sql, "orders") == ["receive_orders", "renewlease_orders"]

    await stub.DropQueue(queue_pb2.DropQueueRequest(name="orders"))
    assert not table_exists(sql, "orders")
    assert functions(sql, "orders") == []
    assert sql.execute("SELECT count(*) FROM spanq.queues WHERE name = 'orders'").fetchone()[0] == 0
    assert table_exists(sql, "keep") and functions(sql, "keep") == ["receive_keep", "renewlease_keep"]

    for call in (stub.GetQueue(queue_pb2.GetQueueRequest(name="orders")),
                 stub.DropQueue(queue_pb2.DropQueueRequest(name="orders")),
                 send(stub, "orders", queue_pb2.SendMessage(key=key("a"), payload=value("x")))):
        code, _, info = await error_of(call)
        assert code == grpc.StatusCode.NOT_FOUND and info["reason"] == "QUEUE_NOT_FOUND"
    assert [q.name for q in (await stub.ListQueues(queue_pb2.ListQueuesRequest())).queues] == ["keep"]

    # The name is free again, and the new queue starts empty.
    await create_queue(stub, "orders", payload_type=queue_pb2.STRING)
    assert sql.execute("SELECT count(*) FROM orders").fetchone()[0] == 0


async def test_drop_of_a_dead_letter_queue_in_use_is_refused(stub, sql):
    await create_queue(stub, "graveyard")
    await create_queue(stub, "tasks", max_delivery_attempts=3, dead_letter_queue="graveyard")
    code, _, _ = await error_of(stub.DropQueue(queue_pb2.DropQueueRequest(name="graveyard")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert table_exists(sql, "graveyard") and functions(sql, "graveyard")
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="tasks"))
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="graveyard"))
    assert not table_exists(sql, "graveyard")


async def test_drop_of_a_queue_another_table_references_is_refused(stub, sql):
    """The application's table with a foreign key to a queue (or a view over it) keeps it."""
    await create_queue(stub, "orders", payload_type=queue_pb2.STRING)
    sql.execute("CREATE TABLE receipts (order_id text REFERENCES orders (id))")
    code, text, info = await error_of(stub.DropQueue(queue_pb2.DropQueueRequest(name="orders")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION, text
    assert "other objects depend on its table" in text and "receipts" in text, text
    assert info == {"reason": "FAILED_PRECONDITION", "queue": "orders"}
    assert table_exists(sql, "orders") and functions(sql, "orders")
    assert (await stub.GetQueue(queue_pb2.GetQueueRequest(name="orders"))).name == "orders"
    sql.execute("DROP TABLE receipts")
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="orders"))
    assert not table_exists(sql, "orders")


async def test_a_queue_whose_index_name_is_taken_is_already_exists(stub, sql):
    """Queue x's indexes are spanq_dt_x and spanq_lt_x: a relation of either name keeps x from
    being created, with ALREADY_EXISTS naming it, and nothing stored."""
    sql.execute("CREATE TABLE spanq_dt_x (a int)")
    sql.execute("CREATE TABLE other (a int)")
    sql.execute("CREATE INDEX spanq_lt_y ON other (a)")
    for name, taken in (("x", "spanq_dt_x"), ("y", "spanq_lt_y")):
        code, text, info = await error_of(create_queue(stub, name))
        assert code == grpc.StatusCode.ALREADY_EXISTS, text
        assert f"a table or index named {taken!r} already exists" in text and f"queue {name!r} needs" in text, text
        assert not table_exists(sql, name) and functions(sql, name) == []
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone()[0] == 0
    sql.execute("DROP TABLE spanq_dt_x")
    assert (await create_queue(stub, "x")).name == "x"


async def test_create_queue_if_not_exists_passes_over_a_queue_not_a_table_in_the_way(stub, channel, sql):
    """The Spanner front-end's IF NOT EXISTS passes over an existing queue only."""
    pytest.importorskip("google.cloud.spanner")
    sql.execute("CREATE TABLE spanq_lt_x (a int)")
    sql.execute("CREATE TABLE users (a int)")
    await create_queue(stub, "q")
    for name, message in (("x", "a table or index named 'spanq_lt_x' already exists"),
                          ("users", "a queue, table or type named 'users' already exists")):
        operation = await spanner_ddl(
            channel, f"CREATE QUEUE IF NOT EXISTS {name} (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) "
                     "PRIMARY KEY (Id)")
        assert operation.error.code == grpc.StatusCode.ALREADY_EXISTS.value[0], operation.error
        assert message in operation.error.message
    operation = await spanner_ddl(channel, "CREATE QUEUE IF NOT EXISTS Q (Id INT64 NOT NULL, Payload BYTES(MAX) "
                                           "NOT NULL) PRIMARY KEY (Id)")
    assert not operation.HasField("error")
    assert sql.execute("SELECT name FROM spanq.queues").fetchall() == [("q",)]


async def test_key_columns_named_after_postgresql_system_columns_are_invalid(stub, sql):
    for name in ("ctid", "xmin", "xmax", "cmin", "cmax", "tableoid"):
        code, text, _ = await error_of(create_queue(stub, "q", key_columns=[column(name, queue_pb2.STRING)]))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, text)
        assert f"key column name {name!r} is reserved" in text and "system column" in text, text
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone()[0] == 0
    assert sql.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0


async def test_key_columns_named_like_the_sql_functions_own_columns_work(stub, sql):
    """attempt and old_token were columns of the receive and renew functions' own, beside
    the key columns: a key column of either name made a reference ambiguous (INTERNAL)."""
    keys = [column("attempt", queue_pb2.STRING), column("old_token", queue_pb2.INT64)]
    await create_queue(stub, "graves", key_columns=keys, payload_type=queue_pb2.STRING)
    await create_queue(stub, "jobs", key_columns=keys, payload_type=queue_pb2.STRING, initial_backoff=duration(0),
                       max_delivery_attempts=1, dead_letter_queue="graves")
    await send(stub, "jobs", *[queue_pb2.SendMessage(key=key(k, 1), payload=value(k)) for k in ("a", "b")])
    async with open_stream(stub, "jobs", max_batch_size=1) as s:
        first, second = await s.take(2)
    renewed = await stub.RenewLease(queue_pb2.RenewLeaseRequest(
        queue="jobs", lease_tokens=[first.lease_token], lease_duration=duration(0)))  # a nack
    assert renewed.leases[0].old_lease_token == first.lease_token
    await ack(stub, "jobs", second)
    # Past max_delivery_attempts, the nacked message moves to the dead-letter queue.
    assert sql.execute("SELECT * FROM spanq.receive_jobs(5)").fetchall() == []
    assert sql.execute("SELECT attempt, old_token FROM graves").fetchall() == [(plain(first.key)[0], 1)]
    assert sql.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


async def test_queue_limit(stub, server_config):
    # conftest's server uses the default limit; a tiny limit needs a server of its own.
    small = await start(dataclasses.replace(server_config, limits=Limits(max_queues=2)))
    try:
        async with grpc.aio.insecure_channel(small.target) as channel:
            limited = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(limited, "one")
            await create_queue(limited, "two")
            code, _, _ = await error_of(create_queue(limited, "three"))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
            await limited.DropQueue(queue_pb2.DropQueueRequest(name="one"))
            await create_queue(limited, "three")
    finally:
        await small.stop(0)


# -- keys --------------------------------------------------------------------------------


async def test_composite_keys_round_trip(stub, sql):
    await create_queue(stub, "events", payload_type=queue_pb2.STRING, key_columns=[
        column("tenant", queue_pb2.INT64), column("name", queue_pb2.STRING), column("blob", queue_pb2.BYTES),
        column("at", queue_pb2.TIMESTAMP), column("urgent", queue_pb2.BOOL),
    ])
    raw = b"\x00\xff\x10spanq"
    b64 = base64.b64encode(raw).decode()
    big = 2**62 + 1  # beyond a double's exact integers: must travel as a decimal string
    sent = await send(
        stub, "events",
        queue_pb2.SendMessage(key=key(42, "m-1", b64, "2024-02-29T12:00:00.5+02:00", True), payload=value("a")),
        queue_pb2.SendMessage(key=key(str(big), "m-2", "", "2024-01-01T00:00:00Z", False), payload=value("b")),
        queue_pb2.SendMessage(key=key("-7", "ünïcødé ✓", b64, "1999-12-31T23:59:59.123456Z", True),
                              payload=value("c")),
    )
    expected = [
        ["42", "m-1", b64, "2024-02-29T10:00:00.500Z", True],
        [str(big), "m-2", "", "2024-01-01T00:00:00Z", False],
        ["-7", "ünïcødé ✓", b64, "1999-12-31T23:59:59.123456Z", True],
    ]
    assert [plain(k) for k in sent.keys] == expected

    rows = sql.execute("SELECT tenant, name, blob, at, urgent FROM events ORDER BY payload").fetchall()
    assert rows[0] == (42, "m-1", raw, datetime(2024, 2, 29, 10, 0, 0, 500000, tzinfo=timezone.utc), True)
    assert rows[1][0] == big

    async with open_stream(stub, "events") as s:
        got = sorted(await s.take(3), key=lambda m: plain(m.payload))
    assert [plain(m.key) for m in got] == expected

    # The keys as received ack the messages (and only those).
    await ack(stub, "events", *got)
    assert sql.execute("SELECT count(*) FROM events").fetchone()[0] == 0


async def test_keys_that_differ_in_one_column_are_distinct(stub):
    await create_queue(stub, "events", payload_type=queue_pb2.STRING,
                       key_columns=[column("tenant", queue_pb2.INT64), column("id", queue_pb2.STRING)])
    await send(stub, "events", *[queue_pb2.SendMessage(key=key(t, i), payload=value(f"{t}/{i}"))
                                 for t in (1, 2) for i in ("a", "b")])
    code, _, _ = await error_of(send(stub, "events", queue_pb2.SendMessage(key=key("1", "a"), payload=value("x"))))
    assert code == grpc.StatusCode.ALREADY_EXISTS  # 1 and "1" are the same INT64


async def test_bad_keys_are_invalid(stub, sql):
    await create_queue(stub, "events", payload_type=queue_pb2.STRING,
                       key_columns=[column("tenant", queue_pb2.INT64), column("id", queue_pb2.STRING)])
    bad_keys = [key(1.5, "a"), key("12x", "a"), key(str(2**63), "a"), key(2.0**60, "a"), key(1), key(1, "a", "b"),
                key(True, "a"), key(1, 2), key(None, "a"), key("--1", "a")]
    for bad in bad_keys:
        code, message, _ = await error_of(send(stub, "events", queue_pb2.SendMessage(key=bad, payload=value("x"))))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (plain(bad), message)
    assert sql.execute("SELECT count(*) FROM events").fetchone()[0] == 0


async def test_bad_bytes_and_timestamp_keys_are_invalid(stub):
    await create_queue(stub, "events", payload_type=queue_pb2.STRING,
                       key_columns=[column("blob", queue_pb2.BYTES), column("at", queue_pb2.TIMESTAMP)])
    for bad in (key("not base64!", "2024-01-01T00:00:00Z"), key("AAAA", "yesterday")):
        code, _, _ = await error_of(send(stub, "events", queue_pb2.SendMessage(key=bad, payload=value("x"))))
        assert code == grpc.StatusCode.INVALID_ARGUMENT


# -- payloads -----------------------------------------------------------------------------


JSON_PAYLOADS = [
    {"order": 17, "items": [{"sku": "a-1", "qty": 2}], "paid": True, "note": None},
    [1, "two", 3.5, None, False, {"nested": []}],
    42,
    -0.25,
    1e300,
    None,
    "just a string",
    True,
    {},
    [],
    {"ünï": "cødé ✓", "quote\"": "back\\slash"},
]


async def test_json_payloads_round_trip(stub, sql):
    await create_queue(stub, "docs", payload_type=queue_pb2.JSON)
    await send(stub, "docs", *[queue_pb2.SendMessage(key=key(f"k{i:02}"), payload=value(p))
                               for i, p in enumerate(JSON_PAYLOADS)])
    # Stored as jsonb, queryable in SQL.
    assert sql.execute("SELECT payload->>'order' FROM docs WHERE id = 'k00'").fetchone()[0] == "17"
    assert sql.execute("SELECT jsonb_typeof(payload) FROM docs WHERE id = 'k05'").fetchone()[0] == "null"
    async with open_stream(stub, "docs") as s:
        got = await s.take(len(JSON_PAYLOADS))
    by_key = {plain(m.key)[0]: plain(m.payload) for m in got}
    assert [by_key[f"k{i:02}"] for i in range(len(JSON_PAYLOADS))] == JSON_PAYLOADS


async def test_bytes_payloads_round_trip(stub, sql):
    await create_queue(stub, "blobs")  # BYTES by default
    data = bytes(range(256))
    await send(stub, "blobs", queue_pb2.SendMessage(key=key("b"), payload=value(base64.b64encode(data).decode())),
               queue_pb2.SendMessage(key=key("empty"), payload=value("")))
    assert bytes(sql.execute("SELECT payload FROM blobs WHERE id = 'b'").fetchone()[0]) == data
    async with open_stream(stub, "blobs") as s:
        got = {plain(m.key)[0]: base64.b64decode(plain(m.payload)) for m in await s.take(2)}
    assert got == {"b": data, "empty": b""}


async def test_payloads_of_the_wrong_type_are_invalid(stub, sql):
    await create_queue(stub, "b", payload_type=queue_pb2.BYTES)
    await create_queue(stub, "s", payload_type=queue_pb2.STRING)
    for queue, bad in [("b", "not base64!"), ("b", 12), ("s", {"a": 1}), ("s", None), ("s", "nul\x00char")]:
        code, message, _ = await error_of(send(stub, queue, queue_pb2.SendMessage(key=key("k"), payload=value(bad))))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (queue, bad, message)
    assert sql.execute("SELECT (SELECT count(*) FROM b) + (SELECT count(*) FROM s)").fetchone()[0] == 0


async def test_missing_payload_is_invalid(stub):
    await create_queue(stub, "q", payload_type=queue_pb2.JSON)
    code, _, _ = await error_of(send(stub, "q", queue_pb2.SendMessage(key=key("k"))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# -- parent tables ---------------------------------------------------------------------


async def _users_and_inbox(stub, sql) -> None:
    sql.execute("CREATE TABLE users (user_id bigint PRIMARY KEY, name text)")
    sql.execute("INSERT INTO users VALUES (1, 'ada'), (2, 'bob')")
    await create_queue(stub, "inbox", payload_type=queue_pb2.STRING, parent_table="users",
                       key_columns=[column("user_id", queue_pb2.INT64), column("message_id", queue_pb2.STRING)])


async def test_parent_row_delete_cascades_to_messages(stub, sql):
    await _users_and_inbox(stub, sql)
    got = await stub.GetQueue(queue_pb2.GetQueueRequest(name="inbox"))
    assert got.parent_table == "users"
    await send(stub, "inbox", *[queue_pb2.SendMessage(key=key(u, m), payload=value(f"{u}{m}"))
                                for u in (1, 2) for m in ("a", "b")])
    sql.execute("DELETE FROM users WHERE user_id = 1")
    assert sql.execute("SELECT user_id, message_id FROM inbox ORDER BY 1, 2").fetchall() == [(2, "a"), (2, "b")]
    async with open_stream(stub, "inbox") as s:
        got = await s.take(2)
        await s.quiet(0.2)
    assert sorted(plain(m.key) for m in got) == [["2", "a"], ["2", "b"]]


async def test_send_without_parent_row_is_not_found_and_stores_nothing(stub, sql):
    await _users_and_inbox(stub, sql)
    code, message, info = await error_of(send(
        stub, "inbox",
        queue_pb2.SendMessage(key=key(1, "ok"), payload=value("x")),
        queue_pb2.SendMessage(key=key(99, "orphan"), payload=value("y")),
    ))
    assert code == grpc.StatusCode.NOT_FOUND, message
    assert info["reason"] == "PARENT_ROW_NOT_FOUND"
    assert sql.execute("SELECT count(*) FROM inbox").fetchone()[0] == 0


async def test_parent_table_key_must_match(stub, sql):
    sql.execute("CREATE TABLE users (user_id bigint PRIMARY KEY)")
    sql.execute("CREATE TABLE pairs (a bigint, b bigint, PRIMARY KEY (a, b))")
    sql.execute("CREATE TABLE nokey (a bigint)")
    cases = [
        ("users", [column("user_id", queue_pb2.STRING), column("m", queue_pb2.STRING)]),  # type mismatch
        ("pairs", [column("a", queue_pb2.INT64)]),  # shorter than the parent's key
        ("nokey", [column("a", queue_pb2.INT64)]),  # no primary key
        ("users", []),  # generated key cannot start with the parent's key
    ]
    for parent, columns in cases:
        code, message, _ = await error_of(create_queue(stub, "inbox", parent_table=parent, key_columns=columns))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (parent, message)
        assert not table_exists(sql, "inbox")
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone()[0] == 0


# -- the SQL surface ----------------------------------------------------------------------


async def test_sql_functions_receive_and_renew(stub, sql):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "tasks", *[queue_pb2.SendMessage(key=key(k), payload=value(k)) for k in ("a", "b", "c")])
    rows = sql.execute(
        "SELECT id, payload, spanq_lease_token, spanq_lease_expiration_timestamp, spanq_last_batch_message "
        "FROM spanq.receive_tasks(2)").fetchall()
    assert len(rows) == 2
    assert len({r[2] for r in rows}) == 2
    assert [r[4] for r in rows] == [False, True]
    renewed = sql.execute(
        "SELECT spanq_old_lease_token, spanq_new_lease_token, spanq_lease_expiration_timestamp "
        "FROM spanq.renewlease_tasks(%s)", ([rows[0][2], "sql.nope"],)).fetchall()
    assert len(renewed) == 1 and renewed[0][0] == rows[0][2] and renewed[0][1] not in (None, rows[0][2])
    # A SQL receiver and a gRPC stream never hold the same message.
    async with open_stream(stub, "tasks") as s:
        m = await s.next()
        await s.quiet(0.2)
    assert plain(m.key) == ["c"]
    # ack is a DELETE by key, as in Spanner.
    assert sql.execute("DELETE FROM tasks WHERE id = %s", (rows[0][0],)).rowcount == 1


async def test_dropping_a_queue_ends_its_open_streams_with_not_found(server_config, clock, waiting):
    """At once, not at the stream's next poll (30 s here)."""
    import asyncio

    slow_poll = dataclasses.replace(server_config, poll_interval=timedelta(seconds=30))
    running = await start(slow_poll, clock=clock)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(name="doomed")))
            call = stub.Receive(queue_pb2.ReceiveRequest(queue="doomed"))
            reader = asyncio.ensure_future(call.read())
            await waiting.wait(match=lambda v: v.queue == "doomed", what="the stream open and idle")
            await stub.DropQueue(queue_pb2.DropQueueRequest(name="doomed"))
            done, _ = await asyncio.wait([reader], timeout=5)
            assert done, "the stream outlived its queue"
            assert isinstance(reader.exception(), grpc.aio.AioRpcError)
            assert reader.exception().code() == grpc.StatusCode.NOT_FOUND
    finally:
        await running.stop(0)
