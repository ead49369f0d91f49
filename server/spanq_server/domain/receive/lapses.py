"""Which Receive streams have clients that do not process what they get.

gRPC's flow control cannot tell by itself: a client's transport takes a few MiB
per stream (its HTTP/2 window) whether or not the application reads, so a stream
that never reads small messages writes every response at once. What does tell is
what becomes of its leases. Each stream keeps the lease tokens of the batches it
delivered (up to PROBE_MAX) and looks them up when their leases end:

- none lapsed (each acked, renewed or released): the client is *proven*;
- every one lapsed (still held, lease over): the client is *suspect*;
- some lapsed: neither (a lapse is also how a client asks for redelivery).

A suspect stream ends (receive.py) while another stream of its queue on the same
server is proven and has no lease overdue for a look, rather than lease messages
again at each expiry until they are dead-lettered. Alone, it goes on.

A stream looks early (a quarter into the first lease of a watch) while it is not
proven, so that a reader that settles its messages at once is proven before the
leases of the streams around it end; once proven, at the lease's end. Until it
is proven, a stream leases one batch per wake-up (receive.py), so that the
streams around it get their turn and a reader gets a batch to prove itself by.
"""

import dataclasses
from datetime import datetime, timedelta

from ...ground.model import LeasedMessage

PROBE_MAX = 1000
"""Lease tokens one watch keeps (batches past it are not watched until the next look)."""
EARLY = 0.25
"""The fraction of the lease at which an unproven stream first looks."""
RECHECK = timedelta(seconds=0.25)
"""When leases are still live at their end by this host's clock (the database's is behind), look again after this."""


@dataclasses.dataclass
class _Batch:
    end: datetime
    tokens: list[str]


class LapseWatch:
    """One stream's: the batches it delivered since its last look, and what the looks found."""

    def __init__(self, lease: timedelta) -> None:
        self._lease = lease
        self._batches: list[_Batch] = []
        self._count = 0
        self._look: datetime | None = None
        self.proven = False
        self.suspect = False

    def delivered(self, batch: list[LeasedMessage]) -> None:
        if self._count >= PROBE_MAX:
            return
        end = batch[0].lease_expiration_time
        tokens = [m.lease_token for m in batch]
        self._batches.append(_Batch(end, tokens))
        self._count += len(tokens)
        if self._look is None:
            self._look = end if self.proven else end - self._lease * (1 - EARLY)

    def due_in(self, now: datetime) -> float | None:
        """Seconds until the next look; None when nothing is watched."""
        return None if self._look is None else (self._look - now).total_seconds()

    def healthy(self, now: datetime) -> bool:
        """Proven, and no watched lease has ended unlooked at."""
        return self.proven and not (self._batches and self._batches[0].end <= now)

    def to_look_at(self, now: datetime) -> list[str]:
        """The tokens of the next look: of the batches whose leases ended, or, before
        any ended (the early look), all."""
        ended = [b for b in self._batches if b.end <= now] or self._batches
        return [t for b in ended for t in b.tokens]

    def found(self, now: datetime, looked: int, lapsed: int, live: int) -> bool:
        """Takes in what a look at ``looked`` tokens found; True when every one lapsed."""
        early = self._batches[0].end > now
        if early and lapsed + live == looked:
            self._look = self._batches[0].end  # nothing settled yet: look again at the lease's end
            return False
        if live and not early:
            self._look = now + RECHECK  # the database's clock is behind this host's
            return False
        ended = [b for b in self._batches if b.end <= now] or self._batches
        self._batches = self._batches[len(ended):]
        self._count -= looked
        self.proven = lapsed == 0
        self.suspect = lapsed == looked
        self._look = None
        if self._batches:
            self._look = self._batches[0].end if self.proven else max(
                now, self._batches[0].end - self._lease * (1 - EARLY))
        return self.suspect
