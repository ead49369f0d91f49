"""A part of the suite again, against one real ``spanq serve --workers 2``: delivery
and concurrency tests whose stub sends each call on the next of two connections,
one served by each worker, so that a test's sends, streams and acks alternate
between the two processes (a stream on one, the ack of its message on the other)."""

import itertools
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from ..helpers import until
from ..spawned import channels_on_each, free_port, spawn_server, wait_children, wait_serving_sync
from .test_concurrency import (test_concurrent_senders_and_one_stream,  # noqa: F401
                               test_many_acking_streams_receive_every_message_once)
from .test_delivery import (test_duplicate_key_send_stores_nothing,  # noqa: F401
                            test_generated_keys_are_distinct_and_stable,
                            test_max_outstanding_counts_only_this_streams_leases,
                            test_one_send_arrives_as_one_batch_with_last_batch_message,
                            test_receive_unknown_queue_is_not_found, test_renew_of_an_acked_message_returns_no_token,
                            test_send_to_unknown_queue_is_not_found)
from .test_workers import streams_open


@pytest.fixture(scope="module")
def database_url(pg_url: str, template_db: str) -> Iterator[str]:
    """One database for the module's one server; each test drops its queues after it."""
    name = f"spanq_w_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield make_conninfo(pg_url, dbname=name)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def workers(database_url: str, metrics_port: int) -> Iterator[tuple[str, list[int]]]:
    port = free_port()
    process = spawn_server(database_url, port, "--workers", "2", "--metrics-listen", f"127.0.0.1:{metrics_port}",
                           "--metrics-interval", "0")
    try:
        wait_serving_sync(f"127.0.0.1:{port}")
        yield f"127.0.0.1:{port}", wait_children(process.pid, 2)
    finally:
        process.terminate()
        process.wait(60)


@pytest.fixture
def await_idle_streams(workers: tuple[str, list[int]], metrics_port: int) -> Any:
    """The workers' signals cannot be heard from here: until their metrics count the streams open."""
    async def wait(queue: str, n: int = 1, timeout: float = 10) -> None:
        await until(lambda: streams_open(metrics_port, queue, n), f"{n} open streams of {queue!r}", timeout, 0.1)

    return wait


class RoundRobin:
    """A QueueServiceStub that sends each call on the next of its stubs."""

    def __init__(self, stubs: list[queue_pb2_grpc.QueueServiceStub]) -> None:
        self._next = itertools.cycle(stubs)

    def __getattr__(self, method: str) -> Any:
        return getattr(next(self._next), method)


@pytest.fixture
async def stub(workers: tuple[str, list[int]]) -> AsyncIterator[RoundRobin]:
    target, pids = workers
    channels = list((await channels_on_each(target, pids)).values())
    stubs = [queue_pb2_grpc.QueueServiceStub(c) for c in channels]
    yield RoundRobin(stubs)
    listed = await stubs[0].ListQueues(queue_pb2.ListQueuesRequest(page_size=100))
    for queue in listed.queues:
        await stubs[0].DropQueue(queue_pb2.DropQueueRequest(name=queue.name))
    for channel in channels:
        await channel.close()
