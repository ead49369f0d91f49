"""Cell "tagged": what headers and priorities cost a lease. The same drain (Receive
streams of 100 per response, each response acked) of messages without either, with
two headers (a W3C traceparent and a tenant, 80 bytes), and with priorities 0 to 9
spread evenly over the queue, runs interleaved in one server's run; each row's
baseline column is the plain drain of its run, so the ratio is the price."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .stats import CpuFigures, Figure

if TYPE_CHECKING:
    from .cells import Context, Row

HEADERS = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme-corp"}
VARIANTS = (("plain", None, False), ("headers", HEADERS, False), ("priorities", None, True))


async def cell_tagged(ctx: Context) -> list[Row]:
    from .cells import Row, _setup, _teardown  # noqa: F811  (cells.py imports this module to register the cell)

    s = ctx.sizes
    spanq, sql = await _setup(ctx, "tagged")
    rows = []
    try:
        for receivers in (1, 4):
            figures = {name: Figure() for name, _, _ in VARIANTS}
            cpu = {name: CpuFigures() for name, _, _ in VARIANTS}
            for _ in range(s.drain_runs):
                for name, headers, priorities in VARIANTS:
                    await spanq.truncate()
                    await spanq.preload(s.drain_n, headers=headers, priorities=priorities)
                    await spanq.vacuum()
                    figures[name].add(await ctx.spanq_run(cpu[name], spanq.drain(s.drain_n, receivers),
                                                          lambda _: s.drain_n))
            plural = "s" if receivers > 1 else ""
            for name, _, _ in VARIANTS[1:]:
                what = "2 headers (80 bytes)" if name == "headers" else "priorities 0-9"
                rows.append(Row("tagged", f"drain {s.drain_n:,} with {what}, {receivers} stream{plural} + Ack",
                                "msgs/s", figures[name], figures["plain"], cpu=cpu[name], baseline_cpu=cpu["plain"],
                                note="baseline column: the same drain without them, in the same run"))
            ctx.log(f"  tagged x{receivers}: " + "  ".join(f"{n} {f.median:,.0f}" for n, f in figures.items()))
    finally:
        await _teardown(spanq, sql)
    return rows
