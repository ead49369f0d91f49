"""``python -m bench.stream_ack [--messages N] [--runs R] [--workers W] [--batch B] [--py-spy OUT [--native]]``

Issue 22's last lever, measured before it is built on: the lease-1/ack-1 loop
(bench/one_at_a_time.py's: each worker one Receive stream of max_batch_size 1 and
max_outstanding 1, each message acked, waiting for the answer, before the next
comes) with its acks as unary Ack calls ("unary") against the same loop with its
acks carried on the stream itself, StreamingReceive ("stream"), and plain SQL's
lease-and-delete loop (bench/baseline.py, "sql"), in one process and one run, the
three interleaved, the first round a warm-up: messages/s, and the CPU microseconds
per message of the client, the server and the PostgreSQL backends (bench/cpu.py).
With ``--py-spy OUT.svg`` (OUT.txt: collapsed stacks) py-spy records the server
over the measured rounds (``--side`` says which side's runs; the others run too).
With ``--batch B`` (> 1) the workload is the drain cell's instead (bench/spanq_side.py:
a stream of B per response acked as it reads, ACKS_IN_FLIGHT acks at a time, on
Ack calls or on the stream), against plain SQL's drain of B rows per statement.
"""

import argparse
import asyncio
import contextlib
import os
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from . import env
from .baseline import SqlQueue
from .cpu import Meter, nothing, server_cpu_of
from .one_at_a_time import one_at_a_time
from .spanq_side import ACKS_IN_FLIGHT, LEASE_SECONDS, SpanqQueue, acked_rate, duration
from .stats import CpuFigures, Figure

SIDES = ("unary", "stream", "sql")
ANSWERS = {"with a message": 0, "alone": 0}
"""How the stream's ack answers came: in the response of the next message, or in one of their own."""


def acked(response: queue_pb2.ReceiveResponse) -> list[int]:
    """How many messages each ack answered in ``response`` acked (counted in ANSWERS); an
    error answer fails the run."""
    if response.answers:
        ANSWERS["with a message" if response.messages else "alone"] += len(response.answers)
    out = []
    for answer in response.answers:
        if answer.WhichOneof("result") != "ack":
            raise RuntimeError(f"an ack on the stream failed: {answer.error}")
        out.append(len(answer.ack.results))
    return out


def ack_of(messages: Any) -> queue_pb2.StreamingReceiveRequest:
    return queue_pb2.StreamingReceiveRequest(ack=queue_pb2.AckRequest(
        request_id=str(uuid.uuid4()), acks=[queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token)
                                            for m in messages]))


async def streamed(queue: SpanqQueue, n: int, workers: int) -> float:
    """Messages/s for ``workers`` StreamingReceive streams of max_outstanding 1, each message
    acked on its own stream, the answer awaited before the next message is counted."""
    async def worker(stub: queue_pb2_grpc.QueueServiceStub, on_acked: Callable[[int], None]) -> None:
        call = stub.StreamingReceive()
        await call.write(queue_pb2.StreamingReceiveRequest(open=queue_pb2.ReceiveRequest(
            queue=queue.name, max_batch_size=1, max_outstanding=1, lease_duration=duration(LEASE_SECONDS))))
        try:
            async for response in call:
                for count in acked(response):
                    on_acked(count)
                if response.messages:
                    await call.write(ack_of(response.messages))
        finally:
            call.cancel()

    return await acked_rate(queue.target, workers, n, worker)


async def streamed_drain(queue: SpanqQueue, n: int, workers: int, batch: int) -> float:
    """Messages/s for ``workers`` StreamingReceive streams of ``batch`` per response, each response
    acked on the stream as it is read, ACKS_IN_FLIGHT acks at a time (the drain cell's receiver)."""
    async def worker(stub: queue_pb2_grpc.QueueServiceStub, on_acked: Callable[[int], None]) -> None:
        slots = asyncio.Semaphore(ACKS_IN_FLIGHT)
        call = stub.StreamingReceive()
        await call.write(queue_pb2.StreamingReceiveRequest(open=queue_pb2.ReceiveRequest(
            queue=queue.name, max_batch_size=batch, lease_duration=duration(LEASE_SECONDS))))

        async def read() -> None:
            async for response in call:
                for count in acked(response):
                    slots.release()
                    on_acked(count)
                if response.messages:
                    arrived.put_nowait(response.messages)

        arrived: asyncio.Queue[Any] = asyncio.Queue()
        reader = asyncio.ensure_future(read())
        getting: asyncio.Future[Any] | None = None
        try:
            while True:
                getting = asyncio.ensure_future(arrived.get())
                await asyncio.wait([getting, reader], return_when=asyncio.FIRST_COMPLETED)
                if reader.done():
                    getting.cancel()
                    reader.result()
                    return
                await slots.acquire()
                await call.write(ack_of(getting.result()))
        finally:
            call.cancel()
            reader.cancel()
            if getting is not None:
                getting.cancel()

    return await acked_rate(queue.target, workers, n, worker)


async def run(args: argparse.Namespace) -> None:
    print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.runs} runs of {args.messages:,} messages, "
          f"{args.workers} worker(s), " + ("lease 1, ack 1" if args.batch == 1 else f"drain {args.batch} per batch"),
          flush=True)
    with env.scratch_database(env.pg_server_url()) as db_url, contextlib.ExitStack() as stack:
        meter = Meter(db_url)
        meter.start()
        stack.callback(meter.stop)
        async with env.spanq_server(db_url) as server:
            spanq = SpanqQueue(server.target, db_url, "bq_stream_ack")
            sql = SqlQueue(db_url, "bt_stream_ack")
            await spanq.create()
            await sql.create()
            n, w, b = args.messages, args.workers, args.batch
            work: dict[str, tuple[Any, Callable[[], Any]]] = {
                "unary": (spanq, lambda: one_at_a_time(spanq, n, w) if b == 1 else spanq.drain(n, w, b)),
                "stream": (spanq, lambda: streamed(spanq, n, w) if b == 1 else streamed_drain(spanq, n, w, b)),
                "sql": (sql, lambda: sql.drain(n, w, b)),
            }
            rates = {side: Figure() for side in SIDES}
            cpu = {side: CpuFigures() for side in SIDES}
            spy = None
            try:
                for i in range(args.runs + 1):
                    for side in SIDES:
                        queue, workload = work[side]
                        await queue.truncate()
                        await queue.preload(args.messages)
                        await queue.vacuum()
                        if i and args.py_spy and side == args.side:
                            spy = _spy(server.pid, args)
                        with meter.window(nothing if side == "sql" else server_cpu_of(server)) as use:
                            rate = await workload()
                        if spy is not None:
                            spy.send_signal(2)
                            spy.wait(30)
                            spy = None
                        if i:
                            rates[side].add(rate)
                            cpu[side].add(use.per_message_us(args.messages))
            finally:
                await spanq.drop()
                await spanq.close()
                await sql.drop()
    for side in SIDES:
        c = cpu[side]
        print(f"{side:6}: {rates[side].median:8,.0f} msgs/s [{rates[side].low:,.0f}-{rates[side].high:,.0f}]  "
              f"CPU us/msg client {c.client.median:.0f} server {c.server.median:.0f} postgres {c.postgres.median:.0f}"
              f" total {c.total:.0f}  (rates: {', '.join(f'{x:,.0f}' for x in rates[side].runs)})")
    for side in ("unary", "stream"):
        print(f"{side}/SQL: msgs/s {rates[side].median / rates['sql'].median:.2f}, CPU per message "
              f"{cpu[side].total / cpu['sql'].total:.2f}")
    print(f"stream/unary: msgs/s {rates['stream'].median / rates['unary'].median:.2f}, CPU per message "
          f"{cpu['stream'].total / cpu['unary'].total:.2f} (server {cpu['stream'].server.median:.0f} vs "
          f"{cpu['unary'].server.median:.0f} us, client {cpu['stream'].client.median:.0f} vs "
          f"{cpu['unary'].client.median:.0f} us)")
    print(f"stream: ack answers {', '.join(f'{v:,} {k}' for k, v in ANSWERS.items())}")
    print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _spy(pid: int, args: argparse.Namespace) -> "subprocess.Popen[bytes]":
    """py-spy appends nothing: each recorded run gets OUT with its round's suffix."""
    out = pathlib.Path(args.py_spy)
    args.spied = getattr(args, "spied", 0) + 1
    target = out.with_name(f"{out.stem}.{args.spied}{out.suffix}")
    print(f"py-spy: {target}", flush=True)
    return subprocess.Popen(
        [str(pathlib.Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--rate", "250",
         "--output", str(target), "--format", "raw" if out.suffix == ".txt" else "flamegraph",
         *(["--native"] if args.native else ["--nonblocking"])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stream_ack", description=__doc__)
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1, help="> 1: the drain cell's workload, B per response")
    parser.add_argument("--py-spy", metavar="OUT", help="record the server with py-spy (OUT.txt: raw stacks)")
    parser.add_argument("--side", choices=SIDES[:2], default="unary", help="whose runs py-spy records")
    parser.add_argument("--native", action="store_true", help="py-spy also samples C frames")
    args = parser.parse_args()
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
