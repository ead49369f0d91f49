"""The SDK bounds the unary calls in flight on one channel, so that thousands of
concurrent calls wait their turn in the SDK instead of failing in grpcio."""

import asyncio

import pytest

import spanq
import spanq.aio


async def test_five_thousand_concurrent_sends_on_one_client_all_succeed(server, sql):
    async with spanq.aio.Client(server.target) as client:
        await client.create_queue("burst", payload_type="STRING")
        # Unbounded, grpcio failed 1-45% of these with CANCELLED before the server saw them.
        keys = await asyncio.gather(*(client.send("burst", str(i)) for i in range(5000)))
    assert len(set(keys)) == 5000
    assert sql.execute("SELECT count(*) FROM burst").fetchone()[0] == 5000


async def test_calls_past_the_bound_wait_and_then_run(server):
    async with spanq.aio.Client(server.target, max_concurrent_calls=2) as client:
        await client.create_queue("narrow", payload_type="STRING")
        in_flight = peak = 0
        send = client._stub().Send
        inner = send._method

        async def counting(request, **kwargs):
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                return await inner(request, **kwargs)
            finally:
                in_flight -= 1

        send._method = counting
        await asyncio.gather(*(client.send("narrow", str(i)) for i in range(50)))
        assert peak == 2


def test_the_bound_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        spanq.aio.Client("localhost:1", max_concurrent_calls=0)
    with pytest.raises(ValueError, match="at least 1"):
        spanq.Client("localhost:1", max_concurrent_calls=0)
