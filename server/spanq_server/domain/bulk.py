"""What the operator's batched work shares (Redrive in operator.py, Replay in replay.py):
the checks of its pace, and the plain JSON form of a key that the cursors this server
keeps for itself are written in (Peek's page tokens, a replay's progress in the ledger)."""

import base64
import math
from datetime import datetime
from typing import Any

from ..ground import errors
from ..ground.model import ColumnType, Key, QueueDef

DEFAULT_BATCH = 100
MAX_BATCH = 1000
MAX_RATE = 1_000_000
"""The highest rate (messages a second) a redrive or replay may ask for, far above what one reaches; 0: no limit."""


def batch_limit(batch_size: int, rate: float) -> int:
    """Messages per batch (per transaction) for a ``batch_size`` (0: the default) and a
    ``rate`` (0: no limit), both checked."""
    if not 0 <= batch_size <= MAX_BATCH:
        raise errors.InvalidArgument(f"batch_size must be between 0 and {MAX_BATCH}, got {batch_size}")
    if not (math.isfinite(rate) and 0 <= rate <= MAX_RATE):
        raise errors.InvalidArgument(f"rate must be 0 (no limit) or a positive number of messages a second "
                                     f"up to {MAX_RATE:,}, got {rate}")
    size = batch_size or DEFAULT_BATCH
    return max(1, min(size, int(rate))) if rate else size  # one batch is at most a second's worth


def key_to_plain_json(queue: QueueDef, key: Key) -> list[Any]:
    # Plain JSON, read back by key_from_plain_json with the queue's key types: a cursor is
    # this server's own, never a client's data, so it needs no wire format.
    return [_plain(c.type, v) for c, v in zip(queue.key_columns, key)]


def _plain(column_type: ColumnType, value: Any) -> Any:
    if column_type is ColumnType.BYTES:
        return base64.b64encode(bytes(value)).decode()
    if column_type is ColumnType.TIMESTAMP:
        return value.isoformat()
    return value


def key_from_plain_json(queue: QueueDef, values: Any) -> Key:
    """The key key_to_plain_json wrote; ValueError if it is not one of this queue's."""
    if not isinstance(values, list) or len(values) != len(queue.key_columns):
        raise ValueError("not this queue's key")
    key: list[Any] = []
    for column, v in zip(queue.key_columns, values):
        kind = column.type
        if kind is ColumnType.INT64 and type(v) is int and -(2**63) <= v < 2**63:
            key.append(v)
        elif kind is ColumnType.BOOL and type(v) is bool:
            key.append(v)
        elif kind is ColumnType.STRING and type(v) is str and "\0" not in v:
            v.encode()  # a lone surrogate is no text PostgreSQL holds: UnicodeEncodeError, a ValueError
            key.append(v)
        elif kind is ColumnType.BYTES and type(v) is str:
            key.append(base64.b64decode(v, validate=True))
        elif kind is ColumnType.TIMESTAMP and type(v) is str:
            key.append(aware(datetime.fromisoformat(v)))
        else:
            raise ValueError("not this queue's key")
    return tuple(key)


def aware(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError("a timestamp without its time zone")
    return when
