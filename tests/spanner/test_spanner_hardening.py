"""The Spanner front-end's limits and edges, through raw google.spanner.v1 calls on a
real server and PostgreSQL: long request ids, transaction lifetime and idle limits,
transactions bound to their token, out-of-range literals, timestamps of years
before 1000 and with nanoseconds (and the same timestamps through spanq.v1)."""

import dataclasses
import time
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.cloud.spanner_v1.types import commit_response, mutation, result_set, spanner, transaction
from google.protobuf import empty_pb2, struct_pb2

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.edge import auth
from spanq_server.ground.config import Config
from spanq_server.server import start

from ..helpers import error_of, key, receive_some, until, value

SESSION = "projects/p/instances/i/databases/d/sessions/s1"
REQUEST_ID = "x-goog-spanner-request-id"
INVALID = grpc.StatusCode.INVALID_ARGUMENT
Pb = Any


class RawSpanner:
    """google.spanner.v1 over a channel, one method per RPC, with call metadata."""

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...] = (),
                 session: str = SESSION) -> None:
        self.metadata = metadata
        self.session = session

        def unary(name: str, request: Any, response: Any) -> Any:
            return channel.unary_unary(f"/google.spanner.v1.Spanner/{name}", request_serializer=request.SerializeToString,
                                       response_deserializer=response.FromString)

        self._begin = unary("BeginTransaction", spanner.BeginTransactionRequest.pb(), transaction.Transaction.pb())
        self._execute = unary("ExecuteSql", spanner.ExecuteSqlRequest.pb(), result_set.ResultSet.pb())
        self._commit = unary("Commit", spanner.CommitRequest.pb(), commit_response.CommitResponse.pb())
        self._rollback = unary("Rollback", spanner.RollbackRequest.pb(), empty_pb2.Empty)
        self._batch = unary("ExecuteBatchDml", spanner.ExecuteBatchDmlRequest.pb(),
                            spanner.ExecuteBatchDmlResponse.pb())
        self._stream = channel.unary_stream(
            "/google.spanner.v1.Spanner/ExecuteStreamingSql",
            request_serializer=spanner.ExecuteSqlRequest.pb().SerializeToString,
            response_deserializer=result_set.PartialResultSet.pb().FromString)
        self.seqno = 0

    async def begin(self) -> bytes:
        request = spanner.BeginTransactionRequest.pb()(session=self.session)
        request.options.read_write.SetInParent()
        return (await self._begin(request, metadata=self.metadata)).id

    async def sql(self, text: str, txn: bytes | None = None, **params: struct_pb2.Value) -> list[list[Any]]:
        """One statement in transaction ``txn`` (None: a strong read); its rows as plain values."""
        self.seqno += 1
        request = spanner.ExecuteSqlRequest.pb()(session=self.session, sql=text, seqno=self.seqno)
        if txn is not None:
            request.transaction.id = txn
        for name, v in params.items():
            request.params.fields[name].CopyFrom(v)
        reply = await self._execute(request, metadata=self.metadata)
        return [[_plain(v) for v in row.values] for row in reply.rows]

    async def batch_dml(self, txn: bytes, *texts: str) -> Any:
        self.seqno += 1
        request = spanner.ExecuteBatchDmlRequest.pb()(session=self.session, seqno=self.seqno, transaction={"id": txn},
                                                      statements=[{"sql": t} for t in texts])
        return await self._batch(request, metadata=self.metadata)

    async def stream(self, text: str, **params: struct_pb2.Value) -> list[Any]:
        request = spanner.ExecuteSqlRequest.pb()(session=self.session, sql=text)
        for name, v in params.items():
            request.params.fields[name].CopyFrom(v)
        return [part async for part in self._stream(request, metadata=self.metadata)]

    async def commit(self, *mutations: Pb, txn: bytes | None = None, request_id: str | None = None) -> Any:
        request = spanner.CommitRequest.pb()(session=self.session, mutations=list(mutations))
        if txn is None:
            request.single_use_transaction.read_write.SetInParent()
        else:
            request.transaction_id = txn
        metadata = self.metadata + (((REQUEST_ID, request_id),) if request_id else ())
        return await self._commit(request, metadata=metadata)

    async def rollback(self, txn: bytes) -> None:
        await self._rollback(spanner.RollbackRequest.pb()(session=self.session, transaction_id=txn),
                             metadata=self.metadata)


def _plain(v: struct_pb2.Value) -> Any:
    return getattr(v, v.WhichOneof("kind"))


def send(queue: str, key_values: list[str], payload: str) -> Pb:
    m = mutation.Mutation.pb()()
    m.send.queue = queue
    m.send.key.values.extend(struct_pb2.Value(string_value=k) for k in key_values)
    m.send.payload.string_value = payload
    return m


def ack(queue: str, key_values: list[str]) -> Pb:
    m = mutation.Mutation.pb()()
    m.ack.queue = queue
    m.ack.key.values.extend(struct_pb2.Value(string_value=k) for k in key_values)
    return m


async def make_queue(stub: Any, name: str, *columns: tuple[str, int], payload: int = queue_pb2.STRING,
                     metadata: tuple[tuple[str, str], ...] = ()) -> None:
    await stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
        name=name, payload_type=payload,
        key_columns=[queue_pb2.KeyColumn(name=n, type=t) for n, t in columns])), metadata=metadata)


@pytest.fixture
def raw(channel: grpc.aio.Channel) -> RawSpanner:
    return RawSpanner(channel)


# -- 3: request ids of any length key the commit ledger whole ----------------------------


async def test_long_request_ids_that_share_a_prefix_are_distinct_requests(stub, raw, sql) -> None:
    await make_queue(stub, "jobs", ("id", queue_pb2.STRING))
    # The client's header: 6 dot-separated parts, the last the attempt. Both ids share
    # their first 200 characters and differ after them.
    first, second = (f"1.{'7' * 200}{end}.1.1.1.1" for end in "ab")
    await raw.commit(send("jobs", ["k"], "x"), request_id="1.1.1.1.1.1")
    await raw.commit(ack("jobs", ["k"]), request_id=first)
    await raw.commit(send("jobs", ["k"], "y"), request_id="1.1.1.1.2.1")
    await raw.commit(ack("jobs", ["k"]), request_id=second)  # not answered from the first one's entry
    assert sql.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    # The client's retry of the second (another attempt number) is answered from the ledger.
    await raw.commit(ack("jobs", ["k"]), request_id=second[:-1] + "2")
    ids = [r for (r,) in sql.execute("SELECT request_id FROM spanq.commit_ledger ORDER BY 1")]
    assert len(ids) == 4 and all(len(r) <= 128 for r in ids)


# -- 8: a read-write transaction's idle and lifetime limits ----------------------------


@pytest.fixture
def server_config(server_config: Config, request: Any) -> Config:
    return dataclasses.replace(server_config, **getattr(request, "param", {}))


@pytest.mark.parametrize("server_config", [{"spanner_transaction_max_lifetime": timedelta(seconds=1.5)}],
                         indirect=True)
async def test_a_busy_transaction_ends_at_its_lifetime(stub, raw, server, sql) -> None:
    # A reader that keeps a transaction busy (a SELECT every 0.3 s, well within the idle
    # limit) no longer holds it, and its locks, for ever.
    assert server.spanner.transactions.max_lifetime == timedelta(seconds=1.5)
    await make_queue(stub, "jobs", ("id", queue_pb2.STRING))
    txn = await raw.begin()
    began = time.monotonic()
    await raw.sql("INSERT INTO jobs (id, Payload) VALUES ('held', 'x')", txn)

    async def used_until_refused() -> grpc.aio.AioRpcError | None:
        try:
            await raw.sql("SELECT * FROM jobs", txn)  # busy, never idle: only its lifetime ends it
        except grpc.aio.AioRpcError as exc:
            return exc
        return None

    failed = await until(used_until_refused, "the transaction to be refused past its lifetime", 5, 0.3)
    assert failed.code() == grpc.StatusCode.ABORTED and "open longer than 1.5s" in failed.details(), failed
    assert time.monotonic() - began >= 1.5
    code, message, _ = await error_of(raw.commit(txn=txn))
    assert code == grpc.StatusCode.ABORTED and "open longer than" in message
    assert server.spanner.transactions.open_count() == 0
    assert sql.execute("SELECT count(*) FROM jobs").fetchone() == (0,)  # rolled back
    sql.execute("SET lock_timeout = '2s'")
    sql.execute("DROP TABLE jobs")  # nothing holds its locks any more (a queue's DDL would not wait)


@pytest.mark.parametrize("server_config", [{"spanner_transaction_idle_timeout": timedelta(seconds=0.5)}],
                         indirect=True)
async def test_an_idle_transaction_ends_at_the_configured_idle_limit(stub, raw, server, sql) -> None:
    transactions = server.spanner.transactions
    assert transactions.idle_timeout == timedelta(seconds=0.5)
    await make_queue(stub, "jobs", ("id", queue_pb2.STRING))
    txn = await raw.begin()
    await raw.sql("INSERT INTO jobs (id, Payload) VALUES ('held', 'x')", txn)
    await until(lambda: transactions.open_count() == 0)
    code, message, _ = await error_of(raw.sql("SELECT * FROM jobs", txn))
    assert code == grpc.StatusCode.ABORTED and "idle longer than 0.5s" in message, message
    assert sql.execute("SELECT count(*) FROM jobs").fetchone() == (0,)


def test_the_limits_are_flags() -> None:
    from spanq_server import cli

    config = cli.parse_config(["serve", "--spanner-transaction-idle-timeout", "3",
                               "--spanner-transaction-max-lifetime", "30"], {})
    assert config.spanner_transaction_idle_timeout == timedelta(seconds=3)
    assert config.spanner_transaction_max_lifetime == timedelta(seconds=30)
    defaults = cli.parse_config(["serve"], {})
    assert defaults.spanner_transaction_idle_timeout == timedelta(seconds=10)
    assert defaults.spanner_transaction_max_lifetime == timedelta(seconds=60)


# -- 14: a transaction belongs to the token that began it -------------------------------


OWNER, OTHER = "tok-owner", "tok-other"
TOKENS = f"""
[tokens.owner]
sha256 = "{auth.digest(OWNER)}"
grants = {{ "*" = ["admin", "select", "send", "receive", "ack"] }}

[tokens.other]
sha256 = "{auth.digest(OTHER)}"
grants = {{ "*" = ["admin", "select", "send", "receive", "ack"] }}
"""


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def test_only_the_token_that_began_a_transaction_may_use_it(server_config, clock, tmp_path, sql) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    running = await start(dataclasses.replace(server_config, auth_file=str(tokens)), clock=clock)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            await make_queue(queue_pb2_grpc.QueueServiceStub(channel), "jobs", ("id", queue_pb2.STRING),
                             metadata=bearer(OWNER))
            owner, other = RawSpanner(channel, bearer(OWNER)), RawSpanner(channel, bearer(OTHER))
            txn = await owner.begin()
            await owner.sql("INSERT INTO jobs (id, Payload) VALUES ('mine', 'x')", txn)
            # Even with every privilege, the other token cannot use, roll back or commit it.
            for call in (other.sql("SELECT * FROM jobs", txn), other.rollback(txn),
                         other.commit(send("jobs", ["theirs"], "y"), txn=txn)):
                code, message, info = await error_of(call)
                assert code == grpc.StatusCode.PERMISSION_DENIED and "begun by another token" in message, message
                assert info["reason"] == "PERMISSION_DENIED"
            assert await owner.sql("SELECT id FROM jobs", txn) == [["mine"]]
            await owner.commit(txn=txn)
            assert sql.execute("SELECT id FROM jobs").fetchall() == [("mine",)]
    finally:
        await running.stop(0)


# -- 10: literals and arguments out of range are INVALID_ARGUMENT, never INTERNAL ------------


async def test_out_of_range_literals_are_invalid_and_store_nothing(stub, raw, sql) -> None:
    await make_queue(stub, "jobs", ("n", queue_pb2.INT64))
    await make_queue(stub, "docs", ("id", queue_pb2.STRING), payload=queue_pb2.JSON)
    txn = await raw.begin()
    deep = "[" * 10_000 + "]" * 10_000
    cases = [
        (f"SELECT * FROM jobs LIMIT {'9' * 5000}", None, {}, "5000 digits"),
        (f"INSERT INTO jobs (n, Payload) VALUES ({'9' * 5000}, 'x')", txn, {}, "at most 19"),
        ("INSERT INTO jobs (n, Payload) VALUES (9999999999999999999, 'x')", txn, {}, "INT64 range"),
        ("INSERT INTO jobs (n, Payload, DeliverTime) VALUES "
         "(1, 'x', TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL 99999999999999 DAY))", txn, {}, "out of range"),
        ("SELECT * FROM jobs WHERE DeliverTime <= TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL 999999999999999999 "
         "MICROSECOND)", None, {}, "out of range"),
        (f"INSERT INTO docs (id, Payload) VALUES ('d', '{deep}')", txn, {}, "nests 10000 levels"),
        ("INSERT INTO docs (id, Payload) VALUES ('d', @doc)", txn,
         {"doc": struct_pb2.Value(string_value=deep)}, "at most 80"),
    ]
    for text, in_txn, params, fragment in cases:
        code, message, _ = await error_of(raw.sql(text, in_txn, **params))
        assert code == INVALID and fragment in message, (text[:80], code, message)
    code, message, _ = await error_of(raw.stream("SELECT * FROM RECEIVE_jobs(max_duration => '9999999999999999h')"))
    assert code == INVALID and "max_duration" in message, message
    # A queue's JSON payload nests at most 30 levels (what a spanq.v1 receiver's protobuf decodes,
    # below Spanner's 80): 31 is refused, 30 works, and the transaction is still usable.
    code, message, _ = await error_of(raw.sql(f"INSERT INTO docs (id, Payload) VALUES ('d', '{'[' * 31 + ']' * 31}')",
                                              txn))
    assert code == INVALID and "nested more than 30" in message, message
    await raw.sql(f"INSERT INTO docs (id, Payload) VALUES ('ok', '{'[' * 30 + ']' * 30}')", txn)
    await raw.commit(txn=txn)
    assert sql.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    assert sql.execute("SELECT id FROM docs").fetchall() == [("ok",)]


# -- 12, 13: TIMESTAMP keys, years 1 to 999, and microseconds --------------------------


async def test_a_year_one_timestamp_key_reads_back_as_rfc3339_and_acks(stub, raw, sql) -> None:
    await make_queue(stub, "stamps", ("at", queue_pb2.TIMESTAMP))
    for when in ("0001-01-01T00:00:00Z", "0999-12-31T23:59:59.5Z"):
        await raw.commit(send("stamps", [when], "x"))
    rows = await raw.sql("SELECT at FROM stamps ORDER BY at")
    assert rows == [["0001-01-01T00:00:00Z"], ["0999-12-31T23:59:59.5Z"]]
    parts = await raw.stream("SELECT * FROM RECEIVE_stamps(max_duration => '1s', max_batch_size => 2)")
    received = [v.string_value for p in parts[1:] for v in p.values[:1]]
    assert sorted(received) == ["0001-01-01T00:00:00Z", "0999-12-31T23:59:59.5Z"]
    txn = await raw.begin()
    for read in received:  # acked by the value as read
        await raw.sql("DELETE FROM stamps WHERE at = @at ASSERT_ROWS_MODIFIED 1", txn,
                      at=struct_pb2.Value(string_value=read))
    await raw.commit(txn=txn)
    assert sql.execute("SELECT count(*) FROM stamps").fetchone() == (0,)
    # spanq.v1 (its codec formats timestamps through protobuf, which was right): the key comes back as sent.
    sent = await stub.Send(queue_pb2.SendRequest(queue="stamps", request_id="v1-year-1", messages=[
        queue_pb2.SendMessage(key=key("0001-01-01T00:00:00Z"), payload=value("x"))]))
    assert sent.keys[0].values[0].string_value == "0001-01-01T00:00:00Z"
    [message] = await receive_some(stub, "stamps", 1)
    assert message.key.values[0].string_value == "0001-01-01T00:00:00Z"
    await stub.Ack(queue_pb2.AckRequest(queue="stamps", acks=[queue_pb2.AckMessage(key=message.key)]))
    assert sql.execute("SELECT count(*) FROM stamps").fetchone() == (0,)


async def test_timestamp_keys_with_nanoseconds_are_refused_never_cut(stub, raw, sql) -> None:
    await make_queue(stub, "stamps", ("at", queue_pb2.TIMESTAMP))
    one, two = "2026-01-01T00:00:00.000000001Z", "2026-01-01T00:00:00.000000002Z"
    for when in (one, two):
        code, message, _ = await error_of(stub.Send(queue_pb2.SendRequest(queue="stamps", messages=[
            queue_pb2.SendMessage(key=key(when), payload=value("x"))])))
        assert code == INVALID and "nanoseconds" in message and "6 fractional digits" in message, message
        code, message, _ = await error_of(raw.commit(send("stamps", [when], "x")))
        assert code == INVALID and "nanoseconds" in message, message
    assert sql.execute("SELECT count(*) FROM stamps").fetchone() == (0,)
    # Microseconds are kept exactly, and come back as sent.
    micro = ["2026-01-01T00:00:00.000001Z", "2026-01-01T00:00:00.000002Z"]
    sent = await stub.Send(queue_pb2.SendRequest(queue="stamps", messages=[
        queue_pb2.SendMessage(key=key(micro[0]), payload=value("x"))]))
    assert sent.keys[0].values[0].string_value == micro[0]
    await raw.commit(send("stamps", [micro[1]], "x"))
    assert await raw.sql("SELECT at FROM stamps ORDER BY at") == [[m] for m in micro]
