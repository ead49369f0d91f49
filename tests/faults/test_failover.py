"""A PostgreSQL failover under load, as an operator runs one: a primary with a
synchronous streaming standby (made by the test), spanq on a multi-host URL,
the primary killed (immediate stop) mid-workload and the standby promoted after
a gap. Nothing confirmed is lost, nothing is processed twice while its lease
holds, and spanq serves again within a second of the promotion, however long
the gap. `make chaos` (SPANQ_CHAOS_SCALE > 1) also prints the outage clients
see against the gap, for 3, 20 and 70 s."""

import asyncio
import collections
import dataclasses
import logging
import os
import time
import uuid

import grpc
import psycopg
import pytest

import spanq
import spanq.aio

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.ground.config import Config
from spanq_server.server import start

from ..clusters import ReplicatedPair
from ..helpers import create_queue, duration, until, value
from ..lease_history import assert_safe
from ..workload import CHANNEL_OPTIONS, Workload, remaining_rows

SCALE = int(os.environ.get("SPANQ_CHAOS_SCALE", "1"))
SERVING_AGAIN_S = 1.0
"""The promise: spanq serves again within this long of the database being writable."""


@pytest.fixture
def pair():  # type: ignore[no-untyped-def]
    pair = ReplicatedPair()
    yield pair
    pair.close()


def config(url: str) -> Config:
    return Config(database_url=url, listen="127.0.0.1:0", pool_min_size=1, metrics_listen="")


@dataclasses.dataclass
class Outage:
    gap_s: float
    """From the kill to the promoted standby accepting writes."""
    seen_s: float
    """From the kill to the first send a client had confirmed after the promotion."""
    after_promotion_s: float
    """From the promotion to that send."""

    def __str__(self) -> str:
        return (f"kill->promote {self.gap_s:.1f} s: clients saw an outage of {self.seen_s:.2f} s, "
                f"serving {self.after_promotion_s:.2f} s after the promotion")


class Prober:
    """Sends to its own queue every few milliseconds, each attempt short, and keeps the
    time of each confirmed send: the server is serving when a send goes through."""

    def __init__(self, stub: queue_pb2_grpc.QueueServiceStub) -> None:
        self._stub = stub
        self.confirmed: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="prober")

    async def _run(self) -> None:
        while True:
            request = queue_pb2.SendRequest(queue="probe", request_id=str(uuid.uuid4()),
                                            messages=[queue_pb2.SendMessage(payload=value("p"))])
            try:
                await self._stub.Send(request, timeout=0.25)
                self.confirmed.append(time.monotonic())
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.01)  # the probe's pace: it times the outage to ~10 ms

    def first_after(self, t: float) -> float | None:
        return next((c for c in self.confirmed if c >= t), None)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def send_with_the_sdk(target: str, failover: "asyncio.Future[None]", *, deadline_s: float) -> list[str]:
    """Sends keyed messages with the SDK, one at a time, until the failover is over and
    10 more went through; returns the keys confirmed (none may raise)."""
    keys: list[str] = []
    async with spanq.aio.Client(target, retry=spanq.Retry(deadline=deadline_s)) as client:
        await client.create_queue("sdk", key_columns=[("id", "STRING")], payload_type="STRING")
        after = 0
        while after < 10:
            if failover.done():
                after += 1
            key = f"k{len(keys)}"
            await client.send("sdk", "x", key=key)
            keys.append(key)
            await asyncio.sleep(0.02)  # a steady trickle of sends through the failover
    return keys


async def fail_over(pair: ReplicatedPair, *, gap_s: float, lease_s: float, messages: int) -> Outage:
    """Runs the workload on the pair, kills the primary once a third of the sends are
    confirmed, promotes the standby gap_s later; checks the history; returns the outage."""
    url = pair.url(target_session_attrs="read-write", connect_timeout="3")
    running = await start(config(url))
    work = Workload([running.target], "work", lease_s=lease_s, deadline_s=gap_s + 60)
    prober = Prober(work.stubs[0])
    outage: Outage | None = None
    sdk: "asyncio.Future[list[str]] | None" = None
    try:
        await create_queue(work.stubs[0], "work", payload_type=queue_pb2.JSON, lease_duration=duration(lease_s))
        await create_queue(work.stubs[0], "probe", payload_type=queue_pb2.STRING)
        prober.start()

        async def kill_then_promote() -> None:
            nonlocal outage
            await until(lambda: len(work.history.confirmed) >= messages // 3, "a third of the sends", 60, 0.01)
            killed = time.monotonic()
            await asyncio.to_thread(pair.primary.kill)
            await asyncio.sleep(max(0.0, gap_s - (time.monotonic() - killed)))  # the test: the outage's length
            await asyncio.to_thread(pair.standby.promote)
            promoted = time.monotonic()
            first = await until(lambda: prober.first_after(promoted), "a probe served after the promotion",
                                gap_s + 30, 0.01)
            outage = Outage(promoted - killed, first - killed, first - promoted)

        failover = asyncio.ensure_future(kill_then_promote())
        sdk = asyncio.ensure_future(send_with_the_sdk(running.target, failover, deadline_s=gap_s + 30))
        await work.run(producers=2, per_producer=messages // 2, consumers=2, pace_s=0.005,
                       during=failover, timeout_s=gap_s + 2 * lease_s + 90)
        assert outage is not None
        # The SDK rode through it within its deadline: every send confirmed, stored once.
        sdk_keys = await sdk
        with psycopg.connect(pair.standby.url(), autocommit=True) as sql:
            stored = [row[0] for row in sql.execute("SELECT id FROM sdk")]
        assert sorted(stored) == sorted(sdk_keys) and len(sdk_keys) > 20
        print(outage)
        assert work.history.faults_seen > 0  # the failover was felt
        with psycopg.connect(pair.standby.url(), autocommit=True) as sql:
            remaining = remaining_rows(sql, "work")
        report = work.history.check(remaining, lease_s)
        print(report.summary())
        assert report.confirmed_sends == messages and report.ok, report
        assert_safe(work.history.leases, [k for k, _ in remaining])
        # Nothing processed twice while its lease held: each message reached a consumer once.
        twice = [k for k, n in collections.Counter(d.key for d in work.history.deliveries).items() if n > 1]
        assert not twice, f"delivered twice: {twice}"
        return outage
    finally:
        if sdk is not None and not sdk.done():
            sdk.cancel()
            await asyncio.gather(sdk, return_exceptions=True)
        await prober.stop()
        await work.close()
        await running.stop(0)


async def test_failover_to_a_synchronous_standby_loses_nothing_and_serves_within_a_second(pair):
    outage = await fail_over(pair, gap_s=1.5, lease_s=5, messages=300)
    assert outage.after_promotion_s < SERVING_AGAIN_S, outage


async def test_a_longer_outage_is_not_followed_by_a_longer_recovery(pair):
    """Before the pool's backoff was capped, recovery waited for its next attempt: 8 s
    of outage were followed by ~7 s more (attempts at +1, +3, +7, +15 s)."""
    outage = await fail_over(pair, gap_s=8, lease_s=12, messages=300)
    assert outage.after_promotion_s < SERVING_AGAIN_S, outage


@pytest.mark.skipif(SCALE == 1, reason="`make chaos` (SPANQ_CHAOS_SCALE > 1) measures the long outages")
@pytest.mark.parametrize("gap_s", [3, 20, 70])
@pytest.mark.timeout(900)
async def test_outage_figures(pair, gap_s):
    outage = await fail_over(pair, gap_s=gap_s, lease_s=gap_s + 10, messages=600)
    assert outage.after_promotion_s < SERVING_AGAIN_S, outage


# -- a standby taken for a primary --------------------------------------------------


async def test_a_standby_taken_for_the_primary_answers_unavailable_not_internal(pair, caplog):
    """Without target_session_attrs=read-write, the pool reconnects to the first host that
    answers: the standby, still in recovery. Its refusals are UNAVAILABLE (the SDK retries),
    the refused connections are replaced, and once promoted it serves."""
    caplog.set_level(logging.WARNING, logger="spanq_server.store")
    running = await start(config(pair.url(connect_timeout="3")))
    try:
        assert any("target_session_attrs=read-write" in r.getMessage() for r in caplog.records), caplog.text
        async with grpc.aio.insecure_channel(running.target, options=CHANNEL_OPTIONS) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "work", payload_type=queue_pb2.STRING)
            await asyncio.to_thread(pair.primary.kill)
            codes: collections.Counter[str] = collections.Counter()
            refusals = 0
            opened_before = running.store.pool_stats().get("connections_num", 0)
            async with asyncio.timeout(20):
                while refusals < 5:
                    request = queue_pb2.SendRequest(queue="work", request_id=str(uuid.uuid4()),
                                                    messages=[queue_pb2.SendMessage(payload=value("x"))])
                    try:
                        await stub.Send(request, timeout=5)
                        codes["OK"] += 1
                    except grpc.aio.AioRpcError as exc:
                        codes[exc.code().name] += 1
                        refusals += "standby" in (exc.details() or "")
                    await asyncio.sleep(0.01)  # a client that sends on, a little apart
            assert "INTERNAL" not in codes and "OK" not in codes, codes
            assert codes["UNAVAILABLE"] >= refusals == 5, codes
            # Each refused connection was closed and replaced by a new one.
            assert running.store.pool_stats().get("connections_num", 0) - opened_before >= refusals
            # A stream's lease is a write too: refused the same way.
            call = stub.Receive(queue_pb2.ReceiveRequest(queue="work", max_duration=duration(5)))
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                async for _ in call:
                    pass
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE, raised.value
            await asyncio.to_thread(pair.standby.promote)
            promoted = time.monotonic()
            async with asyncio.timeout(10):
                while True:
                    request = queue_pb2.SendRequest(queue="work", request_id=str(uuid.uuid4()),
                                                    messages=[queue_pb2.SendMessage(payload=value("x"))])
                    try:
                        await stub.Send(request, timeout=0.25)
                        break
                    except grpc.aio.AioRpcError:
                        await asyncio.sleep(0.01)  # a client that retries at once: the time measured
            assert time.monotonic() - promoted < SERVING_AGAIN_S
    finally:
        await running.stop(0)


# -- units: no database --------------------------------------------------------------


def test_a_multi_host_url_without_target_session_attrs_is_warned_about(monkeypatch):
    from spanq_server.store import url_warnings

    monkeypatch.delenv("PGTARGETSESSIONATTRS", raising=False)
    [warning] = url_warnings("postgresql://u@db1:5432,db2:5432/app?connect_timeout=3")
    assert "target_session_attrs=read-write" in warning and "db1,db2" in warning
    assert url_warnings("postgresql://u@db1,db2/app?target_session_attrs=read-write") == []
    assert url_warnings("host=db1,db2 dbname=app target_session_attrs=primary") == []
    assert url_warnings("postgresql://u@db1:5432/app") == []
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "read-write")
    assert url_warnings("postgresql://u@db1,db2/app") == []


def test_the_pools_reconnect_backoff_is_capped_and_never_gives_up():
    import math

    from spanq_server.store import _Backoff

    attempt = _Backoff(timeout=math.inf, max_delay=0.5)
    delays = []
    for step in range(40):
        attempt.update_delay(now=step * 1000.0)
        delays.append(attempt.delay)
        assert not attempt.time_to_give_up(step * 1000.0)
    assert 0.05 < delays[0] <= 0.11 and max(delays) <= 0.5 and min(delays[5:]) >= 0.4, delays


def test_read_only_refusals_are_told_from_other_errors():
    from psycopg import errors as pg_errors

    from spanq_server.ground import errors
    from spanq_server.edge import status
    from spanq_server.store import refused_as_read_only

    assert refused_as_read_only(pg_errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"))
    assert refused_as_read_only(errors.DatabaseReadOnly("x"))
    assert not refused_as_read_only(pg_errors.UniqueViolation("duplicate key"))
    assert not refused_as_read_only(errors.StoreUnavailable("x"))
    assert status.code_and_reason(errors.DatabaseReadOnly("x")) == (grpc.StatusCode.UNAVAILABLE,
                                                                    "DATABASE_UNAVAILABLE")


def test_failover_and_pooler_flags():
    from datetime import timedelta

    from spanq_server.cli import parse_config

    config = parse_config(["serve", "--pooler", "transaction", "--deaf-poll-interval", "0.1",
                           "--reconnect-max-delay", "0.2"], {"SPANQ_LISTENER_URL": "postgresql://db/app"})
    assert config.listener_url == "postgresql://db/app"
    assert config.pooler == "transaction" and config.deaf_poll_interval == timedelta(seconds=0.1)
    assert config.reconnect_max_delay == timedelta(seconds=0.2)
    assert parse_config(["serve"], {"SPANQ_POOLER": "session"}).pooler == "session"
    for bad in (["--pooler", "statement"], ["--deaf-poll-interval", "0"], ["--reconnect-max-delay", "-1"]):
        with pytest.raises(SystemExit):
            parse_config(["serve", *bad], {})


# -- a listener gone deaf without an error ---------------------------------------------


async def test_a_listener_that_stops_hearing_without_an_error_reconnects(database_url, server_config, clock,
                                                                          monkeypatch):
    """A network that drops what PostgreSQL sends, with no error on either side: the
    listener would believe it listens for ever. Its next probe goes unheard, and it
    reconnects."""
    from spanq_server.domain.receive import wakeups

    from ..pgproxy import PgProxy

    monkeypatch.setattr(wakeups, "PROBE_INTERVAL", 0.5)
    proxy = PgProxy(database_url)
    await proxy.start()
    running = await start(dataclasses.replace(server_config, listener_url=proxy.url), clock=clock)
    try:
        await asyncio.wait_for(running.wakeups.probed.wait(), 10)
        assert running.wakeups.listening
        proxy.mute_all()
        async with asyncio.timeout(10):
            # The unheard probe ends the connection.
            await until(lambda: not running.wakeups.connected.is_set(), "the muted listener to drop", 10, 0.01)
            await running.wakeups.connected.wait()  # a new one, through the proxy again
            running.wakeups.probed.clear()
            await running.wakeups.probed.wait()
        assert running.wakeups.listening
    finally:
        await running.stop(0)
        await proxy.stop()
