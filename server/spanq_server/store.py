"""The one module that runs SQL: a psycopg pool, the named queries, and the
translation of psycopg errors into domain errors.

Every method takes and returns domain values (model.py), never rows. Methods
that mutate take the transaction's connection, so that one transaction can
hold several mutations and the commit-ledger entry (see ``transaction``).
"""

import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import random
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
import psycopg_pool
from psycopg_pool.base import AttemptWithBackoff
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import Jsonb, JsonbLoader

from . import errors
from .faults import FaultInjector
from .model import (AckItem, AckResult, ColumnType, DeadLetterHistory, Key, KeyColumn, LeasedMessage, LedgeredAck,
                    LedgeredSend, OutgoingMessage, PeekedMessage, QueueCounts, QueueDef, QueueGauges, RenewResult,
                    Unreadable)
from .sql import MIGRATIONS
from .sql.compose import SQL_TYPES, QueueStatements, identifiers, query

logger = logging.getLogger(__name__)

MIGRATION_LOCK_ID = 0x5350_414E_5100_0001
"""pg_advisory_xact_lock key for migrations ("SPANQ" + 1)."""
CATALOG_LOCK_ID = 0x5350_414E_5100_0002
"""pg_advisory_xact_lock key for queue DDL, so the queue limit holds across servers."""
RECENTLY_USED = 1.0
"""Seconds: a pooled connection returned in good order this recently is handed out unchecked."""
RECONNECT_MAX_DELAY = 0.5
"""Seconds: the longest wait between attempts to replace a lost connection (see _Pool)."""
POOLERS = ("auto", "session", "transaction")
"""What sits between spanq and PostgreSQL (Store's ``pooler``): "auto" finds out (a pooler
found is taken for a transaction-mode one), or the operator says which pooling mode it is."""


Connection = psycopg.AsyncConnection[Any]

_UNKNOWN = "the commit may or may not have happened; replay the same request_id to learn which"

DDL_LOCK_TIMEOUT = timedelta(seconds=5)
"""The longest queue DDL waits, in all, for the locks it needs (Config.ddl_lock_timeout)."""
RedriveSource = str | tuple[str, ...] | None
"""Which messages of a dead-letter queue a redrive moves: those that recorded this source
queue (str), those that recorded none of these (tuple), or all (None)."""
ALL_SOURCES: RedriveSource = None
DDL_LOCK_SLICE = 0.2
"""Seconds: the longest one wait of queue DDL for a table's lock. A waiting ACCESS
EXCLUSIVE request makes every later request on the table (sends, receives) queue
behind it; between slices the DDL leaves that queue, so they wait at most this long."""


@contextlib.contextmanager
def wrap_errors(queue: str | None = None) -> Iterator[None]:
    """psycopg -> domain errors: the one table for this boundary."""
    try:
        yield
    except pg_errors.UniqueViolation as exc:
        detail = exc.diag.message_detail or ""
        raise errors.MessageAlreadyExists(
            f"a message with that key is already in queue {queue!r} ({detail}); nothing of this request was stored"
        ) from exc
    except pg_errors.ForeignKeyViolation as exc:
        raise errors.ParentRowNotFound(
            f"the parent row for a message of queue {queue!r} does not exist ({exc.diag.message_detail}); "
            "insert the parent row first"
        ) from exc
    except (pg_errors.UndefinedTable, pg_errors.UndefinedFunction) as exc:
        raise errors.QueueNotFound(f"queue {queue!r} does not exist (it was dropped)") from exc
    except (pg_errors.InvalidTextRepresentation, pg_errors.DatetimeFieldOverflow,
            pg_errors.NumericValueOutOfRange, pg_errors.UntranslatableCharacter,
            pg_errors.CharacterNotInRepertoire, pg_errors.IntervalFieldOverflow) as exc:
        raise errors.InvalidArgument(f"a value does not fit its column: {exc.diag.message_primary}") from exc
    except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure, pg_errors.LockNotAvailable) as exc:
        raise errors.TransactionAborted(
            f"the transaction conflicted with another one ({exc.diag.message_primary}); nothing of it was "
            "committed: run it again"
        ) from exc
    except psycopg.Error as exc:
        if refused_as_read_only(exc):
            raise errors.DatabaseReadOnly(
                f"the database refused to write ({exc.diag.message_primary}): spanq is connected to a standby "
                "or a read-only server; nothing was committed. Retry: the server reconnects, and with "
                "target_session_attrs=read-write in the database URL it reaches the primary"
            ) from exc
        if isinstance(exc, psycopg.OperationalError):
            raise errors.StoreUnavailable(f"the database is unavailable: {exc}; nothing was committed, retry") from exc
        raise
    except psycopg_pool.PoolTimeout as exc:
        raise errors.StoreUnavailable(f"the database is unavailable: {exc}; nothing was committed, retry") from exc


def refused_as_read_only(exc: BaseException) -> bool:
    """Whether the database refused a statement for being read-only: a hot standby (still in
    recovery, or a primary taken for one) or default_transaction_read_only. Such a refusal
    changed nothing, and the connection is of no use for writing."""
    if isinstance(exc, errors.DatabaseReadOnly):
        return True
    if not isinstance(exc, psycopg.Error):
        return False
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):  # 25006: "cannot execute ... in a read-only transaction"
        return True
    # "cannot assign TransactionIds during recovery" (XX000), "cannot acquire lock mode ... while
    # recovery is in progress" (55000), "recovery is in progress" (55000).
    message = (exc.diag.message_primary or "").lower()
    return exc.sqlstate in ("XX000", "55000") and ("during recovery" in message or "recovery is in progress" in message)


def url_warnings(dsn: str) -> list[str]:
    """What an operator should hear about a database URL before it bites (logged at start)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return []
    hosts = str(params.get("host") or params.get("hostaddr") or "")
    attrs = str(params.get("target_session_attrs") or os.environ.get("PGTARGETSESSIONATTRS") or "any")
    if "," in hosts and attrs not in ("read-write", "primary"):
        return [f"the database URL names several hosts ({hosts}) without target_session_attrs=read-write: "
                "spanq may connect to a standby, where every write fails (UNAVAILABLE) until it reconnects "
                "elsewhere. Add target_session_attrs=read-write to the URL (docs/operations.md, High availability)"]
    return []


class _QuietRetries(logging.Filter):
    """Lets the spanq pool's "error connecting" warning through once per RETRY_LOG_INTERVAL:
    with attempts every half second for each lost connection, an outage would log
    twenty a second."""

    def __init__(self) -> None:
        super().__init__()
        self._last = -math.inf

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if not (str(record.msg).startswith("error connecting in") and args[:1] == ("spanq",)):
            return True  # another pool's, or another message
        now = time.monotonic()
        if now - self._last < RETRY_LOG_INTERVAL:
            return False
        self._last = now
        return True


RETRY_LOG_INTERVAL = 10.0
"""Seconds between two logged failures to reconnect (see _QuietRetries)."""
logging.getLogger("psycopg.pool").addFilter(_QuietRetries())


class _Backoff(AttemptWithBackoff):
    """psycopg_pool's reconnection backoff, capped: uncapped it doubles (+1, +3, +7, +15,
    +31 s...), so after a failover spanq served again only at the next attempt after the
    database came back, an outage as long again as the database's own."""

    INITIAL_DELAY = 0.1

    def __init__(self, *, timeout: float, max_delay: float) -> None:
        super().__init__(timeout=timeout)
        self.max_delay = max_delay

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, self.max_delay * random.uniform(0.8, 1.0))


class _Pool(psycopg_pool.AsyncConnectionPool):  # type: ignore[type-arg]
    """An AsyncConnectionPool whose attempts to replace a lost connection back off to at
    most ``reconnect_max_delay`` seconds, and never give up (reconnect_timeout is
    infinite): a server never needs a restart, whatever the outage's length."""

    def __init__(self, *args: Any, reconnect_max_delay: float, **kwargs: Any) -> None:
        super().__init__(*args, reconnect_timeout=math.inf, **kwargs)
        self.reconnect_max_delay = reconnect_max_delay

    async def _add_connection(self, attempt: AttemptWithBackoff | None,
                              growing: bool = False) -> None:
        # The pool makes an attempt object only when given none; ours caps its delay.
        if attempt is None:
            attempt = _Backoff(timeout=self.reconnect_timeout, max_delay=self.reconnect_max_delay)
        await super()._add_connection(attempt, growing=growing)


class Store:
    """The database gateway. Created closed; ``open()`` and ``close()`` are idempotent."""

    def __init__(self, dsn: str, *, min_size: int = 2, max_size: int = 10, timeout: float = 10.0,
                 faults: FaultInjector | None = None, reconnect_max_delay: float = RECONNECT_MAX_DELAY,
                 pooler: str = "auto", listen_dsn: str | None = None) -> None:
        if pooler not in POOLERS:
            raise ValueError(f"pooler must be one of {', '.join(POOLERS)}, not {pooler!r}")
        self.dsn = dsn
        self.listen_dsn = listen_dsn or dsn
        """Where the wake-up listener connects (a direct URL when dsn is a transaction pooler's)."""
        self.faults = faults or FaultInjector()
        self.pooler = pooler
        self.reconnect_max_delay = reconnect_max_delay
        self.transaction_pooled = pooler == "transaction"
        """Statements may reach another server connection than the last one did (a
        transaction-mode pooler): no server-side prepared statements (set by open() in
        "auto" mode)."""
        self._pool = _Pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            configure=self._configure,
            check=self._check,
            reset=self._returned,
            name="spanq",
            reconnect_max_delay=reconnect_max_delay,
        )
        self._last_returned: weakref.WeakKeyDictionary[Connection, float] = weakref.WeakKeyDictionary()

    async def _check(self, conn: Connection) -> None:
        """The pool's liveness check (a round trip), skipped for a connection returned in
        good order within RECENTLY_USED: under load it would double the round trips of a
        short transaction. If the server died since, the first statement fails, before any
        COMMIT, as StoreUnavailable."""
        returned = self._last_returned.get(conn)
        if returned is not None and time.monotonic() - returned < RECENTLY_USED and not conn.broken:
            return
        await psycopg_pool.AsyncConnectionPool.check_connection(conn)

    async def _returned(self, conn: Connection) -> None:
        if not conn.broken and conn.pgconn.status == psycopg.pq.ConnStatus.OK:
            self._last_returned[conn] = time.monotonic()

    async def _configure(self, conn: Connection) -> None:
        if self.transaction_pooled:
            # A statement prepared on one server connection would be run by name on another:
            # "prepared statement _pg3_1 does not exist", or another client's statement.
            conn.prepare_threshold = None
        # UTC on the wire so timestamps come back comparable and unambiguous.
        await conn.execute("SET TIME ZONE 'UTC'")
        await conn.commit()

    async def open(self) -> None:
        for warning in url_warnings(self.dsn) + (url_warnings(self.listen_dsn) if self.listen_dsn != self.dsn else []):
            logger.warning("%s", warning)
        if self.pooler == "auto" and self._pool.closed:
            with wrap_errors():
                self.transaction_pooled = await self._behind_pooler()
            if self.transaction_pooled:
                logger.warning(
                    "a connection pooler is between spanq and PostgreSQL (the backend pid a connection was "
                    "given is not the one PostgreSQL reports): running without server-side prepared statements, "
                    "as a transaction-mode pooler needs; give --pooler session if it pools sessions")
        await self._pool.open(wait=True, timeout=30)

    async def _behind_pooler(self) -> bool:
        """A pooler (PgBouncer, and the others we know) gives its clients a backend pid of
        its own making; PostgreSQL, or a plain TCP proxy, the real one."""
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, prepare_threshold=None) as conn:
            cur = await conn.execute(query("backend_pid"))
            row = await cur.fetchone()
            return row is not None and row[0] != conn.info.backend_pid

    async def close(self) -> None:
        await self._pool.close()

    async def __aenter__(self) -> "Store":
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- transactions -------------------------------------------------------

    @contextlib.asynccontextmanager
    async def transaction(self, queue: str | None = None, *, inject_faults: bool = False
                          ) -> AsyncIterator[Connection]:
        """One read-write transaction. An error before COMMIT rolls back and is
        StoreUnavailable (safe to retry); a connection lost while COMMIT is in
        flight is CommitOutcomeUnknown: the server cannot know, so it never guesses.
        With inject_faults, the configured FaultInjector may fake either case."""
        with wrap_errors(queue):
            async with self._connection() as conn:
                try:
                    yield conn
                except BaseException:
                    with contextlib.suppress(psycopg.Error):
                        await conn.rollback()
                    raise
                await self._commit(conn, inject_faults=inject_faults)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        """A pool connection, discarded (the pool replaces it) when the database refused a
        write for being read-only: it is a standby, and the next one may reach the primary."""
        async with self._pool.connection() as conn:
            try:
                yield conn
            except BaseException as exc:
                if refused_as_read_only(exc):
                    await conn.close()
                raise

    async def _commit(self, conn: Connection, *, inject_faults: bool) -> None:
        """COMMIT, with the configured faults when inject_faults: the one place that
        tells a failure before COMMIT (StoreUnavailable) from one during it (unknown)."""
        fault = self.faults.draw() if inject_faults else None
        if fault in ("unknown_commit_before", "unavailable_before"):
            await conn.rollback()
            raise self.faults.error(fault)
        try:
            await conn.commit()
        except psycopg.OperationalError as exc:
            raise errors.CommitOutcomeUnknown(
                f"the database connection failed while COMMIT was in flight ({exc}): {_UNKNOWN}"
            ) from exc
        if fault == "unknown_commit_after":
            raise self.faults.error(fault)

    async def hold(self, *, lock_timeout: timedelta) -> "HeldTransaction":
        """A transaction held open across calls (Spanner's read-write transactions):
        it keeps one pooled connection until committed or rolled back. A lock wait
        longer than lock_timeout aborts the statement (TransactionAborted) instead of
        queueing behind another open transaction."""
        with wrap_errors():
            conn = await self._pool.getconn()
            try:
                await conn.execute(query("held_begin"), {"lock_timeout": f"{int(lock_timeout.total_seconds() * 1000)}ms"})
            except BaseException:
                await self._pool.putconn(conn)
                raise
        return HeldTransaction(self, conn)

    @contextlib.asynccontextmanager
    async def read(self, queue: str | None = None) -> AsyncIterator[Connection]:
        """A connection for reads and self-contained statements (autocommitted)."""
        with wrap_errors(queue):
            async with self._connection() as conn:
                await conn.set_autocommit(True)
                try:
                    yield conn
                finally:
                    if not conn.closed:
                        await conn.set_autocommit(False)

    # -- migrations ---------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Applies missing migrations, under an advisory lock so concurrent servers take turns."""
        async with self.transaction() as conn:
            await conn.execute(query("advisory_lock"), {"lock_id": MIGRATION_LOCK_ID})
            await conn.execute(query("migration_table_create"))
            cur = await conn.execute(query("migration_applied_list"))
            applied = {row[0] for row in await cur.fetchall()}
            done = []
            recreate = columns = False
            for migration in MIGRATIONS:
                if migration.version in applied:
                    continue
                logger.info("applying migration %04d_%s", migration.version, migration.name)
                await conn.execute(migration.sql.encode())
                await conn.execute(query("migration_record"), {"version": migration.version, "name": migration.name})
                done.append(migration.version)
                recreate |= migration.recreates_queue_functions
                columns |= migration.adds_history_columns
            # Once, after the last migration: the current definitions need the current catalog
            # (and the functions the columns).
            if columns:
                for queue in await _fetch_queues(conn):
                    await conn.execute(QueueStatements(queue).history_columns_ddl())
            if recreate:
                await self._recreate_queue_functions(conn)
            return done

    @staticmethod
    async def _recreate_queue_functions(conn: Connection) -> None:
        """Every queue's receive and renew functions, from the definitions queue_create uses
        (CREATE OR REPLACE keeps their grants and owner)."""
        for queue in await _fetch_queues(conn):
            logger.info("re-creating the SQL functions of queue %s", queue.name)
            names = QueueStatements(queue)
            await conn.execute(names.receive_function_ddl())
            await conn.execute(names.renew_function_ddl())

    # -- the queue catalog --------------------------------------------------

    async def queue_get(self, name: str) -> QueueDef | None:
        async with self.read() as conn:
            cur = await conn.execute(query("queue_get"), {"name": name})
            row = await cur.fetchone()
        return _queue_from_row(row) if row else None

    async def queue_list(self, after: str, limit: int) -> list[QueueDef]:
        async with self.read() as conn:
            return await _fetch_queues(conn, after, limit)

    async def queue_create(self, queue: QueueDef, *, max_queues: int,
                           lock_timeout: timedelta = DDL_LOCK_TIMEOUT) -> QueueDef:
        """Creates the catalog row, table, indexes, trigger and SQL functions in one transaction."""
        names = QueueStatements(queue)
        what = f"CreateQueue of {queue.name!r}"
        async with self.transaction(queue.name) as conn:
            with _bounded_ddl(what, lock_timeout):
                tables = []
                if queue.parent_table:
                    tables.append((queue.parent_table, "SHARE ROW EXCLUSIVE"))  # what its foreign key takes
                if queue.dead_letter_queue:
                    tables.append((queue.dead_letter_queue, "ACCESS SHARE"))  # the receive function reads it
                await self._ddl_locks(conn, what, tables, lock_timeout)
                return await self._queue_create_locked(conn, queue, names, max_queues)

    @staticmethod
    async def _queue_create_locked(conn: Connection, queue: QueueDef, names: QueueStatements,
                                   max_queues: int) -> QueueDef:
        count = await _scalar(conn, "queue_count")
        if count >= max_queues:
            raise errors.LimitExceeded(
                f"the database has {count} queues, the configured maximum; drop one or raise --max-queues"
            )
        if await _scalar(conn, "relation_exists", name=queue.name):
            raise errors.QueueAlreadyExists(f"a queue, table or type named {queue.name!r} already exists")
        taken = await _scalar(conn, "relations_taken", names=[names.deliver_time_index, names.lease_token_index])
        if taken is not None:
            raise errors.QueueAlreadyExists(
                f"a table or index named {taken!r} already exists, and queue {queue.name!r} needs that name for "
                "an index of its own; rename or drop that relation, or choose another queue name"
            )
        parent = None
        if queue.parent_table:
            width = await _scalar(conn, "parent_key_width", name=queue.parent_table)
            if width is None:
                raise errors.InvalidArgument(
                    f"parent table {queue.parent_table!r} does not exist in schema public or has no primary key"
                )
            if width > len(queue.key_columns):
                raise errors.InvalidArgument(
                    f"parent table {queue.parent_table!r} has {width} primary-key columns; the queue's key "
                    f"must start with as many columns matching them, but it has {len(queue.key_columns)}"
                )
            parent = query(
                "queue_parent_constraint",
                parent_key_columns=identifiers(c.name for c in queue.key_columns[:width]),
                parent_table=sql.Identifier("public", queue.parent_table),
            )
        if queue.dead_letter_queue:
            target = await _fetch_queue(conn, queue.dead_letter_queue)
            if target is None:
                raise errors.InvalidArgument(f"dead-letter queue {queue.dead_letter_queue!r} does not exist")
            if target.key_columns != queue.key_columns or target.payload_type != queue.payload_type:
                raise errors.InvalidArgument(
                    f"dead-letter queue {queue.dead_letter_queue!r} must have the same key columns and payload "
                    "type as the queue"
                )
        cur = await conn.execute(query("queue_insert"), _queue_params(queue))
        row = await cur.fetchone()
        assert row is not None
        try:
            await conn.execute(
                query(
                    "queue_table_create",
                    queue=names.table,
                    key_column_definitions=names.key_definitions,
                    key_columns=names.keys,
                    payload_type=sql.SQL(SQL_TYPES[queue.payload_type]),
                    parent_constraint=parent or sql.SQL(""),
                    deliver_time_index=sql.Identifier(names.deliver_time_index),
                    notify_trigger=sql.Identifier("spanq_notify_send"),
                )
            )
        except (pg_errors.DatatypeMismatch, pg_errors.InvalidForeignKey) as exc:
            raise errors.InvalidArgument(
                f"the queue's leading key columns must match the primary key of {queue.parent_table!r}: "
                f"{exc.diag.message_primary}"
            ) from exc
        await conn.execute(names.token_index_ddl())
        await conn.execute(names.history_columns_ddl())
        await conn.execute(names.receive_function_ddl())
        await conn.execute(names.renew_function_ddl())
        return dataclasses.replace(queue, create_time=row[0])

    async def queue_drop(self, queue: QueueDef, *, lock_timeout: timedelta = DDL_LOCK_TIMEOUT) -> None:
        names = QueueStatements(queue)
        what = f"DropQueue of {queue.name!r}"
        async with self.transaction(queue.name) as conn:
            with _bounded_ddl(what, lock_timeout):
                await _refuse_if_depended_on(conn, queue.name)  # before waiting for locks only to refuse
                # DROP TABLE takes ACCESS EXCLUSIVE on the table and on the parent its foreign key references.
                tables = [(queue.name, "ACCESS EXCLUSIVE")]
                if queue.parent_table:
                    tables.append((queue.parent_table, "ACCESS EXCLUSIVE"))
                await self._ddl_locks(conn, what, tables, lock_timeout)
                await _refuse_if_depended_on(conn, queue.name)  # under the catalog lock: no child can appear now
                try:
                    cur = await conn.execute(query("queue_delete"), {"name": queue.name})
                except (pg_errors.ForeignKeyViolation, pg_errors.RestrictViolation) as exc:  # ON DELETE RESTRICT
                    raise errors.FailedPrecondition(
                        f"queue {queue.name!r} is the dead-letter queue of another queue; drop that queue first"
                    ) from exc
                if cur.rowcount == 0:
                    raise errors.QueueNotFound(f"queue {queue.name!r} does not exist")
                try:
                    await conn.execute(
                        query(
                            "queue_drop",
                            queue=names.table,
                            receive_function=names.receive_function,
                            renew_function=names.renew_function,
                        )
                    )
                except pg_errors.DependentObjectsStillExist as exc:  # a table of the application's references it
                    raise errors.FailedPrecondition(
                        f"queue {queue.name!r} cannot be dropped while other objects depend on its table "
                        f"({exc.diag.message_detail or exc.diag.message_primary}); drop those first, or their "
                        "references to it",
                        queue=queue.name,
                    ) from exc

    @staticmethod
    async def _ddl_locks(conn: Connection, what: str, tables: Sequence[tuple[str, str]],
                         lock_timeout: timedelta) -> None:
        """Takes what a queue DDL must lock, tables first, then the catalog lock, every
        wait within lock_timeout in all: a wait past it fails the DDL (TransactionAborted),
        never stalls it. A table is waited for in slices of DDL_LOCK_SLICE (see there).
        No DDL waits on a table while it holds the catalog lock, which all queue DDL needs."""
        deadline = time.monotonic() + lock_timeout.total_seconds()
        # A first statement, so that the transaction is open and each attempt below is a
        # savepoint in it (on an idle connection, conn.transaction() would BEGIN and COMMIT).
        await conn.execute(query("ddl_lock_timeout"), {"lock_timeout": _milliseconds(DDL_LOCK_SLICE)})
        for table, mode in tables:
            statement = query("table_lock", table=sql.Identifier("public", table), mode=sql.SQL(mode))
            while True:
                wait = min(DDL_LOCK_SLICE, deadline - time.monotonic())
                try:
                    async with conn.transaction():  # a savepoint: a lock timeout leaves the transaction usable
                        await conn.execute(query("ddl_lock_timeout"), {"lock_timeout": _milliseconds(wait)})
                        await conn.execute(statement)
                    break
                except (pg_errors.UndefinedTable, pg_errors.WrongObjectType):
                    break  # no such table: the DDL's own checks say so
                except pg_errors.LockNotAvailable as exc:
                    if time.monotonic() >= deadline:
                        raise _lock_wait_failed(what, f"table {table!r}", lock_timeout) from exc
        # The rest of the transaction (the catalog lock, the DDL itself) waits what is left.
        await conn.execute(query("ddl_lock_timeout"), {"lock_timeout": _milliseconds(deadline - time.monotonic())})
        await conn.execute(query("advisory_lock"), {"lock_id": CATALOG_LOCK_ID})

    # -- messages -----------------------------------------------------------

    async def messages_insert(
        self, conn: Connection, queue: QueueDef, messages: Sequence[OutgoingMessage], now: datetime | None
    ) -> None:
        with wrap_errors(queue.name):
            await conn.execute(_queue_sql(queue).insert, _insert_params(queue, messages, now))

    async def messages_insert_claimed(
        self, conn: Connection | None, queue: QueueDef, sends: Sequence[LedgeredSend], now: datetime | None,
    ) -> set[str]:
        """Claims each send's request_id in the commit ledger, with its response, and
        stores the messages of those this transaction claimed, in one statement.
        Returns the request_ids claimed; the others were committed before.
        Without conn the statement commits by itself (see ``_claiming``)."""
        messages = [m for send in sends for m in send.messages]
        params = _insert_params(queue, messages, now)
        params.update(_claim_params(sends, [len(send.messages) for send in sends]))
        rows = await self._claiming(conn, queue, _queue_sql(queue).insert_claimed, params)
        return {row[0] for row in rows}

    async def messages_ack_claimed_group(
        self, conn: Connection | None, queue: QueueDef, acks: Sequence[LedgeredAck], now: datetime | None,
    ) -> dict[str, bool | None]:
        """A commit group's Ack requests to one queue, in one statement (see
        message_ack_claimed_group in queries.sql): a request whose every message is
        there under the lease token given is claimed in the commit ledger with its
        response (all acked) and its messages deleted (True), unless its request_id was
        committed before (False: nothing deleted). Any other request is neither claimed
        nor applied (None): the caller runs it alone to learn its exact outcome.
        Without conn the statement commits by itself (see ``_claiming``)."""
        statements = _queue_sql(queue)
        items = [item for ack in acks for item in ack.items]
        params = statements.ack_params(items)
        counts = [len(ack.items) for ack in acks]
        params.update(_claim_params(acks, counts), counts=_array_literal(counts), now=now)
        rows = await self._claiming(conn, queue, statements.ack_claimed_group, params)
        return {request_id: claimed if ready else None for request_id, ready, claimed in rows}

    async def _claiming(self, conn: Connection | None, queue: QueueDef, statement: bytes, params: dict[str, Any]
                        ) -> list[Any]:
        """Runs a statement that claims request_ids in the commit ledger; its rows.

        Without conn the statement is a transaction by itself (autocommit): one round
        trip instead of three (BEGIN, the statement, COMMIT). A connection lost while it
        runs is then CommitOutcomeUnknown; an error the database reports for it (a
        deadlock, a duplicate key) means it did not commit."""
        if conn is not None:
            with wrap_errors(queue.name):
                return await (await conn.execute(statement, params)).fetchall()
        async with self.read(queue.name) as own:
            try:
                return await (await own.execute(statement, params)).fetchall()
            except psycopg.OperationalError as exc:
                if isinstance(exc, (pg_errors.DeadlockDetected, pg_errors.SerializationFailure,
                                    pg_errors.LockNotAvailable)) or refused_as_read_only(exc):
                    raise  # the statement failed: wrap_errors makes it TransactionAborted or DatabaseReadOnly
                raise errors.CommitOutcomeUnknown(
                    f"the database connection failed while the statement that commits was in flight ({exc}): "
                    f"{_UNKNOWN}"
                ) from exc

    async def messages_lease(
        self, queue: QueueDef, *, max_batch_size: int, lease_duration: timedelta, lease_prefix: str,
        now: datetime | None,
    ) -> list[LeasedMessage]:
        statements = _queue_sql(queue)
        width = len(queue.key_columns)
        async with self.read(queue.name) as conn:
            try:
                cur = await conn.execute(
                    statements.lease,
                    {"max_batch_size": max_batch_size, "lease_duration": lease_duration,
                     "lease_prefix": lease_prefix, "now": now, "queue_name": queue.name,
                     "create_time": queue.create_time},
                )
            except pg_errors.InvalidTextRepresentation as exc:
                if "was dropped and created again" not in (exc.diag.message_primary or ""):
                    raise
                raise errors.QueueNotFound(
                    f"queue {queue.name!r} was dropped (and a queue of that name created again); "
                    "open a new stream to receive from the new queue"
                ) from exc
            try:
                rows = await cur.fetchall()
            except (psycopg.DataError, ValueError, RecursionError):
                # A value written by SQL that Python cannot hold: the rows are leased
                # already, so read them again with Unreadable in place of such values.
                rows = _rows_leniently(cur)
        # The row is the key columns, then LeasedMessage's other fields in order.
        if width == 1:
            return [LeasedMessage((row[0],), *row[1:]) for row in rows]
        return [LeasedMessage(tuple(row[:width]), *row[width:]) for row in rows]

    async def leased_history(self, queue: QueueDef, batch: list[LeasedMessage]) -> list[LeasedMessage]:
        """The batch with the dead-letter history of those messages that have one."""
        async with self.read(queue.name) as conn:
            cur = await conn.execute(QueueStatements(queue).by_token("message_lease_history"),
                                     {"lease_tokens": [m.lease_token for m in batch]})
            found = {row[0]: _history(row[1:]) for row in await cur.fetchall()}
        if not found:
            return batch
        return [m._replace(dead_letter=found[m.lease_token]) if m.lease_token in found else m for m in batch]

    async def messages_ack(
        self, conn: Connection, queue: QueueDef, items: Sequence[AckItem], *, ignore_not_found: bool
    ) -> list[AckResult]:
        """Deletes the acked messages; raises (and the caller rolls back) if one cannot be acked."""
        statements = _queue_sql(queue)
        with wrap_errors(queue.name):
            cur = await conn.execute(statements.ack, statements.ack_params(items))
            rows = await cur.fetchall()
            return await self._ack_results(conn, queue, items, rows, ignore_not_found=ignore_not_found)

    async def messages_ack_claimed(
        self, conn: Connection, queue: QueueDef, items: Sequence[AckItem], *, ignore_not_found: bool,
        request_id: str, fingerprint: bytes, response: bytes, now: datetime | None,
        all_acked: list[AckResult],
    ) -> list[AckResult] | None:
        """``ledger_claim`` (recording ``response``) and ``messages_ack`` in one statement;
        None, and nothing deleted, when a committed transaction has request_id;
        ``all_acked`` itself when every message was acked."""
        statements = _queue_sql(queue)
        params = statements.ack_params(items)
        params.update(request_id=request_id, fingerprint=fingerprint, response=response, now=now)
        with wrap_errors(queue.name):
            cur = await conn.execute(statements.ack_claimed, params)
            rows = await cur.fetchall()
            if not rows[0][0]:
                return None
            if rows[0][1] is None:  # key columns are NOT NULL: the row of "none deleted"
                rows = []
            elif len(rows) == len(items):  # distinct keys (Mutator.prepare), and only they can go: all did
                return all_acked
            return await self._ack_results(conn, queue, items, [row[1:] for row in rows],
                                           ignore_not_found=ignore_not_found)

    @staticmethod
    async def _ack_results(conn: Connection, queue: QueueDef, items: Sequence[AckItem], rows: Sequence[Sequence[Any]],
                           *, ignore_not_found: bool) -> list[AckResult]:
        """The results of an ack from the keys it deleted; raises if one cannot be acked."""
        if len(rows) == len(items):
            # The keys are distinct (Mutator.prepare) and only they can be deleted: all were.
            return [AckResult(i.key, True) for i in items]
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
        for item in missing:
            if _normal_key(item.key) in still_there:
                raise errors.LeaseNotHeld(
                    f"cannot ack {list(item.key)!r} in queue {queue.name!r}: lease token {item.lease_token!r} is no "
                    "longer current (the lease was renewed, released or granted to another receiver); nothing "
                    "was acked",
                    key=json.dumps(list(item.key), default=str),
                )
            if not ignore_not_found:
                raise errors.MessageNotFound(
                    f"cannot ack {list(item.key)!r} in queue {queue.name!r}: the message is gone (already "
                    "acknowledged or deleted); nothing was acked. Set ignore_not_found to accept that",
                    key=json.dumps(list(item.key), default=str),
                )
        return [AckResult(i.key, _normal_key(i.key) in deleted) for i in items]

    async def leases_renew(
        self, conn: Connection, queue: QueueDef, tokens: Sequence[str], lease_duration: timedelta,
        now: datetime | None, reason: str | None = None,
    ) -> list[RenewResult]:
        names = QueueStatements(queue)
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
        async with self.read(queue.name) as conn:
            cur = await conn.execute(
                QueueStatements(queue).by_token("lease_return"),
                {"lease_tokens": [m.lease_token for m in leased],
                 "deliver_times": [m.deliver_time for m in leased], "queue_name": queue.name},
            )
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
                                   dead_letter_queue=sql.Identifier("public", queue.dead_letter_queue))
        async with self.read(queue.name) as conn:
            cur = await conn.execute(statement, {"lease_tokens": list(lease_tokens), "reason": reason,
                                                 "queue_name": queue.name, "max_backoff": queue.max_backoff,
                                                 "now": now})
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def leases_lapsed(self, queue: QueueDef, lease_tokens: Sequence[str], now: datetime | None
                            ) -> tuple[int, int]:
        """Of these tokens: how many still hold their message past the lease's end (lapsed),
        and how many are still live."""
        async with self.read(queue.name) as conn:
            cur = await conn.execute(_queue_sql(queue).lapsed, {"lease_tokens": list(lease_tokens), "now": now})
            row = await cur.fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    async def leases_held(self, queue: QueueDef, lease_prefix: str, lease_tokens: Sequence[str],
                          now: datetime | None) -> dict[str, datetime]:
        """The live leases under one stream's token prefix, of the messages its tokens as
        this server knows them name (and any the token index finds): token -> lease end."""
        async with self.read(queue.name) as conn:
            cur = await conn.execute(_queue_sql(queue).held, {"lease_prefix": lease_prefix,
                                                               "lease_tokens": list(lease_tokens), "now": now})
            return {token: end for token, end in await cur.fetchall()}

    async def next_delivery_in(self, queue: QueueDef, now: datetime | None) -> float | None:
        """Seconds until the queue's earliest deliver_time; None when the queue is empty."""
        async with self.read(queue.name) as conn:
            cur = await conn.execute(_queue_sql(queue).next_delivery, {"now": now})
            row = await cur.fetchone()
        return float(row[0]) if row else None

    async def messages_select(
        self, conn: Connection | None, queue: QueueDef, *, key_equals: Sequence[tuple[str, Any]] = (),
        deliver_time_bounds: Sequence[tuple[str, datetime | None, timedelta]] = (),
        order_by: str | None = None, descending: bool = False, limit: int | None = None,
        now: datetime | None = None,
    ) -> list[tuple[Key, Any, datetime]]:
        """Reads messages (key, payload, deliver_time) without leasing them: a plain
        SELECT over the queue. key_equals names key columns and values;
        deliver_time_bounds are (operator, instant or None for now, offset);
        order_by is a key column or deliver_time (default: the primary key). With
        conn, inside that transaction (seeing its own writes); else autocommitted."""
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
            order = sql.SQL(", ").join(sql.SQL("{}{}").format(sql.Identifier("m", c.name), direction)
                                       for c in queue.key_columns)
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
            if conn is None:
                async with self.read(queue.name) as own:
                    rows = await (await own.execute(statement, params)).fetchall()
            else:
                rows = await (await conn.execute(statement, params)).fetchall()
        return [(tuple(_normal_key(tuple(row[:width]))), _normal_value(row[width]), row[width + 1]) for row in rows]

    # -- operator tools: stats, peek, purge, redrive (admin.py) -----------------

    async def queue_stats(self, queue: QueueDef, dead_letter_queue: QueueDef | None,
                          now: datetime | None) -> QueueCounts:
        """Exact counts by state, in one transaction (so one snapshot with the dead-letter count)."""
        async with self.transaction(queue.name) as conn:
            cur = await conn.execute(query("queue_stats", queue=QueueStatements(queue).table), {"now": now})
            row = await cur.fetchone()
            assert row is not None  # the clock row is always there, joined to no message or some
            ready, scheduled, leased, age, read_time = row
            dead = 0
            if dead_letter_queue is not None:
                cur = await conn.execute(query("queue_message_count", queue=QueueStatements(dead_letter_queue).table))
                dead = (await cur.fetchone() or (0,))[0]
        return QueueCounts(int(ready), int(scheduled), int(leased), int(dead), float(age), read_time)

    async def messages_peek(self, queue: QueueDef, after: tuple[datetime, Key] | None, limit: int,
                            now: datetime | None) -> list[PeekedMessage]:
        """Up to limit messages in delivery order after (deliver_time, key), unleased."""
        names = QueueStatements(queue)
        params: dict[str, Any] = {"limit": limit, "now": now}
        condition: sql.Composable = sql.SQL("TRUE")
        if after is not None:
            params["after_time"] = after[0]
            values = [sql.SQL("{}::timestamptz").format(sql.Placeholder("after_time"))]
            for i, (column, value) in enumerate(zip(queue.key_columns, after[1])):
                params[f"a{i}"] = value
                values.append(sql.SQL("{}::{}").format(sql.Placeholder(f"a{i}"), sql.SQL(SQL_TYPES[column.type])))
            condition = sql.SQL("(m.deliver_time, {}) > ({})").format(
                names.qualified_keys("m"), sql.SQL(", ").join(values))
        statement = query("message_peek", key_columns=names.qualified_keys("m"), queue=names.table, after=condition)
        width = len(queue.key_columns)
        async with self.read(queue.name) as conn:
            rows = await (await conn.execute(statement, params)).fetchall()
        return [PeekedMessage(_normal_key(tuple(row[:width])), _normal_value(row[width]), *row[width + 1:width + 7])
                ._replace(dead_letter=_history(row[width + 7:])) for row in rows]

    async def messages_purge(self, queue: QueueDef, sent_before: datetime | None) -> int:
        """Deletes every message (or those sent before sent_before) in one transaction; how many."""
        async with self.transaction(queue.name) as conn:
            cur = await conn.execute(query("message_purge", queue=QueueStatements(queue).table),
                                     {"sent_before": sent_before})
            return cur.rowcount

    async def queue_dead_letter_sources(self, name: str) -> list[str]:
        """The queues whose dead_letter_queue is this one."""
        async with self.read() as conn:
            rows = await (await conn.execute(query("queue_dead_letter_sources"), {"name": name})).fetchall()
        return [row[0] for row in rows]

    async def redrive_sources(self, dead_letter_queue: QueueDef) -> list[str | None]:
        """The source queues its messages recorded (None among them: some recorded none)."""
        async with self.read(dead_letter_queue.name) as conn:
            cur = await conn.execute(query("message_redrive_sources", dead_letter_queue=QueueStatements(
                dead_letter_queue).table))
            return sorted((row[0] for row in await cur.fetchall()), key=lambda s: (s is None, s or ""))

    async def messages_redrive(self, dead_letter_queue: QueueDef, target: QueueDef, limit: int,
                               now: datetime | None, source: RedriveSource = ALL_SOURCES) -> int:
        """Moves one batch (up to limit messages) from dead_letter_queue to target, in one
        transaction; how many moved. A key sent to the target meanwhile fails the whole
        batch with MessageAlreadyExists, and nothing moves."""
        async with self.transaction(target.name) as conn:
            cur = await conn.execute(_redrive_statement("message_redrive", dead_letter_queue, target, source),
                                     {"limit": limit, "now": now})
            return cur.rowcount

    async def redrive_left(self, dead_letter_queue: QueueDef, target: QueueDef,
                           now: datetime | None, source: RedriveSource = ALL_SOURCES) -> tuple[int, int]:
        """(messages in dead_letter_queue, of which a redrive to target cannot move now)."""
        async with self.read(dead_letter_queue.name) as conn:
            cur = await conn.execute(_redrive_statement("message_redrive_left", dead_letter_queue, target, source),
                                     {"now": now})
            total, stuck = await cur.fetchone() or (0, 0)
        return int(total), int(stuck)

    # -- the Spanner front-end's records (spanner/admin.py, spanner/names.py) ----

    async def spanner_names_put(self, queue: str, database: str | None, spelled: dict[str, Any]) -> None:
        async with self.transaction(queue) as conn:
            await conn.execute(query("spanner_names_put"),
                               {"queue": queue, "database": database, "spelled": Jsonb(spelled)})

    async def spanner_names_get(self, queue: str) -> dict[str, Any] | None:
        async with self.read(queue) as conn:
            return await _scalar(conn, "spanner_names_get", queue=queue)  # type: ignore[no-any-return]

    async def spanner_database_queues(self, database: str) -> list[str]:
        async with self.read() as conn:
            cur = await conn.execute(query("spanner_database_queues"), {"database": database})
            return [row[0] for row in await cur.fetchall()]

    async def spanner_record_put(self, kind: str, name: str, message: bytes, instance: str | None = None) -> bool:
        """Records an instance or database (``kind``); False when one of the name exists."""
        async with self.transaction() as conn:
            with wrap_errors():
                return bool(await _scalar(conn, f"spanner_{kind}_put", name=name, instance=instance,
                                          record=message))

    async def spanner_record_get(self, kind: str, name: str) -> bytes | None:
        async with self.read() as conn:
            found = await _scalar(conn, f"spanner_{kind}_get", name=name)
        return bytes(found) if found is not None else None

    async def spanner_record_list(self, kind: str, parent: str) -> list[bytes]:
        params = {"prefix": parent + "/"} if kind == "instance" else {"instance": parent}
        async with self.read() as conn:
            cur = await conn.execute(query(f"spanner_{kind}_list"), params)
            return [bytes(row[0]) for row in await cur.fetchall()]

    async def spanner_database_namespace(self, name: str) -> tuple[str, bytes] | None:
        """A Spanner database's namespace and record."""
        async with self.read() as conn:
            cur = await conn.execute(query("spanner_database_namespace"), {"name": name})
            row = await cur.fetchone()
        return (row[0], bytes(row[1])) if row else None

    async def spanner_record_delete(self, kind: str, name: str) -> bool:
        async with self.transaction() as conn:
            return bool(await _scalar(conn, f"spanner_{kind}_delete", name=name))

    async def notify(self, conn: Connection, queue: str) -> None:
        await conn.execute(query("wakeup_notify"), {"queue": queue})

    async def notify_probe(self, payload: str) -> None:
        """A wake-up notification with ``payload`` (no queue's name), through the pool as a
        send's would go: the listener proves it listens by hearing it."""
        async with self.read() as conn:
            await self.notify(conn, payload)

    # -- the commit ledger ----------------------------------------------------

    async def ledger_claim(self, conn: Connection, request_id: str, fingerprint: bytes, now: datetime | None) -> bool:
        """True if this transaction now owns request_id; False if a committed one has it."""
        cur = await conn.execute(
            query("ledger_claim"), {"request_id": request_id, "fingerprint": fingerprint, "now": now}
        )
        return await cur.fetchone() is not None

    async def ledger_record(self, conn: Connection, request_id: str, response: bytes) -> None:
        await conn.execute(query("ledger_record"), {"request_id": request_id, "response": response})

    async def ledger_lookup(self, request_id: str) -> tuple[bytes, bytes] | None:
        """(fingerprint, response) of a committed request_id, or None."""
        async with self.read() as conn:
            cur = await conn.execute(query("ledger_lookup"), {"request_id": request_id})
            row = await cur.fetchone()
        return (bytes(row[0]), bytes(row[1])) if row else None

    async def ledger_prune(self, retention: timedelta, now: datetime | None, batch_size: int = 1000) -> int:
        """Deletes one batch of expired entries; returns how many."""
        async with self.read() as conn:
            cur = await conn.execute(
                query("ledger_prune"), {"retention": retention, "now": now, "batch_size": batch_size}
            )
            return cur.rowcount

    # -- metrics ----------------------------------------------------------------

    def pool_stats(self) -> dict[str, int]:
        """psycopg_pool's figures: pool_max, pool_size, pool_available, requests_waiting, and
        counters since the pool opened (requests_num, requests_queued, requests_wait_ms, ...)."""
        return self._pool.get_stats()

    async def queue_gauges(self, *, now: datetime | None, cap: int, timeout: float) -> list[QueueGauges]:
        """Every queue's ready and stored messages (each counted up to cap) and its oldest
        message's age, in one statement (see metrics_queue_gauges in queries.sql)."""
        async with self.transaction() as conn:
            await conn.execute(query("metrics_begin"), {"statement_timeout": f"{int(timeout * 1000)}ms"})
            queues = await _fetch_queues(conn)
            if not queues:
                return []
            statement = sql.SQL("\nUNION ALL\n").join(
                query("metrics_queue_gauges", queue=QueueStatements(q).table, queue_name=sql.Literal(q.name))
                for q in queues
            )
            cur = await conn.execute(statement, {"cap": cap, "now": now})
            return [QueueGauges(name, int(ready), int(stored), float(age), int(dead))
                    for name, ready, stored, age, dead in await cur.fetchall()]

    # -- the wake-up listener -------------------------------------------------

    async def listen(self) -> psycopg.AsyncConnection[Any]:
        """A dedicated autocommit connection, outside the pool, listening for wake-ups."""
        with wrap_errors():
            conn = await psycopg.AsyncConnection.connect(self.listen_dsn, autocommit=True, prepare_threshold=None)
            try:
                await conn.execute(query("wakeup_listen"))
            except BaseException:  # also cancellation by a stop() right after start(): close, do not leak
                await conn.close()
                raise
        return conn


class HeldTransaction:
    """One transaction held open across calls (from ``Store.hold``). Each statement
    runs in a savepoint: when it fails, its own effects are undone and the
    transaction stays usable, as Spanner's statement-level errors leave it.
    ``commit`` and ``rollback`` end it and give the connection back to the pool;
    ``rollback`` is safe to call again."""

    def __init__(self, store: Store, conn: Connection) -> None:
        self._store = store
        self._conn: Connection | None = conn

    @property
    def active(self) -> bool:
        return self._conn is not None

    @contextlib.asynccontextmanager
    async def statement(self, queue: str | None = None) -> AsyncIterator[Connection]:
        conn = self._conn
        if conn is None:
            raise errors.TransactionAborted("the transaction has already ended; run it again")
        try:
            with wrap_errors(queue):
                async with conn.transaction():  # a SAVEPOINT: the transaction is already in progress
                    yield conn
        except errors.DatabaseReadOnly:
            await conn.close()  # a standby's: useless for the transaction; rollback() gives it back
            raise

    async def commit(self, *, inject_faults: bool = False) -> None:
        conn = self._conn
        if conn is None:
            raise errors.TransactionAborted("the transaction has already ended; run it again")
        self._conn = None
        try:
            with wrap_errors():
                await self._store._commit(conn, inject_faults=inject_faults)
        finally:
            with contextlib.suppress(psycopg.Error):
                await conn.rollback()  # a no-op after COMMIT; leaves a failed one clean for the pool
            await self._store._pool.putconn(conn)

    async def rollback(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(psycopg.Error):
            await conn.rollback()
        await self._store._pool.putconn(conn)


class _QueueSql:
    """One queue's hot statements, composed once (to bytes) rather than per call:
    composing them was a few percent of the server's CPU while draining, ~7% on sends."""

    def __init__(self, queue: QueueDef) -> None:
        names = self.names = QueueStatements(queue)
        inserts = dict(queue=names.table, key_columns=names.keys, s_key_columns=names.qualified_keys("s"),
                       key_arrays=names.key_arrays, payload_type=sql.SQL(SQL_TYPES[queue.payload_type]))
        self.insert = query("message_insert", **inserts).as_bytes(None)
        self.insert_claimed = query("message_insert_claimed", **inserts).as_bytes(None)
        self.lease = query("message_lease_batch", receive_function=names.receive_function).as_bytes(None)
        self.next_delivery = query("message_next_delivery", queue=names.table).as_bytes(None)
        self.held = names.by_token("lease_held").as_bytes(None)
        self.lapsed = names.by_token("lease_lapsed").as_bytes(None)
        acks = dict(queue=names.table, key_arrays=names.key_arrays, key_columns=names.keys,
                    m_key_columns=names.qualified_keys("m"), a_key_columns=names.qualified_keys("a"))
        self.ack = query("message_ack", **acks).as_bytes(None)
        self.ack_claimed = query("message_ack_claimed", **acks).as_bytes(None)
        self.ack_claimed_group = query("message_ack_claimed_group", **acks).as_bytes(None)
        self._width = len(queue.key_columns)

    def ack_params(self, items: Sequence[AckItem]) -> dict[str, Any]:
        params = self.key_array_params([i.key for i in items])
        params["lease_tokens"] = _array_literal([i.lease_token for i in items])
        return params

    def key_array_params(self, keys: Sequence[Key]) -> dict[str, Any]:
        if self._width == 1:
            return {"k0": _array_literal([key[0] for key in keys])}
        return {f"k{i}": _array_literal([key[i] for key in keys]) for i in range(self._width)}


@functools.lru_cache(maxsize=256)
def _queue_sql(queue: QueueDef) -> _QueueSql:
    return _QueueSql(queue)


def _array_literal(values: list[Any]) -> Any:
    """A text[] or bigint[] parameter as one array literal, built by C string methods:
    psycopg's list dumper (a Python loop per element) was 6% of the server's CPU while
    acking. Other lists (NULLs, bytes, timestamps, a NUL in a string) go to psycopg."""
    kinds = set(map(type, values))
    if kinds == {str}:
        joined = "\x00".join(values)
        if joined.count("\x00") != len(values) - 1:
            return values  # a NUL in a value: PostgreSQL rejects it, as before
        return '{"' + joined.replace("\\", "\\\\").replace('"', '\\"').replace("\x00", '","') + '"}'
    if kinds == {int}:
        return "{" + ",".join(map(str, values)) + "}"
    if kinds == {type(None)}:
        return None  # unnest pads a NULL array with NULLs
    return values


def _claim_params(requests: Sequence[LedgeredSend | LedgeredAck], rows: Sequence[int]) -> dict[str, Any]:
    """A group statement's commit-ledger arrays: each request's id, fingerprint and
    response, and the owning request_id of each of its ``rows`` (messages sent or
    acked). Array literals, not lists: psycopg's list dumpers were a third of an
    Ack statement's CPU."""
    return dict(
        request_ids=_array_literal([r.request_id for r in requests]),
        fingerprints=_bytea_array_literal([r.fingerprint for r in requests]),
        responses=_bytea_array_literal([r.response for r in requests]),
        owners=_array_literal([r.request_id for r, n in zip(requests, rows) for _ in range(n)]),
    )


def _bytea_array_literal(values: list[bytes]) -> str:
    """A bytea[] parameter as one array literal of hex strings (see _array_literal)."""
    return "{" + ",".join(['"\\\\x' + v.hex() + '"' for v in values]) + "}"


_COMPARISONS = {"=": "=", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "!=": "<>", "<>": "<>"}


@contextlib.contextmanager
def _bounded_ddl(what: str, lock_timeout: timedelta) -> Iterator[None]:
    """A lock wait of queue DDL that ran out (ddl_lock_timeout) -> what to do about it."""
    try:
        yield
    except pg_errors.LockNotAvailable as exc:
        raise _lock_wait_failed(what, f"a lock ({exc.diag.message_primary})", lock_timeout) from exc


def _lock_wait_failed(what: str, waited_for: str, lock_timeout: timedelta) -> errors.TransactionAborted:
    seconds = f"{lock_timeout.total_seconds():g}s"
    return errors.TransactionAborted(
        f"{what} waited {seconds} for {waited_for}, which another open transaction holds (one that used the "
        "table: an idle-in-transaction psql session, a Spanner read-write transaction, another server's queue "
        "DDL); nothing changed. Retry when that transaction ends, or end it (pg_stat_activity shows it); "
        "the server waits --ddl-lock-timeout at most",
        lock_wait=seconds,
    )


def _milliseconds(seconds: float) -> str:
    """A lock_timeout setting; at least 1ms (0 would mean no timeout at all)."""
    return f"{max(1, int(seconds * 1000))}ms"


async def _refuse_if_depended_on(conn: Connection, name: str) -> None:
    """FailedPrecondition, naming them, while queues name this one as their parent or dead-letter queue."""
    cur = await conn.execute(query("queue_dependents"), {"name": name})
    rows = await cur.fetchall()
    children = [child for child, is_child in rows if is_child]
    if children:
        raise errors.FailedPrecondition(
            f"queue {name!r} is the parent table of queue(s) {', '.join(map(repr, children))} (their messages "
            "belong to its rows); drop those queues first",
            queue=name, child=children[0],
        )
    if rows:
        raise errors.FailedPrecondition(
            f"queue {name!r} is the dead-letter queue of queue(s) {', '.join(repr(r[0]) for r in rows)}; drop "
            "those queues first",
            queue=name,
        )


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


async def _scalar(conn: Connection, statement: str, /, **params: Any) -> Any:
    cur = await conn.execute(query(statement), params)
    row = await cur.fetchone()
    return row[0] if row else None


async def _fetch_queues(conn: Connection, after: str = "", limit: int | None = None) -> list[QueueDef]:
    """Queues in name order after ``after``; all of them without a limit."""
    cur = await conn.execute(query("queue_list"), {"after": after, "limit": limit})
    return [_queue_from_row(row) for row in await cur.fetchall()]


async def _fetch_queue(conn: Connection, name: str) -> QueueDef | None:
    cur = await conn.execute(query("queue_get"), {"name": name})
    row = await cur.fetchone()
    return _queue_from_row(row) if row else None


def _queue_params(queue: QueueDef) -> dict[str, Any]:
    return {
        "name": queue.name,
        "key_columns": Jsonb([{"name": c.name, "type": c.type.value} for c in queue.key_columns]),
        "payload_type": queue.payload_type.value,
        "key_generated": queue.key_generated,
        "parent_table": queue.parent_table,
        "lease_duration": queue.lease_duration,
        "initial_backoff": queue.initial_backoff,
        "max_backoff": queue.max_backoff,
        "max_delivery_attempts": queue.max_delivery_attempts,
        "dead_letter_queue": queue.dead_letter_queue,
    }


def _queue_from_row(row: Sequence[Any]) -> QueueDef:
    (name, key_columns, payload_type, key_generated, parent_table, lease_duration, initial_backoff,
     max_backoff, max_delivery_attempts, dead_letter_queue, create_time) = row
    return QueueDef(
        name=name,
        key_columns=tuple(KeyColumn(c["name"], ColumnType(c["type"])) for c in key_columns),
        payload_type=ColumnType(payload_type),
        key_generated=key_generated,
        parent_table=parent_table,
        lease_duration=lease_duration,
        initial_backoff=initial_backoff,
        max_backoff=max_backoff,
        max_delivery_attempts=max_delivery_attempts,
        dead_letter_queue=dead_letter_queue,
        create_time=create_time,
    )


def _insert_params(queue: QueueDef, messages: Sequence[OutgoingMessage], now: datetime | None
                   ) -> dict[str, Any]:
    # Array literals where they can be (see _array_literal): the keys, and STRING payloads.
    params = _queue_sql(queue).key_array_params([m.key for m in messages])
    deliver_times = [m.deliver_time for m in messages]
    delays = [m.delay for m in messages]
    params.update(
        payloads=_array_literal([_payload_param(queue.payload_type, m.payload) for m in messages]),
        # NULL rather than an array of NULLs when no message is scheduled: multi-argument
        # unnest pads with NULLs all the same, and dumping the array costs the server CPU.
        deliver_times=deliver_times if any(t is not None for t in deliver_times) else None,
        delays=delays if any(d is not None for d in delays) else None,
        now=now,
    )
    return params


def _history(columns: Sequence[Any]) -> DeadLetterHistory | None:
    """(source, attempts, time, last failure) as stored; None for a message never dead-lettered."""
    source, attempts, at, failure = columns
    return DeadLetterHistory(source, attempts or 0, at, failure or "") if source is not None else None


def _redrive_statement(name: str, dead_letter_queue: QueueDef, target: QueueDef, source: RedriveSource
                       ) -> sql.Composed:
    d, t = QueueStatements(dead_letter_queue), QueueStatements(target)
    return query(name, dead_letter_queue=d.table, target=t.table, d_key_columns=d.qualified_keys("d"),
                 t_key_columns=t.qualified_keys("t"), moving_key_columns=d.qualified_keys("moving"),
                 target_key_columns=t.keys, source=_source_condition(source))


def _source_condition(source: RedriveSource) -> sql.Composable:
    if source is None:
        return sql.SQL("TRUE")
    if isinstance(source, tuple):
        return sql.SQL("(d.spanq_dead_letter_source IS NULL OR d.spanq_dead_letter_source <> ALL ({}::text[]))"
                       ).format(sql.Literal(list(source)))
    return sql.SQL("d.spanq_dead_letter_source = {}").format(sql.Literal(source))


def _payload_param(payload_type: ColumnType, payload: Any) -> Any:
    return Jsonb(payload) if payload_type is ColumnType.JSON else payload


def _normal_value(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _normal_key(key: Key) -> Key:
    """Keys compare as stored: bytes from memoryview, timestamps as instants."""
    return tuple(bytes(v) if isinstance(v, memoryview) else v for v in key)
