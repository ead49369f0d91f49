"""The SDK subscriber (``spanq.aio.Client.subscribe``) in the drain and latency
cells, when the installed SDK has one; the cells print "n/a" otherwise."""

import asyncio
import contextlib
import time
from typing import Any

import psycopg
from psycopg import sql

from .baseline import paced
from .env import bench_conninfo


def available() -> bool:
    try:
        import spanq.aio
    except ImportError:
        return False
    return hasattr(spanq.aio.Client, "subscribe")


async def _rows(conn: psycopg.AsyncConnection[Any], table: str) -> int:
    cur = await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("public", table)))
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def drain(target: str, db_url: str, queue: str, n: int, subscribers: int, limit: float) -> float:
    """Messages/s for ``subscribers`` subscriptions (async callbacks, auto-ack) to take and
    ack ``n`` pending messages (counted as rows gone from the queue's table), or as many
    as they manage within ``limit`` seconds."""
    import spanq.aio

    async def callback(message: Any) -> None:
        pass

    clients = [spanq.aio.Client(target) for _ in range(subscribers)]
    # One connection for the count, opened before the clock starts: a connection per look cost the
    # subscribers' process ~10 us of CPU per message drained, which the raw-stream row does not pay.
    conn = await psycopg.AsyncConnection.connect(bench_conninfo(db_url), autocommit=True)
    loop = asyncio.get_running_loop()
    start = loop.time()
    subscriptions = [c.subscribe(queue, callback, lease_duration=60) for c in clients]
    try:
        left = n
        while left and loop.time() - start < limit:
            await asyncio.sleep(0.02)
            left = await _rows(conn, queue)
        return (n - left) / (loop.time() - start)
    finally:
        await conn.close()
        for s in subscriptions:
            s.cancel()
        for c in clients:
            await c.aclose()


async def latency(target: str, queue: str, rate: float, seconds: float) -> tuple[list[float], int]:
    """Seconds from just before each send (1 message, SDK ``send``) until the subscriber's
    callback runs; and how many sends failed or never arrived within 30 s of the last."""
    import spanq.aio

    total = int(rate * seconds)
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    failed = 0
    done = asyncio.Event()

    async def callback(message: Any) -> None:
        at = sent_at.get(int(message.payload))
        if at is not None:  # not a leftover of an earlier run
            latencies.append(time.perf_counter() - at)
        if len(latencies) >= total - failed:
            done.set()

    async with spanq.aio.Client(target) as rx, spanq.aio.Client(target) as tx:
        subscription = rx.subscribe(queue, callback, lease_duration=60)
        try:
            sent_at[-1] = time.perf_counter()
            await tx.send(queue, "-1")
            await asyncio.sleep(0.5)
            latencies.clear()

            async def send(i: int) -> None:
                nonlocal failed
                try:
                    await tx.send(queue, str(i))
                except Exception:  # the SDK gave up (its deadline): count it, keep the pace
                    failed += 1
                    if len(latencies) >= total - failed:
                        done.set()

            await paced(rate, total, sent_at, send)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), 30)
        finally:
            subscription.cancel()
    return latencies, total - len(latencies)
