"""What the Spanner front-end needs of the store, declared here so that the front-end
never imports it: ``server.py`` (the composition root) hands it the store, which has
these methods (store/tables.py). Statements are composed here (``query/postgres``) and run
there; the registry's statements are the store's own, named in queries.sql."""

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol

from psycopg import sql

Rows = list[tuple[Any, ...]]
Statement = sql.Composed | sql.SQL


class TableStore(Protocol):
    """Spanner tables' statements and their registry (spanq.spanner_tables)."""

    async def table_run_in(self, handle: Any, statement: Statement, params: dict[str, Any], what: str
                           ) -> tuple[Rows, int]:
        """One statement on a transaction (``handle``: what mutations.TableOp.run is given,
        opaque here): its rows and its row count. ``what`` names it in errors."""
        ...

    async def table_read(self, statement: Statement, params: dict[str, Any], what: str) -> Rows:
        """A read of the latest committed rows (a strong read)."""
        ...

    async def table_alone(self, statement: Statement, params: dict[str, Any], what: str) -> tuple[Rows, int]:
        """A statement in a transaction of its own (partitioned DML)."""
        ...

    async def table_ddl(self, statements: Sequence[Statement], what: str, *, lock_timeout: timedelta,
                        register: tuple[str, str | None, str, str, dict[str, Any]] | None = None,
                        unregister: str | None = None, redefine: tuple[str, dict[str, Any]] | None = None) -> None:
        """DDL and its registry row in one transaction (``redefine``: a table's new definition,
        ALTER TABLE's); ``register`` is (relation, database,
        kind, declared name, definition)."""
        ...

    async def table_definitions(self, names: Sequence[str]) -> list[tuple[str, str, dict[str, Any]]]:
        """(relation, kind, definition) of those of ``names`` that are registered."""
        ...

    async def table_definitions_of(self, database: str) -> list[tuple[str, str, dict[str, Any]]]:
        """A database's tables and indexes, in creation order."""
        ...

    async def table_dependents(self, table: str) -> tuple[list[str], list[str]]:
        """A table's indexes and child tables."""
        ...

    async def table_outside_dependents(self, names: Sequence[str]) -> list[tuple[str, str]]:
        """(dependent, relation): what depends on one of the relations ``names`` from outside them."""
        ...
