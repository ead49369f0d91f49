"""The Spanner front-end's tables: runs the statements the front-end composes for them (its
PostgreSQL generator, spanner/query/postgres.py) on a transaction's connection or on their own, their
DDL beside the registry's named statements (queries.sql), and translates PostgreSQL's errors into
Spanner's codes.

- a duplicate key: ALREADY_EXISTS (RowAlreadyExists);
- a missing parent row (INTERLEAVE IN PARENT): NOT_FOUND (RowNotFound);
- NOT NULL, a length, a child row still there (ON DELETE NO ACTION):
  FAILED_PRECONDITION;
- serialization failures, deadlocks and lock timeouts: ABORTED, so the
  client runs the transaction again (``store.wrap_errors``).
"""

import contextlib
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from psycopg import DataError
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.adapt import Transformer
from psycopg.types.datetime import DateLoader, TimestamptzLoader
from psycopg.types.json import Jsonb, JsonbLoader

from ..ground import errors
from ..ground.model import OutOfRange
from ..sql.compose import query
from .database import Connection, Database, Handle, connection_of, wrap_errors

Rows = list[tuple[Any, ...]]


@contextlib.contextmanager
def table_errors(what: str) -> Iterator[None]:
    """psycopg -> domain errors for a statement on Spanner tables (``what`` names it)."""
    try:
        with wrap_errors():
            try:
                yield
            except pg_errors.UniqueViolation as exc:
                raise errors.RowAlreadyExists(
                    f"{what}: a row with that key already exists ({exc.diag.message_detail}); nothing of it was "
                    "stored") from exc
            except pg_errors.ForeignKeyViolation as exc:
                if "still referenced" in (exc.diag.message_detail or "") + (exc.diag.message_primary or ""):
                    raise errors.FailedPrecondition(
                        f"{what}: the row has child rows (INTERLEAVE IN PARENT ... ON DELETE NO ACTION, or a queue "
                        f"interleaved in it): {exc.diag.message_detail}; delete them first") from exc
                raise errors.RowNotFound(
                    f"{what}: the parent row is missing ({exc.diag.message_detail}); insert the parent row "
                    "first") from exc
            except (pg_errors.NotNullViolation, pg_errors.CheckViolation,
                    pg_errors.StringDataRightTruncation) as exc:
                raise errors.FailedPrecondition(f"{what}: {exc.diag.message_primary}") from exc
            except pg_errors.CardinalityViolation as exc:  # ON CONFLICT DO UPDATE meeting one key twice
                raise errors.InvalidArgument(f"{what}: a row's key is given twice in one mutation") from exc
            except pg_errors.DuplicateTable as exc:
                raise errors.QueueAlreadyExists(f"{what}: {exc.diag.message_primary}") from exc
            except pg_errors.DependentObjectsStillExist as exc:
                raise errors.FailedPrecondition(
                    f"{what}: other objects depend on it ({exc.diag.message_detail or exc.diag.message_primary}); "
                    "drop them first") from exc
            except pg_errors.UndefinedTable as exc:
                raise errors.RowNotFound(f"{what}: the table does not exist (it was dropped)") from exc
            except (pg_errors.DataException, pg_errors.DatatypeMismatch, pg_errors.UndefinedFunction) as exc:
                if isinstance(exc, (pg_errors.InvalidTextRepresentation, pg_errors.DatetimeFieldOverflow,
                                    pg_errors.NumericValueOutOfRange)):
                    raise
                raise errors.InvalidArgument(f"{what}: {exc.diag.message_primary}") from exc
    except errors.QueueNotFound as exc:
        raise errors.RowNotFound(f"{what}: the table does not exist (it was dropped)") from exc


def _text(data: Any) -> str:
    return repr(bytes(data).decode("utf-8", "replace"))


class _Date(DateLoader):
    def load(self, data: Any) -> Any:
        try:
            return super().load(data)
        except DataError:
            return OutOfRange(_text(data))


class _Timestamptz(TimestamptzLoader):
    def load(self, data: Any) -> Any:
        try:
            return super().load(data)
        except DataError:
            return OutOfRange(_text(data))


class _Jsonb(JsonbLoader):
    def load(self, data: Any) -> Any:
        try:
            return super().load(data)
        except RecursionError:
            return OutOfRange("JSON nested too deep to read")


TOLERANT_LOADERS = (("date", _Date), ("timestamptz", _Timestamptz), ("jsonb", _Jsonb))
"""The loaders a result is read again with when one of its values fails the usual ones (arrays'
elements too). Not the usual ones: Python's loaders take twice as long as psycopg's C ones."""


def _tolerant_rows(conn: Connection, cur: Any) -> Rows:
    """The rows of a result already fetched, read with TOLERANT_LOADERS (no second round trip:
    the result is in memory)."""
    context = conn.cursor()
    for name, loader in TOLERANT_LOADERS:  # the cursor's own adapters: the connection's stay as they are
        context.adapters.register_loader(name, loader)
    reader = Transformer(context)
    reader.set_pgresult(cur.pgresult)
    return reader.load_rows(0, cur.pgresult.ntuples, tuple)  # type: ignore[no-any-return]


async def _run(conn: Connection, statement: sql.Composed | sql.SQL, params: dict[str, Any], what: str
               ) -> tuple[Rows, int]:
    with table_errors(what):
        cur = await conn.execute(statement, params)
        rows = []
        if cur.description is not None:
            try:
                rows = await cur.fetchall()
            except (DataError, RecursionError):  # a value out of Python's range (stored by psql)
                rows = _tolerant_rows(conn, cur)
        return rows, cur.rowcount


class SpannerTables(Database):
    """Tables made through the Spanner API and their registry, spanq.spanner_tables."""

    @staticmethod
    async def table_run_in(handle: Handle, statement: sql.Composed | sql.SQL, params: dict[str, Any], what: str
                           ) -> tuple[Rows, int]:
        """One statement on a transaction: its rows (if it returns any) and its row count."""
        return await _run(connection_of(handle), statement, params, what)

    async def table_read(self, statement: sql.Composed | sql.SQL, params: dict[str, Any], what: str) -> Rows:
        """A read of the latest committed rows (a strong read)."""
        async with self._read() as conn:
            return (await _run(conn, statement, params, what))[0]

    async def table_alone(self, statement: sql.Composed | sql.SQL, params: dict[str, Any], what: str
                          ) -> tuple[Rows, int]:
        """A statement in a transaction of its own (partitioned DML)."""
        async with self._transaction() as conn:
            return await _run(conn, statement, params, what)

    async def table_ddl(self, statements: Sequence[sql.Composed | sql.SQL], what: str, *, lock_timeout: timedelta,
                        register: tuple[str, str | None, str, str, dict[str, Any]] | None = None,
                        unregister: str | None = None, redefine: tuple[str, dict[str, Any]] | None = None) -> None:
        """DDL and its registry row in one transaction: all of it or none. ``register`` is
        (relation, database, kind, declared name, definition); ``redefine`` (table, definition)."""
        async with self._transaction() as conn:
            with table_errors(what):
                await conn.execute(query("spanner_table_lock_timeout"),
                                   {"lock_timeout": f"{int(lock_timeout.total_seconds() * 1000)}ms"})
                for statement in statements:
                    await conn.execute(statement)
                if register is not None:
                    name, database, kind, declared, definition = register
                    await conn.execute(query("spanner_table_put"), {"name": name, "database": database, "kind": kind,
                                                        "declared": declared, "definition": Jsonb(definition)})
                if unregister is not None:
                    await conn.execute(query("spanner_table_delete"), {"name": unregister})
                if redefine is not None:
                    await conn.execute(query("spanner_table_redefine"), {"name": redefine[0],
                                                                       "definition": Jsonb(redefine[1])})

    async def table_definitions(self, names: Sequence[str]) -> list[tuple[str, str, dict[str, Any]]]:
        """(relation, kind, definition) of those of ``names`` that are registered."""
        if not names:
            return []
        async with self._read() as conn:
            cur = await conn.execute(query("spanner_table_get"), {"names": list(names)})
            return [(r[0], r[1], r[2]) for r in await cur.fetchall()]

    async def table_definitions_of(self, database: str) -> list[tuple[str, str, dict[str, Any]]]:
        """A database's tables and indexes, in creation order."""
        async with self._read() as conn:
            cur = await conn.execute(query("spanner_tables_of_database"), {"database": database})
            return [(r[0], r[1], r[2]) for r in await cur.fetchall()]

    async def table_dependents(self, table: str) -> tuple[list[str], list[str]]:
        """A table's indexes and child tables."""
        async with self._read() as conn:
            indexes = await conn.execute(query("spanner_table_indexes"), {"table": table})
            found = [r[0] for r in await indexes.fetchall()]
            children = await conn.execute(query("spanner_table_children"), {"table": table})
            return found, [r[0] for r in await children.fetchall()]

    async def table_outside_dependents(self, names: Sequence[str]) -> list[tuple[str, str]]:
        """(dependent, relation): what depends on one of the relations ``names`` from outside them."""
        async with self._read() as conn:
            cur = await conn.execute(query("spanner_table_outside_dependents"), {"names": list(names)})
            return [(r[0], r[1]) for r in await cur.fetchall()]
