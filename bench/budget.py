"""Cell "budget": the latency budget of one message at a time (issue 22, item 2).

One client sends a message, its Receive stream (max_batch_size 1, max_outstanding
1) gets it, and it acks it, waiting for each answer, over and over: send -> commit
-> wake -> lease -> write -> client -> ack -> commit. The server is
bench/traced_server.py, which stamps each step in the server with the clock the
bench reads (CLOCK_MONOTONIC), so that the loop's time is cut into steps, each a
median and a p99 over the iterations. On its own server, like cell 7: the
timestamps are that server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
import uuid
from typing import TYPE_CHECKING, Any

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from . import env
from .spanq_side import LEASE_SECONDS, SpanqQueue, channel, duration, text
from .stats import Figure, percentile

if TYPE_CHECKING:
    from .cells import Context, Row

BUDGET_APP_NAME = "spanq-server-budget"
ITERATIONS = {"full": 2_000, "quick": 200}

STEPS = (
    ("send: client -> Send handler", "t0", "send_rpc"),
    ("Send handler -> commit statement (group commit)", "send_rpc", "send_commit"),
    ("commit statement: INSERT + ledger, committed", "send_commit", "send_commit."),
    ("commit -> wake-up", "send_commit.", "wake"),
    ("wake-up -> lease statement", "wake", "lease"),
    ("lease statement", "lease", "lease."),
    ("lease -> response encoded, write begins", "lease.", "write"),
    ("write begins -> client reads the message (gRPC)", "write", "t2"),
    ("client: message -> Ack sent", "t2", "t3"),
    ("Ack: client -> Ack handler", "t3", "ack_rpc"),
    ("Ack handler -> commit statement (group commit)", "ack_rpc", "ack_commit"),
    ("commit statement: DELETE + ledger, committed", "ack_commit", "ack_commit."),
    ("commit -> client has the Ack's answer", "ack_commit.", "t4"),
)
"""(what, from, to): t0..t4 are the client's (before Send, Send answered, message read, before
Ack, Ack answered); the others the server's steps, "name." their end."""
TOTALS = (("loop: send -> Ack answered", "t0", "t4"), ("send -> message read", "t0", "t2"),
          ("send -> Send answered (beside the steps above)", "t0", "t1"))


def _marks(client: dict[str, int], events: list[tuple[str, int, int, int]]) -> dict[str, int] | None:
    """One iteration's instants: the client's, and the first of each server step after the step
    before it (a lease that found nothing, a wake of another send, are not this message's)."""
    marks = dict(client)
    after = {"send_rpc": "t0", "send_commit": "send_rpc", "wake": "send_commit.", "lease": "t0",
             "write": "lease.", "ack_rpc": "t3", "ack_commit": "ack_rpc"}
    for step in ("send_rpc", "send_commit", "wake", "lease", "write", "ack_rpc", "ack_commit"):
        since = marks.get(after[step])
        if since is None:
            return None
        found = next((e for e in events if e[0] == step and e[1] >= since and (step != "lease" or e[3] > 0)),
                     None)
        if found is None:
            return None
        marks[step], marks[step + "."] = found[1], found[2]
    return marks


async def loop(target: str, queue: str, n: int) -> list[dict[str, int]]:
    """n iterations of send, read, ack; each one's client instants (monotonic ns)."""
    rx, tx = channel(target), channel(target)
    receiver, sender = queue_pb2_grpc.QueueServiceStub(rx), queue_pb2_grpc.QueueServiceStub(tx)
    arrived: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    call = receiver.Receive(queue_pb2.ReceiveRequest(queue=queue, max_batch_size=1, max_outstanding=1,
                                                     lease_duration=duration(LEASE_SECONDS)))

    async def read() -> None:
        async for response in call:
            arrived.put_nowait((time.monotonic_ns(), response))

    reader = asyncio.create_task(read())
    out = []
    try:
        for i in range(-20, n):  # the first 20 warm up the channels, the stream and the statements
            t0 = time.monotonic_ns()
            await sender.Send(queue_pb2.SendRequest(queue=queue, request_id=str(uuid.uuid4()),
                                                    messages=[queue_pb2.SendMessage(payload=text(str(i)))]))
            t1 = time.monotonic_ns()
            t2, response = await asyncio.wait_for(arrived.get(), 30)
            [m] = response.messages
            t3 = time.monotonic_ns()
            await receiver.Ack(queue_pb2.AckRequest(queue=queue, request_id=str(uuid.uuid4()), acks=[
                queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token)]))
            t4 = time.monotonic_ns()
            if i >= 0:
                out.append({"t0": t0, "t1": t1, "t2": t2, "t3": t3, "t4": t4})
    finally:
        call.cancel()
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
        await rx.close()
        await tx.close()
    return out


def budget(iterations: list[dict[str, int]], events: list[tuple[str, int, int, int]]) -> dict[str, Any]:
    """Each step's milliseconds over the iterations whose every step was found."""
    events = sorted(events, key=lambda e: e[1])
    found = [m for m in (_marks(c, [e for e in events if c["t0"] <= e[1] <= c["t4"]]) for c in iterations) if m]
    steps = []
    for what, a, b in (*STEPS, *TOTALS):
        ms = [(m[b] - m[a]) / 1e6 for m in found]
        steps.append({"step": what, "p50": percentile(ms, 50), "p99": percentile(ms, 99), "mean": sum(ms) / len(ms)
                      if ms else float("nan")})
    return {"iterations": len(iterations), "complete": len(found), "steps": steps}


def table(result: dict[str, Any]) -> str:
    rows = [("step", "p50 ms", "p99 ms", "mean ms")]
    for i, s in enumerate(result["steps"]):
        label = f"{i + 1:2}. {s['step']}" if i < len(STEPS) else f"    {s['step']}"
        rows.append((label, f"{s['p50']:.3f}", f"{s['p99']:.3f}", f"{s['mean']:.3f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(len(STEPS) + 2, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + (f"\n({result['complete']} of {result['iterations']} iterations had every step; "
                               f"steps 1-{len(STEPS)} add up to the loop)")


async def cell_budget(ctx: Context) -> list[Row]:
    from .cells import Row  # noqa: F811  (cells.py imports this module to register the cell)

    if ctx.in_process:
        return [Row("budget", "skipped: --in-process", "ms", Figure())]
    n = ITERATIONS["quick" if ctx.sizes.runs < 5 else "full"]
    with tempfile.NamedTemporaryFile(suffix=".json", dir=env.BENCH_DIR) as trace:
        async with env.spanq_server(ctx.db_url, log_name="server-budget.log", app_name=BUDGET_APP_NAME,
                                    module="bench.traced_server", environ={"SPANQ_BENCH_TRACE": trace.name}) as server:
            queue = SpanqQueue(server.target, ctx.db_url, "bq_budget")
            await queue.create()
            try:
                iterations = await loop(server.target, queue.name, n)
            finally:
                await queue.drop()
                await queue.close()
        with open(trace.name) as f:
            events = [tuple(e) for e in json.load(f)]
    result = budget(iterations, events)  # type: ignore[arg-type]
    result["table"] = table(result)
    ctx.extra["budget"] = result
    ctx.log(result["table"])
    by_step = {s["step"]: s for s in result["steps"]}
    loop_ms, read_ms = by_step[TOTALS[0][0]], by_step[TOTALS[1][0]]
    return [
        Row("budget", f"one at a time, {n:,} x send -> read -> ack: loop p50", "ms", Figure([loop_ms["p50"]]),
            note="bench/budget.py: each step's p50 and p99 in the budget table below the notes"),
        Row("budget", "... loop p99", "ms", Figure([loop_ms["p99"]])),
        Row("budget", "... send -> message read p50", "ms", Figure([read_ms["p50"]])),
        Row("budget", "... send -> message read p99", "ms", Figure([read_ms["p99"]])),
    ]
