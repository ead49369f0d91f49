"""The batching publisher behind ``publish``: messages for one queue gathered
into one Send by count, bytes and a short wait, as Pub/Sub's publisher does.

- ``publish`` encodes the message on the caller's thread, takes room from the
  flow-control gate (waiting or raising at its limits), and appends it to its
  queue's open batch; it wakes the client's loop only when a batch is full or
  a new batch needs its timer, not once per message.
- One sender task per queue sends one batch at a time, in order, so a
  publisher's messages to one queue are stored in the order published (the
  decision, and Pub/Sub's ordering keys, are in docs/sdk.md). Each batch is
  one Send with one request id, replayed on an unknown outcome like ``send``.
- A Send is atomic, so a batch refused for one message (a duplicate key, a
  payload over the limit) committed nothing: it is split in halves, each sent
  again with a fresh request id, until the culprit is alone and fails only its
  own future. The halves go in order too.
- A message with an ordering key that fails pauses its key, as Pub/Sub's
  publisher does: the key's later messages, queued or published after, fail
  with OrderingKeyPaused and are not sent (sending them would store them
  ahead of the failed one, out of order) until ``resume``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import grpc
from spanq_proto.v1 import queue_pb2

from . import _codec, _requests, _tracing
from ._errors import Closed, CommitOutcomeUnknown, OrderingKeyPaused, ResourceExhausted, SpanqError
from ._loop import call_soon, on_loop_thread
from ._types import BatchSettings, Future, Key, OutgoingMessage, PublishFlowControl, Queue

if TYPE_CHECKING:
    from .aio import Client

logger = logging.getLogger(__name__)

_ONE_MESSAGE_CODES = (
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.INVALID_ARGUMENT,
)
"""Send failures that may be one message's fault (a duplicate key, a payload over the limit, a value that
does not fit its column): the batch is split to find it. Anything else fails the whole batch."""
_ONE_MESSAGE_REASONS = frozenset({"PARENT_ROW_NOT_FOUND"})
"""NOT_FOUND for one message's missing parent row (not for a missing queue)."""


def _one_message_fault(error: SpanqError) -> bool:
    return error.code in _ONE_MESSAGE_CODES or error.reason in _ONE_MESSAGE_REASONS


class _Item(NamedTuple):
    wire: queue_pb2.SendMessage
    size: int
    future: Future[Key]
    ordering_key: str  # "": none


class _Gate:
    """Publisher flow control: messages and bytes published and not yet answered. Thread-safe; ``release``
    runs on the loop."""

    def __init__(self, settings: PublishFlowControl, loop: asyncio.AbstractEventLoop) -> None:
        self._settings = settings
        self._loop = loop
        self._cond = threading.Condition()
        self._messages = 0
        self._bytes = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.closed = False

    def _take(self, n: int, size: int) -> bool:
        """Takes the room if it fits (always when nothing is outstanding); call with the lock held."""
        if self.closed:
            raise Closed("the client is closed; publish nothing more")
        s = self._settings
        if self._messages and (self._messages + n > s.max_messages or self._bytes + size > s.max_bytes):
            if s.limit_exceeded == "raise":
                raise ResourceExhausted(
                    f"publisher flow control: {self._messages} message(s), {self._bytes} bytes outstanding "
                    f"(limits {s.max_messages}, {s.max_bytes}); nothing was published: wait for earlier "
                    "futures, or raise PublishFlowControl's limits"
                )
            return False
        self._messages += n
        self._bytes += size
        return True

    def take_blocking(self, n: int, size: int) -> None:
        with self._cond:
            while not self._take(n, size):
                if on_loop_thread(self._loop):
                    raise RuntimeError(
                        "publisher flow control is full and publish was called on the client's own event loop, "
                        "where waiting would deadlock; use spanq.aio.Client.publish there"
                    )
                self._cond.wait()

    async def take(self, n: int, size: int) -> None:
        while True:
            with self._cond:
                if self._take(n, size):
                    return
                waiter = self._loop.create_future()
                self._waiters.append(waiter)
            await waiter

    def release(self, n: int, size: int) -> None:
        with self._cond:
            self._messages -= n
            self._bytes -= size
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, collections.deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        with self._cond:
            self.closed = True
        self.release(0, 0)


class _Batcher:
    """One queue's open batch, its closed batches and its sender task."""

    def __init__(self, publisher: Publisher, queue: Queue) -> None:
        self._publisher = publisher
        self._settings = publisher.batch_settings
        self.queue = queue
        self._open: list[_Item] = []
        self._open_bytes = 0
        self._opened_at = 0.0
        self._closed_batches: collections.deque[list[_Item]] = collections.deque()
        self._parked = True
        """The sender waits for a wake-up (set under the lock; a publish that needs it clears it and wakes).
        The first wake-up starts the sender."""
        self._wake = asyncio.Event()
        self.enqueued = 0
        self.answered = 0
        self._flushes: list[tuple[int, asyncio.Future[None]]] = []
        self.task: asyncio.Task[None] | None = None

    # -- any thread, with the publisher's lock held ----------------------------------

    def add(self, items: Sequence[_Item]) -> bool:
        """Appends to the open batch, closing it when full; whether the sender must be woken."""
        s = self._settings
        wake = False
        for item in items:
            if self._open and self._open_bytes + item.size > s.max_bytes:
                self._close_open()
                wake = True
            if not self._open:
                self._opened_at = time.monotonic()
                wake = True  # the sender arms this batch's timer
            self._open.append(item)
            self._open_bytes += item.size
            if len(self._open) >= s.max_messages:
                self._close_open()
                wake = True
        self.enqueued += len(items)
        return self._unpark() if wake else False

    def close_open(self) -> bool:
        """Closes the open batch now (a flush); whether the sender must be woken."""
        if self._open:
            self._close_open()
        return self._unpark()

    def _close_open(self) -> None:
        self._closed_batches.append(self._open)
        self._open, self._open_bytes = [], 0

    def _unpark(self) -> bool:
        if self._parked:
            self._parked = False
            return True
        return False

    def wake(self) -> None:
        call_soon(self._publisher.loop, self._woken)

    def _woken(self) -> None:
        if self.task is None:
            self.task = self._publisher.loop.create_task(self._run(), name=f"spanq-publisher-{self.queue.name}")
        self._wake.set()

    # -- the loop ----------------------------------------------------------------------

    def _next(self) -> tuple[list[_Item] | None, float | None]:
        """The batch to send now, or (None, seconds to wait for one; None: until woken)."""
        with self._publisher.lock:
            if self._closed_batches:
                return self._closed_batches.popleft(), None
            if self._open:
                wait = self._opened_at + self._settings.max_latency - time.monotonic()
                if wait <= 0:
                    batch = self._open
                    self._open, self._open_bytes = [], 0
                    return batch, None
            else:
                wait = None
            self._wake.clear()
            self._parked = True
            return None, wait

    async def _run(self) -> None:
        while True:
            batch, wait = self._next()
            if batch is None:
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except TimeoutError:
                    pass
                continue
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                # Sent, or about to be: it may still commit, so never claim it failed.
                self._fail(batch, CommitOutcomeUnknown(
                    f"the client closed while this message's Send to {self.queue.name} was in flight: it may or "
                    "may not be stored"
                ))
                raise
            except Exception as exc:  # pragma: no cover - _send answers every item itself
                logger.exception("publishing to %s failed", self.queue.name)
                self._fail(batch, exc)

    async def _send(self, items: list[_Item]) -> None:
        """Sends ``items`` as one Send; on one message's fault, its halves in order, until the culprit is
        alone. Each attempt has its own request id: a refused Send committed nothing. Messages of a paused
        ordering key fail first, unsent (an earlier half may have paused it)."""
        paused = self._publisher.paused_among(self.queue.name, items)
        if paused:
            dropped = [item for item in items if item.ordering_key in paused]
            for item in dropped:
                item.future._set_exception(paused[item.ordering_key])
            self._answered(dropped)
            items = [item for item in items if item.ordering_key not in paused]
            if not items:
                return
        request = queue_pb2.SendRequest(queue=self.queue.name, messages=[item.wire for item in items])
        try:
            response = await self._publisher.client._call_mutation("Send", request, queue=self.queue.name,
                                                                   request_id=None)
        except SpanqError as exc:
            if len(items) > 1 and _one_message_fault(exc):
                half = len(items) // 2
                await self._send(items[:half])
                await self._send(items[half:])
            else:
                self._publisher.pause(self.queue.name, items, exc)
                self._fail(items, exc)
            return
        keys = [_codec.key_from_proto(self.queue, k) for k in response.keys]
        for item, key in zip(items, keys):
            item.future._set_result(key)
        self._answered(items)

    def _fail(self, items: list[_Item], error: BaseException) -> None:
        items = [item for item in items if not item.future.done()]  # a cancelled split answered some
        for item in items:
            item.future._set_exception(error)
        self._answered(items)

    def _answered(self, items: list[_Item]) -> None:
        self._publisher.gate.release(len(items), sum(item.size for item in items))
        self.answered += len(items)
        if self._flushes:
            done = [f for f in self._flushes if f[0] <= self.answered]
            self._flushes = [f for f in self._flushes if f[0] > self.answered]
            for _, waiter in done:
                if not waiter.done():
                    waiter.set_result(None)

    async def flushed(self, upto: int) -> None:
        """Waits until the first ``upto`` messages ever enqueued are answered (on the loop)."""
        if self.answered >= upto:
            return
        waiter = self._publisher.loop.create_future()
        self._flushes.append((upto, waiter))
        await waiter

    def abandon(self) -> None:
        """Fails everything not yet sent (the client closed); the task is cancelled by the caller."""
        with self._publisher.lock:
            batches = [*self._closed_batches, self._open]
            self._closed_batches.clear()
            self._open, self._open_bytes = [], 0
        for batch in batches:
            if batch:
                self._fail(batch, Closed(f"the client closed before this message to {self.queue.name} was sent"))


class Publisher:
    """One client's batching publisher: a batcher per queue. ``publish_*`` is thread-safe."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop, batch_settings: BatchSettings,
                 flow_control: PublishFlowControl) -> None:
        self.client = client
        self.loop = loop
        self.batch_settings = batch_settings
        self.gate = _Gate(flow_control, loop)
        self.lock = threading.Lock()
        self._batchers: dict[str, _Batcher] = {}
        self._closed = False
        self._paused: dict[tuple[str, str], BaseException] = {}
        """(queue, ordering key) -> the failure that paused it (with the lock held)."""

    @staticmethod
    def encode(queue: Queue, messages: Iterable[OutgoingMessage | Any]) -> list[_Item]:
        """Encodes on the caller's thread (an OutgoingMessage, or a bare payload): a message that cannot be
        encoded raises here, and nothing of the call is published."""
        items = []
        traced = _tracing.recording()
        caller_context = None if traced else _tracing.current_context()
        for message in messages:
            if traced:
                # One PRODUCER span per message ("create": the batch's Send comes later), its context in
                # the message's headers.
                with _tracing.producing(queue.name, "create") as trace_context:
                    wire = _requests.send_message(queue, message, trace_context)
            else:
                wire = _requests.send_message(queue, message, caller_context)
            items.append(_Item(wire, wire.ByteSize(), Future(), wire.ordering_key))
        return items

    def publish_blocking(self, queue: Queue, messages: Iterable[OutgoingMessage | Any]) -> list[Future[Key]]:
        """``publish`` from any thread: waits for flow-control room on that thread."""
        items = self.encode(queue, messages)
        self.gate.take_blocking(len(items), sum(i.size for i in items))
        return self._enqueue(queue, items)

    async def publish(self, queue: Queue, messages: Iterable[OutgoingMessage | Any]) -> list[Future[Key]]:
        """``publish`` on the loop: awaits flow-control room."""
        items = self.encode(queue, messages)
        await self.gate.take(len(items), sum(i.size for i in items))
        return self._enqueue(queue, items)

    def pause(self, queue: str, items: Sequence[_Item], error: BaseException) -> None:
        """Pauses the ordering keys of ``items``, which failed with ``error`` (on the loop)."""
        with self.lock:
            for item in items:
                if item.ordering_key:
                    self._paused.setdefault((queue, item.ordering_key), error)

    def resume(self, queue: str, ordering_key: str) -> None:
        """Lets publishes of ``ordering_key`` to ``queue`` go out again (a no-op for a key not paused)."""
        with self.lock:
            self._paused.pop((queue, ordering_key), None)

    def paused_among(self, queue: str, items: Sequence[_Item]) -> dict[str, OrderingKeyPaused]:
        """The error for each paused ordering key among ``items`` (on the loop)."""
        if not self._paused:  # read without the lock: only the loop pauses a key
            return {}
        with self.lock:
            causes = {item.ordering_key: self._paused[(queue, item.ordering_key)] for item in items
                      if item.ordering_key and (queue, item.ordering_key) in self._paused}
        errors = {}
        for key, cause in causes.items():
            errors[key] = error = OrderingKeyPaused(
                f"publishing to {queue} with ordering key {key!r} is paused: an earlier message of that key "
                f"failed ({cause}); nothing was sent. Call resume_publish({queue!r}, {key!r}) once that is dealt "
                "with, then publish again", queue=queue, ordering_key=key)
            error.__cause__ = cause
        return errors

    def _enqueue(self, queue: Queue, items: list[_Item]) -> list[Future[Key]]:
        with self.lock:
            batcher = None if self._closed else self._batchers.get(queue.name)
            if batcher is None and not self._closed:
                batcher = self._batchers[queue.name] = _Batcher(self, queue)
            if batcher is not None:
                batcher.queue = queue  # the latest definition decodes the keys
                wake = batcher.add(items)
        if batcher is None:
            call_soon(self.loop, lambda: self.gate.release(len(items), sum(i.size for i in items)))
            raise Closed("the client is closed; publish nothing more")
        if wake:
            batcher.wake()
        return [item.future for item in items]

    async def flush(self) -> None:
        """Sends every open batch now and waits until every message published so far is answered."""
        with self.lock:
            targets = [(b, b.enqueued, b.close_open()) for b in self._batchers.values()]
        for batcher, _, wake in targets:
            if wake:
                batcher.wake()
        for batcher, upto, _ in targets:
            await batcher.flushed(upto)

    async def close(self, timeout: float | None) -> None:
        """Refuses new messages, sends what is pending (for up to ``timeout`` seconds), then fails the rest
        with Closed."""
        self.gate.close()
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            pass
        with self.lock:
            self._closed = True
        tasks = [b.task for b in self._batchers.values() if b.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for batcher in self._batchers.values():
            batcher.abandon()
