"""Replay: archived messages sent back into their queue (the rules; the SQL is in
queries.sql, run by the store; service.py translates).

A replay is one request_id's work, done in batches. Each batch is one transaction that
holds the request_id's entry in the commit ledger (claimed by the first batch, locked by
every later one), sends the next batch of the range after the cursor recorded there, and
records the new cursor and counts in the same entry. So an interrupted replay (cancelled,
the server stopped, the database lost) has sent each message of the batches it committed
once, and a call with the same request_id continues from the cursor; two calls at once
take turns, batch by batch, and never send a message twice. A replay that is done answers
its recorded progress, ``replayed``, and sends nothing.

The range's end is fixed by the first batch: never later than that batch's time, so a
message the replay sent and a receiver acked again (archived again, later) is not
replayed again by the same replay.
"""

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from datetime import datetime

from ..ground import errors
from ..ground.clock import Clock
from ..ground.model import Key, QueueDef, ReplayBatch, ReplayWindow
from ..store import Store
from .bulk import aware, batch_limit, key_from_plain_json, key_to_plain_json
from .exactly_once import fingerprint, request_id_or_new
from .queues import Catalog

logger = logging.getLogger(__name__)

FINGERPRINT_KIND = "Replay"


@dataclasses.dataclass(frozen=True)
class ReplayProgress:
    """The replay's counts over every call of its request_id so far (all committed)."""

    sent: int
    skipped: int
    remaining: int
    done: bool
    replayed: bool
    request_id: str


@dataclasses.dataclass(frozen=True)
class _Recorded:
    """What the ledger entry of a replay holds: its fixed end, its cursor and counts."""

    end_time: datetime
    after: tuple[datetime, Key] | None
    sent: int
    skipped: int
    done: bool

    def advanced(self, batch: ReplayBatch, done: bool) -> "_Recorded":
        return _Recorded(self.end_time, batch.last or self.after, self.sent + batch.sent,
                         self.skipped + batch.reached - batch.sent, done)

    def encode(self, queue: QueueDef) -> bytes:
        after = None if self.after is None else [self.after[0].isoformat(), key_to_plain_json(queue, self.after[1])]
        return json.dumps({"end": self.end_time.isoformat(), "after": after, "sent": self.sent,
                           "skipped": self.skipped, "done": self.done}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, queue: QueueDef, data: bytes) -> "_Recorded":
        try:
            found = json.loads(data)
            after = found["after"]
            return cls(aware(datetime.fromisoformat(found["end"])),
                       None if after is None else (aware(datetime.fromisoformat(after[0])),
                                                   key_from_plain_json(queue, after[1])),
                       int(found["sent"]), int(found["skipped"]), bool(found["done"]))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            # The fingerprint matched, so a replay wrote it: only a queue redefined under the
            # same name since (other key types) reads otherwise.
            raise errors.FailedPrecondition(
                f"the replay recorded under this request_id no longer fits queue {queue.name!r} (was it dropped "
                "and created again?); start a new replay with a new request_id") from exc


class Replayer:
    """Replays a queue's archive into it."""

    def __init__(self, catalog: Catalog, store: Store, clock: Clock) -> None:
        self._catalog = catalog
        self._store = store
        self._clock = clock

    async def replay(self, name: str, window: ReplayWindow, request_id: str, *, batch_size: int = 0,
                     rate: float = 0.0, validate_only: bool = False) -> AsyncIterator[ReplayProgress]:
        """Yields progress after each committed batch and once at the end (done).
        ``window.end_time`` None: up to the first batch. ``validate_only``: one progress,
        done, with the count of the range's archived messages in ``remaining``, and nothing
        sent or recorded."""
        size = batch_limit(batch_size, rate)
        if window.start_time is not None and window.end_time is not None and window.end_time <= window.start_time:
            raise errors.InvalidArgument(
                f"end_time ({window.end_time.isoformat()}) must be after start_time ({window.start_time.isoformat()}): "
                "the range of ack times is empty")
        queue = await self._catalog.get(name)
        if queue.archive_duration is None:
            raise errors.FailedPrecondition(
                f"queue {name!r} keeps no archive (archive_duration is unset): there is nothing to replay; set it "
                "(spanq queue update --archive SECONDS) to keep acked messages from now on", queue=name)
        if queue.disable_send:
            raise errors.FailedPrecondition(
                f"queue {name!r} has sending disabled (disable_send): nothing was replayed; resume it with "
                "UpdateQueue (spanq queue resume --send) and replay again", queue=name)
        request_id = request_id_or_new(request_id)
        if validate_only:
            count = await self._store.archive_replay_left(queue, window, None)
            yield ReplayProgress(0, 0, count, True, False, request_id)
            return
        marked = fingerprint(FINGERPRINT_KIND, _window_content(queue, window))
        started = time.monotonic()
        reached_now = 0
        remaining: int | None = None
        while True:
            finished = False  # by an earlier call: this one only moved the entry's time
            async with self._store.transaction(queue.name) as handle:
                held, data, held_at = await self._store.ledger_hold(handle, request_id, marked, self._clock.now())
                if held != marked:
                    raise errors.InvalidArgument(
                        f"request_id {request_id!r} was used for another request (another replay's range, or "
                        "another call); a new replay needs a new request_id, a retry the same range")
                recorded = (_Recorded.decode(queue, data) if data else
                            _Recorded(min(window.end_time or held_at, held_at), None, 0, 0, False))
                finished = recorded.done
                if not finished:
                    bounded = window._replace(end_time=recorded.end_time)
                    if remaining is None:
                        remaining = await self._store.archive_replay_left(queue, bounded, recorded.after, handle)
                    batch = await self._store.archive_replay(handle, queue, bounded, recorded.after, size)
                    recorded = recorded.advanced(batch, done=batch.reached < size)
                    await self._store.ledger_record(handle, request_id, recorded.encode(queue))
            if finished:
                yield ReplayProgress(recorded.sent, recorded.skipped, 0, True, reached_now == 0, request_id)
                return
            assert remaining is not None
            reached_now += batch.reached
            left = 0 if recorded.done else max(remaining - reached_now, 0)
            if recorded.done:
                logger.info("replay %s of queue %s: %d sent, %d skipped (key live in the queue)", request_id, name,
                            recorded.sent, recorded.skipped)
            yield ReplayProgress(recorded.sent, recorded.skipped, left, recorded.done, False, request_id)
            if recorded.done:
                return
            if rate:  # pace: the next batch starts when the messages so far fit the rate
                await asyncio.sleep(max(0.0, started + reached_now / rate - time.monotonic()))


def _window_content(queue: QueueDef, window: ReplayWindow) -> bytes:
    """What makes two calls the same replay: the queue and the range (batch size and rate
    only pace it)."""
    def key(bound: Key | None) -> list[object] | None:
        return None if bound is None else key_to_plain_json(queue, bound)

    def when(at: datetime | None) -> str | None:
        return None if at is None else at.isoformat()

    return json.dumps([queue.name, when(window.start_time), when(window.end_time), key(window.start_key),
                       key(window.end_key)], separators=(",", ":")).encode()
