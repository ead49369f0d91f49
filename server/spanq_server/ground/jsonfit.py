"""The one rule for JSON data every client can receive: how deep it nests and how large
its numbers are (protobuf's Value carries numbers as doubles). Plain Python: the domain
checks every write with it, the front-ends every read."""

import math
import sys
from typing import Any

from .errors import InvalidArgument

MAX_JSON_NESTING = 30
"""Arrays and objects nested at most this deep in a JSON payload. Protobuf decoders
stop at 100 nested messages, and each JSON object costs three (Value, Struct, its map
entry): past ~32 a ReceiveResponse carrying the payload fails to decode in every
default client, and the server's own encoder stops near 50."""


def check_json(data: Any, what: str) -> None:
    """Raises InvalidArgument unless every spanq.v1 client can receive ``data`` as a
    google.protobuf.Value: nested at most MAX_JSON_NESTING deep, every number a finite
    double. The one check of every write path (Mutator.prepare) and of the receive path."""
    if not json_fits(data):
        raise InvalidArgument(_json_misfit(data, what))


def json_fits(data: Any) -> bool:
    """check_json without the error: whether every client can receive ``data``."""
    return _json_fits(data, 0)


_MAX_DOUBLE = sys.float_info.max


def _json_fits(item: Any, depth: int) -> bool:
    # The hot path (every JSON payload sent and received): type() tests, a loop, no
    # allocation. Recursion is bounded: it stops at MAX_JSON_NESTING.
    kind = type(item)
    if kind is dict or kind is list:
        if depth >= MAX_JSON_NESTING:
            return False
        for v in item.values() if kind is dict else item:
            if not _json_fits(v, depth + 1):
                return False
        return True
    if kind is float:
        return math.isfinite(item)
    if kind is int:
        return -_MAX_DOUBLE <= item <= _MAX_DOUBLE
    return True


def _json_misfit(data: Any, what: str) -> str:
    """What _json_fits refused, said for the client (iterative: the data may nest deeper
    than Python's recursion limit)."""
    stack = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth >= MAX_JSON_NESTING:
                return (f"{what}: JSON nested more than {MAX_JSON_NESTING} levels deep, which protobuf clients "
                        "cannot decode; flatten it, or send it in a STRING or BYTES queue")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
        elif not _json_fits(item, 0):
            shown = repr(item) if isinstance(item, float) else f"{str(item)[:20]}... ({len(str(abs(item)))} digits)"
            return f"{what}: JSON number {shown} is outside a double's range; send it as a string"
    raise AssertionError("_json_fits refused data that fits")
