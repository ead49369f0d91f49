"""spanq's public value types: queues, key columns, messages, flow control.

These are plain Python objects, never protobuf; _codec.py converts them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import threading
from collections.abc import Callable, Generator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, Union

if TYPE_CHECKING:
    from ._subscriber import Subscriber

__all__ = [
    "TypeCode",
    "KeyColumn",
    "Queue",
    "Key",
    "KeyValue",
    "OutgoingMessage",
    "Message",
    "RenewedLease",
    "CommitResult",
    "FlowControl",
    "BatchSettings",
    "PublishFlowControl",
    "Future",
]

T = TypeVar("T")

KeyValue = Union[int, str, bytes, datetime, bool]
"""One key column's value: int (INT64), str (STRING), bytes (BYTES), datetime (TIMESTAMP, timezone-aware), bool."""

Key = tuple[KeyValue, ...]
"""A message key: one value per key column, in the queue's key-column order."""


class TypeCode(str, enum.Enum):
    """Column and payload types, named as Spanner's TypeCode."""

    BOOL = "BOOL"
    INT64 = "INT64"
    STRING = "STRING"
    BYTES = "BYTES"
    TIMESTAMP = "TIMESTAMP"
    JSON = "JSON"

    @classmethod
    def _missing_(cls, value: object) -> TypeCode:
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]  # "json" is JSON: the names are case-insensitive
        raise ValueError(f"{value!r} is not a type: use one of {', '.join(cls.__members__)}")


@dataclasses.dataclass(frozen=True)
class KeyColumn:
    """One primary-key column of a queue: a name and a type (BOOL, INT64, STRING, BYTES or TIMESTAMP)."""

    name: str
    type: TypeCode = TypeCode.STRING
    generated_as: str | None = None
    """Set by ``get_queue`` on a generated key column (a queue made by the Spanner front-end's
    ``CREATE QUEUE ... k INT64 AS (expr) STORED``): its expression as declared. The database
    computes its value, so a send's key gives the other key columns only (in key order), and
    ``send`` returns the whole key. ``create_queue`` refuses it set."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", TypeCode(self.type))


@dataclasses.dataclass(frozen=True)
class Queue:
    """A queue's definition, for ``create_queue`` and as returned by ``get_queue``/``list_queues``.

    ``None`` fields take the server's defaults (a 10 s lease, backoff 1 s doubling to 1 h). A queue with no
    ``key_columns`` gets one STRING column ``id`` that the server fills with a UUID when a send omits the key.
    """

    name: str
    key_columns: tuple[KeyColumn, ...] = ()
    """The primary key, in order."""
    payload_type: TypeCode = TypeCode.BYTES
    """BYTES (payloads are ``bytes``), STRING (``str``) or JSON (any JSON data)."""
    parent_table: str | None = None
    """A table whose rows own this queue's messages (ON DELETE CASCADE)."""
    lease_duration: timedelta | None = None
    """The lease a receive grants when the receiver asks for none (server default 10 s)."""
    initial_backoff: timedelta | None = None
    """Redelivery backoff after the first failed attempt (server default 1 s; may be 0)."""
    max_backoff: timedelta | None = None
    """The most a redelivery waits (server default 1 h)."""
    max_delivery_attempts: int | None = None
    """With dead_letter_queue: deliveries before a message moves there."""
    dead_letter_queue: str | None = None
    """An existing queue with the same key columns and payload type."""
    create_time: datetime | None = None
    """Output only."""
    disable_send: bool = False
    """Sends are refused (FailedPrecondition) while set: a durable pause (``update_queue``)."""
    disable_delivery: bool = False
    """Receives deliver nothing while set; held leases can still be acked and renewed."""
    message_retention_duration: timedelta | None = None
    """Unacknowledged messages sent longer ago are deleted, within about a minute (None: kept until acked)."""
    archive_duration: timedelta | None = None
    """Acked messages are kept this long in the queue's archive (None: an ack deletes)."""
    max_in_flight_per_key: int | None = None
    """At most this many unexpired leases per value of ``concurrency_key``, across every server and
    stream (None: no limit)."""
    concurrency_key: str | None = None
    """The key column ``max_in_flight_per_key`` counts by (None: the first key column)."""
    rate_limit: float | None = None
    """Leases per second across the queue, every server and stream together (None: no limit)."""
    rate_limit_burst: int | None = None
    """The rate limit's bucket: leases at once after a quiet spell (None: a second's worth)."""
    enable_message_ordering: bool = False
    """Messages may carry an ``ordering_key``, each key's delivered one at a time in the order sent; without
    it a keyed send raises FailedPrecondition (``update_queue(name, enable_message_ordering=True)``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_columns", tuple(self.key_columns))
        object.__setattr__(self, "payload_type", TypeCode(self.payload_type))


@dataclasses.dataclass(frozen=True)
class OutgoingMessage:
    """One message to send with ``send_many`` or ``Transaction.send_many``.

    ``key`` may be omitted only on a queue created without key columns (the server makes a UUID). Set at most
    one of ``deliver_time`` (a timezone-aware datetime) and ``delay``; neither means deliverable now.
    ``headers`` (a small str-to-str map) travel with the message; ``priority`` (0 to 9, higher first) orders
    it among deliverable messages; messages of one ``ordering_key`` (1 to 1024 bytes; None or "": none) are
    delivered one at a time in the order sent (docs/semantics.md has their limits).
    """

    payload: Any
    key: Key | KeyValue | None = None
    deliver_time: datetime | None = None
    delay: timedelta | None = None
    headers: Mapping[str, str] | None = None
    priority: int = 0
    ordering_key: str | None = None


@dataclasses.dataclass(frozen=True)
class RenewedLease:
    """The outcome of renewing one lease token."""

    old_lease_token: str
    new_lease_token: str | None
    """The token that supersedes the old one; None when the lease was not renewed (unknown, expired or
    superseded token, acknowledged message, or a release)."""
    lease_expiration_time: datetime | None


@dataclasses.dataclass(frozen=True)
class CommitResult:
    """The outcome of a commit: one entry per mutation, in order.

    A send's entry is its list of keys, an ack's a list of ``acked`` flags, a renew's a list of
    RenewedLease. ``replayed`` is true when this is the recorded answer of an earlier attempt.
    """

    results: list[Any]
    replayed: bool = False


@dataclasses.dataclass(frozen=True)
class FlowControl:
    """How much a subscriber holds at once, and how long it keeps leases alive.

    The subscriber holds at most ``max_messages`` messages (leased and not yet acked or nacked): the server
    sends no more than the free room, and sends more as acks free some. At ``max_bytes`` payload bytes in
    hand it stops reading, and resumes below ``resume_threshold`` of both limits.
    """

    max_messages: int = 1000
    """At most this many messages leased at once (also sent as the Receive stream's max_outstanding)."""
    max_bytes: int = 100 * 1024 * 1024
    """At most this many payload bytes leased at once (100 MiB)."""
    max_lease_duration: timedelta = timedelta(hours=1)
    """Stop renewing a message's lease this long after it was received (it is then redelivered)."""
    max_lease_extension: timedelta | None = None
    """Each renewal asks for this much more time; None: the stream's lease duration."""
    resume_threshold: float = 0.8
    """After the byte limit, resume reading when the load falls below this fraction of the limits; a new
    stream waits for that much room too."""

    def __post_init__(self) -> None:
        if self.max_messages < 1 or self.max_bytes < 1:
            raise ValueError("FlowControl limits must be positive")
        if not 0 < self.resume_threshold <= 1:
            raise ValueError("resume_threshold must be in (0, 1]")


@dataclasses.dataclass(frozen=True)
class BatchSettings:
    """How ``publish`` gathers messages for one queue into one Send, as Pub/Sub's BatchSettings.

    A batch goes out when it holds ``max_messages``, when the next message would take it past ``max_bytes``,
    or ``max_latency`` seconds after its first message, whichever comes first; ``flush()`` sends at once.
    """

    max_messages: int = 1000
    """Messages in one Send: the server's default limit per request (set it to the server's if that is
    lower). With busy producers it gave 1.7-2.5x the throughput of 100 (docs/sdk.md, "Publishing, batched")."""
    max_bytes: int = 1024 * 1024
    """Encoded message bytes in one Send (1 MiB); a message larger than this goes alone."""
    max_latency: float = 0.01
    """Seconds a batch waits for more messages after its first (Pub/Sub's default): what a lone message
    waits before it is sent."""

    def __post_init__(self) -> None:
        if self.max_messages < 1 or self.max_bytes < 1:
            raise ValueError("BatchSettings limits must be positive")
        if not 0 <= self.max_latency <= 60:
            raise ValueError("max_latency must be between 0 and 60 seconds")


@dataclasses.dataclass(frozen=True)
class PublishFlowControl:
    """How much ``publish`` holds unsent or unanswered at once, so that a producer faster than the server
    cannot grow memory without bound (Pub/Sub's PublishFlowControl).

    At either limit ``publish`` waits for room (``limit_exceeded="block"``; an ``aio`` publish awaits it) or
    raises ResourceExhausted (``"raise"``). A message larger than ``max_bytes`` is let through when
    nothing else is outstanding.
    """

    max_messages: int = 10_000
    """Messages published and not yet answered: ten full batches."""
    max_bytes: int = 10 * 1024 * 1024
    """Their encoded bytes (10 MiB: ten batches at BatchSettings' max_bytes)."""
    limit_exceeded: str = "block"
    """"block" or "raise"."""

    def __post_init__(self) -> None:
        if self.max_messages < 1 or self.max_bytes < 1:
            raise ValueError("PublishFlowControl limits must be positive")
        if self.limit_exceeded not in ("block", "raise"):
            raise ValueError(f'limit_exceeded must be "block" or "raise", not {self.limit_exceeded!r}')


class Future(Generic[T]):
    """The outcome of a publish, or of an ack, nack or renew started by a Message: fire and forget,
    ``await`` it in asyncio, or call ``result()`` from a thread. Never call ``result()`` on the client's own
    event loop."""

    # A publisher makes one per message, and most are done before anyone looks: the threading machinery
    # (a concurrent.futures.Future, with its Condition) is made only for a caller that waits or awaits.
    __slots__ = ("_inner", "_done", "_value", "_error")

    def __init__(self) -> None:
        self._inner: concurrent.futures.Future[T] | None = None
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def _waitable(self) -> concurrent.futures.Future[T]:
        with _FUTURES_LOCK:
            if self._inner is None:
                self._inner = concurrent.futures.Future()
                if self._done:
                    self._settle_inner()
            return self._inner

    def _settle_inner(self) -> None:
        assert self._inner is not None
        if self._error is not None:
            self._inner.set_exception(self._error)
        else:
            self._inner.set_result(self._value)  # type: ignore[arg-type]

    def result(self, timeout: float | None = None) -> T:
        """Blocks until done; returns the outcome or raises its error."""
        if self._done:
            if self._error is not None:
                raise self._error
            return self._value  # type: ignore[return-value]
        return self._waitable().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Blocks until done; the error, or None."""
        if self._done:
            return self._error
        return self._waitable().exception(timeout)

    def done(self) -> bool:
        """Whether the outcome is known."""
        return self._done

    def add_done_callback(self, fn: Callable[[Future[T]], object]) -> None:
        """Calls ``fn(self)`` when done (on whichever thread completes it; at once if done already)."""
        self._waitable().add_done_callback(lambda _: fn(self))

    def __await__(self) -> Generator[Any, None, T]:
        return asyncio.wrap_future(self._waitable()).__await__()

    # -- completion, for the SDK's machinery ---------------------------------

    def _set_result(self, value: T) -> None:
        self._settle(value, None)

    def _set_exception(self, exc: BaseException) -> None:
        self._settle(None, exc)

    def _settle(self, value: T | None, error: BaseException | None) -> None:
        with _FUTURES_LOCK:
            if self._done:
                return
            self._value, self._error, self._done = value, error, True
            inner = self._inner
        if inner is not None:
            self._settle_inner()  # outside the lock: it runs the done callbacks


_FUTURES_LOCK = threading.Lock()
"""Guards every Future's state: held for a few field writes, never while a callback runs."""

Future.__module__ = "spanq"


class _Settler(Protocol):
    """What a Message calls to ack, nack or renew itself: a subscriber, or the client."""

    def _settle(self, message: Message, action: str, lease_duration: timedelta | None,
                reason: str | None = None) -> Future[Any]: ...


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """A dead letter's history: the queue it was moved from, its delivery attempts there, when it
    was moved, and why its last attempt failed ("lease expired", a nack's reason, "nacked", or
    "undeliverable: ...")."""

    source_queue: str
    delivery_attempts: int
    dead_letter_time: datetime
    last_failure: str


class Message:
    """A leased message, as a receive or a subscriber delivers it.

    ``lease_token`` is the current token: a renewal (by the subscriber's leaser or ``renew()``) replaces it.
    ``ack()``, ``nack()`` and ``renew()`` return a Future at once; in a subscriber acks and nacks are
    batched. Acks carry the lease token, so acking a message whose lease was lost fails with LeaseLost
    rather than deleting a message another receiver holds.
    """

    __slots__ = (
        "queue", "key", "payload", "deliver_time", "enqueue_time", "delivery_attempt", "size", "dead_letter",
        "headers", "priority", "ordering_key",
        "_lease_token", "_lease_expiration_time", "_settler", "_owner", "_lock", "_settled", "_sql_acked",
        "_wire_key",
    )

    queue: str
    """The queue's name."""
    key: Key
    """The message's key, one value per key column."""
    payload: Any
    """bytes (BYTES queue), str (STRING) or JSON data (JSON)."""
    deliver_time: datetime
    """When the message became deliverable for this delivery."""
    enqueue_time: datetime
    """When the message was sent."""
    delivery_attempt: int
    """1 on the first delivery, +1 on each redelivery."""
    size: int
    """The payload's size on the wire, in bytes (for flow control)."""
    dead_letter: DeadLetter | None
    """Set on a message of a dead-letter queue: where it came from and why."""
    headers: dict[str, str]
    """The headers it was sent with (trace context among them); empty when none."""
    priority: int
    """0 to 9, as sent."""
    ordering_key: str | None
    """As sent (None: none). The key's next message is delivered once this one is acked or dead-lettered."""

    def __init__(
        self,
        *,
        queue: str,
        key: Key,
        payload: Any,
        lease_token: str,
        lease_expiration_time: datetime,
        deliver_time: datetime,
        enqueue_time: datetime,
        delivery_attempt: int,
        size: int = 0,
        settler: _Settler | None = None,
        dead_letter: DeadLetter | None = None,
        headers: dict[str, str] | None = None,
        priority: int = 0,
        ordering_key: str | None = None,
    ) -> None:
        self.queue = queue
        self.key = key
        self.payload = payload
        self.deliver_time = deliver_time
        self.enqueue_time = enqueue_time
        self.delivery_attempt = delivery_attempt
        self.size = size
        self.dead_letter = dead_letter
        self.headers = headers if headers is not None else {}
        self.priority = priority
        self.ordering_key = ordering_key
        self._lease_token = lease_token
        self._lease_expiration_time = lease_expiration_time
        self._settler = settler
        self._owner: Subscriber | None = None
        self._lock = threading.Lock()
        self._settled: str | None = None  # "ack", "nack" or "lost" once settled (set on the client's loop)
        self._sql_acked = False  # acked by spanq.sql inside the application's transaction
        self._wire_key: Any = None  # the key as received (a struct_pb2.ListValue): acks reuse it

    @property
    def lease_token(self) -> str:
        """The current lease token (a renewal supersedes the previous one)."""
        with self._lock:
            return self._lease_token

    @property
    def lease_expiration_time(self) -> datetime:
        """When the current lease ends (the server's clock)."""
        with self._lock:
            return self._lease_expiration_time

    def _renewed(self, token: str, expiration: datetime | None) -> None:
        with self._lock:
            self._lease_token = token
            if expiration is not None:
                self._lease_expiration_time = expiration

    def ack(self) -> Future[None]:
        """Acknowledges (deletes) the message, checking that its lease is still ours.

        The Future fails with LeaseLost if the lease expired and another receiver holds the message."""
        return self._call("ack", None)

    def nack(self, reason: str | None = None) -> Future[None]:
        """Releases the lease now: the message is redelivered after the queue's backoff. ``reason``
        (at most 200 characters) is kept in its dead-letter history if it runs out of attempts."""
        return self._call("nack", None, reason)

    def renew(self, lease_duration: timedelta | float | None = None) -> Future[RenewedLease]:
        """Extends the lease by ``lease_duration`` from now (None: the subscriber's or queue's lease) and
        carries the new token forward. Inside a subscriber the leaser already does this."""
        if isinstance(lease_duration, (int, float)):
            lease_duration = timedelta(seconds=lease_duration)
        return self._call("renew", lease_duration)

    def _call(self, action: str, lease_duration: timedelta | None, reason: str | None = None) -> Future[Any]:
        if self._settler is None:
            raise RuntimeError("this Message was not delivered by a spanq client, so it cannot settle itself")
        return self._settler._settle(self, action, lease_duration, reason)

    def __repr__(self) -> str:
        return (
            f"Message(queue={self.queue!r}, key={self.key!r}, delivery_attempt={self.delivery_attempt}, "
            f"payload={self.payload!r:.60})"
        )


for _cls in (TypeCode, KeyColumn, Queue, OutgoingMessage, RenewedLease, CommitResult, FlowControl, BatchSettings,
             DeadLetter, PublishFlowControl, Message):
    _cls.__module__ = "spanq"
