"""spanq behind Debian's PgBouncer in transaction mode (started by the test): it
finds the pooler, runs without server-side prepared statements (which would
land on other server connections), finds that its listener cannot hear (LISTEN
"succeeds" on a server connection handed to another client at once), says so,
and polls each queue every deaf_poll_interval instead."""

import asyncio
import dataclasses
import logging
import time
from datetime import timedelta

import grpc

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start

from ..helpers import ack, create_queue, open_stream, send, text_message
from ..lease_history import assert_safe
from ..pgbouncer import PgBouncer
from ..workload import Workload, remaining_rows

POLL_S = 0.25
"""The documented default of --deaf-poll-interval."""


async def test_behind_pgbouncer_in_transaction_mode_nothing_is_lost_or_duplicated_and_streams_poll(
        pgbouncer, server_config, clock, sql, caplog, waiting):
    caplog.set_level(logging.INFO, logger="spanq_server")
    running = await start(dataclasses.replace(server_config, database_url=pgbouncer.url), clock=clock)
    work = Workload([running.target], "work")
    try:
        assert running.config.deaf_poll_interval == timedelta(seconds=POLL_S)
        assert running.store.transaction_pooled, "the pooler was not found"
        await asyncio.wait_for(running.wakeups.probed.wait(), 10)
        assert not running.wakeups.listening
        assert running.metrics.registry.get_sample_value("spanq_wakeup_listener_listening") == 0
        assert "does not hear its own probe notification" in caplog.text

        await create_queue(work.stubs[0], "work", payload_type=queue_pb2.JSON)
        # Far more than 5 uses of each statement: psycopg would have prepared them.
        await work.run(producers=3, per_producer=100, consumers=3, pace_s=0.002, timeout_s=90)
        remaining = remaining_rows(sql, "work")
        report = work.history.check(remaining, work.lease_s)
        print(report.summary())
        assert report.confirmed_sends == 300 and report.ok, report
        assert_safe(work.history.leases, [k for k, _ in remaining])
        assert report.faults_seen == 0  # no error at all: none of "prepared statement does not exist"
        assert "prepared statement" not in pgbouncer.log_text()

        # A message inserted by SQL, which no wake-up of this server's announces, reaches a
        # stream that waits within the poll interval.
        await create_queue(work.stubs[0], "tasks", payload_type=queue_pb2.STRING)
        async with open_stream(work.stubs[0], "tasks") as stream:
            waiting.clear()
            await send(work.stubs[0], "tasks", text_message("warm", "x"))
            await ack(work.stubs[0], "tasks", await stream.next())
            delays = []
            for i in range(5):
                # The stream is waiting again (it was heard so since its last delivery).
                await waiting.wait(match=lambda v: v.queue == "tasks", what="the stream to wait again")
                waiting.clear()
                started = time.monotonic()
                await asyncio.to_thread(sql.execute, f"INSERT INTO tasks (id, payload) VALUES ('sql-{i}', 'hi')")
                await ack(work.stubs[0], "tasks", await stream.next(timeout=5))
                delays.append(time.monotonic() - started)
        print("wake-up delays behind PgBouncer:", " ".join(f"{d:.3f}" for d in delays))
        assert max(delays) < POLL_S + 0.5, delays  # the interval, and a loaded machine's slack
    finally:
        await work.close()
        await running.stop(0)


async def test_behind_pgbouncer_a_direct_listener_url_hears_and_streams_need_not_poll(
        pgbouncer, database_url, server_config, clock, sql, waiting):
    running = await start(dataclasses.replace(server_config, database_url=pgbouncer.url, listener_url=database_url,
                                              deaf_poll_interval=timedelta(seconds=5)), clock=clock)
    try:
        assert running.store.transaction_pooled
        await asyncio.wait_for(running.wakeups.probed.wait(), 10)
        assert running.wakeups.listening
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
            async with open_stream(stub, "tasks") as stream:
                await waiting.wait(match=lambda v: v.queue == "tasks", what="the stream to wait")
                started = time.monotonic()
                await asyncio.to_thread(sql.execute, "INSERT INTO tasks (id, payload) VALUES ('sql', 'hi')")
                await stream.next(timeout=5)
                assert time.monotonic() - started < 1.0  # a notification, not the 5 s poll
    finally:
        await running.stop(0)


async def test_pooler_flag_session_keeps_prepared_statements_and_direct_connections_are_not_taken_for_a_pooler(
        pgbouncer_installed, database_url, server_config, clock):
    bouncer = PgBouncer(database_url, "session")
    try:
        running = await start(dataclasses.replace(server_config, database_url=bouncer.url, pooler="session"),
                              clock=clock)
        try:
            assert not running.store.transaction_pooled
            await asyncio.wait_for(running.wakeups.probed.wait(), 10)
            assert running.wakeups.listening  # a session pooler keeps LISTEN's server connection
        finally:
            await running.stop(0)
    finally:
        bouncer.stop()
    direct = await start(server_config, clock=clock)
    try:
        assert not direct.store.transaction_pooled
        await asyncio.wait_for(direct.wakeups.probed.wait(), 10)
        assert direct.wakeups.listening
        assert direct.metrics.registry.get_sample_value("spanq_wakeup_listener_listening") == 1
    finally:
        await direct.stop(0)
