"""Cell "pub": the SDK's batching publisher (``spanq.Client.publish``) beside
plain SQL in the same run (issue 11, item 6).

Each producer is a thread calling the blocking client's ``publish`` (one
message per call) or ``publish_many`` (100 per call) as fast as it can for
the run's seconds, all on one shared ``spanq.Client`` (one per process, as
the SDK recommends); then ``flush()``. The figure is messages answered
(stored, their futures done) per second, the flush included. The baseline is
the same number of psycopg connections, each committing one INSERT per
transaction (1 per call) or one 100-row INSERT (100 per call): what a
producer writes without a batching client.
"""

from __future__ import annotations

import asyncio
import resource
import threading
import time
from typing import TYPE_CHECKING, Any

from .baseline import PAYLOAD
from .stats import CpuFigures, Figure

if TYPE_CHECKING:
    from .cells import Context, Row

WORKLOADS = ((1, 1, 1.5), (1, 4, 1.5), (100, 1, 0.75))
"""(messages per call, producer threads, target ratio to plain SQL)."""

SEND_TARGET = 0.3
"""Blocking ``send``, one message per call, one producer: the issue's ratio to plain SQL..."""
SEND_CPU_TARGET_US = 150
"""...and the client CPU it may spend on a call."""


def _process_cpu() -> float:
    """CPU seconds of this process, every thread (the SDK's loop thread and gRPC's own included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _send_for(target: str, queue: str, seconds: float) -> tuple[float, float]:
    """(messages/s, client CPU microseconds per call) for one thread calling the blocking
    client's ``send`` one message at a time: each call waits for its commit."""
    import spanq

    with spanq.Client(target) as client:
        client.send(queue, PAYLOAD)  # warm-up: the channel and the queue's definition
        n = 0
        cpu0, start = _process_cpu(), time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            client.send(queue, PAYLOAD)
            n += 1
        elapsed, cpu = time.perf_counter() - start, _process_cpu() - cpu0
        return n / elapsed, cpu / n * 1e6


def _raw_send_cpu(target: str, queue: str, seconds: float) -> float:
    """Client CPU microseconds per call of the generated stub's blocking Send, with no SDK:
    the floor that grpcio itself puts under the SDK's figure above."""
    import uuid

    import grpc

    from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

    def request() -> queue_pb2.SendRequest:
        out = queue_pb2.SendRequest(queue=queue, request_id=str(uuid.uuid4()))
        out.messages.add().payload.string_value = PAYLOAD
        return out

    with grpc.insecure_channel(target) as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        stub.Send(request())
        n = 0
        cpu0, start = _process_cpu(), time.perf_counter()
        while time.perf_counter() < start + seconds:
            stub.Send(request())
            n += 1
        return (_process_cpu() - cpu0) / n * 1e6


def _publish_for(target: str, queue: str, producers: int, per_call: int, seconds: float, **options: Any) -> float:
    """Messages/s through one blocking Client's publisher, from ``producers`` threads (``options``: the
    Client's, e.g. batch_settings, for measuring the defaults)."""
    import spanq

    with spanq.Client(target, **options) as client:
        client.publish(queue, PAYLOAD).result()  # warm-up: the channel, the queue's definition, the batcher
        counts = [0] * producers
        last: list[Any] = [None] * producers
        start = time.perf_counter()
        deadline = start + seconds

        def producer(i: int) -> None:
            n = 0
            if per_call == 1:
                while time.perf_counter() < deadline:
                    last[i] = client.publish(queue, PAYLOAD)
                    n += 1
            else:
                batch = [PAYLOAD] * per_call
                while time.perf_counter() < deadline:
                    last[i] = client.publish_many(queue, batch)[-1]
                    n += per_call
            counts[i] = n

        threads = [threading.Thread(target=producer, args=(i,)) for i in range(producers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        client.flush()
        elapsed = time.perf_counter() - start
        for future in last:
            if future is not None:
                future.result()  # a failed publish fails the run
        return sum(counts) / elapsed


async def cell_publish(ctx: Context) -> list[Row]:
    from .cells import Row, _setup, _teardown  # noqa: F811  (cells.py imports this module to register the cell)

    s = ctx.sizes
    spanq, sql = await _setup(ctx, "publish")
    rows = []
    try:
        for per_call, producers, target in WORKLOADS:
            a, b, ca, cb = Figure(), Figure(), CpuFigures(), CpuFigures()
            stored = lambda rate: rate * s.send_seconds  # noqa: E731
            for _ in range(s.runs):
                await spanq.truncate()
                a.add(await ctx.spanq_run(ca, asyncio.to_thread(_publish_for, ctx.target, spanq.name, producers,
                                                                per_call, s.send_seconds), stored))
                await sql.truncate()
                b.add(await ctx.sql_run(cb, sql.send_throughput(producers, per_call, s.send_seconds), stored))
            plural = "s" if producers > 1 else ""
            row = Row("pub publish", f"{per_call} msg/call, {producers} producer thread{plural}", "msgs/s", a, b,
                      target=f"ratio >= {target}", cpu=ca, baseline_cpu=cb)
            row.met = row.ratio >= target
            rows.append(row)
            ctx.log(f"  publish {per_call}/call x{producers}: spanq {a.median:,.0f}  sql {b.median:,.0f}")
        rate, cpu, baseline = Figure(), Figure(), Figure()
        ca, cb = CpuFigures(), CpuFigures()
        for _ in range(s.runs):
            await spanq.truncate()
            sent, per_call = await ctx.spanq_run(
                ca, asyncio.to_thread(_send_for, ctx.target, spanq.name, s.send_seconds),
                lambda result: result[0] * s.send_seconds)
            rate.add(sent)
            cpu.add(per_call)
            await sql.truncate()
            baseline.add(await ctx.sql_run(cb, sql.send_throughput(1, 1, s.send_seconds),
                                           lambda r: r * s.send_seconds))
        row = Row("pub publish", "blocking send, 1 msg/call, 1 producer", "msgs/s", rate, baseline,
                  target=f"ratio >= {SEND_TARGET}", cpu=ca, baseline_cpu=cb)
        row.met = row.ratio >= SEND_TARGET
        rows.append(row)
        cpu_row = Row("pub publish", "blocking send: client CPU per call", "us", cpu, None,
                      target=f"<= {SEND_CPU_TARGET_US} us", compare=False)
        cpu_row.met = cpu.median <= SEND_CPU_TARGET_US
        cpu_row.note = "getrusage of the bench process over the run: every thread of the SDK and gRPC"
        rows.append(cpu_row)
        floor = Figure()
        for _ in range(s.runs):
            floor.add(await asyncio.to_thread(_raw_send_cpu, ctx.target, spanq.name, s.send_seconds))
        rows.append(Row("pub publish", "generated stub's blocking Send, no SDK: client CPU per call", "us", floor,
                        None, compare=False, note="grpcio's own cost per call on this machine: the SDK's floor"))
        ctx.log(f"  blocking send: spanq {rate.median:,.0f}  sql {baseline.median:,.0f}  cpu {cpu.median:.0f} us/call")
    finally:
        await _teardown(spanq, sql)
    rows[0].note = ("threads on one spanq.Client, default BatchSettings, rate includes the final flush; "
                    "baseline: as many psycopg connections, one INSERT (of 1 or 100 rows) per transaction")
    return rows
