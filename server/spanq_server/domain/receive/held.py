"""What this server knows of the leases its Receive streams hold, for max_outstanding
without a count query per message.

A stream's tokens share its prefix (``<prefix>.<lease end>.<key>~<random>``), so an Ack
or RenewLease through this server names the stream whose lease it settled. A lease
leaves a stream's holding only on positive knowledge: an ack that deleted the row
under that very token, or a renewal that replaced it with a new token of the same
prefix (which the holding keeps in its place). Anything this server cannot be sure
of makes the stream recount in the database when it needs room: an ack by key
without a token, a nack (a stale token's nack and a release answer alike), a lease
whose end has passed (it may have been renewed through another server), and the
poll interval (acks through other servers or SQL).

So the holding is an upper bound on the stream's live leases, as the count was; a
one-at-a-time worker's loop costs a lease and an ack, and nothing else. The recount
looks up the messages its tokens name, by key (lease_held in queries.sql): a lease
renewed elsewhere keeps its key and prefix, and the stream leases no key it is not told.

The holding also keeps the stream's read watermark: a stream's responses arrive in
order, so a client that acks, renews or releases a message of response k through this
server has read responses 1..k. The tokens of later responses are the ones it may not
have read: a stream that shows it does not read (receive.py) gives their attempts back.
"""

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime, timedelta

from ...ground.model import LeasedMessage

RECHECK = timedelta(seconds=0.25)
"""When a recount finds leases live past their end by this host's clock (the database's is
behind), the next recount for lapsed leases waits this long."""
MAX_UNREAD = 100_000
"""Tokens past the read watermark a stream remembers (the oldest are forgotten: their
attempts then count)."""


def token_prefix(token: str) -> str:
    """The stream prefix of a token (the prefix may hold '.'; two fixed fields follow it,
    neither with a '.': a key a token carries has its '.' escaped)."""
    return token.rsplit(".", 2)[0]


@dataclasses.dataclass
class RoomWait:
    """A stream at max_outstanding waiting for room: an ack through this server that frees
    some may lease the stream's next messages in its own commit (ack_lease.py), and hand
    them over in ``taking`` (an empty list: nothing for it)."""

    max_batch: int
    max_outstanding: int
    lease_duration: timedelta
    asked: int = 0
    """What the ack leased for it (set with ``taking``)."""
    taking: "asyncio.Future[list[LeasedMessage]] | None" = None
    """Set while an ack's commit leases for the stream."""
    _taken: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def hand_over(self, batch: list[LeasedMessage]) -> None:
        if self.taking is not None and not self.taking.done():
            self.taking.set_result(batch)
        self._taken.set()

    async def wait(self) -> None:
        await self._taken.wait()


class StreamHolding:
    """One stream's leases as far as this server knows: token -> lease end."""

    def __init__(self) -> None:
        self._leases: dict[str, datetime] = {}
        self.waiting: RoomWait | None = None
        """Set while the stream waits for room (and may take an ack's lease)."""
        self.uncertain = False
        """Something may have freed room that this server cannot attribute: recount."""
        self._recheck_at: datetime | None = None
        self._unread: OrderedDict[str, tuple[int, datetime]] = OrderedDict()  # token -> (response, lease end)
        self._responses = 0  # responses handed to the transport
        self._read = 0  # the watermark: responses 1.._read were read

    def __len__(self) -> int:
        return len(self._leases)

    def __contains__(self, token: str) -> bool:
        return token in self._leases

    def tokens(self) -> list[str]:
        """The tokens of the leases it may hold (a recount looks up their messages)."""
        return list(self._leases)

    def leased(self, batch: Iterable[LeasedMessage]) -> None:
        for m in batch:
            self._leases[m.lease_token] = m.lease_expiration_time

    def settled(self, token: str) -> None:
        self._leases.pop(token, None)
        self.read(token)

    def renewed(self, old: str, new: str, end: datetime) -> None:
        self.read(old)
        if self._leases.pop(old, None) is not None:
            self._leases[new] = end

    def handed(self, messages: Iterable[LeasedMessage]) -> None:
        """One more response, carrying these messages, was handed to the transport."""
        self._responses += 1
        for m in messages:
            self._unread[m.lease_token] = (self._responses, m.lease_expiration_time)
        while len(self._unread) > MAX_UNREAD:
            self._unread.popitem(last=False)

    def read(self, token: str) -> None:
        """The client settled this token (ack, renewal, release): it read its response and
        every one before it."""
        found = self._unread.pop(token, None)
        if found is None or found[0] <= self._read:
            return
        self._read = found[0]
        while self._unread and next(iter(self._unread.values()))[0] <= self._read:
            self._unread.popitem(last=False)

    def unread(self) -> list[str]:
        """Takes every token past the read watermark: each once, so that an attempt is given
        back at most once."""
        taken = list(self._unread)
        self._unread.clear()
        return taken

    def unread_end(self) -> datetime | None:
        """When the first lease past the watermark ends (they were handed over in order)."""
        return next(iter(self._unread.values()))[1] if self._unread else None

    def unread_ended(self, now: datetime) -> list[str]:
        """Takes the tokens past the watermark whose leases have ended by ``now``."""
        ended = []
        while self._unread and next(iter(self._unread.values()))[1] <= now:
            ended.append(self._unread.popitem(last=False)[0])
        return ended

    def next_end(self) -> datetime | None:
        """When the earliest lease ends (room may come then); None when none is held."""
        ends = min(self._leases.values(), default=None)
        if ends is not None and self._recheck_at is not None:
            return max(ends, self._recheck_at)
        return ends

    def needs_recount(self, now: datetime) -> bool:
        end = self.next_end()
        return self.uncertain or (end is not None and end <= now)

    def recounted(self, held: dict[str, datetime], now: datetime) -> None:
        """Takes in the database's answer: the stream's live leases, token -> lease end."""
        self._leases = dict(held)
        self.uncertain = False
        ends = min(held.values(), default=None)
        self._recheck_at = now + RECHECK if ends is not None and ends <= now else None


class Holdings:
    """Every open stream's holding, by queue and token prefix."""

    def __init__(self) -> None:
        self._queues: dict[str, dict[str, StreamHolding]] = {}

    def open(self, queue: str, prefix: str) -> StreamHolding:
        holding = StreamHolding()
        self._queues.setdefault(queue, {})[prefix] = holding
        return holding

    def close(self, queue: str, prefix: str) -> None:
        streams = self._queues.get(queue)
        if streams is not None:
            streams.pop(prefix, None)
            if not streams:
                del self._queues[queue]

    def streams(self, queue: str) -> dict[str, StreamHolding]:
        """The queue's open streams' holdings, by token prefix (not to be changed)."""
        return self._queues.get(queue, {})

    def of(self, queue: str, token: str) -> StreamHolding | None:
        """The holding of the open stream whose lease this token is (by its prefix)."""
        streams = self._queues.get(queue)
        return None if streams is None else streams.get(token_prefix(token))

    def acked(self, queue: str, tokens: Iterable[str | None]) -> None:
        """Messages acked through this server (committed), each by the token it gave, or None."""
        streams = self._queues.get(queue)
        if not streams:
            return
        for token in tokens:
            if token is None:  # acked by key: whose lease it was is unknown
                for holding in streams.values():
                    holding.uncertain = True
                continue
            owner = streams.get(token_prefix(token))
            if owner is not None:
                owner.settled(token)

    def renewed(self, queue: str, renewals: Iterable[tuple[str, str | None, datetime | None]]) -> None:
        """Renewals through this server (committed): old token, new token and lease end, or
        None for a release or a token that holds nothing (not told apart: recount)."""
        for old, new, end in renewals:
            holding = self.of(queue, old)
            if holding is None:
                continue
            if new is None or end is None:
                holding.uncertain = True
                holding.read(old)
            else:
                holding.renewed(old, new, end)
