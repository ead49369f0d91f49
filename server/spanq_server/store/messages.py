"""Messages and their leases: each queue's table, and the statements that send,
lease, ack, renew, dead-letter and read its messages."""

import dataclasses
import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import Jsonb, JsonbLoader

from ..ground import errors
from ..ground.model import (AckFound, AckItem, Claim, ColumnType, DeadLetterHistory, Key, LeasedMessage, LedgeredAck,
                     LedgeredSend, OutgoingMessage, QueueDef, RenewResult, Unreadable)
from ..sql.compose import SQL_TYPES, QueueStatements, query
from .arrays import array_literal
from .database import Connection, Database, Handle, connection_of, refused_as_read_only, wrap_errors
from .ledger import claim_params

_COMPARISONS = {"=": "=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "!=": "<>", "<>": "<>"}


class MessageTables(Database):
    """Each queue's table (its messages, their leases and dead-letter history)."""

    async def messages_insert(
        self, handle: Handle, queue: QueueDef, messages: Sequence[OutgoingMessage], now: datetime | None
    ) -> list[Key] | None:
        """Stores the messages (each key the values of queue.sent_key_columns). A queue with
        generated key columns: the messages' whole keys, in the order of the messages; else
        None (the keys are the ones sent: no RETURNING on the hot path)."""
        statements = _queue_sql(queue)
        with wrap_errors(queue.name):
            if statements.insert_keys is None:
                await connection_of(handle).execute(statements.insert, _insert_params(queue, messages, now))
                return None
            cur = await connection_of(handle).execute(statements.insert_keys, _insert_params(queue, messages, now))
            rows = await cur.fetchall()
        at = [i for i, c in enumerate(queue.key_columns) if c.generated_as is None]
        whole = {}
        for row in rows:
            key = _normal_key(tuple(row))
            whole[tuple(key[i] for i in at)] = key
        return [whole[_normal_key(m.key)] for m in messages]

    async def messages_insert_claimed(
        self, handle: Handle | None, queue: QueueDef, sends: Sequence[LedgeredSend], now: datetime | None,
    ) -> set[str]:
        """Claims each send's request_id in the commit ledger, with its response, and
        stores the messages of those this transaction claimed, in one statement.
        Returns the request_ids claimed; the others were committed before.
        Without a handle the statement commits by itself (see ``Database._claiming``)."""
        messages = [m for send in sends for m in send.messages]
        params = _insert_params(queue, messages, now)
        params.update(claim_params(sends, [len(send.messages) for send in sends]))
        rows = await self._claiming(_connection_or_none(handle), queue.name, _queue_sql(queue).insert_claimed,
                                    params)
        return {row[0] for row in rows}

    async def messages_ack_claimed_group(
        self, handle: Handle | None, queue: QueueDef, acks: Sequence[LedgeredAck], now: datetime | None,
    ) -> dict[str, Claim]:
        """A commit group's Ack requests to one queue, in one statement (see
        message_ack_claimed_group in queries.sql): a request whose every message is
        there under the lease token given is claimed in the commit ledger with its
        response (all acked) and its messages deleted (CLAIMED), unless its request_id
        was committed before (COMMITTED_BEFORE: nothing deleted). Any other request is
        neither claimed nor applied (LEFT_ALONE): the caller runs it alone to learn its
        exact outcome. Without a handle the statement commits by itself (see
        ``Database._claiming``)."""
        statements = _queue_sql(queue)
        items = [item for ack in acks for item in ack.items]
        params = statements.ack_params(items)
        counts = [len(ack.items) for ack in acks]
        params.update(claim_params(acks, counts), counts=array_literal(counts), now=now)
        rows = await self._claiming(_connection_or_none(handle), queue.name, statements.ack_claimed_group,
                                    params)
        return {request_id: (Claim.CLAIMED if claimed else Claim.COMMITTED_BEFORE) if ready else Claim.LEFT_ALONE
                for request_id, ready, claimed in rows}

    async def messages_ack_claimed_group_leasing(
        self, queue: QueueDef, acks: Sequence[LedgeredAck], now: datetime | None,
        leases: Sequence[tuple[str, int, timedelta]],
    ) -> tuple[dict[str, Claim], list[list[LeasedMessage]]] | None:
        """``messages_ack_claimed_group`` and, in the same transaction, one lease per
        (stream prefix, batch size, lease duration): one round trip (a pipeline) and one
        commit. None, and nothing committed, when the transaction failed for a reason of
        its own (a lease's error fails the acks too): the caller runs the acks without
        leases. A lost connection is CommitOutcomeUnknown, as for ``_claiming``."""
        statements = _queue_sql(queue)
        items = [item for ack in acks for item in ack.items]
        params = statements.ack_params(items)
        counts = [len(ack.items) for ack in acks]
        params.update(claim_params(acks, counts), counts=array_literal(counts), now=now)
        async with self._read(queue.name) as conn:
            try:
                # Statements between two Syncs are one implicit transaction: an error in any
                # rolls back all, the Sync at the pipeline's end commits all.
                async with conn.pipeline():
                    acked = await conn.execute(statements.ack_claimed_group, params)
                    leased = [await conn.execute(statements.lease, _lease_params(queue, prefix, n, duration, now))
                              for prefix, n, duration in leases]
                rows = await acked.fetchall()
            except psycopg.OperationalError as exc:
                if isinstance(exc, (pg_errors.DeadlockDetected, pg_errors.SerializationFailure,
                                    pg_errors.LockNotAvailable, pg_errors.QueryCanceled)) or refused_as_read_only(exc):
                    return None
                raise errors.CommitOutcomeUnknown(
                    f"the database connection failed while the statement that commits was in flight ({exc}): "
                    "the commit may or may not have happened; replay the same request_id to learn which"
                ) from exc
            except psycopg.Error:
                return None
            batches = [_leased(queue, await _fetch_leased(cur)) for cur in leased]
        claims = {request_id: (Claim.CLAIMED if claimed else Claim.COMMITTED_BEFORE) if ready else Claim.LEFT_ALONE
                  for request_id, ready, claimed in rows}
        return claims, batches

    async def messages_lease(
        self, queue: QueueDef, *, max_batch_size: int, lease_duration: timedelta, lease_prefix: str,
        now: datetime | None,
    ) -> list[LeasedMessage]:
        statements = _queue_sql(queue)
        async with self._read(queue.name) as conn:
            try:
                cur = await conn.execute(statements.lease,
                                         _lease_params(queue, lease_prefix, max_batch_size, lease_duration, now))
            except pg_errors.InvalidTextRepresentation as exc:
                if "was dropped and created again" not in (exc.diag.message_primary or ""):
                    raise
                raise errors.QueueNotFound(
                    f"queue {queue.name!r} was dropped (and a queue of that name created again); "
                    "open a new stream to receive from the new queue"
                ) from exc
            rows = await _fetch_leased(cur)
        return _leased(queue, rows)

    async def leased_history(self, queue: QueueDef, batch: list[LeasedMessage]) -> list[LeasedMessage]:
        """The batch with the dead-letter history of those messages that have one."""
        async with self._read(queue.name) as conn:
            cur = await conn.execute(QueueStatements(queue).by_token("message_lease_history"),
                                     {"lease_tokens": [m.lease_token for m in batch]})
            found = {row[0]: _history(row[1:]) for row in await cur.fetchall()}
        if not found:
            return batch
        return [m._replace(dead_letter=found[m.lease_token]) if m.lease_token in found else m for m in batch]

    async def messages_ack(self, handle: Handle, queue: QueueDef, items: Sequence[AckItem],
                           request_id: str | None = None, now: datetime | None = None) -> list[AckFound]:
        """Deletes the acked messages (to the archive, by ``request_id``, if the queue keeps
        one); what it found of each (the domain decides what that means for the request, and
        raises for the caller to roll back)."""
        statements = _queue_sql(queue)
        conn = connection_of(handle)
        params = statements.ack_params(items)
        params.update(request_id=request_id, now=now)
        with wrap_errors(queue.name):
            cur = await conn.execute(statements.ack, params)
            rows = await cur.fetchall()
            return await self._ack_found(conn, queue, items, rows)

    async def messages_ack_claimed(
        self, handle: Handle, queue: QueueDef, items: Sequence[AckItem], *,
        request_id: str, fingerprint: bytes, response: bytes, now: datetime | None,
    ) -> list[AckFound] | None:
        """``ledger_claim`` (recording ``response``) and ``messages_ack`` in one statement;
        None, and nothing deleted, when a committed transaction has request_id."""
        statements = _queue_sql(queue)
        params = statements.ack_params(items)
        params.update(request_id=request_id, fingerprint=fingerprint, response=response, now=now)
        conn = connection_of(handle)
        with wrap_errors(queue.name):
            cur = await conn.execute(statements.ack_claimed, params)
            rows = await cur.fetchall()
            if not rows[0][0]:
                return None
            if rows[0][1] is None:  # key columns are NOT NULL: the row of "none deleted"
                rows = []
            return await self._ack_found(conn, queue, items, [row[1:] for row in rows])

    @staticmethod
    async def _ack_found(conn: Connection, queue: QueueDef, items: Sequence[AckItem], rows: Sequence[Sequence[Any]]
                         ) -> list[AckFound]:
        """What an ack found of each message, from the keys it deleted (``rows``)."""
        if len(rows) == len(items):
            # The keys are distinct (Mutator.prepare) and only they can be deleted: all were.
            return [AckFound.ACKED] * len(items)
        deleted = {_normal_key(tuple(row)) for row in rows}
        missing = [i for i in items if _normal_key(i.key) not in deleted]
        still_there: set[Key] = set()
        if missing:
            names = _queue_sql(queue).names
            cur = await conn.execute(
                query(
                    "message_ack_probe",
                    queue=names.table,
                    key_arrays=names.key_arrays,
                    key_columns=names.keys,
                    m_key_columns=names.qualified_keys("m"),
                    a_key_columns=names.qualified_keys("a"),
                ),
                names.key_array_params([i.key for i in missing]),
            )
            still_there = {_normal_key(tuple(row)) for row in await cur.fetchall()}
        found = []
        for item in items:
            key = _normal_key(item.key)
            found.append(AckFound.ACKED if key in deleted else
                         AckFound.LEASE_MOVED if key in still_there else AckFound.GONE)
        return found

    async def leases_renew(
        self, handle: Handle, queue: QueueDef, tokens: Sequence[str], lease_duration: timedelta,
        now: datetime | None, reason: str | None = None,
    ) -> list[RenewResult]:
        names = QueueStatements(queue)
        conn = connection_of(handle)
        with wrap_errors(queue.name):
            if lease_duration == timedelta(0):  # a nack: its reason (or none) for the dead-letter history
                await conn.execute(names.by_token("message_note_failure"),
                                   {"lease_tokens": list(tokens), "reason": reason, "now": now})
            cur = await conn.execute(
                query("lease_renew", renew_function=names.renew_function),
                {"lease_tokens": list(tokens), "lease_duration": lease_duration, "now": now},
            )
            rows = {row[0]: row for row in await cur.fetchall()}
        return [
            RenewResult(t, rows[t][1], rows[t][2]) if t in rows else RenewResult(t, None, None, known=False)
            for t in tokens
        ]

    async def leases_return(self, queue: QueueDef, leased: Sequence[LeasedMessage]) -> int:
        """Undoes leases no receiver got (deliver_time and attempt as before); how many were still held."""
        async with self._read(queue.name) as conn:
            cur = await conn.execute(
                QueueStatements(queue).by_token("lease_return"),
                {"lease_tokens": [m.lease_token for m in leased],
                 "deliver_times": [m.deliver_time for m in leased], "queue_name": queue.name},
            )
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def leases_refund(self, queue: QueueDef, lease_tokens: Sequence[str]) -> int:
        """Gives back the delivery attempt of the leases these tokens still hold, which stay
        held (lease_attempt_refund); how many were given back."""
        async with self._read(queue.name) as conn:
            cur = await conn.execute(QueueStatements(queue).by_token("lease_attempt_refund"),
                                     {"lease_tokens": list(lease_tokens)})
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def messages_dead_letter(self, queue: QueueDef, lease_tokens: Sequence[str], reason: str,
                                   now: datetime | None = None) -> int:
        """Moves leased messages to the queue's dead-letter queue as stored, with their
        history (the failure: reason); how many moved (a key the dead-letter queue holds
        already stays, see message_dead_letter)."""
        assert queue.dead_letter_queue
        names = QueueStatements(queue)
        statement = names.by_token("message_dead_letter", d_key_columns=names.qualified_keys("d"), key_columns=names.keys,
                                   m_sent_key_columns=names.qualified_keys("m", sent=True),
                                   sent_key_columns=names.sent_keys,
                                   dead_letter_queue=sql.Identifier("public", queue.dead_letter_queue))
        async with self._read(queue.name) as conn:
            cur = await conn.execute(statement, {"lease_tokens": list(lease_tokens), "reason": reason,
                                                 "queue_name": queue.name, "max_backoff": queue.max_backoff,
                                                 "now": now})
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def leases_lapsed(self, queue: QueueDef, lease_tokens: Sequence[str], now: datetime | None
                            ) -> tuple[int, int]:
        """Of these tokens: how many still hold their message past the lease's end (lapsed),
        and how many are still live."""
        async with self._read(queue.name) as conn:
            cur = await conn.execute(_queue_sql(queue).lapsed, {"lease_tokens": list(lease_tokens), "now": now})
            row = await cur.fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    async def leases_held(self, queue: QueueDef, lease_prefix: str, lease_tokens: Sequence[str],
                          now: datetime | None) -> dict[str, datetime]:
        """The live leases under one stream's token prefix, of the messages its tokens as
        this server knows them name (and any the token index finds): token -> lease end."""
        async with self._read(queue.name) as conn:
            cur = await conn.execute(_queue_sql(queue).held, {"lease_prefix": lease_prefix,
                                                               "lease_tokens": list(lease_tokens), "now": now})
            return {token: end for token, end in await cur.fetchall()}

    async def next_delivery_in(self, queue: QueueDef, now: datetime | None) -> float | None:
        """Seconds until the queue's earliest deliver_time (for a rate-limited queue, no
        sooner than its next token); None when the queue is empty or its delivery is paused."""
        async with self._read(queue.name) as conn:
            cur = await conn.execute(_queue_sql(queue).next_delivery, {"now": now, "queue_name": queue.name})
            row = await cur.fetchone()
        return float(row[0]) if row else None

    async def messages_select(
        self, handle: Handle | None, queue: QueueDef, *, key_equals: Sequence[tuple[str, Any]] = (),
        deliver_time_bounds: Sequence[tuple[str, datetime | None, timedelta]] = (),
        order_by: str | None = None, descending: bool = False, limit: int | None = None,
        key_descending: Sequence[bool] = (), now: datetime | None = None,
    ) -> list[tuple[Key, Any, datetime]]:
        """Reads messages (key, payload, deliver_time) without leasing them: a plain
        SELECT over the queue. key_equals names key columns and values;
        deliver_time_bounds are (operator, instant or None for now, offset);
        order_by is a key column or deliver_time (default: the primary key, each
        column in its direction of key_descending, ascending where it gives none). With a
        handle, inside that transaction (seeing its own writes); else autocommitted."""
        names = QueueStatements(queue)
        types = {c.name: c.type for c in queue.key_columns}
        params: dict[str, Any] = {"limit": limit}
        conditions: list[sql.Composable] = []
        for i, (column, value) in enumerate(key_equals):
            conditions.append(sql.SQL("{} = {}::{}").format(
                sql.Identifier("m", column), sql.Placeholder(f"e{i}"), sql.SQL(SQL_TYPES[types[column]])))
            params[f"e{i}"] = value
        for i, (op, at, offset) in enumerate(deliver_time_bounds):
            conditions.append(sql.SQL("m.deliver_time {} coalesce({}::timestamptz, {}::timestamptz, "
                                      "statement_timestamp()) + {}::interval").format(
                sql.SQL(_COMPARISONS[op]), sql.Placeholder(f"t{i}"), sql.Placeholder("now"),
                sql.Placeholder(f"o{i}")))
            params.update({f"t{i}": at, f"o{i}": offset})
        params["now"] = now
        direction = sql.SQL(" DESC" if descending else "")
        if order_by is None:
            # A mixed-direction key is sorted here (no index has its order: one would cost every
            # send and ack a write for a read that operators, not receivers, make).
            flipped = list(key_descending) + [False] * (len(queue.key_columns) - len(key_descending))
            order = sql.SQL(", ").join(sql.SQL("{}{}").format(sql.Identifier("m", c.name),
                                                              sql.SQL(" DESC" if descending != d else ""))
                                       for c, d in zip(queue.key_columns, flipped))
        else:
            if order_by != "deliver_time" and order_by not in types:
                raise errors.InvalidArgument(f"cannot order queue {queue.name!r} by {order_by!r}")
            order = sql.SQL("{}{}").format(sql.Identifier("m", order_by), direction)
        statement = query(
            "message_select",
            key_columns=names.qualified_keys("m"),
            queue=names.table,
            conditions=sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("TRUE"),
            order=order,
        )
        width = len(queue.key_columns)
        with wrap_errors(queue.name):
            if handle is None:
                async with self._read(queue.name) as own:
                    rows = await (await own.execute(statement, params)).fetchall()
            else:
                rows = await (await connection_of(handle).execute(statement, params)).fetchall()
        return [(tuple(_normal_key(tuple(row[:width]))), _normal_value(row[width]), row[width + 1]) for row in rows]


def _lease_params(queue: QueueDef, prefix: str, max_batch_size: int, lease_duration: timedelta,
                  now: datetime | None) -> dict[str, Any]:
    return {"max_batch_size": max_batch_size, "lease_duration": lease_duration, "lease_prefix": prefix,
            "now": now, "queue_name": queue.name, "create_time": queue.create_time}


async def _fetch_leased(cur: psycopg.AsyncCursor[Any]) -> list[Any]:
    try:
        return await cur.fetchall()
    except (psycopg.DataError, ValueError, RecursionError):
        # A value written by SQL that Python cannot hold: the rows are leased
        # already, so read them again with Unreadable in place of such values.
        return _rows_leniently(cur)


def _leased(queue: QueueDef, rows: Sequence[Any]) -> list[LeasedMessage]:
    # The row is the key columns, then LeasedMessage's other fields in order but
    # dead_letter (leased_history adds it): headers, priority and ordering key come last.
    width = len(queue.key_columns)
    if width == 1:
        return [LeasedMessage((row[0],), row[1], row[2], row[3], row[4], row[5], row[6], row[7], None, row[8],
                              row[9], row[10]) for row in rows]
    w = width
    return [LeasedMessage(tuple(row[:w]), row[w], row[w + 1], row[w + 2], row[w + 3], row[w + 4], row[w + 5],
                          row[w + 6], None, row[w + 7], row[w + 8], row[w + 9]) for row in rows]


def _connection_or_none(handle: Handle | None) -> Connection | None:
    return None if handle is None else connection_of(handle)


class _QueueSql:
    """One queue's hot statements, composed once (to bytes) rather than per call:
    composing them was a few percent of the server's CPU while draining, ~7% on sends."""

    def __init__(self, queue: QueueDef) -> None:
        names = self.names = QueueStatements(queue)
        # A send writes the key columns but the generated ones (PostgreSQL computes those).
        inserts = dict(queue=names.table, key_columns=names.sent_keys,
                       s_key_columns=names.qualified_keys("s", sent=True), key_arrays=names.sent_key_arrays,
                       payload_type=sql.SQL(SQL_TYPES[queue.payload_type]))
        self.insert = query("message_insert", **inserts).as_bytes(None)
        self.insert_keys = (query("message_insert_keys", insert=query("message_insert", **inserts),
                                  key_columns=names.keys).as_bytes(None)
                            if queue.has_generated_keys else None)
        self.insert_claimed = query("message_insert_claimed", **inserts).as_bytes(None)
        self.lease = query("message_lease_batch", receive_function=names.receive_function).as_bytes(None)
        next_delivery = query("message_next_delivery", queue=names.table)
        if queue.rate_limit is not None:
            next_delivery = query("message_next_delivery_rate_limited", next_delivery=next_delivery,
                                  rate_limit=sql.Literal(queue.rate_limit),
                                  rate_limit_burst=sql.Literal(queue.burst()))
        self.next_delivery = next_delivery.as_bytes(None)
        self.held = names.by_token("lease_held").as_bytes(None)
        self.lapsed = names.by_token("lease_lapsed").as_bytes(None)
        acked = names.qualified_keys("acked")
        archived = queue.archive_duration is not None
        acks = dict(queue=names.table, key_arrays=names.key_arrays, key_columns=names.keys,
                    m_key_columns=names.qualified_keys("m"), a_key_columns=names.qualified_keys("a"),
                    acked_key_columns=acked, archive_returning=names.archive_returning())
        by_request = names.archive_step(acked, sql.SQL("%(request_id)s::text"))
        self.ack = query("message_ack", archive=by_request, **acks).as_bytes(None)
        self.ack_claimed = query("message_ack_claimed", archive=by_request, **acks).as_bytes(None)
        self.ack_claimed_group = query(
            "message_ack_claimed_group", archive=names.archive_step(acked, sql.SQL("acked.spanq_owner")),
            archive_keys=sql.SQL(", {}").format(names.qualified_keys("m")) if archived else sql.SQL(""),
            **acks).as_bytes(None)
        self._width = len(queue.key_columns)
        self._sent_width = len(queue.sent_key_columns)

    def ack_params(self, items: Sequence[AckItem]) -> dict[str, Any]:
        params = self.key_array_params([i.key for i in items])
        params["lease_tokens"] = array_literal([i.lease_token for i in items])
        return params

    def key_array_params(self, keys: Sequence[Key], sent: bool = False) -> dict[str, Any]:
        """A key array per key column (``sent``: per column a send gives, of sent keys)."""
        width = self._sent_width if sent else self._width
        if width == 1:
            return {"k0": array_literal([key[0] for key in keys])}
        return {f"k{i}": array_literal([key[i] for key in keys]) for i in range(width)}


@functools.lru_cache(maxsize=256)
def _queue_sql(queue: QueueDef) -> _QueueSql:
    return _QueueSql(queue)


class _LenientTimestamptzLoader(TimestamptzLoader):
    def load(self, data: Any) -> Any:
        try:
            return super().load(data)
        except (psycopg.DataError, ValueError, OverflowError):  # 'infinity', beyond year 9999
            return Unreadable("timestamptz", bytes(data).decode(errors="replace"))


class _LenientJsonbLoader(JsonbLoader):
    def load(self, data: Any) -> Any:
        try:
            return super().load(data)
        except (ValueError, RecursionError):  # nested past Python's recursion limit
            return Unreadable("jsonb", bytes(data[:40]).decode(errors="replace") + "...")


@dataclasses.dataclass
class _LenientContext:
    adapters: psycopg.adapt.AdaptersMap
    connection: Any


def _rows_leniently(cur: psycopg.AsyncCursor[Any]) -> list[Any]:
    """The rows of a cursor's result again, with Unreadable for each value its loader
    refused (the slow path: only for a result whose plain fetch failed)."""
    result = cur.pgresult
    assert result is not None
    adapters = psycopg.adapt.AdaptersMap(cur.adapters)
    adapters.register_loader("timestamptz", _LenientTimestamptzLoader)
    adapters.register_loader("jsonb", _LenientJsonbLoader)
    transformer = psycopg.adapt.Transformer(_LenientContext(adapters, cur.connection))
    transformer.set_pgresult(result)
    return transformer.load_rows(0, result.ntuples, tuple)


def _insert_params(queue: QueueDef, messages: Sequence[OutgoingMessage], now: datetime | None
                   ) -> dict[str, Any]:
    # Array literals where they can be (see _array_literal): the keys, and STRING payloads.
    params = _queue_sql(queue).key_array_params([m.key for m in messages], sent=True)
    deliver_times = [m.deliver_time for m in messages]
    delays = [m.delay for m in messages]
    headers = [Jsonb(m.headers) if m.headers else None for m in messages]
    priorities = [m.priority for m in messages]
    ordering_keys = [m.ordering_key for m in messages]
    params.update(
        payloads=array_literal([_payload_param(queue.payload_type, m.payload) for m in messages]),
        # NULL rather than an array of NULLs when no message is scheduled: multi-argument
        # unnest pads with NULLs all the same, and dumping the array costs the server CPU.
        deliver_times=deliver_times if any(t is not None for t in deliver_times) else None,
        delays=delays if any(d is not None for d in delays) else None,
        headers=headers if any(h is not None for h in headers) else None,
        priorities=priorities if any(priorities) else None,
        ordering_keys=ordering_keys if any(k is not None for k in ordering_keys) else None,
        now=now,
    )
    return params


def _history(columns: Sequence[Any]) -> DeadLetterHistory | None:
    """(source, attempts, time, last failure) as stored; None for a message never dead-lettered."""
    source, attempts, at, failure = columns
    return DeadLetterHistory(source, attempts or 0, at, failure or "") if source is not None else None


def _payload_param(payload_type: ColumnType, payload: Any) -> Any:
    return Jsonb(payload) if payload_type is ColumnType.JSON else payload


def _normal_value(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _normal_key(key: Key) -> Key:
    """Keys compare as stored: bytes from memoryview, timestamps as instants."""
    return tuple(bytes(v) if isinstance(v, memoryview) else v for v in key)
