"""A client that fails fast and says so: a target that cannot be a server fails at
once; a stopped server fails a call within connect_timeout, naming the target; a
subscriber warns while it cannot connect and when it reconnects, with the attempt
count; leaving its `with` block is prompt when nothing is in flight."""

import asyncio
import dataclasses
import logging
import time

import pytest

import spanq
import spanq.aio
from spanq_server.server import start

from .spawned import free_port


@pytest.mark.parametrize("target, says", [
    ("http://localhost:50051", "is a URL; a spanq client connects to host:port (e.g. 'localhost:50051')"),
    ("https://spanq.example.com:443/", "is a URL"),
    ("localhost", "is not host:port"),
    ("localhost:99999", "port 99999"),
    ("localhost:0", "port 0"),
    ("local host:50051", "is not host:port"),
    ("", "is not host:port"),
])
def test_a_target_that_cannot_be_a_server_fails_at_once(target, says):
    started = time.monotonic()
    for make in (spanq.Client, spanq.aio.Client):
        with pytest.raises(spanq.InvalidArgument, match="target") as raised:
            make(target)
        assert says in str(raised.value)
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("target", ["localhost:50051", "127.0.0.1:1", "[::1]:50051", "dns:///localhost:50051",
                                    "unix:/tmp/spanq.sock", "ipv4:127.0.0.1:50051"])
def test_targets_grpc_understands_are_taken(target):
    spanq.aio.Client(target)


async def test_a_stopped_server_fails_within_the_connect_timeout():
    target = f"127.0.0.1:{free_port()}"
    async with spanq.aio.Client(target, connect_timeout=1) as client:
        for call in (client.get_queue("q"), client.send("q", "x"), client.list_queues()):
            started = time.monotonic()
            with pytest.raises(spanq.Unavailable, match=f"cannot connect to the spanq server at {target} within 1s"):
                await call
            assert time.monotonic() - started < 3
    with pytest.raises(spanq.InvalidArgument, match="connect_timeout"):
        spanq.aio.Client(target, connect_timeout=0)


def test_the_blocking_client_fails_within_its_connect_timeout_too():
    target = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with spanq.Client(target, connect_timeout=1) as client, pytest.raises(spanq.Unavailable, match=target):
        client.stats("q")
    assert time.monotonic() - started < 4


async def poll(condition, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_subscriber_warns_until_it_reaches_the_server_and_leaves_promptly(server_config, clock, caplog):
    caplog.set_level(logging.WARNING, logger="spanq")
    port = free_port()
    target = f"127.0.0.1:{port}"
    got: list[spanq.Message] = []
    running = await start(dataclasses.replace(server_config, listen=target), clock=clock)
    async with spanq.aio.Client(target) as admin:
        await admin.create_queue("jobs", payload_type="STRING")
        await admin.send("jobs", "hello")
    await running.stop(0)
    async with spanq.aio.Client(target, connect_timeout=0.5) as client:
        subscription = client.subscribe("jobs", got.append)
        await poll(lambda: "attempt 2" in caplog.text)
        assert f"jobs: cannot reach the spanq server at {target} (attempt 1: cannot connect" in caplog.text

        running = await start(dataclasses.replace(server_config, listen=target), clock=clock)
        try:
            await poll(lambda: len(got) == 1)
            assert got[0].payload == "hello"
            assert f"jobs: reached the spanq server at {target} after" in caplog.text

            # The server goes away and comes back: warned, then reconnected, with the attempts.
            await running.stop(0)
            await poll(lambda: "jobs: cannot reach" in caplog.text.split("reached the spanq server")[-1])
            running = await start(dataclasses.replace(server_config, listen=target), clock=clock)
            await poll(lambda: "reconnected to the spanq server at" in caplog.text)
            assert "failed attempt(s)" in caplog.text.split("reconnected to the spanq server at")[-1]
        finally:
            await running.stop(0)

        # Down again, nothing in flight: cancelling is prompt.
        started = time.monotonic()
        subscription.cancel()
        await subscription.result()
        assert time.monotonic() - started < 2


async def test_leaving_subscribe_on_a_down_server_is_prompt():
    target = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    async with spanq.aio.Client(target) as client:  # the default connect_timeout: 5 s
        async with client.subscribe("jobs", lambda m: None):
            await asyncio.sleep(0.3)
    assert time.monotonic() - started < 2


def test_leaving_a_blocking_subscription_on_a_down_server_is_prompt():
    target = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with spanq.Client(target) as client:
        with client.subscribe("jobs", lambda m: None):
            time.sleep(0.3)
    assert time.monotonic() - started < 2
