"""Building spanq.v1 requests from Python values, and reading their responses.

Shared by the direct calls, the transaction builder and the subscriber, so
that a send, an ack or a renewal is encoded one way only.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Union

from google.protobuf import struct_pb2
from spanq_proto.v1 import queue_pb2

from . import _codec, _tracing
from ._errors import InvalidArgument
from ._types import Key, KeyValue, Message, OutgoingMessage, Queue, RenewedLease

AckTarget = Union[Message, Key, KeyValue]
"""What an ack names: a Message (its key and current lease token), or a key (a tuple, or a lone value for
a one-column key) to ack whoever holds it."""
LeaseTarget = Union[Message, str]
"""What a renewal or nack names: a Message (its current lease token) or a lease token."""

MAX_ITEMS_PER_REQUEST = 1000
"""The server's default per-request limit on messages, acks and lease tokens."""


_IDS_PER_DRAW = 256
_random = bytearray()
_random_lock = threading.Lock()
os.register_at_fork(after_in_child=_random.clear)  # a forked child must not reuse its parent's ids


def new_request_id() -> str:
    """A fresh request id: a random (version 4) UUID.

    Its bytes come from os.urandom 256 ids at a time: os.urandom lets go of the GIL, and the loop thread
    then waits up to 5 ms to get it back from a busy producer thread (measured: 5 ms per Send)."""
    with _random_lock:
        if not _random:
            _random.extend(os.urandom(16 * _IDS_PER_DRAW))
        raw = bytes(_random[-16:])
        del _random[-16:]
    return str(uuid.UUID(bytes=raw, version=4))


def outgoing(messages: Iterable[OutgoingMessage | Any]) -> list[OutgoingMessage]:
    """OutgoingMessage values; anything else is a payload with no key."""
    return [m if isinstance(m, OutgoingMessage) else OutgoingMessage(payload=m) for m in messages]


def send_request(queue: Queue, messages: Sequence[OutgoingMessage],
                 trace_context: Mapping[str, str] | None = None) -> queue_pb2.SendRequest:
    if not messages:
        raise InvalidArgument("a send needs at least one message")
    out = queue_pb2.SendRequest(queue=queue.name)
    for m in messages:
        write_message(queue, m, out.messages.add(), trace_context)
    return out


def send_message(queue: Queue, message: OutgoingMessage | Any,
                 trace_context: Mapping[str, str] | None = None) -> queue_pb2.SendMessage:
    """One message of a SendRequest, on its own (the publisher batches these); as ``outgoing``, anything
    but an OutgoingMessage is a payload with no key."""
    out = queue_pb2.SendMessage()
    if isinstance(message, OutgoingMessage):
        write_message(queue, message, out, trace_context)
    else:
        _codec.write_payload(queue, message, out.payload)
        if trace_context:
            out.headers.update(trace_context)
    return out


MAX_ORDERING_KEY_BYTES = 1024
"""The server's limit (docs/semantics.md, Ordering keys)."""


def check_ordering_key(key: object) -> str:
    """A message's ordering key as the server takes it, or InvalidArgument before anything is sent."""
    if not isinstance(key, str) or "\0" in key or len(key.encode()) > MAX_ORDERING_KEY_BYTES:
        raise InvalidArgument(f"ordering_key must be a str of 1 to {MAX_ORDERING_KEY_BYTES} bytes of UTF-8 "
                              f"without NUL (None or '': none), not {key!r:.60}")
    return key


def write_message(queue: Queue, m: OutgoingMessage, out: queue_pb2.SendMessage,
                  trace_context: Mapping[str, str] | None = None) -> None:
    if m.key is not None:
        out.key.CopyFrom(_codec.key_to_proto(queue, _codec.as_key(m.key), sent=True))
    _codec.write_payload(queue, m.payload, out.payload)
    headers = _tracing.with_context(m.headers, trace_context)
    if headers:
        out.headers.update(headers)
    if m.priority:
        if isinstance(m.priority, bool) or not isinstance(m.priority, int) or not 0 <= m.priority <= 9:
            raise InvalidArgument(f"priority must be an int between 0 and 9, not {m.priority!r}")
        out.priority = m.priority
    if m.ordering_key:
        out.ordering_key = check_ordering_key(m.ordering_key)
    if m.deliver_time is not None and m.delay is not None:
        raise InvalidArgument("set at most one of deliver_time and delay")
    if m.deliver_time is not None:
        out.deliver_time.CopyFrom(_codec.timestamp(m.deliver_time))
    elif m.delay is not None:
        out.delay.CopyFrom(_codec.duration(m.delay))


def send_keys(queue: Queue, response: queue_pb2.SendResponse) -> list[Key]:
    return [_codec.key_from_proto(queue, k) for k in response.keys]


def ack_request(queue: Queue, targets: Sequence[AckTarget], ignore_not_found: bool) -> queue_pb2.AckRequest:
    """Reads each Message's current lease token: build it while no renewal of those messages is in flight."""
    if not targets:
        raise InvalidArgument("an ack needs at least one message or key")
    out = queue_pb2.AckRequest(queue=queue.name, ignore_not_found=ignore_not_found)
    for target in targets:
        item = out.acks.add()
        if isinstance(target, Message):
            _check_queue(queue, target)
            item.key.CopyFrom(target._wire_key or _codec.key_to_proto(queue, target.key))
            item.lease_token = target.lease_token
        else:
            item.key.CopyFrom(_codec.key_to_proto(queue, _codec.as_key(target)))
    return out


def ack_results(response: queue_pb2.AckResponse) -> list[bool]:
    return [r.acked for r in response.results]


def renew_request(queue: str, targets: Sequence[LeaseTarget], lease_duration: timedelta,
                  reason: str | None = None) -> queue_pb2.RenewLeaseRequest:
    """A RenewLease; lease_duration 0 releases (a nack), which may give a short reason."""
    if not targets:
        raise InvalidArgument("a renewal needs at least one message or lease token")
    if lease_duration < timedelta(0):
        raise InvalidArgument("lease_duration cannot be negative")
    tokens = []
    for target in targets:
        if isinstance(target, Message):
            if target.queue != queue:
                raise InvalidArgument(f"the message is from queue {target.queue!r}, not {queue!r}")
            tokens.append(target.lease_token)
        elif isinstance(target, str):
            tokens.append(target)
        else:
            raise InvalidArgument(f"a lease target is a Message or a lease token, not {type(target).__name__}")
    return queue_pb2.RenewLeaseRequest(queue=queue, lease_tokens=tokens, lease_duration=_codec.duration(lease_duration),
                                       reason=reason or "")


MAX_NACK_REASON = 200
"""The server's bound on a nack's reason (characters)."""


def failure_reason(exc: BaseException) -> str:
    """A callback's exception as a nack's reason: ``Type: message``, cut to the server's bound."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= MAX_NACK_REASON else text[:MAX_NACK_REASON - 3] + "..."


def renew_results(response: queue_pb2.RenewLeaseResponse) -> list[RenewedLease]:
    return [
        RenewedLease(
            old_lease_token=lease.old_lease_token,
            new_lease_token=lease.new_lease_token or None,
            lease_expiration_time=(
                _codec.timestamp_to_datetime(lease.lease_expiration_time)
                if lease.HasField("lease_expiration_time") else None
            ),
        )
        for lease in response.leases
    ]


def received_message(queue: Queue, m: queue_pb2.ReceivedMessage) -> Message:
    message = Message(
        queue=queue.name,
        key=_codec.key_from_proto(queue, m.key),
        payload=_codec.payload_from_proto(queue, m.payload),
        lease_token=m.lease_token,
        lease_expiration_time=_codec.timestamp_to_datetime(m.lease_expiration_time),
        deliver_time=_codec.timestamp_to_datetime(m.deliver_time),
        enqueue_time=_codec.timestamp_to_datetime(m.enqueue_time),
        delivery_attempt=m.delivery_attempt,
        size=m.payload.ByteSize(),
        dead_letter=_codec.dead_letter(m.dead_letter) if m.HasField("dead_letter") else None,
        headers=dict(m.headers),
        priority=m.priority,
        ordering_key=m.ordering_key or None,
    )
    # A copy, not a reference: that would keep the whole response (every payload in it) alive.
    message._wire_key = struct_pb2.ListValue()
    message._wire_key.CopyFrom(m.key)
    return message


def _check_queue(queue: Queue, message: Message) -> None:
    if message.queue != queue.name:
        raise InvalidArgument(f"the message is from queue {message.queue!r}, not {queue.name!r}")


def apply_renewals(targets: Sequence[LeaseTarget], renewed: Sequence[RenewedLease]) -> None:
    """Carries each Message's new token forward (a renewed token supersedes the old one)."""
    for target, lease in zip(targets, renewed):
        if isinstance(target, Message) and lease.new_lease_token:
            target._renewed(lease.new_lease_token, lease.lease_expiration_time)


def chunks(items: Sequence[Any], size: int = MAX_ITEMS_PER_REQUEST) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [items]
