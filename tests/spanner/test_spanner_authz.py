"""Authorization reads a Spanner statement as the one parse that runs, in its database's
dialect (issue 21, the HIGH item): a real server with a token file, raw google.spanner.v1
calls, tables and queues in the default namespace, in a GoogleSQL database and in a
PostgreSQL-dialect database made by CreateDatabase; and a property test whose generated
statements mix both dialects' comments, quotes, escapes and parameters."""

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.cloud.spanner_admin_database_v1.types import common as dba_common
from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as dba
from google.cloud.spanner_v1.types import mutation
from google.longrunning import operations_pb2
from google.protobuf import struct_pb2
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as hs

from spanq_server.edge import auth
from spanq_server.ground.config import Config

from ..helpers import error_of, spanner_ddl
from .test_spanner_hardening import RawSpanner, send

OPS, READER, ACKER, FUZZER, SENDER = "tok-ops", "tok-reader", "tok-acker", "tok-fuzzer", "tok-sender"
TOKENS = f"""
[tokens.ops]
sha256 = "{auth.digest(OPS)}"
grants = {{ "*" = ["admin", "select", "send", "receive", "ack", "update"] }}

[tokens.reader]
sha256 = "{auth.digest(READER)}"
grants = {{ adv_ta = ["select"], adv_qa = ["select"], mine = ["admin"] }}

[tokens.acker]
sha256 = "{auth.digest(ACKER)}"
grants = {{ t = ["ack"], qt = ["ack"] }}

[tokens.sender]
sha256 = "{auth.digest(SENDER)}"
grants = {{ ordersqueue = ["send"] }}

[tokens.fuzzer]
sha256 = "{auth.digest(FUZZER)}"
grants = {{ ok = ["select", "send", "update", "ack"], okq = ["select", "send", "update", "ack"], acked = ["ack"] }}
"""
SECRET = "s3cr3t"
"""In every value of the tables and queues the reader and the acker may not read."""
INSTANCE = "projects/p/instances/i"
DEFAULT = f"{INSTANCE}/databases/d"
"""A name no CreateDatabase made: the default namespace (GoogleSQL)."""
MADE, PG = f"{INSTANCE}/databases/made", f"{INSTANCE}/databases/pgdb"
GOOGLESQL_DDL = [
    "CREATE TABLE adv_ta (Id INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE TABLE adv_tsecret (Id INT64 NOT NULL, Secret STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE TABLE t (Id INT64 NOT NULL, Secret STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE QUEUE adv_qa (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
    "CREATE QUEUE adv_qsecret (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
]
GOOGLESQL_ROWS = [
    "INSERT INTO adv_ta (Id, Name) VALUES (1, 'visible'), (2, 'also visible')",
    f"INSERT INTO adv_tsecret (Id, Secret) VALUES (1, '{SECRET}-1'), (2, '{SECRET}-2')",
    f"INSERT INTO t (Id, Secret) VALUES (1, '{SECRET}-t1'), (2, '{SECRET}-t2')",
    "INSERT INTO adv_qa (Id, Payload) VALUES (1, 'visible')",
    f"INSERT INTO adv_qsecret (Id, Payload) VALUES (1, '{SECRET}-q1'), (2, '{SECRET}-q2')",
]
PG_DDL = [f"CREATE QUEUE {name} (id bigint NOT NULL, payload varchar NOT NULL, PRIMARY KEY (id))"
          for name in ("adv_qa", "adv_qsecret", "qt")]
PG_ROWS = [
    "INSERT INTO adv_qa (id, payload) VALUES (1, 'visible')",
    f"INSERT INTO adv_qsecret (id, payload) VALUES (1, '{SECRET}-q1'), (2, '{SECRET}-q2')",
    f"INSERT INTO qt (id, payload) VALUES (1, '{SECRET}-qt1')",
]

# The statements: the old authorizer read each as a queue statement in the other
# dialect (PostgreSQL: "\" a name, -- a comment) and so never applied the table rules.
SELECT_EXPLOITS = [
    'SELECT "\\" FROM adv_ta -- ", x.Secret FROM adv_tsecret AS x',
    'SELECT "\\" FROM adv_ta -- ", x.Payload FROM adv_qsecret AS x',  # a queue, read as a table
    'SELECT "\\" FROM adv_ta -- ", s.Secret FROM adv_ta AS a JOIN adv_tsecret AS s ON s.Id = a.Id',
    'SELECT "\\" FROM adv_qa -- ", s.Secret FROM adv_qa AS a CROSS JOIN adv_tsecret AS s',
    "SELECT '\\' FROM adv_ta -- ', x.Secret FROM adv_tsecret AS x",
]
DELETE_EXPLOIT = "DELETE FROM t WHERE Secret = '\\' -- ' OR true THEN RETURN Secret"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture
def server_config(server_config: Config, tmp_path: Any) -> Config:
    path = tmp_path / "tokens.toml"
    path.write_text(TOKENS)
    return dataclasses.replace(server_config, auth_file=str(path))


def create_database(channel: grpc.aio.Channel, database_id: str, ddl: list[str], pg: bool = False,
                    token: str = OPS) -> Any:
    """A raw CreateDatabase call (awaitable): its Operation."""
    dialect = dba_common.DatabaseDialect.POSTGRESQL if pg else dba_common.DatabaseDialect.GOOGLE_STANDARD_SQL
    request = dba.CreateDatabaseRequest.pb()(parent=INSTANCE, create_statement=f"CREATE DATABASE {database_id}",
                                             extra_statements=ddl, database_dialect=dialect)
    call = channel.unary_unary("/google.spanner.admin.database.v1.DatabaseAdmin/CreateDatabase",
                               request_serializer=type(request).SerializeToString,
                               response_deserializer=operations_pb2.Operation.FromString)
    return call(request, metadata=bearer(token))


async def populate(channel: grpc.aio.Channel, database: str) -> None:
    """The database's tables and queues, and their rows, made by ops."""
    if database == DEFAULT:
        operation = await spanner_ddl(channel, *GOOGLESQL_DDL, metadata=bearer(OPS))
    else:
        operation = await create_database(channel, database.split("/")[-1], PG_DDL if database == PG else GOOGLESQL_DDL,
                                          pg=database == PG)
    assert not operation.HasField("error"), operation.error
    ops = as_token(channel, OPS, database)
    txn = await ops.begin()
    for text in PG_ROWS if database == PG else GOOGLESQL_ROWS:
        await ops.sql(text, txn)
    await ops.commit(txn=txn)


def as_token(channel: grpc.aio.Channel, token: str, database: str) -> RawSpanner:
    return RawSpanner(channel, bearer(token), session=f"{database}/sessions/s1")


def executions(client: RawSpanner, text: str) -> Iterator[Any]:
    """The statement through ExecuteSql, then (once that one is awaited) ExecuteStreamingSql."""
    yield client.sql(text)
    yield client.stream(text)


async def refused(call: Any, privilege: str, on: str) -> str:
    code, message, info = await error_of(call)
    assert code == grpc.StatusCode.PERMISSION_DENIED, (code, message)
    assert info["privilege"] == privilege and info["queue"] == on, info
    assert SECRET not in message
    return message


async def stored(ops: RawSpanner, pg: bool = False) -> list[list[Any]]:
    """Every row the reader and the acker may not read, as ops reads them."""
    if pg:
        return [*await ops.sql("SELECT id, payload FROM adv_qsecret"), *await ops.sql("SELECT id, payload FROM qt")]
    return [*await ops.sql("SELECT Id, Secret FROM adv_tsecret ORDER BY Id"),
            *await ops.sql("SELECT Id, Secret FROM t ORDER BY Id"),
            *await ops.sql("SELECT Id, Payload FROM adv_qsecret ORDER BY Id")]


@pytest.mark.parametrize("database", [DEFAULT, MADE])
async def test_a_select_grant_reads_what_the_googlesql_parse_names_and_nothing_else(channel, database) -> None:
    await populate(channel, database)
    reader = as_token(channel, READER, database)
    for text in SELECT_EXPLOITS:
        secret = "adv_qsecret" if "adv_qsecret" in text else "adv_tsecret"
        for call in executions(reader, text):
            message = await refused(call, "select", secret)
            assert "token 'reader' lacks the 'select' privilege" in message, message
    # What the reader may read still runs, the same lexical tricks included: the
    # GoogleSQL parse names adv_ta alone, whatever PostgreSQL would make of the text
    # (it reads SELECT "\" FROM adv_tsecret, which the old authorizer refused).
    assert await reader.sql("SELECT Name FROM adv_ta ORDER BY Id") == [["visible"], ["also visible"]]
    assert await reader.sql('SELECT "\\" FROM adv_tsecret -- ", Name FROM adv_ta ORDER BY Id') == [
        ['" FROM adv_tsecret -- ', "visible"], ['" FROM adv_tsecret -- ', "also visible"]]
    joined = await reader.stream("SELECT a.Name, q.Payload FROM adv_ta AS a JOIN adv_qa AS q ON q.Id = a.Id")
    assert [v.string_value for part in joined for v in part.values] == ["visible", "visible"]


@pytest.mark.parametrize("database", [DEFAULT, MADE])
async def test_an_ack_grant_deletes_without_reading_what_it_deletes(channel, database, sql) -> None:
    await populate(channel, database)
    ops, acker = as_token(channel, OPS, database), as_token(channel, ACKER, database)
    before = await stored(ops)
    txn = await acker.begin()
    await refused(acker.sql(DELETE_EXPLOIT, txn), "select", "t")
    txn = await acker.begin()
    await refused(acker.batch_dml(txn, "DELETE FROM t WHERE Id = 99", DELETE_EXPLOIT), "select", "t")
    assert await stored(ops) == before  # nothing deleted
    # A DELETE without THEN RETURN is what ack allows.
    txn = await acker.begin()
    await acker.sql("DELETE FROM t WHERE Secret = '\\' -- ' OR Id = 2", txn)
    await acker.commit(txn=txn)
    assert await ops.sql("SELECT Id FROM t") == [["1"]]
    (namespace,) = sql.execute("SELECT coalesce((SELECT namespace FROM spanq.spanner_databases WHERE name = %s), '')",
                               (database,)).fetchone()
    assert sql.execute(f"SELECT id FROM {namespace}t").fetchall() == [(1,)]  # PostgreSQL agrees


@pytest.mark.parametrize("database", [DEFAULT, MADE])
async def test_subqueries_and_union_all_need_select_on_every_relation_they_read(channel, database) -> None:
    await populate(channel, database)
    ops, reader, acker = (as_token(channel, t, database) for t in (OPS, READER, ACKER))
    before = await stored(ops)
    for text, secret in [("SELECT Name FROM adv_ta WHERE Id IN (SELECT Id FROM adv_tsecret)", "adv_tsecret"),
                         ("SELECT Name FROM adv_ta WHERE EXISTS (SELECT 1 FROM adv_qsecret q WHERE q.Id = 1)",
                          "adv_qsecret"),
                         ("SELECT Name FROM adv_ta UNION ALL SELECT Secret FROM adv_tsecret", "adv_tsecret"),
                         ("SELECT Id FROM adv_ta WHERE Id IN (SELECT Id FROM adv_qa WHERE EXISTS (SELECT 1 FROM "
                          "adv_tsecret))", "adv_tsecret")]:
        for call in executions(reader, text):
            await refused(call, "select", secret)
    txn = await acker.begin()
    await refused(acker.sql("DELETE FROM t WHERE Id IN (SELECT Id FROM adv_tsecret)", txn), "select", "adv_tsecret")
    assert await stored(ops) == before
    assert await reader.sql("SELECT Name FROM adv_ta WHERE Id IN (SELECT Id FROM adv_qa) UNION ALL "
                            "SELECT Payload FROM adv_qa") == [["visible"], ["visible"]]


async def test_a_postgresql_database_is_authorized_as_postgresql_reads_its_statements(channel, sql) -> None:
    await populate(channel, PG)
    ops, reader, acker = (as_token(channel, t, PG) for t in (OPS, READER, ACKER))
    before = await stored(ops, pg=True)
    # PostgreSQL reads SELECT "\" FROM adv_qsecret: refused, whatever GoogleSQL would make of the rest.
    for text in ('SELECT "\\" FROM adv_qsecret -- ", payload FROM adv_qa',
                 "SELECT payload FROM adv_qsecret WHERE id = '\\' -- ' FROM adv_qa",
                 "SELECT x.payload FROM adv_qsecret AS x"):
        for call in executions(reader, text):
            await refused(call, "select", "adv_qsecret")
    # ... and the statements are what PostgreSQL reads: a SELECT of adv_qa, whose
    # column "\" does not exist; the rest is a comment, and no secret comes back.
    for text in (t.replace("adv_ta ", "adv_qa ") for t in SELECT_EXPLOITS[:2]):
        for call in executions(reader, text):
            code, message, _ = await error_of(call)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and SECRET not in message, (code, message)
    txn = await acker.begin()
    for text in ("DELETE FROM adv_qsecret WHERE id = '\\' -- ' OR true", "DELETE FROM adv_qsecret WHERE id = 1"):
        await refused(acker.sql(text, txn), "ack", "adv_qsecret")
    assert await reader.sql("SELECT payload FROM adv_qa") == [["visible"]]
    assert await stored(ops, pg=True) == before
    (namespace,) = sql.execute("SELECT namespace FROM spanq.spanner_databases WHERE name = %s", (PG,)).fetchone()
    assert sql.execute(f"SELECT count(*) FROM {namespace}adv_qsecret").fetchone() == (2,)


async def test_ddl_is_authorized_on_its_parse_before_anything_is_made(channel, sql) -> None:
    """CreateDatabase's and UpdateDatabaseDdl's statements are checked where they are parsed, each
    named by its index, before the database is made or any statement runs."""
    reader = bearer(READER)
    mine = "CREATE TABLE mine (Id INT64 NOT NULL) PRIMARY KEY (Id)"
    code, message, info = await error_of(create_database(channel, "theirs", [mine, GOOGLESQL_DDL[1]], token=READER))
    assert code == grpc.StatusCode.PERMISSION_DENIED and message.startswith("extra statement 1: "), message
    assert info["privilege"] == "admin" and info["queue"] == "adv_tsecret"
    assert sql.execute("SELECT count(*) FROM spanq.spanner_databases").fetchone() == (0,)
    assert sql.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE '%mine'").fetchone() == (0,)
    code, message, _ = await error_of(spanner_ddl(channel, "DROP TABLE adv_tsecret", metadata=reader))
    assert code == grpc.StatusCode.PERMISSION_DENIED and message.startswith("statement 0: "), message


async def test_each_statement_is_parsed_once_in_its_databases_dialect(channel, monkeypatch) -> None:
    """Authorization reads no other parse than the one that runs: no reading in the other dialect."""
    from spanq_server.spanner.query import parser
    from spanq_server.spanner.query.parser import Dialect

    await populate(channel, MADE)
    await populate(channel, PG)
    parses: list[tuple[str, bool]] = []
    queue_parse, table_parse = parser.parse_queue, parser.parse_table

    def queue_parsed(text: str, dialect: Dialect = Dialect.GOOGLESQL) -> Any:
        parses.append(("queue", dialect is Dialect.POSTGRESQL))
        return queue_parse(text, dialect)

    def table_parsed(text: str) -> Any:
        parses.append(("table", False))
        return table_parse(text)

    monkeypatch.setattr(parser, "parse_queue", queue_parsed)
    monkeypatch.setattr(parser, "parse_table", table_parsed)
    reader = as_token(channel, READER, MADE)
    assert await reader.sql("SELECT Name FROM adv_ta WHERE Id = 1") == [["visible"]]
    assert parses == [("table", False)]  # it names a table: the table subset's grammar only, once
    parses.clear()
    assert await reader.sql("SELECT Payload FROM adv_qa") == [["visible"]]
    assert parses == [("queue", False)]
    parses.clear()
    assert await as_token(channel, READER, PG).sql("SELECT payload FROM adv_qa") == [["visible"]]
    assert parses == [("queue", True)]


# -- the property: generated statements never reach what the token has no privilege on ---------

SCALE = int(os.environ.get("SPANQ_CHAOS_SCALE", "1"))
SECRET_ID = "77000"
"""The forbidden relations' keys start so; the generator writes no number above 99."""
FUZZ_GOOGLESQL = [
    "CREATE TABLE ok (Id INT64 NOT NULL, Payload STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE TABLE secret (Id INT64 NOT NULL, Payload STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE QUEUE okq (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
    "CREATE QUEUE secretq (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
    "CREATE TABLE acked (Id INT64 NOT NULL, Payload STRING(MAX)) PRIMARY KEY (Id)",
]
FUZZ_PG = [f"CREATE QUEUE {name} (id bigint NOT NULL, payload varchar NOT NULL, PRIMARY KEY (id))"
           for name in ("ok", "secret", "okq", "secretq", "acked")]
FORBIDDEN = ("secret", "secretq")
"""The fuzzer may do nothing on these; on acked it may delete, never read."""
SECRET_ROWS = [(f"{SECRET_ID}{i}", f"{SECRET}-{i}") for i in (1, 2, 3)]
FUZZ_ROWS = [f"INSERT INTO {name} (Id, Payload) VALUES (1, 'fine-1'), (2, 'fine-2')" for name in ("ok", "okq")] + [
    f"INSERT INTO {name} (Id, Payload) VALUES {', '.join(f'({i}, {v!r})' for i, v in SECRET_ROWS)}"
    for name in (*FORBIDDEN, "acked")]

# Pieces that read differently in the two dialects and the two parsers: quotes that one
# lexer ends where the other does not (backslash escapes are GoogleSQL's, '' and "" are
# PostgreSQL's), comments one of them lacks (#), and text that names the other relations.
PIECES = ["\\", "'", '"', "`", "''", '""', "\\'", '\\"', "--", "#", "/*", "*/", "\n", " ", "x", "$1", "@p",
          " FROM secret", " FROM ok", " FROM secretq", ", x.Payload FROM secret AS x", " OR true", ") OR (true",
          " THEN RETURN Payload", " JOIN secret AS s ON true", "; DELETE FROM secret WHERE true", " WHERE Id = 1"]
CLEAN_PIECES = ["x", " ", " FROM secret", "--", "/*", "$1", "@p", "#", '"', "`", "\\\\"]
QUOTES = [("'", "'"), ('"', '"'), ("`", "`"), ("'''", "'''"), ('"""', '"""'), ("r'", "'"), ('R"', '"'),
          ("b'", "'"), ('br"', '"'), ("B'''", "'''"), ("'", '"'), ('"', "'")]
GOOGLESQL_RELATIONS = ["ok", "secret", "okq", "secretq", "acked", "OK", "Secret", "`secret`", "`ok`",
                       "RECEIVE_secretq(max_duration => '100ms')", "RECEIVE_okq(max_duration => '100ms')",
                       "RENEWLEASE_secretq(lease_tokens => ['t'])"]
PG_RELATIONS = ["ok", "secret", "okq", "secretq", "acked", "OK", "Secret", '"secret"', '"ok"',
                "spanner.receive_secretq(1, NULL, '100ms')", "spanner.renewlease_secretq(ARRAY['t'])"]
STYLES = ("tricky", "googlesql", "pg")
"""tricky: every piece of either dialect, balanced or not; googlesql, pg: text that dialect
reads (mostly), the other's comments and quotes inside its own literals and comments."""


@hs.composite
def _body(draw: Any, style: str) -> str:
    return "".join(draw(hs.lists(hs.sampled_from(PIECES if style == "tricky" else CLEAN_PIECES), max_size=4)))


@hs.composite
def _literal(draw: Any, style: str) -> str:
    start, end = draw(hs.sampled_from({"tricky": QUOTES, "googlesql": QUOTES[:10], "pg": QUOTES[:1]}[style]))
    body = draw(_body(style))
    if style != "tricky":  # balanced: the body cannot end its literal
        body = body.replace("'", "") if end.endswith("'") else body.replace('"', "")
        body = body.replace("\\", "") if style == "googlesql" else body
    return f"{start}{body}{end}"


@hs.composite
def _gap(draw: Any, style: str) -> str:
    """What may stand between two tokens: space, or a comment of either dialect (or of one)."""
    kinds = {"tricky": [" "] * 4 + ["\n", "--", "#", "/*", "raw"], "googlesql": [" "] * 8 + ["\n", "--", "#", "/*"],
             "pg": [" "] * 8 + ["\n", "--", "/*"]}[style]
    kind = draw(hs.sampled_from(kinds))
    if kind in ("--", "#"):
        return f" {kind}{draw(_body(style)).replace(chr(10), ' ')}\n"
    if kind == "/*":
        return f" /*{draw(_body(style)).replace('*/', '')}*/ "
    if kind == "raw":  # an unbalanced quote or comment opener: the two lexers part here
        return f" {draw(hs.sampled_from(PIECES))} "
    return kind


@hs.composite
def _value(draw: Any, style: str) -> str:
    plain = ["1", "2", "0", "99", "TRUE", "NULL", "Id", "Payload", "'a'"] + (["$1"] if style == "pg" else ["@p"])
    return draw(hs.one_of(*[hs.sampled_from(plain)] * 2, _literal(style)))


@hs.composite
def _items(draw: Any, style: str) -> str:
    columns = hs.sampled_from(["*", "Id", "Payload", "x.Payload", "x.*", "s.Payload", "COUNT(*)", "Id AS k"])
    return ", ".join(draw(hs.lists(hs.one_of(*[columns] * 3, _literal(style)), min_size=1, max_size=3)))


@hs.composite
def _condition(draw: Any, style: str) -> list[str]:
    terms: list[str] = []
    for i in range(draw(hs.integers(1, 3))):
        if i:
            terms.append(draw(hs.sampled_from(["AND", "AND", "OR"])))
        terms += [draw(hs.sampled_from(["Id", "Payload", "x.Id", "true"])), draw(hs.sampled_from(["=", "=", "!=", "<"])),
                  draw(_value(style))]
    return terms


@hs.composite
def statements(draw: Any, style: str | None = None) -> str:
    """One statement of the grammar (SELECT with joins, INSERT, UPDATE, DELETE, THEN RETURN,
    RECEIVE, RENEWLEASE, LIMIT, ASSERT_ROWS_MODIFIED), its tokens apart by spaces or comments,
    its literals of every quoting, in one of STYLES; a tricky one now and then has the text of a
    second statement spliced in."""
    style = style or draw(hs.sampled_from(STYLES))
    relation = hs.sampled_from(PG_RELATIONS if style == "pg" else GOOGLESQL_RELATIONS
                               if style == "googlesql" else GOOGLESQL_RELATIONS + PG_RELATIONS)
    returning = hs.one_of(hs.just([]), hs.just(["THEN", "RETURN", "Payload"]),
                          _items(style).map(lambda items: ["THEN", "RETURN", items]))
    if style == "pg":  # the queue surface alone: no UPDATE, join or THEN RETURN
        returning = hs.just([])
    kind = draw(hs.sampled_from(["select", "select", "insert", "delete"] + ([] if style == "pg" else ["update"])))
    if kind == "select":
        items = hs.sampled_from(["*", "Id", "Payload", "id, payload", "x.Payload"]) if style == "pg" else _items(style)
        tokens = ["SELECT", draw(items), "FROM", draw(relation), *draw(hs.sampled_from([[], ["AS", "x"]]))]
        if style != "pg" and draw(hs.booleans()):
            join = draw(hs.sampled_from(["JOIN", "CROSS JOIN", "LEFT JOIN"]))
            tokens += [join, draw(relation), "AS", "s", *([] if join == "CROSS JOIN" else ["ON", "true"])]
        if draw(hs.booleans()):
            tokens += ["WHERE", *draw(_condition(style))]
        if draw(hs.booleans()):
            tokens += ["LIMIT", draw(_value(style))]
    elif kind == "insert":
        tokens = ["INSERT", "INTO", draw(relation), "(Id, Payload)", "VALUES", "(", draw(_value(style)), ",",
                  draw(_value(style)), ")", *draw(returning)]
    elif kind == "update":
        tokens = ["UPDATE", draw(relation), "SET", "Payload", "=", draw(_value(style)), "WHERE",
                  *draw(_condition(style)), *draw(returning)]
    else:
        tokens = ["DELETE", "FROM", draw(relation), "WHERE", *draw(_condition(style)),
                  *draw(hs.one_of(returning, hs.just(["ASSERT_ROWS_MODIFIED", "1"])))]
    text = draw(_gap(style)).lstrip()
    for token in tokens:
        text += token + draw(_gap(style))
    if style == "tricky" and draw(hs.integers(0, 4)) == 0:  # another statement after one dialect's quote or comment
        text += draw(hs.sampled_from(PIECES)) + draw(statements())
    return text


def leaked(values: list[str]) -> list[str]:
    return [v for v in values if SECRET in v or v.startswith(SECRET_ID)]


def forbidden_rows(sql: Any, namespace: str) -> list[Any]:
    """The forbidden relations as PostgreSQL holds them (a lease, an update or a delete shows)."""
    return [sql.execute(f"SELECT * FROM {namespace}{name} ORDER BY 1").fetchall() for name in FORBIDDEN]



FUZZ_MADE, FUZZ_PGDB = f"{INSTANCE}/databases/fuzz", f"{INSTANCE}/databases/fuzzpg"
PARAMS = {"p": struct_pb2.Value(string_value="1"), "p1": struct_pb2.Value(string_value="1")}


@pytest.fixture
async def fuzzed(channel: grpc.aio.Channel, sql: Any) -> dict[bool, tuple[RawSpanner, RawSpanner, str, list[Any]]]:
    """dialect (pg) -> the fuzzer's and ops' clients on a database of it, its namespace, and its
    forbidden relations as PostgreSQL held them before."""
    out = {}
    for database, ddl, pg in ((FUZZ_MADE, FUZZ_GOOGLESQL, False), (FUZZ_PGDB, FUZZ_PG, True)):
        operation = await create_database(channel, database.split("/")[-1], ddl, pg=pg)
        assert not operation.HasField("error"), operation.error
        ops = as_token(channel, OPS, database)
        txn = await ops.begin()
        for text in FUZZ_ROWS:
            await ops.sql(text.replace("Id, Payload", "id, payload") if pg else text, txn)
        await ops.commit(txn=txn)
        (namespace,) = sql.execute("SELECT namespace FROM spanq.spanner_databases WHERE name = %s",
                                   (database,)).fetchone()
        out[pg] = as_token(channel, FUZZER, database), ops, namespace, forbidden_rows(sql, namespace)
    return out


def _put(table: str, row: tuple[str, str], pg: bool) -> Any:
    """An InsertOrUpdate mutation of a table (a Send, for the PostgreSQL database's queue)."""
    if pg:
        return send(table, [row[0]], row[1])
    m = mutation.Mutation.pb()()
    m.insert_or_update.table = table
    m.insert_or_update.columns.extend(["Id", "Payload"])
    m.insert_or_update.values.add().values.extend(struct_pb2.Value(string_value=v) for v in row)
    return m


def _strings(values: Any) -> list[str]:
    out = []
    for v in values:
        kind = v.WhichOneof("kind")
        out += _strings(v.list_value.values) if kind == "list_value" else [str(getattr(v, kind or "null_value"))]
    return out


async def _run(client: RawSpanner, how: str, text: str) -> list[str]:
    """The statement run as ``how`` says; every value of its answer, as text."""
    if how == "read":
        return [v for row in await client.sql(text, **PARAMS) for v in map(str, row)]
    if how == "stream":
        return [v for part in await client.stream(text, **PARAMS) for v in _strings(part.values)]
    txn = await client.begin()
    try:
        if how == "batch":
            reply = await client.batch_dml(txn, text)
            if reply.status.code:
                raise AssertionError(f"batch status {reply.status.code}: {reply.status.message}")
            found = [v for r in reply.result_sets for row in r.rows for v in _strings(row.values)]
        else:
            found = [v for row in await client.sql(text, txn, **PARAMS) for v in map(str, row)]
        await client.commit(txn=txn)
    except BaseException:
        await client.rollback(txn)
        raise
    return found


@hs.composite
def smuggling(draw: Any) -> str:
    """The issue's shape, varied: a literal that one dialect ends early (a backslash escape, a
    doubled quote), hiding a statement's tail on what the token may touch and a comment opener,
    then a statement on any relation: a SELECT, or a DELETE that returns what it deletes."""
    select = draw(hs.integers(0, 2)) > 0
    quote = draw(hs.sampled_from(['"', '"', "'"] if select else ["'", "'", '"']))
    escape = draw(hs.sampled_from(["\\" + quote, "\\" + quote, quote + quote, "\\"]))
    hidden = draw(hs.sampled_from([" FROM ok", " FROM okq", " FROM ok", " FROM okq", "", " FROM acked"] if select
                                  else ["", "", " AND Id = 1", " FROM ok"]))
    literal = quote + escape + hidden + draw(hs.sampled_from([" -- ", " -- ", " # ", " /* "])) + quote
    if select:
        relation = draw(hs.sampled_from(["secret", "secretq", "acked", "ok", "okq"]))
        return f"SELECT {literal}, {draw(hs.sampled_from(['x.Payload', 'Payload', 'Id', '*']))} FROM {relation} AS x"
    relation = draw(hs.sampled_from(["acked", "acked", "secret", "ok", "okq"]))
    return f"DELETE FROM {relation} WHERE Payload = {literal} OR true THEN RETURN {draw(hs.sampled_from(['Payload', '*']))}"


@hs.composite
def cases(draw: Any) -> tuple[str, str, bool]:
    """A statement; how it is run: a query as a strong read, a stream or in a read-write
    transaction, DML in a read-write transaction, alone or as a batch; and whether in the
    PostgreSQL-dialect database (a smuggled literal mostly goes to GoogleSQL, whose two parsers
    it means to set apart)."""
    style = draw(hs.sampled_from(STYLES + ("smuggle", "smuggle")))
    text = draw(smuggling() if style == "smuggle" else statements(style))
    dml = text.lstrip(" \n").split(" ", 1)[0].upper() in ("INSERT", "UPDATE", "DELETE")
    how = draw(hs.sampled_from(["write", "batch"] if dml else ["read", "stream", "write"]))
    return text, how, draw(hs.sampled_from([False, False, False, True] if style == "smuggle" else [False, True]))


@settings(max_examples=600 * SCALE, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases())
@example(case=(SELECT_EXPLOITS[0].replace("adv_tsecret", "secret").replace("adv_ta", "ok").replace("Secret", "Payload"),
               "read", False))
@example(case=(DELETE_EXPLOIT.replace("FROM t", "FROM acked").replace("Secret", "Payload"), "write", False))
async def test_generated_statements_never_return_or_change_what_the_token_may_not_touch(
        fuzzed, sql, case: tuple[str, str, bool]) -> None:
    """The fuzzer may select, send, update and ack on ok and okq, only ack on acked, nothing on
    secret and secretq: whatever the statement, no value of the last three comes back (in rows
    or in an error message), and PostgreSQL holds secret and secretq as before (no lease,
    update or delete)."""
    text, how, pg = case
    client, ops, namespace, before = fuzzed[pg]
    try:
        values = await _run(client, how, text)
    except (grpc.aio.AioRpcError, AssertionError) as exc:
        message = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
        event(exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else "batch status")
        assert SECRET not in (message or ""), (text, message)
    else:
        event("OK")
        assert not leaked(values), (text, values)
    assert forbidden_rows(sql, namespace) == before, text
    kept = {str(i) for (i,) in sql.execute(f"SELECT id FROM {namespace}acked")}
    lost = [row for row in SECRET_ROWS if row[0] not in kept]
    if lost:  # what the fuzzer may delete, put back for the next example
        await ops.commit(*(_put("acked", row, pg) for row in lost))


# -- database roles under a token file (issue 25, item 2) ----------------------------------------------

ROLE_DDL = [
    "CREATE QUEUE OrdersQueue (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
    "CREATE ROLE queue_producer",
    "GRANT INSERT, SELECT ON QUEUE OrdersQueue TO ROLE queue_producer",
]


async def test_a_token_bounds_its_sessions_role_and_a_role_narrows_its_token(channel) -> None:  # type: ignore[no-untyped-def]
    """What a session with a role may do is what both its token and its role allow: the token is
    checked first (spanq's words), then the role (Spanner's)."""
    from google.cloud.spanner_v1.types import spanner as spanner_types

    operation = await create_database(channel, "bounded", ROLE_DDL)
    assert not operation.HasField("error"), operation.error
    database = f"{INSTANCE}/databases/bounded"

    def create_session(role: str, token: str) -> Any:
        request = spanner_types.CreateSessionRequest.pb()(database=database,
                                                          session=spanner_types.Session.pb()(creator_role=role))
        call = channel.unary_unary("/google.spanner.v1.Spanner/CreateSession",
                                   request_serializer=type(request).SerializeToString,
                                   response_deserializer=spanner_types.Session.pb().FromString)
        return call(request, metadata=bearer(token))

    session = await create_session("queue_producer", SENDER)
    assert session.creator_role == "queue_producer"
    sender, ops = (RawSpanner(channel, bearer(t), session=session.name) for t in (SENDER, OPS))
    txn = await sender.begin()
    await sender.sql("INSERT INTO OrdersQueue (Id, Payload) VALUES (1, 'x')", txn)
    await sender.commit(txn=txn)
    # The role may SELECT, the token may not: refused in the token's words.
    code, message, _ = await error_of(sender.sql("SELECT Id FROM OrdersQueue"))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "token 'sender' lacks the 'select' privilege" in message
    # A token that may do everything, on a session of the role: the role's grants.
    assert await ops.sql("SELECT Id FROM OrdersQueue") == [["1"]]
    code, message, info = await error_of(ops.sql("SELECT * FROM RECEIVE_OrdersQueue()"))
    assert (code, message) == (grpc.StatusCode.PERMISSION_DENIED, "Role queue_producer does not have required "
                                                                   "privileges on table function RECEIVE_ordersqueue")
    assert "GRANT EXECUTE ON TABLE FUNCTION RECEIVE_ordersqueue TO ROLE queue_producer" in info["detail"]
    code, message, _ = await error_of(create_session("ghost", OPS))
    assert (code, message) == (grpc.StatusCode.PERMISSION_DENIED, "Role not found: ghost")
    # A role spans its database: CREATE ROLE needs admin on every queue; GRANT, admin on what it names;
    # a proto bundle spans it too.
    for statement in ("CREATE ROLE other", "GRANT SELECT ON QUEUE OrdersQueue TO ROLE queue_producer",
                      "DROP PROTO BUNDLE"):
        request = dba.UpdateDatabaseDdlRequest.pb()(database=database, statements=[statement])
        call = channel.unary_unary("/google.spanner.admin.database.v1.DatabaseAdmin/UpdateDatabaseDdl",
                                   request_serializer=type(request).SerializeToString,
                                   response_deserializer=operations_pb2.Operation.FromString)
        code, message, _ = await error_of(call(request, metadata=bearer(SENDER)))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "'admin' privilege" in message, statement


async def test_getdatabaseddl_shows_every_token_the_proto_bundle_beside_the_queues_it_may_see(channel) -> None:  # type: ignore[no-untyped-def]
    """A bundle's types are the schema of every column, no queue's data: a token that sees only some
    queues' DDL still gets the bundle and its descriptors (the DDL to make again what it sees)."""
    from .test_spanner_protos import BUNDLE, DESCRIPTORS, ORDERS

    request = dba.CreateDatabaseRequest.pb()(parent=INSTANCE, create_statement="CREATE DATABASE shipping",
                                             extra_statements=[BUNDLE, ORDERS.replace("Orders", "OrdersQueue"),
                                                               ORDERS.replace("Orders", "Hidden")],
                                             proto_descriptors=DESCRIPTORS)
    create = channel.unary_unary("/google.spanner.admin.database.v1.DatabaseAdmin/CreateDatabase",
                                 request_serializer=type(request).SerializeToString,
                                 response_deserializer=operations_pb2.Operation.FromString)
    operation = await create(request, metadata=bearer(OPS))
    assert not operation.HasField("error"), operation.error
    ddl = dba.GetDatabaseDdlRequest.pb()(database=f"{INSTANCE}/databases/shipping")
    call = channel.unary_unary("/google.spanner.admin.database.v1.DatabaseAdmin/GetDatabaseDdl",
                               request_serializer=type(ddl).SerializeToString,
                               response_deserializer=dba.GetDatabaseDdlResponse.pb().FromString)
    seen = await call(ddl, metadata=bearer(SENDER))  # the sender's one queue: ordersqueue
    assert [s.split(" (")[0] for s in seen.statements] == ["CREATE PROTO BUNDLE", "CREATE QUEUE OrdersQueue"]
    assert seen.proto_descriptors == DESCRIPTORS
