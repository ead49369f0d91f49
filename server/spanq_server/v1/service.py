"""The spanq.v1.QueueService servicer: protobuf <-> domain, and domain errors
-> gRPC status. No SQL and no queue rules here."""

import functools
import logging
from datetime import timedelta
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

import grpc
from google.protobuf import empty_pb2

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from ..domain import queues
from ..domain.exactly_once import ExactlyOnce
from ..domain.mutations import AckOp, Mutation, Mutator, RenewOp, Result, SendOp
from ..domain.operator import Operator
from ..domain.queues import Catalog
from ..domain.receive.stream import MAX_STREAM_DURATION, Encoded, Receiver, ReceiveOptions
from ..edge import codec
from ..edge.requests import (LIMITS, SEND, Reply, Response, commit, limits, queue_changes, retention, send_op,
                             send_response, setting)
from ..edge.peers import peer_of
from ..edge.status import translate_errors, translate_stream_errors
from ..edge.views import peek_response, queue_to_proto, stats_response, write_dead_letter
from ..ground import errors
from ..ground.jsonfit import check_json, json_fits
from ..ground.model import (AckItem, AckResult, ColumnType, Key, KeyColumn, LeasedMessage, QueueDef, RenewResult,
                           ReplayWindow)

logger = logging.getLogger(__name__)

MAX_NACK_REASON = 200
"""Characters of a nack's reason (RenewLeaseRequest.reason): a short note for the
dead-letter history, not a log."""

class QueueService(queue_pb2_grpc.QueueServiceServicer):
    def __init__(self, catalog: Catalog, mutator: Mutator, receiver: Receiver, exactly_once: ExactlyOnce,
                 operator: Operator) -> None:
        self._catalog = catalog
        self._operator = operator
        self._once = exactly_once
        self._mutator = mutator
        self._receiver = receiver

    # -- queues ---------------------------------------------------------------

    @translate_errors
    async def CreateQueue(self, request: queue_pb2.CreateQueueRequest, context: Any) -> queue_pb2.Queue:
        return queue_to_proto(await self._catalog.create(queue_from_proto(request.queue)))

    @translate_errors
    async def GetQueue(self, request: queue_pb2.GetQueueRequest, context: Any) -> queue_pb2.Queue:
        return queue_to_proto(await self._catalog.get(request.name))

    @translate_errors
    async def ListQueues(self, request: queue_pb2.ListQueuesRequest, context: Any) -> queue_pb2.ListQueuesResponse:
        found, token = await self._catalog.list(request.page_size, request.page_token)
        return queue_pb2.ListQueuesResponse(queues=[queue_to_proto(q) for q in found], next_page_token=token)

    @translate_errors
    async def UpdateQueue(self, request: queue_pb2.UpdateQueueRequest, context: Any) -> queue_pb2.Queue:
        return queue_to_proto(await self._catalog.update(request.queue.name, queue_changes(request)))

    @translate_errors
    async def DropQueue(self, request: queue_pb2.DropQueueRequest, context: Any) -> empty_pb2.Empty:
        await self._catalog.drop(request.name)  # its on_gone listeners end the queue's streams
        return empty_pb2.Empty()

    # -- mutations --------------------------------------------------------------

    @translate_errors
    async def Send(self, request: queue_pb2.SendRequest, context: Any) -> queue_pb2.SendResponse:
        async def ops() -> list[Mutation]:
            return [await self._send_op(request)]

        return await self._commit("Send", request, SEND, ops)

    @translate_errors
    async def Ack(self, request: queue_pb2.AckRequest, context: Any) -> queue_pb2.AckResponse:
        async def ops() -> list[Mutation]:
            return [await self._ack_op(request)]

        return await self._commit("Ack", request, ACK, ops)

    @translate_errors
    async def RenewLease(self, request: queue_pb2.RenewLeaseRequest, context: Any) -> queue_pb2.RenewLeaseResponse:
        async def ops() -> list[Mutation]:
            return [await self._renew_op(request)]

        return await self._commit("RenewLease", request, RENEW, ops)

    @translate_errors
    async def Commit(self, request: queue_pb2.CommitRequest, context: Any) -> queue_pb2.CommitResponse:
        async def ops() -> list[Mutation]:
            if not request.mutations:
                raise errors.InvalidArgument("a commit needs at least one mutation")
            found: list[Mutation] = []
            for index, mutation in enumerate(request.mutations):
                try:
                    found.append(await self._mutation_op(mutation))
                except errors.QueueError as exc:
                    exc.metadata.setdefault("mutation_index", str(index))
                    exc.args = (f"mutation {index}: {exc.message}",)
                    raise
            self._mutator.check_commit_size(found)
            return found

        return await self._commit("Commit", request, COMMIT, ops)

    async def _mutation_op(self, mutation: queue_pb2.Mutation) -> Mutation:
        kind = mutation.WhichOneof("operation")
        if kind is None:
            raise errors.InvalidArgument("the mutation sets none of send, ack, renew_lease")
        inner = getattr(mutation, kind)
        if inner.request_id:
            raise errors.InvalidArgument("request_id goes on the Commit, not on its mutations")
        if kind == "send":
            return await self._send_op(inner)
        if kind == "ack":
            return await self._ack_op(inner)
        return await self._renew_op(inner)

    async def _commit(self, kind: str, request: Reply, response: Response,
                      ops: Callable[[], Awaitable[list[Mutation]]]) -> Reply:
        return await commit(self._once, kind, request, response, ops)

    # -- receive ----------------------------------------------------------------

    @translate_errors
    async def Receive(self, request: queue_pb2.ReceiveRequest, context: grpc.aio.ServicerContext) -> None:
        # Writes its responses itself (not a generator): the receiver times each write,
        # so that a client that does not read ends its stream (receive.py).
        options = ReceiveOptions(
            max_batch_size=request.max_batch_size,
            max_duration=codec.duration_from_proto(
                request.max_duration, "max_duration", default=None,
                minimum=timedelta(0), maximum=MAX_STREAM_DURATION,
            ),
            lease_duration=codec.duration_from_proto(
                request.lease_duration, "lease_duration", default=None,
                minimum=queues.MIN_LEASE, maximum=queues.MAX_LEASE,
            ),
            max_outstanding=request.max_outstanding,
        )
        queue = await self._catalog.get(request.queue, fresh=True)
        await self._receiver.serve(queue, options, functools.partial(receive_responses, queue), context.write,
                                    peer_of(context))

    # -- operator tools (admin.py) ------------------------------------------------

    @translate_errors
    async def GetQueueStats(self, request: queue_pb2.GetQueueStatsRequest, context: Any) -> queue_pb2.QueueStats:
        return stats_response(await self._operator.stats(request.name))

    @translate_errors
    async def Peek(self, request: queue_pb2.PeekRequest, context: Any) -> queue_pb2.PeekResponse:
        queue, found, token = await self._operator.peek(request.queue, request.page_size, request.page_token,
                                                        archived=request.archived)
        return peek_response(queue, found, token)

    @translate_errors
    async def Purge(self, request: queue_pb2.PurgeRequest, context: Any) -> queue_pb2.PurgeResponse:
        before = (codec.timestamp_to_datetime(request.sent_before, "sent_before")
                  if request.HasField("sent_before") else None)
        return queue_pb2.PurgeResponse(purged=await self._operator.purge(request.queue, before))

    @translate_stream_errors
    async def Redrive(self, request: queue_pb2.RedriveRequest, context: grpc.aio.ServicerContext
                      ) -> AsyncIterator[queue_pb2.RedriveProgress]:
        async for p in self._operator.redrive(request.queue, request.to, batch_size=request.batch_size,
                                              rate=request.rate, max_messages=request.max_messages):
            yield queue_pb2.RedriveProgress(moved=p.moved, remaining=p.remaining, skipped=p.skipped, to=p.to,
                                            done=p.done)

    @translate_stream_errors
    async def Replay(self, request: queue_pb2.ReplayRequest, context: grpc.aio.ServicerContext
                     ) -> AsyncIterator[queue_pb2.ReplayProgress]:
        bounds: list[Key | None] = [None, None]
        if request.HasField("start_key") or request.HasField("end_key"):
            queue = await self._catalog.get(request.queue)
            bounds = [codec.key_from_proto(queue, getattr(request, field), field) if request.HasField(field) else None
                      for field in ("start_key", "end_key")]
        start, end = (codec.timestamp_to_datetime(getattr(request, field), field) if request.HasField(field) else None
                      for field in ("start_time", "end_time"))
        window = ReplayWindow(start, end, bounds[0], bounds[1])
        async for p in self._operator.replay(request.queue, window, request.request_id,
                                             batch_size=request.batch_size, rate=request.rate,
                                             validate_only=request.validate_only):
            yield queue_pb2.ReplayProgress(sent=p.sent, skipped=p.skipped, remaining=p.remaining, done=p.done,
                                           replayed=p.replayed, request_id=p.request_id)

    # -- request -> domain ------------------------------------------------------

    async def _send_op(self, request: queue_pb2.SendRequest) -> SendOp:
        return await send_op(self._catalog, request)

    async def _ack_op(self, request: queue_pb2.AckRequest) -> AckOp:
        queue = await self._catalog.get(request.queue)
        found = codec.ack_items(queue.key_columns, request.acks)
        if found is not None:
            return AckOp(queue=queue, items=found, ignore_not_found=request.ignore_not_found)
        read = codec.key_reader(queue.key_columns)
        items = []
        for i, a in enumerate(request.acks):
            key = read(a.key)
            if key is None:  # not well-formed: let the full decoder say why
                key = codec.key_from_proto(queue, a.key, f"ack {i}")
            items.append(AckItem(key, a.lease_token or None))
        return AckOp(queue=queue, items=items, ignore_not_found=request.ignore_not_found)

    async def _renew_op(self, request: queue_pb2.RenewLeaseRequest) -> RenewOp:
        queue = await self._catalog.get(request.queue)
        lease = codec.duration_from_proto(
            request.lease_duration, "lease_duration", default=None, minimum=timedelta(0),
            maximum=queues.MAX_LEASE, zero_allowed=True,
        )
        assert lease is not None
        if request.reason and lease != timedelta(0):
            raise errors.InvalidArgument("reason is for a nack only (lease_duration 0); leave it empty when "
                                         "renewing")
        if len(request.reason) > MAX_NACK_REASON:
            raise errors.InvalidArgument(f"reason has {len(request.reason)} characters, more than the "
                                         f"{MAX_NACK_REASON} allowed; send a shorter one")
        return RenewOp(queue=queue, lease_tokens=list(request.lease_tokens), lease_duration=lease,
                       reason=request.reason or None)


# -- domain -> response ---------------------------------------------------------


class AckReply(Response):
    """The Ack's response: for the default key, its bytes written at once and the reply
    parsed from them: a third of the time of building it field by field (bench.drain_steps)."""

    def encode(self, mutations: Sequence[Mutation], results: Sequence[Result]) -> tuple[Reply, bytes]:
        queue = cast(AckOp, mutations[0]).queue
        data = codec.ack_results_bytes(queue.key_columns, cast(list[AckResult], results[0]))
        if data is None:
            return super().encode(mutations, results)
        return queue_pb2.AckResponse.FromString(data), data


ACK = AckReply(queue_pb2.AckResponse,
               lambda ops, results: ack_response(cast(AckOp, ops[0]).queue, cast(list[AckResult], results[0])))
RENEW = Response(queue_pb2.RenewLeaseResponse, lambda ops, results: renew_response(cast(list[RenewResult], results[0])))
COMMIT = Response(queue_pb2.CommitResponse, lambda ops, results: queue_pb2.CommitResponse(
    results=[mutation_result(op, result) for op, result in zip(ops, results)]))


def ack_response(queue: QueueDef, results: list[AckResult]) -> queue_pb2.AckResponse:
    # Built in place (add, then fill): no intermediate messages to copy in.
    write_key = codec.key_writer(queue.key_columns)
    out = queue_pb2.AckResponse()
    add = out.results.add
    for r in results:
        write_key(add(acked=r.acked).key, r.key)
    return out


def renew_response(results: list[RenewResult]) -> queue_pb2.RenewLeaseResponse:
    leases = []
    for r in results:
        lease = queue_pb2.RenewedLease(old_lease_token=r.old_lease_token, new_lease_token=r.new_lease_token or "")
        if r.lease_expiration_time is not None:
            lease.lease_expiration_time.CopyFrom(codec.timestamp(r.lease_expiration_time))
        leases.append(lease)
    return queue_pb2.RenewLeaseResponse(leases=leases)


def mutation_result(op: Mutation, result: Result) -> queue_pb2.MutationResult:
    if isinstance(op, SendOp):
        return queue_pb2.MutationResult(send=send_response(op.queue, result))  # type: ignore[arg-type]
    if isinstance(op, AckOp):
        return queue_pb2.MutationResult(ack=ack_response(op.queue, result))  # type: ignore[arg-type]
    return queue_pb2.MutationResult(renew_lease=renew_response(result))  # type: ignore[arg-type]


def receive_response(queue: QueueDef, batch: list[LeasedMessage]) -> queue_pb2.ReceiveResponse:
    # Each message is added, then filled in place, with converters chosen once per
    # queue: building nested messages and copying them in cost three times as much.
    # A batch's leases end together: their Timestamp is worked out once.
    write_key = codec.key_writer(queue.key_columns)
    write_payload = codec.payload_writer(queue.payload_type)
    parts = codec.timestamp_parts
    out = queue_pb2.ReceiveResponse()
    add = out.messages.add
    end = None
    end_parts = (0, 0)
    for m in batch:
        r = add(lease_token=m.lease_token, delivery_attempt=m.delivery_attempt,
                last_batch_message=m.last_batch_message, priority=m.priority, headers=m.headers,
                ordering_key=m.ordering_key)
        write_key(r.key, m.key)
        write_payload(r.payload, m.payload)
        stamp = r.deliver_time
        stamp.seconds, stamp.nanos = parts(m.deliver_time)
        if m.lease_expiration_time != end:
            end = m.lease_expiration_time
            end_parts = parts(end)
        stamp = r.lease_expiration_time
        stamp.seconds, stamp.nanos = end_parts
        stamp = r.enqueue_time
        stamp.seconds, stamp.nanos = parts(m.enqueue_time)
        if m.dead_letter is not None:
            write_dead_letter(r.dead_letter, m.dead_letter)
    return out


RESPONSE_FIELD_OVERHEAD = 6
"""Bytes a message costs in its response beyond its own: the field tag and a length of up to 5 bytes."""


def receive_responses(queue: QueueDef, batch: list[LeasedMessage], max_bytes: int
                      ) -> Encoded[queue_pb2.ReceiveResponse]:
    """A leased batch as Receive responses of at most ``max_bytes`` each, and the messages
    no client can receive (a value that SQL stored and no encoding carries, or larger
    than a response). The common case is one response, checked by one ByteSize."""
    bad: list[tuple[LeasedMessage, str]] = []
    if queue.payload_type is ColumnType.JSON and not all(json_fits(m.payload) for m in batch):
        good = []
        for m in batch:
            try:
                check_json(m.payload, "its JSON payload")
                good.append(m)
            except errors.InvalidArgument as exc:
                bad.append((m, exc.message))
        if good:
            good[-1] = good[-1]._replace(last_batch_message=True)
        batch = good
    if not batch:
        return Encoded([], bad)
    try:
        out = receive_response(queue, batch)
    except Exception:  # a value one of them cannot hold: find which, one by one
        out = None
    if out is not None and out.ByteSize() <= max_bytes:
        return Encoded([(out, batch)], bad)
    return _split(queue, batch, max_bytes, bad)


def _split(queue: QueueDef, batch: list[LeasedMessage], max_bytes: int,
           bad: list[tuple[LeasedMessage, str]]) -> Encoded[queue_pb2.ReceiveResponse]:
    """The slow path of receive_responses: each message encoded and measured alone."""
    sized: list[tuple[LeasedMessage, queue_pb2.ReceivedMessage, int]] = []
    for m in batch:
        try:
            one = receive_response(queue, [m]).messages[0]
            size = one.ByteSize() + RESPONSE_FIELD_OVERHEAD
        except Exception as exc:
            bad.append((m, f"cannot be encoded: {exc}"))
            continue
        if size > max_bytes:
            bad.append((m, f"takes {size} bytes, more than a Receive response may ({max_bytes})"))
            continue
        sized.append((m, one, size))
    responses: list[tuple[queue_pb2.ReceiveResponse, list[LeasedMessage]]] = []
    total = max_bytes + 1  # start a response at the first message
    for m, one, size in sized:
        if total + size > max_bytes:
            responses.append((queue_pb2.ReceiveResponse(), []))
            total = 0
        response, carried = responses[-1]
        response.messages.append(one)
        carried.append(m)
        total += size
    if responses:  # the batch's last message, whichever responses it took
        for response, _ in responses:
            for r in response.messages:
                r.last_batch_message = False
        responses[-1][0].messages[-1].last_batch_message = True
    return Encoded(responses, bad)


def queue_from_proto(q: queue_pb2.Queue) -> QueueDef:
    for c in q.key_columns:
        if c.generated_as:
            raise errors.InvalidArgument(
                f"key column {c.name!r}: generated_as is output only; spanq.v1 creates no generated key columns "
                "(create the queue through the Spanner front-end: CREATE QUEUE ... k INT64 AS (expr) STORED)")
    key_columns = tuple(
        KeyColumn(c.name, codec.column_type(c.type, f"key column {c.name!r}")) for c in q.key_columns
    )
    generated = not key_columns
    return QueueDef(
        name=q.name,
        key_columns=key_columns or queues.default_key_columns(),
        payload_type=codec.column_type(q.payload_type or queue_pb2.BYTES, "payload_type"),
        key_generated=generated,
        parent_table=q.parent_table or None,
        lease_duration=setting(q.lease_duration, "lease_duration", queues.DEFAULT_LEASE, queues.MAX_LEASE),
        initial_backoff=setting(q.initial_backoff, "initial_backoff", queues.DEFAULT_INITIAL_BACKOFF,
                                 queues.MAX_BACKOFF, explicit_zero=q.HasField("initial_backoff")),
        max_backoff=setting(q.max_backoff, "max_backoff", queues.DEFAULT_MAX_BACKOFF, queues.MAX_BACKOFF),
        max_delivery_attempts=q.max_delivery_attempts or None,
        dead_letter_queue=q.dead_letter_queue or None,
        disable_send=q.disable_send,
        disable_delivery=q.disable_delivery,
        message_retention_duration=retention(q, "message_retention_duration"),
        archive_duration=retention(q, "archive_duration"),
        enable_message_ordering=q.enable_message_ordering,
        **limits(q, LIMITS),
    )


