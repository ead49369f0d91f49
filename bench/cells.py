"""The eight cells of the table (issue 5). Each returns rows: a figure for spanq
next to the same workload in plain SQL, each a median of several runs, spanq
and baseline runs interleaved so that a noisy neighbour hurts both alike."""

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg import sql as psycopg_sql

from spanq_proto.v1 import queue_pb2
from spanq_server.domain.queues import CACHE_SECONDS as CATALOG_CACHE_SECONDS

from . import env, sdk_side
from .baseline import SqlQueue
from .cpu import Meter, nothing, server_cpu_of
from .spanq_side import SpanqQueue, cpu_seconds, duration
from .stats import CpuFigures, Figure, percentile, ratio

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Sizes:
    runs: int = 5
    send_seconds: float = 2.0
    drain_n: int = 50_000
    drain_runs: int = 3
    sdk_drain_n: int = 50_000
    """The SDK subscriber drains as many as the raw streams, for at most sdk_drain_seconds."""
    sdk_drain_seconds: float = 30
    latency_rate: float = 500
    latency_seconds: float = 10
    latency_runs: int = 3
    low_rate: float = 100
    """A second, lighter rate: latency when the server is not saturated."""
    low_seconds: float = 5
    lateness_n: int = 5_000
    lateness_spread: float = 10
    lateness_lead: float = 1.0
    lateness_runs: int = 3
    depths: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    depth_drain: int = 5_000
    depth_runs: int = 7
    churn_n: int = 1_000_000
    bloat_drain: int = 5_000
    bloat_pending: int = 10_000
    held_seconds: float = 60
    held_window: float = 10
    fanin_streams: int = 1_000
    fanin_probes: int = 20
    fanin_settle: float = 3.0
    baseline_fanin_consumers: int = 50
    notify_seconds: float = 2.0


FULL = Sizes()
QUICK = Sizes(
    runs=3, send_seconds=0.2, drain_n=2_000, drain_runs=3, sdk_drain_n=2_000, sdk_drain_seconds=3, latency_seconds=0.5,
    low_seconds=0.5,
    latency_runs=3, lateness_n=300, lateness_spread=0.6, lateness_lead=0.25, lateness_runs=3,
    depths=(2_000, 30_000), depth_drain=1_000, depth_runs=3, churn_n=20_000, bloat_drain=1_000,
    bloat_pending=2_000, held_seconds=2, held_window=0.5, fanin_streams=200, fanin_probes=5, fanin_settle=0.6,
    baseline_fanin_consumers=10, notify_seconds=0.2,
)


@dataclasses.dataclass
class Row:
    cell: str
    label: str
    unit: str
    spanq: Figure
    baseline: Figure | None = None
    target: str = ""
    met: bool | None = None
    note: str = ""
    compare: bool = True
    """False where the figures are themselves ratios (depth, bloat, NOTIFY): no spanq/baseline column."""
    cpu: CpuFigures | None = None
    """spanq's CPU microseconds per message: the client (the bench), the server, PostgreSQL."""
    baseline_cpu: CpuFigures | None = None
    """plain SQL's: the client and PostgreSQL."""

    @property
    def ratio(self) -> float:
        if self.baseline is None or not self.compare:
            return math.nan
        return ratio(self.spanq.median, self.baseline.median)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell": self.cell, "label": self.label, "unit": self.unit, "spanq": self.spanq.as_dict(),
            "baseline": self.baseline.as_dict() if self.baseline else None, "ratio": self.ratio,
            "target": self.target, "met": self.met, "note": self.note,
            "cpu_us_per_message": self.cpu.as_dict() if self.cpu else None,
            "baseline_cpu_us_per_message": self.baseline_cpu.as_dict() if self.baseline_cpu else None,
        }


@dataclasses.dataclass
class Context:
    target: str
    db_url: str
    sizes: Sizes
    server: Any
    in_process: bool
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Data for the plots and docs: percentiles, depth curves."""
    log: Callable[[str], None] = print
    workers: tuple[int, ...] = (1, 2)
    """The --workers counts cell 9 compares."""
    meter: Meter | None = None
    """CPU by process (bench/cpu.py); None: no CPU columns."""

    async def metered(self, into: CpuFigures, run: Awaitable[T], messages: Callable[[T], float],
                      server: Any = "main") -> T:
        """Awaits ``run`` and adds its CPU per message (``messages(its result)``) to ``into``;
        ``server`` is whose processes count as the server's: the main one, another, or None
        (a plain-SQL run: the idle server's background is not its work)."""
        if self.meter is None:
            return await run
        cpu = nothing if server is None else server_cpu_of(self.server if server == "main" else server)
        with self.meter.window(cpu) as use:
            result = await run
        into.add(use.per_message_us(messages(result)))
        return result

    async def spanq_run(self, into: CpuFigures, run: Awaitable[T], messages: Callable[[T], float]) -> T:
        return await self.metered(into, run, messages)

    async def sql_run(self, into: CpuFigures, run: Awaitable[T], messages: Callable[[T], float]) -> T:
        return await self.metered(into, run, messages, server=None)

    def queues(self, name: str) -> tuple[SpanqQueue, SqlQueue]:
        return SpanqQueue(self.target, self.db_url, f"bq_{name}"), SqlQueue(self.db_url, f"bt_{name}")


async def _setup(ctx: Context, name: str) -> tuple[SpanqQueue, SqlQueue]:
    spanq, sql = ctx.queues(name)
    await spanq.create()
    await sql.create()
    return spanq, sql


async def _teardown(spanq: SpanqQueue, sql: SqlQueue) -> None:
    await spanq.drop()
    await spanq.close()
    await sql.drop()


def _at_least(threshold: float) -> Callable[[float], bool]:
    return lambda value: value >= threshold


# -- 1. send throughput -----------------------------------------------------------


async def cell_send(ctx: Context) -> list[Row]:
    s = ctx.sizes
    spanq, sql = await _setup(ctx, "send")
    rows = []
    try:
        for per_call, clients, target in ((1, 1, None), (1, 8, 0.5), (100, 1, 0.5), (100, 8, 0.5)):
            a, b, ca, cb = Figure(), Figure(), CpuFigures(), CpuFigures()
            sent = lambda rate: rate * s.send_seconds  # noqa: E731
            for _ in range(s.runs):
                await spanq.truncate()
                a.add(await ctx.spanq_run(ca, spanq.send_throughput(clients, per_call, s.send_seconds), sent))
                await sql.truncate()
                b.add(await ctx.sql_run(cb, sql.send_throughput(clients, per_call, s.send_seconds), sent))
            row = Row("1 send", f"{per_call} msg/call, {clients} client{'s' if clients > 1 else ''}", "msgs/s", a, b,
                      cpu=ca, baseline_cpu=cb)
            if target is not None:
                row.target, row.met = f"ratio >= {target}", row.ratio >= target
            rows.append(row)
            ctx.log(f"  send {per_call}/call x{clients}: spanq {a.median:,.0f}  sql {b.median:,.0f}")
            if (per_call, clients) == (1, 8):
                single_sql = b
    finally:
        await _teardown(spanq, sql)
    floor = Figure()
    async with env.noop_server() as target:
        noop = SpanqQueue(target, ctx.db_url, "noop")
        for _ in range(s.runs):
            floor.add(await noop.send_throughput(8, 1, s.send_seconds))
        await noop.close()
    ctx.log(f"  no-op gRPC server, 1/call x8: {floor.median:,.0f}")
    rows.insert(2, Row("1 send", "1 msg/call, 8 clients, to a no-op gRPC server", "msgs/s", floor, single_sql,
                       note="a grpc.aio server that answers Send at once, no database: the ceiling of any "
                            "Python gRPC front-end here (baseline column repeated from the row above)"))
    return rows


# -- 2. receive + ack throughput ---------------------------------------------------


async def cell_drain(ctx: Context) -> list[Row]:
    s = ctx.sizes
    spanq, sql = await _setup(ctx, "drain")
    rows = []
    try:
        sdk = sdk_side.available()
        for receivers in (1, 4):
            a, b, c = Figure(), Figure(), Figure()
            ca, cb, cc = CpuFigures(), CpuFigures(), CpuFigures()
            for _ in range(s.drain_runs):
                await spanq.truncate()
                await spanq.preload(s.drain_n)
                await spanq.vacuum()
                a.add(await ctx.spanq_run(ca, spanq.drain(s.drain_n, receivers), lambda _: s.drain_n))
                await sql.truncate()
                await sql.preload(s.drain_n)
                await sql.vacuum()
                b.add(await ctx.sql_run(cb, sql.drain(s.drain_n, receivers), lambda _: s.drain_n))
                if sdk:
                    await spanq.truncate()
                    await spanq.preload(s.sdk_drain_n)
                    await spanq.vacuum()
                    c.add(await ctx.spanq_run(cc, sdk_side.drain(ctx.target, ctx.db_url, spanq.name, s.sdk_drain_n,
                                                                 receivers, s.sdk_drain_seconds),
                                              lambda _: s.sdk_drain_n))
            plural = "s" if receivers > 1 else ""
            row = Row("2 receive+ack", f"drain {s.drain_n:,}, {receivers} Receive stream{plural} + Ack",
                      "msgs/s", a, b, target="ratio >= 0.5", cpu=ca, baseline_cpu=cb)
            row.met = row.ratio >= 0.5
            rows.append(row)
            rows.append(Row("2 receive+ack", f"drain {s.sdk_drain_n:,}, {receivers} SDK subscriber{plural}", "msgs/s",
                            c, b, cpu=cc, baseline_cpu=cb, note=f"async callback, auto-ack, at most {s.sdk_drain_seconds:g}s; baseline "
                                       "column repeated from the row above"
                            if sdk else "the installed SDK has no subscriber"))
            ctx.log(f"  drain x{receivers}: spanq {a.median:,.0f}  sql {b.median:,.0f}  sdk {c.median:,.0f}")
    finally:
        await _teardown(spanq, sql)
    return rows


async def cell_archive(ctx: Context) -> list[Row]:
    """What an archive_duration costs the ack path: cell 2's drain (Receive streams + Ack) of
    one queue with archiving on, then off, in turns; the baseline column is the same queue
    without an archive (each ack then also inserts the row into spanq.archive_<queue>)."""
    s = ctx.sizes
    spanq, sql = await _setup(ctx, "archive")
    archive = psycopg_sql.Identifier("spanq", f"archive_{spanq.name}")
    rows = []
    try:
        for receivers in (1, 4):
            on, off, con, coff = Figure(), Figure(), CpuFigures(), CpuFigures()
            for _ in range(s.drain_runs):
                for archived, figure, cpu in ((True, on, con), (False, off, coff)):
                    request = queue_pb2.UpdateQueueRequest(queue=queue_pb2.Queue(
                        name=spanq.name, archive_duration=duration(3600) if archived else None))
                    request.update_mask.paths.append("archive_duration")
                    await spanq.stub.UpdateQueue(request)
                    await asyncio.sleep(CATALOG_CACHE_SECONDS)  # every server's cached definition says so
                    await spanq.truncate()
                    await spanq.sql(psycopg_sql.SQL("TRUNCATE {}").format(archive))
                    await spanq.preload(s.drain_n)
                    await spanq.vacuum()
                    figure.add(await ctx.spanq_run(cpu, spanq.drain(s.drain_n, receivers), lambda _: s.drain_n))
            plural = "s" if receivers > 1 else ""
            rows.append(Row("2a archive", f"drain {s.drain_n:,}, {receivers} Receive stream{plural} + Ack, "
                            "archive_duration set", "msgs/s", on, off, cpu=con, baseline_cpu=coff,
                            note="baseline column: the same drain of the same queue without an archive, in turns"))
            ctx.log(f"  drain x{receivers}: archived {on.median:,.0f}  not archived {off.median:,.0f}")
    finally:
        await _teardown(spanq, sql)
    return rows


# -- 3. end-to-end latency ------------------------------------------------------------

PERCENTILES = (50, 75, 90, 95, 99, 99.9, 100)


def _latency_rows(cell: str, what: str, runs_a: list[list[float]], runs_b: list[list[float]],
                  target_p99_ms: float) -> list[Row]:
    rows = []
    for label, p in (("p50", 50), ("p99", 99), ("max", 100)):
        a = Figure([percentile(r, p) * 1000 for r in runs_a])
        b = Figure([percentile(r, p) * 1000 for r in runs_b])
        row = Row(cell, f"{what} {label}", "ms", a, b)
        if label == "p99":
            row.target, row.met = f"< {target_p99_ms:g} ms", a.median < target_p99_ms
        rows.append(row)
    return rows


def _pooled_percentiles(runs: list[list[float]]) -> dict[str, float]:
    pooled = [x for r in runs for x in r]
    return {str(p): percentile(pooled, p) * 1000 for p in PERCENTILES}


async def cell_latency(ctx: Context) -> list[Row]:
    s = ctx.sizes
    spanq, sql = await _setup(ctx, "latency")
    runs_a: list[list[float]] = []
    runs_b: list[list[float]] = []
    try:
        await sql.set_notify(True)
        sdk = sdk_side.available()
        runs_c: list[list[float]] = []
        missing = {"spanq": 0, "sql": 0, "sdk": 0}
        cpu = 0.0
        ca, cb, cc = CpuFigures(), CpuFigures(), CpuFigures()
        received = lambda result: len(result[0])  # noqa: E731
        for _ in range(s.latency_runs):
            await spanq.truncate()
            await sql.truncate()
            cpu0 = cpu_seconds(ctx.server.pid)
            got, lost = await ctx.spanq_run(ca, spanq.latency(s.latency_rate, s.latency_seconds), received)
            cpu += cpu_seconds(ctx.server.pid) - cpu0
            runs_a.append(got)
            missing["spanq"] += lost
            got, lost = await ctx.sql_run(cb, sql.latency(s.latency_rate, s.latency_seconds), received)
            runs_b.append(got)
            missing["sql"] += lost
            if sdk:
                await spanq.truncate()
                got, lost = await ctx.spanq_run(
                    cc, sdk_side.latency(ctx.target, spanq.name, s.latency_rate, s.latency_seconds), received)
                runs_c.append(got)
                missing["sdk"] += lost
            ctx.log(f"  latency p99: spanq {percentile(runs_a[-1], 99) * 1000:.2f} ms  "
                    f"sql {percentile(runs_b[-1], 99) * 1000:.2f} ms"
                    + (f"  sdk {percentile(runs_c[-1], 99) * 1000:.2f} ms" if sdk else ""))
        low_a: list[list[float]] = []
        low_b: list[list[float]] = []
        for _ in range(s.latency_runs):
            await spanq.truncate()
            await sql.truncate()
            low_a.append((await spanq.latency(s.low_rate, s.low_seconds))[0])
            low_b.append((await sql.latency(s.low_rate, s.low_seconds))[0])
    finally:
        await _teardown(spanq, sql)
    per_message = cpu / max(1, sum(len(r) for r in runs_a))
    ctx.extra["latency"] = {"spanq": _pooled_percentiles(runs_a), "baseline": _pooled_percentiles(runs_b),
                            "rate": s.latency_rate, "seconds": s.latency_seconds,
                            "low_rate": s.low_rate, "spanq_low": _pooled_percentiles(low_a),
                            "baseline_low": _pooled_percentiles(low_b),
                            "server_cpu_ms_per_message": per_message * 1000}
    if runs_c:
        ctx.extra["latency"]["sdk"] = _pooled_percentiles(runs_c)
    rows = _latency_rows("3 latency", f"send->stream @{s.latency_rate:g}/s", runs_a, runs_b, 10)
    rows[0].cpu, rows[0].baseline_cpu = ca, cb
    if runs_c:
        sdk_rows = _latency_rows("3 latency", f"SDK send->callback @{s.latency_rate:g}/s", runs_c, runs_b, 10)
        sdk_rows[0].cpu, sdk_rows[0].baseline_cpu = cc, cb
        rows += sdk_rows
    rows[1].note = (f"server CPU {per_message * 1000:.2f} ms per message (Send, Receive, Ack) at "
                    f"{s.latency_rate:g}/s: {per_message * s.latency_rate * 100:.0f}% of a core asked for")
    if any(missing.values()):
        rows[0].note = ("sends failed or not received within 30s, over all runs: "
                        + ", ".join(f"{k} {v}" for k, v in missing.items()))
    for row in _latency_rows("3 latency", f"send->stream @{s.low_rate:g}/s", low_a, low_b, 10):
        row.target, row.met = "", None
        rows.append(row)
    return rows


# -- 4. scheduled delivery lateness ---------------------------------------------------


async def cell_lateness(ctx: Context) -> list[Row]:
    s = ctx.sizes
    spanq, sql = await _setup(ctx, "sched")
    runs_a: list[list[float]] = []
    runs_b: list[list[float]] = []
    ca, cb = CpuFigures(), CpuFigures()
    try:
        await sql.set_notify(True)
        for _ in range(s.lateness_runs):
            runs_a.append(await ctx.spanq_run(ca, spanq.lateness(s.lateness_n, s.lateness_spread, s.lateness_lead),
                                              len))
            runs_b.append(await ctx.sql_run(cb, sql.lateness(s.lateness_n, s.lateness_spread, s.lateness_lead), len))
            ctx.log(f"  lateness p99: spanq {percentile(runs_a[-1], 99) * 1000:.2f} ms  "
                    f"sql {percentile(runs_b[-1], 99) * 1000:.2f} ms")
    finally:
        await _teardown(spanq, sql)
    ctx.extra["lateness"] = {"spanq": _pooled_percentiles(runs_a), "baseline": _pooled_percentiles(runs_b),
                             "early": {"spanq": sum(x < 0 for r in runs_a for x in r),
                                       "baseline": sum(x < 0 for r in runs_b for x in r)}}
    rows = _latency_rows("4 scheduled", f"lateness, {s.lateness_n:,} over {s.lateness_spread:g}s", runs_a, runs_b, 50)
    rows[0].cpu, rows[0].baseline_cpu = ca, cb
    return rows


# -- 5. depth ------------------------------------------------------------------------


async def _depth_curve(queue: Any, depths: tuple[int, ...], drain: int, runs: int,
                       metered: Callable[[CpuFigures, Awaitable[float]], Awaitable[float]],
                       cpu: list[CpuFigures]) -> list[Figure]:
    """Receive+ack throughput (1 receiver, ``drain`` messages) at each depth, topping up after each run;
    the CPU of each depth's runs into ``cpu``."""
    figures = []
    await queue.preload(drain)
    await queue.drain(drain, 1)  # warm-up (connections, prepared statements): not measured
    pending = 0
    for depth in depths:
        await queue.preload(depth - pending)
        pending = depth
        await queue.vacuum()
        figure, used = Figure(), CpuFigures()
        for _ in range(runs):
            figure.add(await metered(used, queue.drain(drain, 1)))
            await queue.preload(drain)
        figures.append(figure)
        cpu.append(used)
    return figures


async def cell_depth(ctx: Context) -> list[Row]:
    s = ctx.sizes
    spanq, sql = await _setup(ctx, "depth")
    ca: list[CpuFigures] = []
    cb: list[CpuFigures] = []
    drained = lambda _: s.depth_drain  # noqa: E731
    try:
        a = await _depth_curve(spanq, s.depths, s.depth_drain, s.depth_runs,
                               lambda into, run: ctx.spanq_run(into, run, drained), ca)
        ctx.log("  depth spanq: " + ", ".join(f"{d:,}: {f.median:,.0f}" for d, f in zip(s.depths, a)))
        b = await _depth_curve(sql, s.depths, s.depth_drain, s.depth_runs,
                               lambda into, run: ctx.sql_run(into, run, drained), cb)
        ctx.log("  depth sql:   " + ", ".join(f"{d:,}: {f.median:,.0f}" for d, f in zip(s.depths, b)))
    finally:
        await _teardown(spanq, sql)
    ctx.extra["depth"] = {"depths": list(s.depths), "spanq": [f.as_dict() for f in a],
                          "baseline": [f.as_dict() for f in b], "drain": s.depth_drain}
    rows = [Row("5 depth", f"receive+ack {s.depth_drain:,} at {d:,} pending", "msgs/s", fa, fb, cpu=ua, baseline_cpu=ub)
            for d, fa, fb, ua, ub in zip(s.depths, a, b, ca, cb)]
    deep, shallow = s.depths[-1], s.depths[0]
    ra = Figure([x / y for x, y in zip(a[-1].runs, a[0].runs)])
    rb = Figure([x / y for x, y in zip(b[-1].runs, b[0].runs)])
    row = Row("5 depth", f"ratio {deep:,} / {shallow:,} pending", "x", ra, rb, target="0.8-1.25", compare=False)
    row.met = 0.8 <= ra.median <= 1.25
    rows.append(row)
    return rows


# -- 6. bloat --------------------------------------------------------------------------


def _windows(acked_at: list[float], start: float, seconds: float, window: float) -> tuple[float, float, float]:
    """(first window's rate, last window's rate, overall rate) in msgs/s."""
    first = sum(1 for t in acked_at if t - start < window) / window
    last = sum(1 for t in acked_at if t - start >= seconds - window) / window
    return first, last, len(acked_at) / seconds


async def _held_xmin(ctx: Context, queue: Any, seconds: float) -> list[float]:
    """Runs steady churn while another session holds a transaction (and its snapshot) open."""
    import time

    async with await psycopg.AsyncConnection.connect(env.bench_conninfo(ctx.db_url)) as holder:
        await holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        await holder.execute("SELECT txid_current()")  # an xid and a snapshot: VACUUM cannot pass it
        start = time.perf_counter()
        acked_at = await queue.steady_churn(seconds)
        await holder.rollback()
    return [t - start for t in acked_at]


async def cell_bloat(ctx: Context) -> list[Row]:
    s = ctx.sizes
    rows = []
    spanq, sql = await _setup(ctx, "bloat")
    try:
        fresh: dict[str, Figure] = {}
        churned: dict[str, Figure] = {}
        cpu = {(side, when): CpuFigures() for side in ("spanq", "sql") for when in ("fresh", "churned")}
        drained = lambda _: s.bloat_drain  # noqa: E731
        for side, queue in (("spanq", spanq), ("sql", sql)):
            run = ctx.spanq_run if side == "spanq" else ctx.sql_run
            await queue.preload(s.bloat_pending)
            fresh[side] = Figure()
            for _ in range(s.runs):
                fresh[side].add(await run(cpu[side, "fresh"], queue.drain(s.bloat_drain, 1), drained))
                await queue.preload(s.bloat_drain)
            await queue.churn(s.churn_n)
            await queue.preload(max(0, s.bloat_pending - await queue.count()))  # churn may take pending ones
            churned[side] = Figure()
            for _ in range(s.runs):
                churned[side].add(await run(cpu[side, "churned"], queue.drain(s.bloat_drain, 1), drained))
                await queue.preload(s.bloat_drain)
            ctx.log(f"  bloat {side}: fresh {fresh[side].median:,.0f}  after churn {churned[side].median:,.0f}")
        rows.append(Row("6 bloat", f"receive+ack, fresh queue ({s.bloat_pending:,} pending)", "msgs/s",
                        fresh["spanq"], fresh["sql"], cpu=cpu["spanq", "fresh"], baseline_cpu=cpu["sql", "fresh"]))
        rows.append(Row("6 bloat", f"... after {s.churn_n:,} churned through it", "msgs/s",
                        churned["spanq"], churned["sql"], cpu=cpu["spanq", "churned"],
                        baseline_cpu=cpu["sql", "churned"]))
        rows.append(Row("6 bloat", "after churn / fresh", "x",
                        Figure([x / y for x, y in zip(churned["spanq"].runs, fresh["spanq"].runs)]),
                        Figure([x / y for x, y in zip(churned["sql"].runs, fresh["sql"].runs)]), compare=False))
    finally:
        await _teardown(spanq, sql)

    spanq, sql = await _setup(ctx, "held")
    try:
        results = {}
        held_cpu = {"spanq": CpuFigures(), "sql": CpuFigures()}
        for side, queue in (("spanq", spanq), ("sql", sql)):
            acked_at = await ctx.metered(held_cpu[side], _held_xmin(ctx, queue, s.held_seconds), len,
                                         server="main" if side == "spanq" else None)
            results[side] = _windows(acked_at, 0.0, s.held_seconds, s.held_window)
            per_second = [0] * int(math.ceil(s.held_seconds))
            for t in acked_at:
                if 0 <= t < len(per_second):
                    per_second[int(t)] += 1
            ctx.extra.setdefault("held_xmin", {})[side] = per_second
            ctx.log(f"  held xmin {side}: first {results[side][0]:,.0f}/s last {results[side][1]:,.0f}/s")
        w = s.held_window
        rows.append(Row("6 bloat", f"xmin held {s.held_seconds:g}s: send+receive+ack, first {w:g}s", "msgs/s",
                        Figure([results["spanq"][0]]), Figure([results["sql"][0]]), note="one run",
                        cpu=held_cpu["spanq"], baseline_cpu=held_cpu["sql"]))
        rows.append(Row("6 bloat", f"... last {w:g}s", "msgs/s",
                        Figure([results["spanq"][1]]), Figure([results["sql"][1]]), note="one run"))
        rows.append(Row("6 bloat", "... last / first", "x",
                        Figure([ratio(results["spanq"][1], results["spanq"][0])]),
                        Figure([ratio(results["sql"][1], results["sql"][0])]), note="one run", compare=False))
    finally:
        await _teardown(spanq, sql)
    return rows


# -- 7. fan-in ---------------------------------------------------------------------------

FANIN_APP_NAME = "spanq-server-fanin"


async def cell_fanin(ctx: Context) -> list[Row]:
    """On a fresh server of its own, so that RSS and connections are this cell's alone."""
    s = ctx.sizes

    async def count() -> int:
        async with await psycopg.AsyncConnection.connect(env.bench_conninfo(ctx.db_url), autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
                (FANIN_APP_NAME,))
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    async with env.spanq_server(ctx.db_url, in_process=ctx.in_process, log_name="server-fanin.log",
                                app_name=FANIN_APP_NAME) as server:
        spanq = SpanqQueue(server.target, ctx.db_url, "bq_fanin")
        sql = SqlQueue(ctx.db_url, "bt_fanin")
        await spanq.create()
        await sql.create()
        await sql.set_notify(True)
        try:
            result = await spanq.fanin(s.fanin_streams, s.fanin_probes, s.fanin_settle, server, count)
            base = await sql.fanin(s.baseline_fanin_consumers, s.fanin_probes, s.fanin_settle)
        finally:
            await _teardown(spanq, sql)
    n, k = s.fanin_streams, s.baseline_fanin_consumers
    ctx.extra["fanin"] = {**result, "baseline": base}
    ctx.log(f"  fan-in: {result['streams_open']} streams open, connections idle {result['connections_idle']} "
            f"peak {result['connections_peak']}")
    lat_a, lat_b = result["latencies"], base["latencies"]
    rows = [
        Row("7 fan-in", f"DB connections, {n:,} idle streams", "conns", Figure([result["connections_idle"]]),
            Figure([base["connections"]]), target="<= 10", met=result["connections_idle"] <= 10, compare=False,
            note=f"--max-connections 10 (default): a pool of 9 and one LISTEN connection, whatever the number of streams; "
                 f"baseline: {k} LISTENing consumers, one connection each"),
        Row("7 fan-in", "DB connections, peak during wake-ups", "conns", Figure([result["connections_peak"]]),
            Figure([base["connections"]]), compare=False),
        Row("7 fan-in", f"server RSS with {n:,} streams", "MiB", Figure([result["rss"] / 2**20]),
            note=f"before: {result['rss_before'] / 2**20:.0f} MiB, "
                 f"{(result['rss'] - result['rss_before']) / n / 1024:.1f} KiB/stream"),
        Row("7 fan-in", "wake-up latency, send to an idle stream, p50", "ms",
            Figure([percentile(lat_a, 50) * 1000]), Figure([percentile(lat_b, 50) * 1000]),
            note=f"{len(lat_a)} probes; baseline: {k} consumers"),
        Row("7 fan-in", "... max", "ms", Figure([max(lat_a) * 1000]), Figure([max(lat_b) * 1000])),
        Row("7 fan-in", "server CPU per wake-up", "ms", Figure([x * 1000 for x in result["cpu_per_wakeup"]]),
            note="one idle stream wakes per send; it wakes the next when it finds a full batch"),
        Row("7 fan-in", f"server CPU while {n:,} streams idle", "% core", Figure([result["idle_cpu"] * 100]),
            note="one stream per queue keeps the poll and deliver_time timers; the others wait for wakes"),
    ]
    return rows


# -- 8. NOTIFY cost --------------------------------------------------------------------


async def cell_notify(ctx: Context) -> list[Row]:
    s = ctx.sizes
    spanq, sql = await _setup(ctx, "notify")
    figures: dict[tuple[str, bool], Figure] = {}
    cpus: dict[tuple[str, bool], CpuFigures] = {}
    try:
        for on in (True, False):
            await spanq.set_notify(on)
            await sql.set_notify(on)
            a, b = Figure(), Figure()
            ca, cb = CpuFigures(), CpuFigures()
            sent = lambda rate: rate * s.notify_seconds  # noqa: E731
            for _ in range(s.runs):
                await spanq.truncate()
                a.add(await ctx.spanq_run(ca, spanq.send_throughput(8, 1, s.notify_seconds), sent))
                await sql.truncate()
                b.add(await ctx.sql_run(cb, sql.send_throughput(8, 1, s.notify_seconds), sent))
            figures["spanq", on], figures["sql", on] = a, b
            cpus["spanq", on], cpus["sql", on] = ca, cb
            ctx.log(f"  notify {'on' if on else 'off'}: spanq {a.median:,.0f}  sql {b.median:,.0f}")
    finally:
        await _teardown(spanq, sql)
    rows = [
        Row("8 NOTIFY", "send 1 msg/call, 8 clients, NOTIFY on", "msgs/s", figures["spanq", True],
            figures["sql", True], note="baseline: INSERT + the same statement trigger",
            cpu=cpus["spanq", True], baseline_cpu=cpus["sql", True]),
        Row("8 NOTIFY", "... NOTIFY off (trigger disabled)", "msgs/s", figures["spanq", False], figures["sql", False],
            cpu=cpus["spanq", False], baseline_cpu=cpus["sql", False]),
        Row("8 NOTIFY", "on / off", "x",
            Figure([x / y for x, y in zip(figures["spanq", True].runs, figures["spanq", False].runs)]),
            Figure([x / y for x, y in zip(figures["sql", True].runs, figures["sql", False].runs)]), compare=False),
    ]
    return rows


# -- 9. --workers N ----------------------------------------------------------------------

WORKERS_APP_NAME = "spanq-server-workers"
WORKERS_TARGET = 1.4
"""Issue 11: 1 message per call, 4 producers, --workers 2 blocking sends >= 1.4x --workers 1."""


async def cell_workers(ctx: Context) -> list[Row]:
    """Cells 1-3's core workloads against a server of its own for each --workers N
    (ctx.workers), all started at once and their runs interleaved with the plain-SQL
    baseline's, so that a noisy neighbour hurts every column alike."""
    s = ctx.sizes
    if ctx.in_process:
        return [Row("9 workers", "skipped: --in-process has one process", "msgs/s", Figure())]
    counts = ctx.workers
    async with contextlib.AsyncExitStack() as stack:
        servers = {n: await stack.enter_async_context(env.spanq_server(
            ctx.db_url, log_name=f"server-workers-{n}.log", app_name=WORKERS_APP_NAME, workers=n)) for n in counts}
        queues = {n: SpanqQueue(servers[n].target, ctx.db_url, f"bq_workers{n}") for n in counts}
        sql = SqlQueue(ctx.db_url, "bt_workers")
        for q in queues.values():
            await q.create()
        await sql.create()
        sends = {n: Figure() for n in counts}
        drains = {n: Figure() for n in counts}
        latencies: dict[int, list[list[float]]] = {n: [] for n in counts}
        cpu = {n: 0.0 for n in counts}
        base_send, base_drain, base_latency = Figure(), Figure(), []
        send_cpu = {n: CpuFigures() for n in (*counts, 0)}  # 0: plain SQL
        drain_cpu = {n: CpuFigures() for n in (*counts, 0)}
        sent = lambda rate: rate * s.send_seconds  # noqa: E731
        drained = lambda _: s.drain_n  # noqa: E731
        try:
            for _ in range(s.runs):
                for n in counts:
                    await queues[n].truncate()
                    sends[n].add(await ctx.metered(send_cpu[n], queues[n].send_throughput(4, 1, s.send_seconds),
                                                   sent, server=servers[n]))
                await sql.truncate()
                base_send.add(await ctx.sql_run(send_cpu[0], sql.send_throughput(4, 1, s.send_seconds), sent))
            for _ in range(s.drain_runs):
                for n in counts:
                    await queues[n].truncate()
                    await queues[n].preload(s.drain_n)
                    await queues[n].vacuum()
                    drains[n].add(await ctx.metered(drain_cpu[n], queues[n].drain(s.drain_n, 4), drained,
                                                    server=servers[n]))
                await sql.truncate()
                await sql.preload(s.drain_n)
                await sql.vacuum()
                base_drain.add(await ctx.sql_run(drain_cpu[0], sql.drain(s.drain_n, 4), drained))
            await sql.set_notify(True)
            for _ in range(s.latency_runs):
                for n in counts:
                    await queues[n].truncate()
                    cpu0 = servers[n].cpu_seconds()
                    latencies[n].append((await queues[n].latency(s.latency_rate, s.latency_seconds))[0])
                    cpu[n] += servers[n].cpu_seconds() - cpu0
                await sql.truncate()
                base_latency.append((await sql.latency(s.latency_rate, s.latency_seconds))[0])
        finally:
            for q in queues.values():
                await q.drop()
                await q.close()
            await sql.drop()
    rows: list[Row] = []
    for n in counts:
        rows.append(Row("9 workers", f"--workers {n}: send 1 msg/call, 4 clients", "msgs/s", sends[n], base_send,
                        cpu=send_cpu[n], baseline_cpu=send_cpu[0]))
        rows.append(Row("9 workers", f"--workers {n}: drain {s.drain_n:,}, 4 Receive streams + Ack", "msgs/s",
                        drains[n], base_drain, cpu=drain_cpu[n], baseline_cpu=drain_cpu[0]))
        latency = [r for r in _latency_rows("9 workers", f"--workers {n}: send->stream @{s.latency_rate:g}/s",
                                            latencies[n], base_latency, 10) if not r.label.endswith("max")]
        per_message = cpu[n] / max(1, sum(len(r) for r in latencies[n]))
        latency[0].note = f"server CPU, all its processes: {per_message * 1000:.2f} ms per message"
        rows += latency
        ctx.log(f"  --workers {n}: send x4 {sends[n].median:,.0f} (sql {base_send.median:,.0f}); drain x4 "
                f"{drains[n].median:,.0f} (sql {base_drain.median:,.0f}); p99 {latency[1].spanq.median:.2f} ms")
    if 1 in counts:
        for n in counts:
            if n == 1:
                continue
            quotients = Figure([x / y for x, y in zip(sends[n].runs, sends[1].runs)])
            row = Row("9 workers", f"send 1 msg/call, 4 clients: --workers {n} / --workers 1", "x", quotients,
                      compare=False, note="each run's quotient (the two servers' runs are neighbours)")
            if n == 2:
                row.target, row.met = f">= {WORKERS_TARGET:g}", quotients.median >= WORKERS_TARGET
            rows.append(row)
    return rows


CELLS: dict[str, Callable[[Context], Awaitable[list[Row]]]] = {
    "1": cell_send,
    "2": cell_drain,
    "2a": cell_archive,
    "3": cell_latency,
    "4": cell_lateness,
    "5": cell_depth,
    "6": cell_bloat,
    "8": cell_notify,
    "7": cell_fanin,  # last: its own server, after the main one is idle
    "9": cell_workers,  # its own servers too
}
OWN_SERVER = ("7", "9", "budget")
"""Cells that start servers of their own: run after the main server has stopped."""

from .publisher import cell_publish  # noqa: E402  (it builds on this module's Context, Row and _setup)
CELLS["pub"] = cell_publish
from .one_at_a_time import cell_lease  # noqa: E402  (the same)
CELLS["lease"] = cell_lease
from .budget import cell_budget  # noqa: E402  (the same)
CELLS["budget"] = cell_budget
from .tagged import cell_tagged  # noqa: E402  (the same)
CELLS["tagged"] = cell_tagged
from .limits import cell_limits  # noqa: E402  (the same)
CELLS["limits"] = cell_limits
from .ordered import cell_ordered  # noqa: E402  (the same)
CELLS["ordered"] = cell_ordered
