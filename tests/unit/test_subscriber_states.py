"""The SDK subscriber's state machine alone: a fake client whose Receive streams the test
feeds by hand and whose Ack and RenewLease record what the subscriber sent. No server, no
PostgreSQL; each wait is a bounded poll (helpers.until) of what the fake recorded or of the
subscriber's own state."""

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

import spanq
from spanq import _subscriber
from spanq_proto.v1 import queue_pb2
from spanq._subscriber import Subscriber, Subscription
from spanq._types import KeyColumn, Queue, TypeCode

from ..helpers import until

END = object()
"""Put on a stream: it ends normally (the server's max_duration)."""


class Stream:
    """One Receive call: the request the subscriber sent, responses the test puts."""

    def __init__(self, request: queue_pb2.ReceiveRequest) -> None:
        self.request = request
        self._responses: asyncio.Queue[Any] = asyncio.Queue()
        self.cancelled = False
        self.read = 0  # responses the subscriber took

    def put(self, *keys: str, payload: str = "x") -> None:
        response = queue_pb2.ReceiveResponse()
        for k in keys:
            m = response.messages.add(lease_token=f"t-{k}", delivery_attempt=1)
            m.key.extend([k])
            m.payload.CopyFrom(struct_pb2.Value(string_value=payload))
        self._responses.put_nowait(response)

    def end(self, error: BaseException | None = None) -> None:
        self._responses.put_nowait(error or END)

    def cancel(self) -> None:
        self.cancelled = True

    def __aiter__(self) -> "Stream":
        return self

    async def __anext__(self) -> queue_pb2.ReceiveResponse:
        item = await self._responses.get()
        if item is END:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        self.read += 1
        return item


class FakeClient:
    """What the Subscriber uses of spanq.aio.Client, recording every call."""

    target = "fake:1"
    _metadata = ()

    def __init__(self) -> None:
        self.streams: list[Stream] = []
        self.acked: list[list[str]] = []  # lease tokens per Ack
        self.released: list[tuple[list[str], str]] = []  # (tokens, reason) per RenewLease of 0 s
        self.forgotten: list[str] = []

    async def changed(self, condition: Callable[[], Any], what: str, timeout: float = 5) -> None:
        """Until ``condition()`` holds (what the fake recorded, or the subscriber's own state)."""
        await until(condition, what, timeout, 0.005)

    async def _schema(self, queue: str) -> Queue:
        return Queue(queue, key_columns=(KeyColumn("id", TypeCode.STRING),), payload_type=TypeCode.STRING,
                     lease_duration=timedelta(seconds=30))

    async def _connected(self) -> None:
        return None

    def _stub(self) -> "FakeClient":
        return self

    def Receive(self, request: queue_pb2.ReceiveRequest, metadata: Any = ()) -> Stream:
        stream = Stream(request)
        self.streams.append(stream)
        return stream

    async def _mutate(self, method: str, request: Any, **_: Any) -> Any:
        if method == "Ack":
            self.acked.append([a.lease_token for a in request.acks])
            return queue_pb2.AckResponse(results=[queue_pb2.AckResult(acked=True) for _ in request.acks])
        assert method == "RenewLease"
        if request.lease_duration.ToTimedelta() == timedelta(0):
            self.released.append((list(request.lease_tokens), request.reason))
        return queue_pb2.RenewLeaseResponse(leases=[
            queue_pb2.RenewedLease(old_lease_token=t, new_lease_token="" if not request.lease_duration.seconds
                                   else f"{t}+") for t in request.lease_tokens])

    def _forget(self, queue: str, exc: BaseException) -> None:
        self.forgotten.append(queue)


def subscribe(client: FakeClient, callback: Any, **options: Any) -> Subscription:
    settings: dict[str, Any] = dict(flow_control=spanq.FlowControl(), lease_duration=None, max_batch_size=100,
                                    stream_duration=None, shutdown_timeout=5.0, executor=None, max_workers=4,
                                    auto_ack=True)
    settings.update(options)
    return Subscription(Subscriber(client, "q", callback, **settings))  # type: ignore[arg-type]


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.fixture
def client() -> FakeClient:
    return FakeClient()


async def test_the_first_stream_asks_for_the_whole_window_and_no_end(client):
    async with subscribe(client, lambda m: None, flow_control=spanq.FlowControl(max_messages=5), max_batch_size=3):
        await client.changed(lambda: client.streams, "a stream")
        request = client.streams[0].request
        assert (request.queue, request.max_outstanding, request.max_batch_size) == ("q", 5, 3)
        assert not request.HasField("max_duration")  # until cancelled: it is not narrow


async def test_a_returning_callback_acks_with_the_lease_token_and_frees_its_room(client):
    seen: list[str] = []

    async def handle(message: spanq.Message) -> None:
        seen.append(message.key[0])

    async with subscribe(client, handle) as subscription:
        await client.changed(lambda: client.streams, "a stream")
        client.streams[0].put("a", "b")
        await client.changed(lambda: sum(map(len, client.acked)) == 2, "both acks")
        assert sorted(t for batch in client.acked for t in batch) == ["t-a", "t-b"]
        assert sorted(seen) == ["a", "b"] and subscription.in_hand == 0


async def test_a_failing_callback_nacks_with_the_exception_as_its_reason(client):
    async def handle(message: spanq.Message) -> None:
        raise KeyError("no price")

    async with subscribe(client, handle) as subscription:
        await client.changed(lambda: client.streams, "a stream")
        client.streams[0].put("a")
        await client.changed(lambda: client.released, "the nack")
        [(tokens, reason)] = client.released
        assert tokens == ["t-a"] and reason.startswith("KeyError") and "no price" in reason
        assert client.acked == [] and subscription.in_hand == 0


async def test_without_auto_ack_a_message_stays_in_hand_until_the_callback_settles_it(client):
    held: list[spanq.Message] = []

    async def handle(message: spanq.Message) -> None:
        held.append(message)

    async with subscribe(client, handle, auto_ack=False) as subscription:
        await client.changed(lambda: client.streams, "a stream")
        client.streams[0].put("a")
        await client.changed(lambda: held, "the callback")
        assert subscription.in_hand == 1 and client.acked == []
        await held[0].ack()
        assert client.acked == [["t-a"]] and subscription.in_hand == 0
        await held[0].ack()  # settling twice is a no-op
        assert client.acked == [["t-a"]]


async def test_a_stream_reopened_with_messages_in_hand_is_narrow_and_ends_soon(client):
    release = asyncio.Event()

    async def handle(message: spanq.Message) -> None:
        await release.wait()

    async with subscribe(client, handle, flow_control=spanq.FlowControl(max_messages=5)) as subscription:
        await client.changed(lambda: client.streams, "a stream")
        client.streams[0].put("a", "b")
        await client.changed(lambda: subscription.in_hand == 2, "two in hand")
        client.streams[0].end()  # the server ended it (max_duration)
        await client.changed(lambda: len(client.streams) == 2, "a second stream")
        request = client.streams[1].request
        assert request.max_outstanding == 3  # the room there is, not max_messages
        assert request.max_duration.ToTimedelta() <= _subscriber.NARROW_STREAM_DURATION  # reopened wider soon
        release.set()


async def test_at_max_messages_no_stream_is_cancelled_and_none_opens(client):
    release = asyncio.Event()

    async def handle(message: spanq.Message) -> None:
        await release.wait()

    fc = spanq.FlowControl(max_messages=2)
    async with subscribe(client, handle, flow_control=fc) as subscription:
        await client.changed(lambda: client.streams, "a stream")
        client.streams[0].put("a", "b")
        await client.changed(lambda: subscription.in_hand == 2, "two in hand")
        client.streams[0].end()
        await asyncio.sleep(0.2)  # the test: no new stream may open in this window (nothing to wait for)
        assert len(client.streams) == 1 and not client.streams[0].cancelled
        release.set()  # room again: a stream opens with the whole window
        await client.changed(lambda: len(client.streams) == 2, "a stream once there is room")
        assert client.streams[1].request.max_outstanding == 2


async def test_past_max_bytes_the_subscriber_stops_reading_until_the_load_falls(client):
    release = asyncio.Event()

    async def handle(message: spanq.Message) -> None:
        await release.wait()

    fc = spanq.FlowControl(max_messages=100, max_bytes=250)
    async with subscribe(client, handle, flow_control=fc) as subscription:
        await client.changed(lambda: client.streams, "a stream")
        stream = client.streams[0]
        stream.put("a", "b", "c", payload="y" * 100)  # past 250 bytes in hand
        stream.put("d", payload="y" * 100)
        await client.changed(lambda: subscription.in_hand == 3, "three in hand")
        await asyncio.sleep(0.2)  # the test: the second response must stay unread meanwhile
        assert stream.read == 1 and subscription.in_hand == 3 and not stream.cancelled
        release.set()  # the acks bring the load under resume_threshold: it reads on
        await client.changed(lambda: sum(map(len, client.acked)) == 4, "all four acked")
        assert stream.read == 2


async def test_a_retryable_stream_error_reconnects_and_a_terminal_one_ends_the_subscription(client):
    subscription = subscribe(client, lambda m: None)
    await client.changed(lambda: client.streams, "a stream")
    client.streams[0].end(rpc_error(grpc.StatusCode.UNAVAILABLE, "restarting"))
    await client.changed(lambda: len(client.streams) == 2, "a reconnect")
    client.streams[1].end(rpc_error(grpc.StatusCode.NOT_FOUND, "no queue q"))
    with pytest.raises(spanq.NotFound, match="no queue q"):
        await asyncio.wait_for(subscription.result(), 5)
    assert client.forgotten == ["q"] and subscription.done() and len(client.streams) == 2


async def test_shutdown_nacks_what_callbacks_did_not_finish_within_the_grace_period(client):
    async def handle(message: spanq.Message) -> None:
        if message.key[0] == "slow":
            await asyncio.Event().wait()  # never finishes

    subscription = subscribe(client, handle, shutdown_timeout=0.1)
    await client.changed(lambda: client.streams, "a stream")
    client.streams[0].put("quick", "slow")
    await client.changed(lambda: client.acked, "the quick one's ack")
    subscription.cancel()
    await asyncio.wait_for(subscription.result(), 5)
    assert client.acked == [["t-quick"]]
    assert [tokens for tokens, _ in client.released] == [["t-slow"]]  # released for redelivery, not kept
    assert subscription.done() and subscription.in_hand == 0


async def test_settling_after_the_subscription_closed_fails_with_closed(client):
    held: list[spanq.Message] = []
    async with subscribe(client, held.append, auto_ack=False):
        await client.changed(lambda: client.streams, "a stream")
        client.streams[0].put("a")
        await client.changed(lambda: held, "the callback")
    with pytest.raises(spanq.Closed):
        await held[0].ack()


async def test_a_stopped_subscriber_runs_no_callback_for_what_it_had_not_handed_out_and_releases_it(client):
    """Issue 20: a message read but not yet handed to a callback when the stop came (here: waiting for
    room) gets no callback at all; it is released at once for another receiver, not run during the
    shutdown nor held by nobody until its lease ends. The callbacks already running finish and ack."""
    release = asyncio.Event()
    started: list[str] = []

    async def handle(message: spanq.Message) -> None:
        started.append(message.key[0])
        await release.wait()

    fc = spanq.FlowControl(max_messages=2)
    subscription = subscribe(client, handle, flow_control=fc)
    await client.changed(lambda: client.streams, "a stream")
    client.streams[0].put("a", "b", "c")  # more than the room: c waits for some
    await client.changed(lambda: started == ["a", "b"], "two callbacks")
    subscription.cancel()
    await client.changed(lambda: client.released, "c released")
    release.set()
    await asyncio.wait_for(subscription.result(), 5)
    assert started == ["a", "b"]
    assert sorted(t for tokens in client.acked for t in tokens) == ["t-a", "t-b"]
    assert client.released == [(["t-c"], "")] and client.streams[0].cancelled


async def test_an_async_callback_not_started_when_the_stop_came_is_not_run_but_released(client):
    started: list[str] = []
    subscription: Subscription | None = None

    async def handle(message: spanq.Message) -> None:
        started.append(message.key[0])
        if message.key[0] == "a":
            assert subscription is not None
            subscription._subscriber._request_stop()  # at once: b's task exists and has not started

    subscription = subscribe(client, handle)
    await client.changed(lambda: client.streams, "a stream")
    client.streams[0].put("a", "b")
    await asyncio.wait_for(subscription.result(), 5)
    assert started == ["a"]
    assert client.acked == [["t-a"]] and client.released == [(["t-b"], "")]
