"""The Spanner front-end's statement limits (issue 21), through raw google.spanner.v1 calls on a
real server and PostgreSQL: a statement past its length, token or nesting limit is INVALID_ARGUMENT
naming the limit and refused at once, other calls answer while the largest statements within them
are read, a mutation of more values than PostgreSQL binds in one statement is written whole,
ORDER BY takes positions, and names PostgreSQL reserves or truncates are refused or mapped."""

import asyncio
import statistics
import time
from typing import Any

import grpc
import pytest
from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as dba
from google.cloud.spanner_v1.types import commit_response, keys, mutation, result_set, spanner
from google.longrunning import operations_pb2
from google.protobuf import struct_pb2

from spanq_proto.v1 import queue_pb2
from spanq_server.spanner.query.lexing import MAX_DEPTH, MAX_STATEMENT_LENGTH, MAX_TOKENS

from ..helpers import error_of

DATABASE = "projects/p/instances/i/databases/lim"
SESSION = f"{DATABASE}/sessions/s1"
INVALID = grpc.StatusCode.INVALID_ARGUMENT
USERS = ("CREATE TABLE Users (UserId INT64 NOT NULL, Name STRING(MAX), Score INT64) PRIMARY KEY (UserId)")
PAIRS = "CREATE TABLE Pairs (A INT64 NOT NULL, B INT64 NOT NULL, C STRING(MAX)) PRIMARY KEY (A, B)"
INBOX = "CREATE QUEUE Inbox (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)"
ROWS = [(1, "carol", 30), (2, "alice", 10), (3, "bob", 20)]


class Raw:
    """google.spanner.v1 and DatabaseAdmin over a channel: the calls these tests make."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        def unary(service: str, name: str, request: Any, response: Any) -> Any:
            return channel.unary_unary(f"/{service}/{name}", request_serializer=request.SerializeToString,
                                       response_deserializer=response.FromString)

        spanner_v1 = "google.spanner.v1.Spanner"
        self._execute = unary(spanner_v1, "ExecuteSql", spanner.ExecuteSqlRequest.pb(), result_set.ResultSet.pb())
        self._commit = unary(spanner_v1, "Commit", spanner.CommitRequest.pb(), commit_response.CommitResponse.pb())
        self._read = unary(spanner_v1, "Read", spanner.ReadRequest.pb(), result_set.ResultSet.pb())
        self._session = unary(spanner_v1, "GetSession", spanner.GetSessionRequest.pb(), spanner.Session.pb())
        admin = "google.spanner.admin.database.v1.DatabaseAdmin"
        self._create = unary(admin, "CreateDatabase", dba.CreateDatabaseRequest.pb(), operations_pb2.Operation)
        self._ddl = unary(admin, "UpdateDatabaseDdl", dba.UpdateDatabaseDdlRequest.pb(), operations_pb2.Operation)

    async def create(self, *ddl: str) -> None:
        request = dba.CreateDatabaseRequest.pb()(parent="projects/p/instances/i", create_statement="CREATE DATABASE lim",
                                                 extra_statements=list(ddl))
        operation = await self._create(request)
        assert not operation.HasField("error"), operation.error

    async def ddl(self, *statements: str) -> Any:
        """UpdateDatabaseDdl's operation (its ``error`` says how the DDL failed)."""
        return await self._ddl(dba.UpdateDatabaseDdlRequest.pb()(database=DATABASE, statements=list(statements)))

    async def sql(self, text: str, **params: struct_pb2.Value) -> list[list[Any]]:
        """One statement in a single-use transaction (DML: a read-write one, committed); its rows as plain
        values."""
        request = spanner.ExecuteSqlRequest.pb()(session=SESSION, sql=text)
        if text.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
            request.transaction.begin.read_write.SetInParent()
        for name, v in params.items():
            request.params.fields[name].CopyFrom(v)
        reply = await self._execute(request)
        if request.transaction.HasField("begin"):
            await self._commit(spanner.CommitRequest.pb()(session=SESSION, transaction_id=reply.metadata.transaction.id))
        return [[_plain(v) for v in row.values] for row in reply.rows]

    async def commit(self, *mutations: Any) -> Any:
        request = spanner.CommitRequest.pb()(session=SESSION, mutations=list(mutations))
        request.single_use_transaction.read_write.SetInParent()
        return await self._commit(request)

    async def read(self, table: str, columns: list[str], key_set: Any) -> list[list[Any]]:
        request = spanner.ReadRequest.pb()(session=SESSION, table=table, columns=columns, key_set=key_set)
        return [[_plain(v) for v in row.values] for row in (await self._read(request)).rows]

    async def get_session(self) -> Any:
        return await self._session(spanner.GetSessionRequest.pb()(name=SESSION))


def _plain(v: struct_pb2.Value) -> Any:
    return getattr(v, v.WhichOneof("kind"))


def write(kind: str, table: str, columns: list[str], rows: list[list[Any]]) -> Any:
    m = mutation.Mutation.pb()()
    body = getattr(m, kind)
    body.table = table
    body.columns.extend(columns)
    for row in rows:
        body.values.add().values.extend(struct_pb2.Value(string_value=str(v)) if isinstance(v, int)
                                        else struct_pb2.Value(string_value=v) for v in row)
    return m


def key_set(*key_rows: list[int]) -> Any:
    out = keys.KeySet.pb()()
    for row in key_rows:
        out.keys.add().values.extend(struct_pb2.Value(string_value=str(v)) for v in row)
    return out


@pytest.fixture
async def raw(channel: grpc.aio.Channel, sql: Any) -> Raw:
    client = Raw(channel)
    await client.create(USERS, PAIRS, INBOX)
    await client.sql("INSERT INTO Users (UserId, Name, Score) VALUES " + ", ".join(f"({i}, '{n}', {s})"
                                                                                    for i, n, s in ROWS))
    return client


def stored(sql: Any) -> Any:
    """Everything the tests' statements could change: the tables' rows, the queue's messages and
    the registry of tables."""
    return (sql.execute("SELECT * FROM d1_users ORDER BY 1").fetchall(),
            sql.execute("SELECT * FROM d1_pairs ORDER BY 1, 2").fetchall(),
            sql.execute("SELECT id, payload FROM d1_inbox ORDER BY 1").fetchall(),
            sql.execute("SELECT name, definition FROM spanq.spanner_tables ORDER BY 1").fetchall())


# -- 1: past a limit, INVALID_ARGUMENT naming it, at once --------------------------------------

ORS = "SELECT Name FROM Users WHERE " + " OR ".join(["Score=1"] * 85_000)
"""The issue's 100,000 ORs in 0.9 MB, with this table's columns: 85,000 in 0.94 MB."""
PAST = [
    ("1,000,001 characters", "SELECT Name FROM Users WHERE Name = '" + "x" * MAX_STATEMENT_LENGTH + "'",
     "statement_length", "1,000,000 characters"),
    ("10 MiB", "UPDATE Users SET Name = '" + "x" * (10 << 20) + "' WHERE true", "statement_length",
     "1,000,000 characters"),
    ("1 MiB of (", "SELECT " + "(" * (1 << 20), "statement_length", "1,000,000 characters"),
    ("85,000 ORs (0.9 MB)", ORS, "statement_tokens", f"more than {MAX_TOKENS:,} tokens"),
    ("900,000 (", "SELECT " + "(" * 900_000, "statement_tokens", f"more than {MAX_TOKENS:,} tokens"),
    # The shapes are past the token limit before their depth; as deep, within it:
    ("10,000 parentheses", "SELECT Name FROM Users WHERE " + "(" * 10_000 + "true" + ")" * 10_000,
     "statement_tokens", f"more than {MAX_TOKENS:,} tokens"),
    ("1,000 parentheses", "SELECT Name FROM Users WHERE " + "(" * 1_000 + "true" + ")" * 1_000,
     "statement_depth", f"more than {MAX_DEPTH} levels"),
    ("10,000 NOTs", "DELETE FROM Users WHERE " + "NOT " * 10_000 + "false", "statement_tokens",
     f"more than {MAX_TOKENS:,} tokens"),
    ("1,000 NOTs", "DELETE FROM Users WHERE " + "NOT " * 1_000 + "false", "statement_depth",
     f"more than {MAX_DEPTH} levels"),
    ("5,000-term sum", "UPDATE Users SET Score = " + " + ".join(["1"] * 5_000) + " WHERE true", "statement_tokens",
     f"more than {MAX_TOKENS:,} tokens"),
    ("1,000-term sum", "UPDATE Users SET Score = " + " + ".join(["1"] * 1_000) + " WHERE true", "statement_depth",
     f"more than {MAX_DEPTH} levels"),
    ("76-term product", "UPDATE Users SET Score = " + " * ".join(["1"] * 77) + " WHERE true", "statement_depth",
     f"more than {MAX_DEPTH} levels"),
    ("nested arrays of a queue statement", "SELECT * FROM RENEWLEASE_Inbox(" + "[" * 1_000 + "]" * 1_000 + ")",
     "statement_depth", f"more than {MAX_DEPTH} levels"),
    ("a queue INSERT of 30,000 values", "INSERT INTO Inbox (Id, Payload) VALUES "
     + ", ".join(f"({i}, 'p')" for i in range(15_000)), "statement_tokens", f"more than {MAX_TOKENS:,} tokens"),
]


@pytest.mark.parametrize("text, limit, words", [p[1:] for p in PAST], ids=[p[0] for p in PAST])
async def test_a_statement_past_a_limit_is_invalid_argument_naming_it(raw: Raw, sql: Any, text: str, limit: str,
                                                                      words: str) -> None:
    before = stored(sql)
    began = time.monotonic()
    code, message, info = await error_of(raw.sql(text))
    took = time.monotonic() - began
    assert code == INVALID, (code, message[:300])
    assert words in message and info["limit"] == limit, message[:300]
    assert len(message) < 1000  # the error does not echo the statement
    assert stored(sql) == before
    assert took < 5, took  # refused having read no more than the limit (main: 85,000 ORs took seconds)


async def test_ddl_past_a_limit_is_refused_and_applies_nothing(raw: Raw, sql: Any) -> None:
    before = stored(sql)
    deep = "CREATE TABLE T (A INT64) PRIMARY KEY (A)" + " " * MAX_STATEMENT_LENGTH
    code, message, info = await error_of(raw.ddl("CREATE TABLE Fine (A INT64) PRIMARY KEY (A)", deep))
    assert code == INVALID and "1,000,000 characters" in message and info["limit"] == "statement_length"
    assert stored(sql) == before


async def test_statements_at_the_limits_run(raw: Raw, sql: Any) -> None:
    # As deep as allowed: 75 parentheses; a chain of 75 terms (74 operators) inside none.
    deep = "SELECT Name FROM Users WHERE " + "(" * MAX_DEPTH + "UserId = 2" + ")" * MAX_DEPTH
    assert await raw.sql(deep) == [["alice"]]
    chain = "SELECT UserId FROM Users WHERE UserId = " + " + ".join(["0"] * (MAX_DEPTH - 1)) + " + 3"
    assert await raw.sql(chain) == [["3"]]
    # The longest IN list within the token limit, and Spanner's longest (10,000 values) as an array parameter.
    listed = in_list(MAX_TOKENS).replace("IN (0, 1, ", "IN (2, ")
    assert sorted(await raw.sql(listed)) == [["alice"], ["bob"]]
    ids = struct_pb2.Value(list_value=struct_pb2.ListValue(values=[struct_pb2.Value(string_value=str(i))
                                                                   for i in range(2, 10_002)]))
    assert sorted(await raw.sql("SELECT Name FROM Users WHERE UserId IN UNNEST(@ids)", ids=ids)) == [["alice"], ["bob"]]
    # The longest statement: a literal of nearly a million characters, stored whole.
    prefix, suffix = "UPDATE Users SET Name = '", "' WHERE UserId = 1"
    name = "y" * (MAX_STATEMENT_LENGTH - len(prefix) - len(suffix))
    await raw.sql(prefix + name + suffix)
    assert sql.execute("SELECT length(name) FROM d1_users WHERE userid = 1").fetchone() == (len(name),)


# -- 1: other calls answer while the largest statements are read ------------------------------


def in_list(tokens: int) -> str:
    """A SELECT of about ``tokens`` tokens, most of them an IN list: the costliest statement within
    the limits to read and translate."""
    values = (tokens - 16) // 2
    return "SELECT Name FROM Users WHERE UserId IN (" + ", ".join(str(i) for i in range(values)) + ")"


async def test_other_calls_answer_while_the_largest_statements_are_read(raw: Raw, stub: Any, sql: Any,
                                                                        capsys: Any) -> None:
    await stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(name="small")))
    largest = in_list(MAX_TOKENS)
    assert len(await raw.sql(largest)) == 3  # within the limits: it runs
    hostile = [ORS, "SELECT '" + "x" * (10 << 20) + "'", largest, largest]
    stop = asyncio.Event()
    sent = {"hostile": 0}

    async def flood(text: str) -> None:
        while not stop.is_set():
            try:
                await raw.sql(text)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == INVALID, exc.code()
            sent["hostile"] += 1

    floods = [asyncio.create_task(flood(text)) for text in hostile]
    waits: list[float] = []
    try:
        for i in range(40):
            began = time.monotonic()
            if i % 2:
                await raw.get_session()
            else:
                await stub.GetQueue(queue_pb2.GetQueueRequest(name="small"))
            waits.append(time.monotonic() - began)
    finally:
        stop.set()
        await asyncio.gather(*floods)
    with capsys.disabled():
        print(f"\n  40 small calls beside 4 clients sending the largest statements ({sent['hostile']} sent): "
              f"median {statistics.median(waits) * 1000:.0f} ms, max {max(waits) * 1000:.0f} ms")
    assert sent["hostile"] >= 4
    assert max(waits) < 2.0, waits  # main: calls waited seconds behind the ORs


# -- 2: more values than PostgreSQL binds in one statement ------------------------------------


async def test_a_mutation_of_more_values_than_postgresql_binds_is_written_whole(raw: Raw, sql: Any) -> None:
    rows = [[i, i % 7, "i"] for i in range(21_846)]  # 65,538 values; PostgreSQL binds 65,535 in a statement
    await raw.commit(write("insert", "Pairs", ["A", "B", "C"], rows))
    assert sql.execute("SELECT count(*), sum(a) FROM d1_pairs WHERE c = 'i'").fetchone() == (21_846, sum(range(21_846)))
    await raw.commit(write("update", "Pairs", ["A", "B", "C"], [[a, b, "u"] for a, b, _ in rows]))
    assert sql.execute("SELECT count(*) FROM d1_pairs WHERE c = 'u'").fetchone() == (21_846,)
    # An Update of which one row is missing changes none, whichever of its statements meets it.
    missing = [[a, b, "x"] for a, b, _ in rows] + [[99_999, 0, "x"]]
    code, message, _ = await error_of(raw.commit(write("update", "Pairs", ["A", "B", "C"], missing)))
    assert code == grpc.StatusCode.NOT_FOUND and "not found" in message, message
    assert sql.execute("SELECT count(*) FROM d1_pairs WHERE c = 'u'").fetchone() == (21_846,)
    await raw.commit(write("replace", "Pairs", ["A", "B", "C"], [[a, b, "r"] for a, b, _ in rows]))
    assert sql.execute("SELECT count(*) FROM d1_pairs WHERE c = 'r'").fetchone() == (21_846,)
    delete = mutation.Mutation.pb()()
    delete.delete.table = "Pairs"
    delete.delete.key_set.CopyFrom(key_set(*[[i, i % 7] for i in range(33_000) if i != 7]))  # 65,998 values
    await raw.commit(delete)
    assert sql.execute("SELECT a, b, c FROM d1_pairs").fetchall() == [(7, 0, "r")]


async def test_a_read_of_more_keys_than_postgresql_binds_is_invalid_argument_naming_the_limit(raw: Raw,
                                                                                               sql: Any) -> None:
    code, message, info = await error_of(raw.read("Pairs", ["C"], key_set(*[[i, i] for i in range(40_000)])))
    assert code == INVALID and "80,000 values, more than the 65,535 PostgreSQL binds" in message, message
    assert info["limit"] == "statement_values"
    assert await raw.read("Users", ["Name"], key_set([2], [3])) == [["alice"], ["bob"]]


# -- 3: ORDER BY a position -----------------------------------------------------------------


async def test_order_by_takes_positions_and_aliases_after_a_star(raw: Raw) -> None:
    assert await raw.sql("SELECT UserId, Name FROM Users ORDER BY 2 DESC") == [["1", "carol"], ["3", "bob"],
                                                                                ["2", "alice"]]
    assert await raw.sql("SELECT Name, Score FROM Users ORDER BY 2") == [["alice", "10"], ["bob", "20"],
                                                                          ["carol", "30"]]
    assert await raw.sql("SELECT *, Score AS s FROM Users ORDER BY s DESC LIMIT 1") == [["1", "carol", "30", "30"]]
    for bad in ("SELECT UserId, Name FROM Users ORDER BY 3", "SELECT UserId FROM Users ORDER BY 0"):
        code, message, _ = await error_of(raw.sql(bad))
        assert code == INVALID and "a position in the SELECT list is 1 to" in message, message


# -- 4: client errors, not INTERNAL -------------------------------------------------------------


async def test_a_negative_limit_or_offset_parameter_is_invalid_argument(raw: Raw) -> None:
    for clause in ("LIMIT @n", "LIMIT 1 OFFSET @n"):
        code, message, _ = await error_of(raw.sql(f"SELECT Name FROM Users {clause}",
                                                  n=struct_pb2.Value(string_value="-1")))
        assert code == INVALID and "negative" in message, (clause, code, message)
    assert await raw.sql("SELECT Name FROM Users ORDER BY 1 LIMIT @n OFFSET @m", n=struct_pb2.Value(string_value="1"),
                         m=struct_pb2.Value(string_value="1")) == [["bob"]]


async def test_aliases_equal_in_their_first_63_bytes_are_two_relations(raw: Raw) -> None:
    a, b = "a" * 63 + "1", "a" * 63 + "2"
    text = (f"SELECT {a}.Name, {b}.Name FROM Users AS {a} JOIN Users AS {b} ON {b}.UserId = {a}.UserId + 1 "
            f"ORDER BY {a}.UserId")
    assert await raw.sql(text) == [["carol", "alice"], ["alice", "bob"]]
    long = "é" * 40  # 80 bytes
    assert await raw.sql(f"SELECT `{long}`.Name FROM Users `{long}` WHERE `{long}`.UserId = 3") == [["bob"]]
    assert await raw.sql(f"UPDATE Users `{long}` SET Score = `{long}`.Score + 1 WHERE `{long}`.UserId = 3") == []


@pytest.mark.parametrize("columns, words", [
    ("A INT64, ctid INT64", "'ctid' has the name of a PostgreSQL system column"),
    ("A INT64, XMin STRING(MAX)", "'XMin' has the name of a PostgreSQL system column"),
    (f"A INT64, {'c' * 63}x INT64, {'c' * 63}y INT64", "are equal in their first 63 bytes"),
])
async def test_column_names_postgresql_reserves_or_truncates_are_refused(raw: Raw, sql: Any, columns: str,
                                                                          words: str) -> None:
    before = stored(sql)
    operation = await raw.ddl(f"CREATE TABLE T ({columns}) PRIMARY KEY (A)")
    assert operation.error.code == INVALID.value[0] and words in operation.error.message, operation.error
    assert stored(sql) == before
    assert sql.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'd1_t'").fetchone() == (0,)
