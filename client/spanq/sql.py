"""Send and ack inside the application's own psycopg transaction.

A queue is a table in the application's database (``public.<queue>``), so
sending is an INSERT and acking a DELETE that commit, or roll back, with the
application's other writes: the transactional outbox, and exactly-once
processing when the business writes and the ack commit together::

    with conn.transaction():
        conn.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (amount, account))
        spanq.sql.ack(conn, "payments", message)          # 0 rows: MessageGone, nothing commits
        spanq.sql.send(conn, "receipts", None, {"account": account})

Every function takes a ``psycopg.Connection`` (and returns the result) or a
``psycopg.AsyncConnection`` (and returns a coroutine to await). An ack that
deletes no row is Spanner's failed ``ASSERT_ROWS_MODIFIED 1``: it raises
MessageGone (or LeaseLost) AND aborts the PostgreSQL transaction, so that the
caller's transaction cannot commit even if the error is caught (use a nested
``conn.transaction()`` savepoint to carry on without the ack). Identifiers are
always composed with ``psycopg.sql.Identifier``; values are bound parameters.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Coroutine, Generator, Mapping
from datetime import datetime, timedelta
from typing import Any, Union, overload

try:
    import psycopg
except ModuleNotFoundError as exc:  # the SDK alone does not bring psycopg
    raise ModuleNotFoundError(
        "spanq.sql needs psycopg 3, the driver of your own transactions: pip install 'spanq[sql]' "
        "(or psycopg[binary])", name=exc.name
    ) from exc
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from . import _tracing
from ._requests import check_ordering_key
from ._errors import AlreadyExists, InvalidArgument, LeaseLost, MessageGone, NotFound, SpanqError
from ._types import Key, KeyValue, Message

__all__ = ["send", "ack"]

KeyArg = Union[Key, KeyValue, Mapping[str, Any], Message, None]
"""A key as a tuple in key-column order, a lone value (one-column key), a mapping of column name to value,
or a Message (its key)."""

_CATALOG = pgsql.SQL("SELECT key_columns, payload_type, key_generated FROM spanq.queues WHERE name = %s")

_ABORT = pgsql.SQL(
    "DO $spanq$ BEGIN RAISE EXCEPTION 'spanq: an ack deleted no row (ASSERT_ROWS_MODIFIED 1 failed); "
    "this transaction must not commit' USING ERRCODE = 'no_data_found'; END $spanq$"
)
"""Aborts the caller's transaction after a failed ack, as Spanner's ASSERT_ROWS_MODIFIED does: COMMIT then
rolls back. A constant: no user input is formatted into it."""


@dataclasses.dataclass(frozen=True)
class _Statement:
    query: pgsql.Composed | pgsql.SQL
    params: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class _Fail:
    """Abort the transaction (if one is open), then raise ``error``."""

    error: SpanqError


Steps = Generator[Union[_Statement, _Fail], list[tuple[Any, ...]], Any]


# -- the public functions ------------------------------------------------------


@overload
def send(conn: psycopg.Connection[Any], queue: str, key: KeyArg, payload: Any, *,
         deliver_time: datetime | None = None, delay: timedelta | None = None,
         headers: Mapping[str, str] | None = None, priority: int = 0, ordering_key: str | None = None) -> Key: ...
@overload
def send(conn: psycopg.AsyncConnection[Any], queue: str, key: KeyArg, payload: Any, *,
         deliver_time: datetime | None = None, delay: timedelta | None = None,
         headers: Mapping[str, str] | None = None, priority: int = 0,
         ordering_key: str | None = None) -> Coroutine[Any, Any, Key]: ...


def send(conn: Any, queue: str, key: KeyArg, payload: Any, *,
         deliver_time: datetime | None = None, delay: timedelta | None = None,
         headers: Mapping[str, str] | None = None, priority: int = 0, ordering_key: str | None = None) -> Any:
    """Inserts a message into ``queue`` on the caller's connection, in its current transaction; returns the
    key. It becomes deliverable when that transaction commits (and not before ``deliver_time``, or ``delay``
    after the transaction began). ``key`` None on a queue without key columns makes a UUID key. On a
    queue with a generated key column (``KeyColumn.generated_as``) the key gives the other columns, and
    the key returned is the whole one, as the database computed it.

    ``payload`` is bytes (BYTES queue), str (STRING) or JSON data (JSON). ``headers``, ``priority`` and
    ``ordering_key`` as for ``Client.send`` (the table's triggers and CHECK hold them to their limits:
    InvalidArgument); a message of an ordering key waits, until this transaction ends, for another open
    transaction that sent or acked a message of that key (so the key's order is commit order); with
    OpenTelemetry installed the insert is a PRODUCER span whose context goes into the headers. Raises
    AlreadyExists if the key is taken, NotFound if there is no such queue (either aborts the transaction,
    as any SQL error does).
    """
    if isinstance(conn, psycopg.AsyncConnection):
        return _send_async(conn, queue, key, payload, deliver_time, delay, headers, priority, ordering_key)
    with _tracing.producing(queue, "send") as trace_context:
        return _drive(conn, _send_steps(queue, key, payload, deliver_time, delay,
                                        _tracing.with_context(headers, trace_context), priority, ordering_key))


async def _send_async(conn: psycopg.AsyncConnection[Any], queue: str, key: KeyArg, payload: Any,
                      deliver_time: datetime | None, delay: timedelta | None, headers: Mapping[str, str] | None,
                      priority: int, ordering_key: str | None) -> Key:
    with _tracing.producing(queue, "send") as trace_context:
        sent: Key = await _drive_async(conn, _send_steps(queue, key, payload, deliver_time, delay,
                                                         _tracing.with_context(headers, trace_context), priority,
                                                         ordering_key),
                                       None)
        return sent


@overload
def ack(conn: psycopg.Connection[Any], queue: str, key: KeyArg, *, lease_token: str | None = None,
        ignore_not_found: bool = False) -> bool: ...
@overload
def ack(conn: psycopg.AsyncConnection[Any], queue: str, key: KeyArg, *, lease_token: str | None = None,
        ignore_not_found: bool = False) -> Coroutine[Any, Any, bool]: ...


def ack(conn: Any, queue: str, key: KeyArg, *, lease_token: str | None = None,
        ignore_not_found: bool = False) -> Any:
    """Deletes the message with this key from ``queue`` in the caller's transaction; returns True.

    0 rows deleted raises MessageGone (already acked or deleted) and aborts the caller's transaction so it
    cannot commit; with ``ignore_not_found`` it returns False instead. With ``lease_token``, only that
    lease's holder may ack: a message leased since to someone else raises LeaseLost (and aborts).

    A Message from a subscriber is acked by key (its lease token changes as the leaser renews it), and the
    subscriber is told: when the callback returns it just lets the message go. If the transaction rolls
    back instead, the message is redelivered once its lease ends.
    """
    message = key if isinstance(key, Message) else None
    return _drive(conn, _ack_steps(queue, key, lease_token, ignore_not_found), message)


# -- the statements, independent of sync or async ------------------------------------


def _send_steps(queue: str, key: KeyArg, payload: Any, deliver_time: datetime | None,
                delay: timedelta | None, headers: Mapping[str, str] | None, priority: int,
                ordering_key: str | None = None) -> Steps:
    ordering_key = check_ordering_key(ordering_key) if ordering_key else None
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise InvalidArgument(f"priority must be an int between 0 and 9, not {priority!r}")
    if headers is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise InvalidArgument("headers map str keys to str values")
    if deliver_time is not None and delay is not None:
        raise InvalidArgument("set at most one of deliver_time and delay")
    if deliver_time is not None and deliver_time.tzinfo is None:
        raise InvalidArgument("deliver_time must be timezone-aware (e.g. tzinfo=timezone.utc)")
    columns, payload_type, generated, computed = yield from _catalog(queue)
    # A generated key column (AS (expr) STORED) is computed by the database: the key gives the others.
    sent = [(n, t) for n, t in columns if n not in computed]
    if key is None:
        if not generated:
            raise InvalidArgument(f"queue {queue!r} needs a key ({', '.join(n for n, _ in sent)})")
        key = (str(uuid.uuid4()),)
    if computed and isinstance(key, Mapping) and any(n in key for n in computed):
        raise InvalidArgument(f"queue {queue!r}: key column(s) {computed} are generated (the database computes "
                              "them); give the others")
    names, values = _key_parts(queue, sent, key)
    if payload_type == "JSON":
        payload = Jsonb(payload)
    elif payload_type == "BYTES" and not isinstance(payload, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"queue {queue!r} has BYTES payloads: send bytes, not {type(payload).__name__}")
    elif payload_type == "STRING" and not isinstance(payload, str):
        raise InvalidArgument(f"queue {queue!r} has STRING payloads: send str, not {type(payload).__name__}")
    query = pgsql.SQL(
        "INSERT INTO {table} ({columns}, payload, deliver_time, spanq_headers, spanq_priority, spanq_ordering_key) "
        "VALUES ({values}, %s, greatest(coalesce(%s::timestamptz, now() + coalesce(%s::interval, interval '0')), "
        "now()), %s, %s, %s)"
    ).format(
        table=pgsql.Identifier("public", queue),
        columns=pgsql.SQL(", ").join(pgsql.Identifier(n) for n in names),
        values=pgsql.SQL(", ").join(pgsql.Placeholder() for _ in names),
    )
    if computed:  # the whole key, as the database computed it
        query = pgsql.SQL("{} RETURNING {}").format(query, pgsql.SQL(", ").join(pgsql.Identifier(n)
                                                                                for n, _ in columns))
    rows = yield _Statement(query, (*values, payload, deliver_time, delay, Jsonb(dict(headers)) if headers else None,
                                    priority, ordering_key))
    return tuple(rows[0]) if computed else tuple(values)


def _ack_steps(queue: str, key: KeyArg, lease_token: str | None, ignore_not_found: bool) -> Steps:
    if isinstance(key, Message):
        if key.queue != queue:
            raise InvalidArgument(f"the message is from queue {key.queue!r}, not {queue!r}")
        key = key.key
    if key is None:
        raise InvalidArgument("an ack needs the message's key")
    if isinstance(key, Mapping):
        names, values = list(key), list(key.values())
        if not names:
            raise InvalidArgument("an ack needs the message's key")
    else:
        columns, _, _, _ = yield from _catalog(queue)
        names, values = _key_parts(queue, columns, key)
    table = pgsql.Identifier("public", queue)
    match = pgsql.SQL("({}) = ({})").format(
        pgsql.SQL(", ").join(pgsql.Identifier(n) for n in names),
        pgsql.SQL(", ").join(pgsql.Placeholder() for _ in names),
    )
    token_check = pgsql.SQL(" AND spanq_lease_token = %s") if lease_token is not None else pgsql.SQL("")
    # The outer SELECT sees the snapshot from before the DELETE: `present` says whether the row existed.
    query = pgsql.SQL(
        "WITH acked AS (DELETE FROM {table} WHERE {match}{token_check} RETURNING 1) "
        "SELECT (SELECT count(*) FROM acked), (SELECT count(*) FROM {table} WHERE {match})"
    ).format(table=table, match=match, token_check=token_check)
    params = (*values, *((lease_token,) if lease_token is not None else ()), *values)
    [(acked, present)] = yield _Statement(query, params)
    if acked:
        return True
    shown = dict(zip(names, values))
    if lease_token is not None and present:
        yield _Fail(LeaseLost(
            f"cannot ack {shown!r} in queue {queue!r}: lease token {lease_token!r} is no longer current (the "
            "lease was renewed, released or granted to another receiver); the transaction was aborted"
        ))
    if ignore_not_found:
        return False
    yield _Fail(MessageGone(
        f"cannot ack {shown!r} in queue {queue!r}: the message is gone (already acknowledged or deleted), so "
        "the transaction was aborted and must not commit; roll back, or ack inside a nested "
        "conn.transaction() to carry on without it"
    ))
    raise AssertionError("unreachable")  # pragma: no cover


def _catalog(queue: str) -> Generator[_Statement, list[tuple[Any, ...]],
                                      tuple[list[tuple[str, str]], str, bool, list[str]]]:
    """(key columns, payload type, whether a send may omit the key, the generated key columns
    (AS (expr) STORED), which the database computes)."""
    rows = yield _Statement(_CATALOG, (queue,))
    if not rows:
        raise NotFound(f"queue {queue!r} does not exist in this database")
    key_columns, payload_type, generated = rows[0]
    return ([(c["name"], c["type"]) for c in key_columns], payload_type, generated,
            [c["name"] for c in key_columns if c.get("generated_as")])




_PY_TYPES: dict[str, tuple[type, ...]] = {
    "BOOL": (bool,), "INT64": (int,), "STRING": (str,), "BYTES": (bytes, bytearray, memoryview),
    "TIMESTAMP": (datetime,),
}


def _key_parts(queue: str, columns: list[tuple[str, str]], key: Any) -> tuple[list[str], list[Any]]:
    if isinstance(key, Mapping):
        missing = [n for n, _ in columns if n not in key]
        extra = [n for n in key if n not in {c for c, _ in columns}]
        if missing or extra:
            raise InvalidArgument(
                f"queue {queue!r} has key columns {[n for n, _ in columns]}; the key names {list(key)}"
            )
        values = [key[n] for n, _ in columns]
    else:
        values = list(key) if isinstance(key, (tuple, list)) else [key]
        if len(values) != len(columns):
            raise InvalidArgument(
                f"queue {queue!r} has {len(columns)} key column(s) {[n for n, _ in columns]}, "
                f"but the key {key!r} has {len(values)} value(s)"
            )
    for (name, kind), value in zip(columns, values):
        wanted = _PY_TYPES.get(kind, ())
        if not isinstance(value, wanted) or (kind == "INT64" and isinstance(value, bool)):
            raise InvalidArgument(f"queue {queue!r}: key column {name!r} is {kind}, not {type(value).__name__}")
        if isinstance(value, datetime) and value.tzinfo is None:
            raise InvalidArgument(f"queue {queue!r}: key column {name!r} needs a timezone-aware datetime")
    return [n for n, _ in columns], values


# -- drivers --------------------------------------------------------------------------


def _drive(conn: Any, steps: Steps, message: Message | None = None) -> Any:
    if isinstance(conn, psycopg.AsyncConnection):
        return _drive_async(conn, steps, message)
    if isinstance(conn, psycopg.Connection):
        return _drive_sync(conn, steps, message)
    raise TypeError(f"spanq.sql needs a psycopg Connection or AsyncConnection, not {type(conn).__name__}")


def _drive_sync(conn: psycopg.Connection[Any], steps: Steps, message: Message | None) -> Any:
    rows: list[tuple[Any, ...]] | None = None
    while True:
        try:
            step = steps.send(rows) if rows is not None else next(steps)
        except StopIteration as done:
            if message is not None and done.value:
                message._sql_acked = True
            return done.value
        if isinstance(step, _Fail):
            if conn.info.transaction_status == pq.TransactionStatus.INTRANS:
                try:
                    conn.execute(_ABORT)
                except psycopg.Error:
                    pass  # expected: the transaction is now aborted
            raise step.error
        with _mapped_errors():
            cursor = conn.execute(step.query, step.params)
            rows = [tuple(r) for r in cursor.fetchall()] if cursor.description else []


async def _drive_async(conn: psycopg.AsyncConnection[Any], steps: Steps, message: Message | None) -> Any:
    rows: list[tuple[Any, ...]] | None = None
    while True:
        try:
            step = steps.send(rows) if rows is not None else next(steps)
        except StopIteration as done:
            if message is not None and done.value:
                message._sql_acked = True
            return done.value
        if isinstance(step, _Fail):
            if conn.info.transaction_status == pq.TransactionStatus.INTRANS:
                try:
                    await conn.execute(_ABORT)
                except psycopg.Error:
                    pass  # expected: the transaction is now aborted
            raise step.error
        with _mapped_errors():
            cursor = await conn.execute(step.query, step.params)
            rows = [tuple(r) for r in await cursor.fetchall()] if cursor.description else []


class _mapped_errors:
    """psycopg errors with a spanq meaning become spanq errors (raised from the original)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            return
        if isinstance(exc, pg_errors.UniqueViolation):
            raise AlreadyExists(f"a message with that key is already in the queue: {exc.diag.message_detail}") from exc
        if isinstance(exc, pg_errors.UndefinedTable):
            raise NotFound(f"no such queue table: {exc.diag.message_primary}") from exc
        if isinstance(exc, pg_errors.UndefinedColumn):
            raise InvalidArgument(f"not a key column of the queue: {exc.diag.message_primary}") from exc
        if isinstance(exc, pg_errors.CheckViolation):
            raise InvalidArgument("headers, priority or ordering key outside the limits (at most 32 headers, keys of "
                                  "1 to 128 letters, digits and '-_.:/', values of at most 1024 bytes; priority 0 "
                                  "to 9; an ordering key of 1 to 1024 bytes): "
                                  f"{exc.diag.message_primary}") from exc
        if isinstance(exc, pg_errors.ForeignKeyViolation):
            raise NotFound(f"the parent row does not exist: {exc.diag.message_detail}") from exc
