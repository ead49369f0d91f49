"""Message headers end to end: sent through spanq.v1, the SDK and SQL, stored in
spanq_headers, delivered on Receive, shown by Peek, kept through a dead-letter move and
a redrive; every write path refuses headers past the limits and stores nothing. Then
trace context: the SDK's spans, read from the OpenTelemetry SDK's in-memory exporter,
run in one trace from a send to the callback that processed it."""

import asyncio
import json
import uuid

import grpc
import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

import spanq
import spanq.aio
import spanq.sql
from spanq_proto.v1 import queue_pb2
from spanq_server.store import Store

from ..helpers import (
    create_queue, error_of, receive_function_of_an_older_shape, receive_some, send, text_message, until,
)

STRING = queue_pb2.STRING


@pytest.fixture
async def tasks(stub):
    await create_queue(stub, "tasks", key_columns=[queue_pb2.KeyColumn(name="id", type=STRING)],
                       payload_type=STRING)
    return "tasks"


async def test_headers_round_trip_through_receive_peek_and_sql(stub, sql, tasks):
    await send(stub, "tasks", text_message("a", "x", headers={"tenant": "acme", "k.1:/-_": "v" * 1024}),
               text_message("b", "y"))
    assert sql.execute("SELECT id, spanq_headers FROM tasks ORDER BY id").fetchall() == [
        ("a", {"tenant": "acme", "k.1:/-_": "v" * 1024}), ("b", None)]
    peeked = await stub.Peek(queue_pb2.PeekRequest(queue="tasks"))
    assert [dict(m.headers) for m in peeked.messages] == [{"tenant": "acme", "k.1:/-_": "v" * 1024}, {}]
    got = await receive_some(stub, "tasks", 2)
    assert {m.key.values[0].string_value: dict(m.headers) for m in got} == {
        "a": {"tenant": "acme", "k.1:/-_": "v" * 1024}, "b": {}}
    # psql: an INSERT sets them, the receive function returns them.
    sql.execute("""INSERT INTO tasks (id, payload, spanq_headers) VALUES ('c', 'z', '{"via": "psql"}')""")
    [(headers,)] = sql.execute("SELECT spanq_headers FROM spanq.receive_tasks(5)").fetchall()
    assert headers == {"via": "psql"}


@pytest.mark.parametrize("headers, code, said", [
    ({f"h{i}": "v" for i in range(33)}, grpc.StatusCode.INVALID_ARGUMENT, "33 headers, over the limit of 32"),
    ({"": "v"}, grpc.StatusCode.INVALID_ARGUMENT, "header key '' must be 1 to 128"),
    ({"bad key": "v"}, grpc.StatusCode.INVALID_ARGUMENT, "header key 'bad key' must be"),
    ({"k" * 129: "v"}, grpc.StatusCode.INVALID_ARGUMENT, "must be 1 to 128 letters"),
    ({"big": "é" * 513}, grpc.StatusCode.INVALID_ARGUMENT, "header 'big' is 1026 bytes, over the limit of 1024"),
    ({"h": "v" * 20}, grpc.StatusCode.RESOURCE_EXHAUSTED,
     "payload with its headers' 21 bytes is 1048587 bytes, over the 1048576-byte limit"),
])
async def test_bad_headers_are_refused_on_send_and_commit_and_nothing_is_stored(stub, sql, tasks, headers, code, said):
    # The last case: headers that fit, on a payload that fits alone but not with them.
    bad = text_message("bad", "x" * (1024 * 1024 - 10) if "payload" in said else "x", headers=headers)
    for call in (send(stub, "tasks", text_message("good", "x"), bad),
                 stub.Commit(queue_pb2.CommitRequest(mutations=[queue_pb2.Mutation(
                     send=queue_pb2.SendRequest(queue="tasks", messages=[text_message("good", "x"), bad]))]))):
        got, message, _ = await error_of(call)
        assert got == code and said in message, message
    assert sql.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


async def test_sql_writes_are_held_to_the_limits_too(server, sql, tasks, database_url):
    with pytest.raises(psycopg.errors.CheckViolation):
        sql.execute("""INSERT INTO tasks (id, payload, spanq_headers) VALUES ('a', 'x', '{"n": 1}')""")
    with pytest.raises(psycopg.errors.CheckViolation):
        sql.execute("INSERT INTO tasks (id, payload, spanq_headers) VALUES ('a', 'x', '[1]')")
    with psycopg.connect(database_url) as conn:
        with pytest.raises(spanq.InvalidArgument, match="headers, priority or ordering key outside the limits"):
            spanq.sql.send(conn, "tasks", "a", "x", headers={"bad key": "v"})
        conn.rollback()
        spanq.sql.send(conn, "tasks", "b", "x", headers={"tenant": "acme"}, priority=3)
        conn.commit()
    assert sql.execute("SELECT id, spanq_headers, spanq_priority FROM tasks").fetchall() == [
        ("b", {"tenant": "acme"}, 3)]


async def test_headers_survive_dead_lettering_and_redrive(server, sql, stub):
    await create_queue(stub, "graveyard", key_columns=[queue_pb2.KeyColumn(name="id", type=STRING)],
                       payload_type=STRING)
    await create_queue(stub, "work", key_columns=[queue_pb2.KeyColumn(name="id", type=STRING)],
                       payload_type=STRING, max_delivery_attempts=1, dead_letter_queue="graveyard")
    await send(stub, "work", text_message("k", "poison", headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16
                                                                  + "-01"}, priority=7))
    [token] = [m.lease_token for m in await receive_some(stub, "work", 1)]
    await stub.RenewLease(queue_pb2.RenewLeaseRequest(queue="work", lease_tokens=[token]))  # a nack
    # The next receive, past the backoff, moves it (its one attempt spent) with its headers and priority.
    sql.execute("UPDATE work SET deliver_time = now()")
    assert sql.execute("SELECT * FROM spanq.receive_work(10)").fetchall() == []
    assert sql.execute("SELECT spanq_headers, spanq_priority FROM graveyard").fetchall() == [
        ({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, 7)]
    async with spanq.aio.Client(server.target) as client:
        [dead] = (await client.peek("graveyard")).messages
        assert dead.headers["traceparent"].startswith("00-111") and dead.priority == 7
        await client.redrive("graveyard")
    assert sql.execute("SELECT spanq_headers, spanq_priority FROM work").fetchall() == [
        ({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, 7)]


async def test_migration_0012_gives_existing_queues_headers_and_priorities(server, stub, sql, tasks, database_url):
    # As before migration 0012: no columns, no index, the receive function of the old
    # shape, whose EXECUTE is granted to one role only.
    await send(stub, "tasks", text_message("old", "x"))
    sql.execute("DROP TRIGGER spanq_headers_limits ON tasks")
    sql.execute("ALTER TABLE tasks DROP COLUMN spanq_headers, DROP COLUMN spanq_priority")
    receive_function_of_an_older_shape(sql, "tasks")
    # A role is the cluster's, not the test database's: its own name, dropped at the end.
    worker = f"spanq_worker_{uuid.uuid4().hex[:12]}"
    sql.execute(f"CREATE ROLE {worker}")
    try:
        await _migrate_keeping_grants(sql, worker, stub, database_url)
    finally:
        sql.execute(f"DROP OWNED BY {worker}")
        sql.execute(f"DROP ROLE {worker}")


async def _migrate_keeping_grants(sql, worker, stub, database_url):
    sql.execute("REVOKE EXECUTE ON FUNCTION spanq.receive_tasks FROM PUBLIC")
    sql.execute(f"GRANT EXECUTE ON FUNCTION spanq.receive_tasks TO {worker}")
    sql.execute("DROP FUNCTION spanq.headers_check, spanq.headers_ok")
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 12")

    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [12]

    assert sql.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'spanq_pr_tasks'").fetchone()[0].endswith(
        "(spanq_priority, deliver_time) WHERE (spanq_priority > 0)")
    grants = sql.execute("SELECT has_function_privilege(%s, 'spanq.receive_tasks(integer, interval, "
                         "text, timestamptz)', 'EXECUTE'), has_function_privilege('public', "
                         "'spanq.receive_tasks(integer, interval, text, timestamptz)', 'EXECUTE')",
                         [worker]).fetchone()
    assert grants == (True, False)
    await send(stub, "tasks", text_message("new", "y", headers={"h": "v"}, priority=2))
    rows = sql.execute("SELECT id, spanq_headers, spanq_priority FROM spanq.receive_tasks(5)").fetchall()
    assert rows == [("new", {"h": "v"}, 2), ("old", None, 0)]


# -- trace context -------------------------------------------------------------


@pytest.fixture(scope="module")
def spans():
    """An in-memory exporter behind a global tracer provider, for this module only: OpenTelemetry
    sets its global once per process, so it is put back after (as OpenTelemetry's own test
    utilities do), or every later test's sends would carry a traceparent header."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace._PROXY_TRACER_PROVIDER = trace.ProxyTracerProvider()


async def test_one_trace_runs_from_the_request_that_sent_to_the_callback(server, spans):
    spans.clear()
    tracer = trace.get_tracer("the web app")
    processed = asyncio.Event()
    seen = {}

    async def handle(message: spanq.Message) -> None:
        seen["headers"] = message.headers
        seen["span"] = trace.get_current_span().get_span_context()
        processed.set()

    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("emails", payload_type="STRING")
        with tracer.start_as_current_span("POST /signup", kind=trace.SpanKind.SERVER) as request:
            await client.send("emails", "welcome", headers={"tenant": "acme"})
        async with client.subscribe("emails", handle):
            await asyncio.wait_for(processed.wait(), 10)
        await until(lambda: any(s.name == "process emails" for s in spans.get_finished_spans()), "the process span")

    by_name = {s.name: s for s in spans.get_finished_spans()}
    web, producer, consumer = by_name["POST /signup"], by_name["send emails"], by_name["process emails"]
    assert producer.kind == trace.SpanKind.PRODUCER and consumer.kind == trace.SpanKind.CONSUMER
    trace_id = request.get_span_context().trace_id
    assert {web.context.trace_id, producer.context.trace_id, consumer.context.trace_id} == {trace_id}
    assert producer.parent.span_id == web.context.span_id
    assert consumer.parent.span_id == producer.context.span_id
    assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
    for span, operation in ((producer, "send"), (consumer, "process")):
        assert span.attributes["messaging.system"] == "spanq"
        assert span.attributes["messaging.destination.name"] == "emails"
        assert span.attributes["messaging.operation.name"] == operation
        assert span.attributes["messaging.operation.type"] == operation
    # The W3C header the consumer read, beside the application's own.
    assert seen["headers"]["tenant"] == "acme"
    assert seen["headers"]["traceparent"].startswith(f"00-{trace_id:032x}-{producer.context.span_id:016x}-")
    assert seen["span"].span_id == consumer.context.span_id


async def test_published_messages_carry_a_create_span_each(server, spans):
    spans.clear()
    got: list[spanq.Message] = []
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("events", payload_type="STRING")
        with trace.get_tracer("app").start_as_current_span("job"):
            futures = [await client.publish("events", f"e{i}", priority=i) for i in range(3)]
            await asyncio.gather(*futures)
        got = await client.receive("events", 3)
    creates = [s for s in spans.get_finished_spans() if s.name == "create events"]
    assert len(creates) == 3 and all(s.kind == trace.SpanKind.PRODUCER for s in creates)
    assert sorted(m.headers["traceparent"].split("-")[2] for m in got) == sorted(
        f"{s.context.span_id:016x}" for s in creates)
    assert [m.priority for m in got] == [2, 1, 0]


async def test_the_cli_sends_headers_and_priorities_and_shows_them(server, stub):
    from ..tools.test_cli import spanq_cli

    await create_queue(stub, "tasks", key_columns=[queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64)],
                       payload_type=STRING)
    t = server.target
    code, out, err = await spanq_cli(t, "send", "tasks", "hi", "--key", "1", "--header", "tenant=acme",
                                     "--header", "run=7=x", "--priority", "4")
    assert code == 0, err
    code, out, err = await spanq_cli(t, "send", "tasks", "-", "--priority", "2",
                                     stdin='{"key": [2], "payload": "x"}\n')
    assert code == 0, err
    code, out, err = await spanq_cli(t, "peek", "tasks", "--json")
    assert code == 0, err
    assert [(m["key"], m["priority"], m["headers"]) for m in json.loads(out)] == [
        ([1], 4, {"tenant": "acme", "run": "7=x"}), ([2], 2, {})]
    code, out, err = await spanq_cli(t, "tail", "tasks", "--max", "2", "--ack")
    assert code == 0 and out.splitlines() == ["1\tattempt 1\tacked\tpriority 4\trun=7=x tenant=acme\thi",
                                              "2\tattempt 1\tacked\tpriority 2\tx"], err
    for bad, said in ((["--header", "novalue"], "'novalue' is not KEY=VALUE"), (["--priority", "10"], "10")):
        code, out, err = await spanq_cli(t, "send", "tasks", "hi", "--key", "3", *bad)
        assert code == 2 and said in err, err
    code, out, err = await spanq_cli(t, "send", "tasks", "hi", "--key", "3", "--header", "bad key=v")
    assert code != 0 and "header key 'bad key' must be 1 to 128" in err, err
    code, out, err = await spanq_cli(t, "send", "tasks", "hi", "--key", "4", "--header", "a=b", "--priority", "1")
    code, out, err = await spanq_cli(t, "peek", "tasks")
    assert code == 0 and out.splitlines()[0].split() == [
        "KEY", "STATE", "ATTEMPTS", "PRIORITY", "DELIVER", "TIME", "SENT", "HEADERS", "PAYLOAD"], err
    assert out.splitlines()[1].split()[3] == "1" and "a=b" in out.splitlines()[1], out
