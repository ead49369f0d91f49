"""Small helpers shared by the tests: building requests and reading streams."""

import asyncio
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf import duration_pb2, json_format, struct_pb2
from grpc_status import rpc_status

from spanq._proto.spanq.v1 import queue_pb2, queue_pb2_grpc
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
