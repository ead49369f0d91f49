"""``spanq serve --workers 2``: a real supervisor process with two real workers on
one port, against a real PostgreSQL. Each test maps its connections to the worker
serving each (from /proc), so that a send, a stream and an ack are known to cross
processes."""

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator

import grpc
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.cli import parse_config
from spanq_server.ground.config import Config, ConfigError
from spanq_server.server import start
from spanq_server.workers import connections_per_worker, reserve

from ..helpers import ack, create_queue, open_stream, send, text_message, until, until_sync
from ..spawned import (channels_on_each, children, free_port, listens_on, spawn_server, wait_children,
                      wait_serving_sync)


@dataclasses.dataclass
class Workers:
    process: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    pids: list[int]

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


def wait_listening(pids: list[int], port: int, timeout_s: float = 30) -> None:
    until_sync(lambda: all(listens_on(pid, port) for pid in pids), f"every one of {pids} to listen on {port}",
               timeout_s, 0.05)


@pytest.fixture
def workers(database_url: str) -> Iterator[Workers]:
    port, metrics_port = free_port(), free_port()
    process = spawn_server(database_url, port, "--workers", "2", "--metrics-listen", f"127.0.0.1:{metrics_port}",
                           "--metrics-interval", "0")
    pids: list[int] = []
    files = None
    try:
        wait_serving_sync(f"127.0.0.1:{port}")
        pids = wait_children(process.pid, 2)
        files = metrics_folder(pids[0])
        wait_listening(pids, port)
        yield Workers(process, port, metrics_port, pids)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(60)
        # A supervisor that was killed could neither stop its workers nor remove their metrics files.
        for pid in pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
        if files is not None:
            shutil.rmtree(files, ignore_errors=True)


def metrics_folder(pid: int) -> str | None:
    """Where a worker writes its metrics (the supervisor made the folder and removes it as it stops)."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        for entry in f.read().split(b"\0"):
            if entry.startswith(b"PROMETHEUS_MULTIPROC_DIR="):
                return entry.split(b"=", 1)[1].decode()
    return None


async def stubs_on_each(workers: Workers) -> tuple[list[grpc.aio.Channel], list[queue_pb2_grpc.QueueServiceStub]]:
    """A channel served by each worker, in the order of workers.pids."""
    on = await channels_on_each(workers.target, workers.pids)
    channels = [on[pid] for pid in workers.pids]
    return channels, [queue_pb2_grpc.QueueServiceStub(c) for c in channels]


async def test_sends_streams_and_acks_cross_the_two_workers(workers, database_url):
    channels, (a, b) = await stubs_on_each(workers)
    try:
        await create_queue(a, "tasks", payload_type=queue_pb2.STRING)
        async with open_stream(a, "tasks") as stream:  # served by worker 0
            await send(b, "tasks", text_message("k1", "x"))  # by worker 1: its NOTIFY wakes worker 0's stream
            first = await stream.next(timeout=2)  # sooner than the 5 s fallback poll
        async with open_stream(b, "tasks") as stream:
            await send(a, "tasks", *(text_message(f"m{i}", "x") for i in range(10)))
            rest = await stream.take(10, timeout=2)
        # Leases granted by one worker, acked through the other.
        acked = await ack(b, "tasks", first)
        acked_too = await ack(a, "tasks", *rest)
        assert [r.acked for r in [*acked.results, *acked_too.results]] == [True] * 11
        with psycopg.connect(database_url) as conn:
            assert conn.execute('SELECT count(*) FROM "tasks"').fetchone() == (0,)
    finally:
        for channel in channels:
            await channel.close()


async def test_a_killed_worker_is_started_again(workers):
    victim, survivor = workers.pids
    os.kill(victim, signal.SIGKILL)
    now = await asyncio.to_thread(wait_children, workers.process.pid, 2, other_than={victim})
    assert survivor in now
    wait_listening(now, workers.port)
    channels, stubs = await stubs_on_each(dataclasses.replace(workers, pids=now))
    try:
        await create_queue(stubs[0], "tasks", payload_type=queue_pb2.STRING)
        for i, stub in enumerate(stubs):  # the new worker serves, and the survivor still does
            assert len((await send(stub, "tasks", text_message(f"k{i}", "x"))).keys) == 1
    finally:
        for channel in channels:
            await channel.close()


async def test_sigterm_ends_every_worker_gracefully(workers):
    channels, stubs = await stubs_on_each(workers)
    try:
        await create_queue(stubs[0], "tasks", payload_type=queue_pb2.STRING)
        calls = [stub.Receive(queue_pb2.ReceiveRequest(queue="tasks")) for stub in stubs]
        readers = [asyncio.ensure_future(call.read()) for call in calls]
        # The streams are open: the workers count them (a subprocess's signals cannot be heard).
        await until(lambda: streams_open(workers.metrics_port, "tasks", 2), "both workers' streams", 10, 0.1)
        workers.process.send_signal(signal.SIGTERM)
        for reader in readers:  # each worker ended its stream as a graceful shutdown does
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await asyncio.wait_for(reader, 30)
            assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
        assert await asyncio.to_thread(workers.process.wait, 60) == 0
    finally:
        for channel in channels:
            await channel.close()
    for pid in workers.pids:
        assert not os.path.exists(f"/proc/{pid}")
    with socket.socket() as probe:  # the port is free again (SO_REUSEADDR: past the closed connections' TIME_WAIT)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", workers.port))


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def test_workers_shut_down_when_the_supervisor_is_killed(workers):
    workers.process.kill()  # SIGKILL: it cannot tell them
    workers.process.wait()
    # Each sees its pipe to the supervisor close.
    await until(lambda: all(gone(pid) for pid in workers.pids), "the orphaned workers to stop", 30, 0.05)


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def streams_open(port: int, queue: str, n: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The workers' metrics if they count ``n`` open streams of ``queue`` (sampled once a second), else {}."""
    samples = await asyncio.to_thread(scrape, port)
    return samples if samples.get(("spanq_receive_streams_open", frozenset({("queue", queue)}))) == n else {}


async def test_one_endpoint_sums_the_workers_metrics(workers):
    channels, (a, b) = await stubs_on_each(workers)
    try:
        await create_queue(a, "tasks", payload_type=queue_pb2.STRING)
        for i in range(3):
            await send(a, "tasks", text_message(f"a{i}", "x"))
        for i in range(2):
            await send(b, "tasks", text_message(f"b{i}", "x"))
        async with open_stream(a, "tasks", max_outstanding=1), open_stream(b, "tasks", max_outstanding=1):
            s = await until(lambda: streams_open(workers.metrics_port, "tasks", 2), "the streams of both workers",
                            10, 0.1)
        await create_queue(b, "other", payload_type=queue_pb2.STRING)
        await send(b, "other", text_message("o", "x"))
        await a.DropQueue(queue_pb2.DropQueueRequest(name="other"))
        # The files keep its series; the endpoint leaves out those of queues not in the catalog.
        dropped = await asyncio.to_thread(scrape, workers.metrics_port)
        assert not [key for key in dropped if ("queue", "other") in key[1]]
    finally:
        for channel in channels:
            await channel.close()
    tasks = frozenset({("queue", "tasks")})
    assert s[("spanq_queue_messages_sent_total", tasks)] == 5
    assert s[("spanq_rpc_duration_seconds_count",
              frozenset({("method", "spanq.v1.QueueService/Send"), ("code", "OK")}))] == 5
    # The queue gauges are computed once (by the supervisor), not once per worker.
    assert s[("spanq_queue_unacked_messages", tasks)] == 5
    # Both pools: --max-connections 10 less the supervisor's one, 5 and 4, less a listener each.
    assert s[("spanq_db_pool_max_connections", frozenset())] == 7


async def test_port_0_is_chosen_once_for_every_worker(database_url):
    process = spawn_server(database_url, 0, "--workers", "2", "--log-level", "INFO", stderr=subprocess.PIPE)
    try:
        port = None
        assert process.stderr is not None
        for line in process.stderr:  # ends at EOF if the server dies
            if b"with 2 workers" in line:
                port = int(line.split(b"(port ")[1].split(b")")[0])
                break
        assert port
        pids = children(process.pid)
        wait_listening(pids, port)
        assert len(pids) == 2
        wait_serving_sync(f"127.0.0.1:{port}")
    finally:
        process.terminate()
        process.communicate(timeout=60)


async def test_a_worker_that_cannot_start_ends_the_server(database_url, tmp_path):
    missing = str(tmp_path / "missing.pem")
    process = spawn_server(database_url, free_port(), "--workers", "2", "--tls-cert", missing, "--tls-key", missing,
                           stderr=subprocess.PIPE)
    _, err = await asyncio.to_thread(process.communicate, timeout=60)
    assert process.returncode == 1
    assert b"exited while starting" in err


async def test_a_plain_server_refuses_a_port_another_serves(database_url):
    """Only --workers children share a port: gRPC's default SO_REUSEPORT let a second
    server on the same port start and take half the connections."""
    config = Config(database_url=database_url, listen="127.0.0.1:0", metrics_listen="")
    first = await start(config)
    try:
        with pytest.raises(ConfigError, match=f"cannot serve on {first.target}"):
            await start(dataclasses.replace(config, listen=first.target))
    finally:
        await first.stop(0)


def test_connections_are_split_and_too_few_are_refused():
    config = parse_config(["serve", "--workers", "3"], {})
    assert connections_per_worker(config) == [3, 3, 3]  # 10 less the supervisor's one
    assert connections_per_worker(dataclasses.replace(config, metrics_listen="off")) == [4, 3, 3]
    assert parse_config(["serve"], {"SPANQ_WORKERS": "2"}).workers == 2
    with pytest.raises(SystemExit):
        parse_config(["serve", "--workers", "5"], {})  # 9 for 5 workers, 2 each needed
    with pytest.raises(SystemExit):
        parse_config(["serve", "--workers", "0"], {})


def test_the_port_is_reserved_once_and_a_taken_one_refused():
    listen, held = reserve("127.0.0.1:0")
    try:
        port = int(listen.rsplit(":", 1)[1])
        assert port > 0
        with socket.socket() as other, pytest.raises(OSError):  # no plain socket can bind it meanwhile...
            other.bind(("127.0.0.1", port))
        with socket.socket() as past:  # ...while a previous server's TIME_WAIT does not stand in its way
            past.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            past.bind(("127.0.0.1", 0))
            past.listen()
            past_port = past.getsockname()[1]
            with socket.create_connection(("127.0.0.1", past_port)) as client:
                accepted, _ = past.accept()
                accepted.close()  # the server side closes first: its end waits in TIME_WAIT
                client.recv(1)
        _, also_held = reserve(f"127.0.0.1:{past_port}")
        for sock in also_held:
            sock.close()
    finally:
        for sock in held:
            sock.close()
    with socket.socket() as holder:  # ...and a port another process listens on is refused
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(ConfigError, match="cannot serve on 127.0.0.1:.*give --listen"):
            reserve(f"127.0.0.1:{holder.getsockname()[1]}")


def consumers_of(ui_port: int, queue: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/api/queues/{queue}/consumers", timeout=5) as answer:
        return json.loads(answer.read())


async def test_the_dashboard_lists_the_consumers_of_every_worker(database_url):
    """One worker serves the dashboard; a stream on the other is on its consumers list too
    (the stream roster in the database), and leaves it when it closes."""
    port, ui_port = free_port(), free_port()
    process = spawn_server(database_url, port, "--workers", "2", "--ui-listen", f"127.0.0.1:{ui_port}")
    channels: list[grpc.aio.Channel] = []
    try:
        wait_serving_sync(f"127.0.0.1:{port}")
        pids = wait_children(process.pid, 2)
        wait_listening(pids, port)
        on = await channels_on_each(f"127.0.0.1:{port}", pids)
        channels = [on[pid] for pid in pids]
        a, b = (queue_pb2_grpc.QueueServiceStub(c) for c in channels)
        await create_queue(a, "tasks", payload_type=queue_pb2.STRING)
        async with open_stream(a, "tasks", max_outstanding=7), open_stream(b, "tasks", max_outstanding=9):
            listed = await until(lambda: c if len((c := consumers_of(ui_port, "tasks"))["streams"]) == 2 else None,
                                 "both workers' streams on the list", timeout=15, interval=0.2)
            by_pid = {int(s["server"].rsplit("(pid ", 1)[1].rstrip(")")): s["max_outstanding"]
                      for s in listed["streams"]}
            assert by_pid == {pids[0]: 7, pids[1]: 9}
            assert len(listed["servers"]) == 2
        await until(lambda: consumers_of(ui_port, "tasks")["streams"] == [], "both streams off the list",
                    timeout=15, interval=0.2)
    finally:
        for channel in channels:
            await channel.close()
        process.terminate()
        process.wait(60)
