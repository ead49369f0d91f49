"""Cell "lease": one message at a time, and a lease of 100, beside plain SQL in the
same run, with the database's commits per message (issue 11, items 4-6).

- lease 1, ack 1: each worker is its own channel with one Receive stream
  (max_batch_size 1, max_outstanding 1: the server leases the next message only
  once the last is acked) and acks each message, waiting for the answer, before
  it reads the next. The baseline worker is a psycopg connection that leases one
  row (UPDATE ... SKIP LOCKED) and deletes it, a commit each.
- drain 100 per batch, 1 consumer: a Receive stream of 100 per response, acked as
  it reads (ACKS_IN_FLIGHT at a time), against one connection leasing and deleting
  100 rows per statement.

Commits per message are pg_stat_database's xact_commit over the run, divided by
the messages: the server's every statement (leases, acks, counts, lookups) and
the baseline's are all in it, counted over one more run of each side (untimed):
a backend reports its counts up to 10 s after it goes idle, so each reading waits
that long (SETTLE). The spanq figure also holds the server's background work over
those seconds (a ledger prune, a poll): a few commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from .env import bench_conninfo
from .spanq_side import LEASE_SECONDS, acked_rate, duration
from .stats import CpuFigures, Figure

if TYPE_CHECKING:
    from .cells import Context, Row
    from .baseline import SqlQueue
    from .spanq_side import SpanqQueue

WORKLOADS = ((1, 1, 0.5), (1, 4, 0.5), (100, 1, 0.8))
"""(messages per lease, workers, target ratio to plain SQL)."""
MAX_COMMITS_PER_MESSAGE = 2.0
"""The target for lease 1, ack 1: a lease and an ack, as plain SQL."""
SETTLE = 10.5
"""Seconds after the last commit until every backend has reported it: an idle backend with counts
pending reports them within PostgreSQL's PGSTAT_IDLE_INTERVAL (10 s)."""


async def settled_commits(db_url: str) -> int:
    """The database's xact_commit once every backend has reported its commits (the reading
    itself adds one, reported when its connection closes)."""
    await asyncio.sleep(SETTLE)
    async with await psycopg.AsyncConnection.connect(bench_conninfo(db_url), autocommit=True) as conn:
        cur = await conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def one_at_a_time(queue: SpanqQueue, n: int, workers: int) -> float:
    """Messages/s for ``workers`` streams of max_outstanding 1, each message acked before the next is read."""
    async def worker(stub: queue_pb2_grpc.QueueServiceStub, on_acked: Callable[[int], None]) -> None:
        call = stub.Receive(queue_pb2.ReceiveRequest(queue=queue.name, max_batch_size=1, max_outstanding=1,
                                                     lease_duration=duration(LEASE_SECONDS)))
        try:
            async for response in call:
                await queue._ack(stub, response.messages)
                on_acked(len(response.messages))
        finally:
            call.cancel()

    return await acked_rate(queue.target, workers, n, worker)


async def _commits_per_message(ctx: Context, run: Any, n: int) -> float:
    """One more run, untimed, between two settled readings of the commit count."""
    before = await settled_commits(ctx.db_url)
    await run()
    after = await settled_commits(ctx.db_url)
    return (after - before - 1) / n  # less the first reading's own commit


async def cell_lease(ctx: Context) -> list[Row]:
    from .cells import Row, _setup, _teardown  # noqa: F811  (cells.py imports this module to register the cell)

    s = ctx.sizes
    spanq, sql = await _setup(ctx, "lease")
    rows = []
    try:
        for per_lease, workers, target in WORKLOADS:
            n = s.drain_n if per_lease > 1 else max(s.drain_n // 4, 500)
            a, b = Figure(), Figure()
            cpu = {"spanq": CpuFigures(), "sql": CpuFigures()}
            runs = {"spanq": (spanq, (lambda: one_at_a_time(spanq, n, workers)) if per_lease == 1
                              else (lambda: spanq.drain(n, workers, per_lease))),
                    "sql": (sql, lambda: sql.drain(n, workers, per_lease))}
            for _ in range(s.drain_runs):
                for side, figure in (("spanq", a), ("sql", b)):
                    queue, run = runs[side]
                    await _prepare(queue, n)
                    figure.add(await ctx.metered(cpu[side], run(), lambda _: n,
                                                 server="main" if side == "spanq" else None))
            ca, cb = Figure(), Figure()
            for side, figure in (("spanq", ca), ("sql", cb)):
                queue, run = runs[side]
                await _prepare(queue, n)
                figure.add(await _commits_per_message(ctx, run, n))
            plural = "s" if workers > 1 else ""
            what = (f"lease 1, ack 1, {workers} worker{plural}" if per_lease == 1
                    else f"drain {per_lease} per batch, {workers} consumer{plural}")
            row = Row("lease", f"{what} ({n:,} msgs)", "msgs/s", a, b, target=f"ratio >= {target}",
                      cpu=cpu["spanq"], baseline_cpu=cpu["sql"])
            row.met = row.ratio >= target
            commits = Row("lease", f"{what}: commits per message", "commits", ca, cb,
                          target=f"<= {MAX_COMMITS_PER_MESSAGE:g}" if per_lease == 1 else "", compare=False)
            if per_lease == 1:
                commits.met = round(ca.median, 2) <= MAX_COMMITS_PER_MESSAGE  # as printed: a run's tail is a few
            rows += [row, commits]
            ctx.log(f"  {what}: spanq {a.median:,.0f} ({ca.median:.2f} commits/msg)  "
                    f"sql {b.median:,.0f} ({cb.median:.2f})")
    finally:
        await _teardown(spanq, sql)
    rows[0].note = ("each worker its own channel and Receive stream (max_batch_size 1, max_outstanding 1), acking "
                    "each message before reading the next; baseline: a psycopg connection per worker, UPDATE ... "
                    "SKIP LOCKED of 1 row, then DELETE")
    rows[1].note = ("pg_stat_database xact_commit over the run / messages (spanq: the server's every statement); "
                    "the baseline column is plain SQL's")
    return rows


async def _prepare(queue: SpanqQueue | SqlQueue, n: int) -> None:
    await queue.truncate()
    await queue.preload(n)
    await queue.vacuum()
