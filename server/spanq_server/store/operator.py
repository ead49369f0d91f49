"""The operator's reads and bulk moves over the queue tables: stats and gauges,
peek, purge, redrive (admin.py, metrics/endpoint.py)."""

from datetime import datetime, timedelta
from typing import Any, NamedTuple

from psycopg import sql

from ..ground.model import Key, PeekedMessage, QueueCounts, QueueDef, QueueGauges, ReplayBatch, ReplayWindow
from ..sql.compose import SQL_TYPES, QueueStatements, query
from .catalog import _fetch_queues
from .database import Connection, Database, Handle, connection_of
from .messages import _history, _normal_key, _normal_value

RedriveSource = str | tuple[str, ...] | None
"""Which messages of a dead-letter queue a redrive moves: those that recorded this source
queue (str), those that recorded none of these (tuple), or all (None)."""
ALL_SOURCES: RedriveSource = None


class PeekFilter(NamedTuple):
    """Which messages a peek keeps (the dashboard's search); None: any."""

    key_prefix: str | None = None
    """The first key column's text starts with it."""
    state: str | None = None
    """READY, SCHEDULED or LEASED."""
    min_attempt: int | None = None
    text: str | None = None
    """The payload's text (JSON as stored, BYTES as \\x hex) holds it, case folded."""


class OperatorQueries(Database):
    """Stats, peek, purge and redrive over the queue tables."""

    async def queue_stats(self, queue: QueueDef, dead_letter_queue: QueueDef | None,
                          now: datetime | None) -> QueueCounts:
        """Exact counts by state, in one transaction (so one snapshot with the dead-letter count)."""
        async with self._transaction(queue.name) as conn:
            cur = await conn.execute(query("queue_stats", queue=QueueStatements(queue).table), {"now": now})
            row = await cur.fetchone()
            assert row is not None  # the clock row is always there, joined to no message or some
            ready, scheduled, leased, age, read_time, held = row
            dead = 0
            if dead_letter_queue is not None:
                cur = await conn.execute(query("queue_message_count", queue=QueueStatements(dead_letter_queue).table))
                dead = (await cur.fetchone() or (0,))[0]
            limited = await self._limit_stats(conn, queue, now)
        return QueueCounts(int(ready), int(scheduled), int(leased), int(dead), float(age), read_time, int(held),
                           **limited)

    @staticmethod
    async def _limit_stats(conn: Connection, queue: QueueDef, now: datetime | None) -> dict[str, Any]:
        """What the queue's limits hold back, as QueueCounts' fields (none without limits)."""
        held: dict[str, Any] = {}
        if queue.max_in_flight_per_key is not None:
            names = QueueStatements(queue)
            cur = await conn.execute(
                query("queue_stats_key_limit", queue=names.table,
                      concurrency_key=sql.Identifier(names.concurrency_column().name)),
                {"now": now, "max_in_flight_per_key": queue.max_in_flight_per_key})
            held["key_limited"], held["keys_at_limit"] = map(int, await cur.fetchone() or (0, 0))
        if queue.rate_limit is not None:
            cur = await conn.execute(query("queue_stats_rate_limit"), {
                "queue": queue.name, "now": now, "rate_limit": queue.rate_limit, "burst": queue.burst()})
            row = await cur.fetchone()
            if row is not None:
                held["rate_limited"], held["rate_limit_tokens"] = int(row[0]), float(row[1])
        return held

    async def messages_peek(self, queue: QueueDef, after: tuple[datetime | str, Key] | None, limit: int,
                            now: datetime | None, where: PeekFilter = PeekFilter(), *,
                            archived: bool = False) -> list[PeekedMessage]:
        """Up to limit messages in delivery order after (deliver_time, key), unleased; only
        those ``where`` keeps. ``archived``: of the queue's archive, in ack order after
        (ack_time, key). An ``after`` time of 'infinity' resumes among the messages held
        behind their ordering key's earlier ones (whose deliver_time that is)."""
        names = QueueStatements(queue)
        params: dict[str, Any] = {"limit": limit, "now": now, "key_prefix": where.key_prefix, "state": where.state,
                                  "min_attempt": where.min_attempt, "text": where.text}
        condition: sql.Composable = sql.SQL("TRUE")
        if after is not None:
            condition = sql.SQL("(m.deliver_time, {}) > ({})").format(
                names.qualified_keys("m"), _after_values(queue, after, params))
        first_key: sql.Composable = (sql.Identifier("m", queue.key_columns[0].name)
                                     if queue.key_columns else sql.SQL("NULL"))
        statement = query("archive_peek" if archived else "message_peek", key_columns=names.qualified_keys("m"),
                          queue=names.archive if archived else names.table, after=condition,
                          first_key_column=first_key)
        width = len(queue.key_columns)
        shift = 2 if archived else 0  # an archive's rows have the ack's time and request_id first
        async with self._read(queue.name) as conn:
            rows = await (await conn.execute(statement, params)).fetchall()
        return [PeekedMessage(_normal_key(tuple(row[:width])), _normal_value(row[width]), *row[width + 1:width + 7])
                ._replace(dead_letter=_history(row[width + 7:width + 11]), headers=row[width + 11 + shift],
                          priority=row[width + 12 + shift], ordering_key=row[width + 13 + shift],
                          **(dict(ack_time=row[width + 11], ack_request_id=row[width + 12]) if archived
                             else dict(held=row[width + 14])))
                for row in rows]

    async def messages_purge(self, queue: QueueDef, sent_before: datetime | None) -> int:
        """Deletes every message (or those sent before sent_before) in one transaction; how many."""
        async with self._transaction(queue.name) as conn:
            cur = await conn.execute(query("message_purge", queue=QueueStatements(queue).table),
                                     {"sent_before": sent_before})
            return cur.rowcount

    async def messages_expire(self, queue: QueueDef, retention: timedelta, now: datetime | None,
                              batch_size: int) -> int:
        """Deletes up to batch_size messages sent longer than ``retention`` ago, in one short
        transaction; how many."""
        async with self._transaction(queue.name) as conn:
            cur = await conn.execute(query("message_expire", queue=QueueStatements(queue).table),
                                     {"retention": retention, "now": now, "batch_size": batch_size})
            return cur.rowcount

    async def archive_prune(self, queue: QueueDef, retention: timedelta, now: datetime | None,
                            batch_size: int) -> int:
        """Forgets up to batch_size archived messages acked longer than ``retention`` ago; how many."""
        async with self._transaction(queue.name) as conn:
            cur = await conn.execute(query("archive_prune", archive=QueueStatements(queue).archive),
                                     {"retention": retention, "now": now, "batch_size": batch_size})
            return cur.rowcount

    async def archive_replay(self, handle: Handle, queue: QueueDef, window: ReplayWindow,
                             after: tuple[datetime, Key] | None, limit: int) -> ReplayBatch:
        """Sends one batch (up to limit) of the window's archived messages after the cursor
        ``after`` back into the queue, in the caller's transaction (archive_replay)."""
        params: dict[str, Any] = {"limit": limit}
        names = QueueStatements(queue)
        descending = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier("p", c.name))
                                        for c in queue.key_columns)
        statement = query("archive_replay", archive=names.archive, queue=names.table, key_columns=names.keys,
                          sent_key_columns=names.sent_keys, p_sent_key_columns=names.qualified_keys("p", sent=True),
                          a_key_columns=names.qualified_keys("a"), p_key_columns=names.qualified_keys("p"),
                          p_key_descending=descending, after=_replay_after(queue, after, params),
                          window=_replay_window(queue, window, params))
        row = await (await connection_of(handle).execute(statement, params)).fetchone()
        assert row is not None  # one row always (LEFT JOIN on one)
        reached, sent, last_time, *last_key = row
        last = (last_time, _normal_key(tuple(last_key))) if last_time is not None else None
        return ReplayBatch(int(reached), int(sent), last)

    async def archive_replay_left(self, queue: QueueDef, window: ReplayWindow,
                                  after: tuple[datetime, Key] | None, handle: Handle | None = None) -> int:
        """How many archived messages of the window lie after the cursor ``after`` (in the
        caller's transaction when given one: a batch holds its connection meanwhile)."""
        params: dict[str, Any] = {}
        statement = query("archive_replay_left", archive=QueueStatements(queue).archive,
                          after=_replay_after(queue, after, params), window=_replay_window(queue, window, params))
        if handle is not None:
            row = await (await connection_of(handle).execute(statement, params)).fetchone()
        else:
            async with self._read(queue.name) as conn:
                row = await (await conn.execute(statement, params)).fetchone()
        return int(row[0]) if row else 0

    async def ledger_hold(self, handle: Handle, request_id: str, fingerprint: bytes,
                          now: datetime | None) -> tuple[bytes, bytes, datetime]:
        """A Replay's ledger entry, claimed or locked in the caller's transaction (ledger_hold):
        its fingerprint, its recorded progress (b"" when new) and its time (now)."""
        cur = await connection_of(handle).execute(
            query("ledger_hold"), {"request_id": request_id, "fingerprint": fingerprint, "now": now})
        row = await cur.fetchone()
        assert row is not None  # an upsert always returns its row
        return bytes(row[0]), bytes(row[1]), row[2]

    async def message_delete(self, queue: QueueDef, key: Key) -> int:
        """Deletes one message by key; how many (0 or 1)."""
        params: dict[str, Any] = {}
        statement = query("message_delete_one", queue=QueueStatements(queue).table,
                          m_key_columns=QueueStatements(queue).qualified_keys("m"), key=_key_values(queue, key, params))
        async with self._transaction(queue.name) as conn:
            return (await conn.execute(statement, params)).rowcount

    async def message_release(self, queue: QueueDef, key: Key, now: datetime | None) -> int:
        """Takes back one message's lease (deliverable now) and wakes every server's streams;
        how many (0: not leased, or gone)."""
        params: dict[str, Any] = {"now": now, "queue_name": queue.name}
        statement = query("message_release_one", queue=QueueStatements(queue).table,
                          m_key_columns=QueueStatements(queue).qualified_keys("m"), key=_key_values(queue, key, params))
        async with self._transaction(queue.name) as conn:
            row = await (await conn.execute(statement, params)).fetchone()
        return int(row[0]) if row else 0

    async def message_redrive_one(self, dead_letter_queue: QueueDef, target: QueueDef, key: Key,
                                  now: datetime | None) -> int:
        """Moves one dead letter by key to target (message_redrive, one key); how many moved."""
        params: dict[str, Any] = {"limit": 1, "now": now}
        d = QueueStatements(dead_letter_queue)
        keyed = sql.SQL("({}) = ({})").format(d.qualified_keys("d"), _key_values(dead_letter_queue, key, params))
        async with self._transaction(target.name) as conn:
            cur = await conn.execute(_redrive_statement("message_redrive", dead_letter_queue, target, keyed), params)
            return cur.rowcount

    async def queue_dead_letter_sources(self, name: str) -> list[str]:
        """The queues whose dead_letter_queue is this one."""
        async with self._read() as conn:
            rows = await (await conn.execute(query("queue_dead_letter_sources"), {"name": name})).fetchall()
        return [row[0] for row in rows]

    async def redrive_sources(self, dead_letter_queue: QueueDef) -> list[str | None]:
        """The source queues its messages recorded (None among them: some recorded none)."""
        async with self._read(dead_letter_queue.name) as conn:
            cur = await conn.execute(query("message_redrive_sources", dead_letter_queue=QueueStatements(
                dead_letter_queue).table))
            return sorted((row[0] for row in await cur.fetchall()), key=lambda s: (s is None, s or ""))

    async def messages_redrive(self, dead_letter_queue: QueueDef, target: QueueDef, limit: int,
                               now: datetime | None, source: RedriveSource = ALL_SOURCES) -> int:
        """Moves one batch (up to limit messages) from dead_letter_queue to target, in one
        transaction; how many moved. A key sent to the target meanwhile fails the whole
        batch with MessageAlreadyExists, and nothing moves."""
        async with self._transaction(target.name) as conn:
            cur = await conn.execute(_redrive_statement("message_redrive", dead_letter_queue, target, source),
                                     {"limit": limit, "now": now})
            return cur.rowcount

    async def redrive_left(self, dead_letter_queue: QueueDef, target: QueueDef,
                           now: datetime | None, source: RedriveSource = ALL_SOURCES) -> tuple[int, int]:
        """(messages in dead_letter_queue, of which a redrive to target cannot move now)."""
        async with self._read(dead_letter_queue.name) as conn:
            cur = await conn.execute(_redrive_statement("message_redrive_left", dead_letter_queue, target, source),
                                     {"now": now})
            total, stuck = await cur.fetchone() or (0, 0)
        return int(total), int(stuck)

    async def queue_gauges(self, *, now: datetime | None, cap: int, timeout: float) -> list[QueueGauges]:
        """Every queue's ready and stored messages (each counted up to cap) and its oldest
        message's age, in one statement (see metrics_queue_gauges in queries.sql)."""
        async with self._transaction() as conn:
            await conn.execute(query("metrics_begin"), {"statement_timeout": f"{int(timeout * 1000)}ms"})
            queues = await _fetch_queues(conn)
            if not queues:
                return []
            statement = sql.SQL("\nUNION ALL\n").join(_gauges_statement(q) for q in queues)
            cur = await conn.execute(statement, {"cap": cap, "now": now})
            return [QueueGauges(name, int(ready), int(stored), float(age), int(dead), int(rate), int(key), int(held))
                    for name, ready, stored, age, dead, rate, key, held in await cur.fetchall()]


def _gauges_statement(queue: QueueDef) -> sql.Composed:
    """One queue's row of metrics_queue_gauges."""
    names = QueueStatements(queue)
    name = sql.Literal(queue.name)
    rate: sql.Composable = sql.SQL("0::bigint")
    key: sql.Composable = sql.SQL("0::bigint")
    held: sql.Composable = sql.SQL("0::bigint")
    if queue.rate_limit is not None:
        rate = query("metrics_rate_limited", queue_name=name)
    if queue.max_in_flight_per_key is not None:
        key = query("metrics_key_limited", queue=names.table,
                    concurrency_key=sql.Identifier(names.concurrency_column().name),
                    max_in_flight_per_key=sql.Literal(queue.max_in_flight_per_key))
    if queue.enable_message_ordering:
        held = query("metrics_ordering_held", queue=names.table)
    return query("metrics_queue_gauges", queue=names.table, queue_name=name, rate_limited=rate, key_limited=key,
                 ordering_held=held)


def _key_values(queue: QueueDef, key: Key, params: dict[str, Any]) -> sql.Composable:
    """A key's values as typed placeholders (k0, k1, ...), their values put in params."""
    values = []
    for i, (column, value) in enumerate(zip(queue.key_columns, key)):
        params[f"k{i}"] = value
        values.append(sql.SQL("{}::{}").format(sql.Placeholder(f"k{i}"), sql.SQL(SQL_TYPES[column.type])))
    return sql.SQL(", ").join(values)


def _after_values(queue: QueueDef, after: tuple[datetime | str, Key], params: dict[str, Any]) -> sql.Composable:
    """A cursor (time, key) as typed placeholders (after_time, a0, a1, ...), its values put in params; a
    time of 'infinity' (a string) is the place of messages held behind their ordering key."""
    params["after_time"] = after[0]
    values = [sql.SQL("{}::timestamptz").format(sql.Placeholder("after_time"))]
    for i, (column, value) in enumerate(zip(queue.key_columns, after[1])):
        params[f"a{i}"] = value
        values.append(sql.SQL("{}::{}").format(sql.Placeholder(f"a{i}"), sql.SQL(SQL_TYPES[column.type])))
    return sql.SQL(", ").join(values)


def _replay_after(queue: QueueDef, after: tuple[datetime, Key] | None, params: dict[str, Any]) -> sql.Composable:
    if after is None:
        return sql.SQL("TRUE")
    return query("archive_replay_after", a_key_columns=QueueStatements(queue).qualified_keys("a"),
                 values=_after_values(queue, after, params))


def _replay_window(queue: QueueDef, window: ReplayWindow, params: dict[str, Any]) -> sql.Composable:
    params.update(start_time=window.start_time, end_time=window.end_time)
    keys = QueueStatements(queue).qualified_keys("a")
    bounds: list[sql.Composable] = []
    for name, bound in (("archive_key_from", window.start_key), ("archive_key_to", window.end_key)):
        if bound is not None:
            named = {f"{name}_{i}": v for i, v in enumerate(bound)}
            params.update(named)
            values = sql.SQL(", ").join(
                sql.SQL("{}::{}").format(sql.Placeholder(p), sql.SQL(SQL_TYPES[c.type]))
                for p, c in zip(named, queue.key_columns))
            bounds.append(query(name, a_key_columns=keys, values=values))
    return query("archive_replay_window", key_bounds=sql.SQL(" AND ").join(bounds) if bounds else sql.SQL("TRUE"))


def _redrive_statement(name: str, dead_letter_queue: QueueDef, target: QueueDef,
                       source: RedriveSource | sql.Composable) -> sql.Composed:
    d, t = QueueStatements(dead_letter_queue), QueueStatements(target)
    # The target's generated key columns are computed again: the dead letters' columns at the
    # places of the others move.
    moved = sql.SQL(", ").join(sql.Identifier("d", dead.name)
                               for dead, kept in zip(dead_letter_queue.key_columns, target.key_columns)
                               if kept.generated_as is None)
    return query(name, dead_letter_queue=d.table, target=t.table, d_key_columns=d.qualified_keys("d"),
                 t_key_columns=t.qualified_keys("t"), moving_key_columns=d.qualified_keys("moving"),
                 target_key_columns=t.sent_keys, d_moved_key_columns=moved, target_name=sql.Literal(target.name),
                 source=source if isinstance(source, sql.Composable) else _source_condition(source))


def _source_condition(source: RedriveSource) -> sql.Composable:
    if source is None:
        return sql.SQL("TRUE")
    if isinstance(source, tuple):
        return sql.SQL("(d.spanq_dead_letter_source IS NULL OR d.spanq_dead_letter_source <> ALL ({}::text[]))"
                       ).format(sql.Literal(list(source)))
    return sql.SQL("d.spanq_dead_letter_source = {}").format(sql.Literal(source))
