"""Lease safety under churn (issue 20): clients that cancel, drop and reopen their
streams at random points, under short leases, through both front-ends and the
SDK, on one queue. Every delivery, ack, renewal and release goes into a
LeaseHistory, and the checker proves that no message was held by two holders at
once, no ack of a current token was refused, no delivery attempt was taken back,
and nothing was lost.

The consumers, all at once for CHURN_S seconds while a producer keeps a backlog:
- spanq.v1 streams (generated stubs) that read one to three responses and then
  cancel the call, close the channel under it, or abandon it and open the next;
  each message is then acked, released, renewed and acked, or left to lapse;
- Spanner RECEIVE queries (google-cloud-spanner) that stop after a few rows and
  drop the result set, then ack by mutation or renew with RENEWLEASE;
- SDK subscribers, with async and with sync callbacks, started and stopped again
  and again.
Then one calm stream acks what is left. `make test` churns for 12 s, `make chaos`
for 250 s.

The spanq.v1 churn is what the server's give-back defect needed (a response
read, then the call ended at once): before its fix this test failed in 2 of 3
runs of 25 s here, and in each run of 250 s. It is a race, so a shorter run
catches it less often, not never: 12 s still ends about 250 calls (75 to 90 each
way: cancelled, dropped, abandoned), half of what 25 s ends, which from 2 in 3 at
25 s is about 2 in 5 runs, and CI runs it twice. With the defect put back on the tree of session 11, five
runs (three of 12 s, two of 25 s) all passed on a quiet machine: the race is
rarer there at either length. tests/store/test_lease_rule.py pins that defect
without a race (all four of its handover tests fail with it back), and make chaos
keeps the long churn.
"""

import asyncio
import os
import random
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.protobuf import field_mask_pb2, struct_pb2

import spanq
import spanq.aio
from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.domain.queues import DEFAULT_LEASE

from ..helpers import duration, plain, stamp, until
from ..lease_history import OK, REFUSED, UNKNOWN, LeaseHistory, now
from ..spawned import free_port, spawn_server, wait_serving_sync

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

SCALE = int(os.environ.get("SPANQ_CHAOS_SCALE", "1"))
CHURN_S = 25.0 * SCALE if SCALE > 1 else 12.0
"""12 s in make test, 250 s in make chaos (the module's docstring says what the shorter run still catches)."""
BACKLOG = 200
"""The producer keeps about this many messages unacked."""
PAYLOAD = "x" * 100_000
"""More than HTTP/2's first window (64 KiB): the server's write of a response ends only after the
client let it through, which is when a client that reads and cancels at once overtakes it."""
V1_CHURNERS = 8
SPANNER_LEASE = timedelta(seconds=5)
"""The queue's lease (UpdateQueue, after the DDL made it with the default 10 s), which is what RECEIVE
leases for: what a Spanner churner leaves unacked lapses within the drain's first seconds."""
QUEUE_DDL = "CREATE QUEUE Churn (Id STRING(MAX) NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)"
REFUSALS = {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.OUT_OF_RANGE}
"""An ack's answers that say the lease is not (or no longer) held."""


def the_key(m: queue_pb2.ReceivedMessage) -> str:
    return str(plain(m.key)[0])


class Churn:
    def __init__(self, target: str, queue: str, seed: int) -> None:
        self.target = target
        self.queue = queue
        self.history = LeaseHistory()
        self.rng = random.Random(seed)
        self.ends: dict[str, int] = {"cancel": 0, "drop": 0, "abandon": 0, "sdk_stops": 0, "spanner_drops": 0}
        self.stop = threading.Event()  # the churn is over (the threads read it too)
        self.acked: set[str] = set()
        self._settling: set[asyncio.Task[None]] = set()

    # -- sending ---------------------------------------------------------------

    async def produce(self, stub: queue_pb2_grpc.QueueServiceStub) -> None:
        n = 0
        while not self.stop.is_set():
            if len(self.history.sent) - len(self.acked) > BACKLOG:
                await asyncio.sleep(0.02)  # the producer's pace: a backlog, not a flood
                continue
            keys = [f"m{n + i}" for i in range(50)]
            n += 50
            request = queue_pb2.SendRequest(queue=self.queue, request_id=str(uuid.uuid4()), messages=[
                queue_pb2.SendMessage(key=struct_pb2.ListValue(values=[struct_pb2.Value(string_value=k)]),
                                      payload=struct_pb2.Value(string_value=PAYLOAD)) for k in keys])
            while True:
                try:
                    await stub.Send(request, timeout=10)
                    break
                except grpc.aio.AioRpcError as exc:  # a loaded machine: the same request_id again
                    if exc.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                        raise
            for k in keys:
                self.history.send_confirmed(k)

    # -- spanq.v1 --------------------------------------------------------------

    def _channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.target)

    async def v1_churner(self, i: int, settle: queue_pb2_grpc.QueueServiceStub) -> None:
        """``settle``: a stub on a channel of its own, which no churn closes."""
        channel = self._channel()
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        rng = random.Random(self.rng.random())
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                holder, lease = f"v1-{i}.{n}", rng.uniform(2, 5)
                call = stub.Receive(queue_pb2.ReceiveRequest(
                    queue=self.queue, max_batch_size=rng.randint(1, 2), lease_duration=duration(lease),
                    max_duration=duration(10)))
                got: list[queue_pb2.ReceivedMessage] = []
                want = rng.randint(1, 2)
                try:
                    async with asyncio.timeout(3):
                        responses = 0
                        async for response in call:
                            for m in response.messages:
                                self.history.delivered(the_key(m), m.lease_token, m.delivery_attempt,
                                                       stamp(m.lease_expiration_time), timedelta(seconds=lease),
                                                       holder)
                                got.append(m)
                            responses += 1
                            if responses >= want:
                                break
                except (TimeoutError, grpc.aio.AioRpcError):
                    pass
                how = rng.choice(["cancel", "drop", "abandon"])
                self.ends[how] += 1
                if how == "cancel":
                    call.cancel()
                if how != "abandon":  # "drop": the connection goes away under the call
                    await channel.close()
                    channel = self._channel()
                    stub = queue_pb2_grpc.QueueServiceStub(channel)
                # "abandon": the next Receive opens on the same connection while this one is left as it is
                for m in got:
                    task = asyncio.create_task(self._settle_v1(settle, m, holder, rng.random()))
                    self._settling.add(task)
                    task.add_done_callback(self._settling.discard)
        finally:
            await asyncio.gather(*self._settling, return_exceptions=True)
            await channel.close()

    async def _settle_v1(self, stub: queue_pb2_grpc.QueueServiceStub, m: queue_pb2.ReceivedMessage, holder: str,
                         dice: float) -> None:
        k, token = the_key(m), m.lease_token
        sent = now()
        try:
            await self._settle_v1_once(stub, m, holder, dice)
        except grpc.aio.AioRpcError:
            self.history.settled("renew" if dice < 0.4 else "ack", k, token, holder, sent, UNKNOWN)

    async def _settle_v1_once(self, stub: queue_pb2_grpc.QueueServiceStub, m: queue_pb2.ReceivedMessage,
                              holder: str, dice: float) -> None:
        k, token = the_key(m), m.lease_token
        if dice < 0.15:
            return  # left to lapse: redelivered after its lease
        if dice < 0.25:  # released
            sent = now()
            await stub.RenewLease(queue_pb2.RenewLeaseRequest(queue=self.queue, lease_tokens=[token],
                                                              lease_duration=duration(0)), timeout=10)
            self.history.settled("nack", k, token, holder, sent, OK)
            return
        if dice < 0.4:  # renewed, then acked with the new token
            sent = now()
            reply = await stub.RenewLease(queue_pb2.RenewLeaseRequest(queue=self.queue, lease_tokens=[token],
                                                                      lease_duration=duration(3)), timeout=10)
            [renewed] = reply.leases
            if not renewed.new_lease_token:
                self.history.settled("renew", k, token, holder, sent, REFUSED)
                return
            self.history.settled("renew", k, token, holder, sent, OK, renewed.new_lease_token,
                                 stamp(renewed.lease_expiration_time))
            token = renewed.new_lease_token
        sent = now()
        try:
            await stub.Ack(queue_pb2.AckRequest(queue=self.queue, acks=[queue_pb2.AckMessage(
                key=m.key, lease_token=token)]), timeout=10)
        except grpc.aio.AioRpcError as exc:
            self.history.settled("ack", k, token, holder, sent, REFUSED if exc.code() in REFUSALS else UNKNOWN)
            return
        self.history.settled("ack", k, token, holder, sent, OK)
        self.acked.add(k)

    # -- the Spanner front-end, through Google's client (on threads) -------------

    def spanner_churner(self, i: int, database: Any) -> None:
        rng = random.Random(self.rng.random())
        n = 0
        while not self.stop.is_set():
            n += 1
            holder, want = f"spanner-{i}.{n}", rng.randint(1, 5)
            rows = []
            try:
                with database.snapshot() as snapshot:
                    results = snapshot.execute_sql(
                        "SELECT Id, SpannerLeaseToken, SpannerLeaseExpirationTimestamp FROM "
                        f"RECEIVE_Churn(max_duration => '2s', max_batch_size => {rng.randint(1, 10)})")
                    for row in results:
                        self.history.delivered(row[0], row[1], None, row[2], SPANNER_LEASE, holder)
                        rows.append(row)
                        if len(rows) >= want:
                            break  # the stream stays open until the result set is dropped
                    del results
            except exceptions.GoogleAPICallError:
                pass  # a loaded machine (DEADLINE_EXCEEDED): what it had read is settled below
            self.ends["spanner_drops"] += 1
            for k, token, _ in rows:
                if rng.random() < 0.3:
                    sent = now()
                    try:
                        renewed = list(database.run_in_transaction(lambda tx: list(tx.execute_sql(
                            "SELECT * FROM RENEWLEASE_Churn(lease_tokens => @tokens)", params={"tokens": [token]},
                            param_types={"tokens": spanner.param_types.Array(spanner.param_types.STRING)}))))
                    except exceptions.GoogleAPICallError:
                        self.history.settled("renew", k, token, holder, sent, UNKNOWN)
                        continue
                    if not renewed or renewed[0][1] is None:
                        self.history.settled("renew", k, token, holder, sent, REFUSED)
                        continue
                    self.history.settled("renew", k, token, holder, sent, OK, renewed[0][1], renewed[0][2])
                sent = now()
                try:
                    with database.batch() as batch:
                        batch.ack(queue="Churn", key=[k])
                except exceptions.NotFound:
                    self.history.settled("ack", k, None, holder, sent, REFUSED)
                    continue
                except exceptions.GoogleAPICallError:
                    self.history.settled("ack", k, None, holder, sent, UNKNOWN)
                    continue
                self.history.settled("ack", k, None, holder, sent, OK)
                self.acked.add(k)

    # -- the SDK, stopped and started again and again ------------------------------

    async def sdk_churner(self, i: int) -> None:
        rng = random.Random(self.rng.random())
        n = 0
        async with spanq.aio.Client(self.target) as client:
            while not self.stop.is_set():
                n += 1
                holder = f"sdk-{i}.{n}"
                lease = timedelta(seconds=rng.uniform(2, 5))
                sync = n % 2 == 0
                callback = self._sync_callback(holder, lease) if sync else self._async_callback(holder, lease)
                subscription = client.subscribe(
                    self.queue, callback, flow_control=spanq.FlowControl(max_messages=rng.randint(1, 20)),
                    lease_duration=lease, max_batch_size=rng.randint(1, 10), auto_ack=False, shutdown_timeout=10)
                await asyncio.sleep(rng.uniform(0.2, 1.5))  # the churn's schedule: how long it runs
                subscription.cancel()
                await subscription
                self.ends["sdk_stops"] += 1

    def _delivered_sdk(self, message: spanq.Message, holder: str, lease: timedelta) -> str:
        self.history.delivered(str(message.key[0]), message.lease_token, message.delivery_attempt,
                               message.lease_expiration_time, lease, holder)
        return message.lease_token

    def _acked_sdk(self, message: spanq.Message, holder: str, first: str, sent: datetime,
                   error: BaseException | None) -> None:
        k = str(message.key[0])
        if message.lease_token != first:  # the leaser renewed it: its lease went on
            self.history.settled("renew", k, None, holder, sent, OK, message.lease_token,
                                 message.lease_expiration_time)
        outcome = OK if error is None else REFUSED if isinstance(error, spanq.LeaseLost) else UNKNOWN
        self.history.settled("ack", k, None, holder, sent, outcome)
        if error is None:
            self.acked.add(k)

    def _async_callback(self, holder: str, lease: timedelta) -> Any:
        async def handle(message: spanq.Message) -> None:
            first = self._delivered_sdk(message, holder, lease)
            await asyncio.sleep(random.uniform(0, 0.05))  # the work
            sent, error = now(), None
            try:
                await message.ack()
            except spanq.SpanqError as exc:
                error = exc
            self._acked_sdk(message, holder, first, sent, error)

        return handle

    def _sync_callback(self, holder: str, lease: timedelta) -> Any:
        def handle(message: spanq.Message) -> None:
            first = self._delivered_sdk(message, holder, lease)
            time.sleep(random.uniform(0, 0.05))  # the work
            sent, error = now(), None
            try:
                message.ack().result(10)
            except spanq.SpanqError as exc:
                error = exc
            self._acked_sdk(message, holder, first, sent, error)

        return handle

    # -- the end -----------------------------------------------------------------

    async def drain(self, stub: queue_pb2_grpc.QueueServiceStub, sql: Any, table: str) -> None:
        """One calm stream acks what is left (leases left to lapse come back within the longest lease)."""
        lease = timedelta(seconds=30)
        call = stub.Receive(queue_pb2.ReceiveRequest(queue=self.queue, lease_duration=duration(lease.total_seconds()),
                                                     max_duration=duration(60)))

        async def read() -> None:
            async for response in call:
                for m in response.messages:
                    k = the_key(m)
                    self.history.delivered(k, m.lease_token, m.delivery_attempt, stamp(m.lease_expiration_time),
                                           lease, "drain")
                    sent = now()
                    await stub.Ack(queue_pb2.AckRequest(queue=self.queue, acks=[queue_pb2.AckMessage(
                        key=m.key, lease_token=m.lease_token)]), timeout=10)
                    self.history.settled("ack", k, m.lease_token, "drain", sent, OK)
                    self.acked.add(k)

        def left() -> int:
            # Backoffs are not this test's matter: a message whose lease ended is due now, not after the
            # backoff its attempts earned (up to the queue's max_backoff, an hour).
            sql.execute(f"UPDATE {table} SET deliver_time = now() WHERE deliver_time > now() AND "
                        "(spanq_lease_expiration_timestamp IS NULL OR spanq_lease_expiration_timestamp <= now())")
            return int(sql.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

        reader = asyncio.ensure_future(read())
        try:
            await until(lambda: reader.done() or not left(), "every message acked", 40, 0.1)
            if reader.done():
                reader.result()
        finally:
            call.cancel()
            await asyncio.gather(reader, return_exceptions=True)


@pytest.fixture
def target(database_url: str) -> Iterator[str]:
    """``spanq serve`` in its own process, as clients meet it: its event loop is not the clients'
    (in one process, a write's completion and the client's read of it take turns on one loop)."""
    port = free_port()
    process = spawn_server(database_url, port)
    try:
        wait_serving_sync(f"127.0.0.1:{port}")
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(60)


@pytest.fixture
def spanner_env(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", target)


def make_database() -> Any:
    instance = spanner.Client(project="churn").instance("churn")
    instance.create().result(timeout=30)
    database = instance.database("churn", ddl_statements=[QUEUE_DDL])
    database.create().result(timeout=30)
    return database


@pytest.mark.timeout(120 + 40 * SCALE)
async def test_streams_cancelled_dropped_and_reopened_never_share_a_lease(target, sql, spanner_env):
    database = await asyncio.to_thread(make_database)
    channel = grpc.aio.insecure_channel(target)
    stub = queue_pb2_grpc.QueueServiceStub(channel)
    [queue] = (await stub.ListQueues(queue_pb2.ListQueuesRequest())).queues
    assert duration(DEFAULT_LEASE.total_seconds()) == queue.lease_duration  # what the DDL made
    queue = await stub.UpdateQueue(queue_pb2.UpdateQueueRequest(
        queue=queue_pb2.Queue(name=queue.name, lease_duration=duration(SPANNER_LEASE.total_seconds())),
        update_mask=field_mask_pb2.FieldMask(paths=["lease_duration"])))
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    churn = Churn(target, queue.name, seed)
    producer = asyncio.ensure_future(churn.produce(stub))
    consumers = [asyncio.ensure_future(churn.v1_churner(i, stub)) for i in range(V1_CHURNERS)]
    consumers += [asyncio.ensure_future(churn.sdk_churner(i)) for i in range(2)]
    consumers += [asyncio.ensure_future(asyncio.to_thread(churn.spanner_churner, i, database)) for i in range(2)]
    started = time.monotonic()
    try:
        done, _ = await asyncio.wait([producer, *consumers], timeout=CHURN_S, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # a churner that failed fails the test
    finally:
        churn.stop.set()
        results = await asyncio.gather(producer, *consumers, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    try:
        await churn.drain(stub, sql, queue.name)
    finally:  # the checker's verdict first: a lease held twice can also keep the drain from ending
        report = churn.history.check(remaining=[r[0] for r in sql.execute(f"SELECT id FROM {queue.name}")])
        await channel.close()
        print(f"{time.monotonic() - started:.0f} s, {len(churn.history.sent)} sent; {churn.ends}; {report.summary()}")
        assert report.ok, report
    holders = {d.holder.split("-")[0] for d in churn.history.deliveries}
    assert holders == {"v1", "sdk", "spanner", "drain"}, holders  # every kind of consumer took part
    assert len(churn.history.sent) >= 500 * SCALE and churn.ends["cancel"] and churn.ends["sdk_stops"] >= 4
