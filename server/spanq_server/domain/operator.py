"""The operator's tools on queues: stats, peek, purge and redrive, and a plain read of a
queue's messages (the rules; the SQL is in queries.sql, run by the store; service.py translates);
and the expiry of messages past their queue's message_retention_duration, in the background.

Redrive moves dead letters back in batches, each one statement in its own
transaction, so an interrupted redrive (cancelled, the server stopped, the
database lost) leaves every message in exactly one of the two queues, and
running it again continues where it stopped.
"""

import asyncio
import base64
import binascii
import dataclasses
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..ground import errors
from ..ground.clock import Clock
from ..ground.model import Key, PeekedMessage, QueueCounts, QueueDef, ReplayWindow
from ..ground.tasks import BackgroundTask
from ..metrics.counters import Counters
from ..metrics.rates import Rates
from ..store import ALL_SOURCES, PeekFilter, RedriveSource, Store
from .bulk import aware, batch_limit, key_from_plain_json, key_to_plain_json
from .queues import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Catalog
from .replay import ReplayProgress, Replayer

logger = logging.getLogger(__name__)

PEEK_STATES = ("READY", "SCHEDULED", "LEASED", "HELD")
MAX_ATTEMPT_FILTER = 2**31 - 1
MAX_FILTER_TEXT = 1000
REDRIVE_CONFLICT_RETRIES = 5
"""Times one batch is tried again when a key was sent to the target while it moved."""
EXPIRE_INTERVAL = timedelta(minutes=1)
"""How often each server deletes the messages past their queue's retention (the first time a
minute after it starts): the bound on how late."""
EXPIRE_BATCH = 1000


@dataclasses.dataclass(frozen=True)
class QueueStats:
    queue: QueueDef
    counts: QueueCounts
    send_rate: float
    ack_rate: float


@dataclasses.dataclass(frozen=True)
class RedriveProgress:
    moved: int
    remaining: int
    skipped: int
    to: str
    done: bool


class Operator:
    """Stats, peek, purge and redrive over the catalog's queues."""

    def __init__(self, catalog: Catalog, store: Store, clock: Clock, rates: Rates,
                 key_from_json: Callable[[QueueDef, Any], Key]) -> None:
        """``key_from_json`` reads a key in its JSON form (a list, as Peek shows it), the
        front-ends' wire format (codec.key_from_json): server.py hands it in."""
        self._catalog = catalog
        self._key_from_json = key_from_json
        self._store = store
        self._clock = clock
        self._rates = rates
        self._replayer = Replayer(catalog, store, clock)

    async def stats(self, name: str) -> QueueStats:
        queue = await self._catalog.get(name)
        dead = None
        if queue.dead_letter_queue is not None:
            try:
                dead = await self._catalog.get(queue.dead_letter_queue)
            except errors.QueueNotFound:
                dead = None  # cannot be dropped while named; a race with its drop reads 0
        counts = await self._store.queue_stats(queue, dead, self._clock.now())
        return QueueStats(queue, counts, self._rates.rate(name, "sent"), self._rates.rate(name, "acked"))

    async def select(self, queue: QueueDef, *, key_equals: Sequence[tuple[str, Any]] = (),
                     deliver_time_bounds: Sequence[tuple[str, datetime | None, timedelta]] = (),
                     order_by: str | None = None, descending: bool = False, limit: int | None = None,
                     key_descending: Sequence[bool] = ()) -> list[tuple[Key, Any, datetime]]:
        """Messages (key, payload, deliver_time) as a read outside any transaction sees them,
        leasing none (the Spanner front-end's SELECT ... FROM q): key_equals names key columns
        and values; deliver_time_bounds are (operator, instant or None for now, offset);
        order_by is a key column or deliver_time (default: the primary key, each column in
        its direction of key_descending, as a Spanner DDL declared them)."""
        return await self._store.messages_select(
            None, queue, key_equals=key_equals, deliver_time_bounds=deliver_time_bounds, order_by=order_by,
            descending=descending, limit=limit, key_descending=key_descending, now=self._clock.now())

    async def peek(self, name: str, page_size: int, page_token: str, where: PeekFilter = PeekFilter(), *,
                   archived: bool = False) -> tuple[QueueDef, list[PeekedMessage], str]:
        """A page of messages in delivery order (``archived``: of the archive, in ack order);
        ``where`` (the dashboard's search) keeps some."""
        if not 0 <= page_size <= MAX_PAGE_SIZE:
            raise errors.InvalidArgument(f"page_size must be between 0 and {MAX_PAGE_SIZE}, got {page_size}")
        if where.state not in (None, *PEEK_STATES, *(("ACKED",) if archived else ())):
            raise errors.InvalidArgument(f"state must be one of {', '.join(PEEK_STATES)}, got {where.state!r}")
        if where.min_attempt is not None and not 0 <= where.min_attempt <= MAX_ATTEMPT_FILTER:
            raise errors.InvalidArgument(f"the attempt filter must be between 0 and {MAX_ATTEMPT_FILTER:,}, "
                                         f"got {where.min_attempt}")
        for what, text in (("key prefix", where.key_prefix), ("payload text", where.text)):
            if text is not None and (len(text) > MAX_FILTER_TEXT or "\0" in text):
                raise errors.InvalidArgument(f"the {what} filter must be at most {MAX_FILTER_TEXT} characters "
                                             "and hold no NUL")
        queue = await self._catalog.get(name)
        size = page_size or DEFAULT_PAGE_SIZE
        found = await self._store.messages_peek(queue, _decode_peek_token(queue, page_token), size + 1,
                                                self._clock.now(), where, archived=archived)
        more = len(found) > size
        found = found[:size]
        return queue, found, (_encode_peek_token(queue, found[-1]) if more else "")

    async def purge(self, name: str, sent_before: datetime | None) -> int:
        queue = await self._catalog.get(name)
        purged = await self._store.messages_purge(queue, sent_before)
        logger.info("purged %d message(s) of queue %s%s", purged, name,
                    f" sent before {sent_before.isoformat()}" if sent_before else "")
        return purged

    # -- one message at a time (the dashboard's actions) ------------------------------

    async def delete(self, name: str, key: Any) -> None:
        """Deletes one message, ``key`` in its JSON form (a list, as Peek shows it)."""
        queue = await self._catalog.get(name)
        if not await self._store.message_delete(queue, self._key_from_json(queue, key)):
            raise errors.MessageNotFound(f"queue {name!r} holds no message with key {key}")
        logger.info("deleted the message with key %s of queue %s", key, name)

    async def release(self, name: str, key: Any) -> None:
        """Takes back a leased message's lease: deliverable now (its attempt stays counted)."""
        queue = await self._catalog.get(name)
        if not await self._store.message_release(queue, self._key_from_json(queue, key), self._clock.now()):
            raise errors.FailedPrecondition(f"the message with key {key} of queue {name!r} is not leased (or gone): "
                                            "nothing to release")
        logger.info("released the lease of the message with key %s of queue %s", key, name)

    async def redrive_one(self, name: str, key: Any, to: str) -> str:
        """Moves one dead letter to ``to`` (or the one queue naming this one as its dead-letter
        queue); the target's name."""
        dead = await self._catalog.get(name)
        target = await self.redrive_target(dead, to)
        if not await self._store.message_redrive_one(dead, target, self._key_from_json(dead, key), self._clock.now()):
            raise errors.FailedPrecondition(
                f"the message with key {key} of queue {name!r} cannot move to {target.name!r}: it is gone, leased, "
                f"or {target.name!r} holds that key")
        logger.info("redrove the message with key %s of queue %s to %s", key, name, target.name)
        return target.name

    async def replay(self, name: str, window: ReplayWindow, request_id: str, *, batch_size: int = 0,
                     rate: float = 0.0, validate_only: bool = False) -> AsyncIterator[ReplayProgress]:
        """Sends the queue's archived messages in ``window`` back into it (replay.py)."""
        async for progress in self._replayer.replay(name, window, request_id, batch_size=batch_size, rate=rate,
                                                    validate_only=validate_only):
            yield progress

    async def dead_letter_sources(self, name: str) -> list[str]:
        """The queues that name queue ``name`` as their dead-letter queue, in name order."""
        return await self._store.queue_dead_letter_sources(name)

    async def redrive_target(self, dead_letter_queue: QueueDef, to: str) -> QueueDef:
        """``to``, or the one queue naming dead_letter_queue as its dead-letter queue; checked to fit."""
        if not to:
            sources = await self.dead_letter_sources(dead_letter_queue.name)
            if len(sources) != 1:
                which = (f"queues {', '.join(sources)} name it as their dead_letter_queue" if sources
                         else "no queue names it as its dead_letter_queue")
                raise errors.InvalidArgument(
                    f"redrive of {dead_letter_queue.name!r} needs a target queue: {which}; give `to` (--to QUEUE)")
            to = sources[0]
        if to == dead_letter_queue.name:
            raise errors.InvalidArgument(f"cannot redrive queue {to!r} into itself; give another `to`")
        target = await self._catalog.get(to)
        if ([c.type for c in target.key_columns] != [c.type for c in dead_letter_queue.key_columns]
                or target.payload_type != dead_letter_queue.payload_type):
            raise errors.FailedPrecondition(
                f"queue {to!r} cannot take the messages of {dead_letter_queue.name!r}: their key column types or "
                "payload types differ; redrive to a queue with the same key column types and payload type")
        return target

    async def redrive(self, name: str, to: str, *, batch_size: int = 0, rate: float = 0.0,
                      max_messages: int = 0) -> AsyncIterator[RedriveProgress]:
        """Yields progress after each committed batch and once at the end (done)."""
        size = batch_limit(batch_size, rate)
        if max_messages < 0:
            raise errors.InvalidArgument(f"max_messages must be 0 (all) or more, got {max_messages}")
        dead = await self._catalog.get(name)
        plan = await self._redrive_plan(dead, to)
        moved = 0
        started = time.monotonic()
        # Counted once here and once at the end (each count reads the whole dead-letter queue): the
        # progress in between subtracts what moved.
        total, stuck = await self._left(dead, plan)
        to_names = ", ".join(target.name for target, _ in plan)
        for target, source in plan:
            while not max_messages or moved < max_messages:
                limit = min(size, max_messages - moved) if max_messages else size
                batch = await self._move_batch(dead, target, limit, source)
                if not batch:
                    break
                moved += batch
                yield RedriveProgress(moved, max(total - moved, stuck), stuck, target.name, False)
                if rate:  # pace: the next batch starts when the messages so far fit the rate
                    await asyncio.sleep(max(0.0, started + moved / rate - time.monotonic()))
        total, stuck = await self._left(dead, plan)
        logger.info("redrive of %s to %s: %d moved, %d left (%d cannot move now)", name, to_names, moved,
                    total, stuck)
        yield RedriveProgress(moved, total, stuck, to_names, True)

    async def _redrive_plan(self, dead: QueueDef, to: str) -> list[tuple[QueueDef, RedriveSource]]:
        """(target, which messages) in turn: all to ``to``; else each message to the source queue it
        recorded, and those that recorded none (or whose source is gone) to the one queue naming
        the dead-letter queue."""
        if to:
            return [(await self.redrive_target(dead, to), ALL_SOURCES)]
        sources = await self._store.redrive_sources(dead)
        plan: list[tuple[QueueDef, RedriveSource]] = []
        unrecorded = not sources
        for source in sources:
            if source is None:
                unrecorded = True
                continue
            try:
                plan.append((await self.redrive_target(dead, source), source))
            except (errors.QueueNotFound, errors.FailedPrecondition):
                unrecorded = True  # dropped, or another queue now: the default rule decides
        if unrecorded:
            fallback = await self.redrive_target(dead, "")
            planned = tuple(s for _, s in plan if isinstance(s, str))
            plan.append((fallback, planned or ALL_SOURCES))
        return plan

    async def _left(self, dead: QueueDef, plan: list[tuple[QueueDef, RedriveSource]]) -> tuple[int, int]:
        total = stuck = 0
        for target, source in plan:
            t, s = await self._store.redrive_left(dead, target, self._clock.now(), source)
            total, stuck = total + t, stuck + s
        return total, stuck

    async def _move_batch(self, dead: QueueDef, target: QueueDef, limit: int, source: RedriveSource) -> int:
        for attempt in range(REDRIVE_CONFLICT_RETRIES):
            try:
                return await self._store.messages_redrive(dead, target, limit, self._clock.now(), source)
            except errors.MessageAlreadyExists:
                # A key was sent to the target while this batch moved: nothing moved; the next
                # try leaves that key in the dead-letter queue.
                logger.info("redrive batch of %s to %s met a key sent meanwhile; trying again", dead.name,
                            target.name)
        raise errors.TransactionAborted(
            f"redrive of {dead.name!r} to {target.name!r} kept meeting keys sent to the target meanwhile; "
            "nothing of the last batch moved: run it again")


class Expiry:
    """Deletes unacknowledged messages older than their queue's message_retention_duration
    (Spanner's ROW DELETION POLICY) every EXPIRE_INTERVAL, on every server: batches of
    EXPIRE_BATCH rows, each its own short transaction that skips rows another holds, so
    servers share the work and no send or ack waits behind it. Counted per queue by the
    server that deleted (spanq_queue_messages_expired). Prunes each queue's archive alike,
    of what was acked longer than its archive_duration ago (everything, without one)."""

    def __init__(self, catalog: Catalog, store: Store, clock: Clock, metrics: Counters) -> None:
        self._catalog = catalog
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._task = BackgroundTask("message-expiry", self._forever)

    async def expire(self) -> tuple[int, int]:
        """One pass over every queue: how many messages it deleted, and how many archived
        messages it forgot."""
        expired = pruned = 0
        token = ""
        while True:
            found, token = await self._catalog.list(MAX_PAGE_SIZE, token)
            for queue in found:
                if queue.message_retention_duration is not None:
                    expired += await self._batches(queue, queue.message_retention_duration, archive=False)
                pruned += await self._batches(queue, queue.archive_duration or timedelta(0), archive=True)
            if not token:
                return expired, pruned

    async def _batches(self, queue: QueueDef, retention: timedelta, *, archive: bool) -> int:
        run = self._store.archive_prune if archive else self._store.messages_expire
        total = 0
        while True:
            try:
                deleted = await run(queue, retention, self._clock.now(), EXPIRE_BATCH)
            except errors.QueueNotFound:
                return total  # dropped meanwhile
            if deleted and not archive:
                self._metrics.expired(queue.name, deleted)
                logger.info("queue %s: deleted %d message(s) sent more than %s ago (message_retention_duration)",
                            queue.name, deleted, retention)
            total += deleted
            if deleted < EXPIRE_BATCH:
                return total

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    async def _forever(self) -> None:
        while True:
            # First a wait: a starting server's pool serves its callers first.
            await asyncio.sleep(EXPIRE_INTERVAL.total_seconds())
            try:
                await self.expire()
            except errors.QueueError as exc:
                logger.warning("message expiry failed (%s); will retry", exc)
            except Exception:  # a bug must not end expiry for good, nor fail the server's stop
                logger.exception("message expiry failed; will retry")


HELD_PLACE = "infinity"
"""A peek token's time after a held message: the deliver_time such messages are stored with."""


def _encode_peek_token(queue: QueueDef, last: PeekedMessage) -> str:
    key = key_to_plain_json(queue, last.key)
    at = last.ack_time or last.deliver_time  # an archive's page goes in ack order
    # A held message's place in delivery order is its stored deliver_time, 'infinity'
    # (the one shown is the time it was sent for), which no datetime holds.
    data = json.dumps({"t": HELD_PLACE if last.held else at.isoformat(), "k": key}, separators=(",", ":"))
    return base64.urlsafe_b64encode(data.encode()).decode()


def _decode_peek_token(queue: QueueDef, token: str) -> tuple[datetime | str, Key] | None:
    if not token:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        at = HELD_PLACE if data["t"] == HELD_PLACE else aware(datetime.fromisoformat(data["t"]))
        return at, key_from_plain_json(queue, data["k"])
    except (binascii.Error, ValueError, KeyError, TypeError, RecursionError):  # RecursionError: JSON nested deeper than the decoder goes
        raise errors.InvalidArgument(
            "page_token is not one this server returned for this queue; start again with an empty token") from None
