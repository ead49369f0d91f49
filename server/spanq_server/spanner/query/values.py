"""Spanner's value encoding, both ways, the one codec of this front-end:
google.protobuf.Value typed by a separate ``Type`` <-> the Python value the domain
and psycopg hold.

Spanner sends every value as a google.protobuf.Value typed by a separate
``Type``: INT64 as a decimal string, BYTES as base64, TIMESTAMP as RFC 3339
(UTC, "Z"), JSON as its text in a string, BOOL as a bool, NULL as null_value.

A queue's columns are typed by the domain's ``ColumnType`` (``decode``, ``encode``,
``type_pb``); a table's by a Spanner type (``decode_typed``, ``encode_typed``,
``typed_pb``), for every type a table may have:

INT64 and NUMERIC travel as decimal strings, FLOAT64 as a number (NaN and the
infinities as the strings "NaN", "Infinity", "-Infinity"), BYTES as base64,
DATE as YYYY-MM-DD, TIMESTAMP as RFC 3339 in UTC, JSON as its text, ARRAY as a
list of its elements, NULL as null_value.

Every value written is in Spanner's range of its type, whichever way it came
(a literal, a parameter, a mutation): DATE 0001-01-01 to 9999-12-31, TIMESTAMP
0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z, NUMERIC at most 29 digits
before the point and 9 after it, finite, JSON nested at most 80 levels.
PostgreSQL holds more (``infinity``, BC dates, year 10000, NaN, any NUMERIC)
and Python reads less: a value out of range would make every read of its table
fail. One that is stored anyway (by psql) reads as FAILED_PRECONDITION naming
its column and value (``OutOfRange``), never INTERNAL.
"""

import base64
import dataclasses
import json
import math
from collections.abc import Sequence
from datetime import date, datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from google.cloud.spanner_v1.types import type as spanner_type
from google.protobuf import struct_pb2
from psycopg.types.json import Jsonb

from ...edge import codec
from ...ground.errors import FailedPrecondition, InvalidArgument
from ...ground.model import ColumnType, OutOfRange
from .ast import SpannerType
from .ranges import MAX_JSON_DEPTH, RANGES, json_depth, json_text, literal, numeric  # noqa: F401 (its callers' names)

TypePb = spanner_type.Type.pb()
StructTypePb = spanner_type.StructType.pb()
TypeCode = spanner_type.TypeCode

TYPE_CODE_OF = {
    ColumnType.BOOL: TypeCode.BOOL,
    ColumnType.INT64: TypeCode.INT64,
    ColumnType.STRING: TypeCode.STRING,
    ColumnType.BYTES: TypeCode.BYTES,
    ColumnType.TIMESTAMP: TypeCode.TIMESTAMP,
    ColumnType.JSON: TypeCode.JSON,
}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Proto:
    """A queue column's type in results when its DDL declared a proto message type: PROTO with
    the message's full name. Its values travel as BYTES do (base64), and are BYTES to the domain."""

    name: str


Shown = ColumnType | Proto
"""A result column's type: the domain's, or a proto message's."""


def type_pb(column_type: Shown) -> Any:
    if isinstance(column_type, Proto):
        return TypePb(code=int(TypeCode.PROTO), proto_type_fqn=column_type.name)
    return TypePb(code=int(TYPE_CODE_OF[column_type]))


def row_type(columns: Sequence[tuple[str, Shown]]) -> Any:
    """A StructType naming the result's columns, for ResultSetMetadata.row_type."""
    out = StructTypePb()
    for name, column_type in columns:
        field = out.fields.add()
        field.name = name
        field.type_.CopyFrom(type_pb(column_type))  # proto-plus names the field type_
    return out


# -- Value -> domain -------------------------------------------------------


def decode(value: struct_pb2.Value, column_type: ColumnType, what: str) -> Any:
    """A value in Spanner's encoding as the domain value of column_type; INVALID_ARGUMENT otherwise."""
    kind = value.WhichOneof("kind")
    if kind == "null_value" or kind is None:
        raise InvalidArgument(f"{what} cannot be NULL")
    if column_type is ColumnType.BOOL:
        if kind == "bool_value":
            return value.bool_value
    elif column_type is ColumnType.INT64:
        if kind == "string_value":
            return int64(value.string_value, what)
        if kind == "number_value":
            number = value.number_value
            if math.isfinite(number) and number == int(number) and abs(number) <= 2**53:
                return int(number)
    elif column_type is ColumnType.STRING:
        if kind == "string_value":
            return codec.text_value(value.string_value, what)
    elif column_type is ColumnType.BYTES:
        if kind == "string_value":
            return codec.bytes_from_base64(value.string_value, what)
    elif column_type is ColumnType.TIMESTAMP:
        if kind == "string_value":
            return timestamp(value.string_value, what)
    elif column_type is ColumnType.JSON:
        if kind == "string_value":
            return json_text(value.string_value, what)
        return codec.json_from_value(value, what)
    raise InvalidArgument(f"{what} ({column_type.value}) cannot be given as a {kind.replace('_value', '')}; "
                          f"{HINTS[column_type]}")


HINTS = {
    ColumnType.BOOL: "give true or false",
    ColumnType.INT64: "give INT64 as a decimal string",
    ColumnType.STRING: "give a string",
    ColumnType.BYTES: "give BYTES as a base64 string",
    ColumnType.TIMESTAMP: "give TIMESTAMP as an RFC 3339 string like 2026-01-02T03:04:05Z",
    ColumnType.JSON: "give JSON as its text in a string",
}


def int64(text: str, what: str) -> int:
    stripped = text.strip()
    if not stripped.isascii() or not stripped.removeprefix("-").isdecimal():
        raise InvalidArgument(f"{what} must be a decimal INT64, got {text[:40]!r}")
    number = int(stripped)
    if not INT64_MIN <= number <= INT64_MAX:
        raise InvalidArgument(f"{what} is out of the INT64 range: {stripped}")
    return number


def timestamp(text: str, what: str) -> datetime:
    return codec.timestamp_from_rfc3339(text.strip(), what)


def string_list(value: struct_pb2.Value, what: str) -> list[str]:
    """An ARRAY<STRING> (or ARRAY<BYTES> holding text) value."""
    if value.WhichOneof("kind") != "list_value":
        raise InvalidArgument(f"{what} must be an array of strings")
    out = []
    for item in value.list_value.values:
        if item.WhichOneof("kind") != "string_value":
            raise InvalidArgument(f"{what} must be an array of strings")
        out.append(item.string_value)
    return out


# -- domain -> Value -------------------------------------------------------


def encode(data: Any, column_type: ColumnType) -> struct_pb2.Value:
    if data is None:
        return struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
    if column_type is ColumnType.BOOL:
        return struct_pb2.Value(bool_value=bool(data))
    if column_type is ColumnType.INT64:
        return struct_pb2.Value(string_value=str(int(data)))
    if column_type is ColumnType.BYTES:
        return struct_pb2.Value(string_value=base64.b64encode(bytes(data)).decode())
    if column_type is ColumnType.TIMESTAMP:
        return struct_pb2.Value(string_value=rfc3339(data))
    if column_type is ColumnType.JSON:
        return struct_pb2.Value(string_value=json.dumps(data, separators=(",", ":"), sort_keys=True))
    return struct_pb2.Value(string_value=str(data))


def rfc3339(when: datetime) -> str:
    """UTC, with as many fractional digits as needed (Spanner's own format)."""
    when = when.astimezone(timezone.utc) if when.tzinfo else when.replace(tzinfo=timezone.utc)
    text = f"{when.year:04d}-{when:%m-%dT%H:%M:%S}"  # %Y gives "1", not "0001", for year 1
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "Z"


# -- a table's columns, typed by a Spanner type --------------------------------------

COMMIT_TIMESTAMP = "spanner.commit_timestamp()"
"""What a client sends for a TIMESTAMP column with allow_commit_timestamp to get the commit's time."""
NULL = struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def typed_pb(t: SpannerType) -> Any:
    out = TypePb(code=int(getattr(TypeCode, t.code)))
    if t.element is not None:
        out.array_element_type.CopyFrom(typed_pb(t.element))
    if t.proto is not None:
        out.proto_type_fqn = t.proto
    return out


def of_type_pb(pb: Any) -> SpannerType | None:
    """A request parameter's declared type; None when undeclared (TYPE_CODE_UNSPECIFIED)."""
    name = TypeCode(pb.code).name
    if name == "ARRAY":
        element = of_type_pb(pb.array_element_type)
        return SpannerType("ARRAY", element) if element is not None else None
    if name in ("BOOL", "INT64", "FLOAT64", "NUMERIC", "STRING", "BYTES", "DATE", "TIMESTAMP", "JSON"):
        return SpannerType(name)
    if name in ("PROTO", "ENUM"):
        return SpannerType(name, proto=pb.proto_type_fqn)
    if name == "TYPE_CODE_UNSPECIFIED":
        return None
    raise InvalidArgument(f"parameters of type {name} are not supported")


def decode_typed(value: struct_pb2.Value, t: SpannerType, what: str) -> Any:
    """A Value as the Python value of a column of type t (None for NULL)."""
    kind = value.WhichOneof("kind")
    if kind in (None, "null_value"):
        return None
    code = t.code
    if code == "ARRAY":
        if kind != "list_value":
            raise InvalidArgument(f"{what} ({t.ddl()}) must be given as a list")
        assert t.element is not None
        return [decode_typed(v, t.element, f"{what}[{i}]") for i, v in enumerate(value.list_value.values)]
    if code == "BOOL" and kind == "bool_value":
        return value.bool_value
    if code in ("INT64", "ENUM"):  # an enum travels as its number
        if kind == "string_value":
            return int64(value.string_value, what)
        if kind == "number_value" and value.number_value == int(value.number_value):
            return int(value.number_value)
    if code == "FLOAT64":
        if kind == "number_value":
            return value.number_value
        if kind == "string_value" and value.string_value in FLOAT_WORDS:
            return FLOAT_WORDS[value.string_value]
    if code == "NUMERIC" and kind in ("string_value", "number_value"):
        try:
            number = Decimal(value.string_value if kind == "string_value" else repr(value.number_value))
        except InvalidOperation:
            raise InvalidArgument(f"{what} must be a NUMERIC as a decimal string") from None
        return numeric(number, what)
    if code == "STRING" and kind == "string_value":
        return codec.text_value(value.string_value, what)
    if code in ("BYTES", "PROTO") and kind == "string_value":  # a message travels as its bytes
        return codec.bytes_from_base64(value.string_value, what)
    if code == "DATE" and kind == "string_value":
        try:
            return date.fromisoformat(value.string_value)
        except ValueError:
            raise InvalidArgument(f"{what} must be a DATE like 2026-01-31 within Spanner's range "
                                  f"({RANGES['DATE']}), got {value.string_value[:40]!r}") from None
    if code == "TIMESTAMP" and kind == "string_value":
        if value.string_value == COMMIT_TIMESTAMP:
            return datetime.now(timezone.utc)
        try:
            return timestamp(value.string_value, what)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{exc} (Spanner's range: {RANGES['TIMESTAMP']})") from None
    if code == "JSON":
        if kind == "string_value":
            return Jsonb(json_text(value.string_value, what))
        return Jsonb(codec.json_from_value(value, what))
    raise InvalidArgument(f"{what} ({t.ddl()}) cannot be given as a {kind.replace('_value', '')}")


def encode_typed(data: Any, t: SpannerType, what: str = "a value") -> struct_pb2.Value:
    """A stored value in Spanner's encoding; FAILED_PRECONDITION naming ``what`` (its column)
    for one outside Spanner's range of t (stored by psql, or before spanq checked)."""
    if data is None:
        return NULL
    if isinstance(data, OutOfRange):
        raise out_of_range(data.text, what, t)
    code = t.code
    if code == "ARRAY":
        assert t.element is not None
        if not isinstance(data, list) or (t.element.code != "ARRAY" and any(isinstance(v, list) for v in data)):
            raise out_of_range(f"a {_dimensions(data)}-dimensional array", what, t)
        out = struct_pb2.Value()
        out.list_value.values.extend(encode_typed(v, t.element, what) for v in data)
        return out
    if code == "BOOL":
        return struct_pb2.Value(bool_value=bool(data))
    if code in ("INT64", "ENUM"):
        return struct_pb2.Value(string_value=str(int(data)))
    if code == "FLOAT64":
        number = float(data)
        if math.isnan(number):
            return struct_pb2.Value(string_value="NaN")
        if math.isinf(number):
            return struct_pb2.Value(string_value="Infinity" if number > 0 else "-Infinity")
        return struct_pb2.Value(number_value=number)
    if code == "NUMERIC":
        return struct_pb2.Value(string_value=format(Decimal(data), "f"))
    if code in ("BYTES", "PROTO"):
        return struct_pb2.Value(string_value=base64.b64encode(bytes(data)).decode())
    if code == "DATE":
        return struct_pb2.Value(string_value=data.isoformat())
    if code == "TIMESTAMP":
        return struct_pb2.Value(string_value=rfc3339(data))
    if code == "JSON":
        return struct_pb2.Value(string_value=json.dumps(data, separators=(",", ":"), sort_keys=True))
    return struct_pb2.Value(string_value=str(data))


def out_of_range(text: str, what: str, t: SpannerType) -> FailedPrecondition:
    """A value read that is outside Spanner's range of t (``text`` shows it)."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    within = f" ({RANGES[t.code]})" if t.code in RANGES else ""
    return FailedPrecondition(f"{what} ({t.ddl()}) holds {shown}, outside Spanner's range{within}: stored by psql "
                              "(or before spanq checked values); update or delete that row by hand")


def _dimensions(data: Any) -> int:
    return 1 + _dimensions(data[0]) if isinstance(data, list) and data else 0
