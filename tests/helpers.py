"""Small helpers shared by the tests: building requests and reading streams."""

import asyncio
import inspect
import time
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf import duration_pb2, json_format, struct_pb2
from grpc_status import rpc_status

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from google.rpc import error_details_pb2


def duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromTimedelta(timedelta(seconds=seconds))
    return d


def key(*values: Any) -> struct_pb2.ListValue:
    out = struct_pb2.ListValue()
    out.extend(values)
    return out


def value(data: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    json_format.ParseDict(data, out)
    return out


def plain(message: Any) -> Any:
    """A ListValue or Value as plain Python data."""
    return json_format.MessageToDict(message)


async def create_queue(stub: queue_pb2_grpc.QueueServiceStub, name: str, **fields: Any) -> queue_pb2.Queue:
    return await stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(name=name, **fields)))


async def send(stub: queue_pb2_grpc.QueueServiceStub, queue: str, *messages: queue_pb2.SendMessage,
               request_id: str = "") -> queue_pb2.SendResponse:
    return await stub.Send(queue_pb2.SendRequest(queue=queue, messages=list(messages), request_id=request_id))


def text_message(k: str | None, payload: str, **fields: Any) -> queue_pb2.SendMessage:
    return queue_pb2.SendMessage(key=key(k) if k is not None else None, payload=value(payload), **fields)


async def receive_some(stub: queue_pb2_grpc.QueueServiceStub, queue: str, want: int, *, timeout: float = 10,
                       **fields: Any) -> list[queue_pb2.ReceivedMessage]:
    """Opens a Receive stream, reads until `want` messages arrived (or timeout), then cancels it."""
    call = stub.Receive(queue_pb2.ReceiveRequest(queue=queue, **fields))
    got: list[queue_pb2.ReceivedMessage] = []

    async def read() -> None:
        async for response in call:
            got.extend(response.messages)
            if len(got) >= want:
                return

    try:
        await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        pass
    finally:
        call.cancel()
    return got


async def until(condition: Any, what: str = "a condition", timeout: float = 10, interval: float = 0.02) -> Any:
    """The suite's one bounded poll: checks ``condition()`` (a plain callable, or one that
    returns an awaitable) every ``interval`` seconds until it is truthy, and returns that
    value; fails the test after ``timeout`` seconds. For a state the code can announce, wait
    on a signal instead (spanq_server.domain.testsignals); poll for what a test can only observe
    (a row in SQL, a metric of a server in a subprocess, a log line)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return held
        assert loop.time() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        await asyncio.sleep(interval)


def until_sync(condition: Any, what: str = "a condition", timeout: float = 10, interval: float = 0.02) -> Any:
    """``until`` for code without an event loop (fixtures, threads): blocks between checks."""
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if held:
            return held
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        time.sleep(interval)


def lock_waiters(sql: Any) -> int:
    """Sessions of the test's database waiting for a lock (a held row, a held ledger key)."""
    return int(sql.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND datname = current_database()").fetchone()[0])


async def streams_idle(waiting: Any, queue: str, n: int = 1, timeout: float = 10) -> None:
    """Until ``n`` different Receive streams of ``queue`` were heard waiting for messages, on a
    ``testsignals.stream_waiting.listen()`` listener begun before they opened (or cleared)."""
    def enough(values: list[Any]) -> bool:
        return len({v.stream for v in values if v.queue == queue and not v.full}) >= n

    await waiting.until(enough, timeout=timeout, what=f"{n} idle streams of {queue!r}")


async def until_settled(read: Any, what: str, interval: float = 0.2, timeout: float = 20) -> Any:
    """``read()`` once two readings ``interval`` seconds apart agree (something that was moving has
    stopped); fails the test after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    before = read()
    while True:
        await asyncio.sleep(interval)
        now = read()
        if now == before:
            return now
        assert loop.time() < deadline, f"timed out waiting for {what}"
        before = now


async def outcome(call: Any) -> str:
    """"OK", or the name of the status code the call failed with."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code().name
    return "OK"


async def spanner_ddl(channel: grpc.aio.Channel, *statements: str, metadata: Any = ()) -> Any:
    """The Spanner front-end's UpdateDatabaseDdl as a raw call (no client library, so a test can
    give its own metadata): its finished Operation, whose ``error`` says how the DDL failed."""
    from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as dba
    from google.longrunning import operations_pb2

    request = dba.UpdateDatabaseDdlRequest.pb()(database="projects/p/instances/i/databases/d",
                                                 statements=list(statements))
    call = channel.unary_unary("/google.spanner.admin.database.v1.DatabaseAdmin/UpdateDatabaseDdl",
                               request_serializer=type(request).SerializeToString,
                               response_deserializer=operations_pb2.Operation.FromString)
    return await call(request, metadata=metadata)


async def error_of(awaitable: Any) -> tuple[grpc.StatusCode, str, dict[str, Any]]:
    """The status code, message and ErrorInfo (reason + metadata) of a failing call."""
    try:
        await awaitable
    except grpc.aio.AioRpcError as exc:
        info: dict[str, Any] = {}
        status = rpc_status.from_call(exc)  # type: ignore[arg-type]
        if status is not None:
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    parsed = error_details_pb2.ErrorInfo()
                    detail.Unpack(parsed)
                    info = {"reason": parsed.reason, **parsed.metadata}
        return exc.code(), exc.details() or "", info
    raise AssertionError("the call succeeded but should have failed")


# -- streams read in the background (test_delivery, test_concurrency, test_queues) --------------


class ReceiveStream:
    """A Receive stream read by a background task: each message lands in ``received`` and in an
    asyncio queue that ``next``/``take``/``quiet`` consume. Use through ``open_stream``."""

    def __init__(self, stub: queue_pb2_grpc.QueueServiceStub, queue: str, **fields: Any) -> None:
        self.call = stub.Receive(queue_pb2.ReceiveRequest(queue=queue, **fields))
        self.received: list[queue_pb2.ReceivedMessage] = []
        self.responses = 0
        self._pending: asyncio.Queue[queue_pb2.ReceivedMessage] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for response in self.call:
            self.responses += 1
            for m in response.messages:
                self.received.append(m)
                self._pending.put_nowait(m)

    async def next(self, timeout: float = 5) -> queue_pb2.ReceivedMessage:
        """The next message not yet taken; fails the test after ``timeout`` seconds."""
        try:
            return await asyncio.wait_for(self._pending.get(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"no message arrived within {timeout}s (stream done: {self.task.done()})") from None

    async def take(self, n: int, timeout: float = 5) -> list[queue_pb2.ReceivedMessage]:
        """The next ``n`` messages, all within ``timeout`` seconds in total."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        return [await self.next(max(deadline - loop.time(), 0.001)) for _ in range(n)]

    async def quiet(self, seconds: float = 0.3) -> None:
        """Asserts that no message arrives for ``seconds`` (and none is waiting)."""
        try:
            m = await asyncio.wait_for(self._pending.get(), seconds)
        except asyncio.TimeoutError:
            return
        raise AssertionError(f"unexpected delivery of {plain(m.key)} (attempt {m.delivery_attempt})")

    def pending(self) -> int:
        return self._pending.qsize()

    def drain(self) -> list[queue_pb2.ReceivedMessage]:
        """Takes every message that arrived and was not taken yet, without waiting."""
        out = []
        while not self._pending.empty():
            out.append(self._pending.get_nowait())
        return out

    async def close(self) -> None:
        self.call.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass


class open_stream:
    """``async with open_stream(stub, "q", lease_duration=duration(30)) as s:`` a ReceiveStream,
    cancelled on exit."""

    def __init__(self, stub: queue_pb2_grpc.QueueServiceStub, queue: str, **fields: Any) -> None:
        self._args = (stub, queue)
        self._fields = fields

    async def __aenter__(self) -> ReceiveStream:
        self.stream = ReceiveStream(*self._args, **self._fields)
        return self.stream

    async def __aexit__(self, *exc: object) -> None:
        await self.stream.close()


async def ack(stub: queue_pb2_grpc.QueueServiceStub, queue: str, *messages: queue_pb2.ReceivedMessage,
              with_token: bool = True) -> queue_pb2.AckResponse:
    """Acks received messages by key (and their lease token unless with_token is False)."""
    return await stub.Ack(queue_pb2.AckRequest(queue=queue, acks=[
        queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token if with_token else "") for m in messages]))


async def renew(stub: queue_pb2_grpc.QueueServiceStub, queue: str, *tokens: str,
                seconds: float) -> queue_pb2.RenewLeaseResponse:
    """RenewLease for ``tokens``; seconds=0 releases them (a nack)."""
    return await stub.RenewLease(queue_pb2.RenewLeaseRequest(
        queue=queue, lease_tokens=list(tokens), lease_duration=duration(seconds)))


def stamp(ts: Any) -> Any:
    """A google.protobuf.Timestamp as an aware UTC datetime."""
    from datetime import timezone

    return ts.ToDatetime(tzinfo=timezone.utc)


def receive_function_of_an_older_shape(sql: Any, queue: str) -> None:
    """Replaces ``queue``'s receive function (a queue with one STRING key column ``id`` and STRING
    payloads) with one of fewer result columns, as before a migration that adds some."""
    sql.execute(f'DROP FUNCTION spanq."receive_{queue}"')  # test-owned names, no user input
    sql.execute(f"""CREATE FUNCTION spanq."receive_{queue}"(max_batch_size integer DEFAULT 1,
                        lease_duration interval DEFAULT '10s', lease_prefix text DEFAULT 'sql',
                        now timestamptz DEFAULT NULL)
                    RETURNS TABLE (id text, payload text, spanq_last_batch_message boolean)
                    LANGUAGE sql AS 'SELECT NULL::text, NULL::text, true'""")
