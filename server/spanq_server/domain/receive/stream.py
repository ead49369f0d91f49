"""The long-running receive: a stream that pushes leased messages as soon as
they are deliverable, like Spanner's RECEIVE query.

Each stream loops: lease up to a batch (one SQL statement, SKIP LOCKED), push
it, and when nothing is deliverable sleep until the earliest of: a wake-up
(send, nack), the queue's next deliver_time (scheduled messages, expired
leases), the poll fallback, the stream's end. Streams hold no database
connection while they wait.

A stream whose client lets every lease it was sent lapse ends while another
stream of the queue on this server settles its own (lapses.py), rather than
take messages again at each expiry until they are dead-lettered.

A stream that writes its own responses (``serve``, spanq.v1's Receive) leases
its next batch only once the last one is written: gRPC's write waits while
HTTP/2 flow control says the client is not reading. A write blocked for
WRITE_BOUND of the lease ends the stream. A message that cannot be encoded for
any client goes to the dead-letter queue, or stays.

Lease safety, the rule every give-back follows (Handover): a lease may be given
back (deliver_time and attempt as before) only if no response carrying it was
ever handed to the transport. Once write() was called for a response, its
leases stay until acked, renewed, released or expired, however the write ends:
gRPC cannot withdraw a send it started, and reports its end late (a client's
cancel is often processed first, so the write raises although the client read
the bytes). So an ended stream (cancelled, dropped, timed out, shut down) gives
back only the responses it never started to write, and a batch it was still
leasing (_lease).

What a stream can give back once handed over is the attempt, never the lease: the
messages of the responses past its read watermark (held.py: none of them acked,
renewed or released through this server) get their delivery attempt back when the
stream shows that its client does not read them, so that a message nobody read does
not approach the dead-letter queue: a write blocked for WRITE_BOUND, the stream ended
for letting every lease lapse (lapses.py), or, beside other streams of the queue,
their leases ended and every one lapsed. A client that went away (cancelled) gets
nothing back: it may have read what it was sent.
"""

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any, Generic, Protocol, TypeVar

from ...ground import errors
from ...ground.clock import Clock
from ...ground.config import Limits
from ...ground.model import LeasedMessage, QueueDef
from ...metrics.counters import Counters
from ...store import Store
from ..testsignals import stream_waiting
from .held import Holdings, RoomWait, StreamHolding
from .lapses import LapseWatch
from .wakeups import Wakeups

logger = logging.getLogger(__name__)

DEFAULT_BATCH = 100
MAX_BATCH = 1000
DEFAULT_MAX_OUTSTANDING = 1000
MAX_OUTSTANDING = 100_000
MAX_STREAM_DURATION = timedelta(hours=1)
MIN_WAIT = 0.005
"""Seconds: the shortest sleep, for due messages that another receiver holds locked for a moment."""
KEY_HELD_WAIT = 0.1
"""Seconds: how long a stream of a queue with max_in_flight_per_key waits, when messages are
due but it leased fewer than it asked, before it looks again: they may be held by their
keys' limit, which an ack through another server (no wake-up here) or a lease's end lifts."""
IDLE_POLLS = 10
"""A stream that does not keep its queue's timers looks on its own every this many poll intervals."""
WRITE_BOUND = 0.5
"""The fraction of its lease a response's write may stay blocked (the client is not
reading) before the stream ends and gives back what it had not written."""
REMEMBERED_UNDELIVERABLE = 10_000
"""Undeliverable messages left in their queue that are logged once; past this many the memory starts over."""

Response = TypeVar("Response")


@dataclasses.dataclass(frozen=True)
class Encoded(Generic[Response]):
    """A leased batch as responses (each with the messages it carries, in order), and the
    messages that no client could receive, each with why."""

    responses: list[tuple[Response, list[LeasedMessage]]]
    undeliverable: list[tuple[LeasedMessage, str]]


class Handover(Generic[Response]):
    """A batch's responses on their way to the transport, and which of them may still be
    given back: the lease-safety rule (the module's docstring) in one place. A response
    counts as handed over from the moment write() is called for it, whatever the write
    then reports."""

    def __init__(self, responses: list[tuple[Response, list[LeasedMessage]]],
                 handed: Callable[[list[LeasedMessage]], None] | None = None) -> None:
        self._responses = responses
        self._handed = handed  # told of each response's messages as it is handed to write()
        self._past = 0  # responses[:_past] were handed to write() (their leases stay) or taken back

    async def write_all(self, write: Callable[[Response], Awaitable[Any]], bound: float) -> None:
        """Writes each response in turn, each within ``bound`` seconds (asyncio.TimeoutError)."""
        while self._past < len(self._responses):
            response, carried = self._responses[self._past]
            self._past += 1  # before write(): from here the client may get it
            if self._handed is not None:
                self._handed(carried)
            await asyncio.wait_for(write(response), bound)

    def take_back(self) -> list[LeasedMessage]:
        """The messages whose leases may be given back, those of the responses never handed
        to write(); each once (the caller gives them back)."""
        rest = [m for _, carried in self._responses[self._past:] for m in carried]
        self._past = len(self._responses)
        return rest


@dataclasses.dataclass(frozen=True)
class ReceiveOptions:
    max_batch_size: int = DEFAULT_BATCH
    max_duration: timedelta | None = None
    """None: until cancelled."""
    lease_duration: timedelta | None = None
    """None: the queue's lease_duration."""
    max_outstanding: int = DEFAULT_MAX_OUTSTANDING

    def checked(self) -> "ReceiveOptions":
        if not 0 <= self.max_batch_size <= MAX_BATCH:
            raise errors.InvalidArgument(f"max_batch_size must be between 1 and {MAX_BATCH} (0: {DEFAULT_BATCH})")
        if not 0 <= self.max_outstanding <= MAX_OUTSTANDING:
            raise errors.InvalidArgument(
                f"max_outstanding must be between 1 and {MAX_OUTSTANDING} (0: {DEFAULT_MAX_OUTSTANDING})"
            )
        return dataclasses.replace(
            self,
            max_batch_size=self.max_batch_size or DEFAULT_BATCH,
            max_outstanding=self.max_outstanding or DEFAULT_MAX_OUTSTANDING,
        )


@dataclasses.dataclass
class OpenStream:
    """One open stream, as an operator sees it (the dashboard's consumers): kept beside
    what the stream keeps anyway, so describing it costs nothing while nobody looks."""

    queue: str
    peer: str
    """The client's address, as the front-end knows it (gRPC's peer), or ""."""
    opened_at: datetime
    max_batch_size: int
    max_outstanding: int
    lease_duration: timedelta
    holding: StreamHolding
    delivered: int = 0
    """Messages handed to the stream since it opened."""

    @property
    def held(self) -> int:
        """Its leases as this server knows them (held.py: an upper bound, recounted when full)."""
        return len(self.holding)


class Receiver:
    """Runs Receive streams; keeps them per queue for the stream limit and to describe them."""

    def __init__(self, store: Store, wakeups: Wakeups, clock: Clock, limits: Limits,
                 poll_interval: timedelta, metrics: Counters,
                 holdings: Holdings | None = None) -> None:
        self._store = store
        self._holdings = holdings or Holdings()
        self._metrics = metrics
        self._wakeups = wakeups
        self._clock = clock
        self._limits = limits
        self._poll = poll_interval.total_seconds()
        self._streams: dict[str, dict[str, OpenStream]] = {}  # by queue, then by the stream's token prefix
        self._watches: dict[str, set[LapseWatch]] = {}  # each open stream's, by queue
        self._closing = asyncio.Event()
        self._giving_back: set[asyncio.Task[int]] = set()  # strong references until done
        self._undeliverable_logged: set[tuple[str, str]] = set()
        self._on_change: list[Callable[[], None]] = []
        clock.on_advance(wakeups.wake_all)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Calls ``callback()`` whenever a stream opens or closes (roster.py reports them)."""
        self._on_change.append(callback)

    def _changed(self) -> None:
        for callback in self._on_change:
            callback()

    def open_streams(self) -> int:
        return sum(map(len, self._streams.values()))

    def streams_by_queue(self) -> dict[str, int]:
        """Open streams per queue (queues with none are left out)."""
        return {name: len(streams) for name, streams in self._streams.items()}

    def streams(self, name: str) -> list[OpenStream]:
        """The queue's open streams on this server, oldest first."""
        return list(self._streams.get(name, {}).values())

    def every_stream(self) -> list[OpenStream]:
        """Every open stream on this server."""
        return [s for streams in self._streams.values() for s in streams.values()]

    def queue_dropped(self, name: str) -> None:
        """Ends this server's streams on a dropped queue (NOT_FOUND) at once, not at their next poll."""
        self._wakeups.wake_streams(name)

    def close(self) -> None:
        """Ends every stream with UNAVAILABLE so that clients reconnect (to another server)."""
        self._closing.set()
        self._wakeups.wake_all()

    async def give_back(self, queue: QueueDef, leased: list[LeasedMessage]) -> None:
        """Undoes leases that no client got (a front-end filtered them out): each message is
        ready again at once, its delivery attempt as before."""
        if leased:
            await self._store.leases_return(queue, leased)

    async def given_back(self, timeout: float) -> None:
        """Waits (up to timeout) for the leases of ended streams to be given back."""
        if self._giving_back:
            await asyncio.wait(set(self._giving_back), timeout=timeout)

    async def stream(self, queue: QueueDef, options: ReceiveOptions,
                     peer: str = "") -> AsyncGenerator[list[LeasedMessage], None]:
        """``peer``: the client's address, to describe the stream (``streams``)."""
        options = options.checked()
        here = len(self._streams.get(queue.name, ()))
        if here >= self._limits.max_streams_per_queue:
            raise errors.LimitExceeded(
                f"queue {queue.name!r} has {here} open Receive streams on this server, the "
                "configured maximum; close some or spread them over more servers"
            )
        streams = self._streams.setdefault(queue.name, {})
        watch = LapseWatch(options.lease_duration or queue.lease_duration)
        watches = self._watches.setdefault(queue.name, set())
        watches.add(watch)
        prefix = secrets.token_hex(8)  # this stream's tokens share it: max_outstanding counts by it
        holding = self._holdings.open(queue.name, prefix)  # an upper bound on its live leases (held.py)
        described = streams[prefix] = OpenStream(
            queue.name, peer, self._clock.now() or datetime.now(timezone.utc), options.max_batch_size,
            options.max_outstanding, options.lease_duration or queue.lease_duration, holding)
        self._changed()
        try:
            async for batch in self._run(queue, options, watch, prefix, holding):
                described.delivered += len(batch)
                yield batch
        finally:
            self._holdings.close(queue.name, prefix)
            self._wakeups.signal(queue.name).ready.vacate()
            del streams[prefix]
            if not streams and self._streams.get(queue.name) is streams:
                del self._streams[queue.name]
            watches.discard(watch)
            if not watches and self._watches.get(queue.name) is watches:
                del self._watches[queue.name]
            self._changed()

    def _healthy_peer(self, queue: str, watch: LapseWatch, now: datetime) -> bool:
        return any(w is not watch and w.healthy(now) for w in self._watches[queue])

    async def _look_at_lapses(self, queue: QueueDef, watch: LapseWatch, holding: StreamHolding,
                              now: datetime) -> None:
        """Looks at the leases the stream delivered (lapses.py); ends the stream if its
        client is suspect while another stream of the queue here is proven."""
        tokens = watch.to_look_at(now)
        lapsed, live = await self._store.leases_lapsed(queue, tokens, self._clock.now())
        _honour_cancellation()
        if watch.found(now, len(tokens), lapsed, live):
            await self._end_if_others_process(queue, watch, holding, now)

    async def _refund_lapsed(self, queue: QueueDef, ended: list[str]) -> None:
        """The leases the stream sent past its read watermark that have ended get their attempts
        back if every one of them lapsed (a client that settled one of them, through any server,
        reads what it gets) and the stream is not alone on its queue here. Alone, its lapses
        count (lapses.py: a lapse is also how a client fails a message)."""
        if len(self._watches[queue.name]) < 2:
            return
        try:
            lapsed, _ = await self._store.leases_lapsed(queue, ended, self._clock.now())
        except errors.QueueError as exc:
            logger.warning("could not look at the unread leases of a stream: %s", exc)
            return  # they count, as they did before
        if lapsed == len(ended):
            await self._refund(queue, ended)

    async def _end_if_others_process(self, queue: QueueDef, watch: LapseWatch, holding: StreamHolding,
                                     now: datetime) -> None:
        if self._healthy_peer(queue.name, watch, now):
            # Nothing it sent since will be read either: their attempts back too.
            await self._refund(queue, holding.unread())
            raise errors.ClientNotReading(
                "this stream's client let every lease of the messages it was sent lapse (none acked, renewed "
                "or released) while other streams of the queue process theirs: the stream ended so that its "
                "messages go to them instead of being leased here again until they are dead-lettered. Ack, "
                "renew or release (nack) each message within its lease, and read the stream steadily"
            )

    async def serve(self, queue: QueueDef, options: ReceiveOptions,
                    encode: Callable[[list[LeasedMessage], int], Encoded[Response]],
                    write: Callable[[Response], Awaitable[Any]], peer: str = "") -> None:
        """Runs a stream that writes its own responses: ``encode`` turns a batch into
        responses of at most the configured bytes, ``write`` sends one (and waits while
        the client is not reading). The stream leases its next batch only after writing
        the last."""
        bound = (options.lease_duration or queue.lease_duration).total_seconds() * WRITE_BOUND
        async with contextlib.aclosing(self.stream(queue, options, peer)) as batches:
            async for batch in batches:
                await self._deliver(queue, batch, encode, write, bound)

    async def _deliver(self, queue: QueueDef, batch: list[LeasedMessage],
                       encode: Callable[[list[LeasedMessage], int], Encoded[Response]],
                       write: Callable[[Response], Awaitable[Any]], bound: float) -> None:
        encoded = encode(batch, self._limits.max_response_bytes)
        holding = self._holdings.of(queue.name, batch[0].lease_token)
        handover = Handover(encoded.responses, holding.handed if holding else None)
        try:
            if encoded.undeliverable:
                await self._undeliverable(queue, encoded.undeliverable)
            try:
                await handover.write_all(write, bound)
            except asyncio.TimeoutError:
                # gRPC still sends the blocked response if the client reads on: it keeps its leases.
                unwritten = handover.take_back()
                await self._return_now(queue, unwritten)
                if holding is not None:
                    await self._refund(queue, holding.unread())
                raise errors.ClientNotReading(
                    f"this stream's client read none of a response for {bound:g} s (half its lease): the "
                    f"stream ended, and gave back the {len(unwritten)} messages it had not written yet. Read "
                    "the stream steadily (or ask for smaller batches)"
                ) from None
        except BaseException:  # cancelled (the client went away), the call broke, or shutdown
            self._return_later(queue, handover.take_back())
            raise

    async def _undeliverable(self, queue: QueueDef, bad: list[tuple[LeasedMessage, str]]) -> None:
        """Messages no client can receive: to the dead-letter queue when there is one; else
        they stay (leased now, redelivered after their backoff), logged once per server."""
        if queue.dead_letter_queue:
            moved = 0
            for m, why in bad:  # one by one: each keeps its own reason
                one = await self._store.messages_dead_letter(queue, [m.lease_token], f"undeliverable: {why}")
                moved += one
                if one:  # deleted under its token: room under max_outstanding
                    self._holdings.acked(queue.name, [m.lease_token])
                logger.warning("queue %s: message %r cannot be delivered to any client (%s); %s", queue.name,
                               m.key, why, f"moved to the dead-letter queue {queue.dead_letter_queue}" if one else
                               f"its key is in the dead-letter queue {queue.dead_letter_queue} already: it stays, "
                               "tried again after the queue's max_backoff")
            self._metrics.undeliverable(queue.name, moved)
            return
        for m, why in bad:
            seen = (queue.name, repr(m.key))
            if seen in self._undeliverable_logged:
                continue
            if len(self._undeliverable_logged) >= REMEMBERED_UNDELIVERABLE:
                self._undeliverable_logged.clear()
            self._undeliverable_logged.add(seen)
            logger.error("queue %s: message %r cannot be delivered to any client (%s); it stays in the queue "
                         "(redelivered after its backoff, skipped again): fix or delete it in SQL, or give the "
                         "queue a dead-letter queue", queue.name, m.key, why)
            self._metrics.undeliverable(queue.name, 1)

    async def _refund(self, queue: QueueDef, unread: list[str]) -> None:
        """Gives back the attempts of leases the client did not read (the leases stay)."""
        if not unread:
            return
        try:
            self._metrics.refunded(queue.name, await self._store.leases_refund(queue, unread))
        except errors.QueueError as exc:
            logger.warning("could not give back the delivery attempts of unread leases: %s", exc)

    async def _return_now(self, queue: QueueDef, unwritten: list[LeasedMessage]) -> None:
        if not unwritten:
            return
        try:
            await self._store.leases_return(queue, unwritten)
        except errors.QueueError as exc:
            # The leases expire by themselves; only the redelivery is later.
            logger.warning("could not give back the unwritten leases of a stream: %s", exc)

    def _return_later(self, queue: QueueDef, unwritten: list[LeasedMessage]) -> None:
        """Gives back leases from a task that is being cancelled (it cannot await)."""
        if unwritten:
            self._track(asyncio.create_task(self._store.leases_return(queue, unwritten)))

    async def _run(self, queue: QueueDef, options: ReceiveOptions, watch: LapseWatch, prefix: str,
                   holding: StreamHolding) -> AsyncIterator[list[LeasedMessage]]:
        lease = options.lease_duration or queue.lease_duration
        # A dead-letter queue's messages carry their history: read beside each batch (its queues
        # as the stream opens; one named a dead-letter queue later shows it to new streams).
        history = bool(await self._store.queue_dead_letter_sources(queue.name))
        signal = self._wakeups.signal(queue.name)
        end = None if options.max_duration is None else time.monotonic() + options.max_duration.total_seconds()
        drained = False  # the last lease got fewer than it asked for: nothing more was deliverable
        turn_over = False  # it got a full batch, but waits for a wake-up (not proven yet)
        full_since: float | None = None  # since when the holding is at max_outstanding, or last recounted so
        while not self._closing.is_set():
            remaining = None if end is None else end - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            ready, room = signal.ready.current(), signal.room.current()
            now = self._clock.now() or datetime.now(timezone.utc)
            probe = watch.due_in(now)
            if probe is not None and probe <= 0:
                await self._look_at_lapses(queue, watch, holding, now)
                continue
            unread_end = holding.unread_end()
            if unread_end is not None and unread_end <= now:
                await self._refund_lapsed(queue, holding.unread_ended(now))
                _honour_cancellation()
                continue
            unread_in = None if unread_end is None else (unread_end - now).total_seconds()
            if len(holding) < options.max_outstanding:
                full_since = None
            else:
                # Recounted at the poll interval while it stays full: acks through SQL or
                # another server free room that no wake-up here tells of.
                full_since = full_since or time.monotonic()
                if holding.needs_recount(now) or time.monotonic() - full_since >= self._poll:
                    holding.recounted(await self._store.leases_held(queue, prefix, holding.tokens(),
                                                                    self._clock.now()), now)
                    _honour_cancellation()
                    full_since = time.monotonic()
            held = len(holding)
            short = False
            if held < options.max_outstanding:
                if not drained:
                    if watch.suspect:
                        await self._end_if_others_process(queue, watch, holding, now)
                    asked = min(options.max_batch_size, options.max_outstanding - held)
                    batch = await self._lease(queue, history, max_batch_size=asked, lease_duration=lease,
                                              lease_prefix=prefix)
                    short = len(batch) < asked
                    if batch:
                        watch.delivered(batch)
                        holding.leased(batch)
                        self._metrics.delivered(queue.name, batch)
                        if len(batch) == asked:
                            signal.ready.wake()  # a full batch: more may be deliverable; wake another stream
                        # A partial batch took all there was: wait next rather than lease again at
                        # once for nothing (a wake that comes meanwhile is kept for the wait). A
                        # stream not yet proven to settle its messages (lapses.py) takes one
                        # batch per wake: streams that never read cannot take a burst whole.
                        drained = len(batch) < asked
                        turn_over = not drained and not watch.proven
                        drained = drained or turn_over
                        yield batch
                        continue
                short = short or drained  # the last lease got fewer than it asked for
                drained = False
                # One waiting stream per queue keeps the timers (poll, next deliver_time) and
                # wakes the others through full batches, as a send does; the others look on
                # their own only every IDLE_POLLS polls, in case the timekeeper is stuck.
                keeper = not turn_over and signal.ready.keep_time()  # a turn over waits for a wake only
                turn_over = False
                try:
                    waits = [remaining, self._poll * (1 if keeper else IDLE_POLLS), probe, unread_in]
                    if keeper:
                        due = await self._store.next_delivery_in(queue, self._clock.now())
                        _honour_cancellation()
                        if due is not None and due <= 0 and short and queue.max_in_flight_per_key is not None:
                            due = KEY_HELD_WAIT  # due, yet not leased: held by their keys' limit, or locked
                        waits.append(None if due is None else max(due, MIN_WAIT))
                    stream_waiting.emit(queue.name, prefix, False)
                    await _wait_any([ready, self._closing], min(w for w in waits if w is not None))
                finally:
                    if keeper:
                        signal.ready.release_time()
            else:
                # Room comes from an ack or renewal through this server (the holding knows
                # whose), a lease's end, or, for acks elsewhere, the poll.
                ends = holding.next_end()
                recount = self._poll - (time.monotonic() - (full_since or time.monotonic()))
                waits = [max(recount, MIN_WAIT), remaining, probe, unread_in,
                         None if ends is None else max((ends - now).total_seconds(), MIN_WAIT)]
                # An ack through this server that frees room may lease for it meanwhile
                # (ack_lease.py); not with a dead-letter history to read beside each batch.
                waiting = None if history else RoomWait(options.max_batch_size, options.max_outstanding, lease)
                holding.waiting = waiting
                stream_waiting.emit(queue.name, prefix, True)
                try:
                    await _wait_any([room, self._closing, *([waiting] if waiting else [])],
                                    min(w for w in waits if w is not None))
                except BaseException:
                    if waiting is not None and waiting.taking is not None:
                        waiting.taking.add_done_callback(lambda done: self._give_back(queue, done))
                    raise
                finally:
                    holding.waiting = None
                if waiting is not None and waiting.taking is not None:
                    batch = await self._taken(queue, waiting.taking)
                    if batch:
                        full_since = None  # the room was freed and taken, as this server knows
                        watch.delivered(batch)
                        holding.leased(batch)
                        self._metrics.delivered(queue.name, batch)
                        if len(batch) == waiting.asked:
                            signal.ready.wake()  # a full batch: more may be deliverable
                        yield batch
        raise errors.StoreUnavailable("the server is shutting down; reconnect to continue receiving")

    async def _lease(self, queue: QueueDef, history: bool, **lease: Any) -> list[LeasedMessage]:
        """One batch for a stream that is still wanted; a batch leased for a stream
        that ended meanwhile is given back rather than left to its lease's expiry.

        The statement runs shielded: cancelling it midway would leave unknown whether
        it leased rows, and would swallow the cancellation on Python 3.11 (see
        _honour_cancellation)."""
        async def leased() -> list[LeasedMessage]:
            batch = await self._store.messages_lease(queue, now=self._clock.now(), **lease)
            if not history or not batch:
                return batch
            try:
                return await self._store.leased_history(queue, batch)
            except errors.QueueError:
                return batch  # the messages matter more than their history

        return await self._taken(queue, asyncio.ensure_future(leased()))

    async def _taken(self, queue: QueueDef, taking: "asyncio.Future[list[LeasedMessage]]") -> list[LeasedMessage]:
        """A batch being leased for this stream (its own lease statement, or an ack's commit:
        ack_lease.py), once committed; given back if the stream ends first (never handed over)."""
        try:
            batch = await asyncio.shield(taking)
            _honour_cancellation()
        except asyncio.CancelledError:
            taking.add_done_callback(lambda done: self._give_back(queue, done))
            raise
        return batch

    def _give_back(self, queue: QueueDef, leasing: "asyncio.Future[list[LeasedMessage]]") -> None:
        if leasing.cancelled() or leasing.exception() is not None or not leasing.result():
            return
        self._track(asyncio.create_task(self._store.leases_return(queue, leasing.result())))

    def _track(self, task: "asyncio.Task[int]") -> None:
        self._giving_back.add(task)
        task.add_done_callback(self._gave_back)

    def _gave_back(self, task: "asyncio.Task[int]") -> None:
        self._giving_back.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The leases expire by themselves; only the redelivery is later.
            logger.warning("could not give back leases of an ended stream: %s", task.exception())


def _honour_cancellation() -> None:
    """Raises CancelledError if this task was cancelled but the cancellation was swallowed.

    On Python 3.11, asyncio.wait_for (which psycopg_pool uses while a caller waits for a
    connection) returns normally when the cancellation races with the connection being
    handed over (CPython gh-86296, fixed in 3.12); the task still counts the request. gRPC
    cancels a stream's task exactly once when its client goes away, so without this check
    the stream would live on: holding a stream slot, and leasing messages nobody receives.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError()


class _Waitable(Protocol):
    async def wait(self) -> Any: ...


async def _wait_any(events: list[_Waitable], timeout: float) -> None:
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
