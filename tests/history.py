"""A history checker for exactly-once claims, reusable by tests and benchmarks.

Clients record what they intended and what they observed; ``check`` then
proves, against the database's final state, that every confirmed send was
stored exactly once, every ack took effect exactly once, no replay changed
state, and no message was leased to two receivers at the same time.

Sends go to a queue with generated keys and carry a unique ``id`` in their
JSON payload, so that a re-executed send (a duplicate) would show up as a
second row with the same id under another key.
"""

import collections
import dataclasses
from datetime import datetime
from typing import Any

from .lease_history import LeaseHistory


@dataclasses.dataclass(frozen=True)
class Delivery:
    message_id: str
    key: str
    lease_token: str
    leased_at: datetime
    lease_expiration: datetime
    receiver: str


@dataclasses.dataclass
class Report:
    operations: int
    faults_seen: int
    confirmed_sends: int
    lost: list[str]
    duplicates: list[str]
    acks_not_once: list[str]
    overlapping_leases: list[tuple[str, str, str]]
    unresolved: list[str]

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicates or self.acks_not_once or self.overlapping_leases)

    def summary(self) -> str:
        return (
            f"operations={self.operations} faults={self.faults_seen} confirmed_sends={self.confirmed_sends} "
            f"lost={len(self.lost)} duplicates={len(self.duplicates)} acks_not_once={len(self.acks_not_once)} "
            f"overlapping_leases={len(self.overlapping_leases)} unresolved={len(self.unresolved)}"
        )


@dataclasses.dataclass
class History:
    confirmed: dict[str, str] = dataclasses.field(default_factory=dict)
    """message id -> key, for every send the server confirmed (fresh or replayed)."""
    replayed_keys: dict[str, set[str]] = dataclasses.field(default_factory=lambda: collections.defaultdict(set))
    """message id -> every key a response (first or replay) named for it; more than one is a changed state."""
    unresolved: set[str] = dataclasses.field(default_factory=set)
    deliveries: list[Delivery] = dataclasses.field(default_factory=list)
    ack_effects: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """key -> acks confirmed as fresh (not replayed) effects."""
    acked: set[str] = dataclasses.field(default_factory=set)
    leases: LeaseHistory = dataclasses.field(default_factory=LeaseHistory)
    """The same run for the lease-history checker: every delivery and ack, with its outcome."""
    operations: int = 0
    faults_seen: int = 0

    def send_confirmed(self, message_id: str, key: str) -> None:
        self.confirmed[message_id] = key
        self.replayed_keys[message_id].add(key)

    def delivered(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)

    def ack_confirmed(self, key: str, replayed: bool) -> None:
        self.acked.add(key)
        if not replayed:
            self.ack_effects[key] += 1

    def check(self, remaining: list[tuple[str, str]], lease_duration_s: float) -> Report:
        """``remaining``: (key, message id) of every row still in the queue."""
        keys_of: dict[str, set[str]] = collections.defaultdict(set)
        for d in self.deliveries:
            keys_of[d.message_id].add(d.key)
        for key, message_id in remaining:
            keys_of[message_id].add(key)
        remaining_keys = {k for k, _ in remaining}
        lost = sorted(
            mid for mid, key in self.confirmed.items()
            if key not in remaining_keys and key not in self.acked
        )
        duplicates = sorted(mid for mid, keys in keys_of.items() if len(keys) > 1)
        duplicates += sorted(mid for mid, keys in self.replayed_keys.items() if len(keys) > 1)
        # An ack confirmed only by replays took effect in an attempt whose answer
        # was lost; one confirmed fresh twice would have taken effect twice.
        acks_not_once = sorted(k for k in self.acked if self.ack_effects[k] > 1)
        acks_not_once += sorted(k for k in remaining_keys if k in self.acked)
        return Report(
            operations=self.operations,
            faults_seen=self.faults_seen,
            confirmed_sends=len(self.confirmed),
            lost=lost,
            duplicates=sorted(set(duplicates)),
            acks_not_once=acks_not_once,
            overlapping_leases=self._overlaps(),
            unresolved=sorted(self.unresolved),
        )

    def _overlaps(self) -> list[tuple[str, str, str]]:
        """Pairs of leases on one message whose [leased_at, expiration) intervals intersect."""
        by_key: dict[str, list[Delivery]] = collections.defaultdict(list)
        for d in self.deliveries:
            by_key[d.key].append(d)
        found = []
        for key, leases in by_key.items():
            leases.sort(key=lambda d: d.leased_at)
            for a, b in zip(leases, leases[1:]):
                if b.leased_at < a.lease_expiration and a.lease_token != b.lease_token:
                    found.append((key, a.receiver, b.receiver))
        return found


def payload_id(payload: Any) -> str:
    return str(payload["id"])
