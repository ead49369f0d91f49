"""Google's own queue samples and tests, call for call, against spanq (issue 13).

Google's files cannot be fetched at test time and are not copied here: each
test below makes the calls those samples make, with the same DDL and SQL
(`Id INT64`, `Payload STRING(MAX)`, `SELECT Id, Payload FROM RECEIVE_q(...)`),
through the real google-cloud-spanner client, and asserts on what the sample
prints. The Java, Node and Go samples look result columns up by name,
case-sensitively (`getLong("Id")`, `row.toJSON().Id`, `ColumnByName("Id")`):
the tests look them up by the declared name too.
"""

import asyncio
import base64
import dataclasses
import os
import time
from datetime import datetime, timezone
from collections.abc import Callable
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1.backup import Backup
from google.cloud.spanner_v1.database import Database
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from spanq_proto.v1 import queue_pb2
from spanq_server.server import start

from ..helpers import until

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

PROJECT, INSTANCE = "sample-project", "test-instance"
QUEUE_DDL = "CREATE QUEUE MyQueue (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)"
STRING_ARRAY = spanner.param_types.Array(spanner.param_types.STRING)


@pytest.fixture
def spanner_env(monkeypatch: pytest.MonkeyPatch, server: Any) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.target)


# -- what Google's Python conftest does: an instance, a fresh database per test ------


def sample_instance(client: spanner.Client) -> Any:
    instance = client.instance(INSTANCE, f"projects/{PROJECT}/instanceConfigs/emulator-config",
                               labels={"cloud_spanner_samples": "true", "created": str(int(time.time()))})
    if not instance.exists():
        instance.create().result(timeout=30)
    return instance


def sample_database(instance: Any, database_id: str, ddl: list[str] | None = None) -> Any:
    database = instance.database(database_id, ddl_statements=ddl or [])
    if not database.exists():  # GetDatabaseDdl: NOT_FOUND for a database that does not exist
        database.create().result(timeout=30)
    return database


def teardown(instance: Any) -> list[str]:
    """The fixtures' clean-up: every database dropped, every backup deleted, the instance deleted."""
    dropped = []
    for database_pb in instance.list_databases():
        database = Database.from_pb(database_pb, instance)
        if database.exists():
            database.drop()
            dropped.append(database.database_id)
    for backup_pb in instance.list_backups():
        Backup.from_pb(backup_pb, instance).delete()
    instance.delete()
    return dropped


# -- the snippets, as Google's queue_snippets.py shapes them --------------------------


def create_queue(database: Any) -> None:
    database.update_ddl([QUEUE_DDL]).result(timeout=30)
    print("Created queue MyQueue")


def send_message(database: Any, message_id: int, payload: str) -> None:
    with database.batch() as batch:
        batch.send(queue="MyQueue", key=[message_id], payload=payload)
    print(f"Sent message {message_id}")


def send_message_with_dml(database: Any, message_id: int, payload: str) -> None:
    def insert(transaction: Any) -> None:
        count = transaction.execute_update(
            "INSERT INTO MyQueue (Id, Payload) VALUES (@id, @payload)",
            params={"id": message_id, "payload": payload},
            param_types={"id": spanner.param_types.INT64, "payload": spanner.param_types.STRING})
        print(f"{count} message(s) sent")

    database.run_in_transaction(insert)


def receive_messages(database: Any, expected: int) -> list[dict[str, Any]]:
    """RECEIVE with a column list; stops once it has the messages it waits for (a sample that
    reads on would wait out max_duration, as it would on Spanner)."""
    received = []
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql("SELECT Id, Payload FROM RECEIVE_MyQueue(max_duration => '1m')")
        for row in results:
            names = [field.name for field in results.fields]
            by_name = dict(zip(names, row))  # what Java's getLong("Id"), Go's ColumnByName("Id") do
            print(f"Received message {by_name['Id']}: {by_name['Payload']}")
            received.append(by_name)
            if len(received) == expected:
                break
    return received


def ack_message(database: Any, message_id: int) -> None:
    with database.batch() as batch:
        batch.ack(queue="MyQueue", key=[message_id])
    print(f"Acked message {message_id}")


def renew_lease(database: Any) -> list[Any]:
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(
            "SELECT r.Id, r.SpannerLeaseToken AS token FROM RECEIVE_MyQueue(max_duration => '1m') AS r")
        row = next(iter(results))
        names = [field.name for field in results.fields]
    token = dict(zip(names, row))["token"]

    def renew(transaction: Any) -> list[Any]:
        return list(transaction.execute_sql(
            "SELECT SpannerNewLeaseToken, SpannerLeaseExpirationTimestamp FROM RENEWLEASE_MyQueue("
            "lease_tokens => @tokens)", params={"tokens": [token]}, param_types={"tokens": STRING_ARRAY}))

    renewed = database.run_in_transaction(renew)
    print(f"Renewed the lease of message {row[0]}: {len(renewed)} lease(s)")
    return renewed


def python_snippets(database_id: str) -> dict[str, Any]:
    client = spanner.Client(project=PROJECT)
    instance = sample_instance(client)
    database = sample_database(instance, database_id)
    create_queue(database)
    send_message(database, 1, "Hello")
    send_message_with_dml(database, 2, "World")
    received = receive_messages(database, 2)
    for message in received:
        ack_message(database, message["Id"])
    send_message(database, 3, "Again")
    renewed = renew_lease(database)
    ack_message(database, 3)
    with pytest.raises(exceptions.NotFound, match="^404 Message not found"):
        ack_message(database, 3)
    ddl = list(database.reload() or database.ddl_statements)
    return {"received": received, "renewed": renewed, "ddl": ddl, "dropped": teardown(instance),
            "instances": [i.name for i in client.list_instances()]}


async def test_the_python_queue_snippets_run_as_google_wrote_them(spanner_env, capsys, sql) -> None:  # type: ignore[no-untyped-def]
    outcome = await asyncio.to_thread(python_snippets, "queue-snippets")
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "Created queue MyQueue", "Sent message 1", "1 message(s) sent",
        "Received message 1: Hello", "Received message 2: World", "Acked message 1", "Acked message 2",
        "Sent message 3", "Renewed the lease of message 3: 1 lease(s)", "Acked message 3",
    ]
    assert outcome["received"] == [{"Id": 1, "Payload": "Hello"}, {"Id": 2, "Payload": "World"}]
    assert isinstance(outcome["renewed"][0][0], str)
    assert outcome["ddl"] == ["CREATE QUEUE MyQueue (\n  Id INT64 NOT NULL,\n  Payload STRING(MAX) NOT NULL\n"
                              ") PRIMARY KEY (Id)"]
    # The teardown dropped the database (and its queue) and deleted the instance.
    assert outcome["dropped"] == ["queue-snippets"] and outcome["instances"] == []
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone() == (0,)


def java_node_go_sequence(database_id: str) -> list[Any]:
    """The other languages' samples, translated call for call: DDL in a batch, sends, a receive
    whose row is read by column name, an ack, and their tests' error assertion."""
    client = spanner.Client(project=PROJECT)
    instance = sample_instance(client)
    database = sample_database(instance, database_id, [QUEUE_DDL])
    send_message(database, 7, "from-java")
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql("SELECT Id, Payload FROM RECEIVE_MyQueue(max_duration => '1m', "
                                       "max_batch_size => 1)")
        row = next(iter(results))
        fields = [f.name for f in results.fields]
    ack_message(database, row[fields.index("Id")])
    try:
        ack_message(database, row[fields.index("Id")])
    except exceptions.NotFound as exc:
        error = exc.message  # Java's SpannerException reads "NOT_FOUND: " + this
    try:
        send_message(database, 8, "twice")
        send_message(database, 8, "twice")
    except exceptions.AlreadyExists as exc:
        duplicate = exc.message

    try:
        with database.batch() as batch:
            batch.send(queue="MyQueue", key=[1, 2], payload="wide")
    except exceptions.InvalidArgument as exc:
        wide = exc.message

    def ack_by_dml(transaction: Any) -> None:
        transaction.execute_update("DELETE FROM MyQueue WHERE Id = 99 ASSERT_ROWS_MODIFIED 1")

    try:
        database.run_in_transaction(ack_by_dml)
    except exceptions.OutOfRange as exc:
        asserted = exc.message
    teardown(instance)
    return [fields, row, [error, duplicate, asserted, wide]]


async def test_java_node_and_go_samples_find_columns_by_their_declared_names(spanner_env) -> None:  # type: ignore[no-untyped-def]
    fields, row, error = await asyncio.to_thread(java_node_go_sequence, "java-sample")
    assert fields == ["Id", "Payload"] and row == [7, "from-java"]
    assert error[0].startswith("Message not found")  # the client adds ", request_id = ..." to it
    # The domain's errors name the queue as declared, not its table in the database's namespace.
    for message in error[1:]:
        assert "'MyQueue'" in message and "d1_" not in message, message


# -- item 1: names as declared ---------------------------------------------------------


def _names_sequence(database_id: str) -> dict[str, Any]:
    client = spanner.Client(project=PROJECT)
    database = sample_database(sample_instance(client), database_id, [
        "CREATE QUEUE UserTasks (UserId INT64 NOT NULL, `TaskID` STRING(36) NOT NULL, payload BYTES(MAX) NOT NULL) "
        "PRIMARY KEY (UserId, TaskID)"])
    with database.batch() as batch:
        batch.send(queue="usertasks", key=[1, "a"], payload=b"eA==")  # looked up in any case
    out: dict[str, Any] = {}
    with database.snapshot(multi_use=True) as snapshot:
        results = snapshot.execute_sql("SELECT * FROM USERTASKS")
        out["select_rows"] = list(results)
        out["select"] = [f.name for f in results.fields]
        results = snapshot.execute_sql("SELECT userid, TASKID AS Task, PAYLOAD FROM UserTasks")
        list(results)
        out["listed"] = [f.name for f in results.fields]
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql("SELECT * FROM RECEIVE_userTasks(max_duration => '1m')")
        next(iter(results))
        out["receive"] = [f.name for f in results.fields]
    try:
        with database.snapshot() as snapshot:
            list(snapshot.execute_sql("SELECT Nope FROM UserTasks"))
    except exceptions.InvalidArgument as exc:
        out["error"] = exc.message
    out["ddl"] = list(database.reload() or database.ddl_statements)
    return out


async def test_result_sets_ddl_and_errors_show_names_as_declared(spanner_env, sql, server_config) -> None:  # type: ignore[no-untyped-def]
    out = await asyncio.to_thread(_names_sequence, "names")
    assert out["select"] == ["UserId", "TaskID", "payload", "DeliverTime"]
    assert out["listed"] == ["UserId", "Task", "payload"]
    assert out["receive"] == ["UserId", "TaskID", "payload", "DeliverTime", "SpannerLeaseExpirationTimestamp",
                              "SpannerLeaseToken", "SpannerLastBatchMessage"]
    assert "queue 'UserTasks' has no column 'nope'; it has UserId, TaskID, payload, DeliverTime" in out["error"]
    assert out["ddl"] == ["CREATE QUEUE UserTasks (\n  UserId INT64 NOT NULL,\n  TaskID STRING(36) NOT NULL,\n"
                          "  payload BYTES(MAX) NOT NULL\n) PRIMARY KEY (UserId, TaskID)"]
    # Underneath, PostgreSQL's names stay folded, for psql and spanq.v1.
    assert sql.execute("SELECT userid, taskid FROM d1_usertasks").fetchall() == [(1, "a")]

    # The spelling and the database survive a restart (a second server on the same PostgreSQL).
    again = await start(server_config)
    try:
        def after_restart() -> list[Any]:
            os.environ["SPANNER_EMULATOR_HOST"] = again.target
            client = spanner.Client(project=PROJECT)
            database = client.instance(INSTANCE).database("names")
            with database.snapshot() as snapshot:
                results = snapshot.execute_sql("SELECT UserId FROM UserTasks")
                list(results)
            return [database.exists(), [f.name for f in results.fields], database.reload() or database.ddl_statements]

        exists, fields, ddl = await asyncio.to_thread(after_restart)
        assert exists and fields == ["UserId"] and list(ddl) == out["ddl"]
    finally:
        await again.stop(0)


# -- item 2: RECEIVE_ and RENEWLEASE_ as queries -------------------------------------------


def _receive_queries(database_id: str) -> dict[str, Any]:
    client = spanner.Client(project=PROJECT)
    database = sample_database(sample_instance(client), database_id, [QUEUE_DDL])
    with database.batch() as batch:
        for i, payload in [(1, "skip"), (2, "take"), (3, "take"), (4, "skip")]:
            batch.send(queue="MyQueue", key=[i], payload=payload)
    out: dict[str, Any] = {}
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(
            "SELECT r.Id AS MessageId, r.Payload, SpannerLastBatchMessage FROM RECEIVE_MyQueue(max_duration => '1m', "
            "max_batch_size => 10) AS r WHERE r.Payload = @wanted AND Id > 2 AND DeliverTime <= CURRENT_TIMESTAMP()",
            params={"wanted": "take"}, param_types={"wanted": spanner.param_types.STRING})
        out["filtered"] = [next(iter(results))]
        out["filtered_fields"] = [f.name for f in results.fields]
    # Messages the WHERE passed over were given back, not leased: they are received at once.
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql("SELECT Id FROM RECEIVE_MyQueue(max_duration => '1m') WHERE Id != 3")
        seen: list[int] = []
        for row in results:
            seen.append(row[0])
            if len(seen) == 3:
                break
        out["others"] = sorted(seen)
    return out


async def test_receive_takes_a_column_list_aliases_and_where(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    out = await asyncio.to_thread(_receive_queries, "receive-queries")
    # The one row that passed is the last of its batch (of four leased).
    assert out["filtered"] == [[3, "take", True]]
    assert out["filtered_fields"] == ["MessageId", "Payload", "SpannerLastBatchMessage"]
    assert out["others"] == [1, 2, 4]
    # Passed over: no delivery attempt counted against 1, 2 and 4 by the first RECEIVE.
    assert sql.execute("SELECT id, spanq_delivery_attempt FROM d1_myqueue ORDER BY id").fetchall() == [
        (1, 1), (2, 1), (3, 1), (4, 1)]


@pytest.mark.parametrize("query, message", [
    ("SELECT Nope FROM RECEIVE_MyQueue(max_duration => '1s')", "RECEIVE_MyQueue has no column 'nope'"),
    ("SELECT x.Id FROM RECEIVE_MyQueue(max_duration => '1s') AS r", "'x' is not the FROM's name or alias"),
    ("SELECT Id FROM RECEIVE_MyQueue(max_duration => '1s') WHERE SpannerLeaseToken = 'x'",
     "RECEIVE's WHERE may name the key columns"),
    ("SELECT Id FROM RECEIVE_MyQueue(max_duration => '1s') WHERE Id = 'one'", "does not fit a INT64"),
    ("SELECT * FROM RECEIVE_MyQueue(max_duration => '1s', priority => 'urgent')", "priority must be one of"),
    ("SELECT * FROM RENEWLEASE_MyQueue(['t']) WHERE Id = 1", "RENEWLEASE_ takes no WHERE"),
])
async def test_bad_receive_queries_are_invalid_argument(spanner_env, query, message) -> None:  # type: ignore[no-untyped-def]
    def run() -> None:
        database = sample_database(sample_instance(spanner.Client(project=PROJECT)), "bad-queries", [QUEUE_DDL])
        with database.snapshot() as snapshot:
            list(snapshot.execute_sql(query))

    with pytest.raises(exceptions.InvalidArgument, match=message):
        await asyncio.to_thread(run)


# -- item 7: priority ------------------------------------------------------------------------


async def test_receive_accepts_spanners_priority(spanner_env) -> None:  # type: ignore[no-untyped-def]
    def run() -> list[Any]:
        database = sample_database(sample_instance(spanner.Client(project=PROJECT)), "priority", [QUEUE_DDL])
        send_message(database, 1, "p")
        with database.snapshot() as snapshot:
            results = snapshot.execute_sql(
                "SELECT Id FROM RECEIVE_MyQueue(max_duration => '1m', max_batch_size => 1, priority => @p)",
                params={"p": "HIGH"}, param_types={"p": spanner.param_types.STRING})
            return [next(iter(results))]

    assert await asyncio.to_thread(run) == [[1]]


# -- item 5: the admin calls of Google's fixtures ----------------------------------------------


@dataclasses.dataclass
class AdminAnswers:
    instances: list[str]
    databases: list[str]
    backups: list[Any]
    backup_operations: list[Any]
    database_operations: list[Any]
    missing: dict[str, str]


def _admin_calls() -> AdminAnswers:
    client = spanner.Client(project=PROJECT)
    instance = sample_instance(client)
    sample_database(instance, "first", [QUEUE_DDL])
    sample_database(instance, "second")
    answers = AdminAnswers(
        instances=[i.name for i in client.list_instances()],
        databases=[d.name.rpartition("/")[2] for d in instance.list_databases()],
        backups=list(instance.list_backups()),
        backup_operations=list(instance.list_backup_operations()),
        database_operations=list(instance.list_database_operations()),
        missing={},
    )
    missing = client.instance("no-such-instance")
    gone = instance.database("no-such-db")
    for what, call in [("GetInstance", missing.reload), ("GetDatabase", gone.reload), ("DropDatabase", gone.drop),
                       ("DeleteInstance", missing.delete)]:
        try:
            call()
        except exceptions.NotFound as exc:
            answers.missing[what] = exc.message
    assert not missing.exists() and not gone.exists()
    return answers


async def test_admin_calls_answer_as_the_emulator(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    answers = await asyncio.to_thread(_admin_calls)
    assert answers.instances == [f"projects/{PROJECT}/instances/{INSTANCE}"]
    assert answers.databases == ["first", "second"]
    assert answers.backups == answers.backup_operations == answers.database_operations == []
    base = f"projects/{PROJECT}/instances"
    assert answers.missing == {
        "GetInstance": f"Instance not found: {base}/no-such-instance (create it with CreateInstance)",
        "GetDatabase": f"Database not found: {base}/{INSTANCE}/databases/no-such-db",
        "DropDatabase": f"Database not found: {base}/{INSTANCE}/databases/no-such-db",
        "DeleteInstance": f"Instance not found: {base}/no-such-instance (create it with CreateInstance)",
    }
    assert sql.execute("SELECT name FROM spanq.queues").fetchall() == [("d1_myqueue",)]

    def delete_instance() -> None:
        teardown(spanner.Client(project=PROJECT).instance(INSTANCE))

    await asyncio.to_thread(delete_instance)
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone() == (0,)
    assert sql.execute("SELECT count(*) FROM spanq.spanner_databases").fetchone() == (0,)


async def test_a_failed_create_database_leaves_nothing_behind(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    def create() -> Any:
        instance = sample_instance(spanner.Client(project=PROJECT))
        database = instance.database("half", ddl_statements=[
            QUEUE_DDL, "CREATE QUEUE Bad (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Nope)"])
        with pytest.raises(exceptions.InvalidArgument, match="statement 1: .*'nope' is not defined"):
            database.create().result(timeout=30)
        return database.exists()

    assert await asyncio.to_thread(create) is False
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone() == (0,)
    assert sql.execute("SELECT count(*) FROM spanq.spanner_databases").fetchone() == (0,)


# -- item 4: one namespace per database -------------------------------------------------------


def _own_queue(database_id: str) -> list[Any]:
    """What one test of a suite that makes a fresh database per test does, in parallel with others."""
    database = sample_database(sample_instance(spanner.Client(project=PROJECT)), database_id, [QUEUE_DDL])
    for i in range(3):
        send_message(database, i, f"{database_id}-{i}")
    return [m["Payload"] for m in receive_messages(database, 3)]


async def test_two_databases_have_a_queue_of_one_name_each(spanner_env, sql, capsys) -> None:  # type: ignore[no-untyped-def]
    def instance_first() -> None:
        sample_instance(spanner.Client(project=PROJECT))

    await asyncio.to_thread(instance_first)
    first, second = await asyncio.gather(asyncio.to_thread(_own_queue, "alpha"),
                                         asyncio.to_thread(_own_queue, "beta"))
    assert sorted(first) == ["alpha-0", "alpha-1", "alpha-2"] and sorted(second) == ["beta-0", "beta-1", "beta-2"]
    # A psql user finds each database's queue through spanq.spanner_queues.
    mapped = sql.execute("SELECT database, queue, \"table\" FROM spanq.spanner_queues ORDER BY database").fetchall()
    base = f"projects/{PROJECT}/instances/{INSTANCE}/databases"
    assert [(d, q) for d, q, _ in mapped] == [(f"{base}/alpha", "MyQueue"), (f"{base}/beta", "MyQueue")]
    tables = {d.rpartition("/")[2]: t for d, _, t in mapped}
    assert sorted(tables.values()) == ["d1_myqueue", "d2_myqueue"]
    for database_id, table in tables.items():
        payloads = sql.execute(f'SELECT payload FROM "{table}" ORDER BY id').fetchall()
        assert payloads == [(f"{database_id}-{i}",) for i in range(3)]

    # Dropping one database drops its queue only.
    def drop_alpha() -> None:
        spanner.Client(project=PROJECT).instance(INSTANCE).database("alpha").drop()

    await asyncio.to_thread(drop_alpha)
    assert sql.execute("SELECT name FROM spanq.queues").fetchall() == [(tables["beta"],)]


async def test_a_database_nobody_created_reaches_the_default_namespace(spanner_env, stub, sql) -> None:  # type: ignore[no-untyped-def]
    """spanq.v1's queues, unprefixed, are the default namespace's: a database name that no
    CreateDatabase made reaches them (as every name did before namespaces), DDL included."""
    database = spanner.Client(project=PROJECT).instance("any").database("never-created")

    def unknown() -> list[Any]:
        with pytest.raises(exceptions.NotFound, match="queue 'myqueue' does not exist"):
            send_message(database, 1, "x")
        database.update_ddl([QUEUE_DDL]).result(timeout=30)
        send_message(database, 1, "x")
        return [database.exists()]

    assert await asyncio.to_thread(unknown) == [False]  # still no database of that name
    assert (await stub.GetQueue(queue_pb2.GetQueueRequest(name="myqueue"))).name == "myqueue"
    assert sql.execute("SELECT id, payload FROM myqueue").fetchall() == [(1, "x")]
    assert sql.execute("SELECT database FROM spanq.spanner_names").fetchall() == [(None,)]


# -- item 3 (part): Read and StreamingRead of queues, as Java's readRow makes them -----------


def _reads(database_id: str) -> dict[str, Any]:
    database = sample_database(sample_instance(spanner.Client(project=PROJECT)), database_id, [QUEUE_DDL])
    for i in (3, 1, 2):
        send_message(database, i, f"m{i}")
    KeySet = spanner.KeySet
    out: dict[str, Any] = {}
    with database.snapshot(multi_use=True) as snapshot:
        results = snapshot.read("MyQueue", ["Id", "Payload"], KeySet(keys=[[2], [9], [1]]))
        out["keys"] = list(results)
        out["fields"] = [f.name for f in results.fields]
        out["all"] = list(snapshot.read("myqueue", ["payload", "ID"], KeySet(all_=True), limit=2))
        out["missing"] = list(snapshot.read("MyQueue", ["Id"], KeySet(keys=[[42]])))

    def in_transaction(transaction: Any) -> list[Any]:
        transaction.execute_update("INSERT INTO MyQueue (Id, Payload) VALUES (4, 'm4')")
        return list(transaction.read("MyQueue", ["Id"], KeySet(keys=[[4]])))

    out["own_write"] = database.run_in_transaction(in_transaction)
    for what, call in [("range", lambda s: s.read("MyQueue", ["Id"], KeySet(ranges=[spanner.KeyRange(
                            start_closed=[1], end_open=[3])]))),
                       ("index", lambda s: s.read("MyQueue", ["Id"], KeySet(all_=True), index="ByPayload")),
                       ("column", lambda s: s.read("MyQueue", ["Nope"], KeySet(all_=True))),
                       ("table", lambda s: s.read("T1", ["Id"], KeySet(all_=True)))]:
        try:
            with database.snapshot() as snapshot:
                list(call(snapshot))
        except exceptions.GoogleAPICallError as exc:
            out[what] = f"{exc.code.name}: {exc.message}"
    return out


async def test_read_and_streaming_read_of_a_queue(spanner_env) -> None:  # type: ignore[no-untyped-def]
    out = await asyncio.to_thread(_reads, "reads")
    assert out["keys"] == [[2, "m2"], [1, "m1"]] and out["fields"] == ["Id", "Payload"]
    assert out["all"] == [["m1", 1], ["m2", 2]]
    assert out["missing"] == [] and out["own_write"] == [[4]]
    assert out["range"].startswith("BAD_REQUEST: Read of queue 'MyQueue': key ranges are not supported")
    assert out["index"].startswith("BAD_REQUEST: Read of queue 'MyQueue': queues have no secondary index")
    assert out["column"].startswith("BAD_REQUEST: queue 'MyQueue' has no column 'nope'")
    assert out["table"].startswith("NOT_FOUND: queue 't1' does not exist in this database")


def _deletes(database_id: str) -> dict[str, Any]:
    database = sample_database(sample_instance(spanner.Client(project=PROJECT)), database_id, [QUEUE_DDL])
    for i in (1, 2, 3):
        send_message(database, i, f"m{i}")
    with database.batch() as batch:
        batch.delete("MyQueue", spanner.KeySet(keys=[[1], [99]]))  # a missing row is no error, as in Spanner
        batch.delete("MyQueue", spanner.KeySet(keys=[]))
    out: dict[str, Any] = {}
    try:
        with database.batch() as batch:
            batch.delete("MyQueue", spanner.KeySet(all_=True))
    except exceptions.InvalidArgument as exc:
        out["all"] = exc.message
    with database.snapshot() as snapshot:
        out["left"] = list(snapshot.read("MyQueue", ["Id"], spanner.KeySet(all_=True)))
    return out


async def test_delete_mutations_of_a_queues_messages(spanner_env) -> None:  # type: ignore[no-untyped-def]
    out = await asyncio.to_thread(_deletes, "deletes")
    assert out["left"] == [[2], [3]]
    assert out["all"].startswith("mutation 0: a Delete of a queue's messages takes keys")


# -- item 6: databases of Spanner's PostgreSQL dialect ------------------------------------------

PG_QUEUE_DDL = ("CREATE QUEUE usertasks (userid bigint NOT NULL, messageid varchar(36) NOT NULL, "
                "payload text NOT NULL, PRIMARY KEY (userid, messageid))")


def _pg_sequence(database_id: str) -> dict[str, Any]:
    from google.cloud.spanner_admin_database_v1.types import DatabaseDialect

    instance = sample_instance(spanner.Client(project=PROJECT))
    database = instance.database(database_id, database_dialect=DatabaseDialect.POSTGRESQL)
    database.create().result(timeout=30)
    database.update_ddl([PG_QUEUE_DDL]).result(timeout=30)
    with database.batch() as batch:
        batch.send(queue="usertasks", key=[1, "a"], payload="first")

    def send_dml(transaction: Any) -> int:
        return int(transaction.execute_update(
            "INSERT INTO usertasks (userid, messageid, payload, deliver_time) VALUES ($1, $2, $3, CURRENT_TIMESTAMP)",
            params={"p1": 2, "p2": "b", "p3": "second"},
            param_types={"p1": spanner.param_types.INT64, "p2": spanner.param_types.STRING,
                         "p3": spanner.param_types.STRING}))

    out: dict[str, Any] = {"inserted": database.run_in_transaction(send_dml)}
    rows: list[Any] = []
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql("SELECT * FROM spanner.receive_usertasks(10, NULL, '1m')")
        for row in results:
            rows.append(row)
            if len(rows) == 2:
                break
        out["fields"] = [f.name for f in results.fields]
    out["received"] = sorted(r[:3] for r in rows)
    token = rows[0][out["fields"].index("spanner_lease_token")]

    def renew(transaction: Any) -> list[Any]:
        return list(transaction.execute_sql(
            "SELECT spanner_new_lease_token FROM spanner.renewlease_usertasks(lease_tokens => $1)",
            params={"p1": [token]}, param_types={"p1": STRING_ARRAY}))

    out["renewed"] = len(database.run_in_transaction(renew))

    def ack(transaction: Any, userid: int, messageid: str) -> int:
        return int(transaction.execute_update(
            "DELETE FROM usertasks WHERE userid = $1 AND messageid = $2 ASSERT_ROWS_MODIFIED 1",
            params={"p1": userid, "p2": messageid},
            param_types={"p1": spanner.param_types.INT64, "p2": spanner.param_types.STRING}))

    out["acked"] = [database.run_in_transaction(ack, r[0], r[1]) for r in out["received"]]
    with database.snapshot() as snapshot:
        named = snapshot.execute_sql(
            "SELECT userid FROM spanner.receive_usertasks(max_batch_size => 1, priority => NULL, "
            "max_duration => '100ms')")
        list(named)
        out["named_fields"] = [f.name for f in named.fields]
    out["ddl"] = list(database.reload() or database.ddl_statements)
    out["dialect"] = database.database_dialect
    try:  # GoogleSQL's spelling is not this database's
        with database.snapshot() as snapshot:
            list(snapshot.execute_sql("SELECT * FROM RECEIVE_usertasks(max_duration => '1s')"))
    except exceptions.InvalidArgument as exc:
        out["googlesql"] = exc.message
    return out


async def test_a_postgresql_dialect_database_runs_the_queue_surface(spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    from google.cloud.spanner_admin_database_v1.types import DatabaseDialect

    out = await asyncio.to_thread(_pg_sequence, "pg-db")
    assert out["inserted"] == 1
    assert out["fields"] == ["userid", "messageid", "payload", "deliver_time", "spanner_lease_expiration_timestamp",
                             "spanner_lease_token", "spanner_last_batch_message"]
    assert out["received"] == [[1, "a", "first"], [2, "b", "second"]]
    assert out["renewed"] == 1 and out["acked"] == [1, 1]
    assert out["named_fields"] == ["userid"]
    assert out["ddl"] == ["CREATE QUEUE usertasks (\n  userid bigint NOT NULL,\n  messageid character varying NOT NULL,\n"
                          "  payload character varying NOT NULL,\n  PRIMARY KEY(userid, messageid)\n)"]
    assert out["dialect"] == DatabaseDialect.POSTGRESQL
    assert "the queue functions are in schema spanner" in out["googlesql"]
    assert sql.execute("SELECT count(*) FROM d1_usertasks").fetchone() == (0,)


@pytest.mark.parametrize("statement, message", [
    ("SELECT * FROM spanner.receive_q(1, NULL, '1m', 4)", "takes (max_batch_size, priority, max_duration)"),
    ("SELECT * FROM spanner.receive_q(max_batch_size => 1, 2)", "by position before any named argument"),
    ("SELECT * FROM receive_q(1)", "in schema spanner: spanner.receive_q"),
    ("INSERT INTO q (id, payload, deliver_time) VALUES (1, 'x', CURRENT_TIMESTAMP + INTERVAL 'soon')",
     "give whole units"),
    ("CREATE QUEUE q (id float8, payload text)", "type float8"),
    ("CREATE QUEUE q (id bigint, payload text)", "needs a PRIMARY KEY"),
])
def test_postgresql_dialect_statements_outside_the_subset(statement: str, message: str) -> None:
    from spanq_server.ground.errors import InvalidArgument
    from spanq_server.spanner.query import parser
    from spanq_server.spanner.query.parser import Dialect

    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        parser.parse_queue(statement, Dialect.POSTGRESQL)


# -- Java's ITQueueTest, translated call for call -------------------------------------------

IT_QUEUE_DDL = [
    "CREATE Queue Q1 (  Id INT64 NOT NULL,  Payload BYTES(MAX) NOT NULL,) PRIMARY KEY (Id), "
    "OPTIONS (receive_mode = 'PULL')",
    "CREATE TABLE T1 (  K1                  INT64 NOT NULL,  K                   INT64 NOT NULL,) PRIMARY KEY (K1)",
]


def as_bytes(text: str) -> bytes:
    """Java's Value.bytes(ByteArray.copyFrom(text)): the Python client sends a BYTES value as
    the base64 the caller gives it (and reads one back as base64 too)."""
    return base64.b64encode(text.encode())


def read_row(database: Any, queue: str, key: list[Any], *columns: str) -> Any:
    """Java's readRow: a strong single-use Read of one key; None when the row is not there."""
    with database.snapshot() as snapshot:
        rows = list(snapshot.read(queue, list(columns), spanner.KeySet(keys=[key])))
    return [base64.b64decode(v) if isinstance(v, bytes) else v for v in rows[0]] if rows else None


def java_status_text(exc: exceptions.GoogleAPICallError) -> tuple[str, Any]:
    """What Java's SpannerException says ("<CODE>: " + the status message, which the Python
    client decorates with ", request_id = ..."), and the status's ErrorInfo metadata."""
    [rpc] = exc.errors
    info = error_details_pb2.ErrorInfo()
    assert any(detail.Unpack(info) for detail in rpc_status.from_call(rpc).details)
    return f"{rpc.code().name}: {rpc.details()}", dict(info.metadata)


def it_queue_test(database_id: str) -> dict[str, Any]:
    steps: dict[str, Any] = {}
    database = sample_database(sample_instance(spanner.Client(project=PROJECT)), database_id, IT_QUEUE_DDL)
    steps["ddl"] = list(database.reload() or database.ddl_statements)
    # testSendAndAckMutation
    with database.batch() as batch:  # Java's client.write: one commit of three sends
        batch.send(queue="Q1", key=[1], payload=as_bytes("payload1"))
        batch.send(queue="Q1", key=[2], payload=as_bytes("payload2"))
        batch.send(queue="Q1", key=[3], payload=as_bytes("payload3"), deliver_time=datetime.now(timezone.utc))
    steps["sent"] = [read_row(database, "Q1", [k], "Payload") for k in (1, 2, 3)]
    with database.batch() as batch:
        batch.ack(queue="Q1", key=[1])
        batch.ack(queue="Q1", key=[2])
    steps["after_ack"] = [read_row(database, "Q1", [k], "Payload") for k in (1, 2, 3)]
    # testAckNotFound
    with database.batch() as batch:
        batch.ack(queue="Q1", key=[1], ignore_not_found=True)
    steps["ignored"] = read_row(database, "Q1", [1], "Payload")
    with pytest.raises(exceptions.NotFound) as raised:
        with database.batch() as batch:
            batch.ack(queue="Q1", key=[1], ignore_not_found=False)
    steps["not_found"] = java_status_text(raised.value)
    # The test's table T1 is a table like any other: written and read beside the queue.
    with database.batch() as batch:
        batch.insert("T1", ["K1", "K"], [[1, 10]])
    steps["t1"] = read_row(database, "T1", [1], "K1", "K")
    teardown(database._instance)
    return steps


async def test_javas_it_queue_test_runs_step_by_step(spanner_env) -> None:  # type: ignore[no-untyped-def]
    steps = await asyncio.to_thread(it_queue_test, "it-queue-test")
    # GetDatabaseDdl lists tables before queues (Spanner: in the order made).
    assert sorted(d.split(" (")[0] for d in steps["ddl"]) == ["CREATE QUEUE Q1", "CREATE TABLE T1"]
    assert steps["sent"] == [[b"payload1"], [b"payload2"], [b"payload3"]]
    assert steps["after_ack"] == [None, None, [b"payload3"]]
    assert steps["ignored"] is None
    text, metadata = steps["not_found"]
    assert "NOT_FOUND: Message not found" in text  # the Java test's own assertion
    assert text == "NOT_FOUND: Message not found"  # and exactly Spanner's words, nothing after them
    # spanq's explanation moved to the ErrorInfo, with the key and the queue as declared.
    assert metadata["key"] == "[1]", metadata
    assert "'Q1'" in metadata["detail"] and "ignore_not_found" in metadata["detail"]
    assert steps["t1"] == [1, 10]


# -- the queues pages of Spanner's documentation: their GoogleSQL statements ----------------------

USERS_DDL = [
    "CREATE TABLE Users (UserId INT64 NOT NULL, UserName STRING(MAX)) PRIMARY KEY (UserId)",
    "CREATE QUEUE UserTasks (UserId INT64 NOT NULL, MessageId STRING(36) NOT NULL, Payload BYTES(MAX) NOT NULL) "
    "PRIMARY KEY (UserId, MessageId), INTERLEAVE IN PARENT Users ON DELETE CASCADE",
    "CREATE TABLE ImageUploads (UserId INT64 NOT NULL, ImageId STRING(36) NOT NULL, ImageData BYTES(MAX), "
    "Status STRING(MAX)) PRIMARY KEY (UserId, ImageId), INTERLEAVE IN PARENT Users",
    "CREATE QUEUE ImageProcessingQueue (UserId INT64 NOT NULL, ImageId STRING(36) NOT NULL, "
    "Payload BYTES(1) NOT NULL) PRIMARY KEY (UserId, ImageId), INTERLEAVE IN PARENT ImageUploads ON DELETE CASCADE",
]
RECEIVE_COLUMNS = "UserId, MessageId, Payload, DeliverTime, SpannerLeaseExpirationTimestamp, SpannerLeaseToken"


def documentation_statements(database_id: str, ended: Callable[[], None]) -> dict[str, Any]:
    """``ended()`` returns once the server has no RECEIVE stream open."""
    out: dict[str, Any] = {}
    database = sample_database(sample_instance(spanner.Client(project=PROJECT)), database_id, USERS_DDL)

    def sign_up(transaction: Any) -> None:  # a business row and its message in one commit
        transaction.execute_update("INSERT INTO Users (UserId) VALUES (31)")
        transaction.execute_update("INSERT INTO UserTasks (UserId, MessageId, Payload, DeliverTime) "
                                   "VALUES (31, 'task-a', b'first task', CURRENT_TIMESTAMP())")
        transaction.execute_update("INSERT INTO UserTasks (UserId, MessageId, Payload, DeliverTime) VALUES "
                                   "(31, 'task-later', b'later task', TIMESTAMP_ADD(CURRENT_TIMESTAMP(), "
                                   "INTERVAL 1 HOUR))")
        transaction.execute_update("INSERT INTO Users (UserId, UserName) VALUES (32, 'Someone')")
        transaction.execute_update("INSERT INTO UserTasks (UserId, MessageId, Payload) "
                                   "VALUES (32, 'welcome', b'{\"kind\": \"welcome\"}')")

    database.run_in_transaction(sign_up)
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(f"SELECT {RECEIVE_COLUMNS} FROM RECEIVE_UserTasks(max_duration=>'20m')")
        rows = []
        for row in results:
            rows.append(row)
            if len(rows) == 2:
                break
        out["fields"] = [f.name for f in results.fields]
    # Done with a RECEIVE it stopped reading, a careful user ends it: the Python client has no close,
    # and keeps the call open (leasing what comes) until the result set is freed, which cancels it.
    # Left open, it would lease the send below and write it to nobody (issue 20).
    del results
    ended()
    out["received"] = {(row[0], row[1]) for row in rows}
    with database.batch() as batch:
        batch.send(queue="UserTasks", key=[32, "batched"], payload=as_bytes("in a batch"))
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(f"SELECT {RECEIVE_COLUMNS}, SpannerLastBatchMessage "
                                       "FROM RECEIVE_UserTasks(max_duration=>'20m', max_batch_size=>20)")
        out["batched"] = next(iter(results))
        out["batch_fields"] = [f.name for f in results.fields]
    del results
    ended()

    def ack(transaction: Any) -> list[int]:  # one by DML with the assertion, one as the welcome example does
        counts = [transaction.execute_update(
            "DELETE FROM UserTasks WHERE UserId = @userId AND MessageId = @messageId ASSERT_ROWS_MODIFIED 1",
            params={"userId": 31, "messageId": "task-a"},
            param_types={"userId": spanner.param_types.INT64, "messageId": spanner.param_types.STRING})]
        counts.append(transaction.execute_update("DELETE FROM UserTasks WHERE UserId = 32 AND MessageId = 'welcome'"))
        return counts

    out["acked"] = database.run_in_transaction(ack)

    def upload(transaction: Any) -> None:  # the out-of-band payload pattern: a table row, a minimal message
        transaction.execute_update("INSERT INTO ImageUploads (UserId, ImageId, Status) "
                                   "VALUES (31, 'img-1', 'PENDING')")
        transaction.execute_update("INSERT INTO ImageProcessingQueue (UserId, ImageId, Payload) "
                                   "VALUES (31, 'img-1', b'')")

    database.run_in_transaction(upload)
    with database.snapshot() as snapshot:
        out["image"] = next(iter(snapshot.execute_sql(
            "SELECT UserId, ImageId, Payload FROM RECEIVE_ImageProcessingQueue(max_duration=>'20m')")))
    with database.snapshot() as snapshot:
        out["left"] = list(snapshot.execute_sql("SELECT UserId, MessageId FROM UserTasks ORDER BY DeliverTime"))
    teardown(database._instance)
    return out


async def test_the_documentations_statements_run_with_tables(spanner_env, server) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()

    def ended() -> None:  # on the server's loop: its count of streams is that loop's
        asyncio.run_coroutine_threadsafe(until(lambda: server.receiver.open_streams() == 0,
                                               "the RECEIVE stream to end", 10, 0.01), loop).result()

    out = await asyncio.to_thread(documentation_statements, "queue-docs", ended)
    assert out["fields"] == RECEIVE_COLUMNS.split(", ")
    assert out["batch_fields"] == RECEIVE_COLUMNS.split(", ") + ["SpannerLastBatchMessage"]
    assert out["received"] == {(31, "task-a"), (32, "welcome")}
    assert out["batched"][:3] == [32, "batched", base64.b64encode(b"in a batch")]
    assert out["batched"][6] is True  # a batch of one: its last message
    assert out["acked"] == [1, 1]
    assert out["image"] == [31, "img-1", b""]
    assert out["left"] == [[32, "batched"], [31, "task-later"]]
