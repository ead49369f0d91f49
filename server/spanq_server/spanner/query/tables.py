"""Spanner tables on spanq: their DDL, statements, mutations and reads, in the
same read-write transactions as queue sends and acks.

A database's table is a PostgreSQL table of its namespace (see ``schema``); only
tables made through the Spanner API (registered in ``spanq.spanner_tables``) are
reachable, never another PostgreSQL table. Queues are readable as tables (their
key columns, Payload and DeliverTime), so a SELECT may join one with a table;
their writes stay sends and acks.

Statements are parsed by ``parser`` (the table subset), translated by ``postgres`` and run
by the store (``port.TableStore``); in a read-write transaction each is a ``TableOp`` on the
transaction's connection (reads lock what they read, FOR SHARE, as Spanner's
read-write transactions do), in a read-only one a strong read.
"""

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from google.protobuf import struct_pb2
from psycopg import sql

from ...domain import queues
from ...domain.mutations import TableOp
from ...domain.queues import Catalog
from ...ground import errors
from ..port import TableStore
from . import ast
from . import postgres as t
from . import values
from .lexing import fold
from .names import Names
from .protos import Bundles
from .schema import Col, IndexDef, TableDef, index_ddl, index_of, schema_col, table_ddl, table_of
from .scope import RESERVED, Scope

DDL_LOCK_TIMEOUT = timedelta(seconds=5)
DEFINITION_CACHE_SECONDS = 1.0
"""How long a table's definition (or its absence) is reused: a queue statement asks whether its
name is a table, and that must not cost a round trip each time. DDL on this server clears it;
another server's is seen within this time (as admin.scope's namespaces)."""
MAX_CACHED = 10_000
WRITES = ("insert", "update", "insert_or_update", "replace")
"""The Write mutations of google.spanner.v1.Mutation (Delete is by KeySet)."""


def relations(statement: ast.TableSubset) -> set[str]:
    """The (folded) relation names a statement names, its subqueries' and UNION ALL parts' too."""
    found = {name for select in ast.selects_in(statement) for name in ast.read_by(select)}
    if isinstance(statement, ast.Select):
        return found | set(ast.read_by(statement))
    if isinstance(statement, ast.Insert):
        return found | {statement.table}
    if isinstance(statement, (ast.Update, ast.Delete)):
        return found | {statement.table.name}
    return found


def row_type(columns: Sequence[tuple[str, ast.SpannerType]]) -> Any:
    out = values.StructTypePb()
    for name, column_type in columns:
        field = out.fields.add()
        field.name = name
        field.type_.CopyFrom(values.typed_pb(column_type))
    return out


class Tables:
    def __init__(self, store: TableStore, catalog: Catalog, names: Names, protos: Bundles) -> None:
        self._store = store
        self._catalog = catalog
        self._names = names
        self._protos = protos
        self._cache: dict[str, tuple[float, TableDef | None]] = {}

    # -- names -------------------------------------------------------------------

    async def table(self, ns: Scope, name: str) -> TableDef | None:
        """A table of the database made through the Spanner API, by its (folded) name."""
        if not ns.owns(name):
            return None
        key = ns.prefix + name
        cached = self._cache.get(key)
        if cached is not None and time.monotonic() - cached[0] < DEFINITION_CACHE_SECONDS:
            return cached[1]
        table = None
        for relation, kind, definition in await self._store.table_definitions([key]):
            if kind == "table":
                table = TableDef.of_json(relation, definition)
        if len(self._cache) > MAX_CACHED:
            self._cache.clear()
        self._cache[key] = (time.monotonic(), table)
        return table

    async def is_table(self, ns: Scope, name: str) -> bool:
        return await self.table(ns, name) is not None

    async def schema(self, ns: Scope, names: Iterable[str]) -> dict[str, TableDef]:
        """The tables and queues of the database the names name (those it has)."""
        wanted = sorted(n for n in set(names) if ns.owns(n))
        out: dict[str, TableDef] = {}
        for relation, kind, definition in await self._store.table_definitions([ns.prefix + n for n in wanted]):
            if kind == "table":
                out[relation.removeprefix(ns.prefix)] = TableDef.of_json(relation, definition)
        for name in wanted:
            if name in out:
                continue
            try:
                queue = await self._catalog.get(ns.prefix + name)
            except (errors.QueueNotFound, errors.InvalidArgument):
                continue
            spelling = await self._names.of(queue)
            columns = [Col(c.name, spelling.column(c.name), _queue_type(c.type.value), c.name, True,
                           hidden=spelling.hidden(c.name)) for c in queue.key_columns]
            payload = (ast.SpannerType("PROTO", proto=spelling.proto) if spelling.proto
                       else _queue_type(queue.payload_type.value))  # a proto message's bytes, typed so
            columns.append(Col("payload", spelling.column("payload"), payload, "payload", True,
                               hidden=spelling.hidden("payload")))
            columns.append(Col("delivertime", spelling.column("delivertime"), ast.TIMESTAMP, "deliver_time"))
            out[name] = TableDef(queue.name, spelling.queue, tuple(columns),
                                 tuple(c.name for c in queue.key_columns), queue=True,
                                 descending=tuple(c.name for c in queue.key_columns if spelling.descending(c.name)))
        return out

    async def any_table(self, ns: Scope, names: Iterable[str]) -> bool:
        """Whether one of ``names`` (folded) is a table of the database."""
        owned = [ns.prefix + n for n in names if ns.owns(n)]
        return bool([r for r in await self._store.table_definitions(owned) if r[1] == "table"])

    # -- statements ------------------------------------------------------------

    async def run(self, statement: ast.TableDml | ast.Select, params: Any, param_types: Any, use: Any, ns: Scope,
                  long: bool = False) -> "TableResult":
        """A statement of the table subset (``long``: of a long text, whose translation lets other calls
        go first, as parser.parse's reads)."""
        schema = await self.schema(ns, relations(statement))
        declared = {}
        for name, type_pb in (param_types or {}).items():
            found = values.of_type_pb(type_pb)
            if found is not None:
                declared[name] = found
        writing = not isinstance(statement, ast.Select)
        partitioned = bool(getattr(use, "partitioned", False))
        if writing and use.read_only and not partitioned:
            raise errors.InvalidArgument("DML runs in a read-write transaction (database.run_in_transaction) or as "
                                         "partitioned DML (database.execute_partitioned_dml), not in a read-only one")
        if partitioned and not writing:
            raise errors.InvalidArgument("partitioned DML takes UPDATE and DELETE, not SELECT")
        if partitioned and (isinstance(statement, ast.Insert) or statement.returning is not None):  # type: ignore[union-attr]
            raise errors.InvalidArgument("partitioned DML takes UPDATE and DELETE without THEN RETURN (as in Spanner)")
        if long:
            await asyncio.sleep(0)
        translated = t.translate(statement, schema, declared, lock=not use.read_only)  # type: ignore[arg-type]
        bound = dict(translated.params)
        for name, wanted in translated.wanted.items():
            if name not in params.fields:
                raise errors.InvalidArgument(f"No parameter found for binding: {name}")
            bound[f"p_{name}"] = values.decode_typed(params.fields[name], wanted, f"parameter @{name}")
            if wanted.proto or (wanted.element and wanted.element.proto):
                await self._protos.check_typed(ns.database, wanted, bound[f"p_{name}"], f"parameter @{name}")
            if name in translated.counts and (bound[f"p_{name}"] or 0) < 0:
                raise errors.InvalidArgument(f"{translated.counts[name]} cannot be negative (parameter @{name})")
        what = f"the statement on {', '.join(sorted(x.spelled for x in schema.values())) or 'no table'}"
        shown = [(f"{what}: column {name or i + 1}", t) for i, (name, t) in enumerate(translated.columns)]

        def encoded(rows: list[Any]) -> list[Any]:
            return [[values.encode_typed(v, t, label) for v, (label, t) in zip(row, shown)] for row in rows]

        if use.read_only and not writing:
            rows, count = encoded(await self._store.table_read(translated.statement, bound, what)), None
        elif partitioned:
            rows, count = await self._store.table_alone(translated.statement, bound, what)
        else:  # encoded in the statement's savepoint: a THEN RETURN that cannot be read changes nothing
            op = self._op(translated.target.name if translated.target else "", translated.statement, bound, what,
                          encode=encoded)
            rows, count = (await (await use.hold()).apply([op]))[0]
        return TableResult(translated.columns, rows, count if writing else None, partitioned)

    def _op(self, table: str, statement: sql.Composed, values: dict[str, Any], what: str, rows: int = 1,
            encode: Callable[[list[Any]], list[Any]] | None = None) -> TableOp:
        async def run(conn: Any) -> tuple[list[Any], int]:
            found, count = await self._store.table_run_in(conn, statement, values, what)
            return (encode(found) if encode else found), count

        return TableOp(table, run, rows)

    # -- mutations ---------------------------------------------------------------

    async def mutation(self, mutation: Any, ns: Scope) -> TableOp | None:
        """A Commit's Write or Delete mutation of a table, as a TableOp; None when it changes nothing."""
        kind = mutation.WhichOneof("operation")
        body = getattr(mutation, kind)
        table = await self._existing(ns, fold(body.table), body.table)
        if kind == "delete":
            return self._delete(table, body.key_set)
        columns = []
        for name in body.columns:
            column = table.column(fold(name))
            if column is None:
                raise errors.RowNotFound(f"Column not found in table {table.spelled}: {name}")
            if column in columns:
                raise errors.InvalidArgument(f"column {name!r} is named twice")
            t.check_writable(table, column)
            columns.append(column)
        missing = [c.spelled for c in table.key if c not in columns]
        if missing:
            raise errors.InvalidArgument(f"a {kind} of {table.spelled} needs its primary-key column(s) "
                                         f"{', '.join(missing)}")
        rows = []
        for r, row in enumerate(body.values):
            if len(row.values) != len(columns):
                raise errors.InvalidArgument(f"row {r} has {len(row.values)} value(s) for {len(columns)} column(s)")
            rows.append([values.decode_typed(v, c.type, f"row {r}: column {c.spelled!r}")
                         for v, c in zip(row.values, columns)])
            for v, c in zip(rows[-1], columns):
                if c.type.proto or (c.type.element and c.type.element.proto):
                    await self._protos.check_typed(ns.database, c.type, v, f"row {r}: column {c.spelled!r}")
        if not rows:
            return None
        what = f"a {kind.replace('_', ' ').title().replace(' ', '')} of {table.spelled}"
        # In statements of at most t.MAX_PARAMS values each (PostgreSQL's limit), in order, in the commit's
        # transaction: all of the mutation or none of it.
        steps = [(t.write(table, columns, len(part), "insert" if kind == "replace" else kind), t.row_params(part))
                 for part in t.batches(rows, len(columns))]
        if kind == "update":
            at_key = [columns.index(c) for c in table.key]
            expected = [len({tuple(row[i] for i in at_key) for row in part}) for part in t.batches(rows, len(columns))]

            async def update(conn: Any) -> tuple[list[Any], int]:
                total = 0
                for (statement, values), wanted in zip(steps, expected):
                    count = (await self._store.table_run_in(conn, statement, values, what))[1]
                    if count < wanted:
                        raise errors.RowNotFound(f"{what}: a row to update is not found (Update changes existing "
                                                 "rows only; use InsertOrUpdate to create them)")
                    total += count
                return [], total

            return TableOp(table.name, update, len(rows))
        if kind == "replace":
            at = [columns.index(c) for c in table.key]
            deleting = []
            for part in t.batches([[row[i] for i in at] for row in rows], len(at)):
                key_params: dict[str, Any] = {}
                deleting.append((t.delete_rows(table, t.key_condition(table.key, part, [], key_params)), key_params))
            return self._steps(table.name, deleting, steps, what, len(rows))
        return self._steps(table.name, [], steps, what, len(rows))

    def _steps(self, table: str, before: list[tuple[sql.Composed, dict[str, Any]]],
               counted: list[tuple[sql.Composed, dict[str, Any]]], what: str, rows: int) -> TableOp:
        """A TableOp of several statements run in order; its count is the ``counted`` ones'."""
        async def run(conn: Any) -> tuple[list[Any], int]:
            for statement, values in before:
                await self._store.table_run_in(conn, statement, values, what)
            total = 0
            for statement, values in counted:
                total += (await self._store.table_run_in(conn, statement, values, what))[1]
            return [], total

        return TableOp(table, run, rows)

    def _keys(self, key: Sequence[Col], key_set: Any, what: str, prefix_ok: bool = False
              ) -> tuple[list[list[Any]], list[t.KeyRange]]:
        def decoded(key_values: Any, where: str, partial: bool) -> list[Any]:
            given = list(key_values.values)
            if len(given) > len(key) or (not partial and len(given) != len(key)):
                raise errors.InvalidArgument(f"{what}: {where} has {len(given)} value(s) for a key of {len(key)} "
                                             f"column(s) ({', '.join(c.spelled for c in key)})")
            return [values.decode_typed(v, c.type, f"{where}: {c.spelled}") for v, c in zip(given, key)]

        keys = [decoded(k, f"key {i}", prefix_ok) for i, k in enumerate(key_set.keys)]
        ranges = []
        for i, r in enumerate(key_set.ranges):
            start_kind, end_kind = r.WhichOneof("start_key_type"), r.WhichOneof("end_key_type")
            start = decoded(getattr(r, start_kind), f"range {i}", True) if start_kind else []
            end = decoded(getattr(r, end_kind), f"range {i}", True) if end_kind else []
            ranges.append(t.KeyRange(tuple(start), start_kind == "start_closed", tuple(end), end_kind == "end_closed"))
        return keys, ranges

    def _delete(self, table: TableDef, key_set: Any) -> TableOp | None:
        what = f"a Delete of {table.spelled}"
        if key_set.all_:
            return self._op(table.name, t.delete_rows(table, None), {}, what)
        keys, ranges = self._keys(table.key, key_set, what)
        if not keys and not ranges:
            return None
        steps = []  # in statements of at most t.MAX_PARAMS values each
        directions = [d for _, d in table.key_order]
        for part_keys, part_ranges in ([(p, []) for p in t.batches(keys, len(table.key))]
                                       + [([], p) for p in t.batches(ranges, 2 * len(table.key))]):
            params: dict[str, Any] = {}
            condition = t.key_condition(table.key, part_keys, part_ranges, params, descending=directions)
            steps.append((t.delete_rows(table, condition), params))
        return self._steps(table.name, [], steps, what, max(1, len(keys)))

    # -- Read / StreamingRead ---------------------------------------------------------

    async def read(self, request: Any, use: Any, ns: Scope) -> "TableResult":
        table = await self.table(ns, fold(request.table))
        assert table is not None
        if not request.columns:
            raise errors.InvalidArgument("Read needs the columns to return")
        columns = []
        for name in request.columns:
            column = table.column(fold(name))
            if column is None:
                raise errors.InvalidArgument(f"Column not found in table {table.spelled}: {name}")
            columns.append(column)
        if request.limit < 0:
            raise errors.InvalidArgument("Read's limit cannot be negative")
        order: list[tuple[Col, bool]] = list(table.key_order)
        if request.index:
            found = await self._store.table_definitions([ns.prefix + fold(request.index)])
            index = next((IndexDef.of_json(n, d) for n, kind, d in found if kind == "index"), None)
            if index is None or index.table != table.name:
                raise errors.RowNotFound(f"Index not found on table {table.spelled}: {request.index}")
            order = [(c, d) for name, d in index.columns if (c := table.column(name)) is not None]
        key = [c for c, _ in order]
        what = f"a Read of {table.spelled}"
        params: dict[str, Any] = {}
        condition: sql.Composable | None = None
        if not request.key_set.all_:
            keys, ranges = self._keys(key, request.key_set, what, prefix_ok=bool(request.index))
            condition = t.key_condition(key, keys, ranges, params, descending=[d for _, d in order])
        statement = t.read(table, columns, order, condition, request.limit or None, not use.read_only, params)
        if use.read_only:
            rows = await self._store.table_read(statement, params, what)
        else:
            rows = (await (await use.hold()).apply([self._op(table.name, statement, params, what)]))[0][0]
        typed = [(c.spelled, c.type) for c in columns]
        shown = [(f"{what}: column {c.spelled}", c.type) for c in columns]
        return TableResult(typed, [[values.encode_typed(v, t, label) for v, (label, t) in zip(row, shown)]
                                   for row in rows])

    # -- DDL --------------------------------------------------------------------------

    async def ddl(self, statement: ast.TableDdl, database: str | None, ns: Scope) -> None:
        try:
            if isinstance(statement, ast.CreateTable):
                await self._create_table(statement, database, ns)
            elif isinstance(statement, ast.CreateIndex):
                await self._create_index(statement, database, ns)
            elif isinstance(statement, ast.AlterTable):
                await self._alter(statement, database, ns)
            else:
                await self._drop(statement, ns)
        finally:  # what was read while it ran may be stale
            self._cache.clear()

    async def _existing(self, ns: Scope, name: str, shown: str, context: str = "") -> TableDef:
        """The table ``name`` (folded) of the database, or NOT_FOUND in Spanner's words."""
        table = await self.table(ns, name)
        if table is None:
            raise errors.RowNotFound(f"Table not found: {shown}" + (f" ({context})" if context else ""))
        return table

    def _name(self, ns: Scope, name: str) -> str:
        queues.check_name(name, "table name", queues.MAX_QUEUE_NAME - len(ns.prefix))
        if not ns.owns(name):
            raise errors.InvalidArgument(f"{name!r} is not a name of this database: {RESERVED}")
        return ns.prefix + name

    async def _column(self, c: ast.ColumnDef, database: str | None, what: str, key: bool = False) -> ast.ColumnDef:
        """A column with its proto type resolved in the database's bundle (a PROTO is no key, as in Spanner)."""
        if c.type.proto is None and (c.type.element is None or c.type.element.proto is None):
            return c
        resolved = await self._protos.resolve(database, c.type, f"{what}: column {c.spelled}")
        if key and resolved.code != "ENUM":
            raise errors.InvalidArgument(f"{what}: key column {c.spelled} has the type {resolved.ddl()} (a proto "
                                         "message, or an array): Spanner keys take no PROTO or ARRAY column")
        return dataclasses.replace(c, type=resolved)

    async def proto_columns(self, database: str) -> dict[str, str]:
        """The proto types a database's tables' columns use, each with a column that does."""
        used: dict[str, str] = {}
        for name, kind, definition in await self._store.table_definitions_of(database):
            if kind != "table":
                continue
            table = TableDef.of_json(name, definition)
            for column in table.columns:
                proto = column.type.proto or (column.type.element.proto if column.type.element else None)
                if proto:
                    used.setdefault(proto, f"column {table.spelled}.{column.spelled}")
        return used

    async def _create_table(self, s: ast.CreateTable, database: str | None, ns: Scope) -> None:
        name = self._name(ns, s.name)
        if s.if_not_exists and await self.table(ns, s.name) is not None:
            return
        what = f"CREATE TABLE {s.spelled}"
        s = dataclasses.replace(s, columns=tuple([await self._column(c, database, what, c.name in s.primary_key)
                                                  for c in s.columns]))
        parent = None
        if s.parent is not None:
            parent = await self._existing(ns, s.parent, s.parent, f"the parent of {s.spelled}")
        table = table_of(s, name, parent.name if parent else None, t.column_generation)
        if parent is not None:
            width = len(parent.primary_key)
            mine = table.key_order[:width]
            if len(mine) < width or any(a.name != b.name or a.type.code != b.type.code or d != e
                                        for (a, d), (b, e) in zip(mine, parent.key_order)):
                raise errors.FailedPrecondition(
                    f"Table {s.spelled} references parent table {parent.spelled}: its primary key must start with "
                    f"the parent's, in its order ("
                    f"{', '.join(f'{c.spelled} {c.type.ddl()}' + (' DESC' if d else '') for c, d in parent.key_order)})")
        await self._store.table_ddl(t.create_table(table, parent), f"CREATE TABLE {s.spelled}",
                               lock_timeout=DDL_LOCK_TIMEOUT,
                               register=(name, database, "table", s.spelled, table.as_json()))

    async def _create_index(self, s: ast.CreateIndex, database: str | None, ns: Scope) -> None:
        name = self._name(ns, s.name)
        table = await self._existing(ns, s.table, s.table, f"CREATE INDEX {s.spelled}")
        if s.if_not_exists and await self._store.table_definitions([name]):
            return
        interleave = None
        if s.interleave_in is not None:
            interleave = (await self._existing(ns, s.interleave_in, s.interleave_in,
                                               f"CREATE INDEX {s.spelled}")).name
        for column_name, _ in s.columns:
            column = table.column(column_name)
            if column is not None and "PROTO" in (column.type.code, column.type.element and column.type.element.code):
                raise errors.InvalidArgument(f"CREATE INDEX {s.spelled}: column {column.spelled} is of the proto type "
                                             f"{column.type.ddl()}, which no index key takes (as in Spanner)")
        index = index_of(s, name, table, interleave)
        await self._store.table_ddl([t.create_index(index, table)], f"CREATE INDEX {s.spelled}",
                               lock_timeout=DDL_LOCK_TIMEOUT,
                               register=(name, database, "index", s.spelled, index.as_json()))

    async def _alter(self, s: ast.AlterTable, database: str | None, ns: Scope) -> None:
        """ADD COLUMN (a nullable one to a table with rows; NOT NULL only to an empty one, as
        PostgreSQL checks) or DROP COLUMN (not of the key, not one an index uses, as in Spanner)."""
        table = await self._existing(ns, s.name, s.name, "ALTER TABLE")
        if s.add is not None:
            if table.column(s.add.name) is not None:
                if s.if_not_exists:
                    return
                raise errors.FailedPrecondition(f"Duplicate column name {table.spelled}.{s.add.spelled}")
            column = schema_col(await self._column(s.add, database, f"ALTER TABLE {table.spelled}"),
                                tuple(c for c in table.columns if c.generated_as is None), t.column_generation)
            altered = dataclasses.replace(table, columns=table.columns + (column,))
            statement, what = t.add_column(altered, column), f"ALTER TABLE {table.spelled} ADD COLUMN {s.add.spelled}"
        else:
            assert s.drop is not None
            dropped = table.column(s.drop)
            if dropped is None:
                raise errors.RowNotFound(f"Column not found in table {table.spelled}: {s.drop}")
            if dropped.name in table.primary_key:
                raise errors.FailedPrecondition(f"Cannot drop key column {dropped.spelled} of table {table.spelled}")
            indexes, _ = await self._store.table_dependents(table.name)
            for name, _, definition in await self._store.table_definitions(indexes):
                index = IndexDef.of_json(name, definition)
                if dropped.name in [c for c, _ in index.columns] + list(index.storing):
                    raise errors.FailedPrecondition(f"Cannot drop column {dropped.spelled} of table {table.spelled}: "
                                                    f"index {index.spelled} uses it (drop the index first)")
            altered = dataclasses.replace(table, columns=tuple(c for c in table.columns if c != dropped))
            statement, what = t.drop_column(table.name, dropped), f"ALTER TABLE {table.spelled} DROP COLUMN {s.drop}"
        await self._store.table_ddl([statement], what, lock_timeout=DDL_LOCK_TIMEOUT,
                                    redefine=(table.name, altered.as_json()))

    async def _drop(self, s: ast.DropTable | ast.DropIndex, ns: Scope) -> None:
        name = ns.prefix + s.name
        kind = "table" if isinstance(s, ast.DropTable) else "index"
        found = [r for r in await self._store.table_definitions([name]) if r[1] == kind] if ns.owns(s.name) else []
        if not found:
            if s.if_exists:
                return
            raise errors.RowNotFound(f"{kind.title()} not found: {s.name}")
        if kind == "table":
            indexes, children = await self._store.table_dependents(name)
            if indexes:
                raise errors.FailedPrecondition(f"Cannot drop table {found[0][2]['spelled']} with indices: "
                                                f"{', '.join(i.removeprefix(ns.prefix) for i in indexes)}")
            if children:
                raise errors.FailedPrecondition(f"Cannot drop table {found[0][2]['spelled']} with interleaved "
                                                f"tables: {', '.join(c.removeprefix(ns.prefix) for c in children)}")
            statement = t.drop_table(name)
        else:
            statement = t.drop_index(name)
        await self._store.table_ddl([statement], f"DROP {kind.upper()} {s.name}", lock_timeout=DDL_LOCK_TIMEOUT,
                               unregister=name)

    async def check_droppable(self, databases: Sequence[str], queues: Sequence[str]) -> None:
        """FAILED_PRECONDITION, before anything is dropped, while something outside the databases
        (their ``queues``, tables and indexes) depends on one of them: DropDatabase is all or nothing.
        (Should one appear meanwhile, the drop stops there; run again, it goes on.)"""
        names = list(queues) + [n for d in databases for n, _, _ in await self._store.table_definitions_of(d)]
        found = await self._store.table_outside_dependents(names) if names else []
        if found:
            shown = ", ".join(f"{dependent} depends on {relation}" for dependent, relation in found[:5])
            raise errors.FailedPrecondition(
                f"Cannot drop {', '.join(databases)}: what is not its own depends on its tables or queues ({shown}: "
                "an interleaved table or queue, a dead-letter queue, a foreign key or view made by psql); drop or "
                "change those first. Nothing was dropped")

    async def drop_all(self, database: str) -> None:
        """Drops a database's tables and indexes (its queues are gone already), children first."""
        try:
            await self._drop_all(database)
        finally:
            self._cache.clear()

    async def _drop_all(self, database: str) -> None:
        for name, kind, _ in reversed(await self._store.table_definitions_of(database)):
            statement = t.drop_table(name) if kind == "table" else t.drop_index(name)
            try:
                await self._store.table_ddl([statement], f"DROP {kind.upper()} {name}", lock_timeout=DDL_LOCK_TIMEOUT,
                                       unregister=name)
            except errors.RowNotFound:  # dropped by hand (psql): forget it
                await self._store.table_ddl([], f"forgetting {name}", lock_timeout=DDL_LOCK_TIMEOUT, unregister=name)

    async def declared_names(self, database: str) -> dict[str, str]:
        """The database's tables' declared names, by their PostgreSQL name."""
        return {n: str(d["spelled"]) for n, kind, d in await self._store.table_definitions_of(database)
                if kind == "table"}

    async def ddl_of(self, database: str, ns: Scope) -> list[str]:
        """The database's tables and indexes as GetDatabaseDdl lists them, in creation order."""
        found = await self._store.table_definitions_of(database)
        tables = {n: TableDef.of_json(n, d) for n, kind, d in found if kind == "table"}
        declared = {n: table.spelled for n, table in tables.items()}
        out = []
        for name, kind, definition in found:
            if kind == "table":
                out.append(table_ddl(tables[name], ns.prefix, declared, pg=ns.pg))
            else:
                index = IndexDef.of_json(name, definition)
                if index.table in tables:
                    out.append(index_ddl(index, tables[index.table], ns.prefix, declared))
        return out


@dataclasses.dataclass
class TableResult:
    columns: list[tuple[str, ast.SpannerType]]
    rows: list[list[struct_pb2.Value]]
    row_count: int | None = None
    lower_bound: bool = False
    """Partitioned DML: the count is a lower bound (row_count_lower_bound)."""

    @property
    def row_type(self) -> Any:
        return row_type(self.columns)


def _queue_type(code: str) -> ast.SpannerType:
    return ast.SpannerType(code.upper()) if code.upper() in ast.SCALARS else ast.STRING
