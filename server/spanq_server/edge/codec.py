"""spanq.v1 wire values <-> domain values.

Keys travel as a google.protobuf.ListValue (one value per key column) and
payloads as a google.protobuf.Value, as in Spanner's Mutation.Send, so that
JSON clients can type them: INT64 as a number or a decimal string (returned
as a string), BYTES as base64, TIMESTAMP as RFC 3339.
"""

import base64
import binascii
import functools
import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2

from spanq_proto.v1 import queue_pb2

from ..ground.errors import InvalidArgument
from ..ground.model import AckItem, ColumnType, Key, KeyColumn, QueueDef

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_SAFE_DOUBLE_INT = 2**53

TYPE_CODES: dict[int, ColumnType] = {
    queue_pb2.BOOL: ColumnType.BOOL,
    queue_pb2.INT64: ColumnType.INT64,
    queue_pb2.STRING: ColumnType.STRING,
    queue_pb2.BYTES: ColumnType.BYTES,
    queue_pb2.TIMESTAMP: ColumnType.TIMESTAMP,
    queue_pb2.JSON: ColumnType.JSON,
}
TYPE_CODE_OF: dict[ColumnType, Any] = {v: k for k, v in TYPE_CODES.items()}


def column_type(code: int, what: str) -> ColumnType:
    try:
        return TYPE_CODES[code]
    except KeyError:
        names = ", ".join(queue_pb2.TypeCode.Name(c) for c in TYPE_CODES)
        raise InvalidArgument(f"{what}: type {code} is not one of {names}") from None


# -- keys -----------------------------------------------------------------


def key_from_proto(queue: QueueDef, key: struct_pb2.ListValue, where: str, *, sent: bool = False) -> Key:
    """A message's key; ``sent``: a send's, which gives no value for a generated key column
    (PostgreSQL computes it), so it has the values of queue.sent_key_columns."""
    values = key.values
    columns = queue.sent_key_columns if sent else queue.key_columns
    if sent and len(columns) != len(queue.key_columns) and len(values) == len(queue.key_columns):
        generated = [c.name for c in queue.key_columns if c.generated_as is not None]
        raise InvalidArgument(
            f"{where}: key column(s) {generated} of queue {queue.name!r} are generated (AS (...) STORED): the "
            f"database computes them, so a send cannot give them; give the other key column(s) "
            f"{[c.name for c in columns]} only", column=generated[0])
    if len(values) != len(columns):
        names = [c.name for c in columns]
        computed = sent and columns != queue.key_columns
        generated_note = " (its generated key columns are computed, not sent)" if computed else ""
        raise InvalidArgument(
            f"{where}: queue {queue.name!r} has {len(names)} key column(s) {names}{generated_note}, "
            f"but the key has {len(values)} value(s)"
        )
    return tuple(_key_value(column, value, where) for column, value in zip(columns, values))


def _key_value(column: KeyColumn, value: struct_pb2.Value, where: str) -> Any:
    kind = value.WhichOneof("kind")
    what = f"{where}: key column {column.name!r} ({column.type.value})"
    if column.type is ColumnType.INT64:
        if kind == "number_value":
            number = value.number_value
            if not math.isfinite(number) or number != int(number) or abs(number) > MAX_SAFE_DOUBLE_INT:
                raise InvalidArgument(f"{what} needs an integer; give large ones as decimal strings, got {number!r}")
            return int(number)
        if kind == "string_value":
            text = value.string_value.strip()
            if not text.removeprefix("-").isdecimal() or not text.isascii():
                raise InvalidArgument(f"{what} needs a decimal integer string, got {value.string_value!r}")
            number = int(text)
            if not INT64_MIN <= number <= INT64_MAX:
                raise InvalidArgument(f"{what} is out of the INT64 range: {text}")
            return number
    elif column.type is ColumnType.STRING:
        if kind == "string_value":
            return text_value(value.string_value, what)
    elif column.type is ColumnType.BYTES:
        if kind == "string_value":
            return bytes_from_base64(value.string_value, what)
    elif column.type is ColumnType.TIMESTAMP:
        if kind == "string_value":
            return timestamp_from_rfc3339(value.string_value, what)
    elif column.type is ColumnType.BOOL:
        if kind == "bool_value":
            return value.bool_value
    raise InvalidArgument(f"{what} cannot be a {_kind_name(kind)}")


def key_from_json(queue: QueueDef, key: Any) -> Key:
    """A key in its JSON form (a list, as Peek shows it): the dashboard's, read by the operator."""
    if not isinstance(key, list):
        raise InvalidArgument(f"`key` must be a list of the key's values (as Peek shows it), got {key!r:.100}")
    try:
        values = struct_pb2.ListValue()
        values.extend(key)  # ParseDict takes objects only; extend checks each value's type
        return key_from_proto(queue, values, "key")
    except (ValueError, TypeError, RecursionError):
        raise InvalidArgument(f"`key` must be a list of the key's values, got {key!r:.100}") from None


def key_to_proto(queue: QueueDef, key: Key) -> struct_pb2.ListValue:
    out = struct_pb2.ListValue()
    key_writer(queue.key_columns)(out, key)
    return out


KeyWriter = Callable[[struct_pb2.ListValue, Key], None]
KeyReader = Callable[[struct_pb2.ListValue], "Key | None"]


def _key_text(column_type: ColumnType) -> Callable[[Any], Any]:
    """How one key column's values become their Value field (string_value but for BOOL)."""
    if column_type is ColumnType.INT64:
        return str
    if column_type is ColumnType.BYTES:
        return lambda v: base64.b64encode(bytes(v)).decode()
    if column_type is ColumnType.TIMESTAMP:
        return timestamp_to_rfc3339
    if column_type is ColumnType.BOOL:
        return bool
    return _same


def _same(v: Any) -> Any:
    return v


@functools.lru_cache(maxsize=256)
def key_writer(columns: tuple[KeyColumn, ...]) -> KeyWriter:
    """Fills a ListValue with a key, its conversions chosen once per queue rather than
    per value: building keys was a tenth of the server's CPU while draining a queue."""
    fields = ["bool_value" if c.type is ColumnType.BOOL else "string_value" for c in columns]
    convert = [_key_text(c.type) for c in columns]
    if len(columns) == 1 and convert[0] is _same:
        def write_text(out: struct_pb2.ListValue, key: Key) -> None:
            out.values.add(string_value=key[0])

        return write_text

    def write(out: struct_pb2.ListValue, key: Key) -> None:
        add = out.values.add
        for field, conv, v in zip(fields, convert, key):
            add(**{field: conv(v)})

    return write


@functools.lru_cache(maxsize=256)
def key_reader(columns: tuple[KeyColumn, ...]) -> KeyReader:
    """A fast key decoder for well-formed keys: None when the key needs a closer
    look, and then key_from_proto says what is wrong with it."""
    if len(columns) == 1 and columns[0].type is ColumnType.STRING:
        def read_text(key: struct_pb2.ListValue) -> Key | None:
            values = key.values
            if len(values) != 1:
                return None
            v = values[0]
            if v.WhichOneof("kind") != "string_value":
                return None
            text = v.string_value
            return None if "\x00" in text else (text,)

        return read_text

    def read(key: struct_pb2.ListValue) -> Key | None:
        values = key.values
        if len(values) != len(columns):
            return None
        try:
            return tuple(_key_value(column, value, "") for column, value in zip(columns, values))
        except InvalidArgument:
            return None

    return read


def ack_items(columns: tuple[KeyColumn, ...], acks: Sequence[queue_pb2.AckMessage]) -> list[AckItem] | None:
    """An Ack's messages as AckItems in one inline loop, for the default key (one STRING
    column) when every key is well-formed; else None, and the caller reads them one by
    one with key_reader (and key_from_proto says which is wrong). Reading a hundred keys
    through key_reader and AckItem() was a tenth of an Ack's Python."""
    if not (len(columns) == 1 and columns[0].type is ColumnType.STRING):
        return None
    item = tuple.__new__  # AckItem's own __new__ is a Python function: the same tuple, made in C
    items: list[AckItem] = []
    append = items.append
    for a in acks:
        values = a.key.values
        if len(values) != 1:
            return None
        v = values[0]
        if v.WhichOneof("kind") != "string_value":
            return None
        text = v.string_value
        if "\x00" in text:
            return None
        append(item(AckItem, ((text,), a.lease_token or None)))
    return items


SHORT_KEY = 120
"""Key bytes below which each length in an AckResult fits one varint byte (n + 8 < 128)."""


def ack_results_bytes(columns: tuple[KeyColumn, ...], results: Sequence[tuple[Key, bool]]) -> bytes | None:
    """An AckResponse's bytes, byte for byte what its generated serializer writes, for
    keys of the default single STRING column shorter than SHORT_KEY bytes (every length
    a one-byte varint); None for any other key, to be built field by field. One bytes
    format per result instead of three nested messages: a third of the time."""
    if not (len(columns) == 1 and columns[0].type is ColumnType.STRING):
        return None
    parts: list[bytes] = []
    append = parts.append
    try:
        for key, acked in results:
            b = key[0].encode()
            n = len(b)
            if n >= SHORT_KEY:
                return None
            # results 1: AckResult { key 1: ListValue { values 1: Value { string_value 3 } }, acked 2 }
            append(b"\x0a%c\x0a%c\x0a%c\x1a%c%s\x10\x01" % (n + 8, n + 4, n + 2, n, b) if acked else
                   b"\x0a%c\x0a%c\x0a%c\x1a%c%s" % (n + 6, n + 4, n + 2, n, b))
    except UnicodeEncodeError:  # a lone surrogate: let the generated code refuse it
        return None
    return b"".join(parts)


# -- payloads -------------------------------------------------------------


def payload_from_proto(queue: QueueDef, value: struct_pb2.Value, has_payload: bool, where: str) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value" and queue.payload_type is ColumnType.STRING and has_payload:
        text = value.string_value
        if "\x00" not in text:  # the common case, without building the error text below
            return text
    if not has_payload or kind is None:
        raise InvalidArgument(f"{where}: payload is required")
    what = f"{where}: payload of {queue.payload_type.value} queue {queue.name!r}"
    if queue.payload_type is ColumnType.JSON:
        return json_from_value(value, what)
    if kind != "string_value":
        expected = "a string" if queue.payload_type is ColumnType.STRING else "a base64 string"
        raise InvalidArgument(f"{what} must be {expected}, not a {_kind_name(kind)}")
    if queue.payload_type is ColumnType.STRING:
        return text_value(value.string_value, what)
    return bytes_from_base64(value.string_value, what)


def payload_writer(payload_type: ColumnType) -> Callable[[struct_pb2.Value, Any], None]:
    """Sets a Value in place to a payload (no intermediate Value to copy in)."""
    if payload_type is ColumnType.JSON:
        return lambda out, payload: out.CopyFrom(value_from_json(payload))
    if payload_type is ColumnType.BYTES:
        return _write_bytes
    return _write_text


def _write_bytes(out: struct_pb2.Value, payload: Any) -> None:
    out.string_value = base64.b64encode(bytes(payload)).decode()


def _write_text(out: struct_pb2.Value, payload: Any) -> None:
    out.string_value = payload


def json_from_value(value: struct_pb2.Value, what: str) -> Any:
    """A protobuf Value as plain JSON data; integral numbers stay integers."""
    kind = value.WhichOneof("kind")
    if kind == "null_value":
        return None
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            raise InvalidArgument(f"{what}: JSON has no {number!r}")
        return int(number) if number.is_integer() and abs(number) <= MAX_SAFE_DOUBLE_INT else number
    if kind == "string_value":
        return text_value(value.string_value, what)
    if kind == "list_value":
        return [json_from_value(v, what) for v in value.list_value.values]
    if kind == "struct_value":
        return {text_value(k, what): json_from_value(v, what) for k, v in value.struct_value.fields.items()}
    raise InvalidArgument(f"{what}: an empty value is not JSON")


def value_from_json(data: Any) -> struct_pb2.Value:
    value = struct_pb2.Value()
    if data is None:
        value.null_value = struct_pb2.NULL_VALUE
    elif isinstance(data, bool):
        value.bool_value = data
    elif isinstance(data, (int, float)):
        value.number_value = float(data)
    elif isinstance(data, str):
        value.string_value = data
    elif isinstance(data, list):
        value.list_value.values.extend(value_from_json(v) for v in data)
    elif isinstance(data, dict):
        value.struct_value.SetInParent()  # an empty object is still an object, not an unset Value
        for k, v in data.items():
            value.struct_value.fields[k].CopyFrom(value_from_json(v))
    else:
        raise TypeError(f"not JSON data: {type(data)}")
    return value


# -- scalars --------------------------------------------------------------


def text_value(text: str, what: str) -> str:
    if "\x00" in text:
        raise InvalidArgument(f"{what}: text cannot contain NUL characters (PostgreSQL text cannot hold them)")
    return text


def bytes_from_base64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(f"{what} must be standard base64, got {text[:40]!r}") from None


def timestamp_from_rfc3339(text: str, what: str) -> datetime:
    stamp = timestamp_pb2.Timestamp()
    try:
        stamp.FromJsonString(text)
    except ValueError:
        raise InvalidArgument(f"{what} must be an RFC 3339 timestamp like 2026-01-02T03:04:05Z, got {text!r}") from None
    if stamp.nanos % 1000:  # never cut silently: two keys would become one
        raise InvalidArgument(f"{what} {text!r} has nanoseconds; spanq keeps TIMESTAMP to the microsecond "
                              "(PostgreSQL's precision): give at most 6 fractional digits")
    return timestamp_to_datetime(stamp)


def timestamp_to_rfc3339(when: datetime) -> str:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(when)
    return stamp.ToJsonString()


def timestamp_to_datetime(stamp: timestamp_pb2.Timestamp, what: str = "timestamp") -> datetime:
    try:
        return stamp.ToDatetime(tzinfo=timezone.utc)
    except (ValueError, OverflowError):
        raise InvalidArgument(
            f"{what} is not a valid Timestamp (years 1 to 9999), got seconds={stamp.seconds} nanos={stamp.nanos}"
        ) from None


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def timestamp(when: datetime) -> timestamp_pb2.Timestamp:
    # Timestamp.FromDatetime (calendar.timegm) was a sixth of the server's CPU while
    # draining a queue: three timestamps per received message. Naive means UTC, as there.
    delta = (when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)) - _EPOCH
    return timestamp_pb2.Timestamp(seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1000)


def set_timestamp(out: timestamp_pb2.Timestamp, when: datetime) -> None:
    """``timestamp`` in place: no Timestamp to build and then copy into its parent."""
    out.seconds, out.nanos = timestamp_parts(when)


def timestamp_parts(when: datetime) -> tuple[int, int]:
    """A Timestamp's seconds and nanos for a datetime (naive means UTC)."""
    delta = (when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)) - _EPOCH
    return delta.days * 86_400 + delta.seconds, delta.microseconds * 1000


def duration_from_proto(
    d: duration_pb2.Duration, what: str, *, default: timedelta | None, minimum: timedelta, maximum: timedelta,
    zero_allowed: bool = False,
) -> timedelta | None:
    """A Duration within [minimum, maximum]; 0 (unset) gives the default, or 0 when zero_allowed."""
    if not -999_999_999 <= d.nanos <= 999_999_999 or (d.seconds > 0 > d.nanos) or (d.seconds < 0 < d.nanos):
        raise InvalidArgument(f"{what} is not a valid Duration, got seconds={d.seconds} nanos={d.nanos}")
    if d.seconds < 0 or d.nanos < 0:
        raise InvalidArgument(f"{what} cannot be negative, got {_shown(d)}")
    if d.seconds > maximum.total_seconds() + 1:
        raise InvalidArgument(f"{what} must be at most {_human(maximum)}, got {_shown(d)}")
    value = d.ToTimedelta()
    if value == timedelta(0):
        return timedelta(0) if zero_allowed else default
    if not minimum <= value <= maximum:
        raise InvalidArgument(
            f"{what} must be between {_human(minimum)} and {_human(maximum)}, got {_shown(d)}"
        )
    return value


def duration(value: timedelta) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromTimedelta(value)
    return d


def _shown(d: duration_pb2.Duration) -> str:
    """A Duration as JSON ("1.5s"), or its raw fields when it is outside the Duration range."""
    try:
        return d.ToJsonString()
    except ValueError:
        return f"seconds={d.seconds} nanos={d.nanos}"


def _human(value: timedelta) -> str:
    seconds = value.total_seconds()
    if seconds and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


def _kind_name(kind: str | None) -> str:
    return {None: "missing value", "null_value": "null", "number_value": "number", "string_value": "string",
            "bool_value": "bool", "struct_value": "JSON object", "list_value": "list"}[kind]
