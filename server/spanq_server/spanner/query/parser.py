"""The one entry point of the Spanner front-end's grammar: ``parse(text, dialect, ...)``
(and ``parse_ddl``, for UpdateDatabaseDdl's and CreateDatabase's statements) reads a
statement once, in its database's dialect, into the statement that runs and that
authorization checks (never a reading in another dialect: issue 21).

Two grammars share the lexer (``lexing``) for now: ``statements`` reads the queue
surface (both dialects), ``googlesql`` the table subset (GoogleSQL only). Which one
reads a statement is decided before either runs, from its words and the database's
tables: an UPDATE, or a SELECT, INSERT or DELETE naming a table of the database, is
the table subset's; anything else the queue surface's. Only a statement the queue
surface refuses that names no table (a join or an aggregate over queues, which the
table subset reads) is read by the second grammar after the first.
"""

import asyncio
import enum
import functools
from collections.abc import Awaitable, Callable, Iterable

from ...errors import InvalidArgument
from . import ast
from . import googlesql as g
from . import statements as st
from .lexing import Token
from .tables import TableStatement

Parsed = ast.QueueStatement | TableStatement
"""A statement as the executor parsed it: of the queue surface, or of the table subset."""

LONG_STATEMENT = 4096
"""Characters past which a statement's reads (each up to a few tenths of a second within the limits
of lexing.py) let other calls run before and between them."""


class Dialect(enum.Enum):
    """A database's dialect (its DatabaseDialect): how its statements are read."""

    GOOGLESQL = "GOOGLE_STANDARD_SQL"
    POSTGRESQL = "POSTGRESQL"

    @classmethod
    def of(cls, pg: bool) -> "Dialect":
        return cls.POSTGRESQL if pg else cls.GOOGLESQL


async def parse(text: str, dialect: Dialect, is_table: Callable[[str], Awaitable[bool]],
                any_table: Callable[[Iterable[str]], Awaitable[bool]]) -> Parsed:
    """One statement of the queue surface or of the table subset, read in ``dialect``;
    ``is_table`` says whether a (folded) name is a table of the database, ``any_table``
    whether one of some names is. INVALID_ARGUMENT when it is neither: the error of the
    grammar it was meant for (a statement naming a table: the table subset's)."""
    long = len(text) > LONG_STATEMENT
    if long:  # other calls go first, and between the reads of a long statement
        await asyncio.sleep(0)
    if dialect is Dialect.POSTGRESQL:  # tables are GoogleSQL only
        return st.parse(text, True)
    try:
        update, named, tokens = _relations(text)
    except InvalidArgument:  # the queue surface cannot read it either: it says why, below
        update, named, tokens = False, (), None
    if update or await _any(is_table, named):
        return TableStatement(g.parse(text), text)
    try:
        return st.parse_tokens(text, tokens) if tokens is not None else st.parse(text)
    except InvalidArgument as queue_error:
        if "limit" in queue_error.metadata:  # past a limit of one grammar is past the other's
            raise
        if long:
            await asyncio.sleep(0)
        try:
            return TableStatement(g.parse(text), text)
        except InvalidArgument as table_error:
            if text.lstrip()[:6].lower() == "update" or await any_table(g.names_in(text)):
                raise table_error from None
            raise queue_error from None


async def _any(is_table: Callable[[str], Awaitable[bool]], names: Iterable[str]) -> bool:
    for name in names:
        if await is_table(name):
            return True
    return False


def parse_ddl(text: str, dialect: Dialect) -> ast.QueueDdl | ast.TableDdl:
    """A DDL statement in ``dialect``: of queues, or (GoogleSQL) of tables and indexes, by its
    first words."""
    if dialect is Dialect.GOOGLESQL and g.is_table_ddl(text):
        statement = g.parse(text)
        assert isinstance(statement, (ast.CreateTable, ast.DropTable, ast.CreateIndex, ast.DropIndex))
        return statement
    return st.parse_ddl(text, dialect is Dialect.POSTGRESQL)


def _relations(text: str) -> tuple[bool, tuple[str, ...], list[Token] | None]:
    """(an UPDATE?, the relations a SELECT, INSERT or DELETE names, the tokens of a long text
    for the grammar to reuse), from the queue surface's tokens (GoogleSQL)."""
    if len(text) > st.PARSE_CACHE_MAX_TEXT:
        tokens = st.tokenize(text)
        update, named = _named(tokens)
        return update, named, tokens
    update, named = _relations_cached(text)
    return update, named, None


@functools.lru_cache(maxsize=st.PARSE_CACHE_SIZE)
def _relations_cached(text: str) -> tuple[bool, tuple[str, ...]]:
    return _named(st.tokenize(text))


def _named(tokens: list[Token]) -> tuple[bool, tuple[str, ...]]:
    """The names that follow FROM, JOIN, INSERT [INTO] and DELETE [FROM], but not a function's
    (RECEIVE_q(...), RENEWLEASE_q(...)): a relation each, a table or a queue."""
    first = tokens[0]
    if first.is_word("update"):
        return True, ()
    if not first.is_word("select", "insert", "delete"):
        return False, ()
    last = len(tokens) - 1
    found = []
    for i, token in enumerate(tokens[:-1]):
        at, function = i + 1, False
        if i == 0 and first.is_word("insert"):
            if tokens[at].is_word("or"):  # INSERT OR UPDATE | IGNORE
                at += 2
            at += tokens[min(at, last)].is_word("into")
        elif i == 0 and first.is_word("delete"):
            at += tokens[at].is_word("from")
        elif token.is_word("from", "join"):
            after = tokens[min(at + 1, last)]
            function = after.kind == "punct" and after.value == "("
        else:
            continue
        name = tokens[min(at, last)]
        if name.kind == "ident" and not function:
            found.append(str(name.value))
    return False, tuple(dict.fromkeys(found))
