"""An ack that frees room under a waiting stream's max_outstanding leases that stream's
next messages in the ack's own commit: one commit per message for a one-at-a-time
consumer instead of two (the ack's DELETE, then the stream's lease), and no wake-up hop
between them.

When an Ack group (group_commit.py) acks messages held by a stream of this server that
waits for room (held.py's RoomWait), the group's statement and one lease statement per
such stream (its prefix, the room freed, its lease duration) are one transaction, sent
in one round trip. After the COMMIT the leased batch is handed to the stream, which
writes it as any batch (receive.py's Handover). The rest follows the lease-safety rule:

- the stream ended before it took the batch: the batch goes back (never handed to the
  transport);
- the commit's outcome is unknown: nothing is handed over, the leases expire by themselves;
- an ack of the group was not claimed (its messages moved, or it was a replay): the room it
  did not free is given back from the batch;
- a lease's error never fails an ack: the transaction is rolled back whole and the group
  runs again without leases (the stream then leases on its own, as before).

The ledger records only the acks' responses; a lease is not a ledgered commit.
"""

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime

from ..ground.model import Claim, LeasedMessage, LedgeredAck, QueueDef
from ..store import Store
from .receive.held import Holdings, RoomWait, StreamHolding, token_prefix

logger = logging.getLogger(__name__)


class _Want:
    """One waiting stream an ack group leases for: the tokens of its it acks, by request."""

    def __init__(self, prefix: str, holding: StreamHolding, waiting: RoomWait) -> None:
        self.prefix = prefix
        self.holding = holding
        self.waiting = waiting
        self.tokens: dict[str, list[str]] = {}  # request_id -> the stream's tokens it acks

    def count(self) -> int:
        return sum(len(t) for t in self.tokens.values())


class AckLeases:
    """Plans the leases an Ack group carries (the group commit's rider)."""

    def __init__(self, holdings: Holdings, store: Store) -> None:
        self._holdings = holdings
        self._store = store
        self._giving_back: set[asyncio.Task[int]] = set()
        self.carried = 0
        """Messages leased in an ack's commit and handed to their stream."""

    def plan(self, queue: QueueDef, acks: Sequence[LedgeredAck]) -> "Ride | None":
        streams = self._holdings.streams(queue.name)
        if not streams:
            return None
        wants: dict[str, _Want] = {}
        for ack in acks:
            for item in ack.items:
                if not item.lease_token:
                    continue
                prefix = token_prefix(item.lease_token)
                holding = streams.get(prefix)
                if holding is None or item.lease_token not in holding:
                    continue
                waiting = holding.waiting
                if waiting is None or waiting.taking is not None:  # not waiting, or another group leases for it
                    continue
                want = wants.setdefault(prefix, _Want(prefix, holding, waiting))
                want.tokens.setdefault(ack.request_id, []).append(item.lease_token)
        rides = []
        for want in wants.values():
            w = want.waiting
            room = min(w.max_batch, w.max_outstanding - (len(want.holding) - want.count()))
            if room > 0:
                w.asked = room
                w.taking = asyncio.get_running_loop().create_future()
                rides.append(want)
        return Ride(self, queue, rides) if rides else None

    def _give_back(self, queue: QueueDef, batch: list[LeasedMessage]) -> None:
        task = asyncio.create_task(self._store.leases_return(queue, batch))
        self._giving_back.add(task)
        task.add_done_callback(self._gave_back)

    def _gave_back(self, task: "asyncio.Task[int]") -> None:
        self._giving_back.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("could not give back leases an ack leased for a stream: %s", task.exception())


class Ride:
    """One Ack group's leases: run with the group's statement, then handed over or not."""

    def __init__(self, leases: AckLeases, queue: QueueDef, wants: list[_Want]) -> None:
        self._leases = leases
        self._queue = queue
        self._wants = wants
        self._batches: list[list[LeasedMessage]] | None = None

    async def run(self, store: Store, queue: QueueDef, acks: Sequence[LedgeredAck], now: datetime | None
                  ) -> dict[str, Claim]:
        """The group's statement with the leases, in one commit; or without them, when
        that transaction failed (nothing of it committed)."""
        done = await store.messages_ack_claimed_group_leasing(
            queue, acks, now, [(w.prefix, w.waiting.asked, w.waiting.lease_duration) for w in self._wants])
        if done is None:
            return await store.messages_ack_claimed_group(None, queue, acks, now)
        claims, self._batches = done
        return claims

    def deliver(self, claims: dict[str, Claim]) -> None:
        """After the commit: each stream gets what its acks' room holds."""
        batches = self._batches or [[] for _ in self._wants]
        for want, batch in zip(self._wants, batches):
            unfreed = 0
            for request_id, tokens in want.tokens.items():
                if claims.get(request_id) is Claim.CLAIMED:
                    for token in tokens:  # deleted under this very token (held.py)
                        want.holding.settled(token)
                else:
                    unfreed += len(tokens)
            keep = max(0, want.waiting.asked - unfreed)
            if batch[keep:]:
                self._leases._give_back(self._queue, batch[keep:])
            self._leases.carried += len(batch[:keep])
            want.waiting.hand_over(batch[:keep])

    def abandon(self) -> None:
        """Nothing handed over (the group failed, or its outcome is unknown): whatever a
        commit leased expires by itself."""
        for want in self._wants:
            want.waiting.hand_over([])
