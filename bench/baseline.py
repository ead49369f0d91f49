"""The baseline: the same workloads in plain SQL from psycopg 3, no gRPC.

A table shaped like a hand-written PostgreSQL queue (a UUID key, a payload, a
deliver_time with an index, a lease token and expiry): send is a batch
INSERT, receive leases with ``FOR UPDATE SKIP LOCKED`` by updating the lease
columns (and moving deliver_time past the lease, so an expired lease is
redelivered), ack is a DELETE checked against the lease token. Consumers that
wait use LISTEN/NOTIFY (a statement trigger, off unless a cell turns it on)
and sleep until the next deliver_time: the best plain SQL does, so the
comparison is with a good hand-written queue, not a naive poller.
"""

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql

from .env import bench_conninfo

PAYLOAD = "x" * 64
LEASE = timedelta(seconds=60)
POLL = 0.1
"""Seconds a waiting consumer sleeps at most before it looks again without a notification."""
MIN_WAIT = 0.005

Connection = psycopg.AsyncConnection[Any]


class SqlQueue:
    """One baseline queue table in the bench database."""

    def __init__(self, db_url: str, name: str) -> None:
        self.db_url = bench_conninfo(db_url)
        self.name = name
        self.table = sql.Identifier("public", name)
        self.channel = f"bench_{name}"

    async def connect(self) -> Connection:
        return await psycopg.AsyncConnection.connect(self.db_url, autocommit=True)

    # -- setup ------------------------------------------------------------------

    async def create(self) -> None:
        async with await self.connect() as conn:
            await conn.execute(sql.SQL("""
                CREATE TABLE {t} (
                    id            text PRIMARY KEY DEFAULT gen_random_uuid()::text,
                    payload       text NOT NULL,
                    deliver_time  timestamptz NOT NULL DEFAULT now(),
                    lease_token   text,
                    lease_expires timestamptz,
                    attempt       integer NOT NULL DEFAULT 0,
                    enqueue_time  timestamptz NOT NULL DEFAULT now()
                )""").format(t=self.table))
            await conn.execute(sql.SQL("CREATE INDEX ON {t} (deliver_time)").format(t=self.table))
            await conn.execute(sql.SQL("""
                CREATE OR REPLACE FUNCTION public.bench_notify() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN PERFORM pg_notify('bench_' || TG_TABLE_NAME, ''); RETURN NULL; END $$"""))
            await conn.execute(sql.SQL(
                "CREATE TRIGGER bench_notify AFTER INSERT ON {t} FOR EACH STATEMENT "
                "EXECUTE FUNCTION public.bench_notify()").format(t=self.table))
            await self._set_trigger(conn, False)

    async def set_notify(self, on: bool) -> None:
        async with await self.connect() as conn:
            await self._set_trigger(conn, on)

    async def _set_trigger(self, conn: Connection, on: bool) -> None:
        verb = sql.SQL("ENABLE" if on else "DISABLE")
        await conn.execute(sql.SQL("ALTER TABLE {t} {verb} TRIGGER bench_notify").format(t=self.table, verb=verb))

    async def drop(self) -> None:
        async with await self.connect() as conn:
            await conn.execute(sql.SQL("DROP TABLE IF EXISTS {t}").format(t=self.table))

    async def truncate(self) -> None:
        async with await self.connect() as conn:
            await conn.execute(sql.SQL("TRUNCATE {t}").format(t=self.table))

    async def preload(self, n: int, chunk: int = 200_000) -> None:
        """n deliverable messages with distinct, past deliver_times, oldest first."""
        async with await self.connect() as conn:
            done = 0
            while done < n:
                size = min(chunk, n - done)
                await conn.execute(sql.SQL("""
                    INSERT INTO {t} (payload, deliver_time)
                    SELECT %(payload)s, now() - (%(size)s - g) * interval '1 microsecond'
                    FROM generate_series(1, %(size)s) AS g""").format(t=self.table),
                    {"payload": PAYLOAD, "size": size})
                done += size

    async def vacuum(self) -> None:
        async with await self.connect() as conn:
            await conn.execute(sql.SQL("VACUUM (ANALYZE) {t}").format(t=self.table))

    async def count(self) -> int:
        async with await self.connect() as conn:
            cur = await conn.execute(sql.SQL("SELECT count(*) FROM {t}").format(t=self.table))
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    # -- the three operations -------------------------------------------------

    def _insert_batch(self) -> sql.Composed:
        return sql.SQL("INSERT INTO {t} (payload) SELECT unnest(%(payloads)s::text[])").format(t=self.table)

    def _insert_one(self) -> sql.Composed:
        return sql.SQL("INSERT INTO {t} (payload) VALUES (%(payload)s)").format(t=self.table)

    def _insert_at(self) -> sql.Composed:
        return sql.SQL(
            "INSERT INTO {t} (payload, deliver_time) SELECT * FROM unnest(%(payloads)s::text[], %(times)s::timestamptz[])"
        ).format(t=self.table)

    def _lease(self) -> sql.Composed:
        return sql.SQL("""
            UPDATE {t} AS m SET
                lease_token = %(token)s,
                lease_expires = now() + %(lease)s,
                deliver_time = now() + %(lease)s,
                attempt = m.attempt + 1
            FROM (SELECT id, deliver_time FROM {t}
                  WHERE deliver_time <= now()
                  ORDER BY deliver_time
                  LIMIT %(n)s
                  FOR UPDATE SKIP LOCKED) AS r
            WHERE m.id = r.id
            RETURNING m.id, m.payload, r.deliver_time""").format(t=self.table)

    def _delete(self) -> sql.Composed:
        return sql.SQL("DELETE FROM {t} WHERE id = ANY(%(ids)s) AND lease_token = %(token)s").format(t=self.table)

    def _next_due(self) -> sql.Composed:
        return sql.SQL(
            "SELECT extract(epoch FROM deliver_time - now())::float8 FROM {t} ORDER BY deliver_time LIMIT 1"
        ).format(t=self.table)

    async def lease(self, conn: Connection, n: int) -> tuple[str, list[tuple[Any, ...]]]:
        token = uuid.uuid4().hex
        cur = await conn.execute(self._lease(), {"token": token, "lease": LEASE, "n": n}, prepare=True)
        return token, await cur.fetchall()

    async def delete(self, conn: Connection, token: str, rows: list[tuple[Any, ...]]) -> None:
        await conn.execute(self._delete(), {"ids": [r[0] for r in rows], "token": token}, prepare=True)

    # -- workloads ----------------------------------------------------------------

    async def send_throughput(self, clients: int, per_call: int, seconds: float) -> float:
        """Messages/s: ``clients`` connections, each committing ``per_call`` messages per INSERT."""
        conns = [await self.connect() for _ in range(clients)]
        try:
            if per_call == 1:
                statement, params = self._insert_one(), {"payload": PAYLOAD}
            else:
                statement, params = self._insert_batch(), {"payloads": [PAYLOAD] * per_call}
            for conn in conns:  # warm-up
                await conn.execute(statement, params, prepare=True)
            loop = asyncio.get_running_loop()

            async def client(conn: Connection) -> int:
                n = 0
                while loop.time() < deadline:
                    await conn.execute(statement, params, prepare=True)
                    n += per_call
                return n

            start = loop.time()
            deadline = start + seconds
            counts = await asyncio.gather(*(client(c) for c in conns))
            return sum(counts) / (loop.time() - start)
        finally:
            for conn in conns:
                await conn.close()

    async def drain(self, n: int, receivers: int, batch: int = 100) -> float:
        """Messages/s to lease and delete ``n`` pending messages with ``receivers`` connections."""
        conns = [await self.connect() for _ in range(receivers)]
        acked = 0
        try:
            loop = asyncio.get_running_loop()

            async def receiver(conn: Connection) -> None:
                nonlocal acked
                idle_since = None
                while acked < n:
                    token, rows = await self.lease(conn, min(batch, n))
                    if not rows:
                        idle_since = idle_since or loop.time()
                        if loop.time() - idle_since > 10:
                            raise RuntimeError(f"{self.name}: {n - acked} of {n} messages never came")
                        await asyncio.sleep(0.001)  # the rest are leased by the other receivers
                        continue
                    idle_since = None
                    await self.delete(conn, token, rows)
                    acked += len(rows)

            start = loop.time()
            await asyncio.gather(*(receiver(c) for c in conns))
            return acked / (loop.time() - start)
        finally:
            for conn in conns:
                await conn.close()

    async def _consumer(self, conn: Connection, stop: asyncio.Event,
                        on_rows: Callable[[list[tuple[Any, ...]]], None],
                        *, scheduled: bool = False, batch: int = 100) -> None:
        """A waiting consumer on ONE connection that LISTENs: lease what is due; else wait
        for a notification, the next deliver_time, or the poll interval. Notifications that
        arrive during a query wait in psycopg's backlog, so none is missed."""
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        while not stop.is_set():
            token, rows = await self.lease(conn, batch)
            if rows:
                on_rows(rows)
                await self.delete(conn, token, rows)
                continue
            timeout = POLL
            if scheduled:
                cur = await conn.execute(self._next_due(), prepare=True)
                row = await cur.fetchone()
                if row is not None:
                    timeout = min(POLL, max(float(row[0]), MIN_WAIT))
            async for _ in conn.notifies(timeout=timeout, stop_after=1):
                break

    async def latency(self, rate: float, seconds: float, senders: int = 4) -> tuple[list[float], int]:
        """Seconds from just before each INSERT (1 message, its own commit, NOTIFY by trigger)
        until a LISTENing consumer leased it, at a steady ``rate`` for ``seconds``."""
        total = int(rate * seconds)
        sent_at: dict[int, float] = {}
        latencies: list[float] = []
        done = asyncio.Event()
        stop = asyncio.Event()

        def on_rows(rows: list[tuple[Any, ...]]) -> None:
            now = time.perf_counter()
            for row in rows:
                at = sent_at.get(int(row[1]))
                if at is not None:  # not a leftover of an earlier run
                    latencies.append(now - at)
            if len(latencies) >= total:
                done.set()

        conn = await self.connect()
        pool = psycopg_pool.AsyncConnectionPool(self.db_url, min_size=senders, max_size=senders, open=False,
                                                kwargs={"autocommit": True})
        await pool.open(wait=True)
        consumer = asyncio.create_task(self._consumer(conn, stop, on_rows))
        try:
            await asyncio.sleep(0.2)
            statement = self._insert_one()

            async def send(i: int) -> None:
                async with pool.connection() as c:
                    await c.execute(statement, {"payload": str(i)}, prepare=True)

            await _paced(rate, total, sent_at, send)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), 30)
        finally:
            stop.set()
            await consumer
            await pool.close()
            await conn.close()
        return latencies, total - len(latencies)

    async def lateness(self, n: int, spread: float, lead: float) -> list[float]:
        """Seconds each of ``n`` messages scheduled over ``spread`` seconds was leased after its deliver_time."""
        late: list[float] = []
        done = asyncio.Event()
        stop = asyncio.Event()

        def on_rows(rows: list[tuple[Any, ...]]) -> None:
            now = time.time()
            for row in rows:
                late.append(now - row[2].timestamp())
            if len(late) >= n:
                done.set()

        conn = await self.connect()
        consumer = asyncio.create_task(self._consumer(conn, stop, on_rows, scheduled=True))
        try:
            await asyncio.sleep(0.2)
            base = time.time() + lead
            times = [datetime.fromtimestamp(base + i * spread / n, timezone.utc) for i in range(n)]
            async with await self.connect() as sender:
                for start in range(0, n, 100):
                    chunk = times[start:start + 100]
                    await sender.execute(self._insert_at(), {"payloads": [PAYLOAD] * len(chunk), "times": chunk})
            await asyncio.wait_for(done.wait(), spread + lead + 30)
        finally:
            stop.set()
            await consumer
            await conn.close()
        return late

    async def churn(self, n: int, batch: int = 10_000) -> None:
        """Sends, leases and deletes ``n`` messages in big batches: a queue's history, quickly."""
        async with await self.connect() as conn:
            done = 0
            while done < n:
                size = min(batch, n - done)
                await conn.execute(self._insert_batch(), {"payloads": [PAYLOAD] * size})
                leased = 0
                while leased < size:
                    token, rows = await self.lease(conn, size - leased)
                    if not rows:
                        break
                    await self.delete(conn, token, rows)
                    leased += len(rows)
                done += size

    async def steady_churn(self, seconds: float, backlog: int = 2_000, batch: int = 100) -> list[float]:
        """Completion times of acks while one sender (``batch`` per INSERT) and one receiver
        run flat out for ``seconds``, the backlog capped."""
        sender, receiver = await self.connect(), await self.connect()
        acked_at: list[float] = []
        sent = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        payloads = {"payloads": [PAYLOAD] * batch}

        async def produce() -> None:
            nonlocal sent
            while loop.time() < deadline:
                if sent - len(acked_at) >= backlog:
                    await asyncio.sleep(0.001)
                    continue
                await sender.execute(self._insert_batch(), payloads, prepare=True)
                sent += batch

        async def consume() -> None:
            while loop.time() < deadline:
                token, rows = await self.lease(receiver, batch)
                if not rows:
                    await asyncio.sleep(0.001)
                    continue
                await self.delete(receiver, token, rows)
                now = time.perf_counter()
                acked_at.extend([now] * len(rows))

        try:
            await asyncio.gather(produce(), consume())
        finally:
            await sender.close()
            await receiver.close()
        return acked_at

    async def fanin(self, consumers: int, probes: int, settle: float) -> dict[str, Any]:
        """``consumers`` idle LISTENing consumers (one connection each, as plain SQL needs):
        connections used and wake-up latency of one INSERT."""
        arrived: asyncio.Queue[float] = asyncio.Queue()
        stop = asyncio.Event()

        def on_rows(rows: list[tuple[Any, ...]]) -> None:
            now = time.perf_counter()
            for _ in rows:
                arrived.put_nowait(now)

        conns = [await self.connect() for _ in range(consumers)]
        tasks = [asyncio.create_task(self._consumer(c, stop, on_rows)) for c in conns]
        latencies = []
        try:
            await asyncio.sleep(settle)
            async with await self.connect() as sender:
                for _ in range(probes):
                    start = time.perf_counter()
                    await sender.execute(self._insert_one(), {"payload": PAYLOAD})
                    latencies.append(await asyncio.wait_for(arrived.get(), 10) - start)
                    await asyncio.sleep(settle / 4)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            for c in conns:
                await c.close()
        return {"connections": consumers, "latencies": latencies}


async def _paced(rate: float, total: int, sent_at: dict[int, float],
                 send: Callable[[int], Awaitable[None]]) -> None:
    """Starts send(i) at t0 + i/rate (open loop: a slow send does not delay the next)."""
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.01
    tasks = set()
    for i in range(total):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        sent_at[i] = time.perf_counter()
        task = asyncio.create_task(send(i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)


paced = _paced
