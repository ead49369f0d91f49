"""Cell "ordered": what ordering keys cost. The same drain (8 Receive streams of 100 per
response, each response acked) of messages without ordering keys and of messages over
10,000 ordering keys (each key's later messages held until the one before is acked, so
every ack promotes the next), interleaved in one server's run; then the same Send load
(8 clients of 100 messages per call) without and with keys; then one hot key, drained one
message at a time by the same 8 streams. Each row's baseline column is the run without keys,
so the ratio is the price."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .stats import CpuFigures, Figure

if TYPE_CHECKING:
    from .cells import Context, Row

KEYS = 10_000
RECEIVERS = 8
HOT_N = 500
"""Messages of the one hot key: each waits for the previous one's ack."""


async def cell_ordered(ctx: Context) -> list[Row]:
    from .cells import Row, _setup, _teardown  # noqa: F811  (cells.py imports this module to register the cell)

    s = ctx.sizes
    spanq, sql = await _setup(ctx, "ordered")
    await spanq.enable_ordering()  # both columns on it: what keys cost a queue that orders
    rows = []
    try:
        drains = {keys: Figure() for keys in (0, KEYS, 1)}
        cpu = {keys: CpuFigures() for keys in drains}
        sends = {keys: Figure() for keys in (0, KEYS)}
        send_cpu = {keys: CpuFigures() for keys in sends}
        for _ in range(s.drain_runs):
            for keys in (0, KEYS, 1):
                n = HOT_N if keys == 1 else s.drain_n
                await spanq.truncate()
                await spanq.preload(n, ordering_keys=keys)
                await spanq.vacuum()
                drains[keys].add(await ctx.spanq_run(cpu[keys], spanq.drain(n, RECEIVERS), lambda _, n=n: n))
            for keys in (0, KEYS):
                await spanq.truncate()
                sends[keys].add(await ctx.spanq_run(
                    send_cpu[keys], spanq.send_throughput(8, 100, s.send_seconds, ordering_keys=keys),
                    lambda rate: rate * s.send_seconds))
        note = "baseline column: the same without ordering keys, in the same run"
        rows.append(Row("ordered", f"drain {s.drain_n:,} over {KEYS:,} ordering keys, {RECEIVERS} streams + Ack",
                        "msgs/s", drains[KEYS], drains[0], cpu=cpu[KEYS], baseline_cpu=cpu[0], note=note))
        rows.append(Row("ordered", f"drain {HOT_N:,} of one ordering key, {RECEIVERS} streams + Ack", "msgs/s",
                        drains[1], drains[0], cpu=cpu[1], baseline_cpu=cpu[0],
                        note="one at a time: each waits for the ack of the one before; " + note))
        rows.append(Row("ordered", f"send 100/call x8 clients over {KEYS:,} ordering keys", "msgs/s",
                        sends[KEYS], sends[0], cpu=send_cpu[KEYS], baseline_cpu=send_cpu[0], note=note))
        ctx.log("  ordered: drain " + "  ".join(f"keys={k} {f.median:,.0f}" for k, f in drains.items())
                + "  send " + "  ".join(f"keys={k} {f.median:,.0f}" for k, f in sends.items()))
    finally:
        await _teardown(spanq, sql)
    return rows
