"""The operator's peek page tokens: plain JSON (no protobuf in the domain), read back with
the queue's key types; a token this server did not write is INVALID_ARGUMENT."""

import base64
import json
from datetime import datetime, timedelta, timezone

import pytest

from spanq_server.domain.operator import _decode_peek_token, _encode_peek_token
from spanq_server.ground.errors import InvalidArgument
from spanq_server.ground.model import ColumnType, KeyColumn, PeekedMessage, QueueDef

WHEN = datetime(2026, 12, 1, 23, 59, 58, 123456, tzinfo=timezone.utc)
QUEUE = QueueDef("tasks", tuple(KeyColumn(f"k{i}", t) for i, t in enumerate(
    (ColumnType.INT64, ColumnType.STRING, ColumnType.BYTES, ColumnType.TIMESTAMP, ColumnType.BOOL))),
    ColumnType.BYTES, timedelta(seconds=10), timedelta(seconds=1), timedelta(hours=1))


def token(deliver_time: str, key: list) -> str:
    return base64.urlsafe_b64encode(json.dumps({"t": deliver_time, "k": key}).encode()).decode()


def test_a_token_gives_back_the_last_message_of_its_page():
    key = (2**63 - 1, "naïve 🦆", b"\x00\xff", WHEN, True)
    last = PeekedMessage(key, b"", WHEN, False, None, 0, WHEN, True)
    assert _decode_peek_token(QUEUE, _encode_peek_token(QUEUE, last)) == (WHEN, key)
    assert _decode_peek_token(QUEUE, "") is None


@pytest.mark.parametrize("forged", [
    "zz", token(WHEN.isoformat(), [1, "a", "AA==", WHEN.isoformat()]),  # a column short
    token(WHEN.isoformat(), [True, "a", "AA==", WHEN.isoformat(), True]),  # a bool for an INT64
    token(WHEN.isoformat(), [2**63, "a", "AA==", WHEN.isoformat(), True]),  # past INT64
    token(WHEN.isoformat(), [1, "a\u0000", "AA==", WHEN.isoformat(), True]),  # NUL in text
    token(WHEN.isoformat(), [1, "\ud800", "AA==", WHEN.isoformat(), True]),  # a lone surrogate
    token(WHEN.isoformat(), [1, "a", "not base64!", WHEN.isoformat(), True]),
    token(WHEN.isoformat(), [1, "a", "AA==", "2026-12-01T23:59:58", True]),  # no time zone
    token("2026-12-01T23:59:58", [1, "a", "AA==", WHEN.isoformat(), True]),
    token(WHEN.isoformat(), [1, "a", "AA==", WHEN.isoformat(), 1]),  # a number for a BOOL
])
def test_a_token_this_server_did_not_write_is_invalid_argument(forged):
    with pytest.raises(InvalidArgument, match="page_token is not one this server returned"):
        _decode_peek_token(QUEUE, forged)
