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
import secrets
from collections.abc import Callable

from ...ground import errors
from ...ground.tasks import BackgroundTask
from ...store import Listener, Store

logger = logging.getLogger(__name__)

RECONNECT_FIRST_DELAY = 0.1
"""Seconds: the first wait before re-opening a lost listener; it doubles up to the store's
reconnect_max_delay, as the pool's does, so wake-ups are back as soon as the database is."""
PROBE_TIMEOUT = 2.0
"""Seconds the listener waits to hear its own probe notification before it calls itself deaf."""
PROBE_INTERVAL = 60.0
"""Seconds between probes once the first one answered (or failed): a listener gone deaf
without an error (a silent network loss) reconnects; a deaf one that hears again says so."""
PROBE_PREFIX = "spanq-probe "
"""Probe payloads start with this; no queue name can (names are identifiers)."""


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
        """A stream ended: if nobody keeps time now, wake a waiter so that one takes it over.
        With none waiting yet the wake is kept: a stream that looked while the timekeeper was
        still there (keep_time() False) may be about to wait, for wakes only."""
        if not self._timekeeper:
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
    """The per-server listener and the per-queue signals. start()/stop() are idempotent.

    The listener proves it listens: after each (re)connect, and every PROBE_INTERVAL, it sends
    a notification through the pool, as a send's goes, and waits to hear it. While it cannot
    (a transaction-mode pooler, where LISTEN "succeeds" on a server connection that is handed
    to another client at once), it wakes one waiting stream of every queue every
    ``deaf_poll_interval``, as a notification would, and says so in the log and the metrics.
    """

    def __init__(self, store: Store, *, deaf_poll_interval: float = 0.25,
                 on_listening: Callable[[bool], None] | None = None) -> None:
        self._store = store
        self._signals: dict[str, QueueSignal] = {}
        self._listener = BackgroundTask("spanq-listener", self._listen_forever)
        self._deaf_poll = deaf_poll_interval
        self._on_listening = on_listening
        self._probe_payload = ""
        self._heard = asyncio.Event()
        self.listening = False
        """True while the listener is connected and no probe found it deaf; streams poll either way, as a fallback."""
        self.connected = asyncio.Event()
        """Set while the listening connection is open (heard or not)."""
        self.probed = asyncio.Event()
        """Set once a probe has answered, either way (tests wait for it)."""

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
        self._set_listening(False)

    def _set_listening(self, listening: bool) -> None:
        self.listening = listening
        if self._on_listening is not None:
            self._on_listening(listening)

    async def _listen_forever(self) -> None:
        delay = RECONNECT_FIRST_DELAY
        lost_at: float | None = None  # while reconnecting: when the connection was lost
        loop = asyncio.get_running_loop()
        while True:
            conn = None
            try:
                conn = await self._store.listen()
                self.connected.set()
                delay = RECONNECT_FIRST_DELAY
                if lost_at is not None:
                    logger.info("wake-up listener reconnected after %.1fs", loop.time() - lost_at)
                    lost_at = None
                # Notifications sent while we were not listening are lost: look again.
                self.wake_all()
                await self._hear(conn)
            except errors.StoreUnavailable as exc:
                if lost_at is None:  # once per outage, not once per attempt
                    lost_at = loop.time()
                    logger.warning("wake-up listener lost its connection (%s); polling until it is back", exc)
                else:
                    logger.debug("wake-up listener still cannot connect: %s", exc)
            finally:
                self._set_listening(False)
                self.connected.clear()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._store.reconnect_max_delay)

    async def _hear(self, conn: Listener) -> None:
        """Fans notifications out until the connection fails; probes it, and polls while deaf."""
        loop = asyncio.get_running_loop()
        self._set_listening(True)  # until a probe says otherwise
        first = True
        next_probe = loop.time()
        while True:
            if loop.time() >= next_probe:
                heard = await self._probe(conn)
                if heard is None:  # could not tell: try again soon
                    next_probe = loop.time() + PROBE_TIMEOUT
                elif not heard and self.listening and not first:
                    raise errors.StoreUnavailable("the listener stopped hearing its own probe notification")
                else:
                    self._report(heard, first=first)
                    first = False
                    next_probe = loop.time() + PROBE_INTERVAL
            wait = next_probe - loop.time() if self.listening else min(self._deaf_poll, next_probe - loop.time())
            await self._dispatch(conn, max(wait, 0.0))
            if not self.listening:
                self._poll_every_queue()

    def _poll_every_queue(self) -> None:
        for signal in self._signals.values():
            signal.ready.wake()  # what a notification would do, for every queue

    def _report(self, heard: bool, *, first: bool) -> None:
        if heard and not self.listening:
            if not first:
                logger.info("wake-up listener hears notifications again")
        elif not heard and (first or self.listening):
            logger.warning(
                "wake-up listener does not hear its own probe notification (a transaction-mode pooler such as "
                "PgBouncer?): waiting streams poll every %gs instead (--deaf-poll-interval); "
                "see docs/operations.md, Connection poolers", self._deaf_poll)
        self._set_listening(heard)
        self.probed.set()

    async def _probe(self, conn: Listener) -> bool | None:
        """Sends a notification as a send would (through the pool) and waits up to
        PROBE_TIMEOUT to hear it on conn, fanning out the others meanwhile; None when
        the notification could not be sent."""
        self._probe_payload = f"{PROBE_PREFIX}{secrets.token_hex(8)}"
        self._heard.clear()
        try:
            await asyncio.wait_for(self._store.notify_probe(self._probe_payload), PROBE_TIMEOUT)
        except (errors.StoreUnavailable, asyncio.TimeoutError) as exc:
            # The pool cannot tell now (the database is down or busy); the listener's own
            # connection reports a failure by itself.
            logger.info("could not send the listener's probe notification (%s)", exc)
            return None
        loop = asyncio.get_running_loop()
        give_up = loop.time() + PROBE_TIMEOUT
        while not self._heard.is_set() and loop.time() < give_up:
            # Until it is heard, poll as a deaf listener does: a deaf one's probe lasts
            # PROBE_TIMEOUT, far longer than the poll interval streams are promised.
            await self._dispatch(conn, min(self._deaf_poll, give_up - loop.time()))
            if not self._heard.is_set():
                self._poll_every_queue()
        return self._heard.is_set()

    async def _dispatch(self, conn: Listener, timeout: float) -> None:
        """Fans out the notifications that arrive within timeout seconds; returns early once the probe is heard."""
        # Closed at once on return: the generator holds the connection's lock.
        async with contextlib.aclosing(conn.payloads(timeout)) as payloads:
            async for payload in payloads:
                if payload.startswith(PROBE_PREFIX):
                    if payload == self._probe_payload:
                        self._heard.set()
                        return
                    continue  # another server's probe
                self.wake(payload)
