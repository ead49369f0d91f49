"""The commit ledger's upkeep: entries are kept for a retention window, then pruned.

Every mutating request's request_id, fingerprint and response are written in the
same transaction as its effect; what they mean (first run, replay, mismatch,
unknown outcome) is exactly_once.py's.
"""

import asyncio
import logging
from datetime import timedelta

from ..ground import errors
from ..ground.clock import Clock
from ..ground.tasks import BackgroundTask
from ..store import Store

logger = logging.getLogger(__name__)

PRUNE_INTERVAL = timedelta(minutes=1)
PRUNE_BATCH = 1000


class Ledger:
    """Prunes the ledger in the background."""

    def __init__(self, store: Store, clock: Clock, retention: timedelta) -> None:
        self._store = store
        self._clock = clock
        self.retention = retention
        self._pruner: BackgroundTask | None = None

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
