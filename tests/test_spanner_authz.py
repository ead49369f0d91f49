"""Authorization reads a Spanner statement as the one parse that runs, in its database's
dialect (issue 21, the HIGH item): a real server with a token file, raw google.spanner.v1
calls, tables and queues in the default namespace, in a GoogleSQL database and in a
PostgreSQL-dialect database made by CreateDatabase; and a property test whose generated
statements mix both dialects' comments, quotes, escapes and parameters."""

import dataclasses
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.cloud.spanner_admin_database_v1.types import common as dba_common
from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as dba
from google.longrunning import operations_pb2

from spanq_server import auth
from spanq_server.config import Config

from .helpers import error_of, spanner_ddl
from .test_spanner_hardening import RawSpanner

OPS, READER, ACKER = "tok-ops", "tok-reader", "tok-acker"
TOKENS = f"""
[tokens.ops]
sha256 = "{auth.digest(OPS)}"
grants = {{ "*" = ["admin", "select", "send", "receive", "ack", "update"] }}

[tokens.reader]
sha256 = "{auth.digest(READER)}"
grants = {{ adv_ta = ["select"], adv_qa = ["select"] }}

[tokens.acker]
sha256 = "{auth.digest(ACKER)}"
grants = {{ t = ["ack"], qt = ["ack"] }}
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


async def test_ddl_is_authorized_as_its_database_reads_it(channel) -> None:
    """CreateDatabase's and UpdateDatabaseDdl's statements too: in the dialect of the database."""
    reader = bearer(READER)
    code, message, info = await error_of(create_database(channel, "theirs", GOOGLESQL_DDL[:1], token=READER))
    assert code == grpc.StatusCode.PERMISSION_DENIED and message.startswith("extra statement 0: "), message
    assert info["privilege"] == "admin" and info["queue"] == "adv_ta"
    code, message, _ = await error_of(spanner_ddl(channel, "DROP TABLE adv_tsecret", metadata=reader))
    assert code == grpc.StatusCode.PERMISSION_DENIED and message.startswith("statement 0: "), message



async def test_each_statement_is_parsed_once_in_its_databases_dialect(channel, monkeypatch) -> None:
    """Authorization reads no other parse than the one that runs: no reading in the other dialect."""
    from spanq_server.spanner import googlesql, statements

    await populate(channel, MADE)
    await populate(channel, PG)
    parses: list[tuple[str, bool]] = []
    queue_parse, table_parse = statements.parse, googlesql.parse

    def queue_parsed(text: str, pg: bool = False) -> Any:
        parses.append(("queue", pg))
        return queue_parse(text, pg)

    def table_parsed(text: str) -> Any:
        parses.append(("table", False))
        return table_parse(text)

    monkeypatch.setattr(statements, "parse", queue_parsed)
    monkeypatch.setattr(googlesql, "parse", table_parsed)
    reader = as_token(channel, READER, MADE)
    assert await reader.sql("SELECT Name FROM adv_ta WHERE Id = 1") == [["visible"]]
    assert parses == [("queue", False), ("table", False)]  # the queue surface's, then the table subset's
    parses.clear()
    assert await reader.sql("SELECT Payload FROM adv_qa") == [["visible"]]
    assert parses == [("queue", False)]
    parses.clear()
    assert await as_token(channel, READER, PG).sql("SELECT payload FROM adv_qa") == [["visible"]]
    assert parses == [("queue", True)]
