"""PostgreSQL for Spanner tables: DDL, the statements of the GoogleSQL subset
(parsed by ``parser``), mutations and reads, composed with
psycopg.sql. Names only ever reach the text as ``sql.Identifier`` of names
the schema knows; every value is a parameter, cast to its column's type.

``translate`` is strict: a name the schema does not know, a type that does not
fit, an aggregate beside a plain column is INVALID_ARGUMENT naming it.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

from psycopg import sql

from ...ground.errors import FailedPrecondition, InvalidArgument
from . import ast
from . import ranges
from .lexing import fold
from .schema import Col, IndexDef, TableDef

PG_TYPES = {"BOOL": "boolean", "INT64": "bigint", "FLOAT64": "double precision", "NUMERIC": "numeric",
            "STRING": "text", "BYTES": "bytea", "DATE": "date", "TIMESTAMP": "timestamptz", "JSON": "jsonb",
            "PROTO": "bytea", "ENUM": "bigint"}
"""A proto message is stored as its bytes, an enum as its number."""
ORDERED = ("INT64", "FLOAT64", "NUMERIC", "STRING", "BYTES", "DATE", "TIMESTAMP", "BOOL", "ENUM")
"""Types that compare with < and > (JSON, PROTO and ARRAY do not, as in Spanner; an ENUM by its number)."""
NUMBERS = ("INT64", "FLOAT64", "NUMERIC")

SCHEMA = "public"
MAX_PARAMS = 65_535
"""PostgreSQL's limit of bind parameters in one statement: every value is one. A mutation's rows
are written in statements of at most this many values (``batches``); a statement or Read past it
is INVALID_ARGUMENT naming it, never the connection's error (UNAVAILABLE, "retry")."""
MAX_RANGES = 1_000
"""Key ranges of one KeySet: a Read or Delete compares each row with each range."""
NAME_BYTES = 63
"""PostgreSQL keeps a name's first 63 bytes (NAMEDATALEN - 1) and drops the rest."""
SYSTEM_COLUMNS = frozenset({"tableoid", "xmin", "cmin", "xmax", "cmax", "ctid"})
"""Names every PostgreSQL table has already: no column of a table may take one."""

def pg_type(t: ast.SpannerType) -> sql.Composable:
    if t.code == "ARRAY":
        assert t.element is not None
        return sql.SQL("{}[]").format(pg_type(t.element))
    if t.code == "STRING" and t.length is not None:
        return sql.SQL("varchar({})").format(sql.Literal(t.length))
    return sql.SQL(PG_TYPES[t.code])


def _cast_type(t: ast.SpannerType) -> sql.Composable:
    """The type a parameter is cast to (lengths are the column's to check)."""
    if t.code == "ARRAY":
        assert t.element is not None
        return sql.SQL("{}[]").format(_cast_type(t.element))
    return _SCALAR_CASTS[t.code]


_SCALAR_CASTS = {code: sql.SQL(name) for code, name in PG_TYPES.items()}
_CAST = sql.SQL("::")


def unsized(t: ast.SpannerType | None) -> ast.SpannerType | None:
    """A column's type as a value's: without its length (a parameter's type has none)."""
    if t is None:
        return None
    return ast.SpannerType(t.code, unsized(t.element), None, t.proto)


def table_id(name: str) -> sql.Identifier:
    return sql.Identifier(SCHEMA, name)


# -- DDL ------------------------------------------------------------------------------


def check_column_names(table: TableDef) -> None:
    """Column names PostgreSQL would refuse or merge are INVALID_ARGUMENT before any DDL runs: a
    system column's name, and two names equal in their first 63 bytes (the rest is dropped)."""
    seen: dict[str, str] = {}
    for c in table.columns:
        if c.pg in SYSTEM_COLUMNS:
            raise InvalidArgument(f"CREATE TABLE {table.spelled}: column {c.spelled!r} has the name of a PostgreSQL "
                                  f"system column ({', '.join(sorted(SYSTEM_COLUMNS))}), which every table has "
                                  "already: rename it", limit="column_name")
        kept = _truncated(c.pg)
        if kept in seen:
            raise InvalidArgument(f"CREATE TABLE {table.spelled}: columns {seen[kept]!r} and {c.spelled!r} are equal "
                                  f"in their first {NAME_BYTES} bytes, all PostgreSQL keeps of a name: rename one",
                                  limit="column_name")
        seen[kept] = c.spelled


def _truncated(name: str) -> str:
    """A name as PostgreSQL keeps it: its first 63 bytes, not cutting a character."""
    return name.encode()[:NAME_BYTES].decode(errors="ignore")


def create_table(table: TableDef, parent: TableDef | None) -> list[sql.Composed]:
    check_column_names(table)
    columns: list[sql.Composable] = [_column(c) for c in table.columns]
    key = sql.SQL(", ").join(sql.Identifier(c.pg) for c in table.key)
    columns.append(sql.SQL("PRIMARY KEY ({})").format(key))
    if parent is not None:
        width = len(parent.primary_key)
        columns.append(sql.SQL("FOREIGN KEY ({}) REFERENCES {} ({}) ON DELETE {}").format(
            sql.SQL(", ").join(sql.Identifier(c.pg) for c in table.key[:width]), table_id(parent.name),
            sql.SQL(", ").join(sql.Identifier(c.pg) for c in parent.key),
            sql.SQL("CASCADE" if table.on_delete_cascade else "NO ACTION")))
    statements = [sql.SQL("CREATE TABLE {} (\n    {}\n)").format(table_id(table.name),
                                                                 sql.SQL(",\n    ").join(columns))]
    directions = {d for _, d in table.key_order}
    if len(directions) > 1:
        # PostgreSQL's primary key (what foreign keys and ON CONFLICT name) is ascending: PRIMARY KEY
        # USING INDEX takes only an index of the default order. A key of mixed directions also gets
        # this index in its own order, so that reads in key order (Read, key ranges) walk an index
        # rather than sort; one of a single direction walks the primary key's, backwards if DESC.
        statements.append(sql.SQL("CREATE UNIQUE INDEX {} ON {} ({})").format(
            sql.Identifier(key_order_index(table.name)), table_id(table.name),
            sql.SQL(", ").join(sql.SQL("{}{}").format(sql.Identifier(c.pg), sql.SQL(" DESC" if d else ""))
                               for c, d in table.key_order)))
    return statements


def key_order_index(table: str) -> str:
    """The index of a mixed-direction key's order: ``$`` is in no Spanner name, so no index
    a DDL names can take it."""
    return table + "$key"


def _column(c: Col) -> sql.Composed:
    """A column's definition in CREATE TABLE or ALTER TABLE ... ADD COLUMN."""
    column = sql.SQL("{} {}").format(sql.Identifier(c.pg), pg_type(c.type))
    if c.type.code == "STRING" or (c.type.code == "ARRAY" and c.type.element and c.type.element.code == "STRING"):
        column = sql.SQL("{} COLLATE \"C\"").format(column)  # Spanner orders strings by their bytes
    if c.generated_sql is not None:  # column_generation's text: every writer, psql too, gets it computed
        column = sql.SQL("{} GENERATED ALWAYS AS ({}) STORED").format(
            column, sql.SQL(c.generated_sql))  # type: ignore[arg-type]  # composed by generation()
    if c.not_null:
        column = sql.SQL("{} NOT NULL").format(column)
    if c.type.code == "BYTES" and c.type.length is not None:
        column = sql.SQL("{} CHECK (octet_length({}) <= {})").format(column, sql.Identifier(c.pg),
                                                                     sql.Literal(c.type.length))
    return column


def add_column(table: TableDef, column: Col) -> sql.Composed:
    """ALTER TABLE ... ADD COLUMN, ``table`` being the definition with the column added."""
    check_column_names(table)
    return sql.SQL("ALTER TABLE {} ADD COLUMN {}").format(table_id(table.name), _column(column))


def drop_column(table: str, column: Col) -> sql.Composed:
    return sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(table_id(table), sql.Identifier(column.pg))


def drop_table(name: str) -> sql.Composed:
    return sql.SQL("DROP TABLE {}").format(table_id(name))


def create_index(index: IndexDef, table: TableDef) -> sql.Composed:
    parts = []
    for name, descending in index.columns:
        column = table.column(name)
        assert column is not None
        parts.append(sql.SQL("{}{}").format(sql.Identifier(column.pg), sql.SQL(" DESC" if descending else "")))
    statement = sql.SQL("CREATE {}INDEX {} ON {} ({})").format(
        sql.SQL("UNIQUE " if index.unique else ""), sql.Identifier(index.name), table_id(table.name),
        sql.SQL(", ").join(parts))
    if index.null_filtered:
        statement = sql.SQL("{} WHERE {}").format(statement, sql.SQL(" AND ").join(
            sql.SQL("{} IS NOT NULL").format(sql.Identifier(c)) for c, _ in index.columns))
    return statement


def drop_index(name: str) -> sql.Composed:
    return sql.SQL("DROP INDEX {}").format(sql.Identifier(SCHEMA, name))


# -- statements ---------------------------------------------------------------------


@dataclasses.dataclass
class Translated:
    statement: sql.Composed
    params: dict[str, Any]
    """The literals' values (``l0``, ``l1``, ...); the request's parameters go in as ``p_<name>``."""
    wanted: dict[str, ast.SpannerType]
    """Each request parameter's type (declared by the client, else the column it meets)."""
    columns: list[tuple[str, ast.SpannerType]]
    """The result's columns (SELECT, THEN RETURN), named as results show them."""
    dml: bool = False
    target: TableDef | None = None
    """The table a DML statement writes."""
    counts: dict[str, str] = dataclasses.field(default_factory=dict)
    """The request parameters given as LIMIT or OFFSET, by name: a negative one is the caller's to
    refuse (PostgreSQL's error would be no client error)."""


@dataclasses.dataclass
class _Scope:
    relations: list[tuple[str, TableDef]]
    """(name in the statement: alias or table name, definition)."""
    nullable: set[str] = dataclasses.field(default_factory=set)
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)
    """A relation's name in the statement -> in PostgreSQL, where they differ (``pg_aliases``)."""
    outer: "_Scope | None" = None
    """The enclosing SELECT's scope, for a subquery: names it does not have are looked up there."""

    def alias(self, shown: str) -> str:
        return self.aliases.get(shown, shown)


def pg_aliases(names: Sequence[str]) -> dict[str, str]:
    """The relation names of a statement that PostgreSQL would cut (past 63 bytes), each given a
    short name no other relation of the statement has: two names equal in their first 63 bytes
    stay two relations."""
    taken = {_truncated(n) for n in names}
    out: dict[str, str] = {}
    for name in names:
        if len(name.encode()) > NAME_BYTES:
            n = len(out)
            while f"t{n}" in taken:
                n += 1
            out[name] = f"t{n}"
            taken.add(out[name])
    return out


class _Translator:
    def __init__(self, schema: dict[str, TableDef], declared: dict[str, ast.SpannerType]) -> None:
        self.schema = schema
        self.declared = declared
        self.params: dict[str, Any] = {}
        self.wanted: dict[str, ast.SpannerType] = {}
        self.counts: dict[str, str] = {}
        self.aggregating = False
        """Translating HAVING or a grouped SELECT's ORDER BY: aggregates may appear anywhere in it."""

    # -- names ---------------------------------------------------------

    def table(self, name: str, writing: bool = False) -> TableDef:
        found = self.schema.get(name)
        if found is None:
            raise InvalidArgument(f"Table not found: {name} (no table or queue of that name in this database)")
        if writing and found.queue:
            raise InvalidArgument(f"{found.spelled} is a queue: write its messages with INSERT INTO {found.spelled} "
                                  "(key, Payload) VALUES (...), a Send, an Ack or a DELETE; Spanner's queues take "
                                  "no UPDATE (delete a message and insert it again)")
        return found

    def column(self, scope: _Scope, ref: ast.Column) -> tuple[sql.Composable, Col]:
        if ref.qualifier is not None:
            for shown, table in scope.relations:
                if shown == ref.qualifier:
                    found = table.column(ref.name)
                    if found is None:
                        raise InvalidArgument(f"{table.spelled} has no column {ref.spelled or ref.name!r}")
                    return sql.Identifier(scope.alias(shown), found.pg), found
            if scope.outer is not None:  # a correlated subquery's reference to its enclosing SELECT
                return self.column(scope.outer, ref)
            raise InvalidArgument(f"{ref.qualifier}.{ref.name}: {ref.qualifier!r} is not a table or alias of the "
                                  "statement")
        hits = [(shown, c) for shown, t in scope.relations if (c := t.column(ref.name)) is not None]
        if not hits and scope.outer is not None:
            return self.column(scope.outer, ref)
        if not hits:
            raise InvalidArgument(f"Unrecognized name: {ref.spelled or ref.name} (no such column in "
                                  f"{', '.join(t.spelled for _, t in scope.relations) or 'this statement'})")
        if len(hits) > 1:
            raise InvalidArgument(f"Column name {ref.spelled or ref.name} is ambiguous: qualify it "
                                  f"({', '.join(f'{s}.{ref.name}' for s, _ in hits)})")
        shown, found = hits[0]
        return sql.Identifier(scope.alias(shown), found.pg), found

    # -- values ----------------------------------------------------------

    def literal(self, value: Any, t: ast.SpannerType) -> sql.Composable:
        key = f"l{len(self.params)}"
        self.params[key] = ranges.literal(value, t.code, "a literal")
        return sql.Composed([sql.Placeholder(key), _CAST, _cast_type(t)])  # SQL("{}::{}").format, 5x faster

    def param(self, name: str, want: ast.SpannerType | None) -> tuple[sql.Composable, ast.SpannerType]:
        t = self.declared.get(name) or self.wanted.get(name) or unsized(want) or ast.STRING
        previous = self.wanted.get(name)
        if previous is not None and previous != t and name not in self.declared:
            t = previous
        self.wanted[name] = t
        return sql.SQL("{}::{}").format(sql.Placeholder(f"p_{name}"), _cast_type(t)), t

    # -- expressions -----------------------------------------------------

    def expr(self, e: ast.Expr, scope: _Scope, want: ast.SpannerType | None = None,
             aggregate: bool = False) -> tuple[sql.Composable, ast.SpannerType | None]:
        t: ast.SpannerType | None
        if isinstance(e, ast.Column):
            text, column = self.column(scope, e)
            return text, column.type
        if isinstance(e, ast.Literal):
            if e.value is None:
                return (sql.SQL("NULL::{}").format(_cast_type(want)) if want else sql.SQL("NULL")), want
            t = e.type or ast.STRING
            if want is not None and want != t:
                t = self.coerced(t, want, e)
            return self.literal(e.value, t), t
        if isinstance(e, ast.TypedLiteral):
            value: Any = e.text
            return self.literal(value, e.type), e.type
        if isinstance(e, ast.Param):
            return self.param(e.name, want)
        if isinstance(e, ast.Now):
            return sql.SQL("now()"), ast.TIMESTAMP
        if isinstance(e, ast.ArrayLiteral):
            element = want.element if want is not None and want.code == "ARRAY" else None
            items = []
            for item in e.items:
                text, t = self.expr(item, scope, element)
                if t is not None and t.code == "ARRAY":  # PostgreSQL would make a 2-D array of it
                    raise InvalidArgument("an ARRAY cannot hold arrays (Spanner has no arrays of arrays)")
                element = element or t
                items.append(text)
            array_type = ast.SpannerType("ARRAY", element or ast.STRING)
            return sql.SQL("ARRAY[{}]::{}").format(sql.SQL(", ").join(items), _cast_type(array_type)), array_type
        if isinstance(e, ast.Arithmetic) and e.op == "||":
            left, lt = self.expr(e.left, scope, want if want and want.code in ("STRING", "BYTES") else None)
            right, rt = self.expr(e.right, scope, lt or ast.STRING)
            t = lt or rt or ast.STRING
            if t.code not in ("STRING", "BYTES") or (rt is not None and rt.code != t.code):
                raise InvalidArgument("|| joins two STRING or two BYTES values")
            return sql.SQL("({} || {})").format(left, right), ast.SpannerType(t.code)
        if isinstance(e, ast.Function):
            if e.name != "farm_fingerprint":
                raise InvalidArgument(f"the function {e.name.upper()}() is not supported here: spanq's SELECTs and "
                                      f"DML take FARM_FINGERPRINT ({GENERATED_FUNCTIONS} in a generated key column)")
            if len(e.args) != 1:
                raise InvalidArgument("FARM_FINGERPRINT takes one STRING or BYTES value")
            inner, t = self.expr(e.args[0], scope, ast.STRING)
            if t is not None and t.code not in ("STRING", "BYTES"):
                raise InvalidArgument(f"No matching signature for function FARM_FINGERPRINT for argument type {t.ddl()}"
                                      ": it takes STRING or BYTES")
            return sql.SQL("spanq.farm_fingerprint({})").format(inner), ast.INT64
        if isinstance(e, ast.Cast):
            raise InvalidArgument("CAST is not supported here (only in a generated key column's expression)")
        if isinstance(e, ast.Arithmetic):
            left, lt = self.expr(e.left, scope, want if want and want.code in NUMBERS else None)
            right, rt = self.expr(e.right, scope, lt)
            t = lt or rt
            if t is None or t.code not in NUMBERS or (rt is not None and rt.code not in NUMBERS):
                raise InvalidArgument(f"{e.op} takes numbers (INT64, FLOAT64, NUMERIC)")
            if rt is not None and "FLOAT64" in (t.code, rt.code):
                t = ast.FLOAT64
            return sql.SQL("({} {} {})").format(left, sql.SQL(e.op), right), t
        if isinstance(e, ast.Compare):
            left, right, t = self.pair(e.left, e.right, scope)
            if e.op not in ("=", "!=") and t is not None and t.code not in ORDERED:
                raise InvalidArgument(f"{t.ddl()} values do not compare with {e.op}")
            if t is not None and t.code == "JSON":
                raise InvalidArgument("JSON values do not compare (as in Spanner); compare a field's value")
            if t is not None and t.code == "PROTO":
                raise InvalidArgument(f"{t.ddl()} values (PROTO) do not compare, as in Spanner")
            op = "<>" if e.op == "!=" else e.op
            return sql.SQL("({} {} {})").format(left, sql.SQL(op), right), ast.BOOL
        if isinstance(e, ast.In):
            left, t = self.expr(e.left, scope)
            if e.unnest is not None:
                array, _ = self.param(e.unnest.name, ast.SpannerType("ARRAY", t or ast.STRING))
                form = "({} <> ALL({}))" if e.negated else "({} = ANY({}))"
                return sql.SQL(form).format(left, array), ast.BOOL
            items = [self.expr(item, scope, t)[0] for item in e.items]
            return sql.SQL("({} {}IN ({}))").format(left, sql.SQL("NOT " if e.negated else ""),
                                                   sql.SQL(", ").join(items)), ast.BOOL
        if isinstance(e, ast.Like):
            left, t = self.expr(e.left, scope)
            if t is not None and t.code not in ("STRING", "BYTES"):
                raise InvalidArgument(f"LIKE takes STRING or BYTES, not {t.ddl()}")
            pattern, _ = self.expr(e.pattern, scope, t or ast.STRING)
            return sql.SQL("({} {}LIKE {})").format(left, sql.SQL("NOT " if e.negated else ""), pattern), ast.BOOL
        if isinstance(e, ast.Between):
            left, t = self.expr(e.left, scope)
            low, _ = self.expr(e.low, scope, t)
            high, _ = self.expr(e.high, scope, t)
            return sql.SQL("({} {}BETWEEN {} AND {})").format(left, sql.SQL("NOT " if e.negated else ""), low,
                                                             high), ast.BOOL
        if isinstance(e, ast.IsNull):
            left, _ = self.expr(e.left, scope)
            return sql.SQL("({} IS {}NULL)").format(left, sql.SQL("NOT " if e.negated else "")), ast.BOOL
        if isinstance(e, ast.Logical):
            items = [self.condition(item, scope) for item in e.items]
            return sql.SQL("({})").format(sql.SQL(f" {e.op} ").join(items)), ast.BOOL
        if isinstance(e, ast.Not):
            return sql.SQL("(NOT {})").format(self.condition(e.item, scope)), ast.BOOL
        if isinstance(e, (ast.CountStar, ast.Count, ast.Aggregate)):
            if not (aggregate or self.aggregating):
                raise InvalidArgument("aggregate functions are allowed in the SELECT list, HAVING and ORDER BY only")
            if isinstance(e, ast.CountStar):
                return sql.SQL("count(*)"), ast.INT64
            self.aggregating, was = False, self.aggregating  # no aggregate of an aggregate
            try:
                inner, t = self.expr(e.item, scope)
            finally:
                self.aggregating = was
            if isinstance(e, ast.Count):
                return sql.SQL("count({})").format(inner), ast.INT64
            return self.aggregate(e, inner, t)
        if isinstance(e, ast.InSelect):
            left, t = self.expr(e.left, scope)
            inner, columns = self.subquery(e.select, scope)
            if len(columns) != 1:
                raise InvalidArgument(f"IN (SELECT ...) takes a SELECT of one column, not {len(columns)}")
            it = columns[0][1]
            if t is not None and t.code != it.code and not (t.code in NUMBERS and it.code in NUMBERS):
                raise InvalidArgument(f"No matching signature for IN of {t.ddl()} with a SELECT of {it.ddl()}")
            return sql.SQL("({} {}IN ({}))").format(left, sql.SQL("NOT " if e.negated else ""), inner), ast.BOOL
        if isinstance(e, ast.Exists):
            inner, _ = self.subquery(e.select, scope)
            return sql.SQL("(EXISTS ({}))").format(inner), ast.BOOL
        raise InvalidArgument(f"unsupported expression {type(e).__name__}")

    def aggregate(self, e: ast.Aggregate, inner: sql.Composable, t: ast.SpannerType | None
                  ) -> tuple[sql.Composable, ast.SpannerType]:
        """SUM, AVG, MIN, MAX (and COUNT(DISTINCT)) with Spanner's result types: SUM of INT64 is
        INT64 (PostgreSQL's is numeric), AVG of INT64 FLOAT64, MIN and MAX their argument's."""
        name = e.function.upper()
        if e.function == "count":
            return sql.SQL("count(DISTINCT {})").format(inner), ast.INT64
        if t is None:
            raise InvalidArgument(f"{name} needs a typed argument (a column or a typed value)")
        if e.function in ("sum", "avg"):
            if t.code not in NUMBERS:
                raise InvalidArgument(f"No matching signature for aggregate function {name} for argument type "
                                      f"{t.ddl()}: it takes INT64, FLOAT64 or NUMERIC")
            if e.function == "sum":
                return sql.SQL("(sum({}))::{}").format(inner, _cast_type(t)), t
            out = ast.NUMERIC if t.code == "NUMERIC" else ast.FLOAT64
            return sql.SQL("(avg({}))::{}").format(inner, _cast_type(out)), out
        if t.code == "BOOL":  # PostgreSQL has no min/max of boolean: FALSE < TRUE, as in Spanner
            return sql.SQL("{}({})").format(sql.SQL("bool_and" if e.function == "min" else "bool_or"), inner), t
        if t.code not in ORDERED or t.code == "BYTES":
            raise InvalidArgument(f"No matching signature for aggregate function {name} for argument type {t.ddl()}")
        return sql.SQL("{}({})").format(sql.SQL(e.function), inner), t

    def subquery(self, s: ast.Select, scope: _Scope) -> tuple[sql.Composable, list[tuple[str, ast.SpannerType]]]:
        """A subquery of IN or EXISTS, correlated with the enclosing ``scope``; it locks nothing."""
        self.aggregating, was = False, self.aggregating
        try:
            inner = self.select(s, lock=False, outer=scope)
        finally:
            self.aggregating = was
        return inner.statement, inner.columns

    def assigned(self, e: ast.Expr, scope: _Scope, column: Col) -> sql.Composable:
        """A value written to a column: an error in it names the column."""
        try:
            text = self.expr(e, scope, column.type)[0]
        except InvalidArgument as exc:
            raise InvalidArgument(f"column {column.spelled}: {exc}") from None
        if column.type.code == "NUMERIC" and isinstance(e, ast.Arithmetic):
            # Spanner's NUMERIC: the result rounded to 9 places; past 29 digits, "numeric field overflow"
            text = sql.SQL("({})::numeric(38, 9)").format(text)
        return text

    def coerced(self, given: ast.SpannerType, want: ast.SpannerType, e: ast.Literal) -> ast.SpannerType:
        """A literal meeting a column of another type: the coercions Spanner makes (an INT64 literal is a
        FLOAT64 or NUMERIC; a string literal a DATE, TIMESTAMP, JSON or NUMERIC)."""
        if given.code == "INT64" and want.code in ("FLOAT64", "NUMERIC"):
            return want
        if given.code == "STRING" and want.code in ("DATE", "TIMESTAMP", "JSON", "NUMERIC", "STRING"):
            return want
        if given.code == "FLOAT64" and want.code == "NUMERIC":
            return want
        if given.code == want.code:
            return want
        raise InvalidArgument(f"the value {e.value!r} ({given.ddl()}) does not fit a {want.ddl()} column")

    def pair(self, a: ast.Expr, b: ast.Expr, scope: _Scope
             ) -> tuple[sql.Composable, sql.Composable, ast.SpannerType | None]:
        """Two sides of a comparison: the side with a known type (a column) types the other."""
        if isinstance(a, (ast.Literal, ast.Param)) and not isinstance(b, (ast.Literal, ast.Param)):
            right, t = self.expr(b, scope)
            left, _ = self.expr(a, scope, t)
            return left, right, t
        left, t = self.expr(a, scope)
        right, rt = self.expr(b, scope, t)
        if t is not None and rt is not None and t.code != rt.code and not (t.code in NUMBERS and rt.code in NUMBERS):
            raise InvalidArgument(f"No matching signature for a comparison of {t.ddl()} with {rt.ddl()}")
        return left, right, t or rt

    def condition(self, e: ast.Expr, scope: _Scope) -> sql.Composable:
        text, t = self.expr(e, scope, ast.BOOL)
        if t is not None and t.code != "BOOL":
            raise InvalidArgument(f"a condition must be BOOL, not {t.ddl()}")
        return text

    def count(self, e: ast.Expr | None, what: str) -> sql.Composable:
        if e is None:
            return sql.SQL("")
        if isinstance(e, ast.Literal) and isinstance(e.value, int) and not isinstance(e.value, bool) and e.value >= 0:
            return self.literal(e.value, ast.INT64)
        if isinstance(e, ast.Param):
            self.counts[e.name] = what
            return self.param(e.name, ast.INT64)[0]
        raise InvalidArgument(f"{what} takes a non-negative integer literal or a @param")

    # -- select lists ------------------------------------------------------

    def items(self, items: Sequence[ast.SelectItem], scope: _Scope, aggregate_ok: bool = True,
              grouped: Sequence[str] | None = None
              ) -> tuple[list[sql.Composable], list[tuple[str, ast.SpannerType]], bool]:
        """A SELECT list (or THEN RETURN's); ``grouped``: the GROUP BY's expressions as PostgreSQL
        text, which the list's other items must be."""
        texts: list[sql.Composable] = []
        columns: list[tuple[str, ast.SpannerType]] = []
        aggregates = plain = 0
        for item in items:
            if isinstance(item.expr, ast.Star):
                chosen = [(s, t) for s, t in scope.relations if item.expr.qualifier in (None, s)]
                if not chosen:
                    raise InvalidArgument(f"{item.expr.qualifier}.*: not a table or alias of the statement")
                for shown, table in chosen:
                    if grouped is not None:
                        raise InvalidArgument("SELECT * with GROUP BY: name the grouped columns")
                    for c in table.shown:
                        texts.append(sql.Identifier(scope.alias(shown), c.pg))
                        columns.append((c.spelled, c.type))
                        plain += 1
                continue
            is_aggregate = isinstance(item.expr, (ast.CountStar, ast.Count, ast.Aggregate))
            if is_aggregate and not aggregate_ok:
                raise InvalidArgument("THEN RETURN takes columns, not COUNT")
            text, t = self.expr(item.expr, scope, aggregate=is_aggregate)
            if grouped is not None and not is_aggregate and _text(text) not in grouped:
                raise InvalidArgument("SELECT list expression references a column that is neither grouped nor "
                                      f"aggregated: {_shown(item.expr)}")
            aggregates += is_aggregate
            plain += not is_aggregate
            texts.append(text)
            name = item.alias
            if name is None:  # a column is named as declared; any other expression has no name
                name = self.column(scope, item.expr)[1].spelled if isinstance(item.expr, ast.Column) else ""
            columns.append((name, t or ast.STRING))
        if aggregates and plain and grouped is None:
            raise InvalidArgument("SELECT list expression references a column that is neither grouped nor "
                                  "aggregated: GROUP BY is not supported, so COUNT goes with other aggregates only")
        return texts, columns, bool(aggregates)

    # -- statements -------------------------------------------------------

    def select(self, s: ast.Select, lock: bool, outer: _Scope | None = None) -> Translated:
        scope = _Scope([], outer=outer)
        source: sql.Composable = sql.SQL("")
        locked: list[str] = []
        if s.source is not None:
            relations = [s.source] + [j.relation for j in s.joins]
            for relation in relations:
                shown = relation.shown
                if any(shown == other for other, _ in scope.relations):
                    raise InvalidArgument(f"{shown!r} is named twice in FROM: give one an alias")
                scope.relations.append((shown, self.table(relation.name)))
            scope.aliases = pg_aliases([shown for shown, _ in scope.relations])
            first = self.schema[s.source.name]
            source = sql.SQL(" FROM {} AS {}").format(table_id(first.name), sql.Identifier(scope.alias(s.source.shown)))
            if not first.queue:
                locked.append(s.source.shown)
            for join in s.joins:
                table = self.schema[join.relation.name]
                shown = join.relation.shown
                joined = sql.SQL("{} AS {}").format(table_id(table.name), sql.Identifier(scope.alias(shown)))
                if join.kind == "CROSS":
                    source = sql.SQL("{} CROSS JOIN {}").format(source, joined)
                else:
                    assert join.on is not None
                    on = self.condition(join.on, scope)
                    source = sql.SQL("{} {} JOIN {} ON {}").format(source, sql.SQL(join.kind), joined, on)
                if join.kind == "LEFT":
                    scope.nullable.add(shown)
                elif not table.queue:
                    locked.append(shown)
        where = self.condition(s.where, scope) if s.where is not None else None
        grouped = [self.expr(e, scope)[0] if not _position(e) else None for e in s.group_by]
        grouping = bool(s.group_by) or s.having is not None
        for at, e in enumerate(s.group_by):  # GROUP BY 2: the SELECT list's second item
            if _position(e):
                assert isinstance(e, ast.Literal)
                if not 1 <= e.value <= len(s.items) or isinstance(s.items[e.value - 1].expr, ast.Star):
                    raise InvalidArgument(f"GROUP BY {e.value}: a position of an expression in the SELECT list, 1 to "
                                          f"{len(s.items)}")
                grouped[at] = self.expr(s.items[e.value - 1].expr, scope)[0]  # type: ignore[arg-type]
        texts, columns, aggregated = self.items(s.items, scope,
                                                grouped=[_text(g) for g in grouped if g] if grouping else None)
        aggregated = aggregated or grouping
        statement = sql.SQL("SELECT {}{}{}").format(sql.SQL("DISTINCT " if s.distinct else ""),
                                                    sql.SQL(", ").join(texts), source)
        if where is not None:
            statement = sql.SQL("{} WHERE {}").format(statement, where)
        if s.group_by:
            statement = sql.SQL("{} GROUP BY {}").format(statement, sql.SQL(", ").join(g for g in grouped if g))
        self.aggregating = aggregated
        if s.having is not None:
            statement = sql.SQL("{} HAVING {}").format(statement, self.condition(s.having, scope))
        for part in s.union:
            other = self.select(part, lock=False, outer=outer)
            if [t.code for _, t in other.columns] != [t.code for _, t in columns]:
                raise InvalidArgument(
                    "UNION ALL's SELECTs must have the same number of columns of the same types: "
                    f"{', '.join(t.ddl() for _, t in columns)} and {', '.join(t.ddl() for _, t in other.columns)}")
            statement = sql.SQL("{} UNION ALL {}").format(statement, other.statement)
            self.aggregating = aggregated
        if s.order_by and s.union:
            names = {fold(name): i + 1 for i, (name, _) in reversed(list(enumerate(columns))) if name}
            order = []
            for expr, descending in s.order_by:
                if isinstance(expr, ast.Column) and expr.qualifier is None and expr.name in names:
                    at = names[expr.name]
                elif _position(expr) and 1 <= expr.value <= len(columns):  # type: ignore[union-attr]
                    at = expr.value  # type: ignore[union-attr]
                else:
                    raise InvalidArgument("ORDER BY after UNION ALL takes a column of the result, by name or position")
                order.append(sql.SQL("{}{}").format(sql.Literal(at), sql.SQL(_DIRECTION[descending])))
            statement = sql.SQL("{} ORDER BY {}").format(statement, sql.SQL(", ").join(order))
        elif s.order_by:
            positions, at = [], 1  # each item's place in the result (a * is each of its columns)
            for item in s.items:
                positions.append(at)
                at += (sum(len(t.shown) for shown, t in scope.relations if item.expr.qualifier in (None, shown))
                       if isinstance(item.expr, ast.Star) else 1)
            aliases = {fold(item.alias): p for item, p in zip(s.items, positions) if item.alias}
            order = []
            for expr, descending in s.order_by:
                if isinstance(expr, ast.Column) and expr.qualifier is None and expr.name in aliases:
                    text: sql.Composable = sql.Literal(aliases[expr.name])
                elif isinstance(expr, ast.Literal) and type(expr.value) is int:  # a position, as PostgreSQL reads it
                    if not 1 <= expr.value <= len(columns):
                        raise InvalidArgument(f"ORDER BY {expr.value}: a position in the SELECT list is 1 to "
                                              f"{len(columns)}")
                    text = sql.Literal(expr.value)
                else:
                    text = self.expr(expr, scope)[0]
                order.append(sql.SQL("{}{}").format(text, sql.SQL(_DIRECTION[descending])))
            statement = sql.SQL("{} ORDER BY {}").format(statement, sql.SQL(", ").join(order))
        if s.limit is not None:
            statement = sql.SQL("{} LIMIT {}").format(statement, self.count(s.limit, "LIMIT"))
        if s.offset is not None:
            statement = sql.SQL("{} OFFSET {}").format(statement, self.count(s.offset, "OFFSET"))
        self.aggregating = False
        if lock and locked and not aggregated and not s.distinct and not s.union:
            # Spanner's read-write transactions lock what they read: two that read a row and
            # then write it conflict (one is ABORTED and retried), never lose an update.
            statement = sql.SQL("{} FOR SHARE OF {}").format(
                statement, sql.SQL(", ").join(sql.Identifier(scope.alias(n)) for n in locked))
        return Translated(statement, self.params, self.wanted, columns)

    def returning(self, items: tuple[ast.SelectItem, ...] | None, scope: _Scope
                  ) -> tuple[sql.Composable, list[tuple[str, ast.SpannerType]]]:
        if items is None:
            return sql.SQL(""), []
        texts, columns, _ = self.items(items, scope, aggregate_ok=False)
        return sql.SQL(" RETURNING {}").format(sql.SQL(", ").join(texts)), columns

    def insert(self, s: ast.Insert) -> Translated:
        table = self.table(s.table, writing=True)
        scope = _Scope([(table.name, table)])
        columns = []
        for name in s.columns:
            column = table.column(name)
            if column is None:
                raise InvalidArgument(f"Column not found in table {table.spelled}: {name}")
            check_writable(table, column)
            columns.append(column)
        rows = []
        for row in s.rows:
            values = [self.assigned(e, _Scope([]), c) for e, c in zip(row, columns)]
            rows.append(sql.SQL("({})").format(sql.SQL(", ").join(values)))
        statement = sql.SQL("INSERT INTO {} AS {} ({}) VALUES {}").format(
            table_id(table.name), sql.Identifier(table.name), sql.SQL(", ").join(sql.Identifier(c.pg) for c in columns),
            sql.SQL(", ").join(rows))
        if s.on_conflict is not None:
            statement = sql.SQL("{} {}").format(statement, on_conflict(table, columns, s.on_conflict))
        returning, result = self.returning(s.returning, scope)
        return Translated(sql.SQL("{}{}").format(statement, returning), self.params, self.wanted, result, True, table)

    def update(self, s: ast.Update) -> Translated:
        table = self.table(s.table.name, writing=True)
        scope = _Scope([(s.table.shown, table)], aliases=pg_aliases([s.table.shown]))
        sets = []
        for name, e in s.assignments:
            column = table.column(name)
            if column is None:
                raise InvalidArgument(f"Column not found in table {table.spelled}: {name}")
            if name in table.primary_key:
                raise InvalidArgument(f"Cannot UPDATE value on non-writable column: {column.spelled} (a primary-key "
                                      "column)")
            check_writable(table, column)
            sets.append(sql.SQL("{} = {}").format(sql.Identifier(column.pg), self.assigned(e, scope, column)))
        where = self.condition(s.where, scope)
        returning, result = self.returning(s.returning, scope)
        statement = sql.SQL("UPDATE {} AS {} SET {} WHERE {}{}").format(
            table_id(table.name), sql.Identifier(scope.alias(s.table.shown)), sql.SQL(", ").join(sets), where, returning)
        return Translated(statement, self.params, self.wanted, result, True, table)

    def delete(self, s: ast.Delete) -> Translated:
        table = self.table(s.table.name, writing=True)
        scope = _Scope([(s.table.shown, table)], aliases=pg_aliases([s.table.shown]))
        where = self.condition(s.where, scope)
        returning, result = self.returning(s.returning, scope)
        statement = sql.SQL("DELETE FROM {} AS {} WHERE {}{}").format(
            table_id(table.name), sql.Identifier(scope.alias(s.table.shown)), where, returning)
        return Translated(statement, self.params, self.wanted, result, True, table)


_DIRECTION = {False: " NULLS FIRST", True: " DESC NULLS LAST"}
"""ORDER BY as Spanner orders: NULL is the least value (PostgreSQL's is the greatest)."""


def _position(e: ast.Expr) -> bool:
    """Whether an expression is a position in the SELECT list (``GROUP BY 1``, ``ORDER BY 2``)."""
    return isinstance(e, ast.Literal) and type(e.value) is int


def _text(e: sql.Composable) -> str:
    """An expression's PostgreSQL text, without a connection, to compare it with GROUP BY's (its
    parameters by name; identifiers as psycopg quotes them)."""
    return repr(e)


def _shown(e: ast.Expr) -> str:
    if isinstance(e, ast.Column):
        return f"{e.qualifier + '.' if e.qualifier else ''}{e.spelled or e.name}"
    return type(e).__name__


def on_conflict(table: TableDef, columns: Sequence[Col], mode: str) -> sql.Composed:
    key = sql.SQL(", ").join(sql.Identifier(c.pg) for c in table.key)
    rest = [c for c in columns if c.name not in table.primary_key]
    if mode == "ignore" or not rest:
        return sql.SQL("ON CONFLICT ({}) DO NOTHING").format(key)
    return sql.SQL("ON CONFLICT ({}) DO UPDATE SET {}").format(key, sql.SQL(", ").join(
        sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c.pg), sql.Identifier(c.pg)) for c in rest))


def translate(statement: ast.Select | ast.TableDml, schema: dict[str, TableDef], declared: dict[str, ast.SpannerType],
              lock: bool = False) -> Translated:
    """A parsed statement as PostgreSQL. ``schema`` maps each (folded) relation name the statement
    may name to its definition; ``declared`` the request parameters' declared types; ``lock``
    reads with FOR SHARE (in a read-write transaction)."""
    t = _Translator(schema, declared)
    if isinstance(statement, ast.Select):
        out = t.select(statement, lock)
    elif isinstance(statement, ast.Insert):
        out = t.insert(statement)
    elif isinstance(statement, ast.Update):
        out = t.update(statement)
    else:
        out = t.delete(statement)
    check_params(len(out.params) + len(out.wanted), "the statement")
    out.counts = t.counts
    return out


def check_params(count: int, what: str) -> None:
    if count > MAX_PARAMS:
        raise InvalidArgument(f"{what} has {count:,} values, more than the {MAX_PARAMS:,} PostgreSQL binds in one "
                              "statement: pass a list as one array parameter (IN UNNEST(@values)), or split it",
                              limit="statement_values")


# -- mutations and reads --------------------------------------------------------------


def _values(columns: Sequence[Col], rows: int, prefix: str = "v") -> sql.Composable:
    # As text joined once: composed value by value, a statement of 65,535 values held the
    # event loop for a second (every other call on the server waited). The same SQL.
    casts = [_cast_type(c.type).as_string() for c in columns]
    return sql.SQL(", ".join("(" + ", ".join(f"%({prefix}{r}_{i})s::{cast}" for i, cast in enumerate(casts)) + ")"
                             for r in range(rows)))


def row_params(rows: Sequence[Sequence[Any]], prefix: str = "v") -> dict[str, Any]:
    return {f"{prefix}{r}_{i}": v for r, row in enumerate(rows) for i, v in enumerate(row)}


def write(table: TableDef, columns: Sequence[Col], rows: int, mode: str) -> sql.Composed:
    """A mutation's statement: insert, insert_or_update, update (its rows matched by key; the
    caller checks the count) or the insert half of replace."""
    names = sql.SQL(", ").join(sql.Identifier(c.pg) for c in columns)
    if mode == "update":
        rest = [c for c in columns if c.name not in table.primary_key]
        given = sql.SQL(", ").join(sql.Identifier(f"c{i}") for i in range(len(columns)))
        at = {c.name: i for i, c in enumerate(columns)}
        match = sql.SQL(" AND ").join(sql.SQL("t.{} = v.{}").format(sql.Identifier(k.pg), sql.Identifier(f"c{at[k.name]}"))
                                      for k in table.key)
        sets = sql.SQL(", ").join(sql.SQL("{} = v.{}").format(sql.Identifier(c.pg), sql.Identifier(f"c{at[c.name]}"))
                                  for c in rest)
        if not rest:  # only keys: touch each row to learn it exists
            first = table.key[0]
            sets = sql.SQL("{} = t.{}").format(sql.Identifier(first.pg), sql.Identifier(first.pg))
        return sql.SQL("UPDATE {} AS t SET {} FROM (VALUES {}) AS v ({}) WHERE {}").format(
            table_id(table.name), sets, _values(columns, rows), given, match)
    statement = sql.SQL("INSERT INTO {} ({}) VALUES {}").format(table_id(table.name), names, _values(columns, rows))
    if mode == "insert_or_update":
        statement = sql.SQL("{} {}").format(statement, on_conflict(table, columns, "update"))
    return statement


@dataclasses.dataclass(frozen=True)
class KeyRange:
    start: tuple[Any, ...]
    start_closed: bool
    end: tuple[Any, ...]
    end_closed: bool


def key_condition(key: Sequence[Col], keys: Sequence[Sequence[Any]], ranges: Sequence[KeyRange],
                  params: dict[str, Any], alias: str | None = None,
                  descending: Sequence[bool] = ()) -> sql.Composable:
    """A KeySet as a condition on the key columns (a range's bounds may be prefixes of the key).
    A range runs in the key's order, each column in its direction (``descending``, ascending
    where not given): on a DESC column its start is the greater value (keys.proto's
    ``start_closed: ["100"], end_closed: ["1"]``)."""
    def ref(c: Col) -> sql.Identifier:
        return sql.Identifier(alias, c.pg) if alias else sql.Identifier(c.pg)

    casts = [_cast_type(c.type).as_string() for c in key]

    def placeholders(values: Sequence[Any]) -> list[str]:
        """The placeholders of one key's values, as text (see _values)."""
        out = []
        for cast, v in zip(casts, values):
            name = f"k{len(params)}"
            params[name] = v
            out.append(f"%({name})s::{cast}")
        return out

    def holders(values: Sequence[Any]) -> str:
        return ", ".join(placeholders(values))

    def columns(width: int, keyword: str = "ROW") -> sql.Composable:
        return sql.SQL(keyword + "({})").format(sql.SQL(", ").join(ref(c) for c in key[:width]))

    def bound(values: Sequence[Any]) -> tuple[sql.Composable, sql.Composable]:
        return columns(len(values)), sql.SQL(f"ROW({holders(values)})")

    directions = list(descending) + [False] * (len(key) - len(descending))

    def compare(values: Sequence[Any], after: bool, closed: bool) -> sql.Composable:
        """The key's first len(values) columns after (``after``) or before the bound in key order,
        or at it when ``closed``."""
        return ordered([ref(c) for c in key], [sql.SQL(p) for p in placeholders(values)], directions, after,
                       closed)

    if len(ranges) > MAX_RANGES:
        raise InvalidArgument(f"the KeySet has {len(ranges):,} ranges, more than spanq's {MAX_RANGES:,}: each is a "
                              "condition every row is compared with; read or delete in parts", limit="key_ranges")

    parts: list[sql.Composable] = []
    by_width: dict[int, list[Sequence[Any]]] = {}
    for k in keys:
        by_width.setdefault(len(k), []).append(k)
    for width, found in by_width.items():
        if len(found) == 1:
            left, right = bound(found[0])
            parts.append(sql.SQL("{} = {}").format(left, right))
        else:  # one IN (VALUES ...), which PostgreSQL hashes: as ORs it compared every row with every key
            parts.append(sql.SQL("{} IN (VALUES {})").format(columns(width, ""), sql.SQL(
                ", ".join(f"({holders(k)})" for k in found))))
    for r in ranges:
        conditions: list[sql.Composable] = []
        if r.start:
            conditions.append(compare(r.start, True, r.start_closed))
        if r.end:
            conditions.append(compare(r.end, False, r.end_closed))
        parts.append(sql.SQL("({})").format(sql.SQL(" AND ").join(conditions)) if conditions else sql.SQL("true"))
    if not parts:
        return sql.SQL("false")
    check_params(len(params), "the KeySet")
    return sql.SQL("({})").format(sql.SQL(" OR ").join(parts))


_OPERATORS = {(True, True): ">=", (True, False): ">", (False, True): "<=", (False, False): "<"}
"""(after the bound, the bound included) -> the comparison, in ascending order."""


def ordered(refs: Sequence[sql.Composable], values: Sequence[sql.Composable], descending: Sequence[bool],
            after: bool, closed: bool) -> sql.Composable:
    """Columns ``refs[:len(values)]`` after (or before) ``values`` in the order of their
    directions, lexicographically; at them too when ``closed``. Each leading run of columns
    of one direction is one row comparison, so that an index on the key bounds its scan:
    ``(a, b) > (x, y)`` ascending then DESC is ``ROW(a) >= ROW(x) AND (ROW(a) > ROW(x) OR
    (ROW(a) = ROW(x) AND ROW(b) < ROW(y)))``."""
    width = len(values)
    descending = descending[:width]
    run = next((i for i in range(1, width) if descending[i] != descending[0]), width)
    later = after != descending[0]  # in PostgreSQL's (ascending) terms

    def row(items: Sequence[sql.Composable]) -> sql.Composable:
        return sql.SQL("ROW({})").format(sql.SQL(", ").join(items))

    left, right = row(refs[:run]), row(values[:run])
    if run == width:
        return sql.SQL("{} {} {}").format(left, sql.SQL(_OPERATORS[later, closed]), right)
    rest = ordered(refs[run:], values[run:], descending[run:], after, closed)
    return sql.SQL("({} {} {} AND ({} {} {} OR ({} = {} AND {})))").format(
        left, sql.SQL(_OPERATORS[later, True]), right, left, sql.SQL(_OPERATORS[later, False]), right,
        left, right, rest)


def batches(rows: Sequence[Any], width: int) -> list[Sequence[Any]]:
    """Rows (or keys) of ``width`` values each, in runs of at most MAX_PARAMS values: one statement each."""
    size = max(1, MAX_PARAMS // max(1, width))
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def delete_rows(table: TableDef, condition: sql.Composable | None) -> sql.Composed:
    if condition is None:
        return sql.SQL("DELETE FROM {}").format(table_id(table.name))
    return sql.SQL("DELETE FROM {} WHERE {}").format(table_id(table.name), condition)


def read(table: TableDef, columns: Sequence[Col], order: Sequence[tuple[Col, bool]], condition: sql.Composable | None,
         limit: int | None, lock: bool, params: dict[str, Any]) -> sql.Composed:
    statement = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(sql.Identifier(c.pg) for c in columns),
                                                    table_id(table.name))
    if condition is not None:
        statement = sql.SQL("{} WHERE {}").format(statement, condition)
    statement = sql.SQL("{} ORDER BY {}").format(statement, sql.SQL(", ").join(
        sql.SQL("{}{}").format(sql.Identifier(c.pg), sql.SQL(" DESC" if d else "")) for c, d in order))
    if limit:
        params["limit"] = limit
        statement = sql.SQL("{} LIMIT {}").format(statement, sql.Placeholder("limit"))
    if lock and not table.queue:
        statement = sql.SQL("{} FOR SHARE").format(statement)
    return statement


# -- generated key columns --------------------------------------------------------------

GENERATED_FUNCTIONS = "MOD, ABS, CONCAT (or ||), LOWER, UPPER, SUBSTR, LENGTH, CAST and FARM_FINGERPRINT"
_GENERATED_CASTS = {("INT64", "STRING"): "(({})::text)", ("STRING", "INT64"): "(({})::bigint)",
                    ("BOOL", "STRING"): "(({})::text)", ("STRING", "BOOL"): "(({})::boolean)",
                    ("BOOL", "INT64"): "((({})::integer)::bigint)"}
"""The CASTs a generated column may make, and PostgreSQL's (each IMMUTABLE, as a generation
expression needs; a TIMESTAMP's text depends on the session's time zone, a STRING's bytes on
its encoding: those are refused)."""


def generation(e: ast.Expr, columns: dict[str, tuple[str, ast.SpannerType]], want: ast.SpannerType,
               what: str) -> str:
    """A generated key column's expression as PostgreSQL's ``GENERATED ALWAYS AS (...) STORED``
    text: ``columns`` are the columns it may read (folded name: (name in PostgreSQL, type)),
    ``want`` its column's type. Only deterministic functions of those columns are taken
    (GENERATED_FUNCTIONS, + - *, literals); anything else is INVALID_ARGUMENT naming it. Its
    literals are written into the text (a column's definition has no parameters)."""
    text, t = _generated(e, columns, what)
    if t.code != want.code:
        raise InvalidArgument(f"{what}: the expression is {t.code}, the column {want.code}")
    return text.as_string(None)


def check_writable(table: TableDef, column: Col) -> None:
    """A write (INSERT, UPDATE, a Write mutation) may not give a generated column a value:
    FAILED_PRECONDITION in Spanner's words."""
    if column.generated_sql is not None:
        raise FailedPrecondition(f"Cannot write into generated column `{table.spelled}.{column.spelled}`.",
                                 column=column.name)


def column_generation(c: ast.ColumnDef, readable: tuple[Col, ...]) -> str:
    """A table's generated column's PostgreSQL expression (schema.Generation): it reads the
    table's other columns that are not generated."""
    assert c.generated is not None
    return generation(c.generated, {r.name: (r.pg, unsized(r.type) or r.type) for r in readable}, c.type,
                      f"generated column {c.spelled}")


def _generated(e: ast.Expr, columns: dict[str, tuple[str, ast.SpannerType]], what: str
               ) -> tuple[sql.Composable, ast.SpannerType]:
    if isinstance(e, ast.Column):
        if e.qualifier is not None or e.name not in columns:
            raise InvalidArgument(f"{what}: {e.spelled or e.name!r} is not a key column it can read (a generated "
                                  f"key column reads the queue's other key columns: {', '.join(columns) or 'none'})")
        name, t = columns[e.name]
        return sql.Identifier(name), t
    if isinstance(e, ast.Literal) and e.type is not None and e.value is not None and not isinstance(e.value, float):
        code = "BOOL" if isinstance(e.value, bool) else e.type.code
        if code == "INT64" and not -2**63 <= e.value < 2**63:
            raise InvalidArgument(f"{what}: {e.value} is out of the INT64 range")
        t = ast.SpannerType(code)
        return sql.SQL("({}::{})").format(sql.Literal(ranges.literal(e.value, code, what)), _SCALAR_CASTS[code]), t
    if isinstance(e, ast.Arithmetic):
        left, lt = _generated(e.left, columns, what)
        right, rt = _generated(e.right, columns, what)
        if e.op == "||":
            if lt.code != rt.code or lt.code not in ("STRING", "BYTES"):
                raise InvalidArgument(f"{what}: || joins two STRING or two BYTES values, not {lt.ddl()} and "
                                      f"{rt.ddl()}")
            return sql.SQL("({} || {})").format(left, right), lt
        if lt.code != "INT64" or rt.code != "INT64":
            raise InvalidArgument(f"{what}: {e.op} takes INT64 values here, not {lt.ddl()} and {rt.ddl()}")
        return sql.SQL("({} {} {})").format(left, sql.SQL(e.op), right), ast.INT64
    if isinstance(e, ast.Function):
        return _generated_call(e, [_generated(a, columns, what) for a in e.args], what)
    if isinstance(e, ast.Cast):
        inner, t = _generated(e.item, columns, what)
        if t.code == e.type.code:
            return inner, t
        cast = _GENERATED_CASTS.get((t.code, e.type.code))
        if cast is None:
            raise InvalidArgument(f"{what}: CAST of {t.ddl()} AS {e.type.ddl()} is not taken in a generated column "
                                  "(INT64, STRING and BOOL cast to one another)")
        return sql.SQL(cast).format(inner), ast.SpannerType(e.type.code)  # type: ignore[arg-type]  # our table
    raise InvalidArgument(f"{what}: {_shown_expression(e)} is not taken in a generated column: its expression may "
                          f"use the queue's other key columns, literals, + - * and {GENERATED_FUNCTIONS}")


def _generated_call(e: ast.Function, args: list[tuple[sql.Composable, ast.SpannerType]], what: str
                    ) -> tuple[sql.Composable, ast.SpannerType]:
    name = e.name.upper()
    types = [t.code for _, t in args]
    texts = [text for text, _ in args]

    def refused(takes: str) -> InvalidArgument:
        return InvalidArgument(f"{what}: No matching signature for {name}({', '.join(types)}): it takes {takes}")

    if e.name == "mod":
        if types != ["INT64", "INT64"]:
            raise refused("two INT64 values")
        return sql.SQL("mod({}, {})").format(*texts), ast.INT64  # the sign of the dividend, as Spanner's
    if e.name == "abs":
        if types != ["INT64"]:
            raise refused("an INT64 value")
        return sql.SQL("abs({})").format(*texts), ast.INT64
    if e.name == "concat":
        if not types or len(set(types)) != 1 or types[0] not in ("STRING", "BYTES"):
            raise refused("STRING values or BYTES values")
        # || rather than concat(), which is only STABLE (and skips NULLs, where Spanner's is NULL)
        return sql.SQL("({})").format(sql.SQL(" || ").join(texts)), args[0][1]
    if e.name in ("lower", "upper"):
        if types != ["STRING"]:
            raise refused("a STRING value")
        return sql.SQL("{}({})").format(sql.SQL(e.name), *texts), ast.STRING
    if e.name == "length":
        if types not in (["STRING"], ["BYTES"]):
            raise refused("a STRING or BYTES value")
        return sql.SQL("{}({})").format(sql.SQL("char_length" if types == ["STRING"] else "octet_length"),
                                        *texts), ast.INT64
    if e.name == "substr":
        # Spanner's SUBSTR counts a position <= 0 from the end or as 1, PostgreSQL's does not: the
        # position (and length) are positive literals, where the two agree.
        bounds = e.args[1:]
        if (len(types) not in (2, 3) or types[0] not in ("STRING", "BYTES")
                or not all(isinstance(b, ast.Literal) and isinstance(b.value, int) and not isinstance(b.value, bool)
                           and b.value > 0 for b in bounds)):
            raise refused("a STRING or BYTES value, a position and an optional length, both positive INT64 literals")
        return sql.SQL("substr({})").format(sql.SQL(", ").join(
            [texts[0], *(sql.Literal(b.value) for b in bounds if isinstance(b, ast.Literal))])), args[0][1]
    if e.name == "farm_fingerprint":
        if types not in (["STRING"], ["BYTES"]):
            raise refused("a STRING or BYTES value")
        return sql.SQL("spanq.farm_fingerprint({})").format(*texts), ast.INT64
    raise InvalidArgument(f"{what}: the function {name}() is not taken in a generated column ({GENERATED_FUNCTIONS})")


def _shown_expression(e: ast.Expr) -> str:
    """What an expression is, as an error names it."""
    if isinstance(e, ast.Param):
        return f"the parameter @{e.name}"
    if isinstance(e, ast.Now):
        return "CURRENT_TIMESTAMP() (not deterministic)"
    if isinstance(e, (ast.Aggregate, ast.Count, ast.CountStar)):
        return "an aggregate"
    if isinstance(e, ast.Literal):
        return "NULL" if e.value is None else f"the literal {e.value!r}"
    return {"Compare": "a comparison", "Logical": "AND / OR", "Not": "NOT", "In": "IN", "Like": "LIKE",
            "Between": "BETWEEN", "IsNull": "IS NULL", "TypedLiteral": "a typed literal", "ArrayLiteral": "an array",
            "InSelect": "a subquery", "Exists": "a subquery"}.get(type(e).__name__, type(e).__name__)
