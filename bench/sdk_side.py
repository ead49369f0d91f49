"""The SDK subscriber (``spanq.aio.Client.subscribe``) in the drain and latency
cells, when the installed SDK has one; the cells print "n/a" otherwise."""

import asyncio
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


async def _rows(db_url: str, table: str) -> int:
    async with await psycopg.AsyncConnection.connect(bench_conninfo(db_url), autocommit=True) as conn:
        cur = await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("public", table)))
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def drain(target: str, db_url: str, queue: str, n: int, subscribers: int) -> float:
    """Messages/s for ``subscribers`` subscriptions (async callbacks, auto-ack) to take
    ``n`` pending messages, until the queue's table is empty (every ack applied)."""
    import spanq.aio

    received = 0
    done = asyncio.Event()

    async def callback(message: Any) -> None:
        nonlocal received
        received += 1
        if received >= n:
            done.set()

    clients = [spanq.aio.Client(target) for _ in range(subscribers)]
    loop = asyncio.get_running_loop()
    start = loop.time()
    subscriptions = [c.subscribe(queue, callback, lease_duration=60) for c in clients]
    try:
        await asyncio.wait_for(done.wait(), 600)
        while await _rows(db_url, queue):
            await asyncio.sleep(0.01)
        return n / (loop.time() - start)
    finally:
        for s in subscriptions:
            s.cancel()
        for c in clients:
            await c.aclose()


async def latency(target: str, queue: str, rate: float, seconds: float) -> list[float]:
    """Seconds from just before each send (1 message, SDK ``send``) until the subscriber's callback runs."""
    import spanq.aio

    total = int(rate * seconds)
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    done = asyncio.Event()

    async def callback(message: Any) -> None:
        latencies.append(time.perf_counter() - sent_at[int(message.payload)])
        if len(latencies) >= total:
            done.set()

    async with spanq.aio.Client(target) as rx, spanq.aio.Client(target) as tx:
        subscription = rx.subscribe(queue, callback, lease_duration=60)
        try:
            sent_at[-1] = time.perf_counter()
            await tx.send(queue, "-1")
            await asyncio.sleep(0.5)
            latencies.clear()

            async def send(i: int) -> None:
                await tx.send(queue, str(i))

            await paced(rate, total, sent_at, send)
            await asyncio.wait_for(done.wait(), 30)
        finally:
            subscription.cancel()
    return latencies
