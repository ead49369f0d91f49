"""The subscriber's lease manager: one task that keeps every held lease alive.

Each message is renewed about halfway through its lease, in one batched
RenewLease with every other lease that is nearly as due, and carries the new
token forward (a renewed token supersedes the old one). A message held longer
than max_lease_duration is dropped: it will be redelivered. Renewals and the
dispatcher's acks share one lock, so an ack never races a renewal for the
same token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from ._errors import SpanqError
from ._types import Message, RenewedLease

logger = logging.getLogger(__name__)

RENEW_AT = (0.45, 0.6)
"""Renew when this fraction (jittered) of a lease has passed: well before expiry, with room for retries."""
COALESCE = 0.25
"""Leases due within this fraction of a lease from now are renewed in the same batch."""
RETRY_SOON = 0.1
"""After a failed renewal, try again after this fraction of a lease (at most 1 s)."""


@dataclasses.dataclass(eq=False)
class _Leased:
    message: Message
    received_at: float  # monotonic seconds
    renew_at: float
    expires_at: float


RenewFn = Callable[[Sequence[Message], timedelta], Awaitable[list[RenewedLease]]]


class Leaser:
    """Keeps the leases of held messages alive. ``start()``/``stop()``; stop is idempotent."""

    def __init__(
        self,
        *,
        name: str,
        renew: RenewFn,
        lock: asyncio.Lock,
        lease_duration: timedelta,
        extension: timedelta,
        max_lease_duration: timedelta,
        on_lost: Callable[[Message, str], None],
    ) -> None:
        self._name = name
        self._renew_fn = renew
        self._lock = lock
        self._lease = lease_duration.total_seconds()
        self._extension = extension
        self._max_lease = max_lease_duration.total_seconds()
        self._on_lost = on_lost
        self._leases: dict[Message, _Leased] = {}
        self._wake = asyncio.Event()
        self._next_at: float | None = None  # when the task wakes on its own (None: only when woken)
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._leases)

    def __contains__(self, message: object) -> bool:
        return message in self._leases

    def add(self, message: Message) -> None:
        now = time.monotonic()
        entry = _Leased(message, now, now + self._lease * random.uniform(*RENEW_AT), now + self._lease)
        self._leases[message] = entry
        if self._next_at is None or entry.renew_at < self._next_at:
            self._wake.set()  # not for every message: each wake scans every lease

    def remove(self, message: Message) -> None:
        self._leases.pop(message, None)

    def extended(self, message: Message, duration: timedelta, since: float) -> None:
        """Records a renewal made elsewhere (``Message.renew``), started at monotonic ``since``."""
        entry = self._leases.get(message)
        if entry is not None:
            seconds = duration.total_seconds()
            entry.expires_at = since + seconds
            entry.renew_at = since + seconds * random.uniform(*RENEW_AT)
            self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"spanq-leaser-{self._name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            for entry in [e for e in self._leases.values() if now - e.received_at >= self._max_lease]:
                del self._leases[entry.message]
                self._on_lost(entry.message, "it was held longer than max_lease_duration; it will be redelivered")
            horizon = now + COALESCE * self._extension.total_seconds()
            due = [e for e in self._leases.values() if e.renew_at <= horizon]
            if due:
                await self._renew(due)
                continue
            self._wake.clear()
            next_at = self._next_at = min((e.renew_at for e in self._leases.values()), default=None)
            try:
                await asyncio.wait_for(self._wake.wait(), None if next_at is None else max(0.0, next_at - now))
            except asyncio.TimeoutError:
                pass
            finally:
                self._next_at = None

    async def _renew(self, due: list[_Leased]) -> None:
        seconds = self._extension.total_seconds()
        async with self._lock:
            live = [e for e in due if self._leases.get(e.message) is e]  # an ack may have settled some meanwhile
            if not live:
                return
            started = time.monotonic()
            try:
                renewed = await self._renew_fn([e.message for e in live], self._extension)
            except SpanqError as exc:
                retry_at = time.monotonic() + min(1.0, RETRY_SOON * seconds)
                for e in live:
                    e.renew_at = retry_at
                logger.warning("renewing %d lease(s) on %s failed, retrying: %s", len(live), self._name, exc)
                return
            # Still under the lock: an ack built after this sees the new tokens.
            for entry, lease in zip(live, renewed):
                if lease.new_lease_token:
                    entry.message._renewed(lease.new_lease_token, lease.lease_expiration_time)
                    entry.expires_at = started + seconds
                    entry.renew_at = started + seconds * random.uniform(*RENEW_AT)
                elif self._leases.get(entry.message) is entry:
                    del self._leases[entry.message]
                    self._on_lost(entry.message, "its lease could not be renewed (expired, superseded or acknowledged)")
