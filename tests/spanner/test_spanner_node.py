"""Google's Node.js client, @google-cloud/spanner, pointed at a real spanq server and
PostgreSQL with SPANNER_EMULATOR_HOST, makes the calls Google's Node queue samples make
(nodejs-docs-samples spanner/queue-*.js): the admin calls of their fixtures,
transaction.queueSend / queueAck, INSERT and DELETE through runUpdate, RECEIVE through
database.run and runStream, RENEWLEASE in a transaction.

The samples are not copied: tests/spanner/node/queue.js makes their calls, one case per process
(the arguments as JSON, the answer as JSON lines on stdout). The suite installs the client
itself (npm ci into tests/spanner/node/node_modules, once, from package-lock.json); without node or
npm the tests skip and say what to install.
"""

import asyncio
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from ..conftest import ROOT

NODE_DIR = ROOT / "tests" / "spanner" / "node"
NODE_MAJOR = 20  # @google-cloud/spanner 9.1 declares node >= 22; it runs on 20, which this suite is run with
PROJECT, INSTANCE, DATABASE = "node-project", "node-instance", "queues"
QUEUE_DDL = "CREATE QUEUE MyQueue (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)"
RECEIVE_COLUMNS = ["Id", "Payload", "DeliverTime", "SpannerLeaseExpirationTimestamp", "SpannerLeaseToken",
                   "SpannerLastBatchMessage"]
NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT, OUT_OF_RANGE = 5, 6, 3, 11

Node = Callable[..., Awaitable[Any]]


@pytest.fixture(scope="session")
def node_client() -> str:
    """tests/spanner/node/node_modules as package-lock.json pins it: `npm ci` when the lock changed since
    the last install (a stamp in node_modules says which lock it installed), else nothing."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not on PATH: the Node.js client tests need Node.js {NODE_MAJOR} or "
                    "later with npm (apt-get install nodejs npm, or https://nodejs.org)")
    node = shutil.which("node")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < NODE_MAJOR:
        pytest.skip(f"node {version} is too old for @google-cloud/spanner: install Node.js {NODE_MAJOR} or later")
    lock = NODE_DIR / "package-lock.json"
    stamp = NODE_DIR / "node_modules" / ".spanq-installed"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    with lock.open() as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # two sessions installing at once would tear node_modules
        if not stamp.exists() or stamp.read_text() != digest:
            done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_DIR,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"npm ci in {NODE_DIR} failed:\n{done.stdout}{done.stderr}"
            stamp.write_text(digest)
    assert node is not None
    return node


def node_env(target: str, database: str = DATABASE) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_APPLICATION_CREDENTIALS"}
    env.update(SPANNER_EMULATOR_HOST=target, SPANQ_PROJECT=PROJECT, SPANQ_INSTANCE=INSTANCE,
               SPANQ_DATABASE=database,
               # No client-side metrics export and no GCE metadata probe: neither has a place here.
               SPANNER_DISABLE_BUILTIN_METRICS="true", METADATA_SERVER_DETECTION="none")
    return env


@pytest.fixture
def node(node_client: str, server: Any) -> Node:
    """``await node(case, database=..., **args)``: runs tests/spanner/node/queue.js <case> and returns
    its JSON answer (a Spanner error as {"error": {"code", "details"}})."""
    async def run(case: str, database: str = DATABASE, **args: Any) -> Any:
        process = await asyncio.create_subprocess_exec(
            node_client, "queue.js", case, json.dumps(args), cwd=NODE_DIR, env=node_env(server.target, database),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, f"node queue.js {case} exited {process.returncode}:\n{err.decode()}"
        return json.loads(out.decode().splitlines()[-1])

    return run


@pytest.fixture
async def queues(node: Node) -> dict[str, Any]:
    """The samples' database: created with its queue through the admin client."""
    return await node("create", ddl=[QUEUE_DDL])  # type: ignore[no-any-return]


def timestamp(text: str) -> datetime:
    """The client's timestamps (nanoseconds, 'Z') as datetimes; PostgreSQL keeps microseconds."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{whole}.{(fraction + '000000')[:6]}+00:00")


def messages(sql: psycopg.Connection) -> list[tuple[Any, ...]]:
    """The queue's messages as psql sees them: key, payload, leased."""
    return sql.execute("SELECT id, payload, spanq_lease_expiration_timestamp IS NOT NULL FROM d1_myqueue "
                       "ORDER BY id").fetchall()


class Worker:
    """`node queue.js worker`: a runStream RECEIVE in its own process, its rows read as they come."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process


    async def line(self) -> Any:
        assert self.process.stdout is not None
        text = await asyncio.wait_for(self.process.stdout.readline(), 30)
        assert text, f"the worker ended: {await self.stderr()}"
        return json.loads(text)

    async def rows(self, n: int) -> list[dict[str, Any]]:
        got = [(await self.line())["row"] for _ in range(n)]
        assert await asyncio.wait_for(self.process.wait(), 30) == 0, await self.stderr()
        return got

    async def stderr(self) -> str:
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode()


@pytest.fixture
async def worker(node_client: str, server: Any) -> AsyncIterator[Callable[..., Awaitable[Worker]]]:
    """``await worker(sql, want)``: a Worker started; any still running at the end is killed."""
    started: list[Worker] = []

    async def start(sql: str, want: int) -> Worker:
        process = await asyncio.create_subprocess_exec(
            node_client, "queue.js", "worker", json.dumps({"sql": sql, "want": want}), cwd=NODE_DIR,
            env=node_env(server.target), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        started.append(Worker(process))
        assert await started[-1].line() == {"streaming": True}
        return started[-1]

    yield start
    for each in started:
        if each.process.returncode is None:
            each.process.kill()
            await each.process.wait()


# -- the fixtures' admin calls ------------------------------------------------------------


async def test_the_samples_fixtures_create_and_drop_databases_through_the_admin_client(node, sql) -> None:  # type: ignore[no-untyped-def]
    created = await node("create", ddl=[QUEUE_DDL], more=[
        "CREATE QUEUE Blobs (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)"])
    assert created["instanceExisted"] is False  # instance.exists() was False, so createInstance ran
    # GetDatabaseDdl gives each statement back as declared. (Spanner lists them in the order
    # made; spanq lists queues by name, a known difference, so the order is not asserted.)
    assert sorted(created["statements"]) == [
        "CREATE QUEUE Blobs (\n  Id INT64 NOT NULL,\n  Payload BYTES(MAX) NOT NULL\n) PRIMARY KEY (Id)",
        "CREATE QUEUE MyQueue (\n  Id INT64 NOT NULL,\n  Payload STRING(MAX) NOT NULL\n) PRIMARY KEY (Id)",
    ]
    second = await node("create", database="second", ddl=[QUEUE_DDL])
    assert second["instanceExisted"] is True
    assert sql.execute("SELECT database, queue, \"table\" FROM spanq.spanner_queues ORDER BY 3").fetchall() == [
        (f"projects/{PROJECT}/instances/{INSTANCE}/databases/{DATABASE}", "Blobs", "d1_blobs"),
        (f"projects/{PROJECT}/instances/{INSTANCE}/databases/{DATABASE}", "MyQueue", "d1_myqueue"),
        (f"projects/{PROJECT}/instances/{INSTANCE}/databases/second", "MyQueue", "d2_myqueue"),
    ]
    # A second createDatabase of the same name: ALREADY_EXISTS, in the emulator's words.
    again = await node("create", ddl=[QUEUE_DDL])
    assert again["error"] == {"code": ALREADY_EXISTS, "details": (
        f"Database already exists: projects/{PROJECT}/instances/{INSTANCE}/databases/{DATABASE}")}

    gone = await node("teardown")
    assert sorted(gone["dropped"]) == [DATABASE, "second"] and gone["backups"] == 0 and gone["instances"] == 0
    assert sql.execute("SELECT count(*) FROM spanq.queues").fetchone() == (0,)
    assert sql.execute("SELECT count(*) FROM spanq.spanner_databases").fetchone() == (0,)


# -- sends ----------------------------------------------------------------------------------


async def test_queue_send_mutations_commit_in_a_read_write_transaction(node, queues, sql) -> None:  # type: ignore[no-untyped-def]
    before = datetime.now(timezone.utc)
    # The send sample, and the "in future" sample's deliverTime an hour ahead, in one transaction.
    assert await node("send", queue="MyQueue", messages=[
        {"key": [1], "payload": "Hello, World!"},
        {"key": [3], "payload": "Scheduled message via Mutation API", "deliverIn": 3600}]) == {"sent": 2}
    # A MutationSet outside a transaction (database.writeAtLeastOnce): one single-use commit.
    assert await node("sendAtLeastOnce", queue="MyQueue", messages=[{"key": [2], "payload": "two"}]) == {
        "committed": True}
    rows = sql.execute("SELECT id, payload, deliver_time FROM d1_myqueue ORDER BY id").fetchall()
    assert [(i, p) for i, p, _ in rows] == [(1, "Hello, World!"), (2, "two"), (3, "Scheduled message via Mutation API")]
    assert rows[0][2] < before + timedelta(minutes=1) and rows[2][2] >= before + timedelta(minutes=59)

    # The same key again: ALREADY_EXISTS, and the first message is as it was.
    duplicate = await node("send", queue="MyQueue", messages=[{"key": [1], "payload": "again"}])
    assert duplicate["error"]["code"] == ALREADY_EXISTS
    assert messages(sql)[0] == (1, "Hello, World!", False)


async def test_a_bytes_payload_goes_as_a_buffer_and_comes_back_as_one(node, sql) -> None:  # type: ignore[no-untyped-def]
    await node("create", ddl=["CREATE QUEUE Blobs (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)"])
    await node("send", queue="Blobs", messages=[{"key": [1], "payload": "\u00ff\x00bin", "bytes": True}])
    stored = "\u00ff\x00bin".encode()  # Buffer.from(string) is its UTF-8
    assert sql.execute("SELECT payload FROM d1_blobs").fetchone() == (stored,)
    got = await node("query", sql="SELECT Id, Payload FROM RECEIVE_Blobs(max_duration => '1s')")
    assert got["rows"] == [{"Id": 1, "Payload": {"type": "Buffer", "data": list(stored)}}]


# -- RECEIVE --------------------------------------------------------------------------------


async def test_sql_sends_then_the_receive_sample_leases_what_is_deliverable(node, queues, sql) -> None:  # type: ignore[no-untyped-def]
    sent = await node("dml", statements=[
        {"sql": "INSERT INTO MyQueue (Id, Payload) VALUES (@id, @payload)",
         "params": {"id": 5, "payload": "Hello from Spanner Queue via SQL!"}},
        {"sql": "INSERT INTO MyQueue (Id, Payload, DeliverTime) VALUES (@id, @payload, "
                "TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR))",
         "params": {"id": 4, "payload": "Scheduled message via SQL API"}}])
    assert sent == {"counts": [1, 1]}
    # The sample's database.run: every row once the stream ends (max_duration; '1m' in the sample).
    got = await node("query", sql="SELECT * FROM RECEIVE_MyQueue(max_duration => @wait)", params={"wait": "2s"})
    assert [list(row) for row in got["rows"]] == [RECEIVE_COLUMNS]
    (row,) = got["rows"]  # the scheduled message is not deliverable for an hour
    assert (row["Id"], row["Payload"], row["SpannerLastBatchMessage"]) == (5, "Hello from Spanner Queue via SQL!", True)
    assert isinstance(row["SpannerLeaseToken"], str) and row["SpannerLeaseToken"]
    assert timestamp(row["SpannerLeaseExpirationTimestamp"]) > timestamp(row["DeliverTime"])
    # Message 5 is leased (until the expiry the client was given); 4 waits for its hour.
    leased = sql.execute("SELECT spanq_lease_expiration_timestamp FROM d1_myqueue WHERE id = 5").fetchone()
    assert leased == (timestamp(row["SpannerLeaseExpirationTimestamp"]),)
    assert messages(sql) == [(4, "Scheduled message via SQL API", False), (5, "Hello from Spanner Queue via SQL!", True)]


async def test_a_worker_stream_receives_messages_sent_while_it_waits(node, worker, queues, sql,  # type: ignore[no-untyped-def]
                                                                     await_idle_streams) -> None:
    stream = await worker("SELECT Id, Payload FROM RECEIVE_MyQueue(max_duration => '1m', max_batch_size => 10)", 2)
    await await_idle_streams("d1_myqueue")  # the stream is open on the server, waiting
    await node("send", queue="MyQueue", messages=[{"key": [1], "payload": "a"}, {"key": [2], "payload": "b"}])
    rows = await stream.rows(2)  # each row handed over as it came, long before max_duration
    assert sorted(rows, key=lambda r: r["Id"]) == [{"Id": 1, "Payload": "a"}, {"Id": 2, "Payload": "b"}]
    assert messages(sql) == [(1, "a", True), (2, "b", True)]
    assert await node("ack", queue="MyQueue", keys=[[1], [2]]) == {"acked": 2}
    assert messages(sql) == []


# -- acks -------------------------------------------------------------------------------


async def test_queue_ack_mutations_and_a_second_ack_not_found(node, worker, queues, sql) -> None:  # type: ignore[no-untyped-def]
    await node("send", queue="MyQueue", messages=[{"key": [1], "payload": "Hello"}, {"key": [2], "payload": "keep"}])
    stream = await worker("SELECT Id FROM RECEIVE_MyQueue(max_duration => '1m', max_batch_size => 1)", 1)
    (row,) = await stream.rows(1)
    assert await node("ack", queue="MyQueue", keys=[[row["Id"]]]) == {"acked": 1}
    kept = 3 - row["Id"]
    assert [m[0] for m in messages(sql)] == [kept]
    # The ack sample's comment: the transaction fails when the message is gone. Spanner's words.
    assert await node("ack", queue="MyQueue", keys=[[row["Id"]]]) == {
        "error": {"code": NOT_FOUND, "details": "Message not found"}}
    # With ignoreNotFound the same ack commits, and the other message stays.
    assert await node("ack", queue="MyQueue", keys=[[row["Id"]]], ignoreNotFound=True) == {"acked": 1}
    assert [m[0] for m in messages(sql)] == [kept]


async def test_dml_acks_assert_one_row_and_plain_deletes_do_not(node, queues, sql) -> None:  # type: ignore[no-untyped-def]
    await node("send", queue="MyQueue", messages=[{"key": [1], "payload": "a"}, {"key": [2], "payload": "b"}])
    ack = "DELETE FROM MyQueue WHERE Id = @id ASSERT_ROWS_MODIFIED 1"
    assert await node("dml", statements=[{"sql": ack, "params": {"id": 1}}]) == {"counts": [1]}
    assert [m[0] for m in messages(sql)] == [2]
    # Acked already: ASSERT_ROWS_MODIFIED fails the statement with OUT_OF_RANGE.
    again = await node("dml", statements=[{"sql": ack, "params": {"id": 1}}])
    assert again["error"]["code"] == OUT_OF_RANGE
    # The delete sample: no assertion, so a missing message is 0 rows, and a present one 1.
    delete = "DELETE FROM MyQueue WHERE Id = @id"
    assert await node("dml", statements=[{"sql": delete, "params": {"id": 1}},
                                         {"sql": delete, "params": {"id": 2}}]) == {"counts": [0, 1]}
    assert messages(sql) == []


# -- RENEWLEASE -----------------------------------------------------------------------------


async def test_renewlease_in_a_transaction_extends_the_lease_and_supersedes_the_token(node, worker, queues,  # type: ignore[no-untyped-def]
                                                                                      sql) -> None:
    await node("send", queue="MyQueue", messages=[{"key": [1], "payload": "slow work"}])
    stream = await worker("SELECT Id, SpannerLeaseToken, SpannerLeaseExpirationTimestamp "
                          "FROM RECEIVE_MyQueue(max_duration => '1m')", 1)
    (row,) = await stream.rows(1)
    token = row["SpannerLeaseToken"]
    (renewed,) = (await node("renew", queue="MyQueue", tokens=[token]))["rows"]
    assert list(renewed) == ["SpannerOldLeaseToken", "SpannerNewLeaseToken", "SpannerLeaseExpirationTimestamp"]
    assert renewed["SpannerOldLeaseToken"] == token and renewed["SpannerNewLeaseToken"] not in (None, token)
    expires = timestamp(renewed["SpannerLeaseExpirationTimestamp"])
    assert expires >= timestamp(row["SpannerLeaseExpirationTimestamp"])
    assert sql.execute("SELECT spanq_lease_expiration_timestamp FROM d1_myqueue").fetchone() == (expires,)
    # The old token is superseded: a row, with no new token (Spanner's rule for a lease that
    # cannot be renewed before its time is up).
    (stale,) = (await node("renew", queue="MyQueue", tokens=[token]))["rows"]
    assert stale["SpannerOldLeaseToken"] == token and stale["SpannerNewLeaseToken"] is None
    assert sql.execute("SELECT spanq_lease_expiration_timestamp FROM d1_myqueue").fetchone() == (expires,)


# -- errors ---------------------------------------------------------------------------------


async def test_receive_of_an_unknown_queue_is_spanners_unknown_table_function(node, queues, sql) -> None:  # type: ignore[no-untyped-def]
    await node("send", queue="MyQueue", messages=[{"key": [1], "payload": "untouched"}])
    got = await node("query", sql="SELECT * FROM RECEIVE_NoSuchQueue(max_duration => '1s')")
    # Spanner's analyzer: INVALID_ARGUMENT, "Table-valued function not found: <name>".
    assert got["error"]["code"] == INVALID_ARGUMENT
    assert re.fullmatch(r"Table-valued function not found: RECEIVE_NoSuchQueue", got["error"]["details"],
                        re.IGNORECASE), got
    assert messages(sql) == [(1, "untouched", False)]


# -- the GA queue DDL -------------------------------------------------------------------------


async def test_a_sharded_queue_of_the_ga_ddl_sends_the_other_key_columns_and_acks_the_whole_key(  # type: ignore[no-untyped-def]
        node, sql) -> None:
    from .test_spanner_generated_keys import fingerprint

    created = await node("create", ddl=[
        "CREATE QUEUE Tasks (ShardId INT64 AS (MOD(ABS(FARM_FINGERPRINT(MessageId)), 4)) STORED HIDDEN, "
        "MessageId STRING(36) NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (ShardId, MessageId DESC), "
        "OPTIONS (locality_group = 'hot')"])
    assert created["statements"] == [
        "CREATE QUEUE Tasks (\n  ShardId INT64 AS (MOD(ABS(FARM_FINGERPRINT(MessageId)), 4)) STORED HIDDEN,\n"
        "  MessageId STRING(36) NOT NULL,\n  Payload STRING(MAX) NOT NULL\n) PRIMARY KEY (ShardId, MessageId DESC),\n"
        "  OPTIONS (locality_group = 'hot')"]
    # queueSend with the key the sender knows: the database computes the shard.
    ids = ["c-3", "b-2", "a-1"]
    assert await node("send", queue="Tasks", messages=[{"key": [m], "payload": m} for m in ids]) == {"sent": 3}
    assert sql.execute("SELECT shardid, messageid FROM d1_tasks ORDER BY messageid").fetchall() == sorted(
        [(abs(fingerprint(m)) % 4, m) for m in ids], key=lambda r: r[1])
    got = await node("query", sql="SELECT * FROM RECEIVE_Tasks(max_duration => '1s')")
    assert sorted(row["MessageId"] for row in got["rows"]) == sorted(ids)
    assert all("ShardId" not in row for row in got["rows"])  # HIDDEN
    named = await node("query", sql="SELECT ShardId, MessageId FROM Tasks")
    # In key order: the shard, then MessageId descending (c-3 and b-2 share shard 2).
    assert [(r["ShardId"], r["MessageId"]) for r in named["rows"]] == [(0, "a-1"), (2, "c-3"), (2, "b-2")]
    assert await node("ack", queue="Tasks", keys=[[r["ShardId"], r["MessageId"]] for r in named["rows"]]) == {
        "acked": 3}
    assert sql.execute("SELECT count(*) FROM d1_tasks").fetchone() == (0,)
