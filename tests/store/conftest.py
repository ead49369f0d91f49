"""The receive machinery on a real, opened Store (a cloned test database), without a gRPC
server or client: a test drives Receiver.serve itself, with the write it wants, so that a
race between the transport and the stream can be pinned step by step."""

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from spanq_server.ground.clock import ManualClock
from spanq_server.ground.config import Limits
from spanq_server.domain.receive.held import Holdings
from spanq_server.metrics.counters import Counters
from spanq_server.ground.model import ColumnType, KeyColumn, OutgoingMessage, QueueDef
from spanq_server.domain.queues import Catalog
from spanq_server.domain.receive.stream import Receiver
from spanq_server.store import Store
from spanq_server.domain.receive.wakeups import Wakeups

POLL = timedelta(seconds=5)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with Store(database_url, min_size=1, max_size=4) as store:
        yield store


@pytest.fixture
def receiver(store: Store, clock: ManualClock) -> Receiver:
    """A Receiver as the server builds one; its Wakeups' listener is not started (nothing
    here relies on notifications)."""
    return Receiver(store, Wakeups(store), clock, Limits(), POLL, Counters(CollectorRegistry()), Holdings())


@pytest.fixture
async def queue(store: Store) -> QueueDef:
    """A queue ``tasks`` (STRING key, STRING payload) with a 30 s lease."""
    return await Catalog(store, Limits()).create(QueueDef(
        name="tasks", key_columns=(KeyColumn("id", ColumnType.STRING),), payload_type=ColumnType.STRING,
        lease_duration=timedelta(seconds=30), initial_backoff=timedelta(seconds=1),
        max_backoff=timedelta(seconds=1)))


async def send(store: Store, queue: QueueDef, clock: ManualClock, *keys: str) -> None:
    async with store.transaction(queue.name) as handle:
        await store.messages_insert(handle, queue, [OutgoingMessage((k,), f"payload of {k}") for k in keys],
                                    clock.now())
