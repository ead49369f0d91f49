"""Spanner's value encoding, both ways: google.protobuf.Value <-> domain values.

Spanner sends every value as a google.protobuf.Value typed by a separate
``Type``: INT64 as a decimal string, BYTES as base64, TIMESTAMP as RFC 3339
(UTC, "Z"), JSON as its text in a string, BOOL as a bool, NULL as null_value.
"""

import base64
import json
import math
from datetime import datetime, timezone
from typing import Any

from google.cloud.spanner_v1.types import type as spanner_type
from google.protobuf import struct_pb2

from .. import codec
from ..errors import InvalidArgument
from ..model import ColumnType
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


def type_pb(column_type: ColumnType) -> Any:
    return TypePb(code=int(TYPE_CODE_OF[column_type]))


def row_type(columns: list[tuple[str, ColumnType]]) -> Any:
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
