"""The SDK's clients against a real server and PostgreSQL: admin, send, receive,
ack, renew, nack, transactions, error mapping, and retries that replay one
request_id."""

import asyncio
import uuid
from datetime import datetime, timedelta, timezone

import grpc
import pytest

import spanq
import spanq.aio
from spanq import _retry
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from spanq._errors import from_rpc_error


def rpc_error(code: grpc.StatusCode, details: str, *, reason: str = "", **metadata: str) -> grpc.aio.AioRpcError:
    """A failed call as grpc.aio raises it, with an ErrorInfo detail when ``reason`` is given."""
    trailing = grpc.aio.Metadata()
    if reason:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="spanq.dev", metadata=metadata))
        status = status_pb2.Status(code=code.value[0], message=details, details=[detail])
        trailing.add("grpc-status-details-bin", status.SerializeToString())
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


async def test_async_send_receive_ack_round_trips_typed_keys(server):
    async with spanq.aio.Client(server.target) as client:
        queue = await client.create_queue(
            "orders", key_columns=[("shop", "INT64"), ("id", "STRING")], payload_type="STRING", lease_duration=5
        )
        assert queue.key_columns == (spanq.KeyColumn("shop", spanq.TypeCode.INT64), spanq.KeyColumn("id", "STRING"))
        assert queue.lease_duration == timedelta(seconds=5) and queue.create_time is not None
        assert await client.get_queue("orders") == queue
        assert [q.name for q in await client.list_queues()] == ["orders"]

        big = 2**62 + 1  # beyond a double's precision: INT64 travels as a decimal string
        assert await client.send("orders", "first", key=(big, "a")) == (big, "a")
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        await client.send_many("orders", [spanq.OutgoingMessage("later", (1, "b"), deliver_time=later)])

        [message] = await client.receive("orders", 10)
        assert message.key == (big, "a") and isinstance(message.key[0], int)
        assert message.payload == "first" and message.delivery_attempt == 1 and message.queue == "orders"
        assert message.lease_token and message.enqueue_time <= message.deliver_time <= message.lease_expiration_time
        assert await client.receive("orders", timeout=0.3) == []  # the other one is scheduled

        old_token = message.lease_token
        [renewed] = await client.renew_lease("orders", message, lease_duration=30)
        assert renewed.old_lease_token == old_token and renewed.new_lease_token == message.lease_token != old_token
        assert await client.ack("orders", message) == [True]

        await client.drop_queue("orders")
        with pytest.raises(spanq.NotFound):
            await client.send("orders", "x", key=(1, "c"))


async def test_payload_types_generated_keys_and_message_methods(server):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("blobs")  # BYTES payloads, a generated UUID key
        await client.create_queue("docs", key_columns=[("day", "TIMESTAMP"), ("flag", "BOOL"), ("raw", "BYTES")],
                                  payload_type=spanq.TypeCode.JSON, initial_backoff=0)
        generated = await client.send("blobs", b"\x00\xffbinary")
        await client.send_many("blobs", [b"two"])
        assert isinstance(generated[0], str) and len(generated[0]) == 36

        day = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
        document = {"n": 1, "x": 1.5, "list": [None, True, "s"], "nested": {"k": "v"}}
        await client.send("docs", document, key=(day, True, b"\x01\x02"))

        got = await client.receive("blobs", 2)
        assert sorted(m.payload for m in got) == [b"\x00\xffbinary", b"two"]
        await asyncio.gather(*(m.ack() for m in got))  # Message.ack() is awaitable

        [doc] = await client.receive("docs")
        assert doc.key == (day, True, b"\x01\x02") and doc.payload == document
        await doc.nack()
        [again] = await client.receive("docs")
        assert again.key == doc.key and again.delivery_attempt == 2
        lease = await again.renew(20)
        assert lease.new_lease_token == again.lease_token
        await again.ack()
        assert await client.receive("docs", timeout=0.2) == [] and await client.receive("blobs", timeout=0.2) == []


async def test_sync_client_is_a_thin_thread_safe_layer(server):
    # The server runs on this test's loop, so the blocking client is driven from other threads.
    client = spanq.Client(server.target)
    try:
        await asyncio.to_thread(client.create_queue, "sync_q", key_columns=[("id", "INT64")], payload_type="JSON")
        await asyncio.gather(*(asyncio.to_thread(client.send, "sync_q", {"i": i}, key=i) for i in range(20)))
        got: list[spanq.Message] = []
        while len(got) < 20:
            got += await asyncio.to_thread(client.receive, "sync_q", 20)
        assert sorted(m.key[0] for m in got) == list(range(20))
        assert all(m.payload == {"i": m.key[0]} for m in got)
        assert await asyncio.to_thread(client.ack, "sync_q", *got[:19]) == [True] * 19
        await asyncio.to_thread(lambda: got[19].ack().result(5))  # a Message's Future, waited on in a thread
        with pytest.raises(spanq.MessageGone):
            await asyncio.to_thread(client.ack, "sync_q", got[0].key)
        with pytest.raises(spanq.MessageGone):
            await asyncio.to_thread(lambda: got[1].ack().result(5))
    finally:
        await asyncio.to_thread(client.close)
    await asyncio.to_thread(client.close)  # idempotent
    with pytest.raises(spanq.Closed):
        await asyncio.to_thread(client.get_queue, "sync_q")
    assert spanq.Client.send.__doc__ == spanq.aio.Client.send.__doc__


async def test_transactions_commit_atomically(server):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("inbox", key_columns=[("id", "STRING")], payload_type="STRING")
        await client.create_queue("outbox", key_columns=[("id", "STRING")], payload_type="STRING")
        await client.send("inbox", "job", key="j1")
        [job] = await client.receive("inbox")

        async with client.transaction() as tx:
            tx.ack("inbox", job).send("outbox", "done", key="j1").send("inbox", "follow-up", key="j1",
                                                                        delay=timedelta(hours=1))
        assert tx.result is not None and tx.result.results == [[True], [("j1",)], [("j1",)]]
        assert not tx.result.replayed

        # All or none: the ack of a gone message sinks the send beside it.
        failing = spanq.Transaction().send("outbox", "never", key="j2").ack("outbox", "j1").ack("inbox", "nope")
        with pytest.raises(spanq.MessageGone) as caught:
            await client.commit(failing)
        assert caught.value.metadata.get("mutation_index") == "2"
        [done] = await client.receive("outbox", 5)
        assert done.key == ("j1",) and done.payload == "done"
        assert await client.receive("inbox", timeout=0.2) == []  # the follow-up is scheduled for later


async def test_errors_map_to_one_hierarchy(server):
    async with spanq.aio.Client(server.target) as client:
        with pytest.raises(spanq.NotFound) as not_found:
            await client.get_queue("missing")
        assert not_found.value.code is grpc.StatusCode.NOT_FOUND and not_found.value.reason == "QUEUE_NOT_FOUND"
        await client.create_queue("q", key_columns=[("id", "STRING")], payload_type="STRING", lease_duration=1)
        with pytest.raises(spanq.AlreadyExists):
            await client.create_queue("q")
        await client.send("q", "a", key="k")
        with pytest.raises(spanq.AlreadyExists):
            await client.send("q", "again", key="k")
        with pytest.raises(spanq.InvalidArgument) as bad_name:
            await client.create_queue("Bad Name!")
        assert isinstance(bad_name.value, ValueError) and "name" in bad_name.value.message
        with pytest.raises(spanq.InvalidArgument):  # caught before the wire: an int for a STRING column
            await client.send("q", "x", key=5)
        with pytest.raises(spanq.InvalidArgument):
            await client.send("q", b"bytes for a STRING queue", key="k2")

        [message] = await client.receive("q")
        stale = message.lease_token
        await client.renew_lease("q", stale, lease_duration=5)  # by token: the Message keeps the stale one
        with pytest.raises(spanq.LeaseLost) as lost:  # a renewed token supersedes the old one
            await client.ack("q", message)
        assert isinstance(lost.value, spanq.FailedPrecondition) and lost.value.reason == "LEASE_NOT_HELD"
        assert await client.ack("q", message.key) == [True]
        with pytest.raises(spanq.MessageGone) as gone:
            await client.ack("q", message)
        assert gone.value.code is grpc.StatusCode.OUT_OF_RANGE

    for cls in (spanq.SpanqError, spanq.NotFound, spanq.LeaseLost, spanq.CommitOutcomeUnknown, spanq.Message,
                spanq.Queue, spanq.FlowControl, spanq.Client, spanq.Transaction):
        assert cls.__module__ == "spanq", cls
    assert all(issubclass(getattr(spanq, n), spanq.SpanqError) for n in spanq.__all__
               if isinstance(getattr(spanq, n), type) and issubclass(getattr(spanq, n), Exception))


# -- retries: unit tests with a scripted RPC -------------------------------------------


FAST = spanq.Retry(initial_backoff=0.001, max_backoff=0.005, deadline=0.5, attempt_timeout=0.1)


async def test_a_mutation_replays_one_request_id_until_it_learns_the_outcome():
    seen: list[str] = []
    script = [rpc_error(grpc.StatusCode.UNKNOWN, "lost", reason="UNKNOWN_COMMIT"),
              rpc_error(grpc.StatusCode.UNAVAILABLE, "down"),
              rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "slow")]

    async def attempt(timeout: float) -> str:
        seen.append(request_id)
        if script:
            raise script.pop(0)
        return "committed"

    request_id = str(uuid.uuid4())
    assert await _retry.call(attempt, FAST, what="send", request_id=request_id) == "committed"
    assert seen == [request_id] * 4


async def test_an_outcome_that_stays_unknown_is_commit_outcome_unknown():
    async def attempt(timeout: float) -> None:
        raise rpc_error(grpc.StatusCode.UNKNOWN, "lost", reason="UNKNOWN_COMMIT")

    with pytest.raises(spanq.CommitOutcomeUnknown) as caught:
        await _retry.call(attempt, FAST, what="ack", request_id="rid-1")
    assert caught.value.request_id == "rid-1" and "rid-1" in caught.value.message

    async def refused(timeout: float) -> None:  # the server said nothing committed: a plain Unavailable
        raise rpc_error(grpc.StatusCode.UNAVAILABLE, "db down", reason="DATABASE_UNAVAILABLE")

    with pytest.raises(spanq.Unavailable):
        await _retry.call(refused, FAST, what="ack", request_id="rid-2")

    calls = 0

    async def definite(timeout: float) -> None:  # not retried
        nonlocal calls
        calls += 1
        raise rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "moved on", reason="LEASE_NOT_HELD")

    with pytest.raises(spanq.LeaseLost):
        await _retry.call(definite, FAST, what="ack", request_id="rid-3")
    assert calls == 1


def test_status_codes_map_to_error_classes():
    table = {
        grpc.StatusCode.NOT_FOUND: spanq.NotFound, grpc.StatusCode.ALREADY_EXISTS: spanq.AlreadyExists,
        grpc.StatusCode.OUT_OF_RANGE: spanq.MessageGone, grpc.StatusCode.FAILED_PRECONDITION: spanq.FailedPrecondition,
        grpc.StatusCode.ABORTED: spanq.Aborted,
        grpc.StatusCode.INVALID_ARGUMENT: spanq.InvalidArgument,
        grpc.StatusCode.RESOURCE_EXHAUSTED: spanq.ResourceExhausted, grpc.StatusCode.UNAVAILABLE: spanq.Unavailable,
        grpc.StatusCode.DEADLINE_EXCEEDED: spanq.DeadlineExceeded,
        grpc.StatusCode.UNAUTHENTICATED: spanq.Unauthenticated,
        grpc.StatusCode.PERMISSION_DENIED: spanq.PermissionDenied, grpc.StatusCode.INTERNAL: spanq.InternalError,
        grpc.StatusCode.UNKNOWN: spanq.InternalError, grpc.StatusCode.UNIMPLEMENTED: spanq.Unimplemented,
    }
    for code, cls in table.items():
        assert type(from_rpc_error(rpc_error(code, "x"))) is cls, code
    unknown = from_rpc_error(rpc_error(grpc.StatusCode.UNKNOWN, "x", reason="UNKNOWN_COMMIT", request_id="r"))
    assert isinstance(unknown, spanq.CommitOutcomeUnknown) and unknown.request_id == "r"


async def test_create_queue_exist_ok_returns_the_queue_there_when_it_matches(server):
    async with spanq.aio.Client(server.target) as client:
        made = await client.create_queue("emails", key_columns=[("id", "STRING")], payload_type="JSON",
                                         lease_duration=30)
        again = await client.create_queue("emails", key_columns=[("id", "STRING")], payload_type="JSON",
                                          lease_duration=30, exist_ok=True)
        assert again == made
        assert await client.create_queue("emails", payload_type="JSON", exist_ok=True) == made  # fields left out match
        with pytest.raises(spanq.AlreadyExists, match="named 'emails' already exists"):
            await client.create_queue("emails", payload_type="JSON")  # without exist_ok: as before
        with pytest.raises(spanq.AlreadyExists) as raised:
            await client.create_queue("emails", key_columns=[("id", "INT64")], payload_type="STRING", exist_ok=True)
        assert "exists with another definition" in str(raised.value)
        assert "payload_type is <TypeCode.JSON: 'JSON'>, not <TypeCode.STRING: 'STRING'>" in str(raised.value)
        assert await client.get_queue("emails") == made  # nothing changed


async def test_create_queue_exist_ok_does_not_take_a_table_for_a_queue(server, sql):
    sql.execute("CREATE TABLE orders (id bigint PRIMARY KEY)")
    async with spanq.aio.Client(server.target) as client:
        with pytest.raises(spanq.AlreadyExists, match="orders"):
            await client.create_queue("orders", exist_ok=True)


def test_a_type_name_is_case_insensitive_and_a_wrong_one_lists_the_names():
    assert spanq.TypeCode("json") is spanq.TypeCode.JSON
    assert spanq.Queue("q", payload_type="string").payload_type is spanq.TypeCode.STRING
    with pytest.raises(ValueError, match="'jsonb' is not a type: use one of BOOL, INT64, STRING, BYTES, TIMESTAMP, JSON"):
        spanq.Queue("q", payload_type="jsonb")
