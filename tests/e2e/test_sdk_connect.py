"""The SDK fails fast and says so: a target that cannot be a server is refused
at once, a call to a server that is not there fails within connect_timeout
naming the target, a subscriber warns while it cannot connect and when it
connects again, and leaving a subscription or a client returns promptly."""

import asyncio
import dataclasses
import logging
import time

import pytest

import spanq
import spanq.aio
from spanq_server.server import start

from ..helpers import until, until_sync
from ..spawned import free_port


@pytest.mark.parametrize("target, says", [
    ("http://localhost:50051", "give 'localhost:50051', without http://"),
    ("https://spanq.example.com", "without https://"),
    ("localhost:0", "no valid port ('0')"),
    ("localhost:70000", "no valid port ('70000')"),
    ("localhost:grpc", "no valid port ('grpc')"),
    ("localhost:", "no valid port ('')"),
    ("", "is empty"),
    (" localhost:50051", "surrounding spaces"),
])
def test_a_target_that_cannot_be_a_server_is_refused_at_once(target, says):
    started = time.monotonic()
    with pytest.raises(spanq.InvalidArgument) as raised:
        spanq.Client(target)
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        spanq.aio.Client(target)
    assert time.monotonic() - started < 1
    assert repr(target) in str(raised.value) and says in str(raised.value)


@pytest.mark.parametrize("target", ["localhost:50051", "127.0.0.1:1", "[::1]:50051", "dns:///localhost:50051",
                                    "unix:/tmp/spanq.sock", "unix:///tmp/spanq.sock", "spanq.example.com"])
def test_grpc_targets_are_accepted(target):
    assert spanq.aio.Client(target).target == target


async def test_a_call_to_a_stopped_server_fails_within_connect_timeout_naming_the_target():
    target = f"127.0.0.1:{free_port()}"  # nothing listens there
    async with spanq.aio.Client(target, connect_timeout=1) as client:
        for call in (client.get_queue("jobs"), client.list_queues(),
                     client.ack("jobs", ("k",)), client.receive("jobs", timeout=30)):
            started = time.monotonic()
            with pytest.raises(spanq.Unavailable) as raised:
                await call
            assert 0.9 < time.monotonic() - started < 3, call
            assert not isinstance(raised.value, spanq.CommitOutcomeUnknown)  # nothing was sent
            assert f"cannot connect to {target} within 1s" in str(raised.value)
            assert raised.value.metadata == {"target": target}


def test_the_blocking_client_fails_within_its_connect_timeout_too():
    target = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with spanq.Client(target, connect_timeout=1) as client, pytest.raises(spanq.Unavailable, match=target):
        client.stats("q")  # an operator call takes the same way as the others
    assert time.monotonic() - started < 4


def test_the_default_connect_timeout_is_a_few_seconds():
    with spanq.Client(f"127.0.0.1:{free_port()}") as client:
        started = time.monotonic()
        with pytest.raises(spanq.Unavailable, match="within 5s"):
            client.list_queues()
        assert 4.5 < time.monotonic() - started < 8


def test_connect_timeout_must_be_positive():
    with pytest.raises(ValueError, match="connect_timeout must be more than 0 seconds"):
        spanq.Client("localhost:50051", connect_timeout=0)


def warnings_of(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "spanq._subscriber" and r.levelno == logging.WARNING and text in r.getMessage()]


async def test_a_subscriber_warns_while_it_cannot_connect_and_when_it_connects(server, server_config, clock, caplog):
    caplog.set_level(logging.WARNING, logger="spanq._subscriber")
    async with spanq.aio.Client(server.target) as admin:
        await admin.create_queue("jobs", payload_type="STRING")
    port = free_port()
    target = f"127.0.0.1:{port}"
    got: list[str] = []
    async with spanq.aio.Client(target, connect_timeout=0.3) as client:
        subscription = client.subscribe("jobs", lambda m: got.append(m.payload))
        await until(lambda: warnings_of(caplog, "(attempt 2)"), "the second warning", 20, 0.05)
        [first, *_] = warnings_of(caplog, "cannot connect")
        assert first.startswith(f"jobs: cannot connect to {target} (attempt 1): cannot connect to {target} within 0.3s")
        # The same database served on the port the subscriber is trying.
        late = await start(dataclasses.replace(server_config, listen=target), clock=clock)
        try:
            await until(lambda: warnings_of(caplog, "again after"), "the reconnect warning", 20, 0.05)
            failed = len(warnings_of(caplog, "cannot connect"))
            assert warnings_of(caplog, "again after") == [
                f"jobs: connected to {target} again after {failed} failed attempt(s)"]
            await client.send("jobs", "hello")
            await until(lambda: got == ["hello"], "the message", 20, 0.05)
            subscription.cancel()
            await subscription.result()
        finally:
            await late.stop(0)


def test_leaving_a_subscription_and_a_client_to_a_down_server_is_prompt(caplog):
    caplog.set_level(logging.WARNING, logger="spanq._subscriber")
    client = spanq.Client(f"127.0.0.1:{free_port()}")  # connect_timeout 5s: each attempt is cut short
    with client.subscribe("jobs", lambda m: None):
        started = time.monotonic()  # in the first connect attempt: leaving must not wait for it
    assert time.monotonic() - started < 1
    with client.subscribe("jobs", lambda m: None):
        until_sync(lambda: warnings_of(caplog, "(attempt 1)"), "the first warning", 20, 0.05)
        started = time.monotonic()  # now between attempts
    assert time.monotonic() - started < 1
    started = time.monotonic()
    client.close()
    assert time.monotonic() - started < 1


async def test_a_subscribers_ack_waits_out_an_outage_longer_than_connect_timeout(server_config, clock, sql, caplog):
    caplog.set_level(logging.DEBUG, logger="spanq._retry")
    target = f"127.0.0.1:{free_port()}"
    config = dataclasses.replace(server_config, listen=target)
    first = await start(config, clock=clock)
    release = asyncio.Event()
    async with spanq.aio.Client(target, connect_timeout=0.3) as client:
        await client.create_queue("jobs", payload_type="STRING", lease_duration=60)
        await client.send("jobs", "hello")

        async def handle(message: spanq.Message) -> None:
            await release.wait()  # returning acks it: once the server is gone

        subscription = client.subscribe("jobs", handle)
        try:
            await until(lambda: subscription.in_hand == 1, "one message in hand", 20, 0.05)
            await first.stop(0)
            release.set()
            await until(lambda: any("ack on jobs" in r.getMessage() and "cannot connect" in r.getMessage()
                                    for r in caplog.records), "the ack's warning", 20, 0.05)
            second = await start(config, clock=clock)
            try:
                await until(lambda: sql.execute("SELECT count(*) FROM jobs").fetchone() == (0,), "the ack to commit", 20, 0.05)
            finally:
                subscription.cancel()
                await subscription.result()
                await second.stop(0)
        finally:
            await first.stop(0)
