"""Spanner's value ranges alone (spanner/query/values.py): the literal formats GoogleSQL writes, the
edges of each range, and what lies past them."""

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from spanq_server.ground.errors import InvalidArgument
from spanq_server.spanner.query import values

UTC = timezone.utc


@pytest.mark.parametrize("text,expected", [
    ("0001-01-01", date(1, 1, 1)), ("9999-12-31", date(9999, 12, 31)), ("2026-7-1", date(2026, 7, 1)),
    (" 2026-01-31 ", date(2026, 1, 31)),
])
def test_dates_within_the_range(text: str, expected: date) -> None:
    assert values.literal(text, "DATE", "a literal") == expected


@pytest.mark.parametrize("text", ["10000-01-01", "0000-12-31", "infinity", "-infinity", "0044-03-15 BC", "today",
                                  "epoch", "2026-02-30", "20260131", "Jan 31 2026", ""])
def test_dates_past_the_range_or_not_googlesql(text: str) -> None:
    with pytest.raises(InvalidArgument, match="0001-01-01 to 9999-12-31"):
        values.literal(text, "DATE", "a literal")


@pytest.mark.parametrize("text,expected", [
    ("0001-01-01T00:00:00Z", datetime(1, 1, 1, tzinfo=UTC)),
    ("9999-12-31 23:59:59.999999+00", datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    ("2026-01-02", datetime(2026, 1, 2, tzinfo=UTC)),  # no zone: UTC
    ("2026-01-02 03:04", datetime(2026, 1, 2, 3, 4, tzinfo=UTC)),
    ("2026-01-02T03:04:05.5-05:30", datetime(2026, 1, 2, 8, 34, 5, 500000, tzinfo=UTC)),
    ("2026-07-01 00:00:00 America/Los_Angeles", datetime(2026, 7, 1, 7, tzinfo=UTC)),
    ("2026-01-02 03:04:05 UTC", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("2026-01-02 03:04:05.123456000Z", datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
])
def test_timestamps_within_the_range(text: str, expected: datetime) -> None:
    assert values.literal(text, "TIMESTAMP", "a literal") == expected


@pytest.mark.parametrize("text,why", [
    ("infinity", "not a timestamp"), ("epoch", "not a timestamp"), ("10000-01-01T00:00:00Z", "not a timestamp"),
    ("0001-01-01 00:00:00+01", "out of range"), ("9999-12-31 23:00:00-01", "out of range"),
    ("2026-01-02 03:04:05 Mars/Olympus", "unknown time zone"), ("2026-01-02 03:04:05 ../../etc/passwd", "unknown"),
    ("2026-01-02 03:04:05+15", "unknown time zone"), ("2026-01-02 03:04:05.1234567Z", "microsecond"),
    ("2026-13-01", "out of range"),
])
def test_timestamps_past_the_range_or_not_googlesql(text: str, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        values.literal(text, "TIMESTAMP", "a literal")


@pytest.mark.parametrize("value", ["0", "0E+100", "0E-100", "1.500000000000", "99999999999999999999999999999.999999999",
                                   "-99999999999999999999999999999.999999999", "-0.000000001", "1E+28", 7, 2.5])
def test_numerics_within_the_range(value: object) -> None:
    assert values.literal(value, "NUMERIC", "a literal") == Decimal(repr(value) if isinstance(value, float)
                                                                     else str(value))


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1E+29", "-1e29", "0.0000000001", "1.0000000001",
                                   "123456789012345678901234567890", 1e40, 10**29])
def test_numerics_past_the_range_are_refused_never_rounded(value: object) -> None:
    with pytest.raises(InvalidArgument, match="at most 29 digits before the point and 9 after it"):
        values.literal(value, "NUMERIC", "a literal")


def test_json_literals_nest_at_most_80_levels_and_other_types_pass_as_they_are() -> None:
    ok = "[" * 80 + "]" * 80
    assert values.literal(ok, "JSON", "a literal") == ok
    with pytest.raises(InvalidArgument, match="nests 81 levels"):
        values.literal("[" * 81 + "]" * 81, "JSON", "a literal")
    for value, code in [("x", "STRING"), (b"x", "BYTES"), (5, "INT64"), (1.5, "FLOAT64"), (None, "DATE")]:
        assert values.literal(value, code, "a literal") == value
    assert values.literal(datetime(2026, 1, 1, tzinfo=UTC) + timedelta(0), "TIMESTAMP", "x") == datetime(
        2026, 1, 1, tzinfo=UTC)
