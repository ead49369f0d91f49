"""spanq.v1's messages of what the operator shows: a queue, its stats, a page of peeked
messages. service.py answers with them, and the dashboard renders the same messages as
JSON, so that a page shows what its RPC returns."""

from datetime import timedelta

from spanq_proto.v1 import queue_pb2

from ..domain.operator import QueueStats
from ..ground.model import DeadLetterHistory, PeekedMessage, QueueDef
from . import codec


def stats_response(stats: QueueStats) -> queue_pb2.QueueStats:
    c = stats.counts
    out = queue_pb2.QueueStats(
        name=stats.queue.name, ready=c.ready, scheduled=c.scheduled, leased=c.leased, dead_lettered=c.dead_lettered,
        send_rate=stats.send_rate, ack_rate=stats.ack_rate, dead_letter_queue=stats.queue.dead_letter_queue or "",
        disable_send=stats.queue.disable_send, disable_delivery=stats.queue.disable_delivery,
        held=c.held,
        rate_limited=c.rate_limited, rate_limit_tokens=c.rate_limit_tokens, key_limited=c.key_limited,
        keys_at_limit=c.keys_at_limit,
    )
    out.oldest_ready_age.FromTimedelta(timedelta(seconds=c.oldest_ready_age))
    codec.set_timestamp(out.read_time, c.read_time)
    return out


def peeked_state(m: PeekedMessage) -> "queue_pb2.PeekedMessage.State":
    if m.ack_time is not None:
        return queue_pb2.PeekedMessage.ACKED
    if m.leased:
        return queue_pb2.PeekedMessage.LEASED
    if m.held:
        return queue_pb2.PeekedMessage.HELD
    return queue_pb2.PeekedMessage.READY if m.ready else queue_pb2.PeekedMessage.SCHEDULED


def peek_response(queue: QueueDef, found: list[PeekedMessage], token: str) -> queue_pb2.PeekResponse:
    write_key = codec.key_writer(queue.key_columns)
    write_payload = codec.payload_writer(queue.payload_type)
    out = queue_pb2.PeekResponse(next_page_token=token)
    for m in found:
        r = out.messages.add(delivery_attempt=m.delivery_attempt, state=peeked_state(m), priority=m.priority,
                             headers=m.headers, ordering_key=m.ordering_key or "")
        write_key(r.key, m.key)
        write_payload(r.payload, m.payload)
        codec.set_timestamp(r.deliver_time, m.deliver_time)
        codec.set_timestamp(r.enqueue_time, m.enqueue_time)
        if m.leased and m.lease_expiration_time is not None:
            codec.set_timestamp(r.lease_expiration_time, m.lease_expiration_time)
        if m.dead_letter is not None:
            write_dead_letter(r.dead_letter, m.dead_letter)
        if m.ack_time is not None:
            codec.set_timestamp(r.ack_time, m.ack_time)
            r.ack_request_id = m.ack_request_id or ""
    return out


def write_dead_letter(out: queue_pb2.DeadLetter, h: DeadLetterHistory) -> None:
    out.source_queue = h.source_queue
    out.delivery_attempts = h.delivery_attempts
    out.last_failure = h.last_failure
    codec.set_timestamp(out.dead_letter_time, h.dead_letter_time)


def queue_to_proto(q: QueueDef) -> queue_pb2.Queue:
    out = queue_pb2.Queue(
        name=q.name,
        key_columns=[queue_pb2.KeyColumn(name=c.name, type=codec.TYPE_CODE_OF[c.type],
                                         generated_as=c.generated_as or "") for c in q.key_columns],
        payload_type=codec.TYPE_CODE_OF[q.payload_type],
        parent_table=q.parent_table or "",
        lease_duration=codec.duration(q.lease_duration),
        initial_backoff=codec.duration(q.initial_backoff),
        max_backoff=codec.duration(q.max_backoff),
        max_delivery_attempts=q.max_delivery_attempts or 0,
        dead_letter_queue=q.dead_letter_queue or "",
        disable_send=q.disable_send,
        disable_delivery=q.disable_delivery,
        enable_message_ordering=q.enable_message_ordering,
        max_in_flight_per_key=q.max_in_flight_per_key or 0,
        concurrency_key=q.concurrency_key or "",
        rate_limit=q.rate_limit or 0.0,
        rate_limit_burst=q.rate_limit_burst or 0,
    )
    if q.message_retention_duration is not None:
        out.message_retention_duration.CopyFrom(codec.duration(q.message_retention_duration))
    if q.archive_duration is not None:
        out.archive_duration.CopyFrom(codec.duration(q.archive_duration))
    if q.create_time is not None:
        out.create_time.CopyFrom(codec.timestamp(q.create_time))
    return out
