"""The one syntax tree of the Spanner front-end's statements, for both dialects and both
surfaces, as sqlglot keeps one expression tree for every dialect: the parser
(``parser``) builds these frozen dataclasses and nothing else reads SQL text. The
table subset's nodes are the general ones (Select, Insert, Delete, expressions
over columns); the queue surface's statements name one queue and take values, not
expressions (QueueSelect, QueueInsert, QueueDelete, Receive, RenewLease, CREATE and
DROP QUEUE), and share the value nodes (Literal, TypedLiteral, Param, Now,
ArrayLiteral) with the table subset.

A statement's kind, as errors and authorization name it, is ``kind(statement)``: its
class's name, but "Select", "Insert" and "Delete" for the queue surface's too (as
Spanner's PERMISSION_DENIED messages have always named them).
"""

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, ClassVar

from ...ground.model import ColumnType

SCALARS = ("BOOL", "INT64", "FLOAT64", "NUMERIC", "STRING", "BYTES", "DATE", "TIMESTAMP", "JSON")


@dataclasses.dataclass(frozen=True)
class SpannerType:
    """A column's Spanner type: ``code`` one of SCALARS, ARRAY (with ``element``), PROTO or
    ENUM (with ``proto``, the type's full name); ``length`` for STRING / BYTES (None is MAX).
    The parser gives a proto type as PROTO: whether it is a message or an enum is the
    database's bundle's to say (protos.py), when its DDL runs."""

    code: str
    element: "SpannerType | None" = None
    length: int | None = None
    proto: str | None = None

    def ddl(self) -> str:
        if self.code == "ARRAY":
            assert self.element is not None
            return f"ARRAY<{self.element.ddl()}>"
        if self.code in ("STRING", "BYTES"):
            return f"{self.code}({'MAX' if self.length is None else self.length})"
        if self.proto is not None:
            return self.proto
        return self.code

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code}
        if self.element is not None:
            out["element"] = self.element.as_json()
        if self.length is not None:
            out["length"] = self.length
        if self.proto is not None:
            out["proto"] = self.proto
        return out

    @staticmethod
    def of_json(data: dict[str, Any]) -> "SpannerType":
        element = data.get("element")
        return SpannerType(str(data["code"]), SpannerType.of_json(element) if element else None,
                           data.get("length"), data.get("proto"))


BOOL, INT64, FLOAT64, STRING = SpannerType("BOOL"), SpannerType("INT64"), SpannerType("FLOAT64"), SpannerType("STRING")
TIMESTAMP, NUMERIC, DATE, BYTES, JSON = (SpannerType("TIMESTAMP"), SpannerType("NUMERIC"), SpannerType("DATE"),
                                         SpannerType("BYTES"), SpannerType("JSON"))



# -- expressions -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    """Folded."""
    qualifier: str | None = None
    spelled: str = ""
    """As written (an unaliased result column is named so)."""


@dataclasses.dataclass(frozen=True)
class Literal:
    value: Any
    """None, bool, int, float, Decimal (NUMERIC), str or bytes."""
    type: SpannerType | None
    """None for NULL."""


@dataclasses.dataclass(frozen=True)
class TypedLiteral:
    """DATE '...', TIMESTAMP '...', NUMERIC '...', JSON '...'."""

    type: SpannerType
    text: str


@dataclasses.dataclass(frozen=True)
class Param:
    name: str


@dataclasses.dataclass(frozen=True)
class Now:
    """CURRENT_TIMESTAMP() (and PENDING_COMMIT_TIMESTAMP(): the transaction's time); on the
    queue surface shifted by TIMESTAMP_ADD / TIMESTAMP_SUB (or PostgreSQL's +/- INTERVAL)."""

    offset: timedelta = timedelta(0)


@dataclasses.dataclass(frozen=True)
class ArrayLiteral:
    items: tuple["Expr", ...]


@dataclasses.dataclass(frozen=True)
class Arithmetic:
    op: str
    left: "Expr"
    right: "Expr"


@dataclasses.dataclass(frozen=True)
class Compare:
    op: str
    """=, !=, <, <=, >, >="""
    left: "Expr"
    right: "Expr"


@dataclasses.dataclass(frozen=True)
class In:
    left: "Expr"
    items: tuple["Expr", ...]
    unnest: "Param | None" = None
    negated: bool = False


@dataclasses.dataclass(frozen=True)
class Like:
    left: "Expr"
    pattern: "Expr"
    negated: bool = False


@dataclasses.dataclass(frozen=True)
class Between:
    left: "Expr"
    low: "Expr"
    high: "Expr"
    negated: bool = False


@dataclasses.dataclass(frozen=True)
class IsNull:
    left: "Expr"
    negated: bool = False


@dataclasses.dataclass(frozen=True)
class Logical:
    op: str
    """AND or OR."""
    items: tuple["Expr", ...]


@dataclasses.dataclass(frozen=True)
class Not:
    item: "Expr"


@dataclasses.dataclass(frozen=True)
class CountStar:
    pass


@dataclasses.dataclass(frozen=True)
class Aggregate:
    """SUM, AVG, MIN, MAX of an expression, or COUNT(DISTINCT e) (``distinct``)."""

    function: str
    item: "Expr"
    distinct: bool = False


@dataclasses.dataclass(frozen=True)
class InSelect:
    """``e [NOT] IN (SELECT ...)``."""

    left: "Expr"
    select: "Select"
    negated: bool = False


@dataclasses.dataclass(frozen=True)
class Exists:
    """``EXISTS (SELECT ...)``."""

    select: "Select"


@dataclasses.dataclass(frozen=True)
class Count:
    item: "Expr"


@dataclasses.dataclass(frozen=True)
class Function:
    """A call of one of the scalar functions a generated column's expression may use
    (``FUNCTIONS``); FARM_FINGERPRINT is served in SELECTs and DML too."""

    name: str
    """Folded."""
    args: tuple["Expr", ...]


FUNCTIONS = ("mod", "abs", "concat", "lower", "upper", "substr", "length", "farm_fingerprint")
"""The scalar functions the parser reads: deterministic functions of their arguments."""


@dataclasses.dataclass(frozen=True)
class Cast:
    """``CAST(e AS type)``."""

    item: "Expr"
    type: SpannerType


Expr = (Column | Literal | TypedLiteral | Param | Now | ArrayLiteral | Arithmetic | Compare | In | Like | Between
        | IsNull | Logical | Not | CountStar | Count | Aggregate | InSelect | Exists | Function | Cast)


def googlesql(e: "Expr") -> str:
    """A generated column's expression as GoogleSQL text, as GetDatabaseDdl lists it: names as
    written, functions in capitals, each inner operation in parentheses (what CREATE QUEUE
    reads back as the same expression)."""
    if isinstance(e, Column):
        name = e.spelled or e.name
        return name if name.isidentifier() and name.isascii() else f"`{name}`"
    if isinstance(e, Literal):
        v = e.value
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, bytes):
            return "b'" + "".join(chr(b) if 32 <= b < 127 and chr(b) not in "'\\" else f"\\x{b:02x}" for b in v) + "'"
        if isinstance(v, str):
            return "'" + v.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
        return "NULL" if v is None else str(v)
    if isinstance(e, Arithmetic):
        def side(x: "Expr") -> str:
            return f"({googlesql(x)})" if isinstance(x, Arithmetic) else googlesql(x)
        return f"{side(e.left)} {e.op} {side(e.right)}"
    if isinstance(e, Function):
        return f"{e.name.upper()}({', '.join(googlesql(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"CAST({googlesql(e.item)} AS {e.type.code})"
    raise ValueError(f"no GoogleSQL text for {type(e).__name__}")


@dataclasses.dataclass(frozen=True)
class Star:
    """``*`` or ``a.*``."""

    qualifier: str | None = None


@dataclasses.dataclass(frozen=True)
class SelectItem:
    expr: Expr | Star
    alias: str | None = None
    """As written."""


# -- statements -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ColumnDef:
    name: str
    spelled: str
    type: SpannerType
    not_null: bool = False
    commit_timestamp: bool = False
    """OPTIONS (allow_commit_timestamp = true)."""
    hidden: bool = False
    generated: "Expr | None" = None
    """AS (expr) STORED: the expression its value is computed from."""


@dataclasses.dataclass(frozen=True)
class CreateTable:
    name: str
    spelled: str
    columns: tuple[ColumnDef, ...]
    primary_key: tuple[str, ...]
    parent: str | None = None
    on_delete_cascade: bool = False
    if_not_exists: bool = False
    descending: tuple[str, ...] = ()
    """The primary-key columns declared DESC."""


@dataclasses.dataclass(frozen=True)
class DropTable:
    name: str
    if_exists: bool = False


@dataclasses.dataclass(frozen=True)
class CreateIndex:
    name: str
    spelled: str
    table: str
    columns: tuple[tuple[str, bool], ...]
    """(column, descending)."""
    unique: bool = False
    null_filtered: bool = False
    storing: tuple[str, ...] = ()
    interleave_in: str | None = None
    if_not_exists: bool = False


@dataclasses.dataclass(frozen=True)
class DropIndex:
    name: str
    if_exists: bool = False


@dataclasses.dataclass(frozen=True)
class Relation:
    name: str
    alias: str | None = None

    @property
    def shown(self) -> str:
        return self.alias or self.name


@dataclasses.dataclass(frozen=True)
class Join:
    kind: str
    """INNER, LEFT or CROSS."""
    relation: Relation
    on: Expr | None = None


@dataclasses.dataclass(frozen=True)
class Select:
    items: tuple[SelectItem, ...]
    source: Relation | None = None
    joins: tuple[Join, ...] = ()
    where: Expr | None = None
    order_by: tuple[tuple[Expr, bool], ...] = ()
    limit: Expr | None = None
    offset: Expr | None = None
    distinct: bool = False
    group_by: tuple[Expr, ...] = ()
    having: Expr | None = None
    union: tuple["Select", ...] = ()
    """UNION ALL's further SELECTs (without ORDER BY or LIMIT: this one's apply to them all)."""


_LEAVES = frozenset({Column, Literal, TypedLiteral, Param, Now, CountStar, SpannerType, Star, str, int, bool,
                     type(None)})
"""Nodes that hold no SELECT."""


def read_by(select: "Select") -> list[str]:
    """The relations one SELECT's FROM names (not its subqueries')."""
    return ([select.source.name] if select.source else []) + [j.relation.name for j in select.joins]


def selects_in(node: object) -> Iterator["Select"]:
    """Every SELECT inside a statement (subqueries, UNION ALL's parts), at any depth: the
    relations they read are the statement's too (schema lookup, authorization). One walk of
    the tree, which skips the leaves (a long IN list costs a loop, not a recursion)."""
    stack: list[object] = [node]
    while stack:
        item = stack.pop()
        if type(item) in _LEAVES:
            continue
        if isinstance(item, (tuple, list)):
            stack.extend(item)
            continue
        if isinstance(item, Select) and item is not node:
            yield item
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))


@dataclasses.dataclass(frozen=True)
class Insert:
    table: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Expr, ...], ...]
    returning: tuple[SelectItem, ...] | None = None
    on_conflict: str | None = None
    """None, "update" (INSERT OR UPDATE) or "ignore" (INSERT OR IGNORE)."""


@dataclasses.dataclass(frozen=True)
class Update:
    table: Relation
    assignments: tuple[tuple[str, Expr], ...]
    where: Expr
    returning: tuple[SelectItem, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Delete:
    table: Relation
    where: Expr
    returning: tuple[SelectItem, ...] | None = None


@dataclasses.dataclass(frozen=True)
class AlterTable:
    """``ALTER TABLE t ADD COLUMN [IF NOT EXISTS] c TYPE ...`` or ``ALTER TABLE t DROP COLUMN c``."""

    name: str
    add: ColumnDef | None = None
    drop: str | None = None
    if_not_exists: bool = False


TableDdl = CreateTable | DropTable | CreateIndex | DropIndex | AlterTable
TableDml = Insert | Update | Delete
TableSubset = TableDdl | TableDml | Select
"""A statement of the table subset (GoogleSQL)."""


# -- the queue surface ------------------------------------------------------------


Value = Literal | TypedLiteral | Param | Now | ArrayLiteral
"""What the queue surface takes where a value goes: no column, no operator."""


@dataclasses.dataclass(frozen=True)
class Condition:
    column: str
    op: str
    value: Value


@dataclasses.dataclass(frozen=True)
class Item:
    """One column of a SELECT list: the column (folded) and its ``AS`` name as written."""

    column: str
    alias: str | None = None


ALL_COLUMNS = "*"
"""An ``Item``'s column for ``r.*``: every column, in the order ``*`` gives them."""


@dataclasses.dataclass(frozen=True)
class QueueOptions:
    """A queue's OPTIONS (...) of CREATE or ALTER QUEUE: each None where not given; in ALTER,
    ``reset`` names those set to NULL (back to the default)."""

    disable_send: bool | None = None
    disable_delivery: bool | None = None
    locality_group: str | None = None
    receive_mode: bool = False
    """receive_mode = 'PULL' was written (the only mode)."""
    reset: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class RowDeletionPolicy:
    """ROW DELETION POLICY (OLDER_THAN(column, INTERVAL days DAY)): ``column`` folded."""

    column: str
    days: int


@dataclasses.dataclass(frozen=True)
class CreateQueue:
    name: str
    columns: tuple[tuple[str, ColumnType], ...]
    primary_key: tuple[str, ...]
    parent_table: str | None = None
    if_not_exists: bool = False
    spelled: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False)
    """(folded, as written) for the queue and each column: results and GetDatabaseDdl show
    names as the DDL declared them."""
    declared: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False)
    """(folded column, its type as written: STRING(36)), for GetDatabaseDdl."""
    hidden: tuple[str, ...] = ()
    """Columns declared HIDDEN: left out of SELECT *."""
    interleave_in: str | None = None
    """INTERLEAVE IN t without PARENT (as written): locality only, no parent row needed."""
    on_delete_cascade: bool = True
    options: QueueOptions = QueueOptions()
    row_deletion: RowDeletionPolicy | None = None
    descending: tuple[str, ...] = ()
    """The primary-key columns declared DESC (GoogleSQL)."""
    payload_proto: str | None = None
    """A Payload of a proto message type of the database's bundle: its full name (case-sensitive,
    ``examples.shipping.Order``); the payload is stored as BYTES."""
    generated: tuple[tuple[str, "Expr"], ...] = ()
    """(folded column, its expression) of each key column declared ``AS (expr) STORED``."""
    nullable: tuple[str, ...] = ()
    """Generated columns declared without NOT NULL (GetDatabaseDdl lists them so; spanq's
    key columns are never NULL)."""


@dataclasses.dataclass(frozen=True)
class AlterQueue:
    """ALTER QUEUE q: one of SET OPTIONS, SET ON DELETE, SET INTERLEAVE IN [PARENT] t, and
    ADD / DROP / REPLACE ROW DELETION POLICY."""

    name: str
    options: QueueOptions | None = None
    on_delete_cascade: bool | None = None
    interleave: tuple[str, bool] | None = None
    """(the table as written, whether PARENT was written)."""
    row_deletion: str | None = None
    """"add", "drop" or "replace"."""
    policy: RowDeletionPolicy | None = None


@dataclasses.dataclass(frozen=True)
class CreateRole:
    name: str
    spelled: str


@dataclasses.dataclass(frozen=True)
class DropRole:
    name: str


@dataclasses.dataclass(frozen=True)
class Grant:
    """GRANT (or, ``revoke``, REVOKE) privileges ON {QUEUE | TABLE | TABLE FUNCTION} names
    TO / FROM ROLE roles. ``on`` is "queue", "table" or "function"; a function's name is
    folded (``receive_q``), its queue's with it."""

    privileges: tuple[str, ...]
    on: str
    names: tuple[str, ...]
    roles: tuple[str, ...]
    revoke: bool = False
    spelled: tuple[tuple[str, str], ...] = dataclasses.field(default=(), compare=False)
    """(folded, as written) of the objects."""


@dataclasses.dataclass(frozen=True)
class GrantRole:
    """GRANT ROLE granted TO ROLE roles (or, ``revoke``, REVOKE ... FROM): each of ``roles``
    inherits (no longer inherits) the privileges of each of ``granted``, folded."""

    granted: tuple[str, ...]
    roles: tuple[str, ...]
    revoke: bool = False


@dataclasses.dataclass(frozen=True)
class DropQueue:
    name: str
    if_exists: bool = False


@dataclasses.dataclass(frozen=True)
class Receive:
    queue: str
    args: dict[str, Value]
    columns: tuple[Item, ...] | None = None
    """None: SELECT *."""
    where: tuple[Condition, ...] = ()


@dataclasses.dataclass(frozen=True)
class RenewLease:
    queue: str
    lease_tokens: Value
    columns: tuple[Item, ...] | None = None


@dataclasses.dataclass(frozen=True)
class QueueDelete:
    KIND: ClassVar[str] = "Delete"
    queue: str
    where: tuple[Condition, ...]
    assert_rows_modified: int | None = None


@dataclasses.dataclass(frozen=True)
class QueueInsert:
    KIND: ClassVar[str] = "Insert"
    queue: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Value, ...], ...]
    returning: tuple[Item, ...] | None = None
    """THEN RETURN's columns (None: no THEN RETURN)."""


@dataclasses.dataclass(frozen=True)
class QueueSelect:
    KIND: ClassVar[str] = "Select"
    queue: str
    columns: tuple[Item, ...] | None
    """None: SELECT *."""
    where: tuple[Condition, ...] = ()
    order_by: str | None = None
    descending: bool = False
    limit: Value | None = None


@dataclasses.dataclass(frozen=True)
class ProtoBundle:
    """CREATE PROTO BUNDLE (types), ALTER PROTO BUNDLE [INSERT (types)] [UPDATE (types)]
    [DELETE (types)], DROP PROTO BUNDLE (``action``: "create", "alter", "drop"). Types are
    full names as written (proto names are case-sensitive); CREATE's are ``insert``."""

    action: str
    insert: tuple[str, ...] = ()
    update: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()


QueueDdl = CreateQueue | DropQueue | AlterQueue
AccessDdl = CreateRole | DropRole | Grant | GrantRole
"""Fine-grained access control: database roles and their privileges."""
QueueQuery = Receive | RenewLease | QueueSelect
QueueDml = QueueDelete | QueueInsert
QueueStatement = QueueDdl | QueueQuery | QueueDml
"""A statement of the queue surface (both dialects)."""

Ddl = QueueDdl | TableDdl | AccessDdl | ProtoBundle
Statement = QueueStatement | TableSubset


def kind(statement: Statement) -> str:
    """The statement's kind as messages name it (PERMISSION_DENIED's "the statement (Select)")."""
    return str(getattr(statement, "KIND", type(statement).__name__))
