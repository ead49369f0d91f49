"""The statements of issue 25 (item 3), through Google's Python client against a real
server and PostgreSQL: ``alias.*`` and parameters in RECEIVE, RECEIVE only in a
single-use read, stale reads, DELETE of a queue's messages with any WHERE (and as
partitioned DML), THEN RETURN on a queue's INSERT and DELETE, the table subset's
GROUP BY, aggregates, IN / EXISTS subqueries and UNION ALL, ALTER TABLE ADD / DROP
COLUMN, and tables in a PostgreSQL-dialect database.
"""

import datetime
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types

from .test_spanner_tables import INSTANCE, PROJECT, make_database, run, spanner_env  # noqa: F401  (a fixture)

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

USERS = "CREATE TABLE Users (UserId INT64 NOT NULL, Team STRING(MAX), Score INT64) PRIMARY KEY (UserId)"
TASKS = """CREATE QUEUE UserTasks (
  UserId INT64 NOT NULL,
  MessageId STRING(36) NOT NULL,
  Payload STRING(MAX) NOT NULL
) PRIMARY KEY (UserId, MessageId)"""


def send(database: Any, *keys: tuple[int, str]) -> None:
    with database.batch() as batch:
        for user, message in keys:
            batch.send(queue="UserTasks", key=[user, message], payload=f"p-{user}-{message}")


def left(database: Any) -> list[list[Any]]:
    with database.snapshot() as snapshot:
        return list(snapshot.execute_sql("SELECT UserId, MessageId FROM UserTasks ORDER BY UserId, MessageId"))


async def test_receive_takes_alias_star_and_parameters_in_its_arguments(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("receive", [TASKS])
        send(database, (1, "a"), (2, "b"))
        with database.snapshot() as snapshot:
            rows = snapshot.execute_sql(
                "SELECT r.* FROM RECEIVE_UserTasks(max_duration=>'1s') AS r WHERE r.UserId = 1")
            found = list(rows)
            assert [f.name for f in rows.fields] == [
                "UserId", "MessageId", "Payload", "DeliverTime", "SpannerLeaseExpirationTimestamp",
                "SpannerLeaseToken", "SpannerLastBatchMessage"]
        assert [row[:3] for row in found] == [[1, "a", "p-1-a"]]
        with database.snapshot() as snapshot:
            rows = snapshot.execute_sql(
                "SELECT r.UserId, r.* FROM RECEIVE_UserTasks(max_duration => @d, max_batch_size => @n) r",
                params={"d": "1s", "n": 5}, param_types={"d": param_types.STRING, "n": param_types.INT64})
            found = list(rows)
        assert [row[:3] for row in found] == [[2, 2, "b"]]
        with database.snapshot() as snapshot:
            with pytest.raises(exceptions.InvalidArgument, match="max_batch_size"):
                list(snapshot.execute_sql("SELECT * FROM RECEIVE_UserTasks(max_duration => @d, max_batch_size => @n)",
                                          params={"d": "1s", "n": 0},
                                          param_types={"d": param_types.STRING, "n": param_types.INT64}))

    await run(scenario)


async def test_receive_needs_a_single_use_strong_read(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("single", [TASKS])
        send(database, (1, "a"))
        with database.snapshot(multi_use=True) as snapshot:
            with pytest.raises(exceptions.InvalidArgument, match="single-use"):
                list(snapshot.execute_sql("SELECT * FROM RECEIVE_UserTasks(max_duration => '1s')"))
        with database.snapshot(exact_staleness=datetime.timedelta(seconds=5)) as snapshot:
            with pytest.raises(exceptions.InvalidArgument, match="strong"):
                list(snapshot.execute_sql("SELECT * FROM RECEIVE_UserTasks(max_duration => '1s')"))
        # Nothing was leased: the message is still there, and a strong single-use read receives it.
        with database.snapshot() as snapshot:
            assert [r[:2] for r in snapshot.execute_sql("SELECT * FROM RECEIVE_UserTasks(max_duration => '1s')")] \
                == [[1, "a"]]

    await run(scenario)


async def test_stale_reads_are_answered_with_the_latest_data(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("stale", [USERS, TASKS])
        database.run_in_transaction(lambda t: t.execute_update("INSERT INTO Users (UserId, Team) VALUES (1, 'x')"))
        send(database, (1, "a"))
        with database.snapshot(exact_staleness=datetime.timedelta(seconds=15)) as snapshot:
            assert list(snapshot.execute_sql("SELECT UserId, Team FROM Users")) == [[1, "x"]]
        past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
        with database.snapshot(read_timestamp=past, multi_use=True) as snapshot:
            assert list(snapshot.execute_sql("SELECT UserId FROM Users")) == [[1]]
            assert list(snapshot.execute_sql("SELECT MessageId FROM UserTasks")) == [["a"]]
        future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        with database.snapshot(read_timestamp=future) as snapshot:
            with pytest.raises(exceptions.InvalidArgument, match="future"):
                list(snapshot.execute_sql("SELECT UserId FROM Users"))

    await run(scenario)


async def test_delete_from_a_queue_with_any_where_and_as_partitioned_dml(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("deletes", [TASKS])
        send(database, (7, "a"), (7, "b"), (8, "c"), (9, "d"), (10, "e"), (11, "f"))
        # A message under lease is deleted too: its token renews no more (a NULL new token).
        with database.snapshot() as snapshot:
            leased = list(snapshot.execute_sql(
                "SELECT SpannerLeaseToken FROM RECEIVE_UserTasks(max_duration => '1s') WHERE UserId = 8"))
        assert len(leased) == 1
        assert database.run_in_transaction(lambda t: t.execute_update("DELETE FROM UserTasks WHERE UserId = 7")) == 2
        assert left(database) == [[8, "c"], [9, "d"], [10, "e"], [11, "f"]]

        def returned(transaction: Any) -> list[Any]:
            return list(transaction.execute_sql(
                "DELETE FROM UserTasks WHERE UserId = 8 OR Payload = @p THEN RETURN MessageId, UserId AS U",
                params={"p": "p-9-d"}, param_types={"p": param_types.STRING}))

        assert sorted(database.run_in_transaction(returned)) == [["c", 8], ["d", 9]]
        renewed = database.run_in_transaction(lambda t: list(t.execute_sql(
            "SELECT * FROM RENEWLEASE_UserTasks(lease_tokens => @t)", params={"t": [leased[0][0]]},
            param_types={"t": param_types.Array(param_types.STRING)})))
        assert [r[1] for r in renewed] == [None]
        with pytest.raises(exceptions.OutOfRange):
            database.run_in_transaction(lambda t: t.execute_update(
                "DELETE FROM UserTasks WHERE UserId = 404 ASSERT_ROWS_MODIFIED 1"))
        assert database.run_in_transaction(lambda t: t.execute_update("DELETE FROM UserTasks WHERE UserId > 10")) == 1
        assert database.execute_partitioned_dml("DELETE FROM UserTasks WHERE TRUE") == 1
        assert left(database) == []
        send(database, (1, "x"))
        assert database.run_in_transaction(lambda t: t.execute_update("DELETE FROM UserTasks WHERE TRUE")) == 1
        assert left(database) == []
        with pytest.raises(exceptions.InvalidArgument, match="queue"):
            database.execute_partitioned_dml("UPDATE UserTasks SET Payload = 'x' WHERE TRUE")

    await run(scenario)


async def test_insert_into_a_queue_then_return(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("returning", [TASKS])

        def insert(transaction: Any) -> list[Any]:
            return list(transaction.execute_sql(
                "INSERT INTO UserTasks (UserId, MessageId, Payload) VALUES (1, 'a', 'x'), (@u, @m, 'y') "
                "THEN RETURN MessageId, UserId AS Who, Payload",
                params={"u": 2, "m": "b"}, param_types={"u": param_types.INT64, "m": param_types.STRING}))

        assert database.run_in_transaction(insert) == [["a", 1, "x"], ["b", 2, "y"]]
        assert left(database) == [[1, "a"], [2, "b"]]
        with pytest.raises(exceptions.InvalidArgument, match="DeliverTime"):
            database.run_in_transaction(lambda t: list(t.execute_sql(
                "INSERT INTO UserTasks (UserId, MessageId, Payload) VALUES (3, 'c', 'z') THEN RETURN DeliverTime")))
        assert left(database) == [[1, "a"], [2, "b"]]

    await run(scenario)


async def test_group_by_aggregates_subqueries_and_union_all(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> None:
        database = make_database("grouped", [USERS, TASKS])

        def fill(transaction: Any) -> None:
            transaction.execute_update("INSERT INTO Users (UserId, Team, Score) VALUES (1, 'red', 10), (2, 'red', 5), "
                                       "(3, 'blue', 7), (4, NULL, NULL)")

        database.run_in_transaction(fill)
        send(database, (1, "a"), (3, "b"), (3, "c"))
        with database.snapshot(multi_use=True) as snapshot:
            def q(text: str, **params: Any) -> list[Any]:
                return list(snapshot.execute_sql(text, params=params or None))

            assert q("SELECT Team, COUNT(*) AS N, SUM(Score), MIN(Score), MAX(Score), AVG(Score) FROM Users "
                     "WHERE Team IS NOT NULL GROUP BY Team ORDER BY Team") == [
                ["blue", 1, 7, 7, 7, 7.0], ["red", 2, 15, 5, 10, 7.5]]
            assert q("SELECT Team, SUM(Score) AS Total FROM Users GROUP BY 1 HAVING COUNT(*) > 1") == [["red", 15]]
            assert q("SELECT COUNT(DISTINCT Team), SUM(Score) FROM Users") == [[2, 22]]
            assert q("SELECT Team FROM Users GROUP BY Team ORDER BY COUNT(*) DESC, Team LIMIT 1") == [["red"]]
            # Subqueries in WHERE: IN and EXISTS, correlated too, over a queue's messages.
            assert q("SELECT UserId FROM Users WHERE UserId IN (SELECT UserId FROM UserTasks) ORDER BY 1") == [[1], [3]]
            assert q("SELECT UserId FROM Users u WHERE NOT EXISTS (SELECT 1 FROM UserTasks t WHERE t.UserId = "
                     "u.UserId) ORDER BY UserId") == [[2], [4]]
            assert q("SELECT UserId FROM Users WHERE UserId NOT IN (SELECT UserId FROM UserTasks WHERE "
                     "MessageId > @m) ORDER BY UserId", m="a") == [[1], [2], [4]]
            # UNION ALL: ORDER BY and LIMIT apply to the whole.
            assert q("SELECT UserId, Team FROM Users WHERE Score > 6 UNION ALL SELECT UserId, MessageId FROM UserTasks "
                     "ORDER BY 1, Team") == [[1, "a"], [1, "red"], [3, "b"], [3, "blue"], [3, "c"]]
            for bad, words in [("SELECT Team, Score FROM Users GROUP BY Team", "neither grouped nor aggregated"),
                               ("SELECT SUM(Team) FROM Users", "SUM"),
                               ("SELECT UserId FROM Users WHERE SUM(Score) > 1", "aggregate"),
                               ("SELECT UserId FROM Users UNION ALL SELECT Team FROM Users", "same number"),
                               ("SELECT UserId FROM Users WHERE UserId IN (SELECT UserId, Team FROM Users)",
                                "one column"),
                               ("SELECT UserId FROM Users UNION SELECT UserId FROM Users", "UNION DISTINCT")]:
                with pytest.raises(exceptions.InvalidArgument, match=words):
                    q(bad)
        # In a read-write transaction, a subquery's rows and a grouped read lock nothing extra, and run.
        assert database.run_in_transaction(lambda t: list(t.execute_sql(
            "SELECT Team, COUNT(*) FROM Users WHERE EXISTS (SELECT 1 FROM Users) GROUP BY Team ORDER BY 2, 1"))) == [
            [None, 1], ["blue", 1], ["red", 2]]
        assert database.run_in_transaction(lambda t: t.execute_update(
            "DELETE FROM Users WHERE UserId IN (SELECT UserId FROM UserTasks)")) == 2

    await run(scenario)


async def test_alter_table_adds_and_drops_columns(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> list[str]:
        database = make_database("migrate", [USERS, "CREATE INDEX UsersByTeam ON Users (Team)"])
        database.run_in_transaction(lambda t: t.execute_update("INSERT INTO Users (UserId, Team) VALUES (1, 'x')"))
        database.update_ddl(["ALTER TABLE Users ADD COLUMN Email STRING(100)",
                             "ALTER TABLE Users ADD COLUMN IF NOT EXISTS Email STRING(100)",
                             "ALTER TABLE Users DROP COLUMN Score"]).result(timeout=30)
        database.run_in_transaction(lambda t: t.execute_update("UPDATE Users SET Email = 'a@b' WHERE UserId = 1"))
        with database.snapshot() as snapshot:
            rows = snapshot.execute_sql("SELECT * FROM Users")
            assert list(rows) == [[1, "x", "a@b"]]
            assert [f.name for f in rows.fields] == ["UserId", "Team", "Email"]
        for ddl, error, words in [
            ("ALTER TABLE Users DROP COLUMN UserId", exceptions.FailedPrecondition, "key column"),
            ("ALTER TABLE Users DROP COLUMN Team", exceptions.FailedPrecondition, "UsersByTeam"),
            ("ALTER TABLE Users ADD COLUMN Email INT64", exceptions.FailedPrecondition, "Duplicate column"),
            ("ALTER TABLE Users ADD COLUMN Must INT64 NOT NULL", exceptions.FailedPrecondition, "Must"),
            ("ALTER TABLE Users DROP COLUMN Nope", exceptions.NotFound, "(?i)nope"),
            ("ALTER TABLE Nowhere ADD COLUMN X INT64", exceptions.NotFound, "(?i)nowhere"),
        ]:
            with pytest.raises(error, match=words):
                database.update_ddl([ddl]).result(timeout=30)
        return list(spanner.Client(project=PROJECT).database_admin_api.get_database_ddl(
            database=database.name).statements)

    ddl = await run(scenario)
    assert ddl[0] == ("CREATE TABLE Users (\n  UserId INT64 NOT NULL,\n  Team STRING(MAX),\n  Email STRING(100),\n"
                      ") PRIMARY KEY(UserId)")
    columns = [r[0] for r in sql.execute("SELECT column_name FROM information_schema.columns WHERE table_name LIKE "
                                         "'d%users' ORDER BY ordinal_position").fetchall()]
    assert columns == ["userid", "team", "email"]


async def test_tables_in_a_postgresql_dialect_database(spanner_env) -> None:  # type: ignore[no-untyped-def]
    from google.cloud.spanner_admin_database_v1.types import DatabaseDialect

    def scenario() -> list[str]:
        instance = spanner.Client(project=PROJECT).instance(INSTANCE)
        if not instance.exists():
            instance.create().result(timeout=30)
        database = instance.database("pgtables", database_dialect=DatabaseDialect.POSTGRESQL)
        database.create().result(timeout=30)
        database.update_ddl([
            "CREATE TABLE users (userid bigint NOT NULL, team character varying(20), score double precision, "
            "tags text[], PRIMARY KEY (userid))",
            'CREATE TABLE "Orders" (userid bigint NOT NULL, orderid bigint NOT NULL, total numeric, '
            "PRIMARY KEY (userid, orderid)) INTERLEAVE IN PARENT users ON DELETE CASCADE",
            "CREATE QUEUE usertasks (userid bigint NOT NULL, payload text NOT NULL, PRIMARY KEY (userid))",
            "ALTER TABLE users ADD COLUMN joined timestamptz",
        ]).result(timeout=30)

        def fill(transaction: Any) -> list[Any]:
            transaction.execute_update("INSERT INTO users (userid, team, score, tags, joined) VALUES (1, 'red', "
                                       "1.5, ARRAY['a'], CURRENT_TIMESTAMP), ($1, 'blue', NULL, NULL, now())",
                                       params={"p1": 2}, param_types={"p1": param_types.INT64})
            transaction.execute_update('INSERT INTO "Orders" (userid, orderid, total) VALUES (1, 1, 10), (2, 1, 5)')
            return list(transaction.execute_sql("UPDATE users SET score = score * 2 WHERE userid = 1 "
                                                "RETURNING userid, score"))

        assert database.run_in_transaction(fill) == [[1, 3.0]]
        with database.batch() as batch:
            batch.send(queue="usertasks", key=[2], payload="x")
        with database.snapshot(multi_use=True) as snapshot:
            def q(text: str) -> list[Any]:
                return list(snapshot.execute_sql(text))

            assert q("SELECT u.team, SUM(o.total) AS total FROM users u JOIN \"Orders\" o ON o.userid = u.userid "
                     "GROUP BY u.team ORDER BY total DESC") == [["red", 10], ["blue", 5]]
            assert q("SELECT userid FROM users WHERE userid IN (SELECT userid FROM usertasks)") == [[2]]
            rows = snapshot.execute_sql("SELECT * FROM users WHERE userid = 1")
            assert [r[:4] for r in rows] == [[1, "red", 3.0, ["a"]]]
            assert [f.name for f in rows.fields] == ["userid", "team", "score", "tags", "joined"]
        assert database.execute_partitioned_dml("DELETE FROM users WHERE team = 'blue'") == 1
        with pytest.raises(exceptions.InvalidArgument, match="does not support"):
            database.update_ddl(["CREATE TABLE t (a interval, PRIMARY KEY (a))"]).result(timeout=30)
        return list(spanner.Client(project=PROJECT).database_admin_api.get_database_ddl(
            database=database.name).statements)

    ddl = await run(scenario)
    assert ddl[0] == ("CREATE TABLE users (\n  userid bigint NOT NULL,\n  team character varying(20),\n"
                      "  score double precision,\n  tags character varying[],\n  joined timestamp with time zone,\n"
                      "  PRIMARY KEY(userid)\n)")
    assert ddl[1].startswith('CREATE TABLE "Orders" (') and ddl[1].endswith(
        "INTERLEAVE IN PARENT users ON DELETE CASCADE")
