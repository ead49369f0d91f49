"""Prometheus metrics end to end: a real server with its /metrics endpoint on a free
port, driven through gRPC, scraped over HTTP, and the exact figures checked."""

import asyncio
import dataclasses
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import psycopg
import pytest
from google.protobuf import struct_pb2
from prometheus_client.parser import text_string_to_metric_families

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.domain import queues
from spanq_server.scrape import endpoint
from spanq_server.cli import parse_config
from spanq_server.ground.config import Config
from spanq_server.server import Running, start

from ..helpers import (
    ack, create_queue, duration, error_of, key, open_stream, receive_some, renew, send, text_message, until,
)
from ..spawned import tcp_sockets

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def server_config(server_config: Config) -> Config:
    # Interval 0: every scrape renders afresh, so that each test sees its own last step.
    return dataclasses.replace(server_config, metrics_listen="127.0.0.1:0", metrics_interval=timedelta(0))


async def scrape(server: Running) -> Samples:
    """GET /metrics (from a thread: the collector needs the event loop this test runs on)."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"

    def get() -> str:
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            return response.read().decode()

    samples: Samples = {}
    for family in text_string_to_metric_families(await asyncio.to_thread(get)):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def rpc_count(samples: Samples, method: str, code: str) -> float | None:
    return value(samples, "spanq_rpc_duration_seconds_count", method=f"spanq.v1.QueueService/{method}", code=code)


async def eventually(server: Running, check, timeout: float = 5) -> Samples:
    """Scrapes until check(samples) holds (the server sees a stream open or close a moment later)."""
    async def holds() -> Samples | None:
        samples = await scrape(server)
        return samples if check(samples) else None

    return await until(holds, "the metrics to show it", timeout, 0.05)


# -- counters --------------------------------------------------------------------------


async def test_counts_sends_acks_nacks_and_redeliveries_per_queue(server, stub, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await create_queue(stub, "other", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", *(text_message(f"k{i}", "x") for i in range(3)), request_id="r1")
    await send(stub, "tasks", text_message("k3", "x"), text_message("k4", "x"))
    replay = await send(stub, "tasks", *(text_message(f"k{i}", "x") for i in range(3)), request_id="r1")
    assert replay.replayed  # a replay changes nothing, and counts nothing
    await send(stub, "other", text_message("o", "x"))

    got = {m.key.values[0].string_value: m for m in await receive_some(stub, "tasks", 5)}
    assert sorted(got) == ["k0", "k1", "k2", "k3", "k4"]
    await ack(stub, "tasks", got["k0"], got["k1"])
    # ignore_not_found: k0 is gone, k2 is acked: one more.
    ignored = await stub.Ack(queue_pb2.AckRequest(queue="tasks", ignore_not_found=True, acks=[
        queue_pb2.AckMessage(key=key("k0")), queue_pb2.AckMessage(key=key("k2"))]))
    assert [r.acked for r in ignored.results] == [False, True]
    code, _, _ = await error_of(ack(stub, "tasks", got["k0"]))
    assert code == grpc.StatusCode.OUT_OF_RANGE
    await renew(stub, "tasks", got["k3"].lease_token, seconds=0)  # a nack: redelivered at once

    again = await receive_some(stub, "tasks", 1)
    assert [(m.key.values[0].string_value, m.delivery_attempt) for m in again] == [("k3", 2)]
    await ack(stub, "tasks", again[0])
    clock.advance(timedelta(seconds=11))  # k4's 10 s lease lapses
    lapsed = await receive_some(stub, "tasks", 1)
    assert [(m.key.values[0].string_value, m.delivery_attempt) for m in lapsed] == [("k4", 2)]

    # The server learns a moment later that receive_some cancelled its streams.
    s = await eventually(server, lambda s: rpc_count(s, "Receive", "CANCELLED") == 3)
    assert value(s, "spanq_queue_messages_sent_total", queue="tasks") == 5
    assert value(s, "spanq_queue_messages_sent_total", queue="other") == 1
    assert value(s, "spanq_queue_messages_acked_total", queue="tasks") == 4  # k0, k1; k2; k3
    assert value(s, "spanq_queue_messages_acked_total", queue="other") is None
    assert value(s, "spanq_queue_nacks_total", queue="tasks") == 1
    assert value(s, "spanq_queue_messages_delivered_total", queue="tasks") == 7  # 5, k3 again, k4 again
    assert value(s, "spanq_queue_messages_redelivered_total", queue="tasks") == 2  # after a nack, after a lapse

    assert rpc_count(s, "CreateQueue", "OK") == 2
    assert rpc_count(s, "Send", "OK") == 4  # the replay too: it answered OK
    assert rpc_count(s, "Ack", "OK") == 3
    assert rpc_count(s, "Ack", "OUT_OF_RANGE") == 1
    assert rpc_count(s, "RenewLease", "OK") == 1
    assert rpc_count(s, "Receive", "CANCELLED") == 3
    assert rpc_count(s, "Send", "INVALID_ARGUMENT") is None
    # Every observation lands in the +Inf bucket, and the sum is a duration.
    inf = value(s, "spanq_rpc_duration_seconds_bucket", method="spanq.v1.QueueService/Ack", code="OK", le="+Inf")
    assert inf == 3
    assert 0 < value(s, "spanq_rpc_duration_seconds_sum", method="spanq.v1.QueueService/Ack", code="OK") < 30


async def test_a_failed_request_counts_nothing_but_its_status(server, stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("k", "x"))
    code, _, _ = await error_of(send(stub, "tasks", text_message("k", "x"), text_message("k2", "x")))
    assert code == grpc.StatusCode.ALREADY_EXISTS  # the whole request is refused: k2 not stored either
    code, _, _ = await error_of(receive_some(stub, "missing", 1))
    assert code == grpc.StatusCode.NOT_FOUND

    s = await scrape(server)
    assert value(s, "spanq_queue_messages_sent_total", queue="tasks") == 1
    assert rpc_count(s, "Send", "ALREADY_EXISTS") == 1
    assert rpc_count(s, "Receive", "NOT_FOUND") == 1
    assert value(s, "spanq_queue_buffered_ready_messages", queue="tasks") == 1


QUEUE_COUNTERS = ("spanq_queue_messages_sent_total", "spanq_queue_messages_acked_total", "spanq_queue_nacks_total",
                  "spanq_queue_messages_delivered_total", "spanq_queue_messages_redelivered_total")


def queue_series(samples: Samples, queue: str) -> dict[str, float]:
    """The per-queue counters that have a series for the queue."""
    return {name: v for name in QUEUE_COUNTERS if (v := value(samples, name, queue=queue)) is not None}


async def use_every_counter(stub, queue: str) -> None:
    """Sends three messages, receives them, acks one, nacks one and receives it again."""
    await send(stub, queue, *(text_message(f"k{i}", "x") for i in range(3)))
    got = await receive_some(stub, queue, 3)
    await ack(stub, queue, got[0])
    await renew(stub, queue, got[1].lease_token, seconds=0)
    assert [m.delivery_attempt for m in await receive_some(stub, queue, 1)] == [2]


async def test_a_dropped_queue_leaves_the_scrape_and_one_created_again_counts_from_zero(server, stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await create_queue(stub, "other", payload_type=queue_pb2.STRING)
    await use_every_counter(stub, "tasks")
    await send(stub, "other", text_message("o", "x"))
    s = await scrape(server)
    assert queue_series(s, "tasks") == dict(zip(QUEUE_COUNTERS, (3, 1, 1, 4, 1)))

    await stub.DropQueue(queue_pb2.DropQueueRequest(name="tasks"))
    s = await scrape(server)
    assert queue_series(s, "tasks") == {}
    assert queue_series(s, "other") == {"spanq_queue_messages_sent_total": 1}  # untouched

    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("new", "x"))
    s = await scrape(server)
    assert queue_series(s, "tasks") == {"spanq_queue_messages_sent_total": 1}


async def test_a_queue_dropped_through_the_spanner_front_end_leaves_the_scrape(server, stub, monkeypatch):
    pytest.importorskip("google.cloud.spanner")
    from ..spanner.test_spanner_client import make_database

    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.target)
    database = await asyncio.to_thread(make_database, server.target, [
        "CREATE QUEUE Jobs (Id STRING(MAX) NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)"])
    await send(stub, "d1_jobs", text_message("j", "x"))  # the database's namespace: d1_
    assert queue_series(await scrape(server), "d1_jobs") == {"spanq_queue_messages_sent_total": 1}
    await asyncio.to_thread(lambda: database.update_ddl(["DROP QUEUE Jobs"]).result(timeout=30))
    assert queue_series(await scrape(server), "d1_jobs") == {}


async def test_a_queue_dropped_by_another_server_leaves_the_scrape(server, stub, server_config, clock, monkeypatch):
    """This server learns of it when it reads the queue's definition again (the cache,
    CACHE_SECONDS, made 0 here), or at the latest at the next scrape, which reads the catalog."""
    monkeypatch.setattr(queues, "CACHE_SECONDS", 0.0)
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await create_queue(stub, "other", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("a", "x"), text_message("b", "x"))
    await send(stub, "other", text_message("o", "x"))
    replica = await start(dataclasses.replace(server_config, metrics_listen=""), clock=clock)
    try:
        async with grpc.aio.insecure_channel(replica.target) as channel:
            elsewhere = queue_pb2_grpc.QueueServiceStub(channel)
            await elsewhere.DropQueue(queue_pb2.DropQueueRequest(name="other"))
            await elsewhere.DropQueue(queue_pb2.DropQueueRequest(name="tasks"))
            await create_queue(elsewhere, "tasks", payload_type=queue_pb2.STRING)
    finally:
        await replica.stop(0)
    # tasks, created again, counts from zero here once this server reads its new definition.
    await send(stub, "tasks", text_message("c", "x"))
    s = await scrape(server)
    assert queue_series(s, "tasks") == {"spanq_queue_messages_sent_total": 1}
    # other, untouched here since: the scrape finds it gone from the catalog.
    assert queue_series(s, "other") == {}


# -- scrape-time gauges ------------------------------------------------------------------


async def test_ready_messages_and_oldest_age_follow_the_clock(server, stub, clock):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await create_queue(stub, "empty", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("a", "x"), text_message("b", "x"),
               text_message("later", "x", delay=duration(60)))

    s = await scrape(server)
    assert value(s, "spanq_queue_buffered_ready_messages", queue="tasks") == 2  # "later" is scheduled
    assert value(s, "spanq_queue_unacked_messages", queue="tasks") == 3
    assert 0 <= value(s, "spanq_queue_oldest_unacked_message_age_seconds", queue="tasks") < 5
    assert value(s, "spanq_queue_buffered_ready_messages", queue="empty") == 0
    assert value(s, "spanq_queue_unacked_messages", queue="empty") == 0
    assert value(s, "spanq_queue_oldest_unacked_message_age_seconds", queue="empty") == 0

    clock.advance(timedelta(seconds=100))
    s = await scrape(server)
    assert value(s, "spanq_queue_buffered_ready_messages", queue="tasks") == 3  # "later" is due now
    assert 100 <= value(s, "spanq_queue_oldest_unacked_message_age_seconds", queue="tasks") < 105

    leased = await receive_some(stub, "tasks", 2, max_batch_size=2, max_outstanding=2)  # leases no more
    s = await scrape(server)
    assert value(s, "spanq_queue_buffered_ready_messages", queue="tasks") == 1  # leased ones are not ready
    assert value(s, "spanq_queue_unacked_messages", queue="tasks") == 3  # but still unacknowledged
    assert 100 <= value(s, "spanq_queue_oldest_unacked_message_age_seconds", queue="tasks") < 105

    await ack(stub, "tasks", *leased)
    rest = await receive_some(stub, "tasks", 1)
    await ack(stub, "tasks", *rest)
    s = await scrape(server)
    assert value(s, "spanq_queue_buffered_ready_messages", queue="tasks") == 0
    assert value(s, "spanq_queue_unacked_messages", queue="tasks") == 0
    assert value(s, "spanq_queue_oldest_unacked_message_age_seconds", queue="tasks") == 0
    assert value(s, "spanq_metrics_queue_gauges_errors_total") == 0


async def test_counts_stop_at_the_cap(server, stub, monkeypatch):
    monkeypatch.setattr(endpoint, "COUNT_CAP", 3)
    await create_queue(stub, "deep", payload_type=queue_pb2.STRING)
    await send(stub, "deep", *(text_message(f"k{i}", "x") for i in range(5)))
    s = await scrape(server)
    assert value(s, "spanq_queue_buffered_ready_messages", queue="deep") == 3
    assert value(s, "spanq_queue_unacked_messages", queue="deep") == 3
    assert value(s, "spanq_queue_messages_sent_total", queue="deep") == 5  # counters have no cap


async def test_open_streams_gauge_goes_up_and_down(server, stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await create_queue(stub, "other", payload_type=queue_pb2.STRING)

    def streams(s: Samples, queue: str) -> float | None:
        return value(s, "spanq_receive_streams_open", queue=queue)

    s = await scrape(server)
    assert streams(s, "tasks") == 0 and streams(s, "other") == 0
    async with open_stream(stub, "tasks"), open_stream(stub, "other"):
        async with open_stream(stub, "tasks"):
            s = await eventually(server, lambda s: streams(s, "tasks") == 2 and streams(s, "other") == 1)
            assert (streams(s, "tasks"), streams(s, "other")) == (2, 1)
        s = await eventually(server, lambda s: streams(s, "tasks") == 1)
        assert (streams(s, "tasks"), streams(s, "other")) == (1, 1)
    s = await eventually(server, lambda s: streams(s, "tasks") == 0 and streams(s, "other") == 0)
    assert (streams(s, "tasks"), streams(s, "other")) == (0, 0)


async def test_database_pool_figures(server, stub):
    before = await scrape(server)
    assert value(before, "spanq_db_pool_max_connections") == server.config.pool_max_size
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("k", "x"))
    s = await scrape(server)
    assert value(s, "spanq_db_pool_requests_total") > value(before, "spanq_db_pool_requests_total")
    connections = value(s, "spanq_db_pool_connections")
    assert 1 <= connections <= server.config.pool_max_size
    assert 0 <= value(s, "spanq_db_pool_connections_idle") <= connections
    assert value(s, "spanq_db_pool_requests_waiting") == 0


# -- the endpoint ------------------------------------------------------------------------


def listening_ports() -> set[int]:
    """TCP ports this process listens on."""
    return {local for local, _, state in tcp_sockets() if state == "0A"}  # LISTEN


async def test_the_endpoint_listens_only_while_the_server_runs(server_config, clock):
    before = listening_ports()
    running = await start(server_config, clock=clock)
    try:
        assert running.metrics_port and running.metrics_port != running.port
        assert listening_ports() - before == {running.port, running.metrics_port}
        assert (await scrape(running))[("spanq_db_pool_requests_waiting", frozenset())] == 0
    finally:
        await running.stop(0)
    assert running.metrics_port not in listening_ports()
    with pytest.raises(urllib.error.URLError):
        await scrape(running)


@pytest.mark.parametrize("off", ["", "off", "OFF"])
async def test_metrics_off_binds_no_port(server_config, clock, off):
    before = listening_ports()
    running = await start(dataclasses.replace(server_config, metrics_listen=off), clock=clock)
    try:
        assert running.metrics_port is None
        assert listening_ports() - before == {running.port}  # only gRPC's
        async with grpc.aio.insecure_channel(running.target) as channel:  # and it serves
            await create_queue(queue_pb2_grpc.QueueServiceStub(channel), "q")
    finally:
        await running.stop(0)


async def test_refuses_plain_http_metrics_off_loopback(database_url):
    with pytest.raises(ValueError, match="metrics"):
        await start(Config(database_url=database_url, listen="127.0.0.1:0", metrics_listen="0.0.0.0:0"))
    with pytest.raises(ValueError, match="HOST:PORT"):
        await start(Config(database_url=database_url, listen="127.0.0.1:0", metrics_listen="9464"))


def test_cli_flag_and_environment():
    assert parse_config(["serve"], {}).metrics_listen == "localhost:9464"
    assert parse_config(["serve"], {"SPANQ_METRICS_LISTEN": "off"}).metrics_listen == "off"
    assert parse_config(["serve", "--metrics-listen", "127.0.0.1:9999"],
                        {"SPANQ_METRICS_LISTEN": "off"}).metrics_listen == "127.0.0.1:9999"
    assert endpoint.parse_listen("[::1]:9464") == ("::1", 9464)
    assert endpoint.parse_listen(" off ") is None
    with pytest.raises(SystemExit):
        parse_config(["serve", "--metrics-listen", "localhost"], {})


async def test_a_slow_database_leaves_out_the_queue_gauges_not_the_scrape(server, stub, database_url, monkeypatch):
    monkeypatch.setattr(endpoint, "QUERY_TIMEOUT", 0.5)
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    await send(stub, "tasks", text_message("k", "x"))
    with psycopg.connect(database_url) as blocker:
        blocker.execute("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")  # held until the block ends
        s = await scrape(server)
        assert value(s, "spanq_queue_buffered_ready_messages", queue="tasks") is None
        assert value(s, "spanq_metrics_queue_gauges_errors_total") == 1
        assert value(s, "spanq_queue_messages_sent_total", queue="tasks") == 1
        assert value(s, "spanq_db_pool_requests_waiting") == 0
    s = await scrape(server)
    assert value(s, "spanq_queue_buffered_ready_messages", queue="tasks") == 1
    assert value(s, "spanq_metrics_queue_gauges_errors_total") == 1


async def test_a_scrape_storm_costs_one_render_per_interval(server_config, clock):
    """40 scrapes at once, then more: the queue gauges' statement runs once per
    interval, and the scrapes in between get the same copy (prometheus_client's own
    endpoint ran it for every scrape, each in a thread of its own)."""
    interval = 3.0
    running = await start(dataclasses.replace(server_config, metrics_interval=timedelta(seconds=interval)),
                          clock=clock)
    try:
        queries = 0
        queue_gauges = running.store.queue_gauges

        async def counted(**kwargs):
            nonlocal queries
            queries += 1
            return await queue_gauges(**kwargs)

        running.store.queue_gauges = counted
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
            started = asyncio.get_running_loop().time()
            storm = await asyncio.gather(*(scrape(running) for _ in range(40)))
            await send(stub, "tasks", text_message("k", "x"))
            after_send = await scrape(running)
            if asyncio.get_running_loop().time() - started < interval:
                assert queries == 1
                assert all(s == storm[0] for s in storm)
                assert value(after_send, "spanq_queue_buffered_ready_messages", queue="tasks") == 0  # the copy
                assert value(after_send, "spanq_queue_messages_sent_total", queue="tasks") is None
            fresh = await eventually(running, lambda s: value(s, "spanq_queue_buffered_ready_messages",
                                                              queue="tasks") == 1, timeout=interval * 5)
            assert value(fresh, "spanq_queue_messages_sent_total", queue="tasks") == 1
            assert queries == 2
    finally:
        await running.stop(0)



async def test_the_limits_effect_is_in_the_metrics(server, stub, sql):
    keys = [queue_pb2.KeyColumn(name="tenant", type=queue_pb2.STRING),
            queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64)]
    await create_queue(stub, "keyed", key_columns=keys, payload_type=queue_pb2.STRING, max_in_flight_per_key=1)
    await create_queue(stub, "paced", payload_type=queue_pb2.STRING, rate_limit=0.01, rate_limit_burst=2)
    await send(stub, "keyed", *[queue_pb2.SendMessage(key=key("a", n), payload=struct_pb2.Value(string_value="p"))
                                      for n in range(3)])
    await send(stub, "paced", *[text_message(f"m{n}", "p") for n in range(5)])
    assert len(sql.execute("SELECT * FROM spanq.receive_keyed(10)").fetchall()) == 1
    assert len(sql.execute("SELECT * FROM spanq.receive_paced(10)").fetchall()) == 2  # the burst
    samples = await scrape(server)
    assert value(samples, "spanq_queue_key_limited_messages", queue="keyed") == 2
    assert value(samples, "spanq_queue_key_limited_messages", queue="paced") == 0
    assert value(samples, "spanq_queue_rate_limited_messages_total", queue="paced") == 3
    assert value(samples, "spanq_queue_rate_limited_messages_total", queue="keyed") == 0


async def test_messages_held_behind_their_ordering_key_are_in_the_metrics(server, stub, sql):
    await create_queue(stub, "ordered", payload_type=queue_pb2.STRING, enable_message_ordering=True)
    await create_queue(stub, "plain", payload_type=queue_pb2.STRING)
    await send(stub, "ordered", *[text_message(f"a{n}", "p", ordering_key="a") for n in range(3)],
               text_message("free", "p"))
    await send(stub, "plain", text_message("m", "p"))
    samples = await scrape(server)
    assert value(samples, "spanq_queue_ordering_held_messages", queue="ordered") == 2
    assert value(samples, "spanq_queue_ordering_held_messages", queue="plain") == 0
    # The key's head acked, the next one is its head and no longer held.
    sql.execute("DELETE FROM ordered WHERE id = 'a0'")
    sql.commit()
    await eventually(server, lambda s: value(s, "spanq_queue_ordering_held_messages", queue="ordered") == 1)
