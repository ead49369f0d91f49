"""Cell "limits": what per-key concurrency and a rate limit cost a lease, and how close
the delivered rate stays to a rate limit.

Cost: three queues keyed (tenant, n), one unlimited, one with max_in_flight_per_key
(1000 over 100 tenants: it never binds, so only its bookkeeping shows), one with a
rate limit of a million a second (the same); each drained by ``spanq.receive_q(100)``
in psql and a DELETE of what it leased, a batch of each in turn (the order rotating),
so that load from elsewhere on the machine falls on all three alike. A fourth queue has
a key limit of 1 with a busy key's messages ahead of the others (one of them leased):
each lease reads past them. The baseline column is the unlimited queue's lease in the
same run: the ratio is the price.

Rate: a queue with a rate limit (its default burst, a second's worth) holding the burst
and ``seconds`` of the limit's messages, drained by 4 Receive streams on 2 servers (this
run's and one more), each response acked; every lease's start as the server stamped it.
Over the span T from the first lease to the last the bucket gives at most burst + rate *
T, so the delivered rate is (leases - burst) / T; the error is its distance from the
limit, in percent (a stream that does not take its tokens in time shows as a rate below
the limit; the bucket never lets one above it).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import timedelta, timezone
from typing import TYPE_CHECKING, Any

import grpc
import psycopg
from google.protobuf import duration_pb2

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from . import env
from .stats import Figure

if TYPE_CHECKING:
    from .cells import Context, Row

BATCH = 100
TENANTS = 100
KEYS = [queue_pb2.KeyColumn(name="tenant", type=queue_pb2.STRING), queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64)]
VARIANTS: dict[str, dict[str, Any]] = {
    "unlimited": {},
    "key limit": {"max_in_flight_per_key": 1000},
    "rate limit": {"rate_limit": 1e6, "rate_limit_burst": 1_000_000},
    "busy key ahead": {"max_in_flight_per_key": 1},
}
BUSY = 1000
"""Messages of one key ahead of the others in the "busy key ahead" queue."""
LEASE = 30.0
"""Seconds: the rate part's leases (none lapses while it runs)."""


def _name(variant: str) -> str:
    return "bq_lim_" + variant.replace(" ", "_")


async def cell_limits(ctx: Context) -> list[Row]:
    from .cells import Row  # noqa: F811  (cells.py imports this module to register the cell)

    s = ctx.sizes
    n = s.drain_n
    rows: list[Row] = []
    async with grpc.aio.insecure_channel(ctx.target) as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)
        for variant, limits in VARIANTS.items():
            await _drop(stub, _name(variant))
            await stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
                name=_name(variant), key_columns=KEYS, payload_type=queue_pb2.STRING, **limits)))
        try:
            figures = {v: Figure() for v in VARIANTS}
            for run in range(s.drain_runs):
                for variant, ms in (await asyncio.to_thread(_cost_run, ctx.db_url, n, run)).items():
                    figures[variant].add(ms)
            for variant in list(VARIANTS)[1:]:
                what = (f"a key limit of 1 with {BUSY:,} due messages of one busy key ahead" if variant == "busy key ahead"
                        else f"a {variant} that does not bind")
                rows.append(Row("limits", f"psql receive_q({BATCH}) of {n:,}, {what}", "ms/lease", figures[variant],
                                figures["unlimited"], compare=True,
                                note="baseline column: the unlimited queue's lease, in the same run (lower is better)"))
            ctx.log("  limits cost: " + "  ".join(f"{v} {f.median:.2f} ms" for v, f in figures.items()))
        finally:
            for variant in VARIANTS:
                await _drop(stub, _name(variant))
        rows += await _rate_rows(ctx, stub)
    return rows


def _cost_run(db_url: str, n: int, run: int) -> dict[str, float]:
    """One run: each queue preloaded, then drained side by side; the median ms per lease of each."""
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with psycopg.connect(db_url, autocommit=True) as conn:
        for variant in VARIANTS:
            table = _name(variant)
            conn.execute(f"TRUNCATE {table}")
            if variant == "busy key ahead":  # the busy key's messages first, one of them leased
                conn.execute(f"INSERT INTO {table} (tenant, n, payload, deliver_time) SELECT 'busy', g, 'p', "
                             f"now() - interval '1 hour' FROM generate_series(1, {BUSY}) AS g")
                conn.execute(f"SELECT * FROM spanq.receive_{table}(1, interval '1 hour')").fetchall()
            conn.execute(f"INSERT INTO {table} (tenant, n, payload, deliver_time) "
                         f"SELECT 't' || (g %% {TENANTS}), g, 'p', now() - (%s - g) * interval '1 microsecond' "
                         f"FROM generate_series(1, %s) AS g", (n, n))
            conn.execute(f"VACUUM (ANALYZE) {table}")
        names = list(VARIANTS)
        for i in range(n // BATCH):
            shift = (i + run) % len(names)
            for variant in names[shift:] + names[:shift]:
                table = _name(variant)
                t0 = time.perf_counter()
                leased = conn.execute(f"SELECT tenant, n FROM spanq.receive_{table}(%s)", (BATCH,)).fetchall()
                times[variant].append((time.perf_counter() - t0) * 1000)
                conn.execute(f"DELETE FROM {table} AS m USING unnest(%s::text[], %s::bigint[]) AS a(tenant, n) "
                             "WHERE (m.tenant, m.n) = (a.tenant, a.n)",
                             ([t for t, _ in leased], [k for _, k in leased]))
    return {v: statistics.median(ts) for v, ts in times.items()}


async def _rate_rows(ctx: Context, stub: queue_pb2_grpc.QueueServiceStub) -> list[Row]:
    from .cells import Row  # noqa: F811

    s = ctx.sizes
    rate = 200.0
    seconds = 3.0 if s.drain_n <= 2_000 else 10.0
    burst = int(rate)  # the default: a second's worth
    total = burst + int(rate * seconds)
    name = "bq_lim_paced"
    delivered, errors = Figure(), Figure()
    async with env.spanq_server(ctx.db_url, in_process=ctx.in_process, log_name="server-limits.log") as other:
        async with grpc.aio.insecure_channel(other.target) as channel:
            stubs = [stub, queue_pb2_grpc.QueueServiceStub(channel)]
            for _ in range(s.drain_runs):
                await _drop(stub, name)
                await stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
                    name=name, key_columns=KEYS, payload_type=queue_pb2.STRING, rate_limit=rate)))
                with psycopg.connect(ctx.db_url, autocommit=True) as conn:
                    conn.execute(f"INSERT INTO {name} (tenant, n, payload) SELECT 't', g, 'p' "
                                 "FROM generate_series(1, %s) AS g", (total,))
                starts = await _drain_paced(stubs, name, total, seconds * 3 + 10)
                span = (starts[-1] - starts[0]).total_seconds()
                got = (len(starts) - burst) / span if span > 0 else float("nan")
                delivered.add(got)
                errors.add(abs(got - rate) / rate * 100)
            await _drop(stub, name)
    ctx.log(f"  limits rate: {delivered.median:.1f} leases/s against {rate:g} (error {errors.median:.2f}%)")
    return [
        Row("limits", f"rate limit {rate:g}/s (burst {burst}), 4 Receive streams on 2 servers, {total:,} messages",
            "leases/s", delivered, target=f"{rate:g}", compare=False,
            note="the delivered rate: (leases - burst) over the span from the first lease to the last"),
        Row("limits", f"its error against the limit of {rate:g}/s", "%", errors, compare=False,
            note="|delivered - limit| / limit"),
    ]


async def _drain_paced(stubs: list[queue_pb2_grpc.QueueServiceStub], name: str, total: int,
                       timeout: float) -> list[Any]:
    """4 streams (2 per stub) that ack each response; every lease's start, sorted."""
    starts: list[Any] = []
    done = asyncio.Event()

    async def stream(stub: queue_pb2_grpc.QueueServiceStub) -> None:
        call = stub.Receive(queue_pb2.ReceiveRequest(queue=name, max_batch_size=10,
                                                     lease_duration=duration_pb2.Duration(seconds=int(LEASE))))
        try:
            async for response in call:
                for m in response.messages:
                    starts.append(m.lease_expiration_time.ToDatetime(timezone.utc) - timedelta(seconds=LEASE))
                await stub.Ack(queue_pb2.AckRequest(queue=name, acks=[
                    queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token) for m in response.messages]))
                if len(starts) >= total:
                    done.set()
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise
        finally:
            call.cancel()

    tasks = [asyncio.ensure_future(stream(stubs[i % 2])) for i in range(4)]
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except asyncio.TimeoutError:
        pass  # what was delivered by then is measured: slow streams show as a lower rate
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return sorted(starts)


async def _drop(stub: queue_pb2_grpc.QueueServiceStub, name: str) -> None:
    try:
        await stub.DropQueue(queue_pb2.DropQueueRequest(name=name))
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
