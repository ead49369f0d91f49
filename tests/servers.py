"""A real gRPC server over a real socket, started in the test's process on the test's
database: the fixtures of the layers that talk to one (e2e, spanner, faults, tools). Each
of those conftest.py files imports the ones it uses; unit and store tests see none."""

from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from spanq_proto.v1 import queue_pb2_grpc
from spanq_server.ground.clock import ManualClock
from spanq_server.ground.config import Config
from spanq_server.server import Running, start
from spanq_server.domain.testsignals import Listener, StreamState, stream_waiting


@pytest.fixture
def waiting() -> Iterator[Listener[StreamState]]:
    """Hears every Receive stream of this process wait (testsignals.stream_waiting) during the
    test: ``await waiting.wait(...)``, or ``helpers.streams_idle(waiting, queue, n)``."""
    with stream_waiting.listen() as listener:
        yield listener


@pytest.fixture
def await_idle_streams(waiting: Listener[StreamState]) -> Any:
    """``await await_idle_streams(queue, n)``: until n Receive streams of the queue were heard
    waiting for messages. Modules whose server runs in a subprocess override it."""
    from .helpers import streams_idle

    async def wait(queue: str, n: int = 1, timeout: float = 10) -> None:
        await streams_idle(waiting, queue, n, timeout)

    return wait


@pytest.fixture
def server_config(database_url: str) -> Config:
    # No metrics endpoint (tests/e2e/test_metrics.py turns it on, on a free port); the
    # metrics themselves are still kept, so every test runs through their hooks.
    return Config(database_url=database_url, listen="127.0.0.1:0", pool_min_size=1, metrics_listen="")


@pytest.fixture
async def server(server_config: Config, clock: ManualClock) -> AsyncIterator[Running]:
    running = await start(server_config, clock=clock)
    yield running
    await running.stop(0)


@pytest.fixture
async def channel(server: Running) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield channel


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> queue_pb2_grpc.QueueServiceStub:
    return queue_pb2_grpc.QueueServiceStub(channel)

