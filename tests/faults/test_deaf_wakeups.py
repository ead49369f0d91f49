"""Behind a transaction-mode PgBouncer the listener is deaf and streams are woken every
--deaf-poll-interval instead (docs/operations.md, Connection poolers). That bound holds for
every wake-up, also while the listener probes whether it hears again: a deaf listener's probe
waits PROBE_TIMEOUT (2 s) for a notification that never comes, and it once polled nobody
meanwhile (a wake-up of 1.9 s, issue 20)."""

import asyncio
import dataclasses
import time

import grpc

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.domain.receive import wakeups
from spanq_server.server import start

from ..helpers import ack, create_queue, open_stream

POLL_S = 0.25
"""The documented default of --deaf-poll-interval."""
MARGIN_S = 0.5
"""A loaded machine's slack (two cores shared by many test runs)."""
SENDS = 30


async def test_behind_a_deaf_listener_every_wake_up_is_within_the_poll_interval_also_during_probes(
        pgbouncer, server_config, clock, sql, waiting, monkeypatch):  # type: ignore[no-untyped-def]
    # Probes back to back (one every 0.5 s after the last ended, each 2 s long while deaf):
    # most sends below land in one, as one in a minute's would by chance.
    monkeypatch.setattr(wakeups, "PROBE_INTERVAL", 0.5)
    running = await start(dataclasses.replace(server_config, database_url=pgbouncer.url), clock=clock)
    try:
        await asyncio.wait_for(running.wakeups.probed.wait(), 10)
        assert not running.wakeups.listening
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
            async with open_stream(stub, "tasks") as stream:
                delays = []
                for i in range(SENDS):
                    await waiting.wait(match=lambda v: v.queue == "tasks", what="the stream to wait")
                    waiting.clear()
                    # By SQL: no wake-up of this server's announces it, only the poll finds it.
                    started = time.monotonic()
                    await asyncio.to_thread(sql.execute, f"INSERT INTO tasks (id, payload) VALUES ('sql-{i}', 'hi')")
                    await ack(stub, "tasks", await stream.next(timeout=10))
                    delays.append(time.monotonic() - started)
    finally:
        await running.stop(0)
    print(f"\n{SENDS} wake-ups behind a deaf listener: worst {max(delays):.3f} s, "
          f"mean {sum(delays) / len(delays):.3f} s")
    assert max(delays) < POLL_S + MARGIN_S, sorted(delays)[-5:]
