"""The domain's values: queues, messages, leases. No protobuf, no SQL."""

import dataclasses
import functools
import json
import enum
import math
from datetime import datetime, timedelta
from collections.abc import Sequence
from typing import Any, NamedTuple

Key = tuple[Any, ...]
"""A message key: one Python value per key column, in order."""


class ColumnType(enum.Enum):
    """Column types, named as Spanner's TypeCode."""

    BOOL = "BOOL"
    INT64 = "INT64"
    STRING = "STRING"
    BYTES = "BYTES"
    TIMESTAMP = "TIMESTAMP"
    JSON = "JSON"


KEY_TYPES = frozenset({ColumnType.BOOL, ColumnType.INT64, ColumnType.STRING, ColumnType.BYTES, ColumnType.TIMESTAMP})
PAYLOAD_TYPES = frozenset({ColumnType.BYTES, ColumnType.STRING, ColumnType.JSON})


@dataclasses.dataclass(frozen=True)
class KeyColumn:
    name: str
    type: ColumnType
    generated_as: str | None = None
    """A generated key column (Spanner's ``k INT64 AS (expr) STORED``): its expression as declared,
    GoogleSQL. PostgreSQL computes its value from the row's other key columns, so a send leaves
    it out; once a message exists its key is whole (receive, ack, peek, dead letters)."""
    generated_sql: str | None = None
    """Its PostgreSQL expression (``GENERATED ALWAYS AS (...) STORED``), as the front-end that
    declared it composed it from its own translation (never a client's text)."""


@dataclasses.dataclass(frozen=True)
class QueueDef:
    """A queue as the catalog records it."""

    name: str
    key_columns: tuple[KeyColumn, ...]
    payload_type: ColumnType
    lease_duration: timedelta
    initial_backoff: timedelta
    max_backoff: timedelta
    parent_table: str | None = None
    parent_on_delete_cascade: bool = True
    """With a parent_table: deleting a parent row deletes its messages (ON DELETE CASCADE);
    False: it is refused while the row has messages (Spanner's ON DELETE NO ACTION)."""
    max_delivery_attempts: int | None = None
    dead_letter_queue: str | None = None
    key_generated: bool = False
    """True when the queue was created without key columns: sends may omit the key."""
    create_time: datetime | None = None
    disable_send: bool = False
    """Sends are refused (FAILED_PRECONDITION); Spanner's queue option of that name."""
    disable_delivery: bool = False
    """Receives lease nothing; acks and renewals of held leases still work."""
    message_retention_duration: timedelta | None = None
    """Unacknowledged messages sent longer ago are deleted in the background (None: kept)."""
    archive_duration: timedelta | None = None
    """Acked messages are kept this long in the queue's archive (None: an ack deletes)."""
    enable_message_ordering: bool = False
    """Messages may carry an ordering key, delivered one at a time in order per key (else a
    keyed send is refused, FAILED_PRECONDITION, and the queue has no ordering triggers)."""
    max_in_flight_per_key: int | None = None
    """At most this many unexpired leases per value of concurrency_key, across every
    server and stream (None: no limit)."""
    concurrency_key: str | None = None
    """The key column whose values max_in_flight_per_key counts by (set with it)."""
    rate_limit: float | None = None
    """Leases per second across the queue, a token bucket in PostgreSQL (None: no limit)."""
    rate_limit_burst: int | None = None
    """The bucket's size: leases one moment may take after a quiet spell (None: burst())."""

    @functools.cached_property
    def sent_key_columns(self) -> tuple[KeyColumn, ...]:
        """The key columns a send gives values for: all but the generated ones."""
        return tuple(c for c in self.key_columns if c.generated_as is None)

    @functools.cached_property
    def has_generated_keys(self) -> bool:
        return any(c.generated_as is not None for c in self.key_columns)

    def burst(self) -> int:
        """The rate limit's bucket size: rate_limit_burst, else a second's worth (at least 1)."""
        return self.rate_limit_burst or max(1, math.ceil(self.rate_limit or 0))


class OutgoingMessage(NamedTuple):
    """A message to send (a NamedTuple, like the receive path's values: a hundred per request)."""

    key: Key
    payload: Any
    deliver_time: datetime | None = None
    delay: timedelta | None = None
    headers: "dict[str, str] | None" = None
    """None or a non-empty map (an empty one is stored as none)."""
    priority: int = 0
    ordering_key: str | None = None
    """None: unordered; else delivered after the earlier messages of its key (1 to 1024 bytes)."""

    def payload_size(self) -> int:
        """Bytes the payload takes on the wire, for the size limit."""
        if isinstance(self.payload, bytes):
            return len(self.payload)
        if isinstance(self.payload, str):
            return len(self.payload.encode())
        return len(json.dumps(self.payload, separators=(",", ":")).encode())


@dataclasses.dataclass(frozen=True)
class LedgeredSend:
    """One Send request's messages with its commit-ledger entry, for a group commit."""

    request_id: str
    fingerprint: bytes
    response: bytes
    messages: Sequence[OutgoingMessage]


@dataclasses.dataclass(frozen=True)
class LedgeredAck:
    """One Ack request's messages with its commit-ledger entry (the response of every
    message acked), for a group commit."""

    request_id: str
    fingerprint: bytes
    response: bytes
    items: Sequence["AckItem"]


@dataclasses.dataclass(frozen=True)
class QueueGauges:
    """One queue's scrape-time figures for metrics (Store.queue_gauges)."""

    queue: str
    ready: int
    """Deliverable messages (due, not leased), counted up to the cap."""
    stored: int
    """Unacknowledged messages (ready, scheduled or leased), counted up to the cap."""
    oldest_age: float
    """Seconds since the oldest unacknowledged message was sent (0 when empty); exact
    below the cap, a lower bound beyond (see metrics_queue_gauges in queries.sql)."""
    dead_lettered: int = 0
    """Messages moved from this queue to its dead-letter queue since it was created
    (spanq.dead_letter_counts, by any mover)."""
    rate_limited: int = 0
    """Messages ready for a batch that the queue's rate limit kept back, since the limit was set."""
    key_limited: int = 0
    """Due messages whose key is at max_in_flight_per_key now, counted up to the cap."""
    ordering_held: int = 0
    """Messages waiting behind an earlier message of their ordering key, counted up to the cap."""


# The per-message values of the receive and ack paths are NamedTuples: immutable
# like the frozen dataclasses around them, and built in a third of the time
# (a hundred of them per batch).


class Unreadable(NamedTuple):
    """A stored value Python cannot hold, in place of it: a TIMESTAMP of 'infinity' or
    beyond year 9999, JSON nested past Python's recursion limit. Only SQL can store one
    (every spanq write path refuses it); its message cannot reach a client."""

    type: str
    text: str


class LeasedMessage(NamedTuple):
    key: Key
    payload: Any
    deliver_time: datetime
    lease_token: str
    lease_expiration_time: datetime
    delivery_attempt: int
    enqueue_time: datetime
    last_batch_message: bool
    dead_letter: "DeadLetterHistory | None" = None
    headers: "dict[str, str] | None" = None
    priority: int = 0
    ordering_key: str | None = None


class AckItem(NamedTuple):
    key: Key
    lease_token: str | None = None


class AckResult(NamedTuple):
    key: Key
    acked: bool


@dataclasses.dataclass(frozen=True)
class RenewResult:
    """One token's answer. ``known`` is False when the renew function returned no row
    (an unparseable, unknown or expired token); a known token without a new one is
    unrenewable (acknowledged, superseded or released, its lease not yet over)."""
    old_lease_token: str
    new_lease_token: str | None
    lease_expiration_time: datetime | None
    known: bool = True


@dataclasses.dataclass(frozen=True)
class QueueCounts:
    """One queue's figures as stored (Store.queue_stats): exact, read at read_time."""

    ready: int
    scheduled: int
    leased: int
    dead_lettered: int
    oldest_ready_age: float
    """Seconds since the oldest ready message was sent; 0 when none is ready."""
    read_time: datetime
    held: int = 0
    """Messages waiting behind an earlier message of their ordering key."""
    rate_limited: int = 0
    """Messages ready for a batch that the rate limit kept back, since it was set."""
    rate_limit_tokens: float = 0.0
    """Leases the rate limit's bucket would allow now."""
    key_limited: int = 0
    """Due messages whose key value is at max_in_flight_per_key now."""
    keys_at_limit: int = 0
    """Key values with max_in_flight_per_key unexpired leases now."""


class PeekedMessage(NamedTuple):
    """A message read without leasing it (Peek)."""

    key: Key
    payload: Any
    deliver_time: datetime
    leased: bool
    lease_expiration_time: datetime | None
    delivery_attempt: int
    enqueue_time: datetime
    ready: bool
    dead_letter: "DeadLetterHistory | None" = None
    headers: "dict[str, str] | None" = None
    priority: int = 0
    ack_time: datetime | None = None
    """Set on an archived message (a Peek of the archive), with the request that acked it."""
    ack_request_id: str | None = None
    ordering_key: str | None = None
    held: bool = False
    """Waiting behind an earlier message of its ordering key (deliver_time: the one it was sent with)."""


class ReplayWindow(NamedTuple):
    """Which archived messages a Replay sends back: acked in [start_time, end_time), with a
    key from start_key to end_key (both included, in the database's order of keys; None: no
    bound). A Replay's end_time None: up to its first batch."""

    start_time: datetime | None
    end_time: datetime | None
    start_key: Key | None = None
    end_key: Key | None = None


class ReplayBatch(NamedTuple):
    """What one batch of a Replay did: archived messages it reached, how many of them it
    sent (the others' keys were live), and the last one's (ack time, key): the next cursor."""

    reached: int
    sent: int
    last: tuple[datetime, Key] | None


class DeadLetterHistory(NamedTuple):
    """Where a dead letter came from and why (set on messages of a dead-letter queue)."""

    source_queue: str
    delivery_attempts: int
    dead_letter_time: datetime
    last_failure: str


class AckFound(enum.Enum):
    """What an ack's DELETE found of one message (the store's answer; the domain turns
    it into an AckResult or the request's error)."""

    ACKED = "acked"
    """Deleted: it was there under the lease token given."""
    LEASE_MOVED = "lease moved"
    """Still there, under another lease token (renewed, released, leased again)."""
    GONE = "gone"
    """Not there (acked before, or deleted)."""


@dataclasses.dataclass(frozen=True)
class CatalogFacts:
    """What a queue to be created must agree with, read under the catalog lock in the
    transaction that creates it (queues.check_creatable decides)."""

    queues: int
    """Queues the database has now."""
    name_taken: bool
    """A table, queue or type already has the queue's name."""
    index_name_taken: str | None
    """A relation that has the name of one of the queue's indexes."""
    parent_key_width: int | None
    """Primary-key columns of the parent table; None without one (or it has no primary key)."""
    dead_letter_queue: "QueueDef | None"
    """The dead-letter queue's definition; None without one (or it does not exist)."""


class Claim(enum.Enum):
    """A request's answer from a statement that claims request_ids in the commit ledger
    for a group of requests (group_commit.py)."""

    CLAIMED = "claimed"
    """Claimed and applied by the statement: it commits with it."""
    COMMITTED_BEFORE = "committed before"
    """Its request_id was committed before: nothing done now (a replay)."""
    LEFT_ALONE = "left alone"
    """Neither claimed nor applied: its outcome was not known in advance, so it runs alone."""


@dataclasses.dataclass(frozen=True)
class QueueDependents:
    """The queues that name a queue to be dropped (queues.check_droppable decides)."""

    children: list[str]
    """Queues whose parent table it is."""
    dead_letter_of: list[str]
    """Queues whose dead-letter queue it is."""


@dataclasses.dataclass(frozen=True)
class OutOfRange:
    """What a read of a Spanner table returns for a value Python cannot hold (a date 'infinity',
    BC or of year 10000, JSON nested past Python's recursion limit), stored by psql: the front-end
    refuses it naming its column, instead of the whole read failing."""

    text: str


@dataclasses.dataclass(frozen=True)
class ReportedStream:
    """An open Receive stream of another server, as it last reported it (the stream roster)."""

    server: str
    stream: dict[str, Any]
    """Its JSON description: queue, peer, opened_at, held, delivered, max_outstanding, ..."""
    reported_ago: float
    """Seconds since that server's last report (its figures are as of then)."""
