"""One ExecuteSql is parsed once: the servicer hands its text to Executor.parse, which reads it
with one grammar, in its database's own dialect, and authorizes that very parse. Counted with
the grammars' own counter (``lexing.Cursor.passes``: one Cursor is one read of the tokens).

No PostgreSQL: the store is an in-memory adapter of the port the front-end declares
(``spanner.port.TableStore``), holding one registered table."""

import re
from collections.abc import Sequence
from typing import Any

import pytest

from spanq_server.ground.errors import InvalidArgument
from spanq_server.spanner.query import ast, parser
from spanq_server.spanner.query.executor import Executor
from spanq_server.spanner.query.lexing import Cursor
from spanq_server.spanner.query.parser import Dialect, parse
from spanq_server.spanner.query.schema import table_of
from spanq_server.spanner.query.scope import Scope

SINGERS = table_of(parser.parse_table("CREATE TABLE Singers (SingerId INT64 NOT NULL, Name STRING(MAX)) "
                                      "PRIMARY KEY (SingerId)"),
                   "singers", None)


class Registry:
    """The store's Spanner-table registry, in memory (the part of TableStore a parse reads)."""

    def __init__(self) -> None:
        self.lookups: list[list[str]] = []

    async def table_definitions(self, names: Sequence[str]) -> list[tuple[str, str, dict[str, Any]]]:
        self.lookups.append(list(names))
        return [("singers", "table", SINGERS.as_json())] if "singers" in names else []


class Catalog:
    def on_gone(self, callback: Any) -> None:
        pass


def executor(authorized: list[Any]) -> Executor:
    def authorize(statement: Any, where: str) -> None:
        authorized.append(statement)

    return Executor(Catalog(), None, None, None, None, Registry(), None, None, authorize)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, kind", [
    ("SELECT * FROM messages WHERE id = 1", ast.QueueSelect),  # a queue: the queue surface
    ("INSERT INTO messages (id, Payload) VALUES (1, b'x')", ast.QueueInsert),
    ("DELETE FROM messages WHERE id = 1", ast.QueueDelete),
    ("SELECT * FROM RECEIVE_messages(max_batch_size => 5)", ast.Receive),
    ("SELECT SingerId, Name FROM Singers WHERE SingerId = 1", ast.Select),  # a table: read by its grammar only
    ("INSERT INTO Singers (SingerId, Name) VALUES (1, 'a')", ast.Insert),
    ("INSERT OR UPDATE INTO Singers (SingerId, Name) VALUES (1, 'a')", ast.Insert),
    ("DELETE FROM Singers WHERE SingerId = 1", ast.Delete),
    ("UPDATE Singers SET Name = 'b' WHERE SingerId = 1", ast.Update),
    ("SELECT m.id FROM messages AS m JOIN Singers AS s ON s.SingerId = m.id", ast.Select),
    # Over queues only, what the queue surface cannot read: the table subset's, chosen by the tokens.
    ("SELECT m.id FROM messages AS m JOIN other AS o ON o.id = m.id", ast.Select),  # a join
    ("SELECT COUNT(*) FROM messages", ast.Select),  # an aggregate
    ("SELECT * FROM messages, other", ast.Select),  # two FROM items
    ("SELECT * FROM messages WHERE id = 1 OR id = 2", ast.Select),
    ("SELECT * FROM messages ORDER BY id, Payload LIMIT 1 OFFSET 1", ast.Select),
    ("SELECT 1", ast.Select),  # no FROM
    ("SELECT DISTINCT m.id FROM messages AS m", ast.Select),
    ("SELECT x.id FROM messages AS m", ast.Select),  # a qualifier not the FROM's
    ("DELETE FROM messages WHERE TRUE", ast.Delete),
    ("INSERT INTO messages (id, Payload) VALUES (1, b'x') THEN RETURN id", ast.QueueInsert),  # a send's
    ("INSERT OR UPDATE INTO messages (id, Payload) VALUES (1, b'x')", ast.Insert),
    ("SELECT * FROM messages WHERE id = 1.5", ast.Select),  # a FLOAT64: words the queue surface has not
    # What the queue surface reads is its own, whatever the word: DISTINCT and LEFT are names there.
    ("SELECT distinct FROM messages left WHERE left.id = 1", ast.QueueSelect),
    ("SELECT m.id AS n FROM messages m WHERE m.id >= @a AND id < TIMESTAMP_ADD(CURRENT_TIMESTAMP(), "
     "INTERVAL 1 HOUR) ORDER BY m.id DESC LIMIT 5;", ast.QueueSelect),
    ("CREATE TABLE T (Id INT64 NOT NULL) PRIMARY KEY (Id)", ast.CreateTable),
    ("CREATE QUEUE q (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)", ast.CreateQueue),
])
async def test_one_execute_sql_is_one_parse_in_its_dialect_and_authorization_reads_it(text: str, kind: type) -> None:
    authorized: list[Any] = []
    run = executor(authorized)
    text = f"{text} -- {id(authorized)}"  # a text no parse cache holds
    before = Cursor.passes
    parsed = await run.parse(text, Scope())
    assert Cursor.passes - before == 1
    statement = parsed.statement
    assert isinstance(statement, kind)
    assert authorized == [statement]  # the one parse is what authorization checked


@pytest.mark.parametrize("text, message", [
    # Neither grammar reads these: the one the tokens chose says why, in one pass.
    ("SELECT id FROM messages EXCEPT DISTINCT SELECT id FROM messages", "EXCEPT is not supported"),
    ("SELECT * FROM messages WHERE id = (SELECT id FROM messages)", "a subquery is not supported"),
    ("SELECT * FROM (SELECT 1)", "a subquery in FROM is not supported"),
    ("SELECT * FROM RECEIVE_messages() AS r JOIN messages AS m ON m.id = r.id", "found 'JOIN'"),  # a queue's function
    ("SELECT * FROM messages WHERE", "understands only"),  # cut short: the queue surface's
    ("SELECT * FROM spanq.queues", "understands only"),  # a qualified relation, which neither reads
    ("CREATE TABLE", "understands, on tables"),
    ("ALTER TABLE Singers ALTER COLUMN x INT64", "ALTER TABLE ... ALTER"),  # names a table: the table subset's
    ("ALTER TABLE nothing", "unsupported statement"),
    ("UPDATE messages SET id = 2", "UPDATE needs a WHERE clause"),
])
async def test_a_statement_neither_grammar_reads_is_refused_after_one_pass(text: str, message: str) -> None:
    before = Cursor.passes
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        await executor([]).parse(f"{text} -- refused", Scope())
    assert Cursor.passes - before == 1


async def test_a_postgresql_database_is_read_in_its_dialect_only() -> None:
    registry = Registry()

    async def is_table(name: str) -> bool:
        return bool(await registry.table_definitions([name]))

    async def any_table(names: Any) -> bool:
        return bool(await registry.table_definitions(list(names)))

    before = Cursor.passes
    parsed = await parse('SELECT * FROM spanner.receive_messages(5) -- "x"', Dialect.POSTGRESQL, is_table, any_table)
    assert isinstance(parsed.statement, ast.Receive) and Cursor.passes - before == 1
    assert registry.lookups == []  # a queue function: no table lookup, no second grammar
    # A GoogleSQL reading of a PostgreSQL text is never tried: `#` starts no comment there.
    with pytest.raises(InvalidArgument):
        await parse("SELECT * FROM messages # comment", Dialect.POSTGRESQL, is_table, any_table)


async def test_the_parse_is_kept_for_the_same_text() -> None:
    """A queue statement's text parsed again (the next call of the same code) costs no grammar."""
    run = executor([])
    text = "SELECT * FROM messages WHERE id = @id -- kept"
    await run.parse(text, Scope())
    before = Cursor.passes
    await run.parse(text, Scope())
    assert Cursor.passes == before
