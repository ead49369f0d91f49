"""A small, strict parser for exactly the GoogleSQL statement shapes that
Spanner's queue code sends; anything else is INVALID_ARGUMENT that lists what
is understood. Not a SQL engine: statements become ``ast``'s nodes,
which the executor maps onto the domain.

Understood (keywords in any case; names, backquoted or not, are folded to
lower case by ``fold``, since spanq's queue and column names are lowercase
identifiers; CREATE QUEUE also keeps them as written, which results show):

    CREATE QUEUE [IF NOT EXISTS] q (k1 INT64 NOT NULL, ..., Payload BYTES(MAX) NOT NULL)
        PRIMARY KEY (k1, ...) [, INTERLEAVE IN PARENT p ON DELETE CASCADE] [, OPTIONS (...)]
    DROP QUEUE [IF EXISTS] q
    SELECT * | <items> FROM RECEIVE_q([max_duration => '20m'] [, max_batch_size => 20] [, priority => ...])
        [[AS] r] [WHERE c <op> <v> AND ...]
    SELECT * | <items> FROM RENEWLEASE_q(lease_tokens => ['t1', ...] | @tokens) [[AS] r]
    DELETE [FROM] q WHERE k1 = <v> AND ... [ASSERT_ROWS_MODIFIED 1]
    INSERT [INTO] q (k1, ..., Payload [, DeliverTime]) VALUES (<v>, ...) [, (...)]
    SELECT * | <items> FROM q [[AS] r] [WHERE c = <v> AND DeliverTime <= <t> ...] [ORDER BY c [ASC|DESC]] [LIMIT n]

<items> is ``[r.]c [[AS] alias], ...``.

A value <v> is a literal (123, 'text', "text", b'bytes', TRUE, FALSE,
TIMESTAMP '...'), a parameter (@name), CURRENT_TIMESTAMP(), or
TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL n SECOND|MINUTE|HOUR|DAY|MILLISECOND).
"""

import functools
import re
from datetime import timedelta
from typing import Any

from ...errors import InvalidArgument
from ...model import ColumnType
from . import lexing
from .ast import (BOOL, BYTES, INT64, STRING, TIMESTAMP, ArrayLiteral, Condition, CreateQueue, DropQueue, Item, Literal,
                  Now, Param, QueueDdl, QueueDelete, QueueInsert, QueueQuery, QueueSelect, QueueStatement, Receive, RenewLease,
                  SpannerType, TypedLiteral, Value)
from .lexing import Cursor, Token, fold

SUPPORTED = (
    "CREATE QUEUE, DROP QUEUE, SELECT * | <columns> FROM RECEIVE_<queue>(...) [AS r] [WHERE ...], "
    "SELECT * | <columns> FROM RENEWLEASE_<queue>(...) [AS r], "
    "DELETE FROM <queue> WHERE <key> = ... [ASSERT_ROWS_MODIFIED 1], INSERT INTO <queue> (...) VALUES (...), "
    "SELECT ... FROM <queue> [WHERE ...] [ORDER BY ...] [LIMIT n]"
)

RECEIVE_ARGS = ("max_duration", "max_batch_size", "priority")
PG_RECEIVE_ARGS = ("max_batch_size", "priority", "max_duration")
"""spanner.receive_<queue>'s arguments in order (Spanner's PostgreSQL dialect)."""
PRIORITIES = ("low", "medium", "high")
"""Spanner's RECEIVE priority values (accepted; see docs/spanner-compat.md)."""

_LITERALS: dict[str, SpannerType] = {"string": STRING, "bytes": BYTES, "number": INT64}
"""The type of a literal token's value."""

MAX_INTERVAL = timedelta(days=3_652_059)
"""The widest INTERVAL: Spanner's whole TIMESTAMP range, 0001-01-01 to 9999-12-31."""


def tokenize(text: str, pg: bool = False) -> list[Token]:
    """The queue surface's tokens (lexing.tokenize), in GoogleSQL or (``pg``) PostgreSQL."""
    return lexing.tokenize(text, lexing.POSTGRESQL_QUEUE if pg else lexing.GOOGLESQL_QUEUE, _supported, _long_number,
                           pg=pg)


def _long_number(raw: str) -> InvalidArgument:
    return InvalidArgument(f"the number {raw[:24]}... has {len(raw)} digits: an INT64 literal has at "
                           f"most {lexing.MAX_NUMBER_DIGITS} (-9223372036854775808 to 9223372036854775807)")


def _supported() -> str:
    return f"spanq's Spanner front-end understands only: {SUPPORTED}"


# -- the parser ------------------------------------------------------------------


class _Parser(Cursor):
    def __init__(self, text: str, pg: bool = False, tokens: list[Token] | None = None) -> None:
        super().__init__(text, tokenize(text, pg) if tokens is None else tokens, _supported)
        self.pg = pg

    def name(self, what: str) -> str:
        return self.spelled_name(what)[0]

    def spelled_name(self, what: str) -> tuple[str, str]:
        """(folded, as written)."""
        if self.peek.kind != "ident":
            raise self.error(what)
        token = self.next()
        return token.value, token.spelled

    # statements
    def statement(self) -> QueueStatement:
        first = self.peek
        if first.is_word("create"):
            return self.create_queue()
        if first.is_word("drop"):
            return self.drop_queue()
        if first.is_word("select"):
            return self.select()
        if first.is_word("delete"):
            return self.delete()
        if first.is_word("insert"):
            return self.insert()
        raise InvalidArgument(f"unsupported statement {self.text.strip()[:80]!r}; {_supported()}")

    def create_queue(self) -> CreateQueue:
        self.word("create")
        if not self.peek.is_word("queue"):
            raise InvalidArgument(
                f"only CREATE QUEUE, CREATE TABLE and CREATE [UNIQUE] INDEX are supported among CREATE statements, "
                f"got {self.text.strip()[:80]!r} (tables and indexes in GoogleSQL databases only)"
            )
        self.word("queue")
        if_not_exists = False
        if self.accept_word("if"):
            self.word("not")
            self.word("exists")
            if_not_exists = True
        name, spelled_name = self.spelled_name("a queue name")
        spelled = [(name, spelled_name)]
        self.punct("(")
        columns: list[tuple[str, ColumnType]] = []
        key: list[str] = []
        while not self.accept_punct(")"):
            if self.pg and self.peek.is_word("primary"):  # PostgreSQL: the key is a table constraint
                key = self.primary_key()
            else:
                spelled.append((self.peek.value, self.peek.spelled))
                columns.append(self.column_definition())
                if self.pg and self.accept_word("primary"):
                    self.word("key")
                    key.append(columns[-1][0])
            if not self.accept_punct(","):
                self.punct(")")
                break
        if not self.pg:
            key = self.primary_key()
        elif not key:
            raise InvalidArgument(f"CREATE QUEUE {name}: a queue needs a PRIMARY KEY (...)")
        parent = None
        while self.accept_punct(",") or self.peek.is_word("interleave", "options", "with", "row"):
            if self.accept_word("interleave"):
                self.word("in")
                self.word("parent")
                parent = self.name("a parent table name")
                if self.accept_word("on"):
                    self.word("delete")
                    if not self.accept_word("cascade"):
                        raise InvalidArgument("a queue interleaved in a parent is deleted with it: use ON DELETE "
                                              "CASCADE (spanq implements INTERLEAVE IN PARENT as a foreign key "
                                              "with ON DELETE CASCADE)")
            elif self.accept_word("options", "with"):
                self.options()
            elif self.accept_word("row"):
                raise InvalidArgument("row deletion policies (TTL) are not supported on spanq queues")
            else:
                raise self.error("INTERLEAVE IN PARENT or OPTIONS")
        self.end()
        return CreateQueue(name, tuple(columns), tuple(key), parent, if_not_exists, tuple(spelled))

    def primary_key(self) -> list[str]:
        self.word("primary")
        self.word("key")
        self.punct("(")
        key = [self.key_part()]
        while self.accept_punct(","):
            key.append(self.key_part())
        self.punct(")")
        return key

    def column_definition(self) -> tuple[str, ColumnType]:
        name = self.name("a column name")
        if self.pg:
            return name, self.pg_type(name)
        type_name = self.name(f"the type of column {name!r}")
        length = None
        if self.accept_punct("("):
            length = self.next()
            if length.kind != "number" and not length.is_word("max"):
                raise self.error("a length or MAX")
            self.punct(")")
        types = {"int64": ColumnType.INT64, "string": ColumnType.STRING, "bytes": ColumnType.BYTES,
                 "timestamp": ColumnType.TIMESTAMP, "bool": ColumnType.BOOL, "json": ColumnType.JSON}
        if type_name not in types:
            raise InvalidArgument(
                f"column {name!r} has type {type_name.upper()}, which spanq queues do not support; key columns "
                "may be INT64, STRING, BYTES, TIMESTAMP or BOOL, and Payload BYTES, STRING or JSON"
            )
        column_type = types[type_name]
        if (length is not None) != (column_type in (ColumnType.STRING, ColumnType.BYTES)):
            raise InvalidArgument(f"column {name!r}: {type_name.upper()} "
                                  + ("takes no length" if length is not None else "needs a length: (n) or (MAX)"))
        if self.accept_word("not"):
            self.word("null")
        if self.accept_word("options"):
            self.options()
        return name, column_type

    def pg_type(self, name: str) -> ColumnType:
        """A column type of Spanner's PostgreSQL dialect, and its NOT NULL."""
        type_name = self.name(f"the type of column {name!r}")
        if type_name == "character":
            self.word("varying")
            type_name = "varchar"
        if type_name == "timestamp":
            self.word("with")
            self.word("time")
            self.word("zone")
            type_name = "timestamptz"
        types = {"bigint": ColumnType.INT64, "int8": ColumnType.INT64, "varchar": ColumnType.STRING,
                 "text": ColumnType.STRING, "bytea": ColumnType.BYTES, "timestamptz": ColumnType.TIMESTAMP,
                 "boolean": ColumnType.BOOL, "bool": ColumnType.BOOL, "jsonb": ColumnType.JSON}
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
                total = MAX_INTERVAL * 2
            if abs(total) > MAX_INTERVAL:
                raise InvalidArgument(f"INTERVAL {text.value[:40]!r} is out of range: CURRENT_TIMESTAMP may be "
                                      f"shifted by at most {MAX_INTERVAL.days} days, Spanner's TIMESTAMP range")
            base = Now(total)
        return base

    def key_part(self) -> str:
        name = self.name("a primary-key column")
        if self.accept_word("desc"):
            raise InvalidArgument(f"primary-key column {name!r}: DESC keys are not supported on spanq queues")
        self.accept_word("asc")
        return name

    def options(self) -> dict[str, Value]:
        self.punct("(")
        found = {}
        while True:
            key = self.name("an option name")
            self.punct("=")
            found[key] = self.value()
            if not self.accept_punct(","):
                break
        self.punct(")")
        mode = found.pop("receive_mode", None)
        if mode is not None and not (isinstance(mode, Literal) and str(mode.value).upper() == "PULL"):
            raise InvalidArgument("receive_mode must be 'PULL', the only mode spanq has")
        if found:
            raise InvalidArgument(f"unsupported option(s) {sorted(found)}; spanq queues take receive_mode = 'PULL'")
        return found

    def drop_queue(self) -> DropQueue:
        self.word("drop")
        if not self.peek.is_word("queue"):
            raise InvalidArgument(f"only DROP QUEUE, DROP TABLE and DROP INDEX are supported among DROP statements, "
                                  f"got {self.text.strip()[:80]!r} (tables and indexes in GoogleSQL databases only)")
        self.word("queue")
        if_exists = False
        if self.accept_word("if"):
            self.word("exists")
            if_exists = True
        name = self.name("a queue name")
        self.end()
        return DropQueue(name, if_exists)

    def select(self) -> QueueQuery:
        self.word("select")
        items: list[tuple[str | None, Item]] | None = None
        if not self.accept_punct("*"):
            items = [self.select_item()]
            while self.accept_punct(","):
                items.append(self.select_item())
        self.word("from")
        source = self.name("a queue or RECEIVE_<queue>(...) / RENEWLEASE_<queue>(...)")
        if self.pg and source == "spanner" and self.accept_punct("."):
            source = self.name("spanner.receive_<queue> or spanner.renewlease_<queue>")
            if not self.peek.value == "(":
                raise self.error("'(' after the function's name")
        elif self.pg and self.peek.value == "(":
            raise InvalidArgument(f"the queue functions are in schema spanner: spanner.{source}(...)")
        function = self.accept_punct("(")
        if function:
            call = self.table_function(source)
        names = {source}
        if self.accept_word("as"):
            names.add(self.name("an alias after AS"))
        elif self.peek.kind == "ident" and not self.peek.is_word("where", "order", "limit"):
            names.add(self.name("an alias"))
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
        qualifier, column = None, self.name("* or a column name")
        if self.accept_punct("."):
            qualifier, column = column, self.name("a column name after '.'")
        alias = None
        if self.accept_word("as"):
            alias = self.spelled_name("a column alias after AS")[1]
        elif self.peek.kind == "ident" and not self.peek.is_word("from"):
            alias = self.spelled_name("a column alias")[1]
        return qualifier, Item(column, alias)

    def unqualified(self, qualifier: str | None, item: Item, names: set[str]) -> Item:
        if qualifier is not None and qualifier not in names:
            raise InvalidArgument(f"{qualifier}.{item.column}: {qualifier!r} is not the FROM's name or alias "
                                  f"({', '.join(sorted(names))})")
        return item

    def qualified_column(self, what: str, names: set[str]) -> str:
        column = self.name(what)
        if self.accept_punct("."):
            if column not in names:
                raise InvalidArgument(f"{column!r} is not the FROM's name or alias ({', '.join(sorted(names))})")
            column = self.name("a column name after '.'")
        return column

    def table_function(self, function: str) -> Receive | RenewLease:
        if function.startswith("receive_"):
            queue = function.removeprefix("receive_")
            args: dict[str, Value] = {}
            position, named = 0, False
            while not self.accept_punct(")"):
                if self.pg and not (self.peek.kind == "ident" and self.tokens[self.pos + 1].value == "=>"):
                    # PostgreSQL: by position too, spanner.receive_q(max_batch_size, priority, max_duration)
                    if position >= len(PG_RECEIVE_ARGS) or named:
                        raise InvalidArgument("spanner.receive_<queue> takes (max_batch_size, priority, "
                                              "max_duration), by position before any named argument")
                    args[PG_RECEIVE_ARGS[position]] = self.value()
                    position += 1
                    if not self.accept_punct(","):
                        self.punct(")")
                        break
                    continue
                if not (self.peek.kind == "ident" and self.tokens[self.pos + 1].value == "=>"):
                    raise InvalidArgument(
                        "name RECEIVE's arguments: RECEIVE_q(max_duration => '20m', max_batch_size => 20)"
                    )
                arg = self.name("an argument name")
                named = True
                self.punct("=>")
                if arg not in RECEIVE_ARGS:
                    raise InvalidArgument(f"RECEIVE takes {', '.join(RECEIVE_ARGS)}; not {arg!r}")
                if arg in args or arg in PG_RECEIVE_ARGS[:position]:
                    raise InvalidArgument(f"RECEIVE argument {arg!r} is given twice")
                args[arg] = self.value()
                if not self.accept_punct(","):
                    self.punct(")")
                    break
            return Receive(queue, args)
        if function.startswith("renewlease_"):
            queue = function.removeprefix("renewlease_")
            if self.peek.kind == "ident" and self.tokens[self.pos + 1].value == "=>":
                arg = self.name("lease_tokens")
                if arg != "lease_tokens":
                    raise InvalidArgument(f"RENEWLEASE takes lease_tokens, not {arg!r}")
                self.punct("=>")
            tokens = self.value()
            self.punct(")")
            return RenewLease(queue, tokens)
        raise InvalidArgument(f"unknown table function {function.upper()}; spanq has RECEIVE_<queue> and "
                              "RENEWLEASE_<queue>")

    def delete(self) -> QueueDelete:
        self.word("delete")
        self.accept_word("from")
        queue = self.name("a queue name")
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

    def insert(self) -> QueueInsert:
        self.word("insert")
        if self.peek.is_word("or"):
            raise InvalidArgument("INSERT OR IGNORE / OR UPDATE are not supported on queues; use INSERT")
        self.accept_word("into")
        queue = self.name("a queue name")
        self.punct("(")
        columns = [self.name("a column name")]
        while self.accept_punct(","):
            columns.append(self.name("a column name"))
        self.punct(")")
        self.word("values")
        rows = [self.row(len(columns))]
        while self.accept_punct(","):
            rows.append(self.row(len(columns)))
        if self.peek.is_word("then"):
            raise InvalidArgument("THEN RETURN is not supported")
        self.end()
        return QueueInsert(queue, tuple(columns), tuple(rows))

    def row(self, width: int) -> tuple[Value, ...]:
        self.punct("(")
        values = [self.value()]
        while self.accept_punct(","):
            values.append(self.value())
        self.punct(")")
        if len(values) != width:
            raise InvalidArgument(f"a VALUES row has {len(values)} value(s) for {width} column(s)")
        return tuple(values)

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
                total = MAX_INTERVAL * 2
            if abs(total) > MAX_INTERVAL:
                raise InvalidArgument(f"INTERVAL {amount.value} {unit.upper()} is out of range: CURRENT_TIMESTAMP() "
                                      f"may be shifted by at most {MAX_INTERVAL.days} days, Spanner's TIMESTAMP range")
            return Now(total)
        raise InvalidArgument(f"expected a value (literal, @param, CURRENT_TIMESTAMP()) but found "
                              f"{token.text or 'the end of the statement'!r} in: {self.text.strip()[:200]}")


PARSE_CACHE_SIZE = 1024
PARSE_CACHE_MAX_TEXT = 4096
"""The parses kept, and the longest text one is kept for. Queue code sends the same few
texts (its values go in parameters). The statements are frozen, so one parse serves
every later call of the same text."""


def parse(text: str, pg: bool = False) -> QueueStatement:
    """One statement (of Spanner's PostgreSQL dialect with ``pg``), or INVALID_ARGUMENT saying
    what is understood."""
    if len(text) > PARSE_CACHE_MAX_TEXT:
        return _parse(text, pg)
    found = _parse_cached(text, pg)
    if isinstance(found, tuple):  # a fresh error each time: its callers add to its message
        raise InvalidArgument(found[0], **found[1])
    return found


@functools.lru_cache(maxsize=PARSE_CACHE_SIZE)
def _parse_cached(text: str, pg: bool) -> QueueStatement | tuple[str, dict[str, str]]:
    try:
        return _parse(text, pg)
    except InvalidArgument as exc:
        return exc.message, dict(exc.metadata)


def _parse(text: str, pg: bool, tokens: list[Token] | None = None) -> QueueStatement:
    if not text or not text.strip():
        raise InvalidArgument("the statement is empty")
    return _Parser(text, pg, tokens).statement()


def parse_tokens(text: str, tokens: list[Token], pg: bool = False) -> QueueStatement:
    """``parse`` of a text already read into ``tokens`` (by ``tokenize``), not cached: a long
    statement, read once."""
    return _parse(text, pg, tokens)


def parse_ddl(text: str, pg: bool = False) -> QueueDdl:
    statement = parse(text, pg)
    if not isinstance(statement, (CreateQueue, DropQueue)):
        raise InvalidArgument(f"only CREATE QUEUE and DROP QUEUE (and, in GoogleSQL, CREATE/DROP TABLE and INDEX) are "
                              f"DDL here, got {text.strip()[:80]!r}")
    return statement


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
