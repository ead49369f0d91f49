"""The GA queue DDL (issue 25, item 1) through Google's Python client, against a real server
and PostgreSQL: CREATE QUEUE with HIDDEN columns, declared types, INTERLEAVE IN [PARENT],
ROW DELETION POLICY and OPTIONS, listed back by GetDatabaseDdl as declared; ALTER QUEUE;
disable_send / disable_delivery as spanq's durable pause and ROW DELETION POLICY as its
message retention (the domain's own features, which spanq.v1 sees too); and what spanq
refuses, with why."""

import base64
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from . import conftest
from .conftest import ddl_of, run

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

PROJECT, INSTANCE = "ga-project", "ga-instance"
USERS = "CREATE TABLE Users (UserId INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (UserId)"
TASKS = """CREATE QUEUE IF NOT EXISTS UserTasks (
  UserId INT64 NOT NULL,
  MessageId STRING(36) NOT NULL HIDDEN,
  Payload BYTES(MAX) NOT NULL
) PRIMARY KEY (UserId, MessageId),
  INTERLEAVE IN PARENT Users ON DELETE CASCADE,
  ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY)),
  OPTIONS (receive_mode = 'PULL', locality_group = 'hot')"""
NEAR = ("CREATE QUEUE Near (UserId INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (UserId), "
        "INTERLEAVE IN Users, OPTIONS (disable_delivery = true)")


def make_database(database_id: str, ddl: list[str]) -> Any:
    return conftest.make_database(PROJECT, INSTANCE, database_id, ddl)


def update_ddl(database: Any, *statements: str) -> None:
    database.update_ddl(list(statements)).result(timeout=30)


def catalog(sql: Any, queue: str) -> tuple[Any, ...]:
    """(disable_send, disable_delivery, message_retention) of a queue of the one database made."""
    return sql.execute("SELECT disable_send, disable_delivery, message_retention FROM spanq.queues "
                       "WHERE name LIKE %s", (f"d%\\_{queue}",)).fetchone()


def receive(database: Any, queue: str, columns: str = "*", duration: str = "1s") -> tuple[list[str], list[Any]]:
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(f"SELECT {columns} FROM RECEIVE_{queue}(max_duration => '{duration}')")
        rows = list(results)
        return [f.name for f in results.fields], rows


async def test_the_ga_create_queue_is_listed_back_as_declared_and_maps_onto_the_queues_settings(
        spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "declared", [USERS, TASKS, NEAR])
    ddl = await run(ddl_of, database)
    assert ddl == [
        "CREATE TABLE Users (\n  UserId INT64 NOT NULL,\n  Name STRING(MAX),\n) PRIMARY KEY(UserId)",
        "CREATE QUEUE Near (\n  UserId INT64 NOT NULL,\n  Payload STRING(MAX) NOT NULL\n) PRIMARY KEY (UserId),\n"
        "  INTERLEAVE IN Users,\n  OPTIONS (disable_delivery = true)",
        "CREATE QUEUE UserTasks (\n  UserId INT64 NOT NULL,\n  MessageId STRING(36) NOT NULL HIDDEN,\n"
        "  Payload BYTES(MAX) NOT NULL\n) PRIMARY KEY (UserId, MessageId),\n"
        "  INTERLEAVE IN PARENT Users ON DELETE CASCADE,\n"
        "  ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY)),\n"
        "  OPTIONS (receive_mode = 'PULL', locality_group = 'hot')",
    ]
    # The listed DDL is DDL spanq reads back: IF NOT EXISTS of each is a no-op.
    await run(update_ddl, database, TASKS, NEAR.replace("CREATE QUEUE", "CREATE QUEUE IF NOT EXISTS"))
    assert await run(ddl_of, database) == ddl
    # The options and the policy are the queue's own settings, as spanq.v1 sees them.
    assert catalog(sql, "usertasks") == (False, False, timedelta(days=7))
    assert catalog(sql, "near") == (False, True, None)
    # INTERLEAVE IN without PARENT needs no parent row; INTERLEAVE IN PARENT does.
    await run(lambda: database.run_in_transaction(
        lambda t: t.execute_update("INSERT INTO Near (UserId, Payload) VALUES (9, 'no user 9')")))
    with pytest.raises(exceptions.NotFound):
        await run(lambda: database.run_in_transaction(lambda t: t.send(
            queue="UserTasks", key=[9, "m"], payload=base64.b64encode(b"x"))))


async def test_hidden_columns_are_left_out_of_select_star_and_returned_when_named(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def scenario() -> dict[str, Any]:
        database = make_database("hidden", [USERS, TASKS])
        with database.batch() as batch:
            batch.insert("Users", columns=("UserId", "Name"), values=[(1, "Ada")])
        with database.batch() as batch:
            batch.send(queue="UserTasks", key=[1, "m-1"], payload=base64.b64encode(b"job"))
        with database.snapshot() as snapshot:
            results = snapshot.execute_sql("SELECT * FROM UserTasks")
            rows = list(results)
            star = [f.name for f in results.fields]
        with database.snapshot() as snapshot:
            named = list(snapshot.execute_sql("SELECT UserId, MessageId FROM UserTasks"))
        received = receive(database, "UserTasks")
        return {"star": star, "rows": rows, "named": named, "received": received}

    out = await run(scenario)
    assert out["star"] == ["UserId", "Payload", "DeliverTime"]
    assert out["rows"][0][:2] == [1, base64.b64encode(b"job")]
    assert out["named"] == [[1, "m-1"]]
    fields, rows = out["received"]
    assert fields == ["UserId", "Payload", "DeliverTime", "SpannerLeaseExpirationTimestamp", "SpannerLeaseToken",
                      "SpannerLastBatchMessage"]
    assert [r[0] for r in rows] == [1]


async def test_hidden_columns_are_left_out_of_star_in_joins_and_of_alias_star(spanner_env) -> None:  # type: ignore[no-untyped-def]
    notes = "CREATE TABLE Notes (NoteId INT64 NOT NULL, Secret STRING(MAX) HIDDEN, Text STRING(MAX)) PRIMARY KEY (NoteId)"

    def fields(database: Any, statement: str) -> tuple[list[str], list[Any]]:
        with database.snapshot() as snapshot:
            results = snapshot.execute_sql(statement)
            rows = list(results)
            return [f.name for f in results.fields], rows

    def scenario() -> dict[str, Any]:
        database = make_database("hiddenjoin", [USERS, TASKS, notes])
        with database.batch() as batch:
            batch.insert("Users", columns=("UserId", "Name"), values=[(1, "Ada")])
            batch.insert("Notes", columns=("NoteId", "Secret", "Text"), values=[(1, "s3cret", "hello")])
        with database.batch() as batch:
            batch.send(queue="UserTasks", key=[1, "m-1"], payload=base64.b64encode(b"job"))
        join = " FROM UserTasks t JOIN Users u ON t.UserId = u.UserId"
        out = {"join *": fields(database, "SELECT *" + join)[0],
               "t.*": fields(database, "SELECT t.*" + join)[0],
               "named": fields(database, "SELECT t.MessageId, u.Name" + join)[1],
               "table *": fields(database, "SELECT * FROM Notes"),
               "table named": fields(database, "SELECT n.Secret FROM Notes n")[1],
               "received r.*": fields(database, "SELECT r.* FROM RECEIVE_UserTasks(max_duration => '1s') AS r")}
        database.reload()
        out["ddl"] = [s for s in database.ddl_statements if s.startswith("CREATE TABLE Notes")]
        return out

    out = await run(scenario)
    assert out["join *"] == ["UserId", "Payload", "DeliverTime", "UserId", "Name"]
    assert out["t.*"] == ["UserId", "Payload", "DeliverTime"]
    assert out["named"] == [["m-1", "Ada"]]
    assert out["table *"] == (["NoteId", "Text"], [[1, "hello"]])
    assert out["table named"] == [["s3cret"]]
    assert out["received r.*"][0] == ["UserId", "Payload", "DeliverTime", "SpannerLeaseExpirationTimestamp",
                                      "SpannerLeaseToken", "SpannerLastBatchMessage"]
    assert [r[0] for r in out["received r.*"][1]] == [1]
    assert out["ddl"] == ["CREATE TABLE Notes (\n  NoteId INT64 NOT NULL,\n  Secret STRING(MAX) HIDDEN,\n"
                          "  Text STRING(MAX),\n) PRIMARY KEY(NoteId)"]


async def test_disable_send_and_disable_delivery_are_the_durable_pause(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    queue = ("CREATE QUEUE Jobs (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), "
             "OPTIONS (disable_send = true)")
    database = await run(make_database, "paused", [queue])
    assert catalog(sql, "jobs") == (True, False, None)

    def send(key: int) -> None:
        with database.batch() as batch:
            batch.send(queue="Jobs", key=[key], payload=f"job {key}")

    def insert(key: int) -> None:
        database.run_in_transaction(lambda t: t.execute_update(
            f"INSERT INTO Jobs (Id, Payload) VALUES ({key}, 'job {key}')"))

    for refused in (send, insert):
        with pytest.raises(exceptions.FailedPrecondition, match="sending disabled"):
            await run(refused, 1)
    assert sql.execute("SELECT count(*) FROM d1_jobs").fetchone() == (0,)  # nothing of either was stored
    # NULL resets an option (to false); delivery paused: sends are kept, nothing is received.
    await run(update_ddl, database, "ALTER QUEUE Jobs SET OPTIONS (disable_send = NULL, disable_delivery = true)")
    assert catalog(sql, "jobs") == (False, True, None)
    await run(send, 1)
    await run(insert, 2)
    assert (await run(receive, database, "Jobs", "Id"))[1] == []
    assert (await run(ddl_of, database))[0].endswith("PRIMARY KEY (Id),\n  OPTIONS (disable_delivery = true)")
    await run(update_ddl, database, "ALTER QUEUE Jobs SET OPTIONS (disable_delivery = false)")
    _, rows = await run(receive, database, "Jobs", "Id")
    assert sorted(r[0] for r in rows) == [1, 2]
    assert (await run(ddl_of, database))[0].endswith("PRIMARY KEY (Id)")


async def test_row_deletion_policy_deletes_old_unacknowledged_messages(spanner_env, server, sql, clock) -> None:  # type: ignore[no-untyped-def]
    queue = "CREATE QUEUE Jobs (Id INT64 NOT NULL, At TIMESTAMP NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id, At)"
    database = await run(make_database, "retained", [queue])

    def refused(statement: str) -> str:
        with pytest.raises(exceptions.GoogleAPICallError) as failed:
            update_ddl(database, statement)
        return f"{type(failed.value).__name__}: {failed.value.message}"

    policy = "ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL {} DAY))"
    assert "FailedPrecondition: ALTER QUEUE Jobs: the queue has no row deletion policy" in await run(
        refused, "ALTER QUEUE Jobs REPLACE " + policy.format(2))
    assert "InvalidArgument: queue Jobs: ROW DELETION POLICY: OLDER_THAN(at, ...) names a key column" in await run(
        refused, "ALTER QUEUE Jobs ADD ROW DELETION POLICY (OLDER_THAN(At, INTERVAL 1 DAY))")
    assert "INTERVAL 0 DAY" in await run(refused, "ALTER QUEUE Jobs ADD " + policy.format(0))
    await run(update_ddl, database, "ALTER QUEUE Jobs ADD " + policy.format(1))
    assert catalog(sql, "jobs")[2] == timedelta(days=1)
    assert "already has a row deletion policy" in await run(refused, "ALTER QUEUE Jobs ADD " + policy.format(3))

    def send(key: int) -> None:
        with database.batch() as batch:
            batch.send(queue="Jobs", key=[key, "2026-01-01T00:00:00Z"], payload=f"job {key}")

    await run(send, 1)
    clock.advance(timedelta(days=1, seconds=1))
    await run(send, 2)
    assert await server.expiry.expire() == (1, 0)  # the domain's expiry: what spanq.v1's retention deletes

    def ids() -> list[int]:
        with database.snapshot() as snapshot:
            return [r[0] for r in snapshot.execute_sql("SELECT Id FROM Jobs")]

    assert await run(ids) == [2]
    await run(update_ddl, database, "ALTER QUEUE Jobs REPLACE " + policy.format(30))
    assert (await run(ddl_of, database))[0].endswith(
        "PRIMARY KEY (Id, At),\n  ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 30 DAY))")
    await run(update_ddl, database, "ALTER QUEUE Jobs DROP ROW DELETION POLICY")
    assert catalog(sql, "jobs")[2] is None
    clock.advance(timedelta(days=400))
    assert await server.expiry.expire() == (0, 0)


async def test_alter_queue_and_what_spanq_refuses_with_why(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    database = await run(make_database, "altered", [USERS, TASKS])

    def refused(*statements: str) -> str:
        with pytest.raises(exceptions.GoogleAPICallError) as failed:
            update_ddl(database, *statements)
        return f"{type(failed.value).__name__}: {failed.value.message}"

    await run(update_ddl, database, "ALTER QUEUE UserTasks SET OPTIONS (locality_group = 'cold')",
              "ALTER QUEUE UserTasks SET ON DELETE CASCADE", "ALTER QUEUE UserTasks SET INTERLEAVE IN PARENT Users")
    assert (await run(ddl_of, database))[1].endswith("OPTIONS (receive_mode = 'PULL', locality_group = 'cold')")
    await run(update_ddl, database, "ALTER QUEUE UserTasks SET OPTIONS (locality_group = NULL, receive_mode = NULL)")
    assert (await run(ddl_of, database))[1].endswith("INTERVAL 7 DAY))")
    cases = {
        "ALTER QUEUE UserTasks SET ON DELETE NO ACTION": "FailedPrecondition: ALTER QUEUE UserTasks SET ON DELETE NO "
                                                         "ACTION: spanq cannot change a live queue's ON DELETE",
        "ALTER QUEUE UserTasks SET INTERLEAVE IN Users": "FailedPrecondition: ALTER QUEUE UserTasks SET INTERLEAVE "
                                                          "IN Users: spanq cannot change a live queue's parent",
        "ALTER QUEUE UserTasks SET OPTIONS (receive_mode = 'PUSH')": "receive_mode must be 'PULL'",
        "ALTER QUEUE UserTasks SET OPTIONS (disable_send = 'yes')": "option disable_send takes TRUE or FALSE",
        "ALTER QUEUE UserTasks SET OPTIONS (colour = 'red')": "unsupported queue option 'colour'",
        "ALTER QUEUE Nope SET OPTIONS (disable_send = true)": "NotFound: queue 'nope' does not exist",
        "CREATE QUEUE G (Id INT64 NOT NULL, Shard INT64 AS (MOD(Id, 10)) STORED, Payload BYTES(MAX) NOT NULL) "
        "PRIMARY KEY (Id)": "a queue has only its primary-key columns and Payload",
        "CREATE QUEUE N (UserId INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (UserId), "
        "INTERLEAVE IN Users ON DELETE NO ACTION": "ON DELETE goes with INTERLEAVE IN PARENT only",
        "CREATE QUEUE O (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id), "
        "OPTIONS (disable_send = NULL)": "NULL resets an option in ALTER QUEUE",
    }
    for statement, words in cases.items():
        assert words in await run(refused, statement), statement
    # Nothing of a refused statement changed the queue; a batch stops at its first failure.
    assert "statement 1" in await run(refused, "ALTER QUEUE UserTasks SET OPTIONS (disable_send = true)",
                                      "ALTER QUEUE UserTasks SET ON DELETE NO ACTION")
    assert catalog(sql, "usertasks") == (True, False, timedelta(days=7))
    await run(update_ddl, database, "DROP QUEUE IF EXISTS UserTasks", "DROP QUEUE IF EXISTS UserTasks")
    assert await run(ddl_of, database) == [
        "CREATE TABLE Users (\n  UserId INT64 NOT NULL,\n  Name STRING(MAX),\n) PRIMARY KEY(UserId)"]


async def test_on_delete_no_action_keeps_a_parent_row_while_it_has_messages(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    queue = ("CREATE QUEUE Inbox (UserId INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (UserId), "
             "INTERLEAVE IN PARENT Users ON DELETE NO ACTION")
    database = await run(make_database, "no-action", [USERS, queue])

    def scenario() -> None:
        with database.batch() as batch:
            batch.insert("Users", columns=("UserId", "Name"), values=[(1, "Ada"), (2, "Bob")])
        with database.batch() as batch:
            batch.send(queue="Inbox", key=[1], payload="hello")
        with pytest.raises(exceptions.FailedPrecondition, match="child rows"):
            database.run_in_transaction(lambda t: t.execute_update("DELETE FROM Users WHERE UserId = 1"))
        # A row without messages goes; once its message is acked, so does the other.
        database.run_in_transaction(lambda t: t.execute_update("DELETE FROM Users WHERE UserId = 2"))
        database.run_in_transaction(lambda t: t.ack(queue="Inbox", key=[1]))
        database.run_in_transaction(lambda t: t.execute_update("DELETE FROM Users WHERE UserId = 1"))

    await run(scenario)
    assert (await run(ddl_of, database))[1].endswith("INTERLEAVE IN PARENT Users ON DELETE NO ACTION")
    assert sql.execute("SELECT parent_cascade FROM spanq.queues WHERE name LIKE 'd%inbox'").fetchone() == (False,)


PG_TASKS = ("CREATE QUEUE usertasks (userid bigint NOT NULL, messageid varchar(36) NOT NULL, payload bytea NOT NULL, "
            "PRIMARY KEY (userid, messageid)) INTERLEAVE IN PARENT users ON DELETE CASCADE "
            "TTL INTERVAL '7 days' ON deliver_time WITH (receive_mode = 'PULL', locality_group = 'hot')")
PG_NEAR = ("CREATE QUEUE near (userid bigint NOT NULL, payload text NOT NULL, PRIMARY KEY (userid)) INTERLEAVE IN users "
           "WITH (disable_delivery = true)")


async def test_a_postgresql_queues_options_and_ttl_are_read_and_listed_in_its_dialect(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    from google.cloud.spanner_admin_database_v1.types import DatabaseDialect

    def queues_ddl(database: Any) -> dict[str, str]:
        return {s.split()[2]: s for s in ddl_of(database) if s.startswith("CREATE QUEUE")}

    def scenario() -> dict[str, Any]:
        instance = spanner.Client(project=PROJECT).instance(INSTANCE)
        if not instance.exists():
            instance.create().result(timeout=30)
        database = instance.database("pgqueues", database_dialect=DatabaseDialect.POSTGRESQL)
        database.create().result(timeout=30)
        update_ddl(database, "CREATE TABLE users (userid bigint NOT NULL, name text, PRIMARY KEY (userid))",
                   PG_TASKS, PG_NEAR)
        out: dict[str, Any] = {"listed": queues_ddl(database)}
        # What is listed reads back: IF NOT EXISTS of each is a no-op.
        update_ddl(database, *[s.replace("CREATE QUEUE", "CREATE QUEUE IF NOT EXISTS", 1)
                               for s in out["listed"].values()])
        out["again"] = queues_ddl(database)
        out["created"] = (catalog(sql, "usertasks"), catalog(sql, "near"))
        update_ddl(database, "ALTER QUEUE usertasks SET (disable_send = true)",
                   "ALTER QUEUE usertasks ALTER TTL INTERVAL '1 day' ON deliver_time",
                   "ALTER QUEUE near RESET (disable_delivery)",
                   "ALTER QUEUE near ADD TTL INTERVAL '3 days' ON deliver_time")
        out["altered"] = queues_ddl(database)
        out["altered catalog"] = (catalog(sql, "usertasks"), catalog(sql, "near"))
        update_ddl(database, "ALTER QUEUE usertasks DROP TTL")
        out["dropped"] = catalog(sql, "usertasks")
        for statement, error in [("ALTER QUEUE usertasks ALTER TTL INTERVAL '2 days' ON deliver_time",
                                  exceptions.FailedPrecondition),
                                 ("ALTER QUEUE near ADD TTL INTERVAL '36 hours' ON deliver_time",
                                  exceptions.InvalidArgument)]:
            with pytest.raises(error) as failed:
                update_ddl(database, statement)
            out[statement] = str(failed.value.message)
        return out

    out = await run(scenario)
    tasks = ("CREATE QUEUE usertasks (\n  userid bigint NOT NULL,\n  messageid character varying NOT NULL,\n"
             "  payload bytea NOT NULL,\n  PRIMARY KEY(userid, messageid)\n) INTERLEAVE IN PARENT users ON DELETE CASCADE")
    near = ("CREATE QUEUE near (\n  userid bigint NOT NULL,\n  payload character varying NOT NULL,\n"
            "  PRIMARY KEY(userid)\n) INTERLEAVE IN users")
    assert out["listed"] == {
        "usertasks": tasks + " TTL INTERVAL '7 days' ON deliver_time WITH (receive_mode = 'PULL', locality_group = 'hot')",
        "near": near + " WITH (disable_delivery = true)"}
    assert out["again"] == out["listed"]
    assert out["created"] == ((False, False, timedelta(days=7)), (False, True, None))
    assert out["altered"] == {
        "usertasks": tasks + " TTL INTERVAL '1 day' ON deliver_time WITH (receive_mode = 'PULL', disable_send = true, "
                             "locality_group = 'hot')",
        "near": near + " TTL INTERVAL '3 days' ON deliver_time"}
    assert out["altered catalog"] == ((True, False, timedelta(days=1)), (False, False, timedelta(days=3)))
    assert out["dropped"] == (True, False, None)
    assert "the queue has no row deletion policy; use ADD TTL" in \
        out["ALTER QUEUE usertasks ALTER TTL INTERVAL '2 days' ON deliver_time"]
    assert "a queue's TTL is a whole number of days" in out["ALTER QUEUE near ADD TTL INTERVAL '36 hours' ON deliver_time"]
