"""The streaming subscriber: a Receive stream feeding callbacks, with the
leaser keeping leases alive, the dispatcher batching acks, and flow control.

Flow control counts the messages (and payload bytes) in hand: leased to this
subscriber and not yet acked, nacked or lost. The stream asks the server for
at most the free room (max_outstanding), so the server itself stops leasing
when the count is reached, and resumes as acks free room, on the same stream.
At the byte limit the subscriber stops reading the stream (gRPC flow control
then holds the server back) until the load is below the resume threshold.

A stream is never cancelled for flow control: the server leases a batch
before it sends it, so a stream cancelled with a batch in flight strands
those messages until their leases expire (seconds to minutes of nothing
delivered). A stream opened narrow (messages were in hand) asks the server to
end it soon, and is reopened with the room there is then. The one cancel left
is for room the open stream cannot use, because the server counts only the
stream's own leases that it was told were settled: acks made in SQL, and
messages an earlier stream delivered. It happens while the stream is
saturated and no ack is in flight, so the server has no batch leased.
Reconnecting never drops held leases: the leaser renews them independently of
any stream.

Stopping or reopening gives up no lease a callback holds (issue 20): a
message read but not yet handed to a callback when its stream ends (a stop, a
reopen, an error), or whose callback had not started when the stop came, gets
no callback and is released (nacked) at once. Running callbacks get the
grace period; an async one still running then is cancelled before its message
is released, so that it never runs on while another receiver has it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generator, Union

import grpc
from spanq_proto.v1 import queue_pb2

from . import _codec, _requests, _retry, _tracing
from ._dispatcher import Dispatcher, Request
from ._connect import CONNECT_TIMEOUT
from ._errors import Closed, LeaseLost, SpanqError, Unavailable, from_rpc_error
from ._leaser import Leaser
from ._loop import call_soon
from ._types import FlowControl, Future, Message, Queue, RenewedLease

if TYPE_CHECKING:
    from .aio import Client

logger = logging.getLogger(__name__)

Callback = Callable[[Message], Union[Awaitable[Any], Any]]
"""A subscriber callback: ``def cb(message)`` (run on a thread pool) or ``async def cb(message)`` (a task)."""

DEFAULT_LEASE = timedelta(seconds=10)
RECONNECT_BACKOFF = _retry.Retry(initial_backoff=0.1, max_backoff=2.0)
"""Waits between attempts to reopen a failed Receive stream (it retries forever)."""
NARROW_STREAM_DURATION = timedelta(seconds=1)
"""A stream opened with less than max_messages of room lasts at most this long, then reopens wider."""


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class _Stopped(Exception):
    """The subscription stopped while it was connecting (nothing was in flight)."""


class _Skipped(Exception):
    """A sync callback that had not started when the stop came: it is nacked, not run."""


class Subscriber:
    """The machinery behind a Subscription; runs on the client's event loop."""

    def __init__(
        self,
        client: Client,
        queue: str,
        callback: Callback,
        *,
        flow_control: FlowControl,
        lease_duration: timedelta | None,
        max_batch_size: int,
        stream_duration: timedelta | None,
        shutdown_timeout: float,
        executor: concurrent.futures.Executor | None,
        max_workers: int,
        auto_ack: bool,
    ) -> None:
        self.queue = queue
        self._client = client
        self._callback = callback
        self._is_async = inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
            getattr(callback, "__call__", None)
        )
        self._fc = flow_control
        self._lease_option = lease_duration
        self._max_batch_size = max_batch_size
        self._stream_duration = stream_duration
        self._grace = shutdown_timeout
        self._own_executor = executor is None and not self._is_async
        self._executor = executor or (
            None if self._is_async
            else concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix=f"spanq-{queue}")
        )
        self._auto_ack = auto_ack
        self._loop = asyncio.get_running_loop()
        self.rpc_lock = asyncio.Lock()
        """Held while a renewal or an ack is in flight, so that the acks read current tokens."""

        self._schema: Queue | None = None
        self._leaser: Leaser | None = None
        self._dispatcher: Dispatcher | None = None
        self._in_hand: dict[Message, int] = {}  # message -> the id of the stream that delivered it
        self._bytes = 0
        self._callbacks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._closed = False
        self._paused = False
        self._room = asyncio.Event()
        self._restart = asyncio.Event()
        self._stream_id = 0
        self._stream_open = False
        self._stream_window = 0
        self._stream_own = 0
        self._stream_delivered = 0  # messages the current stream delivered
        self._stream_silent = 0  # of those, released after spanq.sql acked them: the server was not told
        self._error: BaseException | None = None
        self._connecting: asyncio.Task[None] | None = None  # cancelled by stop: nothing is in flight then
        self._connect_failures = 0
        self.task = self._loop.create_task(self._run(), name=f"spanq-subscriber-{queue}")

    # -- lifecycle --------------------------------------------------------------

    def stop(self) -> None:
        """Begins a graceful shutdown (thread-safe, idempotent)."""
        call_soon(self._loop, self._request_stop)

    def _request_stop(self) -> None:
        self._stopping = True
        self._restart.set()
        self._room.set()
        if self._connecting is not None:
            self._connecting.cancel()

    @property
    def error(self) -> BaseException | None:
        return self._error

    async def _run(self) -> None:
        try:
            while self._schema is None:
                if not await self._until_connected():
                    return
                try:
                    self._schema = await self._connect_step(self._client._schema(self.queue))
                except _Stopped:
                    return
                except Unavailable as exc:
                    if exc.reason != CONNECT_TIMEOUT:
                        raise
                    self._cannot_connect(exc)  # lost again in between: wait for it again
            lease = self._lease_option or self._schema.lease_duration or DEFAULT_LEASE
            self._lease = lease
            extension = self._fc.max_lease_extension or lease
            self._leaser = Leaser(
                name=self.queue, renew=self._renew_rpc, lock=self.rpc_lock, lease_duration=lease,
                extension=extension, max_lease_duration=self._fc.max_lease_duration, on_lost=self._lost,
            )
            self._dispatcher = Dispatcher(
                name=self.queue, loop=self._loop, lock=self.rpc_lock, ack=self._ack_rpc,
                renew=self._renew_rpc, on_done=self._done,
            )
            self._leaser.start()
            self._dispatcher.start()
            await self._receive_loop()
        except asyncio.CancelledError:
            self._stopping = True
        except BaseException as exc:  # noqa: BLE001 - reported by Subscription.result()
            self._error = exc
            if not isinstance(exc, SpanqError):
                logger.exception("the subscriber for %s failed", self.queue)
        finally:
            self._stopping = True
            await self._shutdown()

    async def _shutdown(self) -> None:
        running = {t for t in self._callbacks if not t.done()}
        if running:
            _, running = await asyncio.wait(running, timeout=self._grace)
        if running and self._is_async:
            # Ended before their leases are released: no callback runs on once another receiver may have it.
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        leftover = [m for m in self._in_hand if m._settled is None]
        if leftover:
            logger.info("%s: nacking %d message(s) whose callbacks did not finish within %gs",
                        self.queue, len(leftover), self._grace)
        for message in leftover:
            self._settle_now(message, "nack", None)
        if self._dispatcher is not None:
            try:
                await asyncio.wait_for(self._dispatcher.flush(), timeout=max(self._grace, 1.0))
            except asyncio.TimeoutError:
                logger.warning("%s: pending acks and nacks were not sent within %gs", self.queue, self._grace)
        self._closed = True
        if self._dispatcher is not None:
            await self._dispatcher.stop()
        if self._leaser is not None:
            await self._leaser.stop()
        if self._own_executor and self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- connecting -------------------------------------------------------------

    async def _connect_step(self, step: Awaitable[Any]) -> Any:
        """Runs ``step`` as a task that stop() cancels; then raises _Stopped."""
        self._connecting = task = self._loop.create_task(_awaited(step), name=f"spanq-connect-{self.queue}")
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and self._stopping and not (current and current.cancelling()):
                raise _Stopped from None
            raise
        finally:
            self._connecting = None

    async def _until_connected(self) -> bool:
        """Waits until the channel is connected, trying for connect_timeout each time, with a WARNING for
        every failed attempt and one when it connects after them; False if the subscription stops first."""
        backoffs = RECONNECT_BACKOFF.backoffs()
        while not self._stopping:
            try:
                await self._connect_step(self._client._connected())
            except _Stopped:
                return False
            except Unavailable as exc:
                self._cannot_connect(exc)
                await self._sleep(next(backoffs))
                continue
            if self._connect_failures:
                logger.warning("%s: connected to %s again after %d failed attempt(s)",
                               self.queue, self._client.target, self._connect_failures)
                self._connect_failures = 0
            return True
        return False

    def _cannot_connect(self, exc: Unavailable) -> None:
        self._connect_failures += 1
        logger.warning("%s: cannot connect to %s (attempt %d): %s", self.queue, self._client.target,
                       self._connect_failures, exc.message)

    # -- receiving --------------------------------------------------------------

    def _load(self) -> float:
        return max(len(self._in_hand) / self._fc.max_messages, self._bytes / self._fc.max_bytes)

    async def _receive_loop(self) -> None:
        backoffs = RECONNECT_BACKOFF.backoffs()
        failures = 0
        while not self._stopping:
            if self._fc.max_messages - len(self._in_hand) < self._min_window():
                self._paused = True  # no stream narrower than the room resume_threshold leaves
            while not self._stopping and (self._paused or len(self._in_hand) >= self._fc.max_messages):
                self._room.clear()
                await self._room.wait()
            if self._stopping or not await self._until_connected():
                return
            window = self._fc.max_messages - len(self._in_hand)
            duration = self._stream_duration
            if window < self._fc.max_messages:
                # Ended by the server, between batches: cancelling it to widen it could strand a batch.
                duration = min(duration or NARROW_STREAM_DURATION, NARROW_STREAM_DURATION)
            self._stream_id += 1
            self._stream_window, self._stream_own, self._stream_open = window, 0, True
            self._stream_delivered = self._stream_silent = 0
            self._restart.clear()
            request = queue_pb2.ReceiveRequest(
                queue=self.queue,
                max_batch_size=min(self._max_batch_size, window),
                max_outstanding=window,
            )
            if self._lease_option is not None:
                request.lease_duration.CopyFrom(_codec.duration(self._lease_option))
            if duration is not None:
                request.max_duration.CopyFrom(_codec.duration(duration))
            call = self._client._stub().Receive(request, metadata=self._client._metadata)
            reader = self._loop.create_task(self._read(call), name=f"spanq-stream-{self.queue}")
            opened = time.monotonic()
            try:
                while not await self._stream_ended(reader, call):
                    pass
            finally:
                self._stream_open = False
                if not reader.done():
                    call.cancel()
                    reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            if reader.cancelled():
                continue  # reopened (room freed in SQL) or stopping
            exc = reader.exception()
            if exc is None:
                lasted = time.monotonic() - opened
                expected = duration.total_seconds() if duration else 0.0
                if lasted < 0.9 * expected or (not expected and lasted < 1.0):
                    await self._sleep(next(backoffs))  # ended early: do not spin on a stream that ends at once
                else:
                    failures, backoffs = 0, RECONNECT_BACKOFF.backoffs()
                continue
            if self._stopping:
                return
            if not isinstance(exc, grpc.aio.AioRpcError):
                raise exc
            if exc.code() in _retry.STREAM_TERMINAL_CODES:
                self._client._forget(self.queue, exc)
                raise from_rpc_error(exc) from exc
            if self._stream_own:
                failures, backoffs = 0, RECONNECT_BACKOFF.backoffs()
            failures += 1
            wait = next(backoffs)
            log = logger.info if failures == 1 else logger.debug
            log("%s: Receive stream failed (%s: %s); reconnecting in %.2fs",
                self.queue, exc.code().name, exc.details(), wait)
            await self._sleep(wait)

    async def _sleep(self, seconds: float) -> None:
        self._restart.clear()
        try:
            await asyncio.wait_for(self._restart.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _stream_ended(self, reader: asyncio.Task[None], call: Any) -> bool:
        """Waits until the stream ends, or a stop or a reopen is asked for; False if the stream goes on."""
        restart = self._loop.create_task(self._restart.wait())
        try:
            await asyncio.wait({reader, restart}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            restart.cancel()
            await asyncio.gather(restart, return_exceptions=True)
        if reader.done() or self._stopping:
            return True
        self._restart.clear()
        # Held while checking and cancelling: no ack or nack can free room on the server in between.
        async with self.rpc_lock:
            if reader.done() or not self._saturated():
                return reader.done()  # an ack freed room meanwhile: the server may be sending; not now
            call.cancel()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        return True

    def _min_window(self) -> int:
        return max(1, int((1 - self._fc.resume_threshold) * self._fc.max_messages))

    def _saturated(self) -> bool:
        """Whether nothing the stream delivered was settled through the server (under rpc_lock: no ack in
        flight) while it holds its whole window: then the server is waiting for room with no batch leased
        and unsent, and cancelling the stream loses nothing. (Acks made in SQL free room unannounced: a
        stream woken meanwhile by another client's ack may be sending. Rare, and no worse than before.)"""
        return self._stream_own + self._stream_silent >= self._stream_window

    async def _read(self, call: Any) -> None:
        assert self._schema is not None
        stream = self._stream_id
        unhanded: list[Message] = []  # read, and not handed to a callback yet
        try:
            async for response in call:
                unhanded = [self._received(wire) for wire in response.messages]
                while unhanded and not self._stopping:
                    if len(self._in_hand) >= self._fc.max_messages:
                        # The server counts an ack's room free once it commits; here the message is in hand
                        # until the ack's answer is handled: a batch leased in between waits for that.
                        self._room.clear()
                        await self._room.wait()
                        continue
                    self._deliver(unhanded.pop(0), stream)
                if self._stopping:
                    call.cancel()  # else the server would send on to nobody
                    return
                await self._after_response()
        finally:
            # The stream ends (a stop, a reopen, an error) with messages no callback will run for: released
            # now, for another receiver, rather than held by nobody until their leases end.
            for message in unhanded:
                self._settle_now(message, "nack", None)

    def _received(self, wire: Any) -> Message:
        assert self._schema is not None
        message = _requests.received_message(self._schema, wire)
        message._settler = self
        message._owner = self
        return message

    async def _after_response(self) -> None:
        if self._load() >= 1.0:
            self._paused = True  # no new stream opens until the load is below resume_threshold
            # The server bounds the count (max_outstanding) but knows nothing of bytes: stop reading,
            # and gRPC flow control holds the stream back, until the load is below the threshold.
            by_bytes = self._bytes >= self._fc.max_bytes
            while by_bytes and self._paused and not self._stopping:
                self._room.clear()
                await self._room.wait()

    def _deliver(self, message: Message, stream: int) -> None:
        assert self._leaser is not None
        self._in_hand[message] = stream
        self._bytes += message.size
        if stream == self._stream_id:
            self._stream_own += 1
            self._stream_delivered += 1
        self._leaser.add(message)
        task = self._loop.create_task(self._invoke(message), name=f"spanq-callback-{self.queue}")
        self._callbacks.add(task)
        task.add_done_callback(self._callbacks.discard)

    # -- callbacks --------------------------------------------------------------

    async def _invoke(self, message: Message) -> None:
        if self._stopping:  # not started when the stop came: released, not run
            self._settle_now(message, "nack", None)
            return
        error: BaseException | None = None
        try:
            if self._is_async:
                with _tracing.processing(message):
                    await self._callback(message)
            else:
                await self._loop.run_in_executor(self._executor, self._call_sync, message)
        except _Skipped:
            self._settle_now(message, "nack", None)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc
            logger.exception("%s: the callback failed on %r; nacking it", self.queue, message)
        self._after(message, error)

    def _call_sync(self, message: Message) -> None:
        if self._stopping:
            raise _Skipped
        with _tracing.processing(message):  # on the executor's thread, where the callback runs
            result = self._callback(message)
            if inspect.isawaitable(result):  # a plain function that returned a coroutine: run it on the loop
                asyncio.run_coroutine_threadsafe(_awaited(result), self._loop).result()

    def _after(self, message: Message, error: BaseException | None) -> None:
        """What happens to a message whose callback returned without settling it."""
        if message._settled is not None or message not in self._in_hand:
            return
        if error is not None:  # the exception is the nack's reason (the dead-letter history)
            self._settle_now(message, "nack", None, reason=_requests.failure_reason(error))
        elif message._sql_acked:
            self._release(message)  # acked inside the application's own transaction
        elif self._auto_ack:
            self._settle_now(message, "ack", None)

    # -- settling ---------------------------------------------------------------

    def _settle(self, message: Message, action: str, lease_duration: timedelta | None,
                reason: str | None = None) -> Future[Any]:
        """Message.ack()/nack()/renew(): thread-safe."""
        future: Future[Any] = Future()
        call_soon(self._loop, lambda: self._settle_now(message, action, lease_duration, future, reason))
        return future

    def _settle_now(self, message: Message, action: str, lease_duration: timedelta | None,
                    future: Future[Any] | None = None, reason: str | None = None) -> None:
        """On the loop. ``future`` is None for the subscriber's own settles (auto-ack, nack on error or
        shutdown), which nobody awaits: a Future per message costs more than the rest of an ack."""
        if self._closed or self._dispatcher is None:
            if future is not None:
                future._set_exception(Closed(f"the subscription to {self.queue} is closed"))
            return
        if message._settled == "lost":
            if future is not None:
                future._set_exception(LeaseLost(f"the lease on {message.key!r} in {self.queue} was lost"))
            return
        if action in ("ack", "nack"):
            if message._settled is not None:
                if future is not None:
                    future._set_result(None)  # settling twice is a no-op
                return
            message._settled = action
        self._dispatcher.put_nowait(Request(action, message, future, lease_duration or self._lease, reason))

    def _done(self, request: Request, error: BaseException | None, result: Any) -> None:
        """The dispatcher's report on one work item."""
        message, future = request.message, request.future
        if request.action == "renew":
            if error is not None:
                if future is not None:
                    future._set_exception(error)
                return
            if result.new_lease_token:
                assert self._leaser is not None and request.lease_duration is not None
                message._renewed(result.new_lease_token, result.lease_expiration_time)
                self._leaser.extended(message, request.lease_duration, time.monotonic())
            else:
                self._lost(message, "its lease could not be renewed")
            if future is not None:
                future._set_result(result)
            return
        if error is not None:
            # Auto-acks are rarely awaited: say here that one failed (the message will be redelivered).
            log = logger.info if isinstance(error, Closed) else logger.warning
            log("%s: could not %s %r: %s", self.queue, request.action, message.key, error)
            if future is not None:
                future._set_exception(error)
        elif future is not None:
            future._set_result(None)
        self._release(message)

    def _lost(self, message: Message, why: str) -> None:
        if message not in self._in_hand:
            return
        if message._settled is None:
            message._settled = "lost"
            log = logger.debug if message._sql_acked else logger.warning
            log("%s: lost the lease on %r: %s", self.queue, message.key, why)
        self._release(message)

    def _release(self, message: Message) -> None:
        """The message is no longer in hand: stop renewing it and free its flow-control room."""
        stream = self._in_hand.pop(message, None)
        if stream is None:
            return
        self._bytes -= message.size
        if self._leaser is not None:
            self._leaser.remove(message)
        if stream == self._stream_id:
            self._stream_own -= 1
            self._stream_silent += message._sql_acked
        if self._paused and self._load() < self._fc.resume_threshold:
            self._paused = False
        self._room.set()  # its waiters check what they wait for
        if not self._paused and self._stream_open and self._stream_delivered >= self._stream_window and \
                (stream != self._stream_id or message._sql_acked) and \
                self._fc.max_messages - len(self._in_hand) >= self._min_window():
            # The stream used up its max_outstanding, and this room is not room on the server, which counts only
            # the stream's own leases that it was told were settled: the message came from an earlier stream, or
            # was acked in the application's own transaction (spanq.sql.ack). Left alone, the stream would wait
            # for its own messages (handled last) or the server's next poll. Reopen it as wide as the room is.
            self._restart.set()

    def settled_elsewhere(self, message: Message, action: str) -> None:
        """A client call (ack, nack, commit) settled one of this subscriber's messages."""
        if message._settled is None:
            message._settled = action
        self._release(message)

    def renewed_elsewhere(self, message: Message, lease: RenewedLease, duration: timedelta, since: float) -> None:
        """A client call renewed one of this subscriber's messages."""
        if self._leaser is None:
            return
        if lease.new_lease_token:
            self._leaser.extended(message, duration, since)
        else:
            self._lost(message, "its lease could not be renewed")

    # -- RPCs (called with rpc_lock held) ---------------------------------------

    async def _ack_rpc(self, messages: Sequence[Message]) -> list[bool]:
        assert self._schema is not None
        request = _requests.ack_request(self._schema, messages, ignore_not_found=True)
        # Patient: an ack that waits out an outage saves a redelivery (the subscriber never gives up either).
        response = await self._client._mutate("Ack", request, what=f"ack on {self.queue}", patient=True)
        return _requests.ack_results(response)

    async def _renew_rpc(self, messages: Sequence[Message], duration: timedelta,
                         reason: str | None = None) -> list[RenewedLease]:
        out: list[RenewedLease] = []
        # A renewal that cannot finish well within the lease is of no use; the leaser retries it anyway.
        policy = _retry.Retry(deadline=max(1.0, 0.5 * self._lease.total_seconds())) if duration else None
        for chunk in _requests.chunks(list(messages)):
            request = _requests.renew_request(self.queue, chunk, duration, reason)
            response = await self._client._mutate("RenewLease", request, what=f"renew on {self.queue}",
                                                  policy=policy, patient=True)
            out.extend(_requests.renew_results(response))
        return out


class Subscription:
    """A running subscription (asyncio): returned by ``spanq.aio.Client.subscribe``.

    ``cancel()`` begins a graceful shutdown: receiving stops, running callbacks get ``shutdown_timeout``
    seconds to finish, and messages still in hand are nacked. ``await subscription`` (or ``result()``)
    waits for the end and raises the error that ended it, if any (e.g. NotFound when the queue is dropped).
    ``async with`` cancels and waits on exit.
    """

    def __init__(self, subscriber: Subscriber) -> None:
        self._subscriber = subscriber

    @property
    def queue(self) -> str:
        """The queue's name."""
        return self._subscriber.queue

    @property
    def in_hand(self) -> int:
        """Messages leased to this subscription and not yet acked, nacked or lost."""
        return len(self._subscriber._in_hand)

    def cancel(self) -> None:
        """Begins a graceful shutdown; returns at once. Thread-safe and idempotent."""
        self._subscriber.stop()

    def done(self) -> bool:
        """Whether the subscription has ended."""
        return self._subscriber.task.done()

    async def result(self) -> None:
        """Waits until the subscription ends; raises the error that ended it, if any."""
        await asyncio.shield(self._subscriber.task)
        if self._subscriber.error is not None:
            raise self._subscriber.error

    def __await__(self) -> Generator[Any, None, None]:
        return self.result().__await__()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.cancel()
        if exc_type is None:
            await self.result()
        else:
            await asyncio.gather(self.result(), return_exceptions=True)

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<spanq.aio.Subscription {self.queue!r} {state}, {self.in_hand} in hand>"


Subscription.__module__ = "spanq.aio"
