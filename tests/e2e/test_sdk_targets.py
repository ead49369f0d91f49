"""The SDK given several servers as its target (docs/sdk.md, Several servers):
pick-first uses the first until it goes away, then carries on with the next;
round-robin spreads calls over all of them."""

import asyncio
import time

import spanq.aio
from spanq_server.server import start


def sent(running, queue: str) -> float:  # type: ignore[no-untyped-def]
    return running.metrics.registry.get_sample_value("spanq_queue_messages_sent_total", {"queue": queue}) or 0.0


async def test_pick_first_carries_on_with_the_next_server_when_the_first_goes_away(server_config, clock):
    first, second = await start(server_config, clock=clock), await start(server_config, clock=clock)
    try:
        async with spanq.aio.Client(f"ipv4:127.0.0.1:{first.port},127.0.0.1:{second.port}") as client:
            await client.create_queue("tasks", payload_type="STRING")
            for i in range(10):
                await client.send("tasks", f"m{i}")
            assert (sent(first, "tasks"), sent(second, "tasks")) == (10, 0)  # the first, while it serves
            await first.stop(0)
            started = time.monotonic()
            await client.send("tasks", "after")
            carried_on = time.monotonic() - started
            for i in range(5):
                await client.send("tasks", f"n{i}")
            assert sent(second, "tasks") == 6
            assert carried_on < 2.0, carried_on
            print(f"pick_first carried on with the second server after {carried_on:.3f} s")
    finally:
        await first.stop(0)
        await second.stop(0)


async def test_round_robin_spreads_calls_over_every_server(server_config, clock):
    servers = [await start(server_config, clock=clock) for _ in range(2)]
    target = "ipv4:" + ",".join(f"127.0.0.1:{s.port}" for s in servers)
    try:
        async with spanq.aio.Client(target, options=[("grpc.lb_policy_name", "round_robin")]) as client:
            await client.create_queue("tasks", payload_type="STRING")
            # round_robin connects to every address; wait for both before counting.
            async with asyncio.timeout(10):
                while min(sent(s, "tasks") for s in servers) == 0:
                    await client.send("tasks", "warm")
            before = [sent(s, "tasks") for s in servers]
            for i in range(20):
                await client.send("tasks", f"m{i}")
            assert [sent(s, "tasks") - b for s, b in zip(servers, before)] == [10, 10]
            await servers[0].stop(0)
            for i in range(5):  # the one left takes them all, without an error
                await client.send("tasks", f"n{i}")
            assert sent(servers[1], "tasks") - before[1] == 15
    finally:
        for s in servers:
            await s.stop(0)
