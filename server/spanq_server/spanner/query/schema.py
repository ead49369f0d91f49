"""The relations a Spanner database's statements name: its tables (and their
indexes) made through the Spanner API, and its queues seen as tables.

Each is a PostgreSQL table of the database's namespace (``d<N>_<name>``,
folded); its columns are folded names too (a psql user writes ``userid``),
while results, errors and GetDatabaseDdl show the names as the DDL declared
them (``UserId``). A definition is stored as JSON beside the table
(``spanq.spanner_tables``), so that every server and a restart see it.
"""

import dataclasses
from typing import Any

from collections.abc import Callable

from .ast import ColumnDef, CreateIndex, CreateTable, SpannerType, googlesql


@dataclasses.dataclass(frozen=True)
class Col:
    name: str
    """Folded Spanner name."""
    spelled: str
    type: SpannerType
    pg: str
    """The PostgreSQL column."""
    not_null: bool = False
    commit_timestamp: bool = False
    hidden: bool = False
    """Declared HIDDEN: left out of ``*`` and ``t.*``, returned when named."""
    generated_as: str | None = None
    """A generated column (AS (expr) STORED): its expression as GetDatabaseDdl lists it."""
    generated_sql: str | None = None
    """Its PostgreSQL (postgres.generation): the table's GENERATED ALWAYS AS (...) STORED."""


Generation = Callable[[ColumnDef, tuple[Col, ...]], str]
"""A generated column's PostgreSQL expression from its definition and the columns it may read
(postgres.column_generation)."""


@dataclasses.dataclass(frozen=True)
class IndexDef:
    name: str
    """The PostgreSQL index (namespaced)."""
    spelled: str
    table: str
    """The PostgreSQL table (namespaced)."""
    columns: tuple[tuple[str, bool], ...]
    unique: bool = False
    null_filtered: bool = False
    storing: tuple[str, ...] = ()
    interleave_in: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"spelled": self.spelled, "table": self.table, "columns": [list(c) for c in self.columns],
                "unique": self.unique, "null_filtered": self.null_filtered, "storing": list(self.storing),
                "interleave_in": self.interleave_in}

    @staticmethod
    def of_json(name: str, data: dict[str, Any]) -> "IndexDef":
        return IndexDef(name, data["spelled"], data["table"], tuple((c, bool(d)) for c, d in data["columns"]),
                        bool(data.get("unique")), bool(data.get("null_filtered")), tuple(data.get("storing") or ()),
                        data.get("interleave_in"))


@dataclasses.dataclass(frozen=True)
class TableDef:
    name: str
    """The PostgreSQL table (namespaced: ``d1_users``)."""
    spelled: str
    """As declared (``Users``)."""
    columns: tuple[Col, ...]
    primary_key: tuple[str, ...]
    parent: str | None = None
    """The parent's PostgreSQL table (INTERLEAVE IN PARENT)."""
    on_delete_cascade: bool = False
    queue: bool = False
    """A queue, seen as a table: read only (its writes are sends and acks)."""
    descending: tuple[str, ...] = ()
    """The primary-key columns declared DESC: rows are in key order, each column in its direction."""

    def column(self, name: str) -> Col | None:
        return next((c for c in self.columns if c.name == name), None)

    @property
    def shown(self) -> tuple[Col, ...]:
        """The columns ``*`` gives (Spanner leaves HIDDEN ones out)."""
        return tuple(c for c in self.columns if not c.hidden)

    @property
    def key(self) -> tuple[Col, ...]:
        return tuple(c for k in self.primary_key for c in self.columns if c.name == k)

    @property
    def key_order(self) -> tuple[tuple[Col, bool], ...]:
        """The key's columns, each with whether it is DESC: the rows' order (Read's, a KeyRange's)."""
        return tuple((c, c.name in self.descending) for c in self.key)

    def as_json(self) -> dict[str, Any]:
        out = {"spelled": self.spelled, "primary_key": list(self.primary_key), "parent": self.parent,
               "on_delete_cascade": self.on_delete_cascade,
               "columns": [{"name": c.name, "spelled": c.spelled, "type": c.type.as_json(), "not_null": c.not_null,
                            "commit_timestamp": c.commit_timestamp, "hidden": c.hidden,
                            **({"generated_as": c.generated_as, "generated_sql": c.generated_sql}
                               if c.generated_as is not None else {})} for c in self.columns]}
        if self.descending:  # absent in the definitions of tables made before DESC keys
            out["descending"] = list(self.descending)
        return out

    @staticmethod
    def of_json(name: str, data: dict[str, Any]) -> "TableDef":
        columns = tuple(Col(c["name"], c["spelled"], SpannerType.of_json(c["type"]), c["name"], bool(c["not_null"]),
                            bool(c.get("commit_timestamp")), bool(c.get("hidden")), c.get("generated_as"),
                            c.get("generated_sql"))
                        for c in data["columns"])
        return TableDef(name, data["spelled"], columns, tuple(data["primary_key"]), data.get("parent"),
                        bool(data.get("on_delete_cascade")), descending=tuple(data.get("descending") or ()))


def table_of(statement: CreateTable, name: str, parent: str | None, generation: Generation | None = None) -> TableDef:
    """The definition of a CREATE TABLE, to be made as PostgreSQL table ``name`` (its generated
    columns' expressions by ``generation``)."""
    from ...ground.errors import InvalidArgument

    seen: set[str] = set()
    for c in statement.columns:
        if c.name in seen:
            raise InvalidArgument(f"CREATE TABLE {statement.spelled}: column {c.spelled!r} is defined twice")
        seen.add(c.name)
    for k in statement.primary_key:
        if k not in seen:
            raise InvalidArgument(f"CREATE TABLE {statement.spelled}: primary-key column {k!r} is not defined")
    if len(set(statement.primary_key)) != len(statement.primary_key):
        raise InvalidArgument(f"CREATE TABLE {statement.spelled}: a primary-key column is named twice")
    plain = tuple(schema_col(c) for c in statement.columns if c.generated is None)
    columns = tuple(schema_col(c, plain, generation) for c in statement.columns)
    for col in columns:
        if col.name in statement.primary_key and col.generated_as is not None:
            raise InvalidArgument(f"CREATE TABLE {statement.spelled}: column {col.spelled!r} is generated: spanq's "
                                  "tables take generated columns outside the primary key (queues take generated "
                                  "key columns)")
        if col.name in statement.primary_key and col.type.code in ("ARRAY", "JSON"):
            raise InvalidArgument(f"CREATE TABLE {statement.spelled}: column {col.spelled!r} of type "
                                  f"{col.type.ddl()} cannot be part of the primary key")
    return TableDef(name, statement.spelled, columns, statement.primary_key, parent, statement.on_delete_cascade,
                    descending=statement.descending)


def schema_col(c: ColumnDef, readable: tuple[Col, ...] = (), generation: Generation | None = None) -> Col:
    """A column definition's column (CREATE TABLE's, ALTER TABLE ... ADD COLUMN's); a generated
    one's expression reads ``readable``, the table's columns that are not generated."""
    if c.generated is None:
        return Col(c.name, c.spelled, c.type, c.name, c.not_null, c.commit_timestamp, c.hidden)
    from ...ground.errors import InvalidArgument

    if generation is None:
        raise InvalidArgument(f"column {c.spelled!r}: a generated column is made by CREATE TABLE only")
    if c.commit_timestamp:
        raise InvalidArgument(f"column {c.spelled!r}: a generated column takes no allow_commit_timestamp")
    return Col(c.name, c.spelled, c.type, c.name, c.not_null, False, c.hidden, googlesql(c.generated),
               generation(c, readable))


def index_of(statement: CreateIndex, name: str, table: TableDef, interleave_in: str | None) -> IndexDef:
    from ...ground.errors import InvalidArgument

    for column in [c for c, _ in statement.columns] + list(statement.storing):
        found = table.column(column)
        if found is None:
            raise InvalidArgument(f"CREATE INDEX {statement.spelled}: table {table.spelled!r} has no column "
                                  f"{column!r}")
        if found.type.code in ("ARRAY", "JSON") and column not in statement.storing:
            raise InvalidArgument(f"CREATE INDEX {statement.spelled}: column {found.spelled!r} of type "
                                  f"{found.type.ddl()} cannot be an index key")
    return IndexDef(name, statement.spelled, table.name, statement.columns, statement.unique,
                    statement.null_filtered, statement.storing, interleave_in)


PG_DDL_TYPES = {"INT64": "bigint", "BOOL": "boolean", "BYTES": "bytea", "STRING": "character varying",
                "DATE": "date", "FLOAT64": "double precision", "NUMERIC": "numeric",
                "TIMESTAMP": "timestamp with time zone", "JSON": "jsonb"}


def _pg_type(t: SpannerType) -> str:
    if t.code == "ARRAY":
        assert t.element is not None
        return _pg_type(t.element) + "[]"
    return PG_DDL_TYPES[t.code] + (f"({t.length})" if t.code == "STRING" and t.length else "")


def _pg_name(text: str) -> str:
    """A name as PostgreSQL DDL writes it: quoted unless it reads back as itself unquoted."""
    return text if text == text.lower() and text.isidentifier() else '"' + text.replace('"', '""') + '"'


def pg_table_ddl(table: TableDef, ns: str, declared: dict[str, str] | None = None) -> str:
    """CREATE TABLE in Spanner's PostgreSQL dialect, as its GetDatabaseDdl shows one."""
    lines = [f"  {_pg_name(c.spelled)} {_pg_type(c.type)}" + (" NOT NULL" if c.not_null else "")
             for c in table.columns]
    spelled = {c.name: c.spelled for c in table.columns}
    lines.append(f"  PRIMARY KEY({', '.join(_pg_name(spelled[k]) for k in table.primary_key)})")
    text = f"CREATE TABLE {_pg_name(table.spelled)} (\n" + ",\n".join(lines) + "\n)"
    if table.parent:
        parent = (declared or {}).get(table.parent) or table.parent.removeprefix(ns)
        text += f" INTERLEAVE IN PARENT {_pg_name(parent)}"
        text += " ON DELETE CASCADE" if table.on_delete_cascade else " ON DELETE NO ACTION"
    return text


def table_ddl(table: TableDef, ns: str, declared: dict[str, str] | None = None, pg: bool = False) -> str:
    """CREATE TABLE as Spanner's GetDatabaseDdl shows it, names as declared (``declared``:
    PostgreSQL table -> its declared name, for the parent), in the database's dialect."""
    if pg:
        return pg_table_ddl(table, ns, declared)
    lines = []
    for c in table.columns:
        line = f"  {c.spelled} {c.type.ddl()}"
        if c.not_null:
            line += " NOT NULL"
        if c.generated_as is not None:
            line += f" AS ({c.generated_as}) STORED"
        if c.hidden:
            line += " HIDDEN"
        if c.commit_timestamp:
            line += " OPTIONS (allow_commit_timestamp = true)"
        lines.append(line + ",")
    spelled = {c.name: c.spelled for c in table.columns}
    text = f"CREATE TABLE {table.spelled} (\n" + "\n".join(lines) + "\n) PRIMARY KEY("
    text += ", ".join(spelled[k] + (" DESC" if k in table.descending else "") for k in table.primary_key) + ")"
    if table.parent:
        text += f",\n  INTERLEAVE IN PARENT {(declared or {}).get(table.parent) or table.parent.removeprefix(ns)}"
        text += " ON DELETE CASCADE" if table.on_delete_cascade else " ON DELETE NO ACTION"
    return text


def index_ddl(index: IndexDef, table: TableDef, ns: str, declared: dict[str, str] | None = None) -> str:
    spelled = {c.name: c.spelled for c in table.columns}
    kind = "UNIQUE " if index.unique else ""
    kind += "NULL_FILTERED " if index.null_filtered else ""
    parts = ", ".join(spelled.get(c, c) + (" DESC" if d else "") for c, d in index.columns)
    text = f"CREATE {kind}INDEX {index.spelled} ON {table.spelled}({parts})"
    if index.storing:
        text += " STORING (" + ", ".join(spelled.get(c, c) for c in index.storing) + ")"
    if index.interleave_in:
        text += f", INTERLEAVE IN {(declared or {}).get(index.interleave_in) or index.interleave_in.removeprefix(ns)}"
    return text
