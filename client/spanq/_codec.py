"""Python values <-> spanq.v1 wire values.

Keys travel as a ListValue with one value per key column (INT64 as a decimal
string, BYTES as base64, TIMESTAMP as RFC 3339) and payloads as a Value (a
string for STRING, base64 for BYTES, any JSON for JSON queues). Decoding
needs the queue's column types: INT64 comes back as a decimal string.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2
from spanq_proto.v1 import queue_pb2

from ._errors import InvalidArgument
from ._types import DeadLetter, Key, KeyColumn, KeyValue, Queue, TypeCode

MAX_SAFE_JSON_INT = 2**53
"""JSON numbers travel as doubles: integers beyond this would silently lose precision."""

TO_WIRE_TYPE: dict[TypeCode, queue_pb2.TypeCode] = {
    TypeCode.BOOL: queue_pb2.BOOL,
    TypeCode.INT64: queue_pb2.INT64,
    TypeCode.STRING: queue_pb2.STRING,
    TypeCode.BYTES: queue_pb2.BYTES,
    TypeCode.TIMESTAMP: queue_pb2.TIMESTAMP,
    TypeCode.JSON: queue_pb2.JSON,
}
FROM_WIRE_TYPE = {v: k for k, v in TO_WIRE_TYPE.items()}


# -- queues -----------------------------------------------------------------


def queue_to_proto(queue: Queue) -> queue_pb2.Queue:
    out = queue_pb2.Queue(
        name=queue.name,
        key_columns=[queue_pb2.KeyColumn(name=c.name, type=TO_WIRE_TYPE[c.type], generated_as=c.generated_as or "")
                     for c in queue.key_columns],
        payload_type=TO_WIRE_TYPE[queue.payload_type],
        parent_table=queue.parent_table or "",
        max_delivery_attempts=queue.max_delivery_attempts or 0,
        dead_letter_queue=queue.dead_letter_queue or "",
        disable_send=queue.disable_send,
        disable_delivery=queue.disable_delivery,
        max_in_flight_per_key=queue.max_in_flight_per_key or 0,
        concurrency_key=queue.concurrency_key or "",
        rate_limit=queue.rate_limit or 0.0,
        rate_limit_burst=queue.rate_limit_burst or 0,
        enable_message_ordering=queue.enable_message_ordering,
    )
    for field in ("lease_duration", "initial_backoff", "max_backoff", "message_retention_duration",
                  "archive_duration"):
        value = getattr(queue, field)
        if value is not None:
            getattr(out, field).CopyFrom(duration(value))
    return out


def queue_from_proto(q: queue_pb2.Queue) -> Queue:
    return Queue(
        name=q.name,
        key_columns=tuple(KeyColumn(c.name, FROM_WIRE_TYPE[c.type], c.generated_as or None) for c in q.key_columns),
        payload_type=FROM_WIRE_TYPE.get(q.payload_type, TypeCode.BYTES),
        parent_table=q.parent_table or None,
        lease_duration=q.lease_duration.ToTimedelta() if q.HasField("lease_duration") else None,
        initial_backoff=q.initial_backoff.ToTimedelta() if q.HasField("initial_backoff") else None,
        max_backoff=q.max_backoff.ToTimedelta() if q.HasField("max_backoff") else None,
        max_delivery_attempts=q.max_delivery_attempts or None,
        dead_letter_queue=q.dead_letter_queue or None,
        create_time=timestamp_to_datetime(q.create_time) if q.HasField("create_time") else None,
        disable_send=q.disable_send,
        disable_delivery=q.disable_delivery,
        message_retention_duration=(q.message_retention_duration.ToTimedelta()
                                    if q.HasField("message_retention_duration") else None),
        archive_duration=q.archive_duration.ToTimedelta() if q.HasField("archive_duration") else None,
        max_in_flight_per_key=q.max_in_flight_per_key or None,
        concurrency_key=q.concurrency_key or None,
        rate_limit=q.rate_limit or None,
        rate_limit_burst=q.rate_limit_burst or None,
        enable_message_ordering=q.enable_message_ordering,
    )


# -- keys -------------------------------------------------------------------


def as_key(value: Key | KeyValue | list[Any]) -> Key:
    """A key tuple; a lone scalar is a one-column key."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, list):
        return tuple(value)
    return (value,)


def key_to_proto(queue: Queue, key: Key, *, sent: bool = False) -> struct_pb2.ListValue:
    """A key on the wire; ``sent``: a send's, which leaves out the generated key columns (the
    database computes them)."""
    columns = tuple(c for c in queue.key_columns if not (sent and c.generated_as))
    if len(key) != len(columns):
        computed = " (its generated key columns are computed, not sent)" if len(columns) != len(queue.key_columns) \
            else ""
        raise InvalidArgument(
            f"queue {queue.name!r} has {len(columns)} key column(s) {[c.name for c in columns]}{computed}, "
            f"but the key {key!r} has {len(key)} value(s)"
        )
    out = struct_pb2.ListValue()
    for column, value in zip(columns, key):
        out.values.append(_key_value_to_proto(queue.name, column, value))
    return out


def _key_value_to_proto(queue: str, column: KeyColumn, value: Any) -> struct_pb2.Value:
    t = column.type
    if t is TypeCode.BOOL and isinstance(value, bool):
        return struct_pb2.Value(bool_value=value)
    if t is TypeCode.INT64 and isinstance(value, int) and not isinstance(value, bool):
        return struct_pb2.Value(string_value=str(value))
    if t is TypeCode.STRING and isinstance(value, str):
        return struct_pb2.Value(string_value=value)
    if t is TypeCode.BYTES and isinstance(value, (bytes, bytearray, memoryview)):
        return struct_pb2.Value(string_value=base64.b64encode(bytes(value)).decode())
    if t is TypeCode.TIMESTAMP and isinstance(value, datetime):
        return struct_pb2.Value(string_value=timestamp(value).ToJsonString())
    expected = {TypeCode.BOOL: "bool", TypeCode.INT64: "int", TypeCode.STRING: "str", TypeCode.BYTES: "bytes",
                TypeCode.TIMESTAMP: "a timezone-aware datetime"}.get(t, t.value)
    raise InvalidArgument(
        f"queue {queue!r}: key column {column.name!r} is {t.value}, so its value must be {expected}, "
        f"not {type(value).__name__} {value!r}"
    )


def key_from_proto(queue: Queue, key: struct_pb2.ListValue) -> Key:
    # A list, not a generator: this runs once per received message.
    return tuple([_key_value_from_proto(c, v) for c, v in zip(queue.key_columns, key.values)])


def _key_value_from_proto(column: KeyColumn, value: struct_pb2.Value) -> KeyValue:
    t = column.type
    if t is TypeCode.STRING:
        return value.string_value
    if t is TypeCode.INT64:
        return int(value.string_value) if value.WhichOneof("kind") == "string_value" else int(value.number_value)
    if t is TypeCode.BOOL:
        return value.bool_value
    if t is TypeCode.BYTES:
        return base64.b64decode(value.string_value)
    if t is TypeCode.TIMESTAMP:
        stamp = timestamp_pb2.Timestamp()
        stamp.FromJsonString(value.string_value)
        return timestamp_to_datetime(stamp)
    return value.string_value


# -- payloads ---------------------------------------------------------------


def write_payload(queue: Queue, payload: Any, out: struct_pb2.Value) -> None:
    """Sets ``out`` (a message's payload field) in place: a publisher encodes every message it batches."""
    t = queue.payload_type
    if t is TypeCode.JSON:
        out.CopyFrom(json_to_value(payload, queue.name))
    elif t is TypeCode.STRING:
        if not isinstance(payload, str):
            raise InvalidArgument(f"queue {queue.name!r} has STRING payloads: send str, not {type(payload).__name__}")
        out.string_value = payload
    elif isinstance(payload, (bytes, bytearray, memoryview)):
        out.string_value = base64.b64encode(bytes(payload)).decode()
    else:
        raise InvalidArgument(
            f"queue {queue.name!r} has BYTES payloads: send bytes, not {type(payload).__name__} "
            "(encode text first, or create the queue with payload_type=STRING or JSON)"
        )


def payload_from_proto(queue: Queue, value: struct_pb2.Value) -> Any:
    t = queue.payload_type
    if t is TypeCode.JSON:
        return json_from_value(value)
    if t is TypeCode.STRING:
        return value.string_value
    try:
        return base64.b64decode(value.string_value, validate=True)
    except (binascii.Error, ValueError):
        return value.string_value.encode()


def json_to_value(data: Any, queue: str = "") -> struct_pb2.Value:
    value = struct_pb2.Value()
    if data is None:
        value.null_value = struct_pb2.NULL_VALUE
    elif isinstance(data, bool):
        value.bool_value = data
    elif isinstance(data, int):
        if abs(data) > MAX_SAFE_JSON_INT:
            raise InvalidArgument(
                f"queue {queue!r}: JSON integer {data} is beyond 2**53 and would lose precision; send it as a string"
            )
        value.number_value = float(data)
    elif isinstance(data, float):
        if not math.isfinite(data):
            raise InvalidArgument(f"queue {queue!r}: JSON has no {data!r}")
        value.number_value = data
    elif isinstance(data, str):
        value.string_value = data
    elif isinstance(data, (list, tuple)):
        value.list_value.values.extend(json_to_value(v, queue) for v in data)
    elif isinstance(data, Mapping):
        for k, v in data.items():
            if not isinstance(k, str):
                raise InvalidArgument(f"queue {queue!r}: JSON object keys must be str, not {type(k).__name__}")
            value.struct_value.fields[k].CopyFrom(json_to_value(v, queue))
    else:
        raise InvalidArgument(f"queue {queue!r}: a {type(data).__name__} is not JSON data")
    return value


def json_from_value(value: struct_pb2.Value) -> Any:
    """Plain JSON data; integral numbers come back as int."""
    kind = value.WhichOneof("kind")
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() and abs(number) <= MAX_SAFE_JSON_INT else number
    if kind == "string_value":
        return value.string_value
    if kind == "list_value":
        return [json_from_value(v) for v in value.list_value.values]
    if kind == "struct_value":
        return {k: json_from_value(v) for k, v in value.struct_value.fields.items()}
    return None


# -- times ------------------------------------------------------------------


def timestamp(when: datetime) -> timestamp_pb2.Timestamp:
    if when.tzinfo is None:
        raise InvalidArgument(f"{when!r} is naive: give a timezone-aware datetime (e.g. tzinfo=timezone.utc)")
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(when)
    return stamp


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def timestamp_to_datetime(stamp: timestamp_pb2.Timestamp) -> datetime:
    # What Timestamp.ToDatetime(tzinfo=timezone.utc) returns (nanos are never negative), at a third of
    # its cost: every received message carries three timestamps.
    return _EPOCH + timedelta(seconds=stamp.seconds, microseconds=stamp.nanos // 1000)


def duration(value: timedelta | float) -> duration_pb2.Duration:
    if not isinstance(value, timedelta):
        value = timedelta(seconds=value)
    d = duration_pb2.Duration()
    d.FromTimedelta(value)
    return d


def as_timedelta(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=value)


def dead_letter(d: queue_pb2.DeadLetter) -> DeadLetter:
    return DeadLetter(d.source_queue, d.delivery_attempts, timestamp_to_datetime(d.dead_letter_time), d.last_failure)
