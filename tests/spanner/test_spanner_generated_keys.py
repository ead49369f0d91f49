"""Generated key columns (`ShardId INT64 AS (MOD(ABS(FARM_FINGERPRINT(MessageId)), 16)) STORED
[HIDDEN]`, the GA queue DDL's way to shard a hot key) through Google's Python client, spanq.v1
and psql, against a real server and PostgreSQL: sends give the other key columns and the
database computes the shard as Spanner does (FarmHash Fingerprint64, checked against an
independent implementation); RECEIVE, acks and GetDatabaseDdl see the whole key; a write that
names the generated column is Spanner's FAILED_PRECONDITION, with nothing stored."""

import base64
from typing import Any

import farmhash  # type: ignore[import-untyped]  # pyfarmhash: FarmHash's own C++, the oracle
import grpc
import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.protobuf import struct_pb2

import spanq.aio
import spanq.sql
from spanq_proto.v1 import queue_pb2

from . import conftest
from .conftest import ddl_of, run

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

PROJECT, INSTANCE = "gen-project", "gen-instance"
TASKS = """CREATE QUEUE Tasks (
  ShardId INT64 AS (MOD(ABS(FARM_FINGERPRINT(MessageId)), 16)) STORED HIDDEN,
  MessageId STRING(36) NOT NULL,
  Payload BYTES(MAX) NOT NULL
) PRIMARY KEY (ShardId, MessageId)"""
LISTED = ("CREATE QUEUE Tasks (\n  ShardId INT64 AS (MOD(ABS(FARM_FINGERPRINT(MessageId)), 16)) STORED HIDDEN,\n"
          "  MessageId STRING(36) NOT NULL,\n  Payload BYTES(MAX) NOT NULL\n) PRIMARY KEY (ShardId, MessageId)")
"""TASKS as GetDatabaseDdl lists it."""
JOBS = ("CREATE QUEUE Jobs (Kind STRING(20) NOT NULL, Bucket STRING(MAX) NOT NULL AS (LOWER(Kind) || '-' || "
        "CAST(MOD(Id, 4) AS STRING)) STORED, Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) "
        "PRIMARY KEY (Kind, Bucket, Id)")
"""A generated column between two others, not hidden, of STRING, LOWER, || and CAST."""


def fingerprint(data: str | bytes) -> int:
    """Spanner's FARM_FINGERPRINT: Fingerprint64 as a signed INT64."""
    unsigned = farmhash.fingerprint64(data)
    return unsigned - 2**64 if unsigned >= 2**63 else unsigned


def shard(message_id: str) -> int:
    return abs(fingerprint(message_id)) % 16


def make_database(database_id: str, ddl: list[str]) -> Any:
    return conftest.make_database(PROJECT, INSTANCE, database_id, ddl)


def receive(database: Any, columns: str) -> tuple[list[str], list[Any]]:
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(f"SELECT {columns} FROM RECEIVE_Tasks(max_duration => '1s')")
        rows = list(results)
        return [f.name for f in results.fields], rows


async def test_sends_give_the_other_key_columns_and_the_database_computes_the_shard(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "sharded", [TASKS, JOBS])
    listed = await run(ddl_of, database)
    assert listed[1] == LISTED
    assert listed[0] == ("CREATE QUEUE Jobs (\n  Kind STRING(20) NOT NULL,\n  Bucket STRING(MAX) NOT NULL AS "
                         "((LOWER(Kind) || '-') || CAST(MOD(Id, 4) AS STRING)) STORED,\n  Id INT64 NOT NULL,\n"
                         "  Payload STRING(MAX) NOT NULL\n) PRIMARY KEY (Kind, Bucket, Id)")
    # The listed DDL is DDL spanq reads back: IF NOT EXISTS of each is a no-op.
    await run(lambda: database.update_ddl([s.replace("CREATE QUEUE", "CREATE QUEUE IF NOT EXISTS")
                                           for s in listed]).result(timeout=30))
    assert await run(ddl_of, database) == listed

    def send() -> None:
        with database.batch() as batch:  # a Send mutation's key: the columns that are not generated
            batch.send(queue="Tasks", key=["m-1"], payload=base64.b64encode(b"one"))
            batch.send(queue="Jobs", key=["Mail", 7], payload="mail 7")
        database.run_in_transaction(lambda t: t.execute_update(
            "INSERT INTO Tasks (MessageId, Payload) VALUES ('m-2', b'two'), (@id, b'three')",
            params={"id": "m-3"}, param_types={"id": spanner.param_types.STRING}))

    await run(send)
    sql.execute("INSERT INTO d1_tasks (messageid, payload) VALUES ('m-4', 'four')")  # psql: computed too
    stored = sql.execute("SELECT shardid, messageid FROM d1_tasks ORDER BY messageid").fetchall()
    assert stored == [(shard(m), m) for m in ("m-1", "m-2", "m-3", "m-4")]
    assert len({s for s, _ in stored}) > 1  # the sample spreads over shards
    assert sql.execute("SELECT kind, bucket, id FROM d1_jobs").fetchall() == [("Mail", "mail-3", 7)]

    # RECEIVE returns the whole key: the hidden shard when named, as HIDDEN does.
    fields, rows = await run(receive, database, "*")
    assert fields[:2] == ["MessageId", "Payload"] and "ShardId" not in fields
    assert sorted(r[0] for r in rows) == ["m-1", "m-2", "m-3", "m-4"]
    sql.execute("UPDATE d1_tasks SET deliver_time = now()")  # leased: deliverable again now

    def receive_and_ack() -> list[Any]:
        _, rows = receive(database, "ShardId, MessageId, Payload")
        by_id = {r[1]: r for r in rows}
        with database.batch() as batch:  # an Ack names the whole key as RECEIVE returned it
            batch.ack(queue="Tasks", key=[by_id["m-1"][0], "m-1"])
        database.run_in_transaction(lambda t: t.execute_update(
            "DELETE FROM Tasks WHERE ShardId = @s AND MessageId = 'm-2' ASSERT_ROWS_MODIFIED 1",
            params={"s": by_id["m-2"][0]}, param_types={"s": spanner.param_types.INT64}))
        return rows

    rows = await run(receive_and_ack)
    assert sorted(((r[0], r[1]) for r in rows), key=lambda r: r[1]) == [(shard(m), m) for m in ("m-1", "m-2", "m-3", "m-4")]
    assert [r[0] for r in sql.execute("SELECT messageid FROM d1_tasks ORDER BY 1")] == ["m-3", "m-4"]


async def test_a_write_naming_the_generated_column_is_refused_with_nothing_stored(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "refusing", [TASKS])

    def send_whole_key() -> None:
        with database.batch() as batch:
            batch.send(queue="Tasks", key=[shard("m-1"), "m-1"], payload=base64.b64encode(b"x"))

    def insert_naming_it() -> None:
        database.run_in_transaction(lambda t: t.execute_update(
            "INSERT INTO Tasks (ShardId, MessageId, Payload) VALUES (3, 'm-2', b'x')"))

    for write in (send_whole_key, insert_naming_it):
        with pytest.raises(exceptions.FailedPrecondition, match="Cannot write into generated column `Tasks.ShardId`"):
            await run(write)
    with pytest.raises(exceptions.InvalidArgument, match="1 key column"):
        await run(lambda: database.run_in_transaction(lambda t: t.send(
            queue="Tasks", key=["m-3", "extra", "values"], payload=base64.b64encode(b"x"))))
    assert sql.execute("SELECT count(*) FROM d1_tasks").fetchone() == (0,)
    # INSERT ... THEN RETURN gives the computed column.
    returned = await run(lambda: database.run_in_transaction(lambda t: list(t.execute_sql(
        "INSERT INTO Tasks (MessageId, Payload) VALUES ('m-5', b'five') THEN RETURN ShardId, MessageId"))))
    assert returned == [[shard("m-5"), "m-5"]]


@pytest.mark.parametrize("expression,words", [
    ("UNIX_SECONDS(CURRENT_TIMESTAMP())", "the function UNIX_SECONDS()"),
    ("CURRENT_TIMESTAMP()", "not deterministic"),
    ("LENGTH(Payload)", "'Payload' is not a key column it can read"),
    ("MOD(LENGTH(MessageId), @shards)", "the parameter @shards"),
    ("LOWER(MessageId)", "the expression is STRING, the column INT64"),
    ("MOD(MessageId, 16)", "No matching signature for MOD(STRING, INT64)"),
    ("ABS(FARM_FINGERPRINT(MessageId)) / 16", "cannot read the statement"),
    ("SUBSTR(MessageId, 0, 1)", "positive INT64 literals"),
    ("CAST(FARM_FINGERPRINT(MessageId) AS TIMESTAMP)", "CAST of INT64 AS TIMESTAMP"),
])
async def test_an_expression_spanq_cannot_compute_alike_is_refused_naming_it(
        spanner_env, sql, expression: str, words: str) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "expressions", [])
    statement = TASKS.replace("MOD(ABS(FARM_FINGERPRINT(MessageId)), 16)", expression)
    with pytest.raises(exceptions.InvalidArgument, match=words.replace("(", r"\(").replace(")", r"\)")):
        await run(lambda: database.update_ddl([statement]).result(timeout=30))
    assert await run(ddl_of, database) == []
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone() == (0,)


async def test_farm_fingerprint_is_spanners_in_selects(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> list[Any]:
        database = make_database("fingerprints", [
            "CREATE TABLE Words (Id INT64 NOT NULL, Word STRING(MAX), Raw BYTES(MAX)) PRIMARY KEY (Id)"])
        with database.batch() as batch:
            batch.insert("Words", columns=("Id", "Word", "Raw"),
                         values=[(1, "1footrue", base64.b64encode(b"\xff\x00 bytes")), (2, "x" * 40, b"")])
        with database.snapshot() as snapshot:
            return list(snapshot.execute_sql(
                "SELECT Id, FARM_FINGERPRINT(Word), FARM_FINGERPRINT(Raw), FARM_FINGERPRINT(Word || '!') "
                "FROM Words ORDER BY Id"))

    rows = await run(scenario)
    # Spanner's documented example: FARM_FINGERPRINT('1footrue') = -1541654101129638711.
    assert rows[0][1] == -1541654101129638711
    assert rows == [[1, fingerprint("1footrue"), fingerprint(b"\xff\x00 bytes"), fingerprint("1footrue!")],
                    [2, fingerprint("x" * 40), fingerprint(b""), fingerprint("x" * 40 + "!")]]


async def test_spanq_v1_shows_the_generated_column_and_sends_compute_it(spanner_env, server, stub, sql) -> None:  # type: ignore[no-untyped-def]
    await run(make_database, "v1", [TASKS])
    queue = await stub.GetQueue(queue_pb2.GetQueueRequest(name="d1_tasks"))
    assert [(c.name, c.generated_as) for c in queue.key_columns] == [
        ("shardid", "MOD(ABS(FARM_FINGERPRINT(MessageId)), 16)"), ("messageid", "")]

    def key(*values: Any) -> struct_pb2.ListValue:
        out = struct_pb2.ListValue()
        out.extend(values)
        return out

    sent = await stub.Send(queue_pb2.SendRequest(queue="d1_tasks", request_id="gen-1", messages=[
        queue_pb2.SendMessage(key=key("m-1"), payload=struct_pb2.Value(string_value="b25l")),
        queue_pb2.SendMessage(key=key("m-2"), payload=struct_pb2.Value(string_value="dHdv"))]))
    assert [list(k.values) for k in sent.keys] == [
        [struct_pb2.Value(string_value=str(shard(m))), struct_pb2.Value(string_value=m)] for m in ("m-1", "m-2")]
    # A replay answers the same whole keys from the commit ledger.
    again = await stub.Send(queue_pb2.SendRequest(queue="d1_tasks", request_id="gen-1", messages=[
        queue_pb2.SendMessage(key=key("m-1"), payload=struct_pb2.Value(string_value="b25l")),
        queue_pb2.SendMessage(key=key("m-2"), payload=struct_pb2.Value(string_value="dHdv"))]))
    assert again.replayed and list(again.keys) == list(sent.keys)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Send(queue_pb2.SendRequest(queue="d1_tasks", request_id="gen-2", messages=[
            queue_pb2.SendMessage(key=key("3", "m-3"), payload=struct_pb2.Value(string_value="eA=="))]))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "['shardid']" in (refused.value.details() or "") and "generated" in (refused.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as created:
        await stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
            name="own", key_columns=[queue_pb2.KeyColumn(name="s", type=queue_pb2.INT64, generated_as="1")])))
    assert created.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert sql.execute("SELECT messageid FROM d1_tasks ORDER BY 1").fetchall() == [("m-1",), ("m-2",)]
    # The SDK sends the other columns and returns the whole key.
    async with spanq.aio.Client(server.target) as client:
        assert await client.send("d1_tasks", b"four", key="m-4") == (shard("m-4"), "m-4")
        [column, _] = (await client.get_queue("d1_tasks")).key_columns
        assert column.generated_as == "MOD(ABS(FARM_FINGERPRINT(MessageId)), 16)"
    # The SDK's spanq.sql sends in the application's own transaction the same way.
    with sql.transaction():
        assert spanq.sql.send(sql, "d1_tasks", ("m-3",), b"three") == (shard("m-3"), "m-3")
    assert sql.execute("SELECT messageid, shardid FROM d1_tasks WHERE messageid > 'm-2' ORDER BY 1").fetchall() == [
        ("m-3", shard("m-3")), ("m-4", shard("m-4"))]


async def test_a_tables_generated_columns_are_computed_and_not_written(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    singers = ("CREATE TABLE Singers (SingerId INT64 NOT NULL, Name STRING(MAX), "
               "Bucket INT64 AS (MOD(ABS(FARM_FINGERPRINT(Name)), 10)) STORED, "
               "Shout STRING(MAX) AS (UPPER(Name) || '!') STORED) PRIMARY KEY (SingerId)")

    def scenario() -> dict[str, Any]:
        database = make_database("tables", [singers])
        with database.batch() as batch:
            batch.insert("Singers", columns=("SingerId", "Name"), values=[(1, "ada")])
        database.run_in_transaction(lambda t: t.execute_update(
            "INSERT INTO Singers (SingerId, Name) VALUES (2, 'bob')"))
        database.run_in_transaction(lambda t: t.execute_update("UPDATE Singers SET Name = 'eve' WHERE SingerId = 2"))
        def insert_mutation() -> None:
            with database.batch() as batch:
                batch.insert("Singers", columns=("SingerId", "Bucket"), values=[(3, 1)])

        refused = []
        for write in (insert_mutation,
                      lambda: database.run_in_transaction(lambda t: t.execute_update(
                          "INSERT INTO Singers (SingerId, Shout) VALUES (3, 'x')")),
                      lambda: database.run_in_transaction(lambda t: t.execute_update(
                          "UPDATE Singers SET Bucket = 1 WHERE SingerId = 1"))):
            try:
                write()
            except exceptions.FailedPrecondition as exc:
                refused.append(exc.message)
        database.update_ddl(["ALTER TABLE Singers ADD COLUMN Size INT64 AS (LENGTH(Name)) STORED"]).result(30)
        with database.snapshot() as snapshot:
            rows = list(snapshot.execute_sql("SELECT SingerId, Bucket, Shout, Size FROM Singers ORDER BY SingerId"))
        return {"rows": rows, "refused": refused, "ddl": ddl_of(database)}

    out = await run(scenario)
    assert out["rows"] == [[1, abs(fingerprint("ada")) % 10, "ADA!", 3], [2, abs(fingerprint("eve")) % 10, "EVE!", 3]]
    assert len(out["refused"]) == 3 and all("Cannot write into generated column `Singers." in m for m in out["refused"])
    assert out["ddl"] == ["CREATE TABLE Singers (\n  SingerId INT64 NOT NULL,\n  Name STRING(MAX),\n"
                          "  Bucket INT64 AS (MOD(ABS(FARM_FINGERPRINT(Name)), 10)) STORED,\n"
                          "  Shout STRING(MAX) AS (UPPER(Name) || '!') STORED,\n"
                          "  Size INT64 AS (LENGTH(Name)) STORED,\n) PRIMARY KEY(SingerId)"]
    assert sql.execute("SELECT count(*) FROM d1_singers").fetchone() == (2,)
