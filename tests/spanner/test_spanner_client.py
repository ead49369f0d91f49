"""The official google-cloud-spanner client, pointed at a real spanq server and
PostgreSQL with SPANNER_EMULATOR_HOST, runs Spanner queue code unchanged.

The server runs on the test's event loop, so the client's blocking calls run in
threads (asyncio.to_thread).
"""

import asyncio
import base64
import dataclasses
import os
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_v1.types import CommitRequest
from google.protobuf import struct_pb2
from google.rpc.error_details_pb2 import RetryInfo

from spanq_proto.v1 import queue_pb2
from spanq_server.ground.config import Config
from spanq_server.server import start

from ..conftest import ROOT
from ..helpers import until

pytestmark = [
    # The client library's own deprecations and thread warnings are not ours to fix.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

PROJECT, INSTANCE, DATABASE = "test-project", "test-instance", "test-db"
DDL = [
    """CREATE QUEUE UserTasks (
      UserId    INT64 NOT NULL,
      MessageId STRING(36) NOT NULL,
      Payload   BYTES(MAX) NOT NULL,
    ) PRIMARY KEY (UserId, MessageId),
    OPTIONS (receive_mode = 'PULL')""",
]
INT64, STRING = spanner.param_types.INT64, spanner.param_types.STRING
KEY_TYPES = {"u": INT64, "m": STRING}


def b64(data: bytes) -> bytes:
    """The client sends BYTES as base64 (and hands them back so)."""
    return base64.b64encode(data)


def unb64(data: bytes) -> bytes:
    return base64.b64decode(data)


def make_database(target: str, ddl: list[str] = DDL) -> spanner.Client:
    """What an application's set-up does against the emulator: instance, then database with its DDL."""
    os.environ["SPANNER_EMULATOR_HOST"] = target  # (monkeypatched by the fixture; read at Client())
    client = spanner.Client(project=PROJECT)
    instance = client.instance(INSTANCE, configuration_name=f"projects/{PROJECT}/instanceConfigs/emulator-config",
                               display_name="spanq test", node_count=1)
    assert instance.create().result(timeout=30).name == f"projects/{PROJECT}/instances/{INSTANCE}"
    database = instance.database(DATABASE, ddl_statements=ddl)
    database.create().result(timeout=30)
    return database


@pytest.fixture
def spanner_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", "unset")


@pytest.fixture
async def database(server, spanner_env):  # type: ignore[no-untyped-def]
    return await asyncio.to_thread(make_database, server.target)


def receive(database, max_duration: str = "2s", max_batch_size: int = 10) -> list[tuple[float, list]]:  # type: ignore[no-untyped-def]
    """Runs RECEIVE like a worker does; returns (seconds since the query started, row) per row,
    and appends the stream's end as (seconds, None)."""
    started = time.monotonic()
    seen: list[tuple[float, list]] = []
    with database.snapshot() as snapshot:
        rows = snapshot.execute_sql(
            f"SELECT * FROM RECEIVE_UserTasks(max_duration => '{max_duration}', max_batch_size => {max_batch_size})")
        for row in rows:
            seen.append((time.monotonic() - started, row))
        seen.append((time.monotonic() - started, None))  # type: ignore[arg-type]
    return seen


async def test_send_receive_renew_ack_with_the_official_client(database, stub, sql) -> None:  # type: ignore[no-untyped-def]
    later = datetime.now(timezone.utc) + timedelta(seconds=1.0)

    def send() -> None:
        with database.batch() as batch:
            batch.send(queue="UserTasks", key=[1, "m-now"], payload=b64(b"now"))
            batch.send(queue="UserTasks", key=[2, "m-later"], payload=b64(b"later"), deliver_time=later)

    await asyncio.to_thread(send)
    seen = await asyncio.to_thread(receive, database, "2500ms")
    *rows, (ended, _) = seen
    assert [r[:3] for _, r in rows] == [[1, "m-now", b64(b"now")], [2, "m-later", b64(b"later")]]
    # Rows arrive while the stream is open: the first at once, the scheduled one when due.
    assert rows[0][0] < 0.7 and 0.8 < rows[1][0] < ended - 0.5 and ended >= 2.4
    userid, messageid, payload, deliver_time, lease_expiration, token, last_in_batch = rows[1][1]
    assert abs((deliver_time - later).total_seconds()) < 0.01 and isinstance(token, str) and last_in_batch is True
    assert lease_expiration > datetime.now(timezone.utc)

    def columns() -> list[str]:
        with database.snapshot() as snapshot:
            result = snapshot.execute_sql("SELECT * FROM RECEIVE_UserTasks(max_duration => '100ms')")
            list(result)
            return [f.name for f in result.fields]

    fields = await asyncio.to_thread(columns)
    assert fields == ["UserId", "MessageId", "Payload", "DeliverTime", "SpannerLeaseExpirationTimestamp",
                      "SpannerLeaseToken", "SpannerLastBatchMessage"]

    # Renew a lease in a read-write transaction: a new token and a later expiry.
    def renew(transaction, tokens):  # type: ignore[no-untyped-def]
        return list(transaction.execute_sql(
            "SELECT * FROM RENEWLEASE_UserTasks(lease_tokens => @tokens)",
            params={"tokens": tokens},
            param_types={"tokens": spanner.param_types.Array(STRING)}))

    renewed = await asyncio.to_thread(database.run_in_transaction, renew, [token, "no-such-token"])
    assert len(renewed) == 1 and renewed[0][0] == token and renewed[0][1] not in (None, token)
    assert renewed[0][2] > lease_expiration

    # The same queue through spanq.v1 and through psql: one domain, two front-ends.
    queue = await stub.GetQueue(queue_pb2.GetQueueRequest(name="d1_usertasks"))
    assert [(c.name, queue_pb2.TypeCode.Name(c.type)) for c in queue.key_columns] == [
        ("userid", "INT64"), ("messageid", "STRING")]
    assert queue_pb2.TypeCode.Name(queue.payload_type) == "BYTES"
    ack = await stub.Ack(queue_pb2.AckRequest(queue="d1_usertasks", request_id="v1-ack-1", acks=[
        queue_pb2.AckMessage(key=struct_pb2.ListValue(values=[struct_pb2.Value(string_value="2"),
                                                           struct_pb2.Value(string_value="m-later")]))]))
    assert ack.results[0].acked
    rows_in_pg = sql.execute("SELECT userid, messageid, payload FROM d1_usertasks ORDER BY userid").fetchall()
    assert rows_in_pg == [(1, "m-now", b"now")]
    # Its tokens, acked and superseded, are unrenewable until their leases would have
    # ended: a row with NULLs, as Spanner answers for an acknowledged message.
    tokens = [renewed[0][1], "no-such-token", token]
    unrenewable = await asyncio.to_thread(database.run_in_transaction, renew, tokens)
    assert sorted(unrenewable, key=lambda r: r[0] != tokens[0]) == [[tokens[0], None, None], [token, None, None]]

    # Ack by mutation; acking again is NOT_FOUND, as Spanner's clients see it, unless ignore_not_found.
    def ack_mutation(ignore: bool | None = None) -> None:
        with database.batch() as batch:
            batch.ack(queue="UserTasks", key=[1, "m-now"], ignore_not_found=ignore)

    await asyncio.to_thread(ack_mutation)
    assert sql.execute("SELECT count(*) FROM d1_usertasks").fetchone() == (0,)
    with pytest.raises(exceptions.NotFound, match="gone"):
        await asyncio.to_thread(ack_mutation)
    await asyncio.to_thread(ack_mutation, True)

    # A send through spanq.v1 is received through Spanner's API, and a plain SELECT reads it.
    await stub.Send(queue_pb2.SendRequest(queue="d1_usertasks", request_id="v1-send-1", messages=[
        queue_pb2.SendMessage(key=struct_pb2.ListValue(values=[struct_pb2.Value(string_value="7"),
                                                                   struct_pb2.Value(string_value="from-v1")]),
                                  payload=struct_pb2.Value(string_value=base64.b64encode(b"v1").decode()))]))

    def select() -> list:  # type: ignore[type-arg]
        with database.snapshot() as snapshot:
            return list(snapshot.execute_sql(
                "SELECT UserId, MessageId, Payload FROM UserTasks WHERE UserId = @u AND DeliverTime <= "
                "CURRENT_TIMESTAMP() ORDER BY DeliverTime LIMIT 5", params={"u": 7}, param_types={"u": INT64}))

    assert await asyncio.to_thread(select) == [[7, "from-v1", b64(b"v1")]]
    seen = await asyncio.to_thread(receive, database, "300ms")
    assert [r[:2] for _, r in seen[:-1]] == [[7, "from-v1"]]


async def test_renewlease_with_a_token_twice_answers_one_row(database, stub) -> None:  # type: ignore[no-untyped-def]
    def send() -> None:
        with database.batch() as batch:
            batch.send(queue="UserTasks", key=[1, "a"], payload=b64(b"a"))
            batch.send(queue="UserTasks", key=[2, "b"], payload=b64(b"b"))

    await asyncio.to_thread(send)
    [(_, first), (_, second), _] = await asyncio.to_thread(receive, database, "300ms")
    one, two = first[5], second[5]
    statement = "SELECT * FROM RENEWLEASE_UserTasks(lease_tokens => @tokens)"
    params = {"params": {"tokens": [one, two, one, one]},
              "param_types": {"tokens": spanner.param_types.Array(STRING)}}

    def in_transaction(transaction):  # type: ignore[no-untyped-def]
        return list(transaction.execute_sql(statement, **params))

    renewed = await asyncio.to_thread(database.run_in_transaction, in_transaction)
    assert [r[0] for r in renewed] == [one, two] and all(r[1] for r in renewed)
    # The same under a read-only transaction (it commits on its own), with the new tokens.
    params["params"]["tokens"] = [renewed[0][1], renewed[0][1]]

    def read_only() -> list:  # type: ignore[type-arg]
        with database.snapshot() as snapshot:
            return list(snapshot.execute_sql(statement, **params))

    [again] = await asyncio.to_thread(read_only)
    assert again[0] == renewed[0][1] and again[1] not in (None, renewed[0][1])


async def test_ack_by_dml_with_resend_in_run_in_transaction(database, sql) -> None:  # type: ignore[no-untyped-def]
    await asyncio.to_thread(_send, database, [(10, "job-1", b"work")])
    [(_, row), _end] = await asyncio.to_thread(receive, database, "300ms")

    # Spanner's "ack and re-send later" pattern: DELETE ... ASSERT_ROWS_MODIFIED 1 and an INSERT, atomically.
    def ack_and_resend(transaction):  # type: ignore[no-untyped-def]
        deleted = transaction.execute_update(
            "DELETE FROM UserTasks WHERE UserId = @u AND MessageId = @m ASSERT_ROWS_MODIFIED 1",
            params={"u": row[0], "m": row[1]}, param_types=KEY_TYPES)
        inserted = transaction.execute_update(
            "INSERT INTO UserTasks (UserId, MessageId, Payload, DeliverTime) "
            "VALUES (@u, 'job-1-retry', @p, TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR))",
            params={"u": row[0], "p": row[2]}, param_types={"u": INT64, "p": spanner.param_types.BYTES})
        return deleted, inserted

    assert await asyncio.to_thread(database.run_in_transaction, ack_and_resend) == (1, 1)
    [(key, payload, delay)] = sql.execute(
        "SELECT messageid, payload, extract(epoch FROM deliver_time - now()) FROM d1_usertasks").fetchall()
    assert key == "job-1-retry" and payload == b"work" and 3500 < delay <= 3600

    # Run again (as after an unknown commit): the ack finds nothing, OUT_OF_RANGE, nothing committed.
    with pytest.raises(exceptions.OutOfRange, match="ASSERT_ROWS_MODIFIED 1"):
        await asyncio.to_thread(database.run_in_transaction, ack_and_resend)
    assert sql.execute("SELECT count(*) FROM d1_usertasks").fetchone() == (1,)

    # OUT_OF_RANGE is statement-level: the transaction stays open and usable; what it
    # wrote before is committed if the caller goes on to commit.
    def keep_going(transaction):  # type: ignore[no-untyped-def]
        transaction.execute_update("INSERT INTO UserTasks (UserId, MessageId, Payload) VALUES (11, 'kept', b'k')")
        with pytest.raises(exceptions.OutOfRange):
            transaction.execute_update("DELETE FROM UserTasks WHERE UserId = 11 AND MessageId = 'missing' "
                                       "ASSERT_ROWS_MODIFIED 1")
        return list(transaction.execute_sql("SELECT MessageId FROM UserTasks WHERE UserId = 11"))

    assert await asyncio.to_thread(database.run_in_transaction, keep_going) == [["kept"]]
    assert sql.execute("SELECT messageid FROM d1_usertasks WHERE userid = 11").fetchall() == [("kept",)]


async def test_drop_database_drops_a_child_queue_before_its_parent(server, spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    database = await asyncio.to_thread(make_database, server.target, [
        "CREATE QUEUE Alpha (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)",
        "CREATE QUEUE Beta (Id INT64 NOT NULL, Seq INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) "
        "PRIMARY KEY (Id, Seq), INTERLEAVE IN PARENT Alpha ON DELETE CASCADE",
    ])
    await asyncio.to_thread(database.drop)  # alpha comes first by name, and waits for beta
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone() == (0,)


KELVIN = "\u212a"
"""KELVIN SIGN, whose Unicode lower case is the ASCII letter k."""


async def test_names_fold_ascii_letters_only(database, sql) -> None:  # type: ignore[no-untyped-def]
    """A-Z fold to a-z, in statements (backquoted or not) and in mutations; nothing else
    folds, so a look-alike of an ASCII letter never reaches an ASCII-named queue."""
    def send_to(queue: str) -> None:
        with database.batch() as batch:
            batch.send(queue=queue, key=[1, queue], payload=b64(b"x"))

    def query(text: str) -> list:  # type: ignore[type-arg]
        with database.snapshot() as snapshot:
            return list(snapshot.execute_sql(text))

    def ddl(statement: str) -> None:
        database.update_ddl([statement]).result(timeout=30)

    await asyncio.to_thread(send_to, "USERTASKS")
    assert [r[1] for r in await asyncio.to_thread(query, "SELECT * FROM `USERtasks`")] == ["USERTASKS"]
    invalid = r"queue name 'usertas\u212as' \('usertas\\u212as'\) is not valid"  # shown as it is, escaped too
    for name in (f"UserTas{KELVIN}s", f"userTas{KELVIN}s"):
        with pytest.raises(exceptions.InvalidArgument, match=invalid):
            await asyncio.to_thread(send_to, name)
        with pytest.raises(exceptions.InvalidArgument, match=invalid):
            await asyncio.to_thread(query, f"SELECT * FROM `{name}`")
    with pytest.raises(exceptions.InvalidArgument, match=r"queue name '\u212aq' \('\\u212aq'\) is not valid"):
        await asyncio.to_thread(ddl, f"CREATE QUEUE `{KELVIN}Q` (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) "
                                     "PRIMARY KEY (Id)")
    assert sql.execute("SELECT messageid FROM d1_usertasks").fetchall() == [("USERTASKS",)]
    assert sql.execute("SELECT name FROM spanq.queues").fetchall() == [("d1_usertasks",)]


def _send(database, messages) -> None:  # type: ignore[no-untyped-def]
    with database.batch() as batch:
        for userid, messageid, payload in messages:
            batch.send(queue="UserTasks", key=[userid, messageid], payload=b64(payload))


async def test_errors_as_the_client_raises_them(database, server) -> None:  # type: ignore[no-untyped-def]
    await asyncio.to_thread(_send, database, [(1, "a", b"x")])
    with pytest.raises(exceptions.AlreadyExists):
        await asyncio.to_thread(_send, database, [(1, "a", b"x")])

    def send_to(queue: str) -> None:
        with database.batch() as batch:
            batch.send(queue=queue, key=[1, "b"], payload=b64(b"x"))

    with pytest.raises(exceptions.NotFound, match="nosuchqueue"):
        await asyncio.to_thread(send_to, "NoSuchQueue")

    def query(text: str) -> list:  # type: ignore[type-arg]
        with database.snapshot() as snapshot:
            return list(snapshot.execute_sql(text))

    with pytest.raises(exceptions.InvalidArgument, match="Table not found: other"):
        await asyncio.to_thread(query, "SELECT a.x FROM UserTasks a JOIN Other b ON a.x = b.y")
    with pytest.raises(exceptions.InvalidArgument, match="max_duration"):
        await asyncio.to_thread(query, "SELECT * FROM RECEIVE_UserTasks(max_duration => 'soon')")
    with pytest.raises(exceptions.InvalidArgument, match="read-write"):
        await asyncio.to_thread(query, "DELETE FROM UserTasks WHERE UserId = 1 AND MessageId = 'a'")

    def ddl(statements: list[str]) -> None:
        database.update_ddl(statements).result(timeout=30)

    with pytest.raises(exceptions.AlreadyExists):
        await asyncio.to_thread(ddl, DDL)
    await asyncio.to_thread(ddl, ["CREATE QUEUE IF NOT EXISTS UserTasks (Id INT64, Payload BYTES(MAX)) "
                                  "PRIMARY KEY (Id)",
                                  "CREATE QUEUE Other (Id STRING(MAX) NOT NULL, Payload JSON NOT NULL) "
                                  "PRIMARY KEY (Id)"])
    statements = await asyncio.to_thread(lambda: database.reload() or database.ddl_statements)
    assert [s.split("(")[0].strip() for s in statements] == ["CREATE QUEUE Other", "CREATE QUEUE UserTasks"]
    with pytest.raises(exceptions.InvalidArgument, match="only CREATE QUEUE, CREATE TABLE"):
        await asyncio.to_thread(ddl, ["CREATE VIEW V SQL SECURITY INVOKER AS SELECT 1"])

    # Committing a transaction the server does not hold (reaped, lost, never begun) is
    # ABORTED with a short RetryInfo, so run_in_transaction runs the function again at once.
    def commit_unknown_transaction() -> None:
        database.spanner_api.commit(request=CommitRequest(
            session=f"{database.name}/sessions/any", transaction_id=b"rw-not-a-transaction"))

    with pytest.raises(exceptions.Aborted, match="not found") as aborted:
        await asyncio.to_thread(commit_unknown_transaction)
    retry = RetryInfo.FromString(dict(aborted.value.errors[0].trailing_metadata())["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.ToTimedelta() == timedelta(milliseconds=50)


async def test_json_no_client_could_receive_is_refused_on_insert_and_send(  # type: ignore[no-untyped-def]
        database, sql) -> None:
    """Stored, these broke every spanq.v1 Receive of the queue: a number past a double's
    range, and lists nested past protobuf's limit. Both write paths refuse them."""
    await asyncio.to_thread(lambda: database.update_ddl([
        "CREATE QUEUE Docs (Id STRING(MAX) NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id)"]).result(timeout=30))
    overflow = '{"n": 1' + "0" * 400 + "}"
    nested = "[" * 300 + "]" * 300

    def insert(payload: str) -> None:
        database.run_in_transaction(
            lambda tx: tx.execute_update(f"INSERT INTO Docs (Id, Payload) VALUES ('a', '{payload}')"))

    def send(payload: str) -> None:
        with database.batch() as batch:
            batch.send(queue="Docs", key=["b"], payload=payload)

    for payload in (overflow, nested):
        for write in (insert, send):
            with pytest.raises(exceptions.InvalidArgument, match="double's range|nested more than 30|nests at most 80"):
                await asyncio.to_thread(write, payload)
    assert sql.execute("SELECT count(*) FROM d1_docs").fetchone() == (0,)
    await asyncio.to_thread(insert, '{"n": 1}')
    assert sql.execute("SELECT payload FROM d1_docs").fetchall() == [({"n": 1},)]


async def test_a_lost_commit_reply_is_replayed_by_the_clients_own_retry(
        server_config: Config, clock, spanner_env, sql) -> None:  # type: ignore[no-untyped-def]
    # Every commit commits, then its reply is "lost". The server answers UNAVAILABLE
    # (the outcome is in the ledger), the client resends the same request id, and
    # the commit ledger answers: exactly one effect, no ALREADY_EXISTS / NOT_FOUND.
    running = await start(dataclasses.replace(server_config, inject_faults="unknown_commit_after=1"), clock=clock)
    try:
        database = await asyncio.to_thread(make_database, running.target)
        await asyncio.to_thread(_send, database, [(1, "once", b"x")])  # a single-use Commit
        assert sql.execute("SELECT userid, messageid FROM d1_usertasks").fetchall() == [(1, "once")]

        # RENEWLEASE under a read-only transaction commits on its own; its lost reply is settled too.
        [(_, row), _end] = await asyncio.to_thread(receive, database, "300ms")

        def renew_read_only() -> list:  # type: ignore[type-arg]
            with database.snapshot() as snapshot:
                return list(snapshot.execute_sql(f"SELECT * FROM RENEWLEASE_UserTasks(lease_tokens => ['{row[5]}'])"))

        [[old, new, _until]] = await asyncio.to_thread(renew_read_only)
        assert old == row[5] and new != old

        def ack_and_resend(transaction):  # type: ignore[no-untyped-def]
            transaction.execute_update("DELETE FROM UserTasks WHERE UserId = 1 AND MessageId = 'once' "
                                       "ASSERT_ROWS_MODIFIED 1")
            transaction.execute_update("INSERT INTO UserTasks (UserId, MessageId, Payload) VALUES (1, 'twice', b'y')")

        await asyncio.to_thread(database.run_in_transaction, ack_and_resend)  # a Commit with a transaction id
        assert sql.execute("SELECT userid, messageid FROM d1_usertasks").fetchall() == [(1, "twice")]

        def send_in_transaction(transaction):  # type: ignore[no-untyped-def]
            # Mutations only: BeginTransaction with mutation_key, then Commit with the id.
            transaction.send(queue="UserTasks", key=[1, "thrice"], payload=b64(b"z"))

        await asyncio.to_thread(database.run_in_transaction, send_in_transaction)
        assert sql.execute("SELECT messageid FROM d1_usertasks ORDER BY 1").fetchall() == [("thrice",), ("twice",)]

        def ack() -> None:
            with database.batch() as batch:
                batch.ack(queue="UserTasks", key=[1, "twice"])
                batch.ack(queue="UserTasks", key=[1, "thrice"])

        await asyncio.to_thread(ack)  # not NOT_FOUND: the retry is answered from the ledger
        assert sql.execute("SELECT count(*) FROM d1_usertasks").fetchone() == (0,)
        assert running.mutator.faults.injected["unknown_commit_after"] == 5
        assert sql.execute("SELECT count(*) FROM spanq.commit_ledger WHERE request_id LIKE 'spanner:%'"
                           ).fetchone() == (4,)
    finally:
        await running.stop(0)


async def test_abandoned_transactions_are_reaped(database, server, sql) -> None:  # type: ignore[no-untyped-def]
    transactions = server.spanner.transactions
    transactions.idle_timeout = timedelta(milliseconds=300)
    await asyncio.to_thread(_send, database, [(5, "held", b"x")])

    # The function fails with a Google API error, so run_in_transaction re-raises it
    # without rolling back: the transaction (holding a DELETE's row lock) is abandoned.
    def abandon(transaction):  # type: ignore[no-untyped-def]
        transaction.execute_update("DELETE FROM UserTasks WHERE UserId = 5 AND MessageId = 'held'")
        transaction.execute_update("DELETE FROM UserTasks WHERE UserId = 5 AND MessageId = 'x' ASSERT_ROWS_MODIFIED 1")

    with pytest.raises(exceptions.OutOfRange):
        await asyncio.to_thread(database.run_in_transaction, abandon)
    assert transactions.open_count() == 1
    await until(lambda: transactions.open_count() == 0, "the reaper to roll it back", 5, 0.05)
    assert transactions.reaped >= 1
    # Rolled back: the message is still there and deliverable.
    seen = await asyncio.to_thread(receive, database, "300ms")
    assert [r[:2] for _, r in seen[:-1]] == [[5, "held"]]


async def test_the_example_runs(server, spanner_env) -> None:  # type: ignore[no-untyped-def]
    env = dict(os.environ, SPANNER_EMULATOR_HOST=server.target)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "examples" / "spanner_queue.py"), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    text = out.decode()
    assert process.returncode == 0, text
    assert "received 3 message(s)" in text and "acked" in text, text
