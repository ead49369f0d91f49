"""The store's core: the psycopg pool, its transactions, and the one table that
translates psycopg errors into domain errors.

Above the store a transaction is a ``Handle``: opaque, handed back to the store's
methods, so that no psycopg type reaches the domain.
"""

import contextlib
import logging
import math
import os
import random
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from datetime import timedelta
from typing import Any, final

import psycopg
import psycopg_pool
from psycopg_pool.base import AttemptWithBackoff
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from ..ground import errors
from ..sql.compose import query

logger = logging.getLogger("spanq_server.store")

RECENTLY_USED = 1.0
"""Seconds: a pooled connection returned in good order this recently is handed out unchecked."""
RECONNECT_MAX_DELAY = 0.5
"""Seconds: the longest wait between attempts to replace a lost connection (see _Pool)."""
POOLERS = ("auto", "session", "transaction")
"""What sits between spanq and PostgreSQL (Store's ``pooler``): "auto" finds out (a pooler
found is taken for a transaction-mode one), or the operator says which pooling mode it is."""


Connection = psycopg.AsyncConnection[Any]
"""The store's own type for a connection; never seen above the store (see Handle)."""

_UNKNOWN = "the commit may or may not have happened; replay the same request_id to learn which"


@final
class Handle:
    """One transaction of the store, as the domain holds it: opaque. The domain passes it
    back to the store's methods, so that one transaction can hold several mutations and
    the commit-ledger entry; only the store looks inside (``connection_of``)."""

    __slots__ = ("_connection",)

    def __init__(self, connection: Connection) -> None:
        self._connection = connection


def connection_of(handle: Handle) -> Connection:
    return handle._connection


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
    except pg_errors.CheckViolation as exc:
        if exc.diag.constraint_name != "spanq_ordering_enabled":
            raise
        # spanq.ordering_off: a keyed message to a queue without ordering
        raise errors.FailedPrecondition(
            f"{exc.diag.message_primary}; {exc.diag.message_hint or ''}; nothing of this request was stored",
            queue=queue or "",
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


class Database:
    """The pool and its transactions, which the store's table modules build on.
    Created closed; ``open()`` and ``close()`` are idempotent."""

    def __init__(self, dsn: str, *, min_size: int = 2, max_size: int = 10, timeout: float = 10.0,
                 reconnect_max_delay: float = RECONNECT_MAX_DELAY,
                 pooler: str = "auto", listen_dsn: str | None = None) -> None:
        if pooler not in POOLERS:
            raise ValueError(f"pooler must be one of {', '.join(POOLERS)}, not {pooler!r}")
        self.dsn = dsn
        self.listen_dsn = listen_dsn or dsn
        """Where the wake-up listener connects (a direct URL when dsn is a transaction pooler's)."""
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

    # -- transactions -------------------------------------------------------

    @contextlib.asynccontextmanager
    async def transaction(self, queue: str | None = None) -> AsyncIterator[Handle]:
        """One read-write transaction. An error before COMMIT rolls back and is
        StoreUnavailable (safe to retry); a connection lost while COMMIT is in
        flight is CommitOutcomeUnknown: the server cannot know, so it never guesses."""
        async with self._transaction(queue) as conn:
            yield Handle(conn)

    @contextlib.asynccontextmanager
    async def _transaction(self, queue: str | None = None) -> AsyncIterator[Connection]:
        with wrap_errors(queue):
            async with self._connection() as conn:
                try:
                    yield conn
                except BaseException:
                    with contextlib.suppress(psycopg.Error):
                        await conn.rollback()
                    raise
                await self._commit(conn)

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

    @staticmethod
    async def _commit(conn: Connection) -> None:
        """COMMIT: the one place that tells a failure before COMMIT (StoreUnavailable)
        from one during it (unknown)."""
        try:
            await conn.commit()
        except psycopg.OperationalError as exc:
            raise errors.CommitOutcomeUnknown(
                f"the database connection failed while COMMIT was in flight ({exc}): {_UNKNOWN}"
            ) from exc

    async def _claiming(self, conn: Connection | None, queue: str, statement: bytes, params: dict[str, Any]
                        ) -> list[Any]:
        """Runs a statement that claims request_ids in the commit ledger; its rows.

        Without conn the statement is a transaction by itself (autocommit): one round
        trip instead of three (BEGIN, the statement, COMMIT). A connection lost while it
        runs is then CommitOutcomeUnknown; an error the database reports for it (a
        deadlock, a duplicate key) means it did not commit."""
        if conn is not None:
            with wrap_errors(queue):
                return await (await conn.execute(statement, params)).fetchall()
        async with self._read(queue) as own:
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
    async def _read(self, queue: str | None = None) -> AsyncIterator[Connection]:
        """A connection for reads and self-contained statements (autocommitted)."""
        with wrap_errors(queue):
            async with self._connection() as conn:
                await conn.set_autocommit(True)
                try:
                    yield conn
                finally:
                    if not conn.closed:
                        await conn.set_autocommit(False)


    # -- the wake-up listener -------------------------------------------------

    async def listen(self) -> "Listener":
        """A dedicated autocommit connection, outside the pool, listening for wake-ups.
        Any failure is StoreUnavailable."""
        try:
            with wrap_errors():
                conn = await psycopg.AsyncConnection.connect(self.listen_dsn, autocommit=True, prepare_threshold=None)
                try:
                    await conn.execute(query("wakeup_listen"))
                except BaseException:  # also cancellation by a stop() right after start(): close, do not leak
                    await conn.close()
                    raise
        except psycopg.Error as exc:  # one wrap_errors has no domain error for
            raise errors.StoreUnavailable(f"the wake-up listener cannot listen: {exc}") from exc
        return Listener(conn)

    async def notify(self, handle: Handle, queue: str) -> None:
        await connection_of(handle).execute(query("wakeup_notify"), {"queue": queue})

    async def notify_probe(self, payload: str) -> None:
        """A wake-up notification with ``payload`` (no queue's name), through the pool as a
        send's would go: the listener proves it listens by hearing it."""
        async with self._read() as conn:
            await conn.execute(query("wakeup_notify"), {"queue": payload})

    def pool_stats(self) -> dict[str, int]:
        """psycopg_pool's figures: pool_max, pool_size, pool_available, requests_waiting, and
        counters since the pool opened (requests_num, requests_queued, requests_wait_ms, ...)."""
        return self._pool.get_stats()


class Listener:
    """The wake-up listener's connection (from ``Database.listen``). A lost connection is
    StoreUnavailable, from ``payloads`` as from ``listen``."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def payloads(self, timeout: float) -> AsyncGenerator[str, None]:
        """The payloads of the notifications that arrive within timeout seconds. Close it
        (contextlib.aclosing) as soon as the caller stops reading: it holds the connection's lock."""
        try:
            async with contextlib.aclosing(self._conn.notifies(timeout=timeout)) as notifies:
                async for notify in notifies:
                    yield notify.payload
        except psycopg.Error as exc:
            raise errors.StoreUnavailable(f"the database is unavailable: {exc}") from exc

    async def close(self) -> None:
        await self._conn.close()


class HeldTransaction:
    """One transaction held open across calls (from ``Store.hold``). Each statement
    runs in a savepoint: when it fails, its own effects are undone and the
    transaction stays usable, as Spanner's statement-level errors leave it.
    ``commit`` and ``rollback`` end it and give the connection back to the pool;
    ``rollback`` is safe to call again."""

    def __init__(self, store: Database, conn: Connection) -> None:
        self._store = store
        self._conn: Connection | None = conn

    @property
    def active(self) -> bool:
        return self._conn is not None

    @contextlib.asynccontextmanager
    async def statement(self, queue: str | None = None) -> AsyncIterator[Handle]:
        conn = self._conn
        if conn is None:
            raise errors.TransactionAborted("the transaction has already ended; run it again")
        try:
            with wrap_errors(queue):
                async with conn.transaction():  # a SAVEPOINT: the transaction is already in progress
                    yield Handle(conn)
        except errors.DatabaseReadOnly:
            await conn.close()  # a standby's: useless for the transaction; rollback() gives it back
            raise

    async def commit(self) -> None:
        conn = self._conn
        if conn is None:
            raise errors.TransactionAborted("the transaction has already ended; run it again")
        self._conn = None
        try:
            with wrap_errors():
                await self._store._commit(conn)
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


async def _scalar(conn: Connection, statement: str, /, **params: Any) -> Any:
    cur = await conn.execute(query(statement), params)
    row = await cur.fetchone()
    return row[0] if row else None
