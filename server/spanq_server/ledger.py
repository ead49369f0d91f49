"""The commit ledger: a retried request takes effect once.

Every mutating request carries a request_id, the same on every retry of one
intent. Its fingerprint and its response are written in the same transaction
as its effect, so a replay finds either nothing (the effect did not happen:
do it now) or the recorded response (it did: answer the same, change
nothing). Entries are kept for a retention window, then pruned.
"""

import asyncio
import hashlib
import logging
import uuid
from datetime import timedelta

from . import errors
from .clock import Clock
from .store import Store
from .tasks import BackgroundTask

logger = logging.getLogger(__name__)

MAX_REQUEST_ID = 128
PRUNE_INTERVAL = timedelta(minutes=1)
PRUNE_BATCH = 1000


def request_id_or_new(request_id: str) -> str:
    """The caller's request_id, checked; a fresh one when empty (then only the
    UNKNOWN_COMMIT error's metadata tells the caller which id to replay)."""
    if not request_id:
        return str(uuid.uuid4())
    if len(request_id) > MAX_REQUEST_ID or not request_id.isprintable():
        raise errors.InvalidArgument(
            f"request_id must be 1 to {MAX_REQUEST_ID} printable characters (a UUID is recommended)"
        )
    return request_id


def fingerprint(kind: str, request: bytes) -> bytes:
    """What makes two requests "the same": the RPC and its fields but request_id."""
    return hashlib.sha256(kind.encode() + b"\0" + request).digest()


class Ledger:
    """Answers replays from the ledger and prunes it in the background."""

    def __init__(self, store: Store, clock: Clock, retention: timedelta) -> None:
        self._store = store
        self._clock = clock
        self.retention = retention
        self._pruner: BackgroundTask | None = None

    async def recorded(self, request_id: str, expected: bytes) -> bytes | None:
        """The recorded response of a committed request_id, or None; INVALID_ARGUMENT
        when the id was committed with a different request."""
        found = await self._store.ledger_lookup(request_id)
        if found is None:
            return None
        recorded_fingerprint, response = found
        if recorded_fingerprint != expected:
            raise errors.InvalidArgument(
                f"request_id {request_id!r} was already used for a different request; use a new request_id "
                "for a new intent, and the same request for a retry",
                request_id=request_id,
            )
        return response

    async def prune(self) -> int:
        """Deletes every entry older than the retention window, in small batches."""
        total = 0
        while True:
            deleted = await self._store.ledger_prune(self.retention, self._clock.now(), PRUNE_BATCH)
            total += deleted
            if deleted < PRUNE_BATCH:
                return total

    def start(self, interval: timedelta = PRUNE_INTERVAL) -> None:
        if self._pruner is None:
            self._pruner = BackgroundTask("ledger-pruner", lambda: self._prune_forever(interval.total_seconds()))
            self._pruner.start()

    async def stop(self) -> None:
        pruner, self._pruner = self._pruner, None
        if pruner is not None:
            await pruner.stop()

    async def _prune_forever(self, interval: float) -> None:
        while True:
            try:
                pruned = await self.prune()
                if pruned:
                    logger.info("pruned %d commit-ledger entries older than %s", pruned, self.retention)
            except errors.QueueError as exc:
                logger.warning("commit-ledger pruning failed (%s); will retry", exc)
            await asyncio.sleep(interval)
