"""The queue catalog and its schema: migrations, queue DDL (CreateQueue, UpdateQueue, DropQueue)
under bounded lock waits, and reading queue definitions."""

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.types.json import Jsonb

from ..ground import errors
from ..ground.model import CatalogFacts, ColumnType, KeyColumn, QueueDef, QueueDependents
from ..sql import MIGRATIONS
from ..sql.compose import SQL_TYPES, QueueStatements, identifiers, query
from .database import Connection, Database, _scalar

logger = logging.getLogger("spanq_server.store")

MIGRATION_LOCK_ID = 0x5350_414E_5100_0001
"""pg_advisory_xact_lock key for migrations ("SPANQ" + 1)."""
CATALOG_LOCK_ID = 0x5350_414E_5100_0002
"""pg_advisory_xact_lock key for queue DDL, so the queue limit holds across servers."""
DDL_LOCK_TIMEOUT = timedelta(seconds=5)
"""The longest queue DDL waits, in all, for the locks it needs (Config.ddl_lock_timeout)."""
DDL_LOCK_SLICE = 0.2
"""Seconds: the longest one wait of queue DDL for a table's lock. A waiting ACCESS
EXCLUSIVE request makes every later request on the table (sends, receives) queue
behind it; between slices the DDL leaves that queue, so they wait at most this long."""


class CatalogTables(Database):
    """spanq.queues, spanq.schema_migrations, and each queue's table and functions as DDL."""

    # -- migrations ---------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Applies missing migrations, under an advisory lock so concurrent servers take turns."""
        async with self._transaction() as conn:
            await conn.execute(query("advisory_lock"), {"lock_id": MIGRATION_LOCK_ID})
            await conn.execute(query("migration_table_create"))
            cur = await conn.execute(query("migration_applied_list"))
            applied = {row[0] for row in await cur.fetchall()}
            done = []
            recreate = columns = archives = False
            for migration in MIGRATIONS:
                if migration.version in applied:
                    continue
                logger.info("applying migration %04d_%s", migration.version, migration.name)
                await conn.execute(migration.sql.encode())
                await conn.execute(query("migration_record"), {"version": migration.version, "name": migration.name})
                done.append(migration.version)
                recreate |= migration.recreates_queue_functions
                columns |= migration.adds_history_columns
                archives |= migration.adds_archives
            # Once, after the last migration: the current definitions need the current catalog
            # (and the functions the columns).
            if columns or archives:
                for queue in await _fetch_queues(conn):
                    if columns:
                        await conn.execute(QueueStatements(queue).history_columns_ddl())
                    if archives:
                        await conn.execute(QueueStatements(queue).archive_ddl())
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
            try:
                async with conn.transaction():  # a savepoint
                    await conn.execute(names.receive_function_ddl())
            except pg_errors.InvalidFunctionDefinition:
                # Its result columns changed (migration 0012): drop it and create it anew,
                # with the EXECUTE grants it had.
                function = names.receive_function
                grantees = await _scalar(conn, "function_grantees", function=f'spanq."receive_{queue.name}"')
                await conn.execute(query("function_drop", function=function))
                await conn.execute(names.receive_function_ddl())
                if grantees is not None:
                    await conn.execute(query("function_revoke", function=function))
                    for grantee in grantees:
                        role = sql.Identifier(grantee) if grantee else sql.SQL("PUBLIC")
                        await conn.execute(query("function_grant", function=function, grantee=role))
            await conn.execute(names.renew_function_ddl())

    # -- the queue catalog --------------------------------------------------

    async def queue_get(self, name: str) -> QueueDef | None:
        async with self._read() as conn:
            cur = await conn.execute(query("queue_get"), {"name": name})
            row = await cur.fetchone()
        return _queue_from_row(row) if row else None

    async def queue_list(self, after: str, limit: int) -> list[QueueDef]:
        async with self._read() as conn:
            return await _fetch_queues(conn, after, limit)

    async def queue_create(self, queue: QueueDef, check: Callable[[CatalogFacts], None], *,
                           lock_timeout: timedelta = DDL_LOCK_TIMEOUT) -> QueueDef:
        """Creates the catalog row, table, indexes, trigger and SQL functions in one
        transaction, if ``check`` (the domain's rules) accepts the catalog as it finds it
        under the catalog lock (so the queue limit holds across servers)."""
        names = QueueStatements(queue)
        what = f"CreateQueue of {queue.name!r}"
        async with self._transaction(queue.name) as conn:
            with _bounded_ddl(what, lock_timeout):
                tables = []
                if queue.parent_table:
                    tables.append((queue.parent_table, "SHARE ROW EXCLUSIVE"))  # what its foreign key takes
                if queue.dead_letter_queue:
                    tables.append((queue.dead_letter_queue, "ACCESS SHARE"))  # the receive function reads it
                await self._ddl_locks(conn, what, tables, lock_timeout)
                facts = await self._catalog_facts(conn, queue, names)
                check(facts)
                return await self._queue_create_checked(conn, queue, names, facts)

    @staticmethod
    async def _catalog_facts(conn: Connection, queue: QueueDef, names: QueueStatements) -> CatalogFacts:
        return CatalogFacts(
            queues=await _scalar(conn, "queue_count"),
            name_taken=bool(await _scalar(conn, "relation_exists", name=queue.name)),
            index_name_taken=await _scalar(conn, "relations_taken",
                                           names=[names.deliver_time_index, names.lease_token_index,
                                                  names.priority_index, names.key_concurrency_index,
                                                  names.ordering_index]),
            parent_key_width=(await _scalar(conn, "parent_key_width", name=queue.parent_table)
                              if queue.parent_table else None),
            dead_letter_queue=(await _fetch_queue(conn, queue.dead_letter_queue)
                               if queue.dead_letter_queue else None),
        )

    @staticmethod
    async def _queue_create_checked(conn: Connection, queue: QueueDef, names: QueueStatements,
                                    facts: CatalogFacts) -> QueueDef:
        parent = None
        if queue.parent_table and facts.parent_key_width is not None:
            parent = query(
                "queue_parent_constraint",
                parent_key_columns=identifiers(c.name for c in queue.key_columns[:facts.parent_key_width]),
                parent_table=sql.Identifier("public", queue.parent_table),
                on_delete=sql.SQL("CASCADE" if queue.parent_on_delete_cascade else "NO ACTION"),
            )
        cur = await conn.execute(query("queue_insert"), _queue_params(queue))
        row = await cur.fetchone()
        assert row is not None
        try:
            await conn.execute(
                query(
                    "queue_table_create",
                    queue=names.table,
                    key_column_definitions=names.table_key_definitions,
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
        await conn.execute(names.archive_ddl())
        await _limits_ddl(conn, None, queue)
        await conn.execute(names.receive_function_ddl())
        await conn.execute(names.renew_function_ddl())
        return dataclasses.replace(queue, create_time=row[0])

    async def queue_update(self, name: str, change: Callable[[QueueDef], QueueDef],
                           check: Callable[[QueueDef, QueueDef | None], None], *, dead_letter_queue: str | None,
                           ordering: bool = False, lock_timeout: timedelta = DDL_LOCK_TIMEOUT) -> QueueDef:
        """Changes a queue's settings: reads its definition under the catalog lock (so that two
        updates of different fields both hold), applies ``change``, lets ``check`` (the domain's
        rules) see the result with its dead-letter queue, then writes the row and re-creates the
        queue's functions, in one transaction. The queue's table is not locked: sends, receives
        and acks go on; each receive runs the functions as they were when it started. With
        ``ordering`` (the change names enable_message_ordering) it is, ACCESS EXCLUSIVE, for
        its ordering triggers to be created or dropped (queue_ordering_create/_drop) with the
        setting; turning it off is refused while a message is held behind its key's head."""
        what = f"UpdateQueue of {name!r}"
        async with self._transaction(name) as conn:
            with _bounded_ddl(what, lock_timeout):
                # The receive function reads a new dead-letter queue: it must not be dropped meanwhile.
                tables = [(dead_letter_queue, "ACCESS SHARE")] if dead_letter_queue else []
                if ordering:  # CREATE and DROP TRIGGER, DROP INDEX: no send or ack runs meanwhile
                    tables.append((name, "ACCESS EXCLUSIVE"))
                await self._ddl_locks(conn, what, tables, lock_timeout)
                current = await _fetch_queue(conn, name)
                if current is None:
                    raise errors.QueueNotFound(f"queue {name!r} does not exist; create it with CreateQueue")
                queue = change(current)
                check(queue, await _fetch_queue(conn, queue.dead_letter_queue) if queue.dead_letter_queue else None)
                cur = await conn.execute(query("queue_update"), _queue_params(queue))
                if await cur.fetchone() is None:
                    raise errors.QueueNotFound(f"queue {name!r} was dropped meanwhile")
                names = QueueStatements(queue)
                await _limits_ddl(conn, current, queue)
                if queue.enable_message_ordering != current.enable_message_ordering:
                    held = await conn.execute(query("queue_held_exists", queue=names.table))
                    if not queue.enable_message_ordering and (await held.fetchone() or (False,))[0]:
                        raise errors.FailedPrecondition(
                            f"queue {name!r} holds messages behind earlier ones of their ordering keys; message "
                            "ordering cannot be turned off until they are delivered (its stats' held count is 0), "
                            "or purge the queue first", queue=name)
                    await conn.execute(names.ordering_ddl())
                await conn.execute(names.receive_function_ddl())
                await conn.execute(names.renew_function_ddl())
                return queue

    async def queue_drop(self, queue: QueueDef, check: Callable[[QueueDependents], None], *,
                         lock_timeout: timedelta = DDL_LOCK_TIMEOUT) -> None:
        """Drops the queue's table and functions and its catalog row, if ``check`` (the
        domain's rules) accepts the queues that depend on it: once before waiting for
        locks (only to refuse), and again under the catalog lock (no child can appear then)."""
        names = QueueStatements(queue)
        what = f"DropQueue of {queue.name!r}"
        async with self._transaction(queue.name) as conn:
            with _bounded_ddl(what, lock_timeout):
                check(await _dependents(conn, queue.name))
                # DROP TABLE takes ACCESS EXCLUSIVE on the table and on the parent its foreign key references.
                tables = [(queue.name, "ACCESS EXCLUSIVE")]
                if queue.parent_table:
                    tables.append((queue.parent_table, "ACCESS EXCLUSIVE"))
                await self._ddl_locks(conn, what, tables, lock_timeout)
                check(await _dependents(conn, queue.name))
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
                            key_slots_function=names.key_slots_function,
                            archive=names.archive,
                            queue_name=sql.Literal(queue.name),
                            **names.ordering_function_fragments(),
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


async def _limits_ddl(conn: Connection, current: QueueDef | None, queue: QueueDef) -> None:
    """What the queue's limits need beside its receive function, from what ``current`` had
    (None: a new queue): the key slots' function and index, the rate limit's bucket. A
    live queue's index is built (or dropped) under the update's bounded lock wait,
    blocking sends while it builds (one pass over the table)."""
    names = QueueStatements(queue)
    if current is not None and current.max_in_flight_per_key is not None and (
            current.concurrency_key != queue.concurrency_key):  # another column, or none
        await conn.execute(QueueStatements(current).key_slots_index_drop())
    if queue.max_in_flight_per_key is not None:
        for statement in names.key_slots_ddl():
            await conn.execute(statement)
    if queue.rate_limit is not None:
        await conn.execute(query("rate_bucket_put"), {"queue": queue.name, "burst": queue.burst()})
    elif current is not None and current.rate_limit is not None:
        await conn.execute(query("rate_bucket_delete"), {"queue": queue.name})


async def _dependents(conn: Connection, name: str) -> QueueDependents:
    cur = await conn.execute(query("queue_dependents"), {"name": name})
    rows = await cur.fetchall()
    return QueueDependents(children=[queue for queue, is_child in rows if is_child],
                           dead_letter_of=[queue for queue, is_child in rows if not is_child])


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
        "key_columns": Jsonb([_key_column_json(c) for c in queue.key_columns]),
        "payload_type": queue.payload_type.value,
        "key_generated": queue.key_generated,
        "parent_table": queue.parent_table,
        "lease_duration": queue.lease_duration,
        "initial_backoff": queue.initial_backoff,
        "max_backoff": queue.max_backoff,
        "max_delivery_attempts": queue.max_delivery_attempts,
        "dead_letter_queue": queue.dead_letter_queue,
        "disable_send": queue.disable_send,
        "disable_delivery": queue.disable_delivery,
        "message_retention": queue.message_retention_duration,
        "archive_duration": queue.archive_duration,
        "parent_cascade": queue.parent_on_delete_cascade,
        "max_in_flight_per_key": queue.max_in_flight_per_key,
        "concurrency_key": queue.concurrency_key,
        "rate_limit": queue.rate_limit,
        "rate_limit_burst": queue.rate_limit_burst,
        "enable_message_ordering": queue.enable_message_ordering,
        "create_time": queue.create_time,
    }


def _queue_from_row(row: Sequence[Any]) -> QueueDef:
    (name, key_columns, payload_type, key_generated, parent_table, lease_duration, initial_backoff,
     max_backoff, max_delivery_attempts, dead_letter_queue, create_time, disable_send, disable_delivery,
     message_retention, archive_duration, parent_cascade, max_in_flight_per_key, concurrency_key, rate_limit,
     rate_limit_burst, enable_message_ordering) = row
    return QueueDef(
        name=name,
        key_columns=tuple(KeyColumn(c["name"], ColumnType(c["type"]), c.get("generated_as"), c.get("generated_sql"))
                          for c in key_columns),
        payload_type=ColumnType(payload_type),
        key_generated=key_generated,
        parent_table=parent_table,
        parent_on_delete_cascade=parent_cascade,
        lease_duration=lease_duration,
        initial_backoff=initial_backoff,
        max_backoff=max_backoff,
        max_delivery_attempts=max_delivery_attempts,
        dead_letter_queue=dead_letter_queue,
        create_time=create_time,
        disable_send=disable_send,
        disable_delivery=disable_delivery,
        message_retention_duration=message_retention,
        archive_duration=archive_duration,
        max_in_flight_per_key=max_in_flight_per_key,
        concurrency_key=concurrency_key,
        rate_limit=rate_limit,
        rate_limit_burst=rate_limit_burst,
        enable_message_ordering=enable_message_ordering,
    )


def _key_column_json(column: KeyColumn) -> dict[str, str]:
    """A key column's catalog entry; a generated one's expressions too (plain ones as they always were)."""
    entry = {"name": column.name, "type": column.type.value}
    if column.generated_as is not None and column.generated_sql is not None:
        entry.update(generated_as=column.generated_as, generated_sql=column.generated_sql)
    return entry
