"""Operator calls of the SDK: queue stats, peek, purge and redrive (their values,
and the conversions from the wire). ``aio.Client`` calls these; ``spanq.Client``
runs those calls on its loop thread."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta

from spanq_proto.v1 import queue_pb2

from . import _codec
from ._types import DeadLetter, Key, Queue

__all__ = ["QueueStats", "PeekedMessage", "PeekPage", "RedriveProgress", "ReplayProgress"]


@dataclasses.dataclass(frozen=True)
class QueueStats:
    """A queue's figures (``client.stats``): message counts by state, exact at ``read_time``."""

    name: str
    ready: int
    """Deliverable now."""
    scheduled: int
    """Not deliverable yet: a later deliver_time, or backing off after a failed attempt."""
    leased: int
    """In flight: leased and not acked, released or expired."""
    dead_lettered: int
    """Messages in the queue's dead-letter queue (0 without one)."""
    oldest_ready_age: timedelta
    """Since the oldest ready message was sent (0 when none is ready)."""
    send_rate: float
    """Messages sent per second over the last minute, through the server that answered."""
    ack_rate: float
    """Messages acknowledged per second over the last minute, through the server that answered."""
    dead_letter_queue: str | None
    read_time: datetime | None
    disable_send: bool = False
    """Sends are paused (``update_queue(disable_send=...)``)."""
    disable_delivery: bool = False
    held: int = 0
    """Messages waiting behind an earlier message of their ordering key."""
    """Delivery is paused."""
    rate_limited: int = 0
    """Messages ready for a batch that the queue's ``rate_limit`` kept back, since it was set."""
    rate_limit_tokens: float = 0.0
    """Leases the rate limit's bucket would allow now."""
    key_limited: int = 0
    """Due messages whose key value is at ``max_in_flight_per_key`` now (waiting for a lease of their key to end)."""
    keys_at_limit: int = 0
    """Key values with ``max_in_flight_per_key`` unexpired leases now."""


@dataclasses.dataclass(frozen=True)
class PeekedMessage:
    """A message read without leasing it (``client.peek``). ``state`` is READY, SCHEDULED or LEASED."""

    key: Key
    payload: object
    state: str
    deliver_time: datetime
    delivery_attempt: int
    enqueue_time: datetime
    lease_expiration_time: datetime | None
    dead_letter: DeadLetter | None = None
    """Set on a message of a dead-letter queue."""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    priority: int = 0
    ordering_key: str | None = None
    """As sent; a message of state HELD waits for an earlier one of its key."""
    ack_time: datetime | None = None
    """Set on an archived message (``peek(archived=True)``; state ACKED): when it was acked."""
    ack_request_id: str | None = None
    """The request_id of the Ack or Commit that acked an archived message."""


@dataclasses.dataclass(frozen=True)
class PeekPage:
    """One page of ``client.peek``; pass ``next_page_token`` for the next ("" on the last page)."""

    messages: list[PeekedMessage]
    next_page_token: str


@dataclasses.dataclass(frozen=True)
class RedriveProgress:
    """Where a redrive stands: ``moved`` by this call (committed), ``remaining`` in the dead-letter queue,
    of which ``skipped`` cannot move now (leased, or their key already in the target)."""

    moved: int
    remaining: int
    skipped: int
    to: str
    done: bool


ProgressCallback = Callable[[RedriveProgress], object]
"""Called with each RedriveProgress of ``client.redrive``, after each committed batch."""


@dataclasses.dataclass(frozen=True)
class ReplayProgress:
    """Where a replay stands, over every call of its ``request_id`` (all committed): ``sent`` back into
    the queue, ``skipped`` (their key was live in the queue), ``remaining`` archived messages of the range
    not reached yet (0 when ``done``); ``replayed``: an earlier call had finished it, nothing was sent now."""

    sent: int
    skipped: int
    remaining: int
    done: bool
    replayed: bool
    request_id: str


ReplayCallback = Callable[[ReplayProgress], object]
"""Called with each ReplayProgress of ``client.replay``, after each committed batch."""


def stats_from_proto(s: queue_pb2.QueueStats) -> QueueStats:
    return QueueStats(
        name=s.name, ready=s.ready, scheduled=s.scheduled, leased=s.leased, dead_lettered=s.dead_lettered,
        oldest_ready_age=s.oldest_ready_age.ToTimedelta(), send_rate=s.send_rate, ack_rate=s.ack_rate,
        dead_letter_queue=s.dead_letter_queue or None,
        read_time=_codec.timestamp_to_datetime(s.read_time) if s.HasField("read_time") else None,
        disable_send=s.disable_send, disable_delivery=s.disable_delivery, held=s.held, rate_limited=s.rate_limited,
        rate_limit_tokens=s.rate_limit_tokens, key_limited=s.key_limited, keys_at_limit=s.keys_at_limit,
    )


def peek_page_from_proto(schema: Queue, page: queue_pb2.PeekResponse) -> PeekPage:
    return PeekPage([
        PeekedMessage(
            key=_codec.key_from_proto(schema, m.key),
            payload=_codec.payload_from_proto(schema, m.payload),
            state=queue_pb2.PeekedMessage.State.Name(m.state),
            deliver_time=_codec.timestamp_to_datetime(m.deliver_time),
            delivery_attempt=m.delivery_attempt,
            enqueue_time=_codec.timestamp_to_datetime(m.enqueue_time),
            lease_expiration_time=(_codec.timestamp_to_datetime(m.lease_expiration_time)
                                   if m.HasField("lease_expiration_time") else None),
            dead_letter=_codec.dead_letter(m.dead_letter) if m.HasField("dead_letter") else None,
            headers=dict(m.headers),
            priority=m.priority,
            ordering_key=m.ordering_key or None,
            ack_time=_codec.timestamp_to_datetime(m.ack_time) if m.HasField("ack_time") else None,
            ack_request_id=m.ack_request_id or None,
        )
        for m in page.messages
    ], page.next_page_token)


def progress_from_proto(p: queue_pb2.RedriveProgress) -> RedriveProgress:
    return RedriveProgress(moved=p.moved, remaining=p.remaining, skipped=p.skipped, to=p.to, done=p.done)


def replay_progress_from_proto(p: queue_pb2.ReplayProgress) -> ReplayProgress:
    return ReplayProgress(sent=p.sent, skipped=p.skipped, remaining=p.remaining, done=p.done, replayed=p.replayed,
                          request_id=p.request_id)


for _cls in (QueueStats, PeekedMessage, PeekPage, RedriveProgress, ReplayProgress):
    _cls.__module__ = "spanq"

