"""The subscriber's dispatcher: acks, nacks and renewals as work items on a
queue, sent in batches.

One task drains the queue: whatever accumulated while the previous batch was
in flight goes out as one Ack and one RenewLease, so batches grow with load
and add no latency when idle. A batch that fails for one message (its lease
was lost) is retried message by message, so one bad ack cannot sink the rest.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from ._errors import Closed, CommitOutcomeUnknown, DeadlineExceeded, SpanqError, Unavailable
from ._loop import call_soon
from ._requests import MAX_ITEMS_PER_REQUEST
from ._types import Future, Message, RenewedLease

logger = logging.getLogger(__name__)

_BATCH_WIDE_ERRORS = (CommitOutcomeUnknown, Unavailable, DeadlineExceeded, Closed)
"""Errors that say nothing about any one message: retrying message by message would not help."""


@dataclasses.dataclass(eq=False)
class Request:
    """One work item: ``action`` is "ack", "nack" or "renew"."""

    action: str
    message: Message
    future: Future[Any] | None
    """None where nobody can await the outcome (the subscriber's own auto-acks and nacks)."""
    lease_duration: timedelta | None = None
    reason: str | None = None
    """A nack's reason (its dead-letter history)."""


AckFn = Callable[[Sequence[Message]], Awaitable[list[bool]]]
RenewFn = Callable[[Sequence[Message], timedelta, "str | None"], Awaitable[list[RenewedLease]]]
DoneFn = Callable[[Request, "BaseException | None", Any], None]


class Dispatcher:
    """Sends acks, nacks and renewals in batches. ``put`` is thread-safe; ``stop`` is idempotent."""

    def __init__(
        self,
        *,
        name: str,
        loop: asyncio.AbstractEventLoop,
        lock: asyncio.Lock,
        ack: AckFn,
        renew: RenewFn,
        on_done: DoneFn,
    ) -> None:
        self._name = name
        self._loop = loop
        self._lock = lock
        self._ack = ack
        self._renew = renew
        self._on_done = on_done
        self._queue: asyncio.Queue[Request] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def put(self, request: Request) -> None:
        call_soon(self._loop, lambda: self._enqueue(request))

    def put_nowait(self, request: Request) -> None:
        """``put`` from the loop's own thread."""
        self._enqueue(request)

    def _enqueue(self, request: Request) -> None:
        if self._closed:
            self._finish(request, Closed(f"the subscription to {self._name} is closed; the message was released"))
        else:
            self._queue.put_nowait(request)

    def start(self) -> None:
        if self._task is None:
            self._task = self._loop.create_task(self._run(), name=f"spanq-dispatcher-{self._name}")

    async def flush(self) -> None:
        """Waits until everything queued so far has been sent."""
        await self._queue.join()

    async def stop(self) -> None:
        """Stops sending; queued items fail with Closed."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        while not self._queue.empty():
            self._enqueue(self._queue.get_nowait())

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < 10 * MAX_ITEMS_PER_REQUEST:
                batch.append(self._queue.get_nowait())
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                for request in batch:
                    self._finish(request, Closed(f"the subscription to {self._name} closed before this was sent"))
                raise
            except Exception as exc:  # pragma: no cover - _send reports per item
                logger.exception("dispatcher for %s failed", self._name)
                for request in batch:
                    self._finish(request, exc)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _send(self, batch: list[Request]) -> None:
        acks = [r for r in batch if r.action == "ack"]
        nacks: dict[str | None, list[Request]] = {}  # one RenewLease per reason
        for r in batch:
            if r.action == "nack":
                nacks.setdefault(r.reason, []).append(r)
        renewals: dict[timedelta, list[Request]] = {}
        for r in batch:
            if r.action == "renew":
                renewals.setdefault(r.lease_duration or timedelta(0), []).append(r)
        async with self._lock:  # no leaser renewal in flight: tokens read now are current
            for group in _unique_key_groups(acks):
                await self._send_acks(group)
            for reason, same in nacks.items():
                for group in _chunks(same):
                    await self._send_renewals(group, timedelta(0), reason)
            for duration, requests in renewals.items():
                for group in _chunks(requests):
                    await self._send_renewals(group, duration)

    async def _send_acks(self, group: list[Request]) -> None:
        try:
            results = await self._ack([r.message for r in group])
        except SpanqError as exc:
            if len(group) > 1 and not isinstance(exc, _BATCH_WIDE_ERRORS):
                for request in group:
                    await self._send_acks([request])
                return
            for request in group:
                self._finish(request, exc)
            return
        for request, acked in zip(group, results):
            self._finish(request, None, acked)

    async def _send_renewals(self, group: list[Request], duration: timedelta, reason: str | None = None) -> None:
        try:
            results = await self._renew([r.message for r in group], duration, reason)
        except SpanqError as exc:
            for request in group:
                self._finish(request, exc)
            return
        for request, lease in zip(group, results):
            self._finish(request, None, lease)

    def _finish(self, request: Request, error: BaseException | None, result: Any = None) -> None:
        try:
            self._on_done(request, error, result)
        except Exception:  # pragma: no cover - a bug in the subscriber's bookkeeping
            logger.exception("settling %r failed", request.message)


def _chunks(requests: list[Request]) -> list[list[Request]]:
    return [requests[i:i + MAX_ITEMS_PER_REQUEST] for i in range(0, len(requests), MAX_ITEMS_PER_REQUEST)]


def _unique_key_groups(requests: list[Request]) -> list[list[Request]]:
    """Batches of at most MAX_ITEMS_PER_REQUEST acks with distinct keys (the server refuses a key twice)."""
    groups: list[tuple[set[Any], list[Request]]] = []
    for request in requests:
        for keys, group in groups:
            if request.message.key not in keys and len(group) < MAX_ITEMS_PER_REQUEST:
                keys.add(request.message.key)
                group.append(request)
                break
        else:
            groups.append(({request.message.key}, [request]))
    return [group for _, group in groups]
