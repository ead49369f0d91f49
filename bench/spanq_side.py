"""The spanq side: the same workloads through the spanq.v1 gRPC API with raw stubs.

Every client is its own channel (its own HTTP/2 connection), as separate
processes would be; mutating calls carry a fresh request_id, as the SDK sends.
Preloading and churning a queue's history go straight to its table in SQL
(a send is an INSERT), because only the state they leave matters.
"""

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta, timezone, datetime
from typing import Any

import grpc
import psycopg
from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2
from psycopg import sql
from psycopg.types.json import Jsonb

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from .baseline import PAYLOAD, paced
from .env import bench_conninfo
from .env import cpu_of as cpu_seconds  # noqa: F401  (cells.py imports it from here)

LEASE_SECONDS = 60
ACKS_IN_FLIGHT = 4
"""Ack calls a receiver keeps in flight while it reads on: a receiver that acks as it goes."""

Message = queue_pb2.ReceivedMessage


def duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromTimedelta(timedelta(seconds=seconds))
    return d


def channel(target: str) -> grpc.aio.Channel:
    # A local subchannel pool: each channel gets its own connection, like a separate client.
    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


def text(value: str) -> struct_pb2.Value:
    return struct_pb2.Value(string_value=value)


class SpanqQueue:
    """One spanq queue (generated string keys, STRING payload) on a running server."""

    def __init__(self, target: str, db_url: str, name: str) -> None:
        self.target = target
        self.db_url = bench_conninfo(db_url)
        self.name = name
        self.table = sql.Identifier("public", name)
        self._channel = channel(target)
        self.stub = queue_pb2_grpc.QueueServiceStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def sql(self, statement: sql.Composable, params: dict[str, Any] | None = None) -> None:
        async with await psycopg.AsyncConnection.connect(self.db_url, autocommit=True) as conn:
            await conn.execute(statement, params)

    # -- setup ------------------------------------------------------------------

    async def create(self) -> None:
        await self.stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
            name=self.name, payload_type=queue_pb2.STRING, lease_duration=duration(LEASE_SECONDS))))

    async def enable_ordering(self) -> None:
        """UpdateQueue enable_message_ordering: ordering keys need it (and its triggers)."""
        request = queue_pb2.UpdateQueueRequest(queue=queue_pb2.Queue(name=self.name, enable_message_ordering=True))
        request.update_mask.paths.append("enable_message_ordering")
        await self.stub.UpdateQueue(request)

    async def drop(self) -> None:
        await self.stub.DropQueue(queue_pb2.DropQueueRequest(name=self.name))

    async def truncate(self) -> None:
        await self.sql(sql.SQL("TRUNCATE {t}").format(t=self.table))

    async def set_notify(self, on: bool) -> None:
        verb = sql.SQL("ENABLE" if on else "DISABLE")
        await self.sql(sql.SQL("ALTER TABLE {t} {verb} TRIGGER spanq_notify_send").format(t=self.table, verb=verb))

    async def preload(self, n: int, chunk: int = 200_000, headers: dict[str, str] | None = None,
                      priorities: bool = False, ordering_keys: int = 0) -> None:
        """n deliverable messages with distinct, past deliver_times, oldest first (as sends leave them);
        each with ``headers``, and with priorities 0 to 9 spread evenly over them when ``priorities``;
        with ``ordering_keys``, message g has key g mod that many (each key's first one deliverable, the
        rest held behind it by the queue's trigger)."""
        # Without headers or priorities the columns are left to their defaults: an older
        # server's table (bench.drain_cpu --against) has neither.
        tagged = bool(headers) or priorities
        extra = sql.SQL(", spanq_headers, spanq_priority" if tagged else "")
        values = sql.SQL(", %(headers)s, CASE WHEN %(priorities)s THEN (g * 7) %% 10 ELSE 0 END" if tagged else "")
        if ordering_keys:
            extra = sql.SQL("{}, spanq_ordering_key").format(extra)
            values = sql.SQL("{}, 'k' || (g %% %(keys)s)").format(values)
        done = 0
        while done < n:
            size = min(chunk, n - done)
            await self.sql(sql.SQL("""
                INSERT INTO {t} (id, payload, deliver_time, spanq_enqueue_time{extra})
                SELECT gen_random_uuid()::text, %(payload)s,
                       now() - (%(size)s - g) * interval '1 microsecond', now(){values}
                FROM generate_series(1, %(size)s) AS g""").format(t=self.table, extra=extra, values=values),
                {"payload": PAYLOAD, "size": size, "headers": Jsonb(headers) if headers else None,
                 "priorities": priorities, "keys": ordering_keys})
            done += size

    async def count(self) -> int:
        async with await psycopg.AsyncConnection.connect(self.db_url, autocommit=True) as conn:
            cur = await conn.execute(sql.SQL("SELECT count(*) FROM {t}").format(t=self.table))
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    async def vacuum(self) -> None:
        await self.sql(sql.SQL("VACUUM (ANALYZE) {t}").format(t=self.table))

    async def churn(self, n: int, batch: int = 10_000) -> None:
        """Sends, leases (spanq.receive_<queue>, the server's own statement) and deletes n messages."""
        receive = sql.Identifier("spanq", f"receive_{self.name}")
        async with await psycopg.AsyncConnection.connect(self.db_url, autocommit=True) as conn:
            done = 0
            while done < n:
                size = min(batch, n - done)
                await conn.execute(sql.SQL(
                    "INSERT INTO {t} (id, payload) SELECT gen_random_uuid()::text, %(p)s FROM generate_series(1, %(n)s)"
                ).format(t=self.table), {"p": PAYLOAD, "n": size})
                await conn.execute(sql.SQL("""
                    WITH leased AS (SELECT * FROM {f}(%(n)s, interval '60 seconds', 'churn'))
                    DELETE FROM {t} AS m USING leased
                    WHERE m.id = leased.id AND m.spanq_lease_token = leased.spanq_lease_token""").format(
                    f=receive, t=self.table), {"n": size})
                done += size

    # -- workloads ----------------------------------------------------------------

    def _send_request(self, per_call: int, ordering_keys: Sequence[str] = ()) -> queue_pb2.SendRequest:
        return queue_pb2.SendRequest(
            queue=self.name, messages=[queue_pb2.SendMessage(payload=text(PAYLOAD),
                                                             ordering_key=ordering_keys[i] if ordering_keys else "")
                                       for i in range(per_call)])

    async def send_throughput(self, clients: int, per_call: int, seconds: float, ordering_keys: int = 0) -> float:
        """Messages/s: ``clients`` channels, each calling Send with ``per_call`` messages, one call at a time;
        with ``ordering_keys``, message i of client c has key (c * per_call + i) mod that many."""
        channels = [channel(self.target) for _ in range(clients)]
        try:
            stubs = [queue_pb2_grpc.QueueServiceStub(c) for c in channels]
            requests = [self._send_request(per_call, [f"k{(c * per_call + i) % ordering_keys}" for i in range(per_call)]
                                           if ordering_keys else ())
                        for c in range(len(stubs))]
            for stub, request in zip(stubs, requests):  # warm-up: connections, server pool
                request.request_id = str(uuid.uuid4())
                await stub.Send(request)
            loop = asyncio.get_running_loop()

            async def client(stub: queue_pb2_grpc.QueueServiceStub, request: queue_pb2.SendRequest) -> int:
                n = 0
                while loop.time() < deadline:
                    request.request_id = str(uuid.uuid4())
                    await stub.Send(request)
                    n += per_call
                return n

            start = loop.time()
            deadline = start + seconds
            counts = await asyncio.gather(*(client(s, r) for s, r in zip(stubs, requests)))
            return sum(counts) / (loop.time() - start)
        finally:
            for c in channels:
                await c.close()

    async def _ack(self, stub: queue_pb2_grpc.QueueServiceStub, messages: Any) -> None:
        await stub.Ack(queue_pb2.AckRequest(
            queue=self.name, request_id=str(uuid.uuid4()),
            acks=[queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token) for m in messages]))

    async def _receiver(self, stub: queue_pb2_grpc.QueueServiceStub, on_messages: Callable[[Any], None],
                        on_acked: Callable[[int], None] | None = None, batch: int = 100) -> None:
        """Reads a Receive stream until cancelled, acking each response (ACKS_IN_FLIGHT at a time)."""
        slots = asyncio.Semaphore(ACKS_IN_FLIGHT)
        pending: set[asyncio.Task[None]] = set()

        async def ack(messages: Any) -> None:
            try:
                await self._ack(stub, messages)
                if on_acked is not None:
                    on_acked(len(messages))
            finally:
                slots.release()

        call = stub.Receive(queue_pb2.ReceiveRequest(
            queue=self.name, max_batch_size=batch, lease_duration=duration(LEASE_SECONDS)))
        try:
            async for response in call:
                on_messages(response.messages)
                await slots.acquire()
                task = asyncio.create_task(ack(response.messages))
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            call.cancel()
            for task in list(pending):
                task.cancel()

    async def drain(self, n: int, receivers: int, batch: int = 100) -> float:
        """Messages/s to receive (Receive streams) and ack (Ack calls) ``n`` pending messages."""
        return await acked_rate(self.target, receivers, n,
                                lambda stub, on_acked: self._receiver(stub, lambda m: None, on_acked, batch))

    async def latency(self, rate: float, seconds: float) -> tuple[list[float], int]:
        """Seconds from just before each Send (1 message) until a waiting Receive stream yields it."""
        total = int(rate * seconds)
        sent_at: dict[int, float] = {}
        latencies: list[float] = []
        failed = 0
        done = asyncio.Event()

        def on_messages(messages: Any) -> None:
            now = time.perf_counter()
            for m in messages:
                at = sent_at.get(int(m.payload.string_value))
                if at is not None:  # not a leftover of an earlier run
                    latencies.append(now - at)
            if len(latencies) >= total - failed:
                done.set()

        rx, tx = channel(self.target), channel(self.target)
        receiver = asyncio.create_task(self._receiver(queue_pb2_grpc.QueueServiceStub(rx), on_messages))
        sender = queue_pb2_grpc.QueueServiceStub(tx)
        try:
            sent_at[-1] = time.perf_counter()
            await sender.Send(queue_pb2.SendRequest(  # warm-up: connections, the stream
                queue=self.name, messages=[queue_pb2.SendMessage(payload=text("-1"))]))
            await asyncio.sleep(0.3)
            latencies.clear()

            async def send(i: int) -> None:
                nonlocal failed
                try:
                    await sender.Send(queue_pb2.SendRequest(
                        queue=self.name, request_id=str(uuid.uuid4()),
                        messages=[queue_pb2.SendMessage(payload=text(str(i)))]))
                except grpc.aio.AioRpcError:  # overload: gRPC refuses streams past its limit
                    failed += 1
                    if len(latencies) >= total - failed:
                        done.set()

            await paced(rate, total, sent_at, send)
            with contextlib.suppress(TimeoutError):
                await _wait_or_fail(done, [receiver], 30)
        finally:
            await _cancel([receiver])
            await rx.close()
            await tx.close()
        return latencies, total - len(latencies)

    async def lateness(self, n: int, spread: float, lead: float) -> list[float]:
        """Seconds each of ``n`` messages scheduled over ``spread`` seconds arrived after its deliver_time."""
        late: list[float] = []
        done = asyncio.Event()

        def on_messages(messages: Any) -> None:
            now = time.time()
            for m in messages:
                late.append(now - m.deliver_time.ToNanoseconds() / 1e9)
            if len(late) >= n:
                done.set()

        rx, tx = channel(self.target), channel(self.target)
        receiver = asyncio.create_task(self._receiver(queue_pb2_grpc.QueueServiceStub(rx), on_messages))
        sender = queue_pb2_grpc.QueueServiceStub(tx)
        try:
            await asyncio.sleep(0.2)
            base = time.time() + lead
            for start in range(0, n, 100):
                messages = []
                for i in range(start, min(start + 100, n)):
                    at = timestamp_pb2.Timestamp()
                    at.FromDatetime(datetime.fromtimestamp(base + i * spread / n, timezone.utc))
                    messages.append(queue_pb2.SendMessage(payload=text(PAYLOAD), deliver_time=at))
                await sender.Send(queue_pb2.SendRequest(queue=self.name, request_id=str(uuid.uuid4()),
                                                        messages=messages))
            await _wait_or_fail(done, [receiver], spread + lead + 30)
        finally:
            await _cancel([receiver])
            await rx.close()
            await tx.close()
        return late

    async def steady_churn(self, seconds: float, backlog: int = 2_000, batch: int = 100) -> list[float]:
        """Completion times of acks while one sender (``batch`` per Send) and one Receive
        stream run flat out for ``seconds``, the backlog capped."""
        acked_at: list[float] = []
        sent = 0
        rx, tx = channel(self.target), channel(self.target)
        sender = queue_pb2_grpc.QueueServiceStub(tx)
        request = self._send_request(batch)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds

        def on_acked(count: int) -> None:
            now = time.perf_counter()
            acked_at.extend([now] * count)

        async def produce() -> None:
            nonlocal sent
            while loop.time() < deadline:
                if sent - len(acked_at) >= backlog:
                    await asyncio.sleep(0.001)
                    continue
                request.request_id = str(uuid.uuid4())
                await sender.Send(request)
                sent += batch

        receiver = asyncio.create_task(
            self._receiver(queue_pb2_grpc.QueueServiceStub(rx), lambda m: None, on_acked, batch))
        try:
            await produce()
        finally:
            await _cancel([receiver])
            await rx.close()
            await tx.close()
        return acked_at

    async def fanin(self, streams: int, probes: int, settle: float, server: Any,
                    count_connections: Callable[[], Any]) -> dict[str, Any]:
        """``streams`` idle Receive streams on this queue; then one message at a time:
        how long until a stream has it. Also the server's RSS, CPU and database connections."""
        per_channel = 100
        channels = [channel(self.target) for _ in range((streams + per_channel - 1) // per_channel)]
        arrived: asyncio.Queue[tuple[float, Any]] = asyncio.Queue()

        def on_messages(messages: Any) -> None:
            now = time.perf_counter()
            for m in messages:
                arrived.put_nowait((now, m))

        rss_before = server.rss_bytes()
        tasks = [
            asyncio.create_task(self._receiver(queue_pb2_grpc.QueueServiceStub(channels[i // per_channel]),
                                               on_messages))
            for i in range(streams)
        ]
        sender = queue_pb2_grpc.QueueServiceStub(self._channel)
        peak = 0
        sampling = True

        async def sample() -> None:
            nonlocal peak
            while sampling:
                peak = max(peak, await count_connections())
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        latencies, cpu = [], []
        try:
            await asyncio.sleep(settle)
            idle = await count_connections()
            rss = server.rss_bytes()
            cpu0, t0 = cpu_seconds(server.pid), time.perf_counter()
            await asyncio.sleep(settle)
            idle_cpu = (cpu_seconds(server.pid) - cpu0) / (time.perf_counter() - t0)
            for _ in range(probes):
                cpu0 = cpu_seconds(server.pid)
                start = time.perf_counter()
                await sender.Send(queue_pb2.SendRequest(queue=self.name, request_id=str(uuid.uuid4()),
                                                        messages=[queue_pb2.SendMessage(payload=text(PAYLOAD))]))
                at, _ = await asyncio.wait_for(arrived.get(), 10)
                latencies.append(at - start)
                await asyncio.sleep(settle / 4)
                cpu.append(cpu_seconds(server.pid) - cpu0)
            open_streams = sum(1 for t in tasks if not t.done())
        finally:
            sampling = False
            await _cancel([sampler, *tasks])
            for c in channels:
                await c.close()
        return {"connections_idle": idle, "connections_peak": peak, "rss_before": rss_before, "rss": rss,
                "idle_cpu": idle_cpu,
                "latencies": latencies, "cpu_per_wakeup": cpu, "streams_open": open_streams}


async def acked_rate(target: str, streams: int, n: int,
                     work: Callable[[queue_pb2_grpc.QueueServiceStub, Callable[[int], None]], Coroutine[Any, Any, None]]
                     ) -> float:
    """Messages/s until ``n`` are acked by ``streams`` runs of ``work(stub, on_acked)``, each on
    its own channel, which calls ``on_acked(count)`` as it acks."""
    channels = [channel(target) for _ in range(streams)]
    acked = 0
    done = asyncio.Event()

    def on_acked(count: int) -> None:
        nonlocal acked
        acked += count
        if acked >= n:
            done.set()

    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = [asyncio.create_task(work(queue_pb2_grpc.QueueServiceStub(c), on_acked)) for c in channels]
    try:
        await _wait_or_fail(done, tasks, 120)
        return acked / (loop.time() - start)
    finally:
        await _cancel(tasks)
        for c in channels:
            await c.close()


async def _wait_or_fail(done: asyncio.Event, tasks: list[asyncio.Task[Any]], timeout: float) -> None:
    """Waits for ``done``; re-raises a reader's error instead of hanging on it."""
    waiter = asyncio.create_task(done.wait())
    try:
        finished, _ = await asyncio.wait([waiter, *tasks], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if not done.is_set():
        for task in finished:
            if task is not waiter and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        raise TimeoutError(f"the workload did not finish within {timeout}s")


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError, Exception):
            await task
