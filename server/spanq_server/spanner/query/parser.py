"""The Spanner front-end's one grammar: ``parse(text, dialect, ...)`` (and ``parse_ddl``,
for UpdateDatabaseDdl's and CreateDatabase's statements) reads a statement once, in
its database's dialect, into the one syntax tree (``ast``) that runs and that
authorization checks (never a reading in another dialect: issue 21).

One parser class (``Parser``) reads both surfaces of the language in both dialects:
the queue surface (CREATE QUEUE, RECEIVE_, RENEWLEASE_, and SELECT, INSERT, DELETE of
one queue's messages; GoogleSQL and PostgreSQL) and the table subset (table DDL, DML,
SELECT over tables and queues; GoogleSQL). Their words, types and messages are
``dialects``'s tables; the tokens are ``lexing``'s. Which surface reads a statement is
decided before either runs, from its tokens and the database's tables, so that each
statement is read by one grammar once: an UPDATE, table DDL, a SELECT, INSERT or DELETE
naming a table of the database, or one whose tokens leave the queue surface's shape
(``_QueueShape``: a join, a second FROM item, COUNT(*), OR, IN, a subquery, no FROM...)
at something only the table subset has, is the table subset's; anything else the queue
surface's, and a statement neither has is the table subset's if it names a table. What
the chosen grammar refuses is its error.

    CREATE QUEUE [IF NOT EXISTS] q (k1 INT64 [NOT NULL] [AS (e) STORED] [HIDDEN], ...,
        Payload BYTES(MAX) NOT NULL [HIDDEN])
        PRIMARY KEY (k1 [ASC | DESC], ...) [, INTERLEAVE IN [PARENT] p [ON DELETE {CASCADE | NO ACTION}]]
        [, ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL n DAY))] [, OPTIONS (...)]
    ALTER QUEUE q { SET OPTIONS (...) | SET ON DELETE ... | SET INTERLEAVE IN [PARENT] p
        | {ADD | REPLACE} ROW DELETION POLICY (...) | DROP ROW DELETION POLICY }
    DROP QUEUE [IF EXISTS] q
    CREATE ROLE, DROP ROLE, GRANT, REVOKE (``roles``)
    SELECT * | <items> FROM RECEIVE_q([max_duration => '20m'] [, max_batch_size => 20] [, priority => ...])
        [[AS] r] [WHERE c <op> <v> AND ...]
    SELECT * | <items> FROM RENEWLEASE_q(lease_tokens => ['t1', ...] | @tokens) [[AS] r]
    DELETE [FROM] q WHERE k1 = <v> AND ... [ASSERT_ROWS_MODIFIED 1]
    INSERT [INTO] q (k1, ..., Payload [, DeliverTime]) VALUES (<v>, ...) [, (...)] [THEN RETURN <items>]
    SELECT * | <items> FROM q [[AS] r] [WHERE c = <v> AND DeliverTime <= <t> ...] [ORDER BY c [ASC|DESC]] [LIMIT n]

On the queue surface <items> is ``[r.]c [[AS] alias], ...`` or ``r.*`` and a value <v> a literal
(123, 'text', "text", b'bytes', TRUE, FALSE, TIMESTAMP '...'), a parameter (@name),
CURRENT_TIMESTAMP(), or TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL n
SECOND|MINUTE|HOUR|DAY|MILLISECOND); names, backquoted or not, are folded to lower case
by ``fold`` (CREATE QUEUE also keeps them as written, which results show).

    CREATE TABLE [IF NOT EXISTS] t (c TYPE [NOT NULL] [AS (e) STORED] [HIDDEN] [OPTIONS (...)], ...)
        PRIMARY KEY (c [ASC | DESC], ...)
        [, INTERLEAVE IN PARENT p [ON DELETE CASCADE | ON DELETE NO ACTION]]
    DROP TABLE [IF EXISTS] t
    CREATE [UNIQUE] [NULL_FILTERED] INDEX [IF NOT EXISTS] i ON t (c [ASC|DESC], ...) [STORING (c, ...)]
        [, INTERLEAVE IN p]
    DROP INDEX [IF EXISTS] i
    ALTER TABLE t ADD COLUMN [IF NOT EXISTS] c TYPE [NOT NULL] [OPTIONS (...)] | DROP COLUMN c
    INSERT [OR UPDATE | OR IGNORE] [INTO] t (c, ...) VALUES (e, ...), ... [THEN RETURN items]
    UPDATE t [[AS] a] SET c = e, ... WHERE cond [THEN RETURN items]
    DELETE [FROM] t [[AS] a] WHERE cond [THEN RETURN items]
    SELECT [DISTINCT] items [FROM rel [[AS] a] [[INNER | LEFT [OUTER] | CROSS] JOIN rel [[AS] a] [ON cond]] ...]
        [WHERE cond] [GROUP BY e, ...] [HAVING cond] [UNION ALL SELECT ...] [ORDER BY e [ASC|DESC], ...]
        [LIMIT n [OFFSET m]]

(A DELETE of a queue by any WHERE is read here too, and run by the executor as a direct delete.)

In the table subset TYPE is BOOL, INT64, FLOAT64, NUMERIC, STRING(n|MAX), BYTES(n|MAX),
DATE, TIMESTAMP, JSON or ARRAY<one of them>. items are ``*``, ``a.*``, ``e [[AS] x]``
and the aggregates ``COUNT(*)``, ``COUNT([DISTINCT] e)``, ``SUM``, ``AVG``, ``MIN``, ``MAX``;
cond joins comparisons (=, !=, <>, <, <=, >, >=), ``[NOT] IN (...)`` / ``IN UNNEST(@p)`` /
``[NOT] IN (SELECT ...)``, ``EXISTS (SELECT ...)``, ``[NOT] LIKE``, ``IS [NOT] NULL`` and
``[NOT] BETWEEN`` with AND, OR, NOT and parentheses. e is a column (``c``, ``a.c``), a literal, an ``@param``,
``CURRENT_TIMESTAMP()``, ``PENDING_COMMIT_TIMESTAMP()``, ``FARM_FINGERPRINT(e)``, or e + e, e - e, e * e,
e || e. A generated column's expression (AS (e) STORED) may also call MOD, ABS, CONCAT, LOWER,
UPPER, SUBSTR, LENGTH and CAST(e AS type); ``postgres.generation`` says which it takes.

Anything else is INVALID_ARGUMENT naming what is understood. Not a SQL engine: the
executor maps a statement onto the domain, ``postgres`` translates the table subset.
"""

import asyncio
import dataclasses
import functools
import re
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple, TypeVar

from ...ground.errors import InvalidArgument
from ...ground.model import ColumnType
from . import ast, dialects, lexing, protos, roles
from .ast import (ALL_COLUMNS, BOOL, BYTES, FLOAT64, INT64, SCALARS, STRING, TIMESTAMP, Aggregate, Arithmetic,
                  ArrayLiteral, Between, Column, ColumnDef, Compare, Condition, Count, CountStar, CreateIndex,
                  CreateQueue, CreateTable, Delete, Exists, InSelect,
                  DropIndex, DropQueue, DropTable, Expr, In, Insert, IsNull, Item, Join, Like, Literal, Logical, Not,
                  Now, Param, QueueDelete, QueueInsert, QueueQuery, QueueSelect, QueueStatement, Receive, Relation,
                  RenewLease, Select, SelectItem, SpannerType, Star, TableSubset, TypedLiteral, Update, Value)
from .dialects import Dialect, Surface
from .lexing import Cursor, Token, tokenize

__all__ = ["Dialect", "Surface", "Parser", "Parsed", "parse", "parse_ddl", "parse_queue", "parse_table",
           "tokenize"]

LONG_STATEMENT = 4096
"""Characters past which a statement's reads (each up to a few tenths of a second within the limits
of lexing.py), and its translation, let other calls run before and between them."""


@dataclasses.dataclass(frozen=True)
class Parsed:
    """A statement as the executor parsed it, of either surface, and the text it was read from."""

    statement: ast.Statement
    text: str

    @property
    def long(self) -> bool:
        return len(self.text) > LONG_STATEMENT


PARSE_CACHE_SIZE = 1024
PARSE_CACHE_MAX_TEXT = 4096
"""The queue surface's parses kept, and the longest text one is kept for. Queue code sends the
same few texts (its values go in parameters). The statements are frozen, so one parse serves
every later call of the same text."""


async def parse(text: str, dialect: Dialect, is_table: Callable[[str], Awaitable[bool]],
                any_table: Callable[[Iterable[str]], Awaitable[bool]]) -> Parsed:
    """One statement of the queue surface or of the table subset, read in ``dialect``;
    ``is_table`` says whether a (folded) name is a table of the database, ``any_table``
    whether one of some names is. INVALID_ARGUMENT when it is neither: the error of the
    grammar it was meant for (a statement naming a table: the table subset's)."""
    return Parsed(await _statement(text, dialect, is_table, any_table), text)


async def _statement(text: str, dialect: Dialect, is_table: Callable[[str], Awaitable[bool]],
                     any_table: Callable[[Iterable[str]], Awaitable[bool]]) -> ast.Statement:
    long = len(text) > LONG_STATEMENT
    if long:  # other calls go first, and between the reads of a long statement
        await asyncio.sleep(0)
    if dialect is Dialect.POSTGRESQL:
        if await _pg_is_table_subset(text, is_table):
            return parse_table(text, dialect)
        return parse_queue(text, Dialect.POSTGRESQL)
    try:
        shown, tokens = _shown(text)
    except InvalidArgument as words_error:  # the queue surface cannot read its words: the table subset may
        if "limit" in words_error.metadata:  # past a limit of one grammar is past the other's
            raise
        try:
            return parse_table(text)
        except InvalidArgument as table_error:
            if text.lstrip()[:6].lower() == "update" or await any_table(names_in(text)):
                raise table_error from None
            raise words_error from None
    if await _is_table_subset(shown, text, is_table, any_table):
        return parse_table(text)
    return _read_queue(text, Dialect.GOOGLESQL, tokens) if tokens is not None else parse_queue(text)


async def _pg_is_table_subset(text: str, is_table: Callable[[str], Awaitable[bool]]) -> bool:
    """Whether the table subset reads a PostgreSQL-dialect statement: an UPDATE, table DDL, or one
    naming a table; never one calling spanner.receive_ / renewlease_ (no table is looked up for it),
    nor one the table subset's words cannot read (the queue surface's error then says why)."""
    shown = _pg_shape(text) if len(text) > PARSE_CACHE_MAX_TEXT else _pg_shape_cached(text)
    return shown.surface is Surface.TABLE if shown.surface is not None else await _any(is_table, shown.named or ())


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _pg_shape_cached(text: str) -> "Shown":
    return _pg_shape(text)


def _pg_shape(text: str) -> "Shown":
    try:
        tokens = tokenize(text, Dialect.POSTGRESQL, Surface.TABLE)
    except InvalidArgument as exc:
        if "limit" in exc.metadata:
            raise
        return Shown(Surface.QUEUE, ())
    first, second = tokens[0], tokens[min(1, len(tokens) - 1)]
    if first.is_word("update") or (first.is_word("alter") and second.is_word("table")):
        return Shown(Surface.TABLE, ())
    if first.is_word("create", "drop"):
        return Shown(Surface.TABLE if second.is_word("table", "index", "unique") else Surface.QUEUE, ())
    if any(t.is_word("spanner") and n.value == "." for t, n in zip(tokens, tokens[1:])):
        return Shown(Surface.QUEUE, ())
    return Shown(None, _relations(tokens)[0])


async def _is_table_subset(shown: "Shown", text: str, is_table: Callable[[str], Awaitable[bool]],
                           any_table: Callable[[Iterable[str]], Awaitable[bool]]) -> bool:
    """Whether the table subset reads a GoogleSQL statement, from what its tokens show: an UPDATE,
    table DDL, a SELECT, INSERT or DELETE naming a table or of a shape the queue surface cannot
    read; a statement neither surface has is the table subset's when it names a table (its error
    then says what the table subset understands)."""
    if shown.surface is not None:
        return shown.surface is Surface.TABLE
    if shown.named is None:
        return await any_table(names_in(text))
    return await _any(is_table, shown.named)


async def _any(is_table: Callable[[str], Awaitable[bool]], names: Iterable[str]) -> bool:
    for name in names:
        if await is_table(name):
            return True
    return False


def parse_ddl(text: str, dialect: Dialect) -> ast.Ddl:
    """A DDL statement in ``dialect``: of queues, of roles and their privileges, or of tables
    and indexes, by its first words."""
    if is_table_ddl(text, dialect):
        statement = parse_table(text, dialect)
        assert isinstance(statement, (ast.CreateTable, ast.DropTable, ast.CreateIndex, ast.DropIndex, ast.AlterTable))
        return statement
    if text and text.strip() and not (dialect is Dialect.GOOGLESQL and _CREATE_QUEUE.match(text)):
        tokens = tokenize(text, dialect, Surface.QUEUE)
        if roles.is_access_ddl(tokens):
            return roles.statement(Parser(text, dialect, Surface.QUEUE, tokens))
        if tokens[0].is_word("alter") and tokens[min(1, len(tokens) - 1)].is_word("queue"):
            return Parser(text, dialect, Surface.QUEUE, tokens).alter_queue()
        if protos.is_bundle_ddl(tokens):
            if dialect is Dialect.POSTGRESQL:
                raise InvalidArgument("proto bundles are GoogleSQL's: a PostgreSQL-dialect database has no PROTO "
                                      "columns")
            return protos.statement(Parser(text, dialect, Surface.QUEUE, tokens))
    queue = parse_queue(text, dialect)
    if not isinstance(queue, (ast.CreateQueue, ast.DropQueue)):
        raise InvalidArgument(f"only CREATE QUEUE, ALTER QUEUE, DROP QUEUE, CREATE / DROP ROLE, GRANT and REVOKE (and, "
                              f"in GoogleSQL, CREATE/DROP TABLE and INDEX and CREATE / ALTER / DROP PROTO BUNDLE) "
                              f"are DDL here, got {text.strip()[:80]!r}")
    return queue


class Shown(NamedTuple):
    """What a GoogleSQL statement's tokens show of the surface that reads it: ``surface`` when
    they decide it, else the relations it names (a table among them: the table subset's; None:
    every name of the statement is looked up, for one neither surface reads)."""

    surface: Surface | None
    named: tuple[str, ...] | None


def _shown(text: str) -> tuple[Shown, list[Token] | None]:
    """What a statement shows (``Shown``), from the queue surface's tokens (GoogleSQL), and the
    tokens of a long text for the grammar to reuse."""
    if len(text) > PARSE_CACHE_MAX_TEXT:
        tokens = tokenize(text, Dialect.GOOGLESQL, Surface.QUEUE)
        return _shape(tokens), tokens
    return _shown_cached(text), None


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _shown_cached(text: str) -> Shown:
    return _shape(tokenize(text, Dialect.GOOGLESQL, Surface.QUEUE))


def _shape(tokens: list[Token]) -> Shown:
    first, second = tokens[0], tokens[min(1, len(tokens) - 1)]
    if first.is_word("update"):
        return Shown(Surface.TABLE, ())
    if first.is_word("create", "drop"):
        if second.is_word("queue"):
            return Shown(Surface.QUEUE, ())
        if second.is_word("table", "index", "unique", "null_filtered"):
            return Shown(Surface.TABLE, ())
        return Shown(None, None)
    if not first.is_word("select", "insert", "delete"):
        return Shown(None, None)
    named, function = _relations(tokens)
    if not function and _QueueShape(tokens).table_only():
        return Shown(Surface.TABLE, ())
    return Shown(None, named)


def _relations(tokens: list[Token]) -> tuple[tuple[str, ...], bool]:
    """(the names that follow FROM, JOIN, INSERT [INTO] and DELETE [FROM]: a relation each, a
    table or a queue; whether one is a function, RECEIVE_q(...) or RENEWLEASE_q(...), which only
    the queue surface reads)."""
    first, last = tokens[0], len(tokens) - 1
    found, function = [], False
    for i, token in enumerate(tokens[:-1]):
        at = i + 1
        if i == 0 and first.is_word("insert"):
            if tokens[at].is_word("or"):  # INSERT OR UPDATE | IGNORE
                at += 2
            at += tokens[min(at, last)].is_word("into")
        elif i == 0 and first.is_word("delete"):
            at += tokens[at].is_word("from")
        elif not token.is_word("from", "join"):
            continue
        name, after = tokens[min(at, last)], tokens[min(at + 1, last)]
        if name.kind == "ident" and after.kind == "punct" and after.value == "(" and i > 0:
            function = True
        elif name.kind == "ident":
            found.append(str(name.value))
    return tuple(dict.fromkeys(found)), function


class _QueueShape:
    """Whether the queue surface's SELECT, INSERT or DELETE of one queue can read some tokens: the
    shape of its rules (``Parser.queue_select``, ``queue_insert``, ``queue_delete``) without what
    they build. What it cannot read (a join, a second FROM item, COUNT(*), OR, IN, a subquery...)
    is the table subset's to read, or to refuse."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.names: set[str] = set()
        """The FROM's name and alias."""
        self.qualifiers: set[str] = set()
        """What qualifies the columns (``r.c``): the FROM's name or alias, on the queue surface."""
        self.queue_says = False
        """Set where the rule stops at what the queue surface explains best: a qualified
        relation (``schema.name``), which neither reads, or its own ASSERT_ROWS_MODIFIED (as it
        does a statement cut short)."""
        self.table_complete = False
        """Set where the rule stops at an end the table subset may take: SELECT items with no
        FROM, a WHERE of a (BOOL) column."""

    def table_only(self) -> bool:
        """Whether the queue surface's rule stops at something only the table subset reads."""
        first = self.tokens[0]
        read = self.select if first.is_word("select") else self.insert if first.is_word("insert") else self.delete
        if read() and self.at_end():
            return not self.qualifiers <= self.names
        if self.table_complete:
            return True
        return not self.queue_says and self.tokens[self.pos].kind != "end"

    def word(self, *words: str) -> bool:
        if self.tokens[self.pos].is_word(*words):
            self.pos += 1
            return True
        return False

    def at(self, *marks: str) -> bool:
        token = self.tokens[self.pos]
        return token.kind == "punct" and token.value in marks

    def punct(self, *marks: str) -> bool:
        if self.at(*marks):
            self.pos += 1
            return True
        return False

    def at_end(self) -> bool:
        """At the end of the statement, or at its last ``;``."""
        return self.tokens[self.pos + self.at(";")].kind == "end"

    def name(self) -> bool:
        if self.tokens[self.pos].kind == "ident":
            self.pos += 1
            return True
        return False

    def relation(self) -> bool:
        """A queue's name; a qualified one (``spanq.x``) neither surface reads."""
        name = self.tokens[self.pos]
        if not self.name():
            return False
        self.names.add(str(name.value))
        self.queue_says = self.at(".")
        return not self.queue_says

    def column(self) -> bool:
        """``c`` or ``r.c``."""
        qualifier = self.tokens[self.pos]
        if not self.name():
            return False
        if self.punct("."):
            self.qualifiers.add(str(qualifier.value))
            return self.name()
        return True

    def select(self) -> bool:
        self.pos = 1
        if not self.punct("*"):
            while True:
                if self.tokens[self.pos + 1].value == "." and self.tokens[self.pos + 2].value == "*":
                    self.qualifiers.add(str(self.tokens[self.pos].value))  # r.*
                    self.pos += 3
                    if not self.punct(","):
                        break
                    continue
                if not self.column():
                    return False
                if self.word("as"):
                    if not self.name():
                        return False
                elif not self.tokens[self.pos].is_word("from"):
                    self.name()
                if not self.punct(","):
                    break
        if not self.word("from"):
            self.table_complete = self.at_end()
            return False
        if not self.relation():
            return False
        named = self.word("as")
        alias = self.tokens[self.pos]
        if named or not alias.is_word("where", "order", "limit"):
            if self.name():
                self.names.add(str(alias.value))
            elif named:
                return False
        if self.word("where") and not self.conditions():
            return False
        if self.word("order"):
            if not (self.word("by") and self.column()):
                return False
            self.word("asc", "desc")
        return not self.word("limit") or self.value()

    def insert(self) -> bool:
        self.pos = 1
        if self.tokens[1].is_word("or"):  # INSERT OR UPDATE | IGNORE: the table subset's
            return False
        self.word("into")
        if not (self.relation() and self.row(self.name)) or not self.word("values"):
            return False
        while True:
            if not self.row(self.value):
                return False
            if not self.punct(","):
                self.queue_says = self.tokens[self.pos].is_word("then")  # its THEN RETURN
                return True

    def row(self, item: Callable[[], bool]) -> bool:
        if not self.punct("("):
            return False
        while True:
            if not item():
                return False
            if not self.punct(","):
                return self.punct(")")

    def delete(self) -> bool:
        self.pos = 1
        self.word("from")
        if not (self.relation() and self.word("where") and self.conditions()):
            return False
        if self.word("assert_rows_modified"):  # the queue surface's word
            self.queue_says = True
            return self.tokens[self.pos].kind == "number" and self.skip(1)
        return True

    def conditions(self) -> bool:
        while True:
            if self.tokens[self.pos].is_word("true", "false", "null", "not"):  # WHERE TRUE, NOT ...: a table's
                return False
            if not self.column():
                return False
            if not self.punct("=", "<", "<=", ">", ">=", "!=", "<>"):
                self.table_complete = self.at_end()
                return False
            if not self.value():
                return False
            if not self.word("and"):
                return True

    def value(self) -> bool:
        """A literal, a @param, an array of them, TIMESTAMP '...', CURRENT_TIMESTAMP[()] or
        TIMESTAMP_ADD / TIMESTAMP_SUB(...) (its insides are the queue grammar's to check)."""
        token = self.tokens[self.pos]
        if token.kind in ("string", "bytes", "number", "param") or token.is_word("true", "false", "null"):
            self.pos += 1
            return True
        if self.punct("-"):
            return self.tokens[self.pos].kind == "number" and self.skip(1)
        if self.word("array") and not self.at("["):
            return False
        if self.at("["):
            return self.balanced()
        if self.word("timestamp", "timestamptz"):
            return self.tokens[self.pos].kind == "string" and self.skip(1)
        if self.word("current_timestamp"):
            return not self.at("(") or self.balanced()
        if self.word("timestamp_add", "timestamp_sub"):
            return self.balanced()
        return False

    def skip(self, count: int) -> bool:
        self.pos += count
        return True

    def balanced(self) -> bool:
        """``( ... )`` or ``[ ... ]``, whatever is inside."""
        if not self.at("(", "["):
            return False
        closing, depth = {"(": ")", "[": "]"}[self.tokens[self.pos].value], 0
        for at in range(self.pos, len(self.tokens) - 1):
            token = self.tokens[at]
            if token.kind == "punct" and token.value in ("(", "["):
                depth += 1
            elif token.kind == "punct" and token.value in (")", "]"):
                depth -= 1
                if depth == 0:
                    self.pos = at + 1
                    return token.value == closing
        return False


# -- one surface's reading ------------------------------------------------------------


def parse_queue(text: str, dialect: Dialect = Dialect.GOOGLESQL) -> QueueStatement:
    """One statement of the queue surface, or INVALID_ARGUMENT saying what is understood."""
    if len(text) > PARSE_CACHE_MAX_TEXT:
        return _read_queue(text, dialect)
    found = _queue_cached(text, dialect)
    if isinstance(found, tuple):  # a fresh error each time: its callers add to its message
        raise InvalidArgument(found[0], **found[1])
    return found


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _queue_cached(text: str, dialect: Dialect) -> QueueStatement | tuple[str, dict[str, str]]:
    try:
        return _read_queue(text, dialect)
    except InvalidArgument as exc:
        return exc.message, dict(exc.metadata)


_CREATE_QUEUE = re.compile(r"\s*create\s+queue\b", re.I)


def _read_queue(text: str, dialect: Dialect, tokens: list[Token] | None = None) -> QueueStatement:
    """``parse_queue``, not cached, of a text maybe already read into ``tokens``. A GoogleSQL
    CREATE QUEUE is read with the table subset's tokens: a generated key column's expression
    (AS (expr) STORED) is one of its expressions (+, ||, ...)."""
    if not text or not text.strip():
        raise InvalidArgument("the statement is empty")
    if dialect is Dialect.GOOGLESQL and _CREATE_QUEUE.match(text):
        tokens = tokenize(text, dialect, Surface.TABLE)
    return Parser(text, dialect, Surface.QUEUE, tokens).queue_statement()


def parse_table(text: str, dialect: Dialect = Dialect.GOOGLESQL) -> TableSubset:
    """One statement of the table subset, or INVALID_ARGUMENT saying what is not supported."""
    if not text or not text.strip():
        raise InvalidArgument("the statement is empty")
    return Parser(text, dialect, Surface.TABLE).table_statement()


def is_table_ddl(text: str, dialect: Dialect = Dialect.GOOGLESQL) -> bool:
    """Whether a DDL statement is the table subset's (CREATE / DROP TABLE or INDEX), by its first words."""
    try:
        tokens = tokenize(text, dialect, Surface.TABLE)
    except InvalidArgument:
        return False
    first = [t.value for t in tokens[:3] if t.kind == "ident"]
    return (len(first) >= 2 and ((first[0] in ("create", "drop")
            and first[1] in ("table", "index", "unique", "null_filtered")) or first[:2] == ["alter", "table"]))


def names_in(text: str, dialect: Dialect = Dialect.GOOGLESQL) -> set[str]:
    """Every (folded) identifier of a statement as the table subset reads it: which relations it may name."""
    try:
        return {t.value for t in tokenize(text, dialect, Surface.TABLE) if t.kind == "ident"}
    except InvalidArgument:
        return set()


# -- the parser -----------------------------------------------------------------------

_PG_TYPE_WORDS = {"character": (("varying",), "varchar"), "double": (("precision",), "float8"),
                  "timestamp": (("with", "time", "zone"), "timestamptz")}
"""PostgreSQL's type names of several words: the words after the first, and the one-word name."""

_Item = TypeVar("_Item")

_LITERALS: dict[str, SpannerType] = {"string": STRING, "bytes": BYTES, "number": INT64}
"""The type of a literal token's value."""


class _QueueColumn(NamedTuple):
    """A column of CREATE QUEUE as declared."""

    name: str
    type: ColumnType
    declared: str = ""
    """Its type as written (STRING(36)); empty in PostgreSQL."""
    hidden: bool = False
    proto: str | None = None
    """A proto message type's full name (Payload only)."""
    generated: Expr | None = None
    """AS (expr) STORED: the expression."""
    not_null: bool = True


_QUEUE_OPTIONS: dict[str, type] = {"receive_mode": str, "disable_send": bool, "disable_delivery": bool,
                                   "locality_group": str}
"""A queue's options (CREATE / ALTER QUEUE ... OPTIONS) and the type of each one's value."""


class Parser(Cursor):
    """A recursive-descent parser of one statement, in ``dialect``, of ``surface``: the queue
    surface's rules (``queue_statement`` and the methods below it) or the table subset's
    (``table_statement`` and below), each in either dialect."""

    def __init__(self, text: str, dialect: Dialect, surface: Surface, tokens: list[Token] | None = None) -> None:
        super().__init__(text, tokenize(text, dialect, surface) if tokens is None else tokens,
                         functools.partial(dialects.supported, surface))
        self.dialect = dialect
        self.surface = surface
        self.pg = dialect is Dialect.POSTGRESQL

    def supported(self) -> str:
        return dialects.supported(self.surface)

    # -- the queue surface -------------------------------------------------

    def loose_name(self, what: str) -> str:
        """A name on the queue surface: any identifier, reserved words too."""
        return self.loose_spelled(what)[0]

    def loose_spelled(self, what: str) -> tuple[str, str]:
        """(folded, as written)."""
        if self.peek.kind != "ident":
            raise self.error(what)
        token = self.next()
        return token.value, token.spelled

    # statements
    def queue_statement(self) -> QueueStatement:
        first = self.peek
        if first.is_word("create"):
            return self.create_queue()
        if first.is_word("drop"):
            return self.drop_queue()
        if first.is_word("select"):
            return self.queue_select()
        if first.is_word("delete"):
            return self.queue_delete()
        if first.is_word("insert"):
            return self.queue_insert()
        raise InvalidArgument(f"unsupported statement {self.text.strip()[:80]!r}; {self.supported()}")

    def create_queue(self) -> CreateQueue:
        self.word("create")
        if not self.peek.is_word("queue"):
            raise InvalidArgument(
                f"only CREATE QUEUE, CREATE TABLE, CREATE [UNIQUE] INDEX and CREATE ROLE are supported among CREATE "
                f"statements, got {self.text.strip()[:80]!r} (tables and indexes in GoogleSQL databases only)"
            )
        self.word("queue")
        if_not_exists = False
        if self.accept_word("if"):
            self.word("not")
            self.word("exists")
            if_not_exists = True
        name, spelled_name = self.loose_spelled("a queue name")
        spelled = [(name, spelled_name)]
        self.punct("(")
        columns: list[tuple[str, ColumnType]] = []
        declared: list[tuple[str, str]] = []
        hidden: list[str] = []
        key: list[tuple[str, bool]] = []
        payload_proto = None
        generated: list[tuple[str, Expr]] = []
        nullable: list[str] = []
        while not self.accept_punct(")"):
            if self.pg and self.peek.is_word("primary"):  # PostgreSQL: the key is a table constraint
                key = self.primary_key()
            else:
                spelled.append((self.peek.value, self.peek.spelled))
                column = self.queue_column()
                columns.append((column.name, column.type))
                if column.declared:
                    declared.append((column.name, column.declared))
                if column.hidden:
                    hidden.append(column.name)
                if column.proto:
                    payload_proto = column.proto
                if column.generated is not None:
                    generated.append((column.name, column.generated))
                    if not column.not_null:
                        nullable.append(column.name)
                if self.pg and self.accept_word("primary"):
                    self.word("key")
                    key.append((columns[-1][0], False))
            if not self.accept_punct(","):
                self.punct(")")
                break
        if not self.pg:
            key = self.primary_key()
        elif not key:
            raise InvalidArgument(f"CREATE QUEUE {name}: a queue needs a PRIMARY KEY (...)")
        parent = interleave_in = None
        cascade = True
        options = ast.QueueOptions()
        policy = None
        while self.accept_punct(",") or self.peek.is_word("interleave", "options", "with", "row", "ttl"):
            if self.accept_word("interleave"):
                table, in_parent, on_delete = self.interleave()
                if in_parent:
                    parent, cascade = table, on_delete is not False
                elif on_delete is not None:
                    raise InvalidArgument(f"CREATE QUEUE {name}: ON DELETE goes with INTERLEAVE IN PARENT only "
                                          "(INTERLEAVE IN without PARENT needs no parent row, so nothing is deleted "
                                          "with one)")
                else:
                    interleave_in = table
            elif self.accept_word("options", "with"):
                options = self.queue_options(alter=False)
            elif self.accept_word("row"):
                policy = self.row_deletion_policy()
            elif self.pg and self.accept_word("ttl"):
                policy = self.pg_ttl()
            else:
                raise self.error("INTERLEAVE IN [PARENT], ROW DELETION POLICY or OPTIONS")
        self.end()
        return CreateQueue(name, tuple(columns), tuple(k for k, _ in key), parent, if_not_exists, tuple(spelled),
                           tuple(declared), tuple(hidden), interleave_in, cascade, options, policy,
                           descending=tuple(k for k, descending in key if descending), payload_proto=payload_proto,
                           generated=tuple(generated), nullable=tuple(nullable))

    def interleave(self) -> tuple[str, bool, bool | None]:
        """After INTERLEAVE: IN [PARENT] t [ON DELETE {CASCADE | NO ACTION}]; (t, folded after
        PARENT, else as written; PARENT written; cascade: None when no ON DELETE was written)."""
        self.word("in")
        in_parent = self.accept_word("parent")
        folded, table = self.loose_spelled("a parent table name")
        if in_parent:
            table = folded  # the catalog's parent; GetDatabaseDdl shows the table's declared name
        on_delete = None
        if self.accept_word("on"):
            on_delete = self.on_delete()
        return table, in_parent, on_delete

    def on_delete(self) -> bool:
        """After ON: DELETE CASCADE (True) | DELETE NO ACTION (False)."""
        self.word("delete")
        if self.accept_word("no"):
            self.word("action")
            return False
        self.word("cascade")
        return True

    def row_deletion_policy(self) -> ast.RowDeletionPolicy:
        """After ROW: DELETION POLICY (OLDER_THAN(column, INTERVAL n DAY))."""
        self.word("deletion")
        self.word("policy")
        self.punct("(")
        self.word("older_than")
        self.punct("(")
        column = self.loose_name("a TIMESTAMP column")
        self.punct(",")
        self.word("interval")
        days = self.next()
        if days.kind != "number":
            raise InvalidArgument("ROW DELETION POLICY: OLDER_THAN takes INTERVAL n DAY, n a whole number of days")
        self.word("day")
        self.punct(")")
        self.punct(")")
        return ast.RowDeletionPolicy(column, int(days.value))

    def pg_ttl(self) -> ast.RowDeletionPolicy:
        """PostgreSQL's row deletion policy, after TTL: INTERVAL 'n days' ON column."""
        self.word("interval")
        text = self.next()
        days = None
        if text.kind == "string":
            try:
                found = pg_interval(text.value)
            except (OverflowError, InvalidArgument):
                found = None
            if found is not None and found == timedelta(days=found.days):
                days = found.days
        if days is None:
            raise InvalidArgument(f"TTL INTERVAL {str(text.value)[:40]!r}: a queue's TTL is a whole number of days, "
                                  "INTERVAL 'n days'")
        self.word("on")
        return ast.RowDeletionPolicy(self.loose_name("a timestamptz column"), days)

    def primary_key(self) -> list[tuple[str, bool]]:
        """PRIMARY KEY (k [ASC | DESC], ...): each column and whether it is DESC."""
        self.word("primary")
        self.word("key")
        self.punct("(")
        key = [self.key_part()]
        while self.accept_punct(","):
            key.append(self.key_part())
        self.punct(")")
        return key

    def queue_column(self) -> "_QueueColumn":
        name = self.loose_name("a column name")
        if self.pg:
            column = _QueueColumn(name, self.pg_type(name))
            if self.peek.is_word("generated"):
                raise InvalidArgument(f"column {name!r}: spanq reads generated key columns in GoogleSQL databases "
                                      "only (AS (expr) STORED)")
            return column
        if self.peek.kind == "ident" and (self.ahead().kind == "punct" and self.ahead().value == "."
                                          or "." in self.peek.spelled):
            return self.proto_column(name)
        type_name = self.loose_name(f"the type of column {name!r}")
        length = None
        if self.accept_punct("("):
            length = self.next()
            if length.kind != "number" and not length.is_word("max"):
                raise self.error("a length or MAX")
            self.punct(")")
        types = dialects.QUEUE_TYPES
        if type_name not in types:
            raise InvalidArgument(
                f"column {name!r} has type {type_name.upper()}, which spanq queues do not support; key columns "
                "may be INT64, STRING, BYTES, TIMESTAMP or BOOL, and Payload BYTES, STRING or JSON"
            )
        column_type = types[type_name]
        if (length is not None) != (column_type in (ColumnType.STRING, ColumnType.BYTES)):
            raise InvalidArgument(f"column {name!r}: {type_name.upper()} "
                                  + ("takes no length" if length is not None else "needs a length: (n) or (MAX)"))
        declared = type_name.upper() + (f"({str(length.value).upper()})" if length is not None else "")
        not_null = self.accept_word("not")
        if not_null:
            self.word("null")
        generated = None
        if self.accept_word("as"):
            self.punct("(")
            self.deeper()
            generated = self.expr()
            self.punct(")")
            self.depth -= 1
            if not self.accept_word("stored"):
                raise InvalidArgument(f"column {name!r}: a generated key column is AS (expr) STORED (Spanner's "
                                      "generated key columns are stored)")
        hidden = self.accept_word("hidden")
        if self.accept_word("options"):
            self.column_options(name)
        return _QueueColumn(name, column_type, declared, hidden, generated=generated, not_null=not_null)

    def proto_column(self, name: str) -> "_QueueColumn":
        """A column of a proto type (a dotted full name): Payload only, stored as BYTES."""
        proto = protos.type_name(self)
        if name != "payload":
            raise InvalidArgument(f"column {name!r} has the proto type {proto}; a queue's key columns may be INT64, "
                                  "STRING, BYTES, TIMESTAMP or BOOL (a proto type is for Payload)")
        if self.accept_word("not"):
            self.word("null")
        hidden = self.accept_word("hidden")
        if self.accept_word("options"):
            self.column_options(name)
        return _QueueColumn(name, ColumnType.BYTES, proto, hidden, proto)

    def column_options(self, column: str) -> None:
        """A queue column's OPTIONS (...): Spanner documents none for a queue's columns, so any is refused."""
        found = self.option_list()
        if found:
            raise InvalidArgument(f"column {column!r}: unsupported column option(s) {sorted(found)}; a queue's "
                                  "columns take none")

    def pg_type_name(self, first: str) -> str:
        """A PostgreSQL type's name from its first word, reading the words of a longer name:
        ``character varying`` is varchar, ``double precision`` float8, ``timestamp with time
        zone`` timestamptz."""
        longer = _PG_TYPE_WORDS.get(first)
        if longer is None:
            return first
        words, name = longer
        for word in words:
            self.word(word)
        return name

    def pg_type(self, name: str) -> ColumnType:
        """A column type of Spanner's PostgreSQL dialect, and its NOT NULL."""
        type_name = self.pg_type_name(self.loose_name(f"the type of column {name!r}"))
        types = dialects.PG_QUEUE_TYPES
        if type_name not in types:
            raise InvalidArgument(
                f"column {name!r} has type {type_name}, which spanq queues do not support; key columns may be "
                "bigint, varchar, text, bytea, timestamptz or boolean, and payload bytea, varchar, text or jsonb"
            )
        if type_name == "varchar" and self.accept_punct("("):
            length = self.next()
            if length.kind != "number":
                raise self.error("a length")
            self.punct(")")
        if self.accept_word("not"):
            self.word("null")
        return types[type_name]

    def pg_interval(self, base: "Now") -> "Now":
        """PostgreSQL: CURRENT_TIMESTAMP [+|- INTERVAL '...'] ..."""
        while self.peek.kind == "punct" and self.peek.value in "+-" and self.tokens[self.pos + 1].is_word("interval"):
            sign = 1 if self.next().value == "+" else -1
            self.word("interval")
            text = self.next()
            if text.kind != "string":
                raise self.error("an interval like INTERVAL '1 hour'")
            try:
                total = base.offset + sign * pg_interval(text.value)
            except OverflowError:
                total = dialects.MAX_INTERVAL * 2
            if abs(total) > dialects.MAX_INTERVAL:
                raise InvalidArgument(f"INTERVAL {text.value[:40]!r} is out of range: CURRENT_TIMESTAMP may be "
                                      f"shifted by at most {dialects.MAX_INTERVAL.days} days, Spanner's TIMESTAMP "
                                      "range")
            base = Now(total)
        return base

    def key_part(self) -> tuple[str, bool]:
        """A primary-key column and whether it is DESC (GoogleSQL's queues; Spanner's PostgreSQL
        dialect orders a key ascending only)."""
        name = self.loose_name("a primary-key column")
        if self.accept_word("desc"):
            if self.pg:
                raise InvalidArgument(f"primary-key column {name!r}: DESC keys are not supported in PostgreSQL-dialect "
                                      "databases (a GoogleSQL database's queues and tables take them)")
            return name, True
        self.accept_word("asc")
        return name, False

    def option_list(self) -> dict[str, Value]:
        """( name = value, ... )."""
        self.punct("(")
        found = {}
        while True:
            key = self.loose_name("an option name")
            self.punct("=")
            found[key] = self.value()
            if not self.accept_punct(","):
                break
        self.punct(")")
        return found

    def queue_options(self, alter: bool, reset_names: list[str] | None = None) -> ast.QueueOptions:
        """A queue's OPTIONS (receive_mode = 'PULL', disable_send = bool, disable_delivery = bool,
        locality_group = 'name'); NULL resets one (ALTER QUEUE ... SET OPTIONS), as a name of
        ``reset_names`` does (PostgreSQL's ALTER QUEUE ... RESET (...))."""
        found = self.option_list() if reset_names is None else {k: Literal(None, None) for k in reset_names}
        values: dict[str, Any] = {}
        reset = set()
        for key, value in found.items():
            is_null = isinstance(value, Literal) and value.value is None
            if key not in _QUEUE_OPTIONS:
                raise InvalidArgument(f"unsupported queue option {key!r}; a queue takes "
                                      f"{', '.join(_QUEUE_OPTIONS)}")
            if is_null:
                if not alter:
                    raise InvalidArgument(f"option {key} = NULL: NULL resets an option in ALTER QUEUE ... SET OPTIONS; "
                                          "in CREATE QUEUE leave the option out")
                reset.add(key)
                continue
            kind = _QUEUE_OPTIONS[key]
            if not (isinstance(value, Literal) and isinstance(value.value, kind)):
                raise InvalidArgument(f"option {key} takes " + ("TRUE or FALSE" if kind is bool else "a string"))
            values[key] = value.value
        mode = values.pop("receive_mode", None)
        if mode is not None and str(mode).upper() != "PULL":
            raise InvalidArgument("receive_mode must be 'PULL', the only mode Spanner queues have")
        group = values.get("locality_group")
        if group is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", str(group)):
            raise InvalidArgument(f"locality_group {str(group)[:80]!r} is not a locality group name")
        return ast.QueueOptions(values.get("disable_send"), values.get("disable_delivery"), group,
                                mode is not None or "receive_mode" in reset, frozenset(reset))

    def alter_queue(self) -> ast.AlterQueue:
        """ALTER QUEUE q { SET OPTIONS (...) | SET ON DELETE {CASCADE | NO ACTION}
        | SET INTERLEAVE IN [PARENT] t | {ADD | REPLACE} ROW DELETION POLICY (...) | DROP ROW DELETION POLICY }."""
        self.word("alter")
        self.word("queue")
        name = self.loose_name("a queue name")
        if self.pg and self.accept_word("reset"):  # PostgreSQL: RESET (option, ...), each to its default
            self.punct("(")
            reset = [self.loose_name("an option name")]
            while self.accept_punct(","):
                reset.append(self.loose_name("an option name"))
            self.punct(")")
            found = ast.AlterQueue(name, options=self.queue_options(alter=True, reset_names=reset))
        elif self.accept_word("set"):
            if self.accept_word("options") or (self.pg and self.at_punct("(")):  # PostgreSQL: SET (...)
                found = ast.AlterQueue(name, options=self.queue_options(alter=True))
            elif self.accept_word("on"):
                found = ast.AlterQueue(name, on_delete_cascade=self.on_delete())
            elif self.accept_word("interleave"):
                self.word("in")
                in_parent = self.accept_word("parent")
                found = ast.AlterQueue(name, interleave=(self.loose_spelled("a parent table name")[1], in_parent))
            else:
                raise self.error("OPTIONS, ON DELETE or INTERLEAVE IN after SET")
        elif self.pg and self.peek.is_word("add", "alter", "drop") and self.ahead().is_word("ttl"):
            action = {"add": "add", "alter": "replace", "drop": "drop"}[self.word("add", "alter", "drop")]
            self.word("ttl")
            found = ast.AlterQueue(name, row_deletion=action, policy=None if action == "drop" else self.pg_ttl())
        else:
            action = self.word("add", "drop", "replace")
            if action == "drop":
                self.word("row")
                self.word("deletion")
                self.word("policy")
                found = ast.AlterQueue(name, row_deletion="drop")
            else:
                self.word("row")
                found = ast.AlterQueue(name, row_deletion=action, policy=self.row_deletion_policy())
        self.end()
        return found

    def drop_queue(self) -> DropQueue:
        self.word("drop")
        if not self.peek.is_word("queue"):
            raise InvalidArgument(f"only DROP QUEUE, DROP TABLE, DROP INDEX and DROP ROLE are supported among DROP "
                                  f"statements, got {self.text.strip()[:80]!r} (tables and indexes in GoogleSQL "
                                  "databases only)")
        self.word("queue")
        if_exists = False
        if self.accept_word("if"):
            self.word("exists")
            if_exists = True
        name = self.loose_name("a queue name")
        self.end()
        return DropQueue(name, if_exists)

    def queue_select(self) -> QueueQuery:
        self.word("select")
        items: list[tuple[str | None, Item]] | None = None
        if not self.accept_punct("*"):
            items = [self.select_item()]
            while self.accept_punct(","):
                items.append(self.select_item())
        self.word("from")
        source = self.loose_name("a queue or RECEIVE_<queue>(...) / RENEWLEASE_<queue>(...)")
        if self.pg and source == "spanner" and self.accept_punct("."):
            source = self.loose_name("spanner.receive_<queue> or spanner.renewlease_<queue>")
            if not self.peek.value == "(":
                raise self.error("'(' after the function's name")
        elif self.pg and self.peek.value == "(":
            raise InvalidArgument(f"the queue functions are in schema spanner: spanner.{source}(...)")
        function = self.accept_punct("(")
        if function:
            call = self.table_function(source)
        names = {source}
        if self.accept_word("as"):
            names.add(self.loose_name("an alias after AS"))
        elif self.peek.kind == "ident" and not self.peek.is_word("where", "order", "limit"):
            names.add(self.loose_name("an alias"))
        columns = None if items is None else tuple(self.unqualified(q, item, names) for q, item in items)
        where = self.conditions(names) if self.accept_word("where") else ()
        if function:
            self.end()
            if isinstance(call, Receive):
                return Receive(call.queue, call.args, columns, where)
            if where:
                raise InvalidArgument("RENEWLEASE_ takes no WHERE: it renews every token it is given")
            return RenewLease(call.queue, call.lease_tokens, columns)
        order_by, descending, limit = None, False, None
        if self.accept_word("order"):
            self.word("by")
            order_by = self.qualified_column("a column to order by", names)
            if self.accept_word("desc"):
                descending = True
            else:
                self.accept_word("asc")
        if self.accept_word("limit"):
            limit = self.value()
        self.end()
        return QueueSelect(source, columns, where, order_by, descending, limit)

    def select_item(self) -> tuple[str | None, Item]:
        """``col``, ``t.col``, either ``[AS] alias``; the qualifier is checked once FROM is read."""
        qualifier, column = None, self.loose_name("* or a column name")
        if self.accept_punct("."):
            if self.accept_punct("*"):  # r.*: every column, as * gives them
                return column, Item(ALL_COLUMNS)
            qualifier, column = column, self.loose_name("a column name after '.'")
        alias = None
        if self.accept_word("as"):
            alias = self.loose_spelled("a column alias after AS")[1]
        elif self.peek.kind == "ident" and not self.peek.is_word("from"):
            alias = self.loose_spelled("a column alias")[1]
        return qualifier, Item(column, alias)

    def unqualified(self, qualifier: str | None, item: Item, names: set[str]) -> Item:
        if qualifier is not None and qualifier not in names:
            raise InvalidArgument(f"{qualifier}.{item.column}: {qualifier!r} is not the FROM's name or alias "
                                  f"({', '.join(sorted(names))})")
        return item

    def qualified_column(self, what: str, names: set[str]) -> str:
        column = self.loose_name(what)
        if self.accept_punct("."):
            if column not in names:
                raise InvalidArgument(f"{column!r} is not the FROM's name or alias ({', '.join(sorted(names))})")
            column = self.loose_name("a column name after '.'")
        return column

    def table_function(self, function: str) -> Receive | RenewLease:
        if function.startswith("receive_"):
            queue = function.removeprefix("receive_")
            args: dict[str, Value] = {}
            position, named = 0, False
            while not self.accept_punct(")"):
                if self.pg and not (self.peek.kind == "ident" and self.tokens[self.pos + 1].value == "=>"):
                    # PostgreSQL: by position too, spanner.receive_q(max_batch_size, priority, max_duration)
                    if position >= len(dialects.PG_RECEIVE_ARGS) or named:
                        raise InvalidArgument("spanner.receive_<queue> takes (max_batch_size, priority, "
                                              "max_duration), by position before any named argument")
                    args[dialects.PG_RECEIVE_ARGS[position]] = self.value()
                    position += 1
                    if not self.accept_punct(","):
                        self.punct(")")
                        break
                    continue
                if not (self.peek.kind == "ident" and self.tokens[self.pos + 1].value == "=>"):
                    raise InvalidArgument(
                        "name RECEIVE's arguments: RECEIVE_q(max_duration => '20m', max_batch_size => 20)"
                    )
                arg = self.loose_name("an argument name")
                named = True
                self.punct("=>")
                if arg not in dialects.RECEIVE_ARGS:
                    raise InvalidArgument(f"RECEIVE takes {', '.join(dialects.RECEIVE_ARGS)}; not {arg!r}")
                if arg in args or arg in dialects.PG_RECEIVE_ARGS[:position]:
                    raise InvalidArgument(f"RECEIVE argument {arg!r} is given twice")
                args[arg] = self.value()
                if not self.accept_punct(","):
                    self.punct(")")
                    break
            return Receive(queue, args)
        if function.startswith("renewlease_"):
            queue = function.removeprefix("renewlease_")
            if self.peek.kind == "ident" and self.tokens[self.pos + 1].value == "=>":
                arg = self.loose_name("lease_tokens")
                if arg != "lease_tokens":
                    raise InvalidArgument(f"RENEWLEASE takes lease_tokens, not {arg!r}")
                self.punct("=>")
            tokens = self.value()
            self.punct(")")
            return RenewLease(queue, tokens)
        raise InvalidArgument(f"unknown table function {function.upper()}; spanq has RECEIVE_<queue> and "
                              "RENEWLEASE_<queue>")

    def queue_delete(self) -> QueueDelete:
        self.word("delete")
        self.accept_word("from")
        queue = self.loose_name("a queue name")
        self.word("where")
        where = self.conditions({queue})
        assert_rows = None
        if self.accept_word("assert_rows_modified"):
            count = self.next()
            if count.kind != "number":
                raise self.error("a row count after ASSERT_ROWS_MODIFIED")
            assert_rows = count.value
        self.end()
        return QueueDelete(queue, where, assert_rows)

    def queue_insert(self) -> QueueInsert:
        self.word("insert")
        if self.peek.is_word("or"):
            raise InvalidArgument("INSERT OR IGNORE / OR UPDATE are not supported on queues; use INSERT")
        self.accept_word("into")
        queue = self.loose_name("a queue name")
        self.punct("(")
        columns = [self.loose_name("a column name")]
        while self.accept_punct(","):
            columns.append(self.loose_name("a column name"))
        self.punct(")")
        self.word("values")
        rows = [self.row(len(columns), self.value)]
        while self.accept_punct(","):
            rows.append(self.row(len(columns), self.value))
        returning = None
        if self.accept_word("then"):
            self.word("return")
            items = [self.select_item()]
            while self.accept_punct(","):
                items.append(self.select_item())
            returning = tuple(self.unqualified(q, item, {queue}) for q, item in items)
        self.end()
        return QueueInsert(queue, tuple(columns), tuple(rows), returning)

    def conditions(self, names: set[str] | None = None) -> tuple[Condition, ...]:
        found = [self.condition(names or set())]
        while self.accept_word("and"):
            found.append(self.condition(names or set()))
        if self.peek.is_word("or"):
            raise InvalidArgument("only conditions joined by AND are supported (column = value AND ...)")
        return tuple(found)

    def condition(self, names: set[str]) -> Condition:
        column = self.qualified_column("a column name", names)
        op = self.punct("=", "<", "<=", ">", ">=", "!=", "<>")
        return Condition(column, "!=" if op == "<>" else op, self.value())

    def value(self) -> Value:
        token = self.next()
        if token.kind in _LITERALS:
            return Literal(token.value, _LITERALS[token.kind])
        if token.kind == "param":
            return Param(token.value)
        if token.kind == "punct" and token.value == "-" and self.peek.kind == "number":
            return Literal(-self.next().value, INT64)
        if token.kind == "punct" and token.value == "[":
            self.deeper()
            items: list[Value] = []
            while not self.accept_punct("]"):
                items.append(self.value())
                if not self.accept_punct(","):
                    self.punct("]")
                    break
            self.depth -= 1
            return ArrayLiteral(tuple(items))
        if token.is_word("true", "false"):
            return Literal(token.value == "true", BOOL)
        if token.is_word("null"):
            return Literal(None, None)
        if token.is_word("array"):
            if self.peek.kind == "punct" and self.peek.value == "[":
                return self.value()
        if token.is_word("timestamp", "timestamptz") and self.peek.kind == "string":
            return TypedLiteral(TIMESTAMP, self.next().value)
        if token.is_word("current_timestamp") or (self.pg and token.is_word("now") and self.peek.value == "("):
            if self.accept_punct("("):
                self.punct(")")
            return self.pg_interval(Now()) if self.pg else Now()
        if token.is_word("timestamp_add", "timestamp_sub"):
            self.punct("(")
            self.deeper()
            base = self.value()
            self.depth -= 1
            if not isinstance(base, Now):
                raise InvalidArgument(f"{token.text.upper()} is supported on CURRENT_TIMESTAMP() only")
            self.punct(",")
            self.word("interval")
            amount = self.value()
            if not isinstance(amount, Literal) or not isinstance(amount.value, int) or isinstance(amount.value, bool):
                raise InvalidArgument("INTERVAL takes a whole number, like INTERVAL 1 HOUR")
            unit = self.word("microsecond", "millisecond", "second", "minute", "hour", "day")
            self.punct(")")
            try:
                offset = timedelta(**{unit + "s": amount.value})
                total = base.offset + (offset if token.value == "timestamp_add" else -offset)
            except OverflowError:  # past timedelta's range
                total = dialects.MAX_INTERVAL * 2
            if abs(total) > dialects.MAX_INTERVAL:
                raise InvalidArgument(f"INTERVAL {amount.value} {unit.upper()} is out of range: CURRENT_TIMESTAMP() "
                                      f"may be shifted by at most {dialects.MAX_INTERVAL.days} days, Spanner's "
                                      "TIMESTAMP range")
            return Now(total)
        raise InvalidArgument(f"expected a value (literal, @param, CURRENT_TIMESTAMP()) but found "
                              f"{token.text or 'the end of the statement'!r} in: {self.text.strip()[:200]}")

    # -- the table subset --------------------------------------------------

    def unsupported(self, what: str) -> InvalidArgument:
        return InvalidArgument(f"{what} is not supported by spanq's Spanner front-end (in: "
                               f"{self.text.strip()[:120]}); {self.supported()}")

    def name(self, what: str) -> tuple[str, str]:
        """(folded, as written)."""
        token = self.peek
        if token.kind != "ident" or (not token.text.startswith(("`", '"')) and token.value in dialects.RESERVED):
            raise self.error(what)
        self.pos += 1
        return token.value, token.spelled

    # -- statements --------------------------------------------------------

    def table_statement(self) -> TableSubset:
        first = self.peek
        if first.is_word("create"):
            if self.ahead().is_word("table") and self.pg:
                return self.pg_create_table()
            if self.ahead().is_word("table"):
                return self.create_table()
            if self.ahead().is_word("index", "unique", "null_filtered"):
                return self.create_index()
            raise self.unsupported(f"CREATE {self.ahead().text.upper()}")
        if first.is_word("drop"):
            if self.ahead().is_word("table"):
                return self.drop(DropTable)
            if self.ahead().is_word("index"):
                return self.drop(DropIndex)
            raise self.unsupported(f"DROP {self.ahead().text.upper()}")
        if first.is_word("select"):
            statement: TableSubset = self.select()
        elif first.is_word("insert"):
            statement = self.insert()
        elif first.is_word("update"):
            statement = self.update()
        elif first.is_word("delete"):
            statement = self.delete()
        elif first.is_word("alter") and self.ahead().is_word("table"):
            statement = self.alter_table()
        elif first.is_word("alter"):
            raise self.unsupported(f"ALTER {self.ahead().text.upper()}")
        elif first.is_word("with"):
            raise self.unsupported("WITH (common table expressions)")
        else:
            raise InvalidArgument(f"unsupported statement {self.text.strip()[:80]!r}; {self.supported()}")
        self.end()
        return statement

    def create_table(self) -> CreateTable:
        self.word("create")
        self.word("table")
        if_not_exists = self.if_not_exists()
        name, spelled = self.name("a table name")
        self.punct("(")
        columns: list[ColumnDef] = []
        while not self.accept_punct(")"):
            if self.peek.is_word("constraint", "foreign", "check"):
                raise self.unsupported("a table constraint (CONSTRAINT, FOREIGN KEY, CHECK)")
            columns.append(self.column_definition())
            if not self.accept_punct(","):
                self.punct(")")
                break
        if not columns:
            raise InvalidArgument(f"CREATE TABLE {spelled}: a table needs at least one column")
        self.word("primary")
        self.word("key")
        self.punct("(")
        key: list[str] = []
        descending: list[str] = []
        while not self.accept_punct(")"):
            column = self.name("a primary-key column")[0]
            if self.accept_word("desc"):
                descending.append(column)
            else:
                self.accept_word("asc")
            key.append(column)
            if not self.accept_punct(","):
                self.punct(")")
                break
        parent, cascade = None, False
        while self.accept_punct(","):
            if self.peek.is_word("interleave"):
                parent, cascade = self.interleave_in_parent()
            elif self.peek.is_word("row"):
                raise self.unsupported("ROW DELETION POLICY")
            else:
                raise self.error("INTERLEAVE IN PARENT")
        return CreateTable(name, spelled, tuple(columns), tuple(key), parent, cascade, if_not_exists,
                           tuple(descending))

    def alter_table(self) -> ast.AlterTable:
        self.word("alter")
        self.word("table")
        name = self.name("a table name")[0]
        if self.accept_word("add"):
            self.word("column")
            if_not_exists = self.if_not_exists()
            added = self.pg_column_definition() if self.pg else self.column_definition()
            return ast.AlterTable(name, add=added, if_not_exists=if_not_exists)
        if self.accept_word("drop"):
            self.word("column")
            return ast.AlterTable(name, drop=self.name("a column name")[0])
        raise self.unsupported(f"ALTER TABLE ... {self.peek.text.upper() or 'nothing'} (spanq takes ADD COLUMN and "
                               "DROP COLUMN)")

    def pg_create_table(self) -> CreateTable:
        """Spanner's PostgreSQL CREATE TABLE: ``(c type [NOT NULL] [PRIMARY KEY], ..., PRIMARY KEY (c, ...))
        [INTERLEAVE IN PARENT p [ON DELETE CASCADE | NO ACTION]]``."""
        self.word("create")
        self.word("table")
        if_not_exists = self.if_not_exists()
        name, spelled = self.name("a table name")
        self.punct("(")
        columns: list[ColumnDef] = []
        key: list[str] = []
        while not self.accept_punct(")"):
            if self.accept_word("primary"):
                self.word("key")
                self.punct("(")
                key = [self.name("a primary-key column")[0]]
                while self.accept_punct(","):
                    key.append(self.name("a primary-key column")[0])
                self.punct(")")
            elif self.peek.is_word("constraint", "foreign", "check", "unique"):
                raise self.unsupported("a table constraint other than PRIMARY KEY")
            else:
                columns.append(self.pg_column_definition(key))
            if not self.accept_punct(","):
                self.punct(")")
                break
        if not columns:
            raise InvalidArgument(f"CREATE TABLE {spelled}: a table needs at least one column")
        if not key:
            raise InvalidArgument(f"CREATE TABLE {spelled}: a table needs a PRIMARY KEY")
        parent, cascade = self.interleave_in_parent() if self.peek.is_word("interleave") else (None, False)
        return CreateTable(name, spelled, tuple(columns), tuple(key), parent, cascade, if_not_exists)

    def interleave_in_parent(self) -> tuple[str, bool]:
        """A table's ``INTERLEAVE IN PARENT p [ON DELETE CASCADE | ON DELETE NO ACTION]``: (p, cascade)."""
        self.word("interleave")
        self.word("in")
        self.word("parent")
        parent = self.name("a parent table name")[0]
        if not self.accept_word("on"):
            return parent, False
        self.word("delete")
        if self.accept_word("cascade"):
            return parent, True
        self.word("no")
        self.word("action")
        return parent, False

    def pg_column_definition(self, key: list[str] | None = None) -> ColumnDef:
        """``c type [NOT NULL] [PRIMARY KEY]`` (PRIMARY KEY only in CREATE TABLE, appending to ``key``)."""
        column, spelled = self.name("a column name")
        column_type = self.pg_column_type(column)
        not_null = False
        while True:
            if self.accept_word("not"):
                self.word("null")
                not_null = True
            elif key is not None and self.accept_word("primary"):
                self.word("key")
                key.append(column)
            elif self.peek.is_word("default", "generated", "references", "check", "unique", "primary"):
                raise self.unsupported(f"{self.peek.text.upper()} in a column definition (column {spelled!r})")
            else:
                return ColumnDef(column, spelled, column_type, not_null)

    def pg_column_type(self, column: str, in_array: bool = False) -> SpannerType:
        """A column type of Spanner's PostgreSQL dialect, as the Spanner type it is; ``t[]`` an array."""
        token = self.next()
        word = self.pg_type_name(str(token.value)) if token.kind == "ident" else ""
        code = dialects.PG_TABLE_TYPES.get(word)
        if code is None:
            raise InvalidArgument(f"column {column!r} has type {token.text or '(none)'}, which spanq does not support; "
                                  f"the types are {', '.join(sorted(dialects.PG_TABLE_TYPES))} and arrays of them")
        length = None
        if word == "varchar" and self.accept_punct("("):
            size = self.next()
            if size.kind != "number" or size.value <= 0:
                raise InvalidArgument(f"column {column!r}: varchar takes a length, varchar(n)")
            length = int(size.value)
            self.punct(")")
        found = SpannerType(code, None, length)
        if self.at_punct("[") and self.ahead().value == "]":
            if in_array:
                raise self.unsupported(f"an array of arrays (column {column!r})")
            self.next()
            self.next()
            return SpannerType("ARRAY", found)
        return found

    def if_not_exists(self) -> bool:
        if self.accept_word("if"):
            self.word("not")
            self.word("exists")
            return True
        return False

    def column_definition(self) -> ColumnDef:
        name, spelled = self.name("a column name")
        column_type = self.column_type(name)
        not_null = False
        commit_timestamp = False
        hidden = False
        generated: Expr | None = None
        while True:
            if self.accept_word("not"):
                self.word("null")
                not_null = True
            elif not self.pg and self.accept_word("hidden"):  # GoogleSQL's: left out of SELECT *
                hidden = True
            elif generated is None and self.accept_word("as"):
                self.punct("(")
                self.deeper()
                generated = self.expr()
                self.punct(")")
                self.depth -= 1
                if not self.accept_word("stored"):
                    raise self.unsupported(f"a generated column that is not STORED (column {spelled!r}: AS (expr) "
                                           "STORED)")
            elif self.peek.is_word("default", "as", "generated", "hidden"):
                raise self.unsupported(f"{self.peek.text.upper()} in a column definition (column {spelled!r})")
            elif self.accept_word("options"):
                self.punct("(")
                option = self.name("an option name")[0]
                self.punct("=")
                value = self.next()
                self.punct(")")
                if option != "allow_commit_timestamp" or not value.is_word("true", "false", "null"):
                    raise self.unsupported(f"column option {option!r} (spanq takes allow_commit_timestamp)")
                if column_type.code != "TIMESTAMP":
                    raise InvalidArgument(f"column {spelled!r}: allow_commit_timestamp is for TIMESTAMP columns")
                commit_timestamp = value.value == "true"
            else:
                break
        return ColumnDef(name, spelled, column_type, not_null, commit_timestamp, hidden, generated)

    def column_type(self, column: str, in_array: bool = False) -> SpannerType:
        token = self.next()
        code = str(token.value).upper() if token.kind == "ident" else ""
        if code == "ARRAY":
            if in_array:
                raise self.unsupported(f"an ARRAY of ARRAYs (column {column!r})")
            self.punct("<")
            element = self.column_type(column, in_array=True)
            self.punct(">")
            return SpannerType("ARRAY", element)
        if token.kind == "ident" and (self.at_punct(".") or "." in token.spelled):
            self.pos -= 1  # a proto message or enum of the database's bundle, resolved when the DDL runs
            return SpannerType("PROTO", proto=protos.type_name(self))
        if code not in SCALARS:
            raise InvalidArgument(f"column {column!r} has type {token.text or '(none)'}, which spanq does not "
                                  f"support; the types are {', '.join(SCALARS)} and ARRAY<...> of them")
        length = None
        if code in ("STRING", "BYTES"):
            if not self.at_punct("("):
                raise InvalidArgument(f"column {column!r}: {code} takes a length, (n) or (MAX)")
            self.punct("(")
            size = self.next()
            if size.is_word("max"):
                length = None
            elif size.kind == "number" and size.value > 0:
                length = int(size.value)
            else:
                raise InvalidArgument(f"column {column!r}: {code} takes a length, (n) or (MAX)")
            self.punct(")")
        return SpannerType(code, None, length)

    def create_index(self) -> CreateIndex:
        self.word("create")
        unique = self.accept_word("unique")
        null_filtered = self.accept_word("null_filtered")
        self.word("index")
        if_not_exists = self.if_not_exists()
        name, spelled = self.name("an index name")
        self.word("on")
        table = self.name("a table name")[0]
        self.punct("(")
        columns: list[tuple[str, bool]] = []
        while True:
            column = self.name("an index column")[0]
            descending = self.accept_word("desc")
            if not descending:
                self.accept_word("asc")
            columns.append((column, descending))
            if not self.accept_punct(","):
                break
        self.punct(")")
        storing: list[str] = []
        if self.accept_word("include" if self.pg else "storing"):
            self.punct("(")
            storing.append(self.name("a column name")[0])
            while self.accept_punct(","):
                storing.append(self.name("a column name")[0])
            self.punct(")")
        interleave = None
        if self.accept_punct(","):
            self.word("interleave")
            self.word("in")
            interleave = self.name("a table name")[0]
        self.end()
        return CreateIndex(name, spelled, table, tuple(columns), unique, null_filtered, tuple(storing), interleave,
                           if_not_exists)

    def drop(self, kind: type[DropTable] | type[DropIndex]) -> DropTable | DropIndex:
        self.word("drop")
        self.word("table" if kind is DropTable else "index")
        if_exists = False
        if self.accept_word("if"):
            self.word("exists")
            if_exists = True
        name = self.name("a name")[0]
        self.end()
        return kind(name, if_exists)

    def relation(self) -> Relation:
        if self.at_punct("("):
            raise self.unsupported("a subquery in FROM")
        name = self.name("a table name")[0]
        if self.at_punct("("):
            raise self.unsupported(f"the table function {name.upper()}(...) here (RECEIVE_ and RENEWLEASE_ take "
                                   "no joins)")
        if self.at_punct("."):
            raise self.unsupported("a qualified table name")
        return Relation(name, self.alias())

    def select(self, compound: bool = True) -> Select:
        """A SELECT; ``compound``: with its UNION ALL parts, ORDER BY and LIMIT (a part of one has none)."""
        self.word("select")
        distinct = self.accept_word("distinct")
        if self.peek.is_word("as"):
            raise self.unsupported("SELECT AS STRUCT / VALUE")
        items = self.select_items()
        source, joins = None, []
        if self.accept_word("from"):
            source = self.relation()
            while True:
                if self.accept_punct(","):
                    joins.append(Join("CROSS", self.relation()))
                    continue
                kind = None
                if self.accept_word("join"):
                    kind = "INNER"
                elif self.accept_word("inner"):
                    self.word("join")
                    kind = "INNER"
                elif self.accept_word("left"):
                    self.accept_word("outer")
                    self.word("join")
                    kind = "LEFT"
                elif self.accept_word("cross"):
                    self.word("join")
                    joins.append(Join("CROSS", self.relation()))
                    continue
                elif self.peek.is_word("right", "full"):
                    raise self.unsupported(f"{self.peek.text.upper()} JOIN")
                if kind is None:
                    break
                relation = self.relation()
                if self.peek.is_word("using"):
                    raise self.unsupported("JOIN ... USING")
                self.word("on")
                joins.append(Join(kind, relation, self.expr()))
        where = self.expr() if self.accept_word("where") else None
        group_by: list[Expr] = []
        if self.accept_word("group"):
            self.word("by")
            group_by.append(self.expr())
            while self.accept_punct(","):
                group_by.append(self.expr())
        having = self.expr() if self.accept_word("having") else None
        core = Select(tuple(items), source, tuple(joins), where, distinct=distinct, group_by=tuple(group_by),
                      having=having)
        if not compound:
            return core
        union: list[Select] = []
        while self.accept_word("union"):
            if not self.accept_word("all"):
                raise self.unsupported("UNION without ALL (UNION DISTINCT)")
            if self.at_punct("("):
                raise self.unsupported("a parenthesized SELECT in UNION ALL")
            union.append(self.select(compound=False))
        if self.peek.is_word("intersect", "except", "having", "group"):
            raise self.unsupported(self.peek.text.upper())
        order: list[tuple[Expr, bool]] = []
        if self.accept_word("order"):
            self.word("by")
            while True:
                expr = self.expr()
                descending = self.accept_word("desc")
                if not descending:
                    self.accept_word("asc")
                order.append((expr, descending))
                if not self.accept_punct(","):
                    break
        limit = offset = None
        if self.accept_word("limit"):
            limit = self.operand()
            if self.accept_word("offset"):
                offset = self.operand()
        return dataclasses.replace(core, order_by=tuple(order), limit=limit, offset=offset, union=tuple(union))

    def select_items(self) -> list[SelectItem]:
        items = []
        while True:
            if self.accept_punct("*"):
                items.append(SelectItem(Star()))
            elif self.peek.kind == "ident" and self.ahead().value == "." and self.ahead(2).value == "*":
                qualifier = self.name("a table name")[0]
                self.punct(".")
                self.punct("*")
                items.append(SelectItem(Star(qualifier)))
            else:
                expr = self.expr()
                alias = None
                if self.accept_word("as"):
                    alias = self.name("a column alias")[1]
                elif self.peek.kind == "ident" and self.peek.value not in dialects.RESERVED:
                    alias = self.name("a column alias")[1]
                items.append(SelectItem(expr, alias))
            if not self.accept_punct(","):
                return items

    def returning(self) -> tuple[SelectItem, ...] | None:
        if self.pg:
            return tuple(self.select_items()) if self.accept_word("returning") else None
        if not self.accept_word("then"):
            return None
        self.word("return")
        if self.peek.is_word("with"):
            raise self.unsupported("THEN RETURN WITH ACTION")
        return tuple(self.select_items())

    def insert(self) -> Insert:
        self.word("insert")
        conflict = None
        if self.accept_word("or"):
            conflict = self.word("update", "ignore")
        self.accept_word("into")
        table = self.name("a table name")[0]
        self.punct("(")
        columns = [self.name("a column name")[0]]
        while self.accept_punct(","):
            columns.append(self.name("a column name")[0])
        self.punct(")")
        if self.peek.is_word("select"):
            raise self.unsupported("INSERT ... SELECT")
        self.word("values")
        rows = [self.row(len(columns), self.expr)]
        while self.accept_punct(","):
            rows.append(self.row(len(columns), self.expr))
        if len(set(columns)) != len(columns):
            raise InvalidArgument(f"INSERT INTO {table}: a column is named twice")
        return Insert(table, tuple(columns), tuple(rows), self.returning(), conflict)

    def row(self, width: int, item: Callable[[], _Item]) -> tuple[_Item, ...]:
        """``(item, ...)`` of ``width`` items: a VALUES row of either surface (a queue's values, a
        table's expressions)."""
        self.punct("(")
        items = [item()]
        while self.accept_punct(","):
            items.append(item())
        self.punct(")")
        if len(items) != width:
            raise InvalidArgument(f"a VALUES row has {len(items)} value(s) for {width} column(s)")
        return tuple(items)

    def alias(self) -> str | None:
        """A relation's ``[AS] alias``, if it has one (folded)."""
        if self.accept_word("as"):
            return self.name("an alias")[0]
        if self.peek.kind == "ident" and self.peek.value not in dialects.RESERVED:
            return self.name("an alias")[0]
        return None

    def target(self) -> Relation:
        name = self.name("a table name")[0]
        return Relation(name, self.alias())

    def update(self) -> Update:
        self.word("update")
        table = self.target()
        self.word("set")
        assignments = []
        while True:
            column = self.name("a column name")[0]
            if self.accept_punct("."):
                if column != table.shown:
                    raise InvalidArgument(f"{column!r} is not the table being updated")
                column = self.name("a column name")[0]
            self.punct("=")
            assignments.append((column, self.expr()))
            if not self.accept_punct(","):
                break
        if not self.peek.is_word("where"):
            raise InvalidArgument("UPDATE needs a WHERE clause, as in Spanner (WHERE true updates every row)")
        self.word("where")
        return Update(table, tuple(assignments), self.expr(), self.returning())

    def delete(self) -> Delete:
        self.word("delete")
        self.accept_word("from")
        table = self.target()
        if not self.peek.is_word("where"):
            raise InvalidArgument("DELETE needs a WHERE clause, as in Spanner (WHERE true deletes every row)")
        self.word("where")
        return Delete(table, self.expr(), self.returning())

    # -- expressions -------------------------------------------------------

    def expr(self) -> Expr:
        items = [self.conjunction()]
        while self.accept_word("or"):
            items.append(self.conjunction())
        return items[0] if len(items) == 1 else Logical("OR", tuple(items))

    def conjunction(self) -> Expr:
        items = [self.negation()]
        while self.accept_word("and"):
            items.append(self.negation())
        return items[0] if len(items) == 1 else Logical("AND", tuple(items))

    def negation(self) -> Expr:
        if self.accept_word("not"):
            self.deeper()
            item = Not(self.negation())
            self.depth -= 1
            return item
        return self.predicate()

    def predicate(self) -> Expr:
        left = self.additive()
        if self.peek.kind == "punct" and self.peek.value in ("=", "!=", "<>", "<", "<=", ">", ">="):
            op = self.next().value
            return Compare("!=" if op == "<>" else op, left, self.additive())
        negated = False
        if self.peek.is_word("not") and self.ahead().is_word("in", "like", "between"):
            self.next()
            negated = True
        if self.accept_word("in"):
            if self.accept_word("unnest"):
                self.punct("(")
                token = self.next()
                if token.kind != "param":
                    raise self.unsupported("IN UNNEST of anything but a @param")
                self.punct(")")
                return In(left, (), Param(token.value), negated)
            self.punct("(")
            if self.peek.is_word("select"):
                inner = self.subquery()
                return InSelect(left, inner, negated)
            items = [self.additive()]
            while self.accept_punct(","):
                items.append(self.additive())
            self.punct(")")
            return In(left, tuple(items), None, negated)
        if self.accept_word("like"):
            return Like(left, self.additive(), negated)
        if self.accept_word("between"):
            low = self.additive()
            self.word("and")
            return Between(left, low, self.additive(), negated)
        if negated:
            raise self.error("IN, LIKE or BETWEEN after NOT")
        if self.accept_word("is"):
            is_not = self.accept_word("not")
            if self.accept_word("null"):
                return IsNull(left, is_not)
            if self.peek.is_word("true", "false"):
                value = self.next().value == "true"
                test: Expr = Compare("=", left, Literal(value, BOOL))
                return Not(test) if is_not else test
            raise self.error("NULL, TRUE or FALSE after IS")
        return left

    def subquery(self) -> Select:
        """``SELECT ...)``, the ``(`` read: a subquery of IN or EXISTS."""
        self.deeper()
        inner = self.select()
        self.punct(")")
        self.depth -= 1
        return inner

    def additive(self) -> Expr:
        left, links = self.multiplicative(), 0
        while self.peek.kind == "punct" and self.peek.value in ("+", "-"):
            op = self.next().value
            self.deeper()  # each operator nests the chain so far one level deeper
            links += 1
            left = Arithmetic(op, left, self.multiplicative())
        self.depth -= links
        return left

    def multiplicative(self) -> Expr:
        """``*`` and ``||``, which GoogleSQL ranks alike (above + and -)."""
        left, links = self.operand(), 0
        while self.at_punct("*") or self.at_punct("||"):
            op = self.next().value
            self.deeper()
            links += 1
            left = Arithmetic(op, left, self.operand())
        self.depth -= links
        return left

    def operand(self) -> Expr:
        token = self.next()
        if token.kind == "string":
            return Literal(token.value, STRING)
        if token.kind == "bytes":
            return Literal(token.value, BYTES)
        if token.kind == "number":
            return Literal(token.value, INT64)
        if token.kind == "float":
            return Literal(token.value, FLOAT64)
        if token.kind == "param":
            return Param(token.value)
        if token.kind == "punct" and token.value == "-" and self.peek.kind in ("number", "float"):
            return Literal(-self.next().value, INT64 if self.tokens[self.pos - 1].kind == "number" else FLOAT64)
        if token.kind == "punct" and token.value == "(":
            if self.peek.is_word("select"):
                raise self.unsupported("a subquery")
            self.deeper()
            inner = self.expr()
            self.punct(")")
            self.depth -= 1
            return inner
        if token.kind == "punct" and token.value == "[":
            return self.array_items("]")
        if token.kind != "ident":
            self.pos -= 1
            raise self.error("a value, a column or a parameter")
        word = token.value if not token.text.startswith("`") else None
        if word in ("true", "false"):
            return Literal(word == "true", BOOL)
        if word == "null":
            return Literal(None, None)
        if word == "array" and self.at_punct("["):
            self.next()
            return self.array_items("]")
        if self.pg and word in ("current_timestamp", "now"):  # PostgreSQL: CURRENT_TIMESTAMP, now()
            if word == "now" or self.at_punct("("):
                self.punct("(")
                self.punct(")")
            return Now()
        if self.pg and word in ("timestamptz", "jsonb") and self.peek.kind == "string":
            word = {"timestamptz": "timestamp", "jsonb": "json"}[word]
        if word in ("date", "timestamp", "numeric", "json") and self.peek.kind == "string":
            text = self.next().value
            typed = TypedLiteral(SpannerType(word.upper()), text)
            if word == "numeric":
                try:
                    Decimal(text)
                except InvalidOperation:
                    raise InvalidArgument(f"NUMERIC {text[:40]!r} is not a number") from None
            return typed
        if word in ("current_timestamp", "pending_commit_timestamp") and self.at_punct("("):
            self.next()
            self.punct(")")
            return Now()
        if word == "exists" and self.at_punct("("):
            self.next()
            return Exists(self.subquery())
        if word == "count" and self.at_punct("("):
            self.next()
            if self.accept_punct("*"):
                self.punct(")")
                return CountStar()
            distinct = self.accept_word("distinct")
            self.deeper()
            inner = self.expr()
            self.punct(")")
            self.depth -= 1
            return Aggregate("count", inner, True) if distinct else Count(inner)
        if word in ("sum", "avg", "min", "max") and self.at_punct("("):
            self.next()
            if self.peek.is_word("distinct"):
                raise self.unsupported(f"{word.upper()}(DISTINCT ...)")
            self.deeper()
            inner = self.expr()
            self.punct(")")
            self.depth -= 1
            return Aggregate(word, inner)
        if word == "spanner" and self.at_punct(".") and self.ahead().is_word("commit_timestamp"):
            self.next()
            self.next()
            self.punct("(")
            self.punct(")")
            return Now()
        if word in ast.FUNCTIONS and self.at_punct("("):
            self.next()
            self.deeper()
            args: list[Expr] = []
            while not self.accept_punct(")"):
                args.append(self.expr())
                if not self.accept_punct(","):
                    self.punct(")")
                    break
            self.depth -= 1
            return ast.Function(word, tuple(args))
        if word == "cast" and self.at_punct("("):
            self.next()
            self.deeper()
            inner = self.expr()
            self.word("as")
            target = self.next()
            code = str(target.value).upper() if target.kind == "ident" else ""
            if code not in SCALARS:
                raise InvalidArgument(f"CAST(... AS {target.text or '(nothing)'}): the types are {', '.join(SCALARS)}")
            self.punct(")")
            self.depth -= 1
            return ast.Cast(inner, SpannerType(code))
        if self.at_punct("("):
            raise self.unsupported(f"the function {token.text.upper()}()")
        if word in dialects.RESERVED:
            self.pos -= 1
            raise self.error("a value, a column or a parameter")
        if self.accept_punct("."):
            column, spelled = self.name("a column name after '.'")
            return Column(column, token.value, spelled)
        return Column(token.value, None, token.spelled)

    def array_items(self, close: str) -> ArrayLiteral:
        self.deeper()
        items: list[Expr] = []
        while not self.accept_punct(close):
            items.append(self.additive())
            if not self.accept_punct(","):
                self.punct(close)
                break
        self.depth -= 1
        return ArrayLiteral(tuple(items))


# -- values' texts ---------------------------------------------------------------------


_PG_INTERVAL = re.compile(r"\s*(\d+)\s*(microsecond|millisecond|second|minute|hour|day)s?\s*", re.I)


def pg_interval(text: str) -> timedelta:
    """A PostgreSQL interval literal's text, '1 hour', '10 seconds', '1 hour 30 minutes'."""
    total, pos = timedelta(0), 0
    for match in _PG_INTERVAL.finditer(text):
        if match.start() != pos:
            break
        total += timedelta(**{match.group(2).lower() + "s": int(match.group(1))})
        pos = match.end()
    if pos != len(text) or not text.strip():
        raise InvalidArgument(f"INTERVAL {text[:40]!r}: give whole units, like INTERVAL '1 hour' or '30 seconds'")
    return total


def parse_database_name(create_statement: str) -> str:
    """The database name of ``CREATE DATABASE name`` (backquotes allowed)."""
    match = re.fullmatch(r"\s*create\s+database\s+(`[^`]+`|\"[^\"]+\"|[A-Za-z][A-Za-z0-9_-]*)\s*;?\s*",
                         create_statement, re.I)
    if match is None:
        raise InvalidArgument(f"create_statement must be CREATE DATABASE <name>, got {create_statement[:80]!r}")
    return match.group(1).strip("`\"")


DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|ns|s|m|h|d)", re.I)


def duration(text: str, what: str) -> timedelta:
    """'20m', '30s', '1h30m', '500ms' as a timedelta."""
    stripped = text.strip()
    total, pos = timedelta(0), 0
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        for match in DURATION.finditer(stripped):
            if match.start() != pos:
                break
            total += timedelta(seconds=float(match.group(1)) * units[match.group(2).lower()])
            pos = match.end()
    except OverflowError:  # past timedelta's 999,999,999 days: no duration spanq takes is near that
        raise InvalidArgument(f"{what} {text[:40]!r} is out of range; give a duration like '20m'") from None
    if pos != len(stripped) or not stripped:
        raise InvalidArgument(f"{what} must be a duration like '20m', '30s' or '1h', got {text[:40]!r}")
    return total
