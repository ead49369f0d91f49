"""A strict parser for the GoogleSQL subset spanq serves on Spanner tables.

``statements`` reads the queue statements (CREATE QUEUE, RECEIVE_, ...); this
module reads the rest: table DDL, DML on tables and SELECT over tables and
queues. It builds ``ast``'s nodes and nothing else (no SQL: the
translation to PostgreSQL is ``postgres``'s). Anything outside the
subset is INVALID_ARGUMENT naming what is not supported.

    CREATE TABLE [IF NOT EXISTS] t (c TYPE [NOT NULL] [OPTIONS (...)], ...) PRIMARY KEY (c, ...)
        [, INTERLEAVE IN PARENT p [ON DELETE CASCADE | ON DELETE NO ACTION]]
    DROP TABLE [IF EXISTS] t
    CREATE [UNIQUE] [NULL_FILTERED] INDEX [IF NOT EXISTS] i ON t (c [ASC|DESC], ...) [STORING (c, ...)]
        [, INTERLEAVE IN p]
    DROP INDEX [IF EXISTS] i
    INSERT [OR UPDATE | OR IGNORE] [INTO] t (c, ...) VALUES (e, ...), ... [THEN RETURN items]
    UPDATE t [[AS] a] SET c = e, ... WHERE cond [THEN RETURN items]
    DELETE [FROM] t [[AS] a] WHERE cond [THEN RETURN items]
    SELECT [DISTINCT] items [FROM rel [[AS] a] [[INNER | LEFT [OUTER] | CROSS] JOIN rel [[AS] a] [ON cond]] ...]
        [WHERE cond] [ORDER BY e [ASC|DESC], ...] [LIMIT n [OFFSET m]]

TYPE is BOOL, INT64, FLOAT64, NUMERIC, STRING(n|MAX), BYTES(n|MAX), DATE,
TIMESTAMP, JSON or ARRAY<one of them>. items are ``*``, ``a.*``, ``e [[AS] x]``
and ``COUNT(*)``; cond joins comparisons (=, !=, <>, <, <=, >, >=), ``[NOT]
IN (...)`` / ``IN UNNEST(@p)``, ``[NOT] LIKE``, ``IS [NOT] NULL`` and
``[NOT] BETWEEN`` with AND, OR, NOT and parentheses. e is a column (``c``,
``a.c``), a literal, an ``@param``, ``CURRENT_TIMESTAMP()``,
``PENDING_COMMIT_TIMESTAMP()``, or e + e, e - e, e * e.
"""

from decimal import Decimal, InvalidOperation

from ...errors import InvalidArgument
from . import lexing
from .ast import (BOOL, BYTES, FLOAT64, INT64, STRING, Arithmetic, ArrayLiteral, Between, Column, ColumnDef, Compare,
                  Count, CountStar, CreateIndex, CreateTable, Delete, DropIndex, DropTable, Expr, In, Insert, IsNull,
                  Join, Like, Literal, Logical, Not, Now, Param, Relation, SCALARS, Select, SelectItem, SpannerType, Star,
                  TableSubset, TypedLiteral, Update)
from .lexing import Cursor, Token

SUPPORTED = (
    "CREATE TABLE, DROP TABLE, CREATE [UNIQUE] INDEX, DROP INDEX; INSERT / UPDATE / DELETE of a table with a "
    "WHERE of comparisons, IN, LIKE, IS [NOT] NULL, AND / OR / NOT, and THEN RETURN; SELECT over tables and "
    "queues with joins, WHERE, ORDER BY, LIMIT and COUNT(*) (see docs/spanner-compat.md)"
)


# -- tokens -----------------------------------------------------------------------

RESERVED = frozenset({
    "all", "and", "as", "asc", "between", "by", "cross", "desc", "distinct", "from", "full", "group", "having",
    "in", "inner", "is", "join", "left", "like", "limit", "not", "null", "offset", "on", "or", "order", "outer",
    "right", "select", "set", "then", "union", "using", "where", "values", "true", "false", "return",
})


def tokenize(text: str) -> list[Token]:
    """The table subset's tokens (lexing.tokenize)."""
    return lexing.tokenize(text, lexing.GOOGLESQL_TABLE, _supported, _long_number)


def _long_number(raw: str) -> InvalidArgument:
    return InvalidArgument(f"the number {raw[:24]}... is longer than an INT64")


def _supported() -> str:
    return f"spanq's Spanner front-end understands, on tables: {SUPPORTED}"


class _Parser(Cursor):
    def __init__(self, text: str) -> None:
        super().__init__(text, tokenize(text), _supported)

    def unsupported(self, what: str) -> InvalidArgument:
        return InvalidArgument(f"{what} is not supported by spanq's Spanner front-end (in: "
                               f"{self.text.strip()[:120]}); {_supported()}")

    def name(self, what: str) -> tuple[str, str]:
        """(folded, as written)."""
        token = self.peek
        if token.kind != "ident" or (not token.text.startswith("`") and token.value in RESERVED):
            raise self.error(what)
        self.pos += 1
        return token.value, token.spelled

    # -- statements --------------------------------------------------------

    def statement(self) -> TableSubset:
        first = self.peek
        if first.is_word("create"):
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
        elif first.is_word("alter"):
            raise self.unsupported("ALTER")
        elif first.is_word("with"):
            raise self.unsupported("WITH (common table expressions)")
        else:
            raise InvalidArgument(f"unsupported statement {self.text.strip()[:80]!r}; {_supported()}")
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
        while not self.accept_punct(")"):
            column = self.name("a primary-key column")[0]
            if self.accept_word("desc"):
                raise self.unsupported(f"DESC in the primary key (column {column!r})")
            self.accept_word("asc")
            key.append(column)
            if not self.accept_punct(","):
                self.punct(")")
                break
        parent, cascade = None, False
        while self.accept_punct(","):
            if self.accept_word("interleave"):
                self.word("in")
                self.word("parent")
                parent = self.name("a parent table name")[0]
                if self.accept_word("on"):
                    self.word("delete")
                    if self.accept_word("cascade"):
                        cascade = True
                    else:
                        self.word("no")
                        self.word("action")
            elif self.peek.is_word("row"):
                raise self.unsupported("ROW DELETION POLICY")
            else:
                raise self.error("INTERLEAVE IN PARENT")
        return CreateTable(name, spelled, tuple(columns), tuple(key), parent, cascade, if_not_exists)

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
        while True:
            if self.accept_word("not"):
                self.word("null")
                not_null = True
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
        return ColumnDef(name, spelled, column_type, not_null, commit_timestamp)

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
        if self.accept_word("storing"):
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
        alias = None
        if self.accept_word("as"):
            alias = self.name("an alias")[0]
        elif self.peek.kind == "ident" and self.peek.value not in RESERVED:
            alias = self.name("an alias")[0]
        return Relation(name, alias)

    def select(self) -> Select:
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
        if self.peek.is_word("group", "having", "union", "intersect", "except"):
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
        return Select(tuple(items), source, tuple(joins), where, tuple(order), limit, offset, distinct)

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
                elif self.peek.kind == "ident" and self.peek.value not in RESERVED:
                    alias = self.name("a column alias")[1]
                items.append(SelectItem(expr, alias))
            if not self.accept_punct(","):
                return items

    def returning(self) -> tuple[SelectItem, ...] | None:
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
        rows = [self.row(len(columns))]
        while self.accept_punct(","):
            rows.append(self.row(len(columns)))
        if len(set(columns)) != len(columns):
            raise InvalidArgument(f"INSERT INTO {table}: a column is named twice")
        return Insert(table, tuple(columns), tuple(rows), self.returning(), conflict)

    def row(self, width: int) -> tuple[Expr, ...]:
        self.punct("(")
        items = [self.expr()]
        while self.accept_punct(","):
            items.append(self.expr())
        self.punct(")")
        if len(items) != width:
            raise InvalidArgument(f"a VALUES row has {len(items)} value(s) for {width} column(s)")
        return tuple(items)

    def target(self) -> Relation:
        name = self.name("a table name")[0]
        alias = None
        if self.accept_word("as"):
            alias = self.name("an alias")[0]
        elif self.peek.kind == "ident" and self.peek.value not in RESERVED:
            alias = self.name("an alias")[0]
        return Relation(name, alias)

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
                raise self.unsupported("IN (SELECT ...)")
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
        left, links = self.operand(), 0
        while self.at_punct("*"):
            self.next()
            self.deeper()
            links += 1
            left = Arithmetic("*", left, self.operand())
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
        if word == "count" and self.at_punct("("):
            self.next()
            if self.accept_punct("*"):
                self.punct(")")
                return CountStar()
            if self.peek.is_word("distinct"):
                raise self.unsupported("COUNT(DISTINCT ...)")
            self.deeper()
            inner = self.expr()
            self.punct(")")
            self.depth -= 1
            return Count(inner)
        if word == "spanner" and self.at_punct(".") and self.ahead().is_word("commit_timestamp"):
            self.next()
            self.next()
            self.punct("(")
            self.punct(")")
            return Now()
        if self.at_punct("("):
            raise self.unsupported(f"the function {token.text.upper()}()")
        if word in RESERVED:
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


def parse(text: str) -> TableSubset:
    """One GoogleSQL statement of the table subset, or INVALID_ARGUMENT saying what is not supported."""
    if not text or not text.strip():
        raise InvalidArgument("the statement is empty")
    return _Parser(text).statement()


def is_table_ddl(text: str) -> bool:
    """Whether a DDL statement is one of this module's (CREATE / DROP TABLE or INDEX), by its first words."""
    try:
        tokens = tokenize(text)
    except InvalidArgument:
        return False
    first = [t.value for t in tokens[:3] if t.kind == "ident"]
    return (len(first) >= 2 and first[0] in ("create", "drop")
            and (first[1] in ("table", "index", "unique", "null_filtered")))


def names_in(text: str) -> set[str]:
    """Every (folded) identifier of a statement: which relations it may name."""
    try:
        return {t.value for t in tokenize(text) if t.kind == "ident"}
    except InvalidArgument:
        return set()
