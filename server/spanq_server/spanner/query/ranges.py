"""Spanner's value ranges, where PostgreSQL holds more: DATE, TIMESTAMP, NUMERIC and JSON
values are checked here before they are stored (literals, parameters, mutations), so that no
row holds what no Spanner client could read. Plain Python, no protobuf: the statement
translator (postgres.py) calls it too.
"""

import itertools
import json
import re
from datetime import date, datetime, timedelta, timezone, tzinfo
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ...ground.errors import InvalidArgument

MAX_JSON_DEPTH = 80
"""Spanner's JSON nests at most 80 levels (deeper text is refused, as there)."""
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deep JSON text nests, outside its strings, with no Python loop per character:
    about 20 ms for a 400 kB array of 100,000 arrays (json.loads takes 9); text with at
    most MAX_JSON_DEPTH brackets, most of it, is not scanned at all."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(map(_NESTING.__getitem__, brackets)), default=0)


def json_text(text: str, what: str) -> Any:
    """JSON given as its text (how Spanner's clients send it), nested at most MAX_JSON_DEPTH
    levels: checked before the parser recurses (10,000 levels were a RecursionError)."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and (depth := json_depth(text)) > MAX_JSON_DEPTH:
        raise InvalidArgument(f"{what}: JSON nests {depth} levels deep; Spanner's JSON nests at most "
                              f"{MAX_JSON_DEPTH}")
    try:
        return json.loads(text)
    except ValueError:
        raise InvalidArgument(f"{what} must be JSON text, got {text[:40]!r}") from None



# -- Spanner's ranges ----------------------------------------------------------------

NUMERIC_INTEGER_DIGITS, NUMERIC_SCALE = 29, 9
"""Spanner's NUMERIC: precision 38, scale 9 (-99999999999999999999999999999.999999999 to
99999999999999999999999999999.999999999)."""
RANGES = {"DATE": "0001-01-01 to 9999-12-31",
          "TIMESTAMP": "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z",
          "NUMERIC": f"at most {NUMERIC_INTEGER_DIGITS} digits before the point and {NUMERIC_SCALE} after it, finite",
          "JSON": f"nested at most {MAX_JSON_DEPTH} levels"}
"""Spanner's range of each type that PostgreSQL holds more of, as errors state it."""


def numeric(number: Decimal, what: str) -> Decimal:
    """A NUMERIC in Spanner's range (never rounded: 1.0000000001 is refused, not cut to 1)."""
    if not number.is_finite():
        raise InvalidArgument(f"{what}: NUMERIC {number} is outside Spanner's range ({RANGES['NUMERIC']})")
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    count = len(digits)
    if exponent < -NUMERIC_SCALE:  # 1.5000000000 is 1.5
        significant = len(bytes(digits).rstrip(b"\0"))
        exponent, count = exponent + count - significant, significant
    if not number.is_zero() and (-exponent > NUMERIC_SCALE or count + exponent > NUMERIC_INTEGER_DIGITS):
        shown = str(number)
        raise InvalidArgument(f"{what}: NUMERIC {shown if len(shown) <= 60 else shown[:57] + '...'} is outside "
                              f"Spanner's range ({RANGES['NUMERIC']})")
    return number


_DATE = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*")
_TIMESTAMP = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[Tt ](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
                        r"\s*(?P<zone>.*?)\s*")
_OFFSET = re.compile(r"([+-])(\d{1,2})(?::?(\d{2}))?")


def literal(value: Any, code: str, what: str) -> Any:
    """A literal's value as bound for a value of type ``code`` (a typed literal's text, or a
    literal coerced to a column's type), checked against Spanner's range: PostgreSQL would
    take 'infinity', 'epoch', BC dates and year 10000 and store what no client reads."""
    if code == "NUMERIC" and not isinstance(value, bool) and isinstance(value, (int, float, str, Decimal)):
        try:
            number = Decimal(repr(value) if isinstance(value, float) else value)
        except InvalidOperation:
            raise InvalidArgument(f"{what}: {str(value)[:40]!r} is not a NUMERIC") from None
        return numeric(number, what)
    if not isinstance(value, str):
        return value
    if code == "DATE":
        return _date_literal(value, what)
    if code == "TIMESTAMP":
        return _timestamp_literal(value, what)
    if code == "JSON":
        json_text(value, what)
    return value


def _date_literal(text: str, what: str) -> date:
    match = _DATE.fullmatch(text)
    try:
        if match is None:
            raise ValueError
        return date(*map(int, match.groups()))
    except ValueError:
        raise InvalidArgument(f"{what}: invalid DATE {text[:40]!r}: give YYYY-[M]M-[D]D within Spanner's range "
                              f"({RANGES['DATE']})") from None


def _timestamp_literal(text: str, what: str) -> datetime:
    def invalid(why: str) -> InvalidArgument:
        return InvalidArgument(f"{what}: invalid TIMESTAMP {text[:60]!r} ({why}): give YYYY-[M]M-[D]D[( |T)HH:MM:SS"
                               f"[.F]][Z|+HH:MM| zone name] within Spanner's range ({RANGES['TIMESTAMP']})")

    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise invalid("not a timestamp")
    year, month, day, hour, minute, second, fraction = match.groups()[:7]
    fraction = (fraction or "").rstrip("0")
    if len(fraction) > 6:  # never cut: two keys would become one
        raise invalid("spanq keeps TIMESTAMP to the microsecond")
    zone = _zone(match["zone"])
    if zone is None:
        raise invalid(f"unknown time zone {match['zone'][:40]!r}")
    try:
        local = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                         int(fraction.ljust(6, "0")), tzinfo=zone)
        return local.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        raise invalid("out of range") from None


def _zone(text: str) -> tzinfo | None:
    """A literal's time zone: none (UTC, as spanq reads TIMESTAMP literals), Z, UTC, +HH[:MM], or a name."""
    if text in ("", "Z", "z", "UTC"):
        return timezone.utc
    offset = _OFFSET.fullmatch(text)
    if offset is not None:
        hours, minutes = int(offset[2]), int(offset[3] or 0)
        if hours > 14 or minutes > 59:
            return None
        return timezone((-1 if offset[1] == "-" else 1) * timedelta(hours=hours, minutes=minutes))
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None
