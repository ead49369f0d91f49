"""Databases' namespaces do not reach each other, and DropDatabase is all or nothing (issue 21),
with the real google-cloud-spanner client against a real server and PostgreSQL.

A database CreateDatabase made keeps its tables and queues under its prefix (``d1_secret``);
a database name no CreateDatabase made is the default namespace, which reached them by those
PostgreSQL names: it read, wrote and interleaved into them, and a DropDatabase of the owner
then failed having dropped its queue already.
"""

from typing import Any

import psycopg
import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1 import KeySet

from spanq_proto.v1 import queue_pb2

from .test_spanner_tables import INSTANCE, PROJECT, make_database, run, spanner_env  # noqa: F401  (a fixture)

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

SECRET = "CREATE TABLE Secret (Id INT64 NOT NULL, Code STRING(MAX)) PRIMARY KEY (Id)"
INBOX = "CREATE QUEUE Inbox (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)"


def namespace_of(sql: psycopg.Connection, database_id: str) -> str:
    (namespace,) = sql.execute("SELECT namespace FROM spanq.spanner_databases WHERE name LIKE %s",
                               (f"%/{database_id}",)).fetchone()
    return str(namespace)


def everything(sql: psycopg.Connection, ns: str) -> tuple[Any, ...]:
    """What database ``ns`` holds, as psql sees it: its rows, messages, registry and tables."""
    return (sql.execute(f"SELECT id, code FROM {ns}secret ORDER BY id").fetchall(),
            sql.execute(f"SELECT id, payload FROM {ns}inbox ORDER BY id").fetchall(),
            sql.execute("SELECT name, kind, database FROM spanq.spanner_tables ORDER BY name").fetchall(),
            sql.execute("SELECT name FROM spanq.queues ORDER BY name").fetchall(),
            sql.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1").fetchall())


def owner(sql: psycopg.Connection) -> tuple[Any, str]:
    """Database ``owner`` with a table Secret of one row and a queue Inbox of one message."""
    database = make_database("owner", [SECRET, INBOX])

    def fill(txn: Any) -> None:
        txn.execute_update("INSERT INTO Secret (Id, Code) VALUES (1, 'hunter2')")
        txn.execute_update("INSERT INTO Inbox (Id, Payload) VALUES (1, 'for the owner')")

    database.run_in_transaction(fill)
    return database, namespace_of(sql, "owner")


async def test_the_default_namespace_does_not_reach_a_created_databases_tables_or_queues(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> list[tuple[str, type, str]]:
        database, ns = owner(sql)
        before = everything(sql, ns)
        # A name no CreateDatabase made: the default namespace.
        other = spanner.Client(project=PROJECT).instance(INSTANCE).database("never-created")
        secret, inbox = f"{ns}secret", f"{ns}inbox"
        refused: list[tuple[str, type, str]] = []

        def refuses(what: str, error: type, fn: Any) -> None:
            with pytest.raises(exceptions.GoogleAPICallError) as caught:
                fn()
            assert isinstance(caught.value, error), (what, caught.value)
            assert "hunter2" not in caught.value.message and "for the owner" not in caught.value.message
            refused.append((what, type(caught.value), caught.value.message[:100]))

        def query(text: str) -> Any:
            with other.snapshot() as snapshot:
                return list(snapshot.execute_sql(text))

        def read(table: str) -> Any:
            with other.snapshot() as snapshot:
                return list(snapshot.read(table, ("Id",), KeySet(all_=True)))

        def dml(text: str) -> Any:
            return other.run_in_transaction(lambda txn: txn.execute_update(text))

        def mutate(kind: str, table: str) -> None:
            with other.batch() as batch:
                if kind == "delete":
                    batch.delete(table, KeySet(keys=[[1]]))
                else:
                    getattr(batch, kind)(table, ("Id", "Code"), [(1, "pwned")])

        def ddl(text: str) -> None:
            other.update_ddl([text]).result(timeout=30)

        refuses("SELECT *", exceptions.NotFound, lambda: query(f"SELECT * FROM {secret}"))
        refuses("SELECT a column", exceptions.NotFound, lambda: query(f"SELECT Code FROM {secret} WHERE Id = 1"))
        refuses("a join", exceptions.InvalidArgument,
                lambda: query(f"SELECT s.Code FROM {secret} AS s JOIN {inbox} AS i ON s.Id = i.Id"))
        refuses("Read", exceptions.NotFound, lambda: read(secret))
        refuses("SELECT the queue", exceptions.NotFound, lambda: query(f"SELECT * FROM {inbox}"))
        # Spanner's analyzer finds no such table function (tests/spanner/test_spanner_node.py).
        refuses("RECEIVE", exceptions.InvalidArgument, lambda: query(f"SELECT * FROM RECEIVE_{inbox}()"))
        refuses("INSERT", exceptions.NotFound, lambda: dml(f"INSERT INTO {secret} (Id, Code) VALUES (2, 'x')"))
        refuses("UPDATE", exceptions.InvalidArgument, lambda: dml(f"UPDATE {secret} SET Code = 'x' WHERE true"))
        refuses("DELETE", exceptions.InvalidArgument, lambda: dml(f"DELETE FROM {secret} WHERE true"))
        refuses("a send", exceptions.NotFound, lambda: dml(f"INSERT INTO {inbox} (Id, Payload) VALUES (2, 'x')"))
        refuses("an ack", exceptions.NotFound, lambda: dml(f"DELETE FROM {inbox} WHERE Id = 1"))
        for kind in ("insert", "update", "insert_or_update", "replace", "delete"):
            refuses(f"a {kind} mutation", exceptions.NotFound, lambda: mutate(kind, secret))
        refuses("a delete of a message", exceptions.NotFound, lambda: mutate("delete", inbox))
        refuses("a table interleaved in it", exceptions.NotFound, lambda: ddl(
            f"CREATE TABLE Child (Id INT64 NOT NULL, N INT64 NOT NULL) PRIMARY KEY (Id, N), "
            f"INTERLEAVE IN PARENT {secret} ON DELETE CASCADE"))
        refuses("a queue interleaved in it", exceptions.InvalidArgument, lambda: ddl(
            f"CREATE QUEUE Child (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), "
            f"INTERLEAVE IN PARENT {secret} ON DELETE CASCADE"))
        refuses("an index on it", exceptions.NotFound, lambda: ddl(f"CREATE INDEX Codes ON {secret} (Code)"))
        refuses("DROP TABLE", exceptions.NotFound, lambda: ddl(f"DROP TABLE {secret}"))
        refuses("DROP QUEUE", exceptions.NotFound, lambda: ddl(f"DROP QUEUE {inbox}"))
        refuses("a table in its namespace", exceptions.InvalidArgument, lambda: ddl(
            f"CREATE TABLE {ns}other (Id INT64 NOT NULL) PRIMARY KEY (Id)"))
        refuses("a queue in its namespace", exceptions.InvalidArgument, lambda: ddl(
            f"CREATE QUEUE {ns}other (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)"))
        assert everything(sql, ns) == before
        # The default namespace's own tables still work, and the owner still reads its own.
        ddl("CREATE TABLE Plain (Id INT64 NOT NULL) PRIMARY KEY (Id)")
        dml("INSERT INTO Plain (Id) VALUES (7)")
        assert query("SELECT Id FROM Plain") == [[7]]
        with database.snapshot() as snapshot:
            assert list(snapshot.execute_sql("SELECT Id, Code FROM Secret")) == [[1, "hunter2"]]
        # And the owner drops whole.
        database.drop()
        assert sql.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE %s", (f"{ns}%",)).fetchone() == (0,)
        return refused

    refused = await run(scenario)
    assert len(refused) == 24


def secret_rows(database: Any) -> list[Any]:
    with database.snapshot() as snapshot:
        return list(snapshot.execute_sql("SELECT Id, Code FROM Secret"))


async def test_drop_database_drops_nothing_while_something_outside_depends_on_it(spanner_env, sql, stub) -> None:  # type: ignore[no-untyped-def]
    """The issue's case (a table of another namespace interleaved in the database's), by the
    ways that remain (psql, spanq.v1): FAILED_PRECONDITION naming it, nothing dropped; once it
    is gone, the drop goes through."""
    database, ns = await run(lambda: owner(sql))
    sql.execute(f"CREATE TABLE elsewhere_child (id bigint REFERENCES {ns}secret (id))")
    before = everything(sql, ns)
    for dependent, undo in [("elsewhere_child", "DROP TABLE elsewhere_child"),
                            ("elsewhere_view", "DROP VIEW elsewhere_view"),
                            ("elsewhere_jobs", None)]:
        if dependent == "elsewhere_view":
            sql.execute(f"CREATE VIEW elsewhere_view AS SELECT code FROM {ns}secret")
        if dependent == "elsewhere_jobs":  # a spanq.v1 queue whose dead-letter queue is the database's
            await stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
                name="elsewhere_jobs", payload_type=queue_pb2.STRING, max_delivery_attempts=3,
                dead_letter_queue=f"{ns}inbox", key_columns=[queue_pb2.KeyColumn(name="id", type=queue_pb2.INT64)])))
            before = everything(sql, ns)
        with pytest.raises(exceptions.FailedPrecondition) as caught:
            await run(database.drop)
        message = caught.value.message
        assert dependent in message and "Nothing was dropped" in message, message
        assert everything(sql, ns) == before
        if dependent == "elsewhere_child":  # DeleteInstance checks first too
            with pytest.raises(exceptions.FailedPrecondition, match="elsewhere_child"):
                await run(spanner.Client(project=PROJECT).instance(INSTANCE).delete)
            assert everything(sql, ns) == before
        assert await run(database.exists)
        assert await run(lambda: secret_rows(database)) == [[1, "hunter2"]]
        if undo:
            sql.execute(undo)
            before = everything(sql, ns)
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="elsewhere_jobs"))
    await run(database.drop)
    assert not await run(database.exists)
    assert sql.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE %s", (f"{ns}%",)).fetchone() == (0,)
    assert sql.execute("SELECT count(*) FROM spanq.queues WHERE name LIKE %s", (f"{ns}%",)).fetchone() == (0,)
