"""Per-key concurrency and a queue-wide rate limit (Queue.max_in_flight_per_key,
Queue.rate_limit), held in PostgreSQL: on the SQL surface (spanq.receive_<queue> in
psql), across streams on two servers (a checked history of leases and acks), set and
changed by CreateQueue and UpdateQueue with their checks, shown by GetQueueStats; and
migration 0014 from the schema before it."""

import asyncio
import dataclasses
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from google.protobuf import field_mask_pb2

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start
from spanq_server.store import Store

from ..helpers import ack, create_queue, duration, error_of, key, open_stream, plain, send, until, value

KEYS = [queue_pb2.KeyColumn(name="tenant", type=queue_pb2.STRING), queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64)]


async def update(stub, name: str, *paths: str, **fields) -> queue_pb2.Queue:
    return await stub.UpdateQueue(queue_pb2.UpdateQueueRequest(
        queue=queue_pb2.Queue(name=name, **fields), update_mask=field_mask_pb2.FieldMask(paths=list(paths))))


def tenant_message(tenant: str, n: int, payload: str = "p") -> queue_pb2.SendMessage:
    return queue_pb2.SendMessage(key=key(tenant, n), payload=value(payload))


def psql_receive(sql, queue: str, batch: int, now=None) -> list[tuple]:
    return sql.execute(f"SELECT tenant, n FROM spanq.receive_{queue}(%s, now => %s)", (batch, now)).fetchall()


async def test_psql_receive_leases_no_more_per_key_than_the_limit(stub, sql, clock):
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING, max_in_flight_per_key=2)
    await send(stub, "tasks", *[tenant_message(t, n) for t in ("a", "b") for n in range(5)])
    got = psql_receive(sql, "tasks", 10)
    assert sorted(got) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert psql_receive(sql, "tasks", 10) == []  # each tenant is at its limit
    # An ack frees one of a's.
    sql.execute("DELETE FROM tasks WHERE tenant = 'a' AND n = 0")
    assert psql_receive(sql, "tasks", 10) == [("a", 2)]


async def test_psql_receive_takes_no_more_than_the_rate_limits_tokens(stub, sql):
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING, rate_limit=2.0,
                       rate_limit_burst=3)
    await send(stub, "tasks", *[tenant_message("a", n) for n in range(20)])
    [(start,)] = sql.execute("SELECT refill_time FROM spanq.rate_buckets WHERE queue = 'tasks'").fetchall()
    t0 = start + timedelta(seconds=60)  # long quiet: the bucket holds its burst, no more
    assert len(psql_receive(sql, "tasks", 10, t0)) == 3
    assert psql_receive(sql, "tasks", 10, t0) == []
    assert len(psql_receive(sql, "tasks", 10, t0 + timedelta(seconds=0.4))) == 0  # 0.8 of a token
    assert len(psql_receive(sql, "tasks", 10, t0 + timedelta(seconds=1.6))) == 3  # 3.2 tokens
    # An earlier clock (a statement that waited for the bucket) adds nothing.
    assert psql_receive(sql, "tasks", 10, t0) == []
    stats = await stub.GetQueueStats(queue_pb2.GetQueueStatsRequest(name="tasks"))
    assert stats.rate_limited == 7 + 10 + 10 + 7 + 10  # what was ready for each batch, less what it got


# -- across streams and servers: a checked history -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Held:
    """One lease as a consumer saw it: from when it arrived to when its ack was sent, a span
    in which it was surely held (the server's own lease start is stamped before its
    statement waits for a connection: it may precede the ack that let it go)."""

    tenant: str
    start: datetime
    acked: datetime | None
    holder: int


def over_limit(history: Sequence[Held], limit: int, tolerance: timedelta) -> list[str]:
    """The checker: moments at which more than ``limit`` leases of one tenant were surely
    held at once (each span shortened by ``tolerance`` at both ends, for the clocks)."""
    by_tenant: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    for h in history:
        assert h.acked is not None, f"a lease never acked: {h}"
        if h.acked - h.start > 2 * tolerance:
            by_tenant[h.tenant] += [(h.start + tolerance, 1), (h.acked - tolerance, -1)]
    found = []
    for tenant, edges in by_tenant.items():
        held = 0
        for at, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at one instant
            held += step
            if held > limit:
                found.append(f"{tenant}: {held} leases held at {at.isoformat()}")
    return found


class Consumer:
    """A Receive stream that holds each message a little while (work), acks it, and records
    each lease's span (Held) in the shared history."""

    def __init__(self, stub: queue_pb2_grpc.QueueServiceStub, queue: str, index: int, lease: float,
                 history: list[Held], work: float, **fields: object) -> None:
        self.stub, self.queue, self.index, self.lease, self.history, self.work = (
            stub, queue, index, lease, history, work)
        self.call = stub.Receive(queue_pb2.ReceiveRequest(queue=queue, lease_duration=duration(lease), **fields))
        self.pending: set[asyncio.Task[None]] = set()
        self.leased: list[datetime] = []
        """Each lease's start as the server stamped it (its lease end less the duration)."""
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        async for response in self.call:
            arrived = datetime.now(timezone.utc)
            for m in response.messages:
                task = asyncio.ensure_future(self._process(m, arrived))
                self.pending.add(task)
                task.add_done_callback(self.pending.discard)

    async def _process(self, m: queue_pb2.ReceivedMessage, arrived: datetime) -> None:
        self.leased.append(m.lease_expiration_time.ToDatetime(timezone.utc) - timedelta(seconds=self.lease))
        await asyncio.sleep(random.uniform(0, self.work))  # the work the message stands for
        sent = datetime.now(timezone.utc)
        result = await ack(self.stub, self.queue, m)
        assert result.results[0].acked
        self.history.append(Held(plain(m.key)[0], arrived, sent, self.index))

    async def close(self) -> None:
        self.call.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        await asyncio.gather(*self.pending, return_exceptions=True)


@asynccontextmanager
async def two_servers(server_config, clock) -> AsyncIterator[list[queue_pb2_grpc.QueueServiceStub]]:
    """Two more servers on the test's database, sharing its clock: a stub of each."""
    servers = [await start(server_config, clock=clock) for _ in range(2)]
    channels = [grpc.aio.insecure_channel(s.target) for s in servers]
    try:
        yield [queue_pb2_grpc.QueueServiceStub(c) for c in channels]
    finally:
        for c in channels:
            await c.close()
        for s in servers:
            await s.stop(0)


async def test_no_key_exceeds_its_concurrency_across_streams_on_two_servers(stub, server_config, clock, sql):
    limit, tenants, each = 2, 6, 25
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING,
                       max_in_flight_per_key=limit, concurrency_key="tenant")
    history: list[Held] = []
    async with two_servers(server_config, clock) as stubs:
        consumers = [Consumer(stubs[i % 2], "tasks", i, 10, history, work=0.03, max_batch_size=10)
                     for i in range(4)]
        try:
            await send(stub, "tasks", *[tenant_message(f"t{t}", n) for t in range(tenants) for n in range(each)])
            await until(lambda: len(history) == tenants * each, "every message acked", timeout=60)
        finally:
            for c in consumers:
                await c.close()
    assert over_limit(history, limit, tolerance=timedelta(milliseconds=2)) == []
    assert len({h.holder for h in history}) > 1
    # The limit held: without it each stream takes ten of a tenant at once (the checker's own proof).
    assert over_limit([Held("t", history[0].start, history[0].start + timedelta(seconds=1), 0)] * 3, limit,
                      timedelta(milliseconds=2))
    assert sql.execute("SELECT count(*) FROM tasks").fetchone() == (0,)


def leased_within(starts: Sequence[datetime], window: timedelta) -> int:
    """The most lease starts within any span of ``window`` (a sliding window over them)."""
    starts = sorted(starts)
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] > window:
            first += 1
        most = max(most, last - first + 1)
    return most


async def test_the_delivered_rate_stays_near_the_limit_with_4_receivers_on_2_servers(stub, server_config, clock):
    rate, burst, total = 40.0, 4, 160  # four seconds' worth
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING, rate_limit=rate,
                       rate_limit_burst=burst)
    await send(stub, "tasks", *[tenant_message("t", n) for n in range(total)])
    history: list[Held] = []
    async with two_servers(server_config, clock) as stubs:
        consumers = [Consumer(stubs[i % 2], "tasks", i, 10, history, work=0, max_batch_size=10) for i in range(4)]
        try:
            await until(lambda: len(history) == total, "every message acked", timeout=60)
        finally:
            for c in consumers:
                await c.close()
    starts = sorted(at for c in consumers for at in c.leased)
    # Never more than the bucket allows: in any span, its burst and a token per 1/rate.
    for seconds in (0.25, 0.5, 1, 2):
        most = leased_within(starts, timedelta(seconds=seconds))
        assert most <= burst + rate * seconds + 1, f"{most} leases within {seconds}s"
    # And not far below it: the streams wait for the tokens, not much longer. The bound is
    # loose for a loaded machine; `make bench` (cell limits) measures the error itself.
    elapsed = (starts[-1] - starts[0]).total_seconds()
    delivered_rate = (total - burst) / elapsed
    assert 0.7 * rate <= delivered_rate <= rate * 1.05, f"{delivered_rate:.1f} leases/s against a limit of {rate}"


# -- set and changed: CreateQueue, UpdateQueue, GetQueueStats --------------------------------------


async def test_update_queue_changes_the_limits_of_open_streams_live(stub, sql):
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING, max_in_flight_per_key=1)
    got = await stub.GetQueue(queue_pb2.GetQueueRequest(name="tasks"))
    assert (got.max_in_flight_per_key, got.concurrency_key) == (1, "tenant")  # the first key column
    await send(stub, "tasks", *[tenant_message("a", n) for n in range(4)])
    async with open_stream(stub, "tasks") as stream:
        assert plain((await stream.next()).key) == ["a", "0"]
        await stream.quiet()
        stats = await stub.GetQueueStats(queue_pb2.GetQueueStatsRequest(name="tasks"))
        assert (stats.key_limited, stats.keys_at_limit) == (3, 1)
        updated = await update(stub, "tasks", "max_in_flight_per_key", max_in_flight_per_key=3)
        assert updated.max_in_flight_per_key == 3
        two = [await stream.next(), await stream.next()]
        assert sorted(plain(m.key)[1] for m in two) == ["1", "2"]
        await stream.quiet()
        # A rate limit set live: the bucket starts full (its burst, 1), then one lease a 100 s.
        await update(stub, "tasks", "max_in_flight_per_key", "rate_limit", rate_limit=0.01)
        assert plain((await stream.next()).key) == ["a", "3"]
    await send(stub, "tasks", *[tenant_message("b", n) for n in range(2)])
    assert psql_receive(sql, "tasks", 10) == []
    stats = await stub.GetQueueStats(queue_pb2.GetQueueStatsRequest(name="tasks"))
    assert stats.rate_limited == 2 and stats.rate_limit_tokens < 1
    # Removed: the key limit took its column with it; the bucket is gone.
    cleared = await update(stub, "tasks", "rate_limit")
    assert (cleared.rate_limit, cleared.max_in_flight_per_key, cleared.concurrency_key) == (0, 0, "")
    assert sql.execute("SELECT count(*) FROM spanq.rate_buckets").fetchone() == (0,)
    assert sorted(psql_receive(sql, "tasks", 10)) == [("b", 0), ("b", 1)]
    # Its index is gone (its function stays, unused, until the queue is dropped).
    assert sql.execute("SELECT to_regclass('spanq_kc_tasks')").fetchone() == (None,)


def catalog(sql) -> list[tuple]:
    return sql.execute("SELECT name, max_in_flight_per_key, concurrency_key, rate_limit, rate_limit_burst "
                       "FROM spanq.queues ORDER BY name").fetchall()


BAD_LIMITS = [
    ({"max_in_flight_per_key": -1}, "max_in_flight_per_key must be between 1 and 100000"),
    ({"max_in_flight_per_key": 100_001}, "max_in_flight_per_key must be between 1 and 100000"),
    ({"max_in_flight_per_key": 2, "concurrency_key": "colour"}, "'colour' is not a key column"),
    ({"max_in_flight_per_key": 0, "concurrency_key": "tenant"}, "concurrency_key needs max_in_flight_per_key"),
    ({"rate_limit": -5.0}, "rate_limit must be between 0.001 and 1e+06"),
    ({"rate_limit": 0.0001}, "rate_limit must be between 0.001 and 1e+06"),
    ({"rate_limit": float("nan")}, "rate_limit must be between"),
    ({"rate_limit": float("inf")}, "rate_limit must be between"),
    ({"rate_limit": 0.0, "rate_limit_burst": 5}, "rate_limit_burst needs rate_limit"),
    ({"rate_limit": 10.0, "rate_limit_burst": -1}, "rate_limit_burst must be between 1 and 1000000"),
]


@pytest.mark.parametrize("fields, words", BAD_LIMITS)
async def test_bad_limits_are_refused_and_nothing_changes(stub, sql, fields, words):
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING, max_in_flight_per_key=4,
                       rate_limit=100.0)
    before = catalog(sql)
    code, message, _ = await error_of(create_queue(stub, "other", key_columns=KEYS, **fields))
    assert (code, words) == (grpc.StatusCode.INVALID_ARGUMENT, words) and words in message
    code, message, _ = await error_of(update(stub, "tasks", *fields, **fields))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and words in message
    assert catalog(sql) == before
    assert sql.execute("SELECT queue FROM spanq.rate_buckets").fetchall() == [("tasks",)]


async def test_a_dropped_queue_leaves_no_limit_behind_and_its_name_starts_afresh(stub, sql):
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING, max_in_flight_per_key=1,
                       concurrency_key="n", rate_limit=5.0)
    await stub.DropQueue(queue_pb2.DropQueueRequest(name="tasks"))
    assert sql.execute("SELECT count(*) FROM spanq.rate_buckets").fetchone() == (0,)
    assert sql.execute("SELECT to_regproc('spanq.keyslots_tasks')").fetchone() == (None,)
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING)
    await send(stub, "tasks", *[tenant_message("a", n) for n in range(3)])
    assert len(psql_receive(sql, "tasks", 10)) == 3


async def test_migration_0014_leaves_existing_queues_unlimited(stub, sql, database_url):
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING)
    await send(stub, "tasks", tenant_message("a", 1), tenant_message("a", 2))
    before = sql.execute("SELECT pg_get_functiondef('spanq.receive_tasks'::regproc)").fetchone()
    # The catalog as before migration 0014.
    sql.execute("DROP TABLE spanq.rate_buckets")
    sql.execute("ALTER TABLE spanq.queues DROP COLUMN max_in_flight_per_key, DROP COLUMN concurrency_key, "
                "DROP COLUMN rate_limit, DROP COLUMN rate_limit_burst")
    sql.execute("DELETE FROM spanq.schema_migrations WHERE version = 14")
    async with Store(database_url, min_size=1, max_size=1) as store:
        assert await store.migrate() == [14]
        queue = await store.queue_get("tasks")
        assert queue is not None
        assert (queue.max_in_flight_per_key, queue.concurrency_key, queue.rate_limit) == (None, None, None)
    assert sql.execute("SELECT pg_get_functiondef('spanq.receive_tasks'::regproc)").fetchone() == before
    assert sorted(psql_receive(sql, "tasks", 10)) == [("a", 1), ("a", 2)]
    # And a limit set after the migration works.
    await update(stub, "tasks", "max_in_flight_per_key", max_in_flight_per_key=1)
    await send(stub, "tasks", tenant_message("b", 1), tenant_message("b", 2))
    assert psql_receive(sql, "tasks", 10) == [("b", 1)]


async def test_an_unlimited_queues_receive_function_has_no_limit_in_it(stub, sql):
    await create_queue(stub, "tasks", key_columns=KEYS, payload_type=queue_pb2.STRING)
    [(text,)] = sql.execute("SELECT pg_get_functiondef('spanq.receive_tasks'::regproc)").fetchall()
    assert "keyslots" not in text and "rate_buckets" not in text and "admitted" not in text


@pytest.mark.parametrize("type_code, one", [
    (queue_pb2.BOOL, True), (queue_pb2.INT64, "7"), (queue_pb2.STRING, "x.y~z,*"), (queue_pb2.BYTES, "AAE="),
    (queue_pb2.TIMESTAMP, "2024-05-01T12:00:00Z"),
])
async def test_a_key_limit_counts_by_a_column_of_each_key_type(stub, sql, type_code, one):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING, max_in_flight_per_key=1, concurrency_key="k",
                       key_columns=[queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64),
                                    queue_pb2.KeyColumn(name="k", type=type_code)])
    await send(stub, "tasks", *[queue_pb2.SendMessage(key=key(n, one), payload=value("p")) for n in range(3)])
    assert len(sql.execute("SELECT * FROM spanq.receive_tasks(10)").fetchall()) == 1
    assert sql.execute("SELECT * FROM spanq.receive_tasks(10)").fetchall() == []


# -- the SDK ---------------------------------------------------------------------------------------


async def test_sdk_sets_and_shows_the_limits_sync_and_aio(server):
    import spanq
    import spanq.aio

    async with spanq.aio.Client(server.target) as client:
        made = await client.create_queue("tasks", key_columns=[("tenant", "STRING"), ("n", "INT64")],
                                         payload_type="STRING", max_in_flight_per_key=1, rate_limit=0.01,
                                         rate_limit_burst=2)
        assert (made.max_in_flight_per_key, made.concurrency_key, made.rate_limit, made.rate_limit_burst) == (
            1, "tenant", 0.01, 2)
        await client.send_many("tasks", [spanq.OutgoingMessage("p", key=("a", n)) for n in range(3)])
        assert len(await client.receive("tasks", 10)) == 1
        stats = await client.stats("tasks")
        assert (stats.key_limited, stats.keys_at_limit) == (2, 1) and stats.rate_limit_tokens < 2
        with pytest.raises(spanq.InvalidArgument, match="not a key column"):
            await client.update_queue("tasks", concurrency_key="colour")

    def blocking() -> spanq.Queue:
        with spanq.Client(server.target) as sync_client:
            return sync_client.update_queue("tasks", max_in_flight_per_key=None, rate_limit=5)

    back = await asyncio.to_thread(blocking)
    assert (back.max_in_flight_per_key, back.concurrency_key, back.rate_limit, back.rate_limit_burst) == (
        None, None, 5.0, 2)  # a new rate keeps its burst


async def test_cli_sets_changes_and_shows_the_limits(server):
    import json

    from ..tools.test_cli import one_line, spanq_cli

    t = server.target
    code, out, err = await spanq_cli(t, "queue", "create", "tasks", "--key", "tenant:STRING", "--key", "n:INT64",
                                     "--max-in-flight-per-key", "2", "--rate-limit", "50")
    assert code == 0, err
    assert "2/tenant, 50/s" in out.split("\n")[1]
    code, out, err = await spanq_cli(t, "queue", "update", "tasks", "--rate-limit-burst", "5",
                                     "--max-in-flight-per-key", "0", "--json")
    shown = json.loads(out)
    assert code == 0 and (shown["max_in_flight_per_key"], shown["concurrency_key"], shown["rate_limit"],
                          shown["rate_limit_burst"]) == (None, None, 50.0, 5), err
    code, out, err = await spanq_cli(t, "stats", "tasks")
    assert code == 0 and "0 by rate so far (5.0 tokens)" in out, out
    code, _, err = await spanq_cli(t, "queue", "update", "tasks", "--max-in-flight-per-key", "1",
                                   "--concurrency-key", "colour")
    assert code == 2 and "not a key column" in one_line(err)
    code, _, err = await spanq_cli(t, "queue", "update", "tasks", "--rate-limit", "-1")
    assert code == 2 and "--rate-limit" in err
