"""Producers and consumers over raw gRPC stubs that resolve every unknown
outcome by replaying the same request_id, and reconnect when a stream or a
server goes away. Everything they see goes into a History for the checker.
Reusable by fault tests and benchmarks."""

import asyncio
import itertools
import uuid
from collections.abc import Sequence
from datetime import timedelta

import grpc

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from .helpers import duration, plain, stamp, until, value
from .history import Delivery, History
from .lease_history import OK, REFUSED, now

RETRYABLE = frozenset({grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
CHANNEL_OPTIONS = [
    # Reconnect fast after a server restart; the default backoff reaches tens of seconds.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class Workload:
    """Sends PRODUCERS x PER_PRODUCER JSON messages {"id": ...} to a generated-key
    queue and acks each delivery, across one or more servers."""

    def __init__(self, targets: Sequence[str], queue: str, *, lease_s: float = 5.0, deadline_s: float = 60.0,
                 ack_elsewhere: bool = False) -> None:
        self.channels = [grpc.aio.insecure_channel(t, options=CHANNEL_OPTIONS) for t in targets]
        self.stubs = [queue_pb2_grpc.QueueServiceStub(c) for c in self.channels]
        self.queue = queue
        self.lease_s = lease_s
        self.deadline_s = deadline_s
        self.ack_elsewhere = ack_elsewhere
        """Ack through another server than the one whose stream delivered the message."""
        self.history = History()
        self._round_robin = itertools.count()

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()

    def _stub(self) -> queue_pb2_grpc.QueueServiceStub:
        return self.stubs[next(self._round_robin) % len(self.stubs)]

    async def replay_until_known(self, make_call):  # type: ignore[no-untyped-def]
        """Sends one request (same request_id) until its outcome is known, over
        any server; faults and lost servers are counted, not raised."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.deadline_s
        delay = 0.005
        while True:
            self.history.operations += 1
            try:
                return await make_call(self._stub())
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in RETRYABLE or loop.time() > give_up:
                    raise
                self.history.faults_seen += 1
                await asyncio.sleep(delay)  # the client's backoff, as a real one retries
                delay = min(delay * 2, 0.5)

    async def produce(self, producer: int, count: int, pace_s: float = 0.0) -> None:
        for n in range(count):
            message_id = f"p{producer}-{n}"
            request = queue_pb2.SendRequest(
                queue=self.queue, request_id=str(uuid.uuid4()),
                messages=[queue_pb2.SendMessage(payload=value({"id": message_id}))])
            reply = await self.replay_until_known(lambda stub: stub.Send(request, timeout=10))
            self.history.send_confirmed(message_id, plain(reply.keys[0])[0])
            self.history.leases.send_confirmed(plain(reply.keys[0])[0])
            if pace_s:
                await asyncio.sleep(pace_s)  # the producer's pace

    async def consume(self, name: str, server: int, stop: asyncio.Event) -> None:
        """Holds a Receive stream on one server, reopening it whenever it ends or fails."""
        while not stop.is_set():
            call = self.stubs[server].Receive(queue_pb2.ReceiveRequest(
                queue=self.queue, max_batch_size=20, lease_duration=duration(self.lease_s),
                max_duration=duration(30)))
            try:
                async for response in call:
                    for m in response.messages:
                        await self._ack(name, server, m)
                    if stop.is_set():
                        break
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in RETRYABLE:
                    raise
                self.history.faults_seen += 1
                await asyncio.sleep(0.1)  # the consumer's reconnect backoff
            finally:
                call.cancel()

    async def _ack(self, name: str, server: int, m: queue_pb2.ReceivedMessage) -> None:
        k = plain(m.key)[0]
        expiry = m.lease_expiration_time.ToDatetime()
        self.history.delivered(Delivery(plain(m.payload)["id"], k, m.lease_token,
                                        expiry - timedelta(seconds=self.lease_s), expiry, name))
        leases, sent = self.history.leases, now()
        leases.delivered(k, m.lease_token, m.delivery_attempt, stamp(m.lease_expiration_time),
                         timedelta(seconds=self.lease_s), name)
        request = queue_pb2.AckRequest(queue=self.queue, request_id=str(uuid.uuid4()),
                                       acks=[queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token)])
        if self.ack_elsewhere and len(self.stubs) > 1:
            other = self.stubs[(server + 1) % len(self.stubs)]
            make_call = lambda _stub: other.Ack(request, timeout=10)  # noqa: E731
        else:
            make_call = lambda stub: stub.Ack(request, timeout=10)  # noqa: E731
        try:
            reply = await self.replay_until_known(make_call)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE):
                leases.settled("ack", k, m.lease_token, name, sent, REFUSED)  # the checker judges if rightly
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return  # the lease moved on; the message comes back
            if exc.code() == grpc.StatusCode.OUT_OF_RANGE:
                # The lease expired while this ack was being retried (a server down, a slow
                # machine) and the receiver it went to acked it first. The checker still
                # demands every sent message acked once by someone.
                return
            raise
        self.history.ack_confirmed(k, reply.replayed)
        leases.settled("ack", k, m.lease_token, name, sent, OK)

    async def run(self, *, producers: int, per_producer: int, consumers: int, pace_s: float = 0.0,
                  during: "asyncio.Future[object] | None" = None, timeout_s: float = 90.0) -> None:
        """Produce and consume until every confirmed send is acked (or timeout)."""
        stop = asyncio.Event()
        tasks = [asyncio.create_task(self.consume(f"c{i}", i % len(self.stubs), stop), name=f"consumer-{i}")
                 for i in range(consumers)]
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*(self.produce(p, per_producer, pace_s) for p in range(producers)))
                if during is not None:
                    await during
                def all_acked() -> bool:
                    for task in tasks:
                        if task.done() and task.exception():
                            raise task.exception()  # type: ignore[misc]
                    return set(self.history.confirmed.values()) <= self.history.acked

                await until(all_acked, "every confirmed send acked", timeout_s, 0.05)
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def remaining_rows(sql, queue: str) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(key, message id) of every message still stored, for History.check."""
    return [(r[0], r[1]["id"]) for r in sql.execute(f"SELECT id, payload FROM {queue}")]
