"""The asyncio client: ``spanq.aio.Client``, the canonical implementation.

``spanq.Client`` (sync) runs this one's methods: its unary calls on the calling
thread over grpcio's blocking stubs, its streams on a private event-loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import EllipsisType
from typing import Any, TypeVar

import grpc
from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from . import _admin, _codec, _connect, _requests, _retry, _slots, _tracing
from ._admin import PeekPage, ProgressCallback, QueueStats, RedriveProgress, ReplayCallback, ReplayProgress
from ._publisher import Publisher
from ._errors import AlreadyExists, Closed, NotFound, SpanqError, from_rpc_error
from ._loop import call_soon
from ._requests import AckTarget, LeaseTarget
from ._retry import DEFAULT_RETRY, Retry
from ._subscriber import Callback, Subscriber, Subscription
from ._transaction import AckOp, RenewOp, SendOp, Transaction
from ._types import (
    BatchSettings, CommitResult, FlowControl, Future, Key, KeyColumn, KeyValue, Message, OutgoingMessage,
    PublishFlowControl, Queue, RenewedLease, TypeCode,
)

__all__ = ["Client", "Subscription"]

logger = logging.getLogger(__name__)

DEFAULT_CHANNEL_OPTIONS: dict[str, Any] = {
    # A queue client wants to be back soon after a server restart: reconnect within ~2 s, not 2 minutes.
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 2000,
    "grpc.max_receive_message_length": 64 * 1024 * 1024,
}
"""Channel options the client sets unless ``options`` overrides them."""


_DEFINING_FIELDS = ("key_columns", "payload_type", "parent_table", "lease_duration", "initial_backoff",
                    "max_backoff", "max_delivery_attempts", "dead_letter_queue", "message_retention_duration",
                    "archive_duration")
"""What create_queue(exist_ok=True) compares; not the pauses (disable_send, disable_delivery), which are a
live queue's state that an operator may have set since."""


P = TypeVar("P")


async def _last_progress(call: Any, convert: Callable[[Any], P], on_progress: Callable[[P], object] | None
                         ) -> P | None:
    """Reads a progress stream (Redrive, Replay) to its end, handing each to ``on_progress``: the last."""
    last: P | None = None
    try:
        async for p in call:
            last = convert(p)
            if on_progress is not None:
                on_progress(last)
    except grpc.aio.AioRpcError as exc:
        raise from_rpc_error(exc) from exc
    finally:
        call.cancel()
    return last


def _same_definition(wanted: Queue, existing: Queue, error: AlreadyExists) -> None:
    """For ``create_queue(exist_ok=True)``: AlreadyExists naming the fields where the stored queue differs."""
    differ = [f"{field} is {getattr(existing, field)!r}, not {getattr(wanted, field)!r}"
              for field in _DEFINING_FIELDS
              if getattr(wanted, field) not in (None, ()) and getattr(wanted, field) != getattr(existing, field)]
    if differ:
        raise AlreadyExists(
            f"queue {wanted.name!r} exists with another definition ({'; '.join(differ)}); drop it, or create it "
            "under another name", code=error.code, reason=error.reason, metadata=error.metadata,
        ) from error


class Client:
    """An asyncio spanq client: queue admin, send, ack, renew, nack, commit, receive and subscribe.

    ``target`` is ``host:port`` (or a gRPC target such as ``unix:/path``); one that cannot name a server
    (``http://...``, a bad port) raises InvalidArgument at once. A call waits at most ``connect_timeout``
    seconds for the channel to connect, then fails with Unavailable naming the target (nothing was sent, so
    nothing committed); the retry policy's ``deadline`` bounds the rest. Plaintext unless ``credentials``
    (``grpc.ssl_channel_credentials(...)``) are given; ``token`` is sent as a bearer token with every call. Use ``async with spanq.aio.Client(...)``,
    or call ``aclose()`` when done; the channel opens on first use (or ``open()``), on the running loop.
    Every mutating call picks one request_id and replays it on UNAVAILABLE, DEADLINE_EXCEEDED and
    UNKNOWN_COMMIT per ``retry``, so a retry never duplicates; pass ``request_id=`` to choose it yourself
    (e.g. to replay the request of a CommitOutcomeUnknown). At most ``max_concurrent_calls`` unary calls are
    in flight on the channel at once; more wait their turn in the SDK (Receive streams are not counted).
    """

    _sleep: Callable[[float], Awaitable[None]] = staticmethod(asyncio.sleep)
    """How retries wait (spanq._client's direct calls wait without an event loop)."""

    def __init__(
        self,
        target: str,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
        retry: Retry = DEFAULT_RETRY,
        options: Sequence[tuple[str, Any]] = (),
        max_concurrent_calls: int = _slots.DEFAULT_MAX_CONCURRENT_CALLS,
        batch_settings: BatchSettings = BatchSettings(),
        publish_flow_control: PublishFlowControl = PublishFlowControl(),
        connect_timeout: float = _connect.DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        if max_concurrent_calls < 1:
            raise ValueError(f"max_concurrent_calls must be at least 1, not {max_concurrent_calls}")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be more than 0 seconds, not {connect_timeout!r}")
        self.target = _connect.check_target(target)
        self.connect_timeout = connect_timeout
        self._max_calls = max_concurrent_calls
        self._batch_settings = batch_settings
        self._publish_flow_control = publish_flow_control
        self._publisher: Publisher | None = None
        self._credentials = credentials
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self._retry = retry
        self._options = list({**DEFAULT_CHANNEL_OPTIONS, **dict(options)}.items())
        self._channel: grpc.aio.Channel | None = None
        self._stub_: queue_pb2_grpc.QueueServiceStub | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._schemas: dict[str, Queue] = {}
        self._subscriptions: set[Subscription] = set()
        self._pending: set[asyncio.Task[None]] = set()

    # -- lifecycle --------------------------------------------------------------

    async def open(self) -> None:
        """Opens the channel on the running loop (calls do this themselves). Idempotent."""
        self._stub()

    def _stub(self) -> queue_pb2_grpc.QueueServiceStub:
        if self._closed:
            raise Closed(f"the client for {self.target} is closed")
        if self._stub_ is None:
            self._loop = asyncio.get_running_loop()
            if self._credentials is not None:
                self._channel = grpc.aio.secure_channel(self.target, self._credentials, options=self._options)
            else:
                self._channel = grpc.aio.insecure_channel(self.target, options=self._options)
            stub = queue_pb2_grpc.QueueServiceStub(self._channel)  # type: ignore[no-untyped-call]
            self._stub_ = _slots.bound(stub, self._max_calls, self._connected)
        return self._stub_

    async def _connected(self) -> None:
        """Returns once the channel is connected; Unavailable (reason CONNECT_TIMEOUT) after
        ``connect_timeout``."""
        self._stub()
        assert self._channel is not None
        await _connect.wait_connected(self._channel, self.target, self.connect_timeout)

    async def aclose(self, timeout: float | None = None) -> None:
        """Shuts subscriptions down gracefully, sends what was published (``flush``), waits for pending
        message acks, closes the channel; ``timeout`` bounds each step.

        Idempotent; calls made afterwards raise Closed. A published message not sent in time fails with
        Closed, one whose Send was in flight with CommitOutcomeUnknown."""
        if self._closed:
            return
        subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            subscription.cancel()
        if subscriptions:
            await asyncio.wait_for(
                asyncio.gather(*(s.result() for s in subscriptions), return_exceptions=True), timeout
            )
        if self._publisher is not None:  # after the subscriptions: their callbacks may publish
            await self._publisher.close(timeout)
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=timeout)
        self._closed = True
        if self._channel is not None:
            await self._channel.close()

    async def __aenter__(self) -> Client:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- queues -----------------------------------------------------------------

    async def create_queue(
        self,
        queue: Queue | str,
        *,
        key_columns: Sequence[KeyColumn | tuple[str, TypeCode | str]] = (),
        payload_type: TypeCode | str = TypeCode.BYTES,
        lease_duration: timedelta | float | None = None,
        initial_backoff: timedelta | float | None = None,
        max_backoff: timedelta | float | None = None,
        parent_table: str | None = None,
        max_delivery_attempts: int | None = None,
        dead_letter_queue: str | None = None,
        disable_send: bool = False,
        disable_delivery: bool = False,
        message_retention_duration: timedelta | float | None = None,
        archive_duration: timedelta | float | None = None,
        max_in_flight_per_key: int | None = None,
        concurrency_key: str | None = None,
        rate_limit: float | None = None,
        rate_limit_burst: int | None = None,
        enable_message_ordering: bool = False,
        exist_ok: bool = False,
    ) -> Queue:
        """Creates a queue (a table plus its SQL functions) and returns it as stored.

        Give a Queue, or a name and its fields: ``create_queue("tasks", key_columns=[("id", "INT64")],
        payload_type="JSON", lease_duration=30)``; every setting ``update_queue`` changes can be given here
        too (a queue created paused, ``disable_delivery=True``; one that keeps acked messages for replay,
        ``archive_duration=86400``). ``enable_message_ordering=True`` lets its messages carry an
        ``ordering_key`` (each key's delivered one at a time, in order); without it a keyed send raises
        FailedPrecondition. Raises AlreadyExists if the name is taken, unless
        ``exist_ok`` and the queue there has every field given here (then it returns that queue, unchanged;
        a field left out, or None, matches anything). ``max_in_flight_per_key`` caps the unexpired leases of
        each value of the key column ``concurrency_key`` (default: the first key column), and ``rate_limit``
        the leases per second of the whole queue (a bucket of ``rate_limit_burst``), both across every
        server and stream (docs/semantics.md, "Limits").
        """
        if isinstance(queue, str):
            queue = Queue(
                name=queue,
                key_columns=tuple(c if isinstance(c, KeyColumn) else KeyColumn(c[0], TypeCode(c[1])) for c in key_columns),
                payload_type=TypeCode(payload_type),
                lease_duration=_codec.as_timedelta(lease_duration),
                initial_backoff=_codec.as_timedelta(initial_backoff),
                max_backoff=_codec.as_timedelta(max_backoff),
                parent_table=parent_table,
                max_delivery_attempts=max_delivery_attempts,
                dead_letter_queue=dead_letter_queue,
                disable_send=disable_send,
                disable_delivery=disable_delivery,
                message_retention_duration=_codec.as_timedelta(message_retention_duration),
                archive_duration=_codec.as_timedelta(archive_duration),
                max_in_flight_per_key=max_in_flight_per_key,
                concurrency_key=concurrency_key,
                rate_limit=rate_limit,
                rate_limit_burst=rate_limit_burst,
                enable_message_ordering=enable_message_ordering,
            )
        request = queue_pb2.CreateQueueRequest(queue=_codec.queue_to_proto(queue))
        stub = self._stub()
        maybe_created = False

        async def attempt(timeout: float) -> queue_pb2.Queue | None:
            nonlocal maybe_created
            try:
                created: queue_pb2.Queue = await stub.CreateQueue(request, timeout=timeout, metadata=self._metadata)
                return created
            except grpc.RpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    maybe_created = True
                elif exc.code() == grpc.StatusCode.ALREADY_EXISTS and maybe_created:
                    return None  # probably our own earlier attempt: check below
                raise

        try:
            created = await _retry.call(attempt, self._retry, what=f"create queue {queue.name}", sleep=self._sleep)
        except AlreadyExists as exc:
            if not exist_ok:
                raise
            try:
                existing = await self.get_queue(queue.name)
            except NotFound:
                raise exc from None  # the name is another table's, not a queue's
            _same_definition(queue, existing, exc)
            return existing
        if created is None:
            return await self.get_queue(queue.name)
        result = _codec.queue_from_proto(created)
        self._schemas[result.name] = result
        return result

    async def update_queue(
        self,
        name: str,
        *,
        lease_duration: timedelta | float | None | EllipsisType = ...,
        initial_backoff: timedelta | float | None | EllipsisType = ...,
        max_backoff: timedelta | float | None | EllipsisType = ...,
        max_delivery_attempts: int | None | EllipsisType = ...,
        dead_letter_queue: str | None | EllipsisType = ...,
        disable_send: bool | EllipsisType = ...,
        disable_delivery: bool | EllipsisType = ...,
        message_retention_duration: timedelta | float | None | EllipsisType = ...,
        archive_duration: timedelta | float | None | EllipsisType = ...,
        max_in_flight_per_key: int | None | EllipsisType = ...,
        concurrency_key: str | None | EllipsisType = ...,
        rate_limit: float | None | EllipsisType = ...,
        rate_limit_burst: int | None | EllipsisType = ...,
        enable_message_ordering: bool | EllipsisType = ...,
    ) -> Queue:
        """Changes the settings given (and only those) on a live queue, and returns it as stored.

        ``update_queue("tasks", lease_duration=30, max_delivery_attempts=5, dead_letter_queue="tasks_dead")``;
        ``update_queue("tasks", disable_delivery=True)`` pauses delivery, ``False`` resumes it. None for a
        duration means the server's default; None for the dead-letter pair removes it. Raises NotFound, or
        InvalidArgument with CreateQueue's checks (nothing changes then). Other servers see the change
        within 2 s (backoff, dead-lettering and the delivery pause at once). ``message_retention_duration``
        deletes unacknowledged messages sent longer ago (None: keep them until acked); ``archive_duration``
        keeps acked messages that long in the queue's archive (``peek(archived=True)``; None: an ack deletes).
        ``max_in_flight_per_key``, ``concurrency_key``, ``rate_limit`` and ``rate_limit_burst`` change the
        limits live (as ``create_queue``'s); None removes a limit, and with it its key column or burst.
        ``enable_message_ordering=True`` lets sends carry an ``ordering_key``; ``False`` turns it off, and
        raises FailedPrecondition while the queue holds a message behind an earlier one of its key (keyed
        sends are then refused, and messages already sent with a key are delivered as any other)."""
        given: dict[str, Any] = {"lease_duration": lease_duration, "initial_backoff": initial_backoff, "max_backoff": max_backoff,
                 "max_delivery_attempts": max_delivery_attempts, "dead_letter_queue": dead_letter_queue,
                 "disable_send": disable_send, "disable_delivery": disable_delivery,
                 "message_retention_duration": message_retention_duration, "archive_duration": archive_duration,
                 "max_in_flight_per_key": max_in_flight_per_key, "concurrency_key": concurrency_key,
                 "rate_limit": rate_limit, "rate_limit_burst": rate_limit_burst,
                 "enable_message_ordering": enable_message_ordering}
        changes = {field: value for field, value in given.items() if value is not ...}
        durations: dict[str, Any] = {field: _codec.as_timedelta(changes[field]) for field in
                     ("lease_duration", "initial_backoff", "max_backoff", "message_retention_duration",
                      "archive_duration")
                     if field in changes}
        values: dict[str, Any] = {**changes, **durations}
        wanted = dataclasses.replace(Queue(name=name), **values)
        request = queue_pb2.UpdateQueueRequest(queue=_codec.queue_to_proto(wanted))
        request.update_mask.paths.extend(changes)
        stub = self._stub()
        updated = await _retry.call(  # it sets values: a retry after an unknown outcome sets the same
            lambda t: stub.UpdateQueue(request, timeout=t, metadata=self._metadata), self._retry,
            what=f"update queue {name}", sleep=self._sleep,
        )
        queue = _codec.queue_from_proto(updated)
        self._schemas[name] = queue
        return queue

    async def get_queue(self, name: str) -> Queue:
        """Returns a queue's definition; raises NotFound if there is none."""
        stub = self._stub()
        request = queue_pb2.GetQueueRequest(name=name)
        try:
            found = await _retry.call(
                lambda t: stub.GetQueue(request, timeout=t, metadata=self._metadata), self._retry,
                what=f"get queue {name}", sleep=self._sleep,
            )
        except NotFound:
            self._schemas.pop(name, None)
            raise
        queue = _codec.queue_from_proto(found)
        self._schemas[name] = queue
        return queue

    async def list_queues(self, *, page_size: int = 0) -> list[Queue]:
        """Returns every queue, in name order (fetched ``page_size`` at a time; 0: the server's default)."""
        stub = self._stub()
        out: list[Queue] = []
        token = ""
        while True:
            request = queue_pb2.ListQueuesRequest(page_size=page_size, page_token=token)
            page = await _retry.call(
                lambda t: stub.ListQueues(request, timeout=t, metadata=self._metadata), self._retry,
                what="list queues", sleep=self._sleep,
            )
            out.extend(_codec.queue_from_proto(q) for q in page.queues)
            token = page.next_page_token
            if not token:
                return out

    async def drop_queue(self, name: str) -> None:
        """Drops a queue with all its messages; raises NotFound if there is none."""
        stub = self._stub()
        request = queue_pb2.DropQueueRequest(name=name)
        maybe_dropped = False

        async def attempt(timeout: float) -> None:
            nonlocal maybe_dropped
            try:
                await stub.DropQueue(request, timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    maybe_dropped = True
                elif exc.code() == grpc.StatusCode.NOT_FOUND and maybe_dropped:
                    return  # our own earlier attempt dropped it
                raise

        try:
            await _retry.call(attempt, self._retry, what=f"drop queue {name}", sleep=self._sleep)
        finally:
            self._schemas.pop(name, None)

    # -- sending ----------------------------------------------------------------

    async def send(
        self,
        queue: str,
        payload: Any,
        *,
        key: Key | KeyValue | None = None,
        deliver_time: datetime | None = None,
        delay: timedelta | float | None = None,
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        ordering_key: str | None = None,
    ) -> Key:
        """Sends one message and returns its key (the server makes a UUID key when the queue has no key
        columns and ``key`` is omitted; on a queue with a generated key column, ``KeyColumn.generated_as``,
        ``key`` gives the other columns and the key returned is the whole one the database computed).

        ``payload`` is bytes, str or JSON data to match the queue's payload type; ``key`` a tuple (or a lone
        value for a one-column key). ``deliver_time`` (timezone-aware) or ``delay`` schedules it; ``headers``
        travel with it and ``priority`` (0 to 9) orders it before lower ones; messages of one ``ordering_key``
        are delivered one at a time in the order sent (docs/semantics.md). Raises AlreadyExists if a
        message with that key is in the queue. With OpenTelemetry installed the send is a PRODUCER span and
        its trace context goes into the headers.
        """
        message = OutgoingMessage(payload, key, deliver_time, _codec.as_timedelta(delay), headers, priority,
                                  ordering_key)
        [sent] = await self.send_many(queue, [message], request_id=request_id)
        return sent

    async def send_many(
        self, queue: str, messages: Iterable[OutgoingMessage | Any], *, request_id: str | None = None
    ) -> list[Key]:
        """Sends messages atomically (all or none) and returns their keys in order.

        Each item is an OutgoingMessage, or a bare payload (for a queue without key columns)."""
        schema = await self._schema(queue)
        outgoing = _requests.outgoing(messages)
        with _tracing.producing(queue, "send", len(outgoing)) as trace_context:
            request = _requests.send_request(schema, outgoing, trace_context)
            response = await self._call_mutation("Send", request, queue=queue, request_id=request_id)
        return _requests.send_keys(schema, response)

    # -- publishing (batched) ---------------------------------------------------

    async def publish(
        self,
        queue: str,
        payload: Any,
        *,
        key: Key | KeyValue | None = None,
        deliver_time: datetime | None = None,
        delay: timedelta | float | None = None,
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        ordering_key: str | None = None,
    ) -> Future[Key]:
        """Publishes one message through the batching publisher and returns its Future (the key) at once;
        ``await`` the Future for the key, or an error for this message alone.

        Messages to one queue are gathered into one Send per ``batch_settings`` (count, bytes, a short
        wait), each Send with its own request id, replayed like ``send``'s. A message refused by the server
        (AlreadyExists, a payload over the limit) fails its own Future only. Messages to one queue are
        stored in the order published. This call awaits only when ``publish_flow_control`` is at its limit
        (or raises ResourceExhausted, per its ``limit_exceeded``); a payload that does not match the queue
        raises InvalidArgument here. ``flush()`` sends at once; ``aclose()`` flushes.

        With an ``ordering_key``, a message that fails pauses its key (Pub/Sub's rule): that key's later
        messages, queued or published after, fail with OrderingKeyPaused and are not sent, until
        ``resume_publish(queue, ordering_key)``. Other keys go on.
        """
        [future] = await self.publish_many(
            queue, [OutgoingMessage(payload, key, deliver_time, _codec.as_timedelta(delay), headers, priority,
                                    ordering_key)]
        )
        return future

    def resume_publish(self, queue: str, ordering_key: str) -> None:
        """Lets the publisher send ``ordering_key``'s messages to ``queue`` again after a failure paused
        the key (see ``publish``); a no-op for a key not paused."""
        if self._publisher is not None:
            self._publisher.resume(queue, ordering_key)

    async def publish_many(self, queue: str, messages: Iterable[OutgoingMessage | Any]) -> list[Future[Key]]:
        """``publish`` for several messages, one Future each (not atomic: see ``send_many`` for that).

        Each item is an OutgoingMessage, or a bare payload (for a queue without key columns)."""
        publisher, schema = await self._publishing(queue)
        return await publisher.publish(schema, messages)

    async def flush(self) -> None:
        """Sends every pending published message now and waits until each has its outcome."""
        if self._publisher is not None:
            await self._publisher.flush()

    async def _publishing(self, queue: str) -> tuple[Publisher, Queue]:
        """The publisher (made on first use, on this loop) and the queue's definition."""
        self._stub()
        if self._publisher is None:
            self._publisher = Publisher(self, asyncio.get_running_loop(), self._batch_settings,
                                        self._publish_flow_control)
        return self._publisher, await self._schema(queue)

    # -- receiving --------------------------------------------------------------

    async def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        timeout: float = 5.0,
        lease_duration: timedelta | float | None = None,
    ) -> list[Message]:
        """Leases up to ``max_messages`` deliverable messages, waiting up to ``timeout`` seconds for the
        first; returns [] if none came. For steady consumption use ``subscribe``.

        The messages' leases are not renewed: ack, nack or renew them before the lease ends. The stream is
        closed after the first batch; a message the server leased to it a moment later is redelivered once
        that lease ends.
        """
        schema = await self._schema(queue)
        request = queue_pb2.ReceiveRequest(queue=queue, max_batch_size=max_messages, max_outstanding=max_messages)
        if lease_duration is not None:
            request.lease_duration.CopyFrom(_codec.duration(lease_duration))
        await self._connected()
        call = self._stub().Receive(request, metadata=self._metadata)
        got: list[Message] = []
        try:
            async with asyncio.timeout(timeout):
                async for response in call:
                    got.extend(_requests.received_message(schema, m) for m in response.messages)
                    if got:
                        break
        except TimeoutError:
            pass
        except grpc.aio.AioRpcError as exc:
            self._forget(queue, exc)
            raise from_rpc_error(exc) from exc
        finally:
            call.cancel()
        for message in got:
            message._settler = self
        return got

    def subscribe(
        self,
        queue: str,
        callback: Callback,
        *,
        flow_control: FlowControl | None = None,
        lease_duration: timedelta | float | None = None,
        max_batch_size: int = 100,
        stream_duration: timedelta | float | None = timedelta(minutes=5),
        shutdown_timeout: float = 30.0,
        executor: concurrent.futures.Executor | None = None,
        max_workers: int = 10,
        auto_ack: bool = True,
    ) -> Subscription:
        """Starts consuming ``queue`` with ``callback(message)``; returns the running Subscription.

        An ``async def`` callback runs as a task; a plain one on ``executor`` (default: a pool of
        ``max_workers`` threads). A callback that returns acks the message (unless ``auto_ack`` is False
        or it settled the message itself); one that raises nacks it. While callbacks run, the leaser renews
        their leases (each renewal asks for ``flow_control.max_lease_extension`` or the lease duration, up
        to ``flow_control.max_lease_duration`` in total). ``lease_duration`` overrides the queue's lease;
        ``stream_duration`` is how long one Receive stream stays open before it is restarted. Must be
        called on the running event loop.
        """
        self._stub()
        subscriber = Subscriber(
            self, queue, callback,
            flow_control=flow_control or FlowControl(),
            lease_duration=_codec.as_timedelta(lease_duration),
            max_batch_size=max_batch_size,
            stream_duration=_codec.as_timedelta(stream_duration),
            shutdown_timeout=shutdown_timeout,
            executor=executor,
            max_workers=max_workers,
            auto_ack=auto_ack,
        )
        subscription = Subscription(subscriber)
        self._subscriptions.add(subscription)
        subscriber.task.add_done_callback(lambda _: self._subscriptions.discard(subscription))
        return subscription

    # -- acks and leases --------------------------------------------------------

    async def ack(
        self, queue: str, *targets: AckTarget, ignore_not_found: bool = False, request_id: str | None = None
    ) -> list[bool]:
        """Acknowledges (deletes) messages atomically; returns one ``acked`` flag per target.

        A Message target checks its current lease token (LeaseLost if the lease moved on); a key acks the
        message whoever holds it. A message that is gone raises MessageGone, unless ``ignore_not_found``
        (then its flag is False).
        """
        schema = await self._schema(queue)
        async with self._holding(targets):
            request = _requests.ack_request(schema, targets, ignore_not_found)
            response = await self._call_mutation("Ack", request, queue=queue, request_id=request_id)
            self._settled(targets, "ack")
        return _requests.ack_results(response)

    async def renew_lease(
        self, queue: str, *targets: LeaseTarget, lease_duration: timedelta | float, request_id: str | None = None
    ) -> list[RenewedLease]:
        """Extends leases by ``lease_duration`` from now; a Message carries its new token forward.

        A token that is unknown, expired or superseded, or whose message was acknowledged, comes back with
        ``new_lease_token`` None."""
        duration = _codec.as_timedelta(lease_duration)
        assert duration is not None
        async with self._holding(targets):
            since = time.monotonic()
            request = _requests.renew_request(queue, targets, duration)
            response = await self._call_mutation("RenewLease", request, queue=queue, request_id=request_id)
            renewed = _requests.renew_results(response)
            _requests.apply_renewals(targets, renewed)
            self._renewed(targets, renewed, duration, since)
        return renewed

    async def nack(self, queue: str, *targets: LeaseTarget, request_id: str | None = None,
                   reason: str | None = None) -> None:
        """Releases leases now: the messages are redelivered after the queue's backoff. ``reason`` (at
        most 200 characters) is kept as the last failure of a message that then runs out of
        delivery attempts: its dead-letter history (``PeekedMessage.dead_letter``)."""
        async with self._holding(targets):
            request = _requests.renew_request(queue, targets, timedelta(0), reason)
            await self._call_mutation("RenewLease", request, queue=queue, request_id=request_id)
            self._settled(targets, "nack")

    # -- transactions -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def transaction(self, *, request_id: str | None = None) -> AsyncIterator[Transaction]:
        """``async with client.transaction() as tx: tx.ack(...); tx.send(...)`` commits on a clean exit
        (nothing on an error, or when empty); ``tx.result`` then holds the CommitResult."""
        tx = Transaction()
        yield tx
        if len(tx):
            await self.commit(tx, request_id=request_id)

    async def commit(self, transaction: Transaction, *, request_id: str | None = None) -> CommitResult:
        """Applies a transaction's mutations atomically and in order, with one request_id for all."""
        ops = transaction.mutations
        schemas = {op.queue: await self._schema(op.queue) for op in ops if not isinstance(op, RenewOp)}
        targets: list[Any] = [t for op in ops if not isinstance(op, SendOp) for t in op.targets]
        async with self._holding(targets):
            since = time.monotonic()
            request = queue_pb2.CommitRequest()
            for op in ops:
                mutation = request.mutations.add()
                if isinstance(op, SendOp):
                    mutation.send.CopyFrom(_requests.send_request(schemas[op.queue], op.messages))
                elif isinstance(op, AckOp):
                    mutation.ack.CopyFrom(_requests.ack_request(schemas[op.queue], op.targets, op.ignore_not_found))
                else:
                    mutation.renew_lease.CopyFrom(_requests.renew_request(op.queue, op.targets, op.lease_duration))
            response = await self._call_mutation("Commit", request, queue=None, request_id=request_id)
            results: list[Any] = []
            for op, result in zip(ops, response.results):
                if isinstance(op, SendOp):
                    results.append(_requests.send_keys(schemas[op.queue], result.send))
                elif isinstance(op, AckOp):
                    results.append(_requests.ack_results(result.ack))
                    self._settled(op.targets, "ack")
                else:
                    renewed = _requests.renew_results(result.renew_lease)
                    _requests.apply_renewals(op.targets, renewed)
                    if op.lease_duration:
                        self._renewed(op.targets, renewed, op.lease_duration, since)
                    else:
                        self._settled(op.targets, "nack")
                    results.append(renewed)
        transaction.result = CommitResult(results, response.replayed)
        return transaction.result

    # -- operator calls (_admin.py) ---------------------------------------------

    async def stats(self, queue: str) -> QueueStats:
        """The queue's message counts by state (ready, scheduled, leased, dead-lettered), the oldest ready
        message's age, and the send and ack rates; needs ``select``. Reads the whole queue."""
        stub = self._stub()
        request = queue_pb2.GetQueueStatsRequest(name=queue)
        found = await _retry.call(lambda t: stub.GetQueueStats(request, timeout=t, metadata=self._metadata),
                                  self._retry, what=f"stats of queue {queue}", sleep=self._sleep)
        return _admin.stats_from_proto(found)

    async def peek(self, queue: str, *, page_size: int = 0, page_token: str = "", archived: bool = False
                   ) -> PeekPage:
        """One page of messages in delivery order, read without leasing them (``page_size`` 0: 50); needs
        ``select``. Pass the page's ``next_page_token`` for the next one. ``archived``: the queue's archive
        (acked messages, with ``ack_time`` and ``ack_request_id``) in ack order."""
        schema = await self._schema(queue)
        stub = self._stub()
        request = queue_pb2.PeekRequest(queue=queue, page_size=page_size, page_token=page_token, archived=archived)
        page = await _retry.call(lambda t: stub.Peek(request, timeout=t, metadata=self._metadata), self._retry,
                                 what=f"peek at queue {queue}", sleep=self._sleep)
        return _admin.peek_page_from_proto(schema, page)

    async def purge(self, queue: str, *, sent_before: datetime | None = None) -> int:
        """Deletes every message of the queue (leased ones too), or those sent before ``sent_before``, in
        one transaction; returns how many. Needs ``ack`` or ``admin``. Not retried: call it again."""
        request = queue_pb2.PurgeRequest(queue=queue)
        if sent_before is not None:
            request.sent_before.CopyFrom(_codec.timestamp(sent_before))
        try:
            response = await self._stub().Purge(request, timeout=self._retry.deadline, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc
        return int(response.purged)

    async def redrive(self, queue: str, *, to: str | None = None, batch_size: int = 0, rate: float = 0.0,
                      max_messages: int = 0, on_progress: ProgressCallback | None = None
                      ) -> RedriveProgress:
        """Moves messages from the dead-letter queue ``queue`` to ``to`` (default: each message's
        recorded source queue, else the one queue whose dead_letter_queue it is), ``batch_size`` per
        transaction, at most ``rate`` a second; calls ``on_progress`` after each batch and returns the final progress. Interrupted, every message is in
        exactly one of the two queues; call it again to continue."""
        request = queue_pb2.RedriveRequest(queue=queue, to=to or "", batch_size=batch_size, rate=rate,
                                           max_messages=max_messages)
        await self._connected()
        last = await _last_progress(self._stub().Redrive(request, metadata=self._metadata),
                                    _admin.progress_from_proto, on_progress)
        if last is None or not last.done:
            raise SpanqError(f"the redrive of {queue} ended before it finished; call it again to continue")
        return last

    async def replay(self, queue: str, *, start_time: datetime | None = None, end_time: datetime | None = None,
                     start_key: Any = None, end_key: Any = None, request_id: str | None = None,
                     batch_size: int = 0, rate: float = 0.0, on_progress: ReplayCallback | None = None,
                     validate_only: bool = False) -> ReplayProgress:
        """Sends the queue's archived messages back into it: those acked from ``start_time`` (default: the
        oldest kept) until before ``end_time`` (default, and at the latest: when the replay began), with a
        key from ``start_key`` to ``end_key`` (both included; a key as ``send`` takes it) if given, in ack
        order, ``batch_size`` per transaction, at most ``rate`` a second. Each keeps its key, payload, headers
        and priority, with a fresh delivery attempt count; one whose key is live in the queue is skipped
        (counted). Needs ``send`` and ``select``. Calls ``on_progress`` after each batch and returns the final
        progress. The replay is one ``request_id`` (a fresh one by default, in each progress): interrupted,
        call it again with the same range and that request_id to continue; once done, that answers its
        final progress with ``replayed`` set and sends nothing. ``validate_only``: sends nothing and records
        nothing, and the progress returned counts the range's archived messages in ``remaining`` (with no
        ``end_time``, those acked until now)."""
        schema = await self._schema(queue)
        request = queue_pb2.ReplayRequest(queue=queue, request_id=request_id or str(uuid.uuid4()),
                                          batch_size=batch_size, rate=rate, validate_only=validate_only)
        for field, when in (("start_time", start_time), ("end_time", end_time)):
            if when is not None:
                getattr(request, field).CopyFrom(_codec.timestamp(when))
        for field, bound in (("start_key", start_key), ("end_key", end_key)):
            if bound is not None:
                getattr(request, field).CopyFrom(_codec.key_to_proto(schema, _codec.as_key(bound)))
        await self._connected()
        last = await _last_progress(self._stub().Replay(request, metadata=self._metadata),
                                    _admin.replay_progress_from_proto, on_progress)
        if last is None or not last.done:
            raise SpanqError(f"the replay of {queue} ended before it finished; call it again with request_id="
                             f"{request.request_id!r} to continue")
        return last

    # -- machinery --------------------------------------------------------------

    async def _schema(self, queue: str) -> Queue:
        """The queue's definition, cached: keys are encoded and decoded with its column types."""
        found = self._schemas.get(queue)
        return found if found is not None else await self.get_queue(queue)

    def _forget(self, queue: str | None, error: BaseException) -> None:
        """Drops a cached definition when the server no longer knows the queue."""
        code = error.code if isinstance(error, SpanqError) else getattr(error, "code", lambda: None)()
        if queue is not None and code == grpc.StatusCode.NOT_FOUND:
            self._schemas.pop(queue, None)

    async def _call_mutation(self, rpc: str, request: Any, *, queue: str | None, request_id: str | None) -> Any:
        try:
            return await self._mutate(rpc, request, what=f"{rpc} on {queue}" if queue else rpc,
                                      request_id=request_id)
        except SpanqError as exc:
            self._forget(queue, exc)
            raise

    async def _mutate(
        self, rpc: str, request: Any, *, what: str, request_id: str | None = None, policy: Retry | None = None,
        patient: bool = False,
    ) -> Any:
        """Runs a mutating RPC with ONE request_id on every attempt, replaying it per the retry policy
        (``patient``: through connect timeouts too, see _retry.call)."""
        method: Callable[..., Awaitable[Any]] = getattr(self._stub(), rpc)
        request.request_id = request_id or _requests.new_request_id()
        try:
            return await _retry.call(
                lambda timeout: method(request, timeout=timeout, metadata=self._metadata),
                policy or self._retry, what=what, request_id=request.request_id, patient=patient,
                sleep=self._sleep,
            )
        except SpanqError:
            if self._closed:
                raise Closed(f"the client for {self.target} was closed during {what}") from None
            raise

    @contextlib.asynccontextmanager
    async def _holding(self, targets: Iterable[Any]) -> AsyncIterator[None]:
        """Holds the rpc locks of the subscribers that own any of ``targets``, so that no renewal changes
        their tokens while this call reads and uses them."""
        owners = {id(t._owner): t._owner for t in targets if isinstance(t, Message) and t._owner is not None}
        async with contextlib.AsyncExitStack() as stack:
            for _, owner in sorted(owners.items()):
                await stack.enter_async_context(owner.rpc_lock)
            yield

    @staticmethod
    def _settled(targets: Iterable[Any], action: str) -> None:
        for target in targets:
            if isinstance(target, Message) and target._owner is not None:
                target._owner.settled_elsewhere(target, action)

    @staticmethod
    def _renewed(targets: Sequence[Any], renewed: Sequence[RenewedLease], duration: timedelta, since: float) -> None:
        for target, lease in zip(targets, renewed):
            if isinstance(target, Message) and target._owner is not None:
                target._owner.renewed_elsewhere(target, lease, duration, since)

    def _settle(self, message: Message, action: str, lease_duration: timedelta | None,
                reason: str | None = None) -> Future[Any]:
        """Message.ack()/nack()/renew() for a message from ``receive``: thread-safe."""
        future: Future[Any] = Future()
        loop = self._loop
        if loop is None or self._closed:
            future._set_exception(Closed(f"the client for {self.target} is closed"))
            return future

        async def run() -> None:
            try:
                if action == "ack":
                    await self.ack(message.queue, message)
                    future._set_result(None)
                elif action == "nack":
                    await self.nack(message.queue, message, reason=reason)
                    future._set_result(None)
                else:
                    duration = lease_duration or (await self._schema(message.queue)).lease_duration
                    [lease] = await self.renew_lease(message.queue, message, lease_duration=duration or 10)
                    future._set_result(lease)
            except BaseException as exc:  # noqa: BLE001 - handed to the Future
                future._set_exception(exc)
                logger.debug("%s of %r failed: %s", action, message, exc)

        def start() -> None:
            task = loop.create_task(run(), name=f"spanq-{action}")
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

        call_soon(loop, start)
        return future

    def __repr__(self) -> str:
        return f"<spanq.aio.Client {self.target}{' closed' if self._closed else ''}>"


Client.__module__ = "spanq.aio"
