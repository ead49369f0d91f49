"""Spanner tables through the Spanner API (issue 13, item 3), with the real
google-cloud-spanner client against a real server and PostgreSQL: DDL,
mutations beside queue sends and acks in one commit, Read, DML, SELECT with
joins of a queue and a table, partitioned DML, and Spanner's error codes.
"""

import asyncio
import base64
import datetime
import decimal
import threading
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1 import KeyRange, KeySet, param_types
from google.cloud.spanner_v1.data_types import JsonObject

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

PROJECT, INSTANCE = "tables-project", "tables-instance"
USERS = """CREATE TABLE Users (
  UserId INT64 NOT NULL,
  Name STRING(100),
  Score FLOAT64,
  Balance NUMERIC,
  Avatar BYTES(MAX),
  Born DATE,
  Seen TIMESTAMP OPTIONS (allow_commit_timestamp = true),
  Active BOOL,
  Profile JSON,
  Tags ARRAY<STRING(MAX)>
) PRIMARY KEY (UserId)"""
ORDERS = """CREATE TABLE Orders (
  UserId INT64 NOT NULL,
  OrderId INT64 NOT NULL,
  Total INT64 NOT NULL
) PRIMARY KEY (UserId, OrderId), INTERLEAVE IN PARENT Users ON DELETE CASCADE"""
QUEUE = "CREATE QUEUE Inbox (UserId INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (UserId)"
INDEX = "CREATE INDEX UsersByName ON Users (Name)"


@pytest.fixture
def spanner_env(monkeypatch: pytest.MonkeyPatch, server: Any) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.target)


def make_database(database_id: str, ddl: list[str]) -> Any:
    instance = spanner.Client(project=PROJECT).instance(INSTANCE)
    if not instance.exists():
        instance.create().result(timeout=30)
    database = instance.database(database_id, ddl_statements=ddl)
    database.create().result(timeout=30)
    return database


def run(fn: Any) -> Any:
    return asyncio.to_thread(fn)


async def test_ddl_is_listed_as_declared_and_lands_in_the_namespace(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> list[str]:
        database = make_database("ddl", [USERS, ORDERS, INDEX, QUEUE])
        database.update_ddl(["CREATE UNIQUE INDEX OrdersByTotal ON Orders (Total DESC)",
                             "DROP INDEX OrdersByTotal"]).result(timeout=30)
        return list(database.list_database_ddl().statements) if hasattr(database, "list_database_ddl") else \
            list(spanner.Client(project=PROJECT).database_admin_api.get_database_ddl(
                database=database.name).statements)

    ddl = await run(scenario)
    assert ddl[0].startswith("CREATE TABLE Users (\n  UserId INT64 NOT NULL,\n  Name STRING(100),")
    assert "  Seen TIMESTAMP OPTIONS (allow_commit_timestamp = true)," in ddl[0]
    assert "  Tags ARRAY<STRING(MAX)>," in ddl[0]
    assert ddl[1].endswith("PRIMARY KEY(UserId, OrderId),\n  INTERLEAVE IN PARENT Users ON DELETE CASCADE")
    assert ddl[2] == "CREATE INDEX UsersByName ON Users(Name)"
    assert ddl[3].startswith("CREATE QUEUE Inbox")
    assert len(ddl) == 4
    # A psql user finds them in the namespace, with folded column names.
    (namespace,) = sql.execute("SELECT namespace FROM spanq.spanner_databases WHERE name LIKE '%/ddl'").fetchone()
    rows = sql.execute("SELECT kind, declared, name FROM spanq.spanner_tables ORDER BY created").fetchall()
    assert rows == [("table", "Users", f"{namespace}users"), ("table", "Orders", f"{namespace}orders"),
                    ("index", "UsersByName", f"{namespace}usersbyname")]
    assert sql.execute(f"SELECT count(*) FROM {namespace}users").fetchone() == (0,)


async def test_a_bad_ddl_batch_in_create_database_leaves_nothing(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> bool:
        with pytest.raises(exceptions.GoogleAPICallError, match="statement 2"):
            make_database("half", [USERS, QUEUE, "CREATE TABLE Bad (A INT64) PRIMARY KEY (Nope)"])
        return bool(spanner.Client(project=PROJECT).instance(INSTANCE).database("half").exists())

    assert await run(scenario) is False
    assert sql.execute("SELECT count(*) FROM spanq.spanner_tables").fetchone() == (0,)
    assert sql.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'd%users'").fetchone() == (0,)


async def test_unsupported_ddl_and_sql_is_invalid_argument_naming_it(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("bad", [USERS])
        for ddl, words in [("CREATE TABLE T (A INT64, B INTERVAL) PRIMARY KEY (A)", "INTERVAL"),
                           ("ALTER TABLE Users ALTER COLUMN Name STRING(10)", "ALTER")]:
            with pytest.raises(exceptions.InvalidArgument, match=words):
                database.update_ddl([ddl]).result(timeout=30)
        with database.snapshot() as snapshot:
            with pytest.raises(exceptions.InvalidArgument, match="EXCEPT"):
                list(snapshot.execute_sql("SELECT Name FROM Users EXCEPT DISTINCT SELECT Name FROM Users"))
        with database.snapshot() as snapshot:
            with pytest.raises(exceptions.InvalidArgument, match="Unrecognized name: Nope"):
                list(snapshot.execute_sql("SELECT Nope FROM Users"))

    await run(scenario)


async def test_mutations_insert_update_replace_delete_and_read(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("mutations", [USERS, ORDERS, INDEX])
        columns = ("UserId", "Name", "Score", "Balance", "Avatar", "Born", "Active", "Profile", "Tags")
        with database.batch() as batch:
            batch.insert("Users", columns, [
                (1, "Ada", 1.5, decimal.Decimal("10.25"), base64.b64encode(b"\x00\xff"), datetime.date(1815, 12, 10), True,
                 JsonObject({"a": 1}), ["x", "y"]),
                (2, "Bob", None, None, None, None, None, None, None),
                (3, "Cy", float("nan"), None, None, None, False, None, []),
            ])
            batch.insert("Orders", ("UserId", "OrderId", "Total"), [(1, 1, 10), (1, 2, 20), (2, 1, 5)])
        with database.snapshot() as snapshot:
            rows = list(snapshot.read("Users", columns, KeySet(keys=[[1]])))
        assert rows[0][:4] == [1, "Ada", 1.5, decimal.Decimal("10.25")]
        assert rows[0][4:7] == [base64.b64encode(b"\x00\xff"), datetime.date(1815, 12, 10), True]
        assert rows[0][7] == {"a": 1} and rows[0][8] == ["x", "y"]
        # A duplicate Insert is ALREADY_EXISTS; an Update of a missing row NOT_FOUND; nothing of either stored.
        with pytest.raises(exceptions.AlreadyExists):
            with database.batch() as batch:
                batch.insert("Users", ("UserId", "Name"), [(9, "new"), (1, "again")])
        with pytest.raises(exceptions.NotFound):
            with database.batch() as batch:
                batch.update("Users", ("UserId", "Name"), [(1, "changed"), (99, "nobody")])
        with pytest.raises(exceptions.NotFound):  # the parent row is missing
            with database.batch() as batch:
                batch.insert("Orders", ("UserId", "OrderId", "Total"), [(42, 1, 1)])
        with pytest.raises(exceptions.FailedPrecondition):  # NOT NULL
            with database.batch() as batch:
                batch.insert_or_update("Orders", ("UserId", "OrderId"), [(1, 7)])
        with database.batch() as batch:
            batch.update("Users", ("UserId", "Name"), [(2, "Bobby")])
            batch.insert_or_update("Users", ("UserId", "Name"), [(4, "Dee"), (1, "Ada L.")])
            batch.replace("Users", ("UserId", "Score"), [(3, 3.0)])
        with database.snapshot(multi_use=True) as snapshot:
            everyone = list(snapshot.read("Users", ("UserId", "Name", "Score"), KeySet(all_=True)))
            by_name = list(snapshot.read("Users", ("Name", "UserId"), KeySet(all_=True), index="UsersByName",
                                         limit=2))
            ranged = list(snapshot.read("Orders", ("UserId", "OrderId"), KeySet(ranges=[
                KeyRange(start_closed=[1], end_closed=[1])])))
            open_range = list(snapshot.read("Orders", ("UserId", "OrderId"), KeySet(ranges=[
                KeyRange(start_open=[1, 1], end_open=[2, 1])])))
        assert everyone == [[1, "Ada L.", 1.5], [2, "Bobby", None], [3, None, 3.0], [4, "Dee", None]]
        assert by_name == [["Ada L.", 1], ["Bobby", 2]]
        assert ranged == [[1, 1], [1, 2]] and open_range == [[1, 2]]
        with database.batch() as batch:
            batch.delete("Orders", KeySet(ranges=[KeyRange(start_closed=[1, 2], end_closed=[2])]))
            batch.delete("Users", KeySet(keys=[[4], [404]]))
        with database.snapshot(multi_use=True) as snapshot:
            assert list(snapshot.read("Orders", ("OrderId",), KeySet(all_=True))) == [[1]]
            assert [r[0] for r in snapshot.read("Users", ("UserId",), KeySet(all_=True))] == [1, 2, 3]
        with database.batch() as batch:  # ON DELETE CASCADE takes the orders with their user
            batch.delete("Users", KeySet(keys=[[1]]))
        with database.snapshot() as snapshot:
            assert list(snapshot.read("Orders", ("OrderId",), KeySet(all_=True))) == []

    await run(scenario)


async def test_a_business_row_and_a_queue_ack_commit_together_or_not_at_all(spanner_env) -> None:  # type: ignore[no-untyped-def]
    """The flow of Google's samples: a message received, a row written and the message acked in one commit."""
    def scenario() -> None:
        database = make_database("together", [USERS, QUEUE])
        with database.batch() as batch:
            batch.send(queue="Inbox", key=[7], payload="hello")
            batch.send(queue="Inbox", key=[8], payload="again")
        received = []
        with database.snapshot() as snapshot:
            for row in snapshot.execute_sql("SELECT UserId, Payload FROM RECEIVE_Inbox(max_duration => '1m')"):
                received.append(row[0])
                if len(received) == 2:
                    break  # RECEIVE reads on until max_duration
        assert sorted(received) == [7, 8]

        def handle(transaction: Any) -> None:
            transaction.insert("Users", ("UserId", "Name"), [(7, "hello")])
            transaction.ack(queue="Inbox", key=[7])

        database.run_in_transaction(handle)
        # A commit whose table write fails acks nothing.
        def failing(transaction: Any) -> None:
            transaction.insert("Users", ("UserId", "Name"), [(7, "duplicate")])
            transaction.ack(queue="Inbox", key=[8])

        with pytest.raises(exceptions.AlreadyExists):
            database.run_in_transaction(failing)
        with database.snapshot(multi_use=True) as snapshot:
            assert list(snapshot.read("Users", ("UserId", "Name"), KeySet(all_=True))) == [[7, "hello"]]
            assert list(snapshot.read("Inbox", ("UserId",), KeySet(all_=True))) == [[8]]
            joined = list(snapshot.execute_sql(
                "SELECT q.UserId, q.Payload, u.Name FROM Inbox AS q LEFT JOIN Users u ON u.UserId = q.UserId"))
        assert joined == [[8, "again", None]]

        # The same in DML, beside a send: an INSERT of a table and an INSERT into a queue in one transaction.
        def dml(transaction: Any) -> None:
            transaction.execute_update("INSERT INTO Users (UserId, Name) VALUES (@id, @name)",
                                       params={"id": 8, "name": "again"},
                                       param_types={"id": param_types.INT64, "name": param_types.STRING})
            transaction.execute_update("INSERT INTO Inbox (UserId, Payload) VALUES (9, 'next')")
            transaction.ack(queue="Inbox", key=[8])

        database.run_in_transaction(dml)
        with database.snapshot(multi_use=True) as snapshot:
            names = list(snapshot.execute_sql("SELECT Name FROM Users ORDER BY UserId"))
            inbox = list(snapshot.execute_sql("SELECT COUNT(*) AS n FROM Inbox WHERE UserId = 9"))
        assert names == [["hello"], ["again"]] and inbox == [[1]]

    await run(scenario)


async def test_conflicting_transactions_are_aborted_and_retried(spanner_env) -> None:  # type: ignore[no-untyped-def]
    """Two read-modify-write transactions on one row: Spanner's locks make one ABORTED; the client
    runs it again, and no increment is lost."""
    def scenario() -> int:
        database = make_database("conflicts", [USERS])
        with database.batch() as batch:
            batch.insert("Users", ("UserId", "Score"), [(1, 0.0)])
        both_read = threading.Barrier(2, timeout=10)
        attempts = []

        def increment(transaction: Any) -> None:
            attempts.append(1)
            (score,) = list(transaction.execute_sql("SELECT Score FROM Users WHERE UserId = 1"))[0]
            if len(attempts) <= 2:
                try:
                    both_read.wait()
                except threading.BrokenBarrierError:
                    pass
            transaction.update("Users", ("UserId", "Score"), [(1, score + 1)])

        threads = [threading.Thread(target=database.run_in_transaction, args=(increment,)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        with database.snapshot() as snapshot:
            (score,) = list(snapshot.execute_sql("SELECT Score FROM Users WHERE UserId = 1"))[0]
        assert len(attempts) >= 3  # one of the two ran again
        return int(score)

    assert await run(scenario) == 2


async def test_dml_select_and_partitioned_dml(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("dml", [USERS, ORDERS])

        def fill(transaction: Any) -> None:
            returned = list(transaction.execute_sql(
                "INSERT INTO Users (UserId, Name, Score, Born, Tags) VALUES (1, 'ann', 1.0, '2000-01-01', ['a']), "
                "(2, 'bo', 2.5, DATE '2001-02-03', NULL), (3, 'cat', NULL, NULL, ['b', 'c']) THEN RETURN UserId, Name"))
            assert sorted(returned) == [[1, "ann"], [2, "bo"], [3, "cat"]]
            status, counts = transaction.batch_update([
                "INSERT INTO Orders (UserId, OrderId, Total) VALUES (1, 1, 10), (1, 2, 30)",
                ("UPDATE Orders SET Total = Total + @more WHERE UserId = @user AND OrderId > 1",
                 {"more": 5, "user": 1}, {"more": param_types.INT64, "user": param_types.INT64}),
            ])
            assert counts == [2, 1]

        database.run_in_transaction(fill)
        with database.snapshot(multi_use=True) as snapshot:
            def q(text: str, **params: Any) -> list[Any]:
                return list(snapshot.execute_sql(text, params=params or None))

            assert q("SELECT Name FROM Users WHERE Name LIKE '%a%' ORDER BY Name DESC") == [["cat"], ["ann"]]
            assert q("SELECT UserId FROM Users WHERE Score IS NULL OR Score >= 2 ORDER BY 1") == [[2], [3]]
            assert q("SELECT UserId FROM Users WHERE NOT (UserId IN (1, 2)) AND Born IS NULL") == [[3]]
            assert q("SELECT UserId FROM Users WHERE Name != 'bo' AND UserId <= 3 ORDER BY UserId LIMIT 1") == [[1]]
            assert q("SELECT UserId FROM Users WHERE Born < '2001-01-01'") == [[1]]
            assert q("SELECT COUNT(*) FROM Users WHERE UserId > @low", low=1) == [[2]]
            assert q("SELECT u.Name, o.Total FROM Users u JOIN Orders o ON o.UserId = u.UserId "
                     "ORDER BY o.Total") == [["ann", 10], ["ann", 35]]
            rows = snapshot.execute_sql("SELECT Tags, Born FROM Users WHERE UserId = 1")
            assert list(rows) == [[["a"], datetime.date(2000, 1, 1)]]
            assert [f.name for f in rows.fields] == ["Tags", "Born"]

        def change(transaction: Any) -> None:
            deleted = list(transaction.execute_sql("DELETE FROM Users WHERE UserId = 3 THEN RETURN Name"))
            assert deleted == [["cat"]]
            assert transaction.execute_update("UPDATE Users SET Name = 'x' WHERE UserId = 404") == 0

        database.run_in_transaction(change)
        assert database.execute_partitioned_dml("DELETE FROM Orders WHERE Total > 0") == 2
        assert database.execute_partitioned_dml("UPDATE Users SET Score = 0 WHERE true") == 2
        with database.snapshot() as snapshot:
            assert list(snapshot.execute_sql("SELECT Score FROM Users")) == [[0.0], [0.0]]
        with pytest.raises(exceptions.InvalidArgument, match="read-write"):
            with database.snapshot() as snapshot:
                list(snapshot.execute_sql("DELETE FROM Users WHERE true"))

    await run(scenario)


async def test_drop_table_refuses_while_indexes_or_children_remain_and_drop_database_takes_all(  # type: ignore[no-untyped-def]
        spanner_env, sql) -> None:
    def scenario() -> None:
        database = make_database("drops", [USERS, ORDERS, INDEX])
        with pytest.raises(exceptions.FailedPrecondition, match="indices: usersbyname"):
            database.update_ddl(["DROP TABLE Users"]).result(timeout=30)
        database.update_ddl(["DROP INDEX UsersByName", "DROP TABLE Orders"]).result(timeout=30)
        with pytest.raises(exceptions.NotFound):
            database.update_ddl(["DROP TABLE Orders"]).result(timeout=30)
        database.update_ddl(["DROP TABLE IF EXISTS Orders", ORDERS]).result(timeout=30)
        database.drop()

    await run(scenario)
    assert sql.execute("SELECT count(*) FROM spanq.spanner_tables").fetchone() == (0,)
    assert sql.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'd%\\_users'").fetchone() == (0,)


async def test_a_queue_interleaved_in_a_table_goes_with_its_parent_row(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("interleaved", [
            "CREATE TABLE Accounts (AccountId INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (AccountId)",
            "CREATE QUEUE Tasks (AccountId INT64 NOT NULL, TaskId INT64 NOT NULL, Payload STRING(MAX) NOT NULL) "
            "PRIMARY KEY (AccountId, TaskId), INTERLEAVE IN PARENT Accounts ON DELETE CASCADE"])
        with pytest.raises(exceptions.NotFound):  # no parent row yet
            with database.batch() as batch:
                batch.send(queue="Tasks", key=[1, 1], payload="orphan")
        with database.batch() as batch:
            batch.insert("Accounts", ("AccountId", "Name"), [(1, "one"), (2, "two")])
            batch.send(queue="Tasks", key=[1, 1], payload="a")
            batch.send(queue="Tasks", key=[2, 1], payload="b")
        with pytest.raises(exceptions.FailedPrecondition):  # the queue depends on the table
            database.update_ddl(["DROP TABLE Accounts"]).result(timeout=30)
        with database.batch() as batch:
            batch.delete("Accounts", KeySet(keys=[[1]]))
        with database.snapshot() as snapshot:
            assert list(snapshot.read("Tasks", ("AccountId", "Payload"), KeySet(all_=True))) == [[2, "b"]]
        ddl = list(spanner.Client(project=PROJECT).database_admin_api.get_database_ddl(
            database=database.name).statements)
        assert ddl[0].startswith("CREATE TABLE Accounts") and "INTERLEAVE IN PARENT Accounts" in ddl[1]

    await run(scenario)
