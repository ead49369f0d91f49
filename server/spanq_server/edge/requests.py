"""spanq.v1's mutating requests on their way to the domain, for both front-ends that take
them: v1/service.py (gRPC) and the dashboard's send form and settings (JSON in the RPC's
own shape). One decoding, so a bad field gets the same error from either, and one path
through exactly_once.py, so a request_id sent twice commits once."""

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, cast

from spanq_proto.v1 import queue_pb2

from ..domain import queues
from ..domain.exactly_once import Answer, ExactlyOnce, Request
from ..domain.mutations import MAX_SCHEDULE_AHEAD, Mutation, Result, SendOp
from ..domain.queues import Catalog
from ..ground.model import Key, OutgoingMessage, QueueDef
from . import codec

Reply = Any
"""A request or response message of a mutating RPC (they share request_id / replayed)."""


@dataclasses.dataclass(frozen=True)
class Response:
    """A mutating RPC's response, as exactly_once.py asks for it (its ``Reply``): built
    from the results, and its replay decoded from the ledger with replayed = true."""

    type: Any
    build: Callable[[Sequence[Mutation], Sequence[Result]], Reply]

    def encode(self, mutations: Sequence[Mutation], results: Sequence[Result]) -> tuple[Reply, bytes]:
        reply = self.build(mutations, results)
        return reply, reply.SerializeToString()

    def replay(self, recorded: bytes) -> Reply:
        reply = self.type.FromString(recorded)
        reply.replayed = True
        return reply


async def commit(once: ExactlyOnce, kind: str, request: Reply, response: Response,
                 ops: Callable[[], Awaitable[list[Mutation]]]) -> Reply:
    """Runs one mutating RPC through exactly_once.py: its mutations (``ops``, from the
    request) committed once, or the recorded response with replayed = true."""
    unkeyed = type(request)()
    unkeyed.CopyFrom(request)
    unkeyed.request_id = ""
    keyed = Request.of(request.request_id, kind, unkeyed.SerializeToString(deterministic=True))

    async def attempt() -> Answer[Reply]:
        return await once.commit(keyed, await ops(), response)

    return (await once.run(keyed, response, attempt)).reply


async def send(catalog: Catalog, once: ExactlyOnce, request: queue_pb2.SendRequest) -> queue_pb2.SendResponse:
    """A Send, exactly once by its request_id."""
    async def ops() -> list[Mutation]:
        return [await send_op(catalog, request)]

    return cast(queue_pb2.SendResponse, await commit(once, "Send", request, SEND, ops))


async def send_op(catalog: Catalog, request: queue_pb2.SendRequest) -> SendOp:
    queue = await catalog.get(request.queue)
    read = codec.key_reader(queue.sent_key_columns)  # a generated key column is computed, not sent
    messages = []
    for i, m in enumerate(request.messages):
        where = f"message {i}"
        key: Key = ()
        if m.HasField("key") and (m.key.values or not queue.key_generated):
            # The fast reader, or for a key that is not well-formed the full decoder, to say why.
            key = read(m.key) or codec.key_from_proto(queue, m.key, where, sent=True)
        messages.append(
            OutgoingMessage(
                key=key,
                payload=codec.payload_from_proto(queue, m.payload, m.HasField("payload"), where),
                deliver_time=codec.timestamp_to_datetime(m.deliver_time, f"{where}: deliver_time")
                if m.HasField("deliver_time") else None,
                delay=codec.duration_from_proto(
                    m.delay, f"{where}: delay", default=None, minimum=timedelta(0),
                    maximum=MAX_SCHEDULE_AHEAD,
                ) if m.HasField("delay") else None,
                headers=dict(m.headers) or None,
                priority=m.priority,
                ordering_key=m.ordering_key or None,
            )
        )
    return SendOp(queue=queue, messages=messages)


def send_response(queue: QueueDef, keys: list[Key]) -> queue_pb2.SendResponse:
    write_key = codec.key_writer(queue.key_columns)
    out = queue_pb2.SendResponse()
    add = out.keys.add
    for k in keys:
        write_key(add(), k)
    return out


SEND = Response(queue_pb2.SendResponse,
                lambda ops, results: send_response(cast(SendOp, ops[0]).queue, cast(list[Key], results[0])))


def queue_changes(request: queue_pb2.UpdateQueueRequest) -> dict[str, Any]:
    """The settings an UpdateQueue names (QueueDef's field names), with their new values:
    a named duration left unset takes CreateQueue's default; 0 and "" remove the
    dead-letter pair. Names of fields that cannot change pass through for queues.py to refuse."""
    q = request.queue
    values: dict[str, Callable[[], Any]] = {
        "lease_duration": lambda: setting(q.lease_duration, "lease_duration", queues.DEFAULT_LEASE,
                                          queues.MAX_LEASE),
        "initial_backoff": lambda: setting(q.initial_backoff, "initial_backoff", queues.DEFAULT_INITIAL_BACKOFF,
                                           queues.MAX_BACKOFF, explicit_zero=q.HasField("initial_backoff")),
        "max_backoff": lambda: setting(q.max_backoff, "max_backoff", queues.DEFAULT_MAX_BACKOFF, queues.MAX_BACKOFF),
        "max_delivery_attempts": lambda: q.max_delivery_attempts or None,
        "dead_letter_queue": lambda: q.dead_letter_queue or None,
        "disable_send": lambda: q.disable_send,
        "disable_delivery": lambda: q.disable_delivery,
        "message_retention_duration": lambda: retention(q, "message_retention_duration"),
        "archive_duration": lambda: retention(q, "archive_duration"),
        "enable_message_ordering": lambda: q.enable_message_ordering,
        **{field: functools.partial(limit, q, field) for field in LIMITS},
    }
    changes: dict[str, Any] = {}
    for path in request.update_mask.paths:
        value = values.get(path)
        changes[path] = None if value is None else value()
    return changes


LIMITS = ("max_in_flight_per_key", "concurrency_key", "rate_limit", "rate_limit_burst")
"""The limit settings, alike in spanq.v1's Queue and QueueDef: 0 and "" are none."""


def limits(q: queue_pb2.Queue, fields: tuple[str, ...]) -> dict[str, Any]:
    """Those of the limit settings ``fields``, as QueueDef holds them (queues.check_limits
    refuses what is out of range)."""
    return {field: limit(q, field) for field in fields}


def limit(q: queue_pb2.Queue, field: str) -> Any:
    return getattr(q, field) or None


def retention(q: queue_pb2.Queue, field: str) -> timedelta | None:
    """Unset or 0: none (messages kept until acked; an ack deletes)."""
    return codec.duration_from_proto(getattr(q, field), field, default=None, minimum=queues.MIN_RETENTION,
                                     maximum=queues.MAX_RETENTION)


def setting(d: Any, what: str, default: timedelta, maximum: timedelta,
            explicit_zero: bool = False) -> timedelta:
    value = codec.duration_from_proto(d, what, default=default, minimum=timedelta(0), maximum=maximum,
                                      zero_allowed=explicit_zero)
    assert value is not None
    return value
