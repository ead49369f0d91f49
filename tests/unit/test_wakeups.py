"""wakeups.Relay alone: which waiting stream a wake reaches, and that none is lost between a
stream's look for work and its wait (each wait is bounded; none may time out where a wake is due)."""

import asyncio

import pytest

from spanq_server.domain.receive.wakeups import Relay

SOON = 1.0
"""Seconds: a woken waiter returns long before this; one that is not woken waits it out."""


async def waits_out(relay: Relay) -> bool:
    try:
        await asyncio.wait_for(relay.wait(), SOON)
    except asyncio.TimeoutError:
        return True
    return False


async def test_a_stream_that_waits_after_the_timekeeper_ended_is_woken_to_keep_time() -> None:
    relay = Relay()
    assert relay.keep_time()  # stream A waits for the queue's timers
    assert not relay.keep_time()  # stream B looked: A keeps time, so B will wait for wakes only
    relay.release_time()  # A ends before B registers its wait ...
    relay.vacate()
    assert not await waits_out(relay)  # ... and B is woken at once: it loops and keeps time
    assert relay.keep_time()


async def test_a_timekeeper_that_ends_wakes_a_registered_waiter() -> None:
    relay = Relay()
    assert relay.keep_time()
    waiter = asyncio.ensure_future(relay.wait())
    await asyncio.sleep(0)  # registered
    relay.release_time()
    relay.vacate()
    await asyncio.wait_for(waiter, SOON)


async def test_a_stream_that_ends_while_another_keeps_time_wakes_nobody() -> None:
    relay = Relay()
    assert relay.keep_time()
    relay.vacate()  # a stream that did not keep time ended: the timekeeper is still there
    assert await waits_out(relay)


async def test_one_wake_reaches_one_waiter() -> None:
    relay = Relay()
    first, second = asyncio.ensure_future(relay.wait()), asyncio.ensure_future(relay.wait())
    await asyncio.sleep(0)
    relay.wake()
    done, pending = await asyncio.wait([first, second], timeout=SOON)
    assert (done, pending) == ({first}, {second})
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
