"""A lease-history checker: no message is held by two holders at once.

Beside the exactly-once checker (history.py), in its style: clients record what
they saw, and ``check`` judges the whole history against the rule of
docs/semantics.md: a message handed to a client stays leased to it until it is
acked, renewed (the new token carries the lease on), released (nacked) or its
lease expires, however the stream that delivered it ended.

Recorded: every delivery (key, lease token, delivery attempt, lease start and
end as the server gave them, holder), every ack, renewal and nack with its
outcome, every confirmed send. ``check`` fails on:

- an overlap: a key delivered again while an earlier delivery's lease, to this
  or another holder, was still live (not acked, released, or expired);
- a refused current settle: an ack (or renewal, or nack) of the key's current
  token refused while its lease was still live, as the answer's arrival shows;
- an attempt that did not go up: each delivery counts one attempt, so a
  delivery with an attempt no higher than an earlier one's had its count taken
  back (a give-back after the message went out). One exception, the server's
  refund of a lease nobody read (docs/semantics.md, "A lease nobody read gives
  its attempt back"): a delivery may repeat the attempt of an earlier one that
  lapsed with no settle of its token answered OK, never go below it;
- a lost message: sent, never acked, and not in the queue at the end.

Keys name one message each (generated keys, or a fresh key per send). Times
are the server's (lease start and end) and this machine's clock (when a
settle was sent and answered): one clock, so they compare; ``tolerance``
gives the server the benefit of the doubt at the edges.
"""

import collections
import dataclasses
import threading
from collections.abc import Hashable, Iterable
from datetime import datetime, timedelta, timezone

OK, REFUSED, UNKNOWN = "ok", "refused", "unknown"
"""A settle's outcome: done, refused by the server (the lease is not held), or not known (a fault)."""


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclasses.dataclass(frozen=True)
class Delivery:
    key: Hashable
    token: str
    attempt: int | None
    """None where the front-end does not say (Spanner's RECEIVE)."""
    leased_at: datetime
    """When the server granted the lease: its lease end less the lease duration asked for."""
    lease_end: datetime
    holder: str


@dataclasses.dataclass(frozen=True)
class Settle:
    action: str
    """"ack", "renew" or "nack" (a release)."""
    key: Hashable
    token: str | None
    """None: by key, without a token (Spanner's ack mutation)."""
    holder: str
    sent_at: datetime
    done_at: datetime
    outcome: str
    new_token: str | None = None
    new_lease_end: datetime | None = None
    """A successful renewal's new token and lease end."""


@dataclasses.dataclass
class LeaseReport:
    deliveries: int
    settles: collections.Counter[str]
    overlaps: list[tuple[Hashable, str, str, float]]
    """(key, first holder, second holder, seconds of the first lease left at the second delivery)."""
    refused_current: list[tuple[str, Hashable, str, float]]
    """(action, key, holder, seconds of lease left when the refusal came back)."""
    attempts_not_up: list[tuple[Hashable, int, int]]
    """(key, an earlier delivery's attempt, a later one's)."""
    lost: list[Hashable]

    @property
    def ok(self) -> bool:
        return not (self.overlaps or self.refused_current or self.attempts_not_up or self.lost)

    def summary(self) -> str:
        settles = " ".join(f"{k}={v}" for k, v in sorted(self.settles.items()))
        return (f"deliveries={self.deliveries} {settles} duplicates={len(self.overlaps)} "
                f"refused_current={len(self.refused_current)} attempts_not_up={len(self.attempts_not_up)} "
                f"lost={len(self.lost)}")


@dataclasses.dataclass
class LeaseHistory:
    tolerance: timedelta = timedelta(seconds=0.1)
    sent: set[Hashable] = dataclasses.field(default_factory=set)
    deliveries: list[Delivery] = dataclasses.field(default_factory=list)
    settles: list[Settle] = dataclasses.field(default_factory=list)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)
    """Recorders may run on threads (the Spanner client, sync callbacks)."""

    def send_confirmed(self, key: Hashable) -> None:
        with self._lock:
            self.sent.add(key)

    def delivered(self, key: Hashable, token: str, attempt: int | None, lease_end: datetime,
                  lease: timedelta, holder: str) -> Delivery:
        delivery = Delivery(key, token, attempt, lease_end - lease, lease_end, holder)
        with self._lock:
            self.deliveries.append(delivery)
        return delivery

    def settled(self, action: str, key: Hashable, token: str | None, holder: str, sent_at: datetime,
                outcome: str, new_token: str | None = None, new_lease_end: datetime | None = None,
                done_at: datetime | None = None) -> None:
        """``done_at``: when the answer came (now, unless given)."""
        settle = Settle(action, key, token, holder, sent_at, done_at or now(), outcome, new_token, new_lease_end)
        with self._lock:
            self.settles.append(settle)

    def check(self, remaining: Iterable[Hashable]) -> LeaseReport:
        """``remaining``: the key of every message still in the queue at the end."""
        with self._lock:
            deliveries, settles = list(self.deliveries), list(self.settles)
        by_key: dict[Hashable, list[Delivery]] = collections.defaultdict(list)
        for d in deliveries:
            by_key[d.key].append(d)
        settles_of: dict[Hashable, list[Settle]] = collections.defaultdict(list)
        for s in sorted(settles, key=lambda s: s.sent_at):
            settles_of[s.key].append(s)
        report = LeaseReport(len(deliveries), collections.Counter(f"{s.action}_{s.outcome}" for s in settles),
                             [], [], [], [])
        for key, leases in by_key.items():
            leases.sort(key=lambda d: d.leased_at)
            ends = [self._lease_of(d, settles_of[key], report) for d in leases]
            touched = {s.token for s in settles_of[key] if s.outcome == OK}
            for j, later in enumerate(leases):
                for earlier, end in zip(leases[:j], ends[:j]):
                    if later.leased_at < end - self.tolerance:
                        report.overlaps.append((key, earlier.holder, later.holder,
                                                (end - later.leased_at).total_seconds()))
                    if earlier.attempt is None or later.attempt is None:
                        continue
                    refunded = earlier.token not in touched  # it lapsed unread: its attempt may come back
                    if later.attempt < earlier.attempt or (later.attempt == earlier.attempt and not refunded):
                        report.attempts_not_up.append((key, earlier.attempt, later.attempt))
        settled = {s.key for s in settles if s.action == "ack" and s.outcome in (OK, UNKNOWN)}
        report.lost = sorted(self.sent - settled - set(remaining), key=repr)
        return report

    def _lease_of(self, d: Delivery, settles: list[Settle], report: LeaseReport) -> datetime:
        """When ``d``'s lease ended, following its renewals; records the refusals of it while it was live."""
        end, current, tokens = d.lease_end, d.token, {d.token}
        for s in settles:
            mine = s.token in tokens if s.token is not None else s.holder == d.holder
            if not mine or s.sent_at < d.leased_at - self.tolerance:
                continue
            if s.outcome == REFUSED:
                if (s.token is None or s.token == current) and s.done_at < end - self.tolerance:
                    report.refused_current.append((s.action, s.key, s.holder, (end - s.done_at).total_seconds()))
                continue
            if s.action == "renew":
                if s.outcome == OK and s.new_token and s.new_lease_end is not None:
                    current = s.new_token
                    tokens.add(current)
                    end = s.new_lease_end
                elif s.outcome == UNKNOWN:
                    end = max(end, s.sent_at + (end - d.leased_at))  # it may have extended the lease
                continue
            return min(end, s.sent_at)  # acked or released (or maybe: the benefit of the doubt)
        return end


def assert_safe(history: LeaseHistory, remaining: Iterable[Hashable]) -> LeaseReport:
    """Checks a run, prints its figures, and fails the test on any violation."""
    report = history.check(remaining)
    print(f"lease history: {report.summary()}")
    assert report.ok, report
    return report
