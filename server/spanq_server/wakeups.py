"""Wake-ups for waiting Receive streams.

One LISTEN connection per server, whatever the number of streams: a send's
INSERT trigger notifies channel ``spanq_wakeup`` with the queue name, and
this fans the notification out in memory to the queue's waiting streams.
Sends through this server wake its streams directly, without waiting for
the notification. When LISTEN is unavailable (a lost connection, PgBouncer
in transaction mode) streams fall back to polling.
"""

import asyncio
import collections
import contextlib
import logging

import psycopg

from . import errors
from .store import Store
from .tasks import BackgroundTask

logger = logging.getLogger(__name__)

RECONNECT_BACKOFF = (0.1, 5.0)
"""Seconds: first and largest wait between attempts to re-open the listener."""


class Beacon:
    """Wakes every current waiter at once; later waiters wait for the next wake."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def current(self) -> asyncio.Event:
        """Take this before checking for work, then wait on it: no wake-up is lost in between."""
        return self._event

    def wake(self) -> None:
        self._event.set()
        self._event = asyncio.Event()


class Relay:
    """Wakes ONE waiting stream per wake(): the one that takes the work. A stream that
    leases a full batch passes the wake on (receive.py), so a burst still spreads over
    the streams, while 1,000 idle streams on a queue cost one lease query per send
    instead of 1,000 (a thundering herd that took the server ~1 ms of CPU per stream).
    A wake with nobody waiting is kept for the next waiter, so none is lost between
    looking for work and waiting; wake_all() wakes everyone (time jumps, shutdown,
    a listener that reconnected)."""

    def __init__(self) -> None:
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._kept = False
        self._timekeeper = False

    def keep_time(self) -> bool:
        """True if the caller, about to wait, should also wait for the queue's timers (the
        poll interval, the next deliver_time): one waiting stream per queue does, the others
        wait for wakes only, so 1,000 idle streams poll and meet scheduled messages as one.
        The caller calls release_time() when its wait ends."""
        if self._timekeeper:
            return False
        self._timekeeper = True
        return True

    def release_time(self) -> None:
        self._timekeeper = False

    def vacate(self) -> None:
        """A stream ended: if nobody keeps time now, wake a waiter so that one takes it over."""
        if not self._timekeeper and self._waiters:
            self.wake()

    def current(self) -> "Relay":
        """Same use as Beacon.current(): take it before checking for work, then wait on it."""
        return self

    async def wait(self) -> None:
        if self._kept:
            self._kept = False
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.wake()  # woken, then stopped waiting (timeout, shutdown) before acting: hand it on
            raise
        finally:
            if not waiter.done() or waiter.cancelled():
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._kept = True

    def wake_all(self) -> None:
        self._kept = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)


class QueueSignal:
    """A queue's two signals: messages may be deliverable (one stream at a time); leases were freed (all)."""

    def __init__(self) -> None:
        self.ready = Relay()
        self.room = Beacon()


class Wakeups:
    """The per-server listener and the per-queue signals. start()/stop() are idempotent."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._signals: dict[str, QueueSignal] = {}
        self._listener = BackgroundTask("spanq-listener", self._listen_forever)
        self.listening = False
        """True while notifications arrive; streams poll either way, as a fallback."""
        self.connected = asyncio.Event()

    def signal(self, queue: str) -> QueueSignal:
        signal = self._signals.get(queue)
        if signal is None:
            signal = self._signals[queue] = QueueSignal()
        return signal

    def wake(self, queue: str) -> None:
        signal = self._signals.get(queue)
        if signal is not None:
            signal.ready.wake()

    def wake_streams(self, queue: str) -> None:
        """Wakes every stream of one queue (it was dropped: let them find out now)."""
        signal = self._signals.get(queue)
        if signal is not None:
            signal.ready.wake_all()
            signal.room.wake()

    def wake_all(self) -> None:
        for signal in self._signals.values():
            signal.ready.wake_all()
            signal.room.wake()

    def start(self) -> None:
        self._listener.start()

    async def stop(self) -> None:
        await self._listener.stop()
        self.listening = False

    async def _listen_forever(self) -> None:
        delay = RECONNECT_BACKOFF[0]
        while True:
            conn = None
            try:
                conn = await self._store.listen()
                self.listening = True
                self.connected.set()
                delay = RECONNECT_BACKOFF[0]
                # Notifications sent while we were not listening are lost: look again.
                self.wake_all()
                async for notify in conn.notifies():
                    self.wake(notify.payload)
            except (psycopg.Error, errors.StoreUnavailable) as exc:
                logger.warning("wake-up listener lost its connection (%s); polling until it is back", exc)
            finally:
                self.listening = False
                self.connected.clear()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_BACKOFF[1])
