"""/metrics: what a scrape computes and where it is served.

The per-queue figures that need the database (ready messages, oldest age) are
computed when the endpoint renders: at most once per --metrics-interval, whatever
the number of scrapes (exposition.py serves the copy in between). The endpoint's
thread hands the query to the server's event loop, which runs it through the
server's own pool (so it counts against --max-connections), with a timeout.

With --workers, each child writes its counters (and samples its pool and streams)
to prometheus_client's multiprocess files, and the supervisor serves their sums
with the queue gauges, computed there once for all (``sample_to_files``,
``serve_files``).
"""

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from ..ground.config import ConfigError
from ..ground.model import QueueGauges
from ..metrics.counters import Counters
from .exposition import Endpoint

if TYPE_CHECKING:
    from ..ground.clock import Clock

QueueGaugesRead = Callable[..., Awaitable[list[QueueGauges]]]
"""Every queue's gauges in one statement: the store's ``queue_gauges(now=, cap=, timeout=)``."""
Figures = Callable[[], dict[str, int]]
"""Figures read on the server's loop: the store's ``pool_stats``, the receiver's
``streams_by_queue``. server.py hands them in: the endpoint names neither the store nor
the receiver."""

logger = logging.getLogger(__name__)

DEFAULT_LISTEN = "localhost:9464"
"""Where /metrics is served unless told otherwise (9464: the usual exporter port)."""
COUNT_CAP = 100_000
"""Per queue and scrape, at most this many rows are counted (ready and stored messages):
about 10 ms each on a deep queue instead of ~100 ms per million rows. A gauge at the cap
means "at least"."""
QUERY_TIMEOUT = 3.0
"""Seconds: the queue gauges' statement_timeout. A scrape waits a second more for them in
all (a pool connection, then the statement); after that it answers without them and
counts the failure."""


def parse_listen(listen: str, what: str = "metrics") -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` too) -> (host, port); None for "" or "off" (disabled)."""
    text = listen.strip()
    if text.lower() in ("", "off"):
        return None
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{what} address {listen!r} is not HOST:PORT (or 'off' to disable {what})")
    return host, int(port)


def serve(listen: str, *, interval: float, counters: Counters, queue_gauges: QueueGaugesRead, pool_stats: Figures,
          streams: Figures, clock: "Clock") -> Endpoint | None:
    """Serves one server's /metrics on listen (from the running event loop, which the
    scrape's queries then run on): its registry (counters, timing) and the scrape-time
    gauges, rendered at most once per interval (seconds). None when listen disables
    metrics; else the started endpoint (``endpoint.port``: listen may ask for port 0)."""
    address = parse_listen(listen)
    if address is None:
        return None
    counters.register_before_queue_counters(_Collector(asyncio.get_running_loop(), queue_gauges, pool_stats, streams, clock, counters))
    return _endpoint(counters.registry, listen, address, interval)


# -- scrape-time gauges ----------------------------------------------------------------


@dataclasses.dataclass
class _Snapshot:
    pool: dict[str, int]
    streams: dict[str, int]
    queues: list[QueueGauges] | None = None


class _OnLoop(Collector):
    """Builds gauges when the endpoint renders, in its thread: the snapshot is taken on
    an event loop (the server's: the pool and the stream counts belong to it, and the
    query runs through its pool). Subclasses say what the snapshot holds."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue_gauges: QueueGaugesRead, clock: "Clock") -> None:
        self._loop = loop
        self._read_gauges = queue_gauges
        self._clock = clock
        self._errors = 0
        """Renders that answered without the queue gauges (reported by this collector, so
        that a scrape counts its own failure)."""
        self._lock = threading.Lock()

    def _count_failure(self) -> None:
        with self._lock:
            self._errors += 1

    def describe(self) -> Iterable[Metric]:
        return []  # do not run collect() (a query) at registration

    async def _queue_gauges(self) -> list[QueueGauges] | None:
        """Every queue's gauges, or None (logged, counted) when the database did not answer in time."""
        try:
            return await asyncio.wait_for(
                self._read_gauges(now=self._clock.now(), cap=COUNT_CAP, timeout=QUERY_TIMEOUT),
                QUERY_TIMEOUT + 1,  # the statement's own timeout ends it first, cleanly
            )
        except Exception as exc:  # the scrape still answers: counters, pool, streams
            logger.warning("metrics: no queue gauges in this scrape: %s: %s", type(exc).__name__, exc)
            self._count_failure()
            return None

    async def _snapshot(self) -> Any:
        raise NotImplementedError

    def _families(self, snapshot: Any) -> Iterable[Metric]:
        raise NotImplementedError

    def collect(self) -> Iterable[Metric]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:  # on an event loop thread, waiting for the loop would deadlock
            self._count_failure()
            return self._errors_family()
        snapshot = self._snapshot()
        try:
            future = asyncio.run_coroutine_threadsafe(snapshot, self._loop)
        except RuntimeError:  # the loop is closed: the server has stopped
            snapshot.close()
            self._count_failure()
            return self._errors_family()
        try:
            families = list(self._families(future.result(QUERY_TIMEOUT + 2)))
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):  # the loop is stuck or stopping
            future.cancel()
            self._count_failure()
            families = []
        return families + self._errors_family()

    def _errors_family(self) -> list[Metric]:
        return [CounterMetricFamily("spanq_metrics_queue_gauges_errors", "Scrapes that answered without the "
                                    "per-queue gauges (database slow or unavailable, or a queue dropped meanwhile).",
                                    value=self._errors)]


class _Collector(_OnLoop):
    """One server's scrape-time gauges: the queues', its streams', its pool's."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue_gauges: QueueGaugesRead, pool_stats: Figures,
                 streams: Figures, clock: "Clock", counters: Counters) -> None:
        super().__init__(loop, queue_gauges, clock)
        self._counters = counters
        self._pool_stats = pool_stats
        self._streams = streams

    async def _snapshot(self) -> _Snapshot:
        snapshot = _Snapshot(self._pool_stats(), self._streams())
        counted = self._counters.counted_queues()  # before the catalog is read: see below
        snapshot.queues = await self._queue_gauges()
        if snapshot.queues is None:
            return snapshot
        # Queues dropped by another server, which this one has not touched since: their
        # counters go now. Only those counted before the catalog was read: a queue created
        # after the read is missing from it, but is not gone.
        for gone in counted - {q.queue for q in snapshot.queues}:
            self._counters.forget_queue(gone)
        return snapshot

    def _families(self, snapshot: _Snapshot) -> Iterable[Metric]:
        return _families(snapshot)


def _families(snapshot: _Snapshot) -> Iterable[Metric]:
    if snapshot.queues is not None:
        yield from _queue_families(snapshot.queues)
    streams = GaugeMetricFamily("spanq_receive_streams_open", STREAMS_HELP, labels=["queue"])
    names = {q.queue for q in snapshot.queues or []} | set(snapshot.streams)
    for name in sorted(names):
        streams.add_metric([name], snapshot.streams.get(name, 0))
    yield streams
    pool = snapshot.pool
    for name, (kind, help, stat, scale) in POOL_FIGURES.items():
        family = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
        yield family(name, help, value=pool.get(stat, 0) / scale)


def _queue_families(queues: list[QueueGauges]) -> Iterable[Metric]:
    ready = GaugeMetricFamily("spanq_queue_buffered_ready_messages", "Messages ready to be delivered (due and "
                              f"not leased), counted up to {COUNT_CAP}; Spanner's buffered_ready_messages.",
                              labels=["queue"])
    stored = GaugeMetricFamily("spanq_queue_unacked_messages", "Messages not yet acknowledged (ready, scheduled "
                               f"or leased), counted up to {COUNT_CAP}.", labels=["queue"])
    oldest = GaugeMetricFamily("spanq_queue_oldest_unacked_message_age_seconds", "Seconds since the oldest "
                               "unacknowledged message was sent (0: the queue is empty); a lower bound past "
                               f"{COUNT_CAP} messages. Spanner's oldest_unacked_message_age.", labels=["queue"])
    # Read from the database (a count the moves keep in SQL): every server reports the same
    # figure, moves by psql's spanq.receive_<queue> included; take the max across servers, not the sum.
    dead = CounterMetricFamily("spanq_queue_messages_dead_lettered", "Messages moved from this queue to its "
                               "dead-letter queue since the queue was created (by any server or SQL client: "
                               "the database's count, the same on every server).", labels=["queue"])
    # The limits' effect (Queue.rate_limit, max_in_flight_per_key), also the database's figures.
    rate_limited = CounterMetricFamily("spanq_queue_rate_limited_messages", "Messages ready for a batch that the "
                                       "queue's rate limit kept back, since the limit was set (by any server or "
                                       "SQL client: the database's count, the same on every server).",
                                       labels=["queue"])
    key_limited = GaugeMetricFamily("spanq_queue_key_limited_messages", "Due messages whose key value is at the "
                                    f"queue's max_in_flight_per_key (they wait for a lease of their key to end), "
                                    f"counted up to {COUNT_CAP}.", labels=["queue"])
    held = GaugeMetricFamily("spanq_queue_ordering_held_messages", "Messages of an ordering queue held behind an "
                             "earlier message of their ordering key (delivered once it is acked or dead-lettered), "
                             f"counted up to {COUNT_CAP}.", labels=["queue"])
    for q in queues:
        ready.add_metric([q.queue], q.ready)
        stored.add_metric([q.queue], q.stored)
        oldest.add_metric([q.queue], q.oldest_age)
        dead.add_metric([q.queue], q.dead_lettered)
        rate_limited.add_metric([q.queue], q.rate_limited)
        key_limited.add_metric([q.queue], q.key_limited)
        held.add_metric([q.queue], q.ordering_held)
    yield from (ready, stored, oldest, dead, rate_limited, key_limited, held)


STREAMS_HELP = "Receive streams open on this server."
POOL_FIGURES: dict[str, tuple[str, str, str, int]] = {
    # name: (gauge or counter, help, psycopg_pool's statistic, its unit in the metric's)
    "spanq_db_pool_max_connections": ("gauge", "The database pool's maximum size (--max-connections less the "
                                      "wake-up listener's one).", "pool_max", 1),
    "spanq_db_pool_connections": ("gauge", "Connections the pool holds open, in use or idle.", "pool_size", 1),
    "spanq_db_pool_connections_idle": ("gauge", "Pool connections idle, ready to be handed out.", "pool_available",
                                       1),
    "spanq_db_pool_requests_waiting": ("gauge", "Requests waiting for a pool connection now.", "requests_waiting", 1),
    "spanq_db_pool_requests": ("counter", "Requests for a pool connection.", "requests_num", 1),
    "spanq_db_pool_requests_queued": ("counter", "Requests that had to wait for a pool connection.",
                                      "requests_queued", 1),
    "spanq_db_pool_wait_seconds": ("counter", "Time requests spent waiting for a pool connection.",
                                   "requests_wait_ms", 1000),
    "spanq_db_pool_request_errors": ("counter", "Requests for a pool connection that failed (timed out or "
                                     "cancelled).", "requests_errors", 1),
}
"""The pool's figures, from psycopg_pool's get_stats(): one table for the scrape-time
families of one server and the sampled metrics of a --workers child."""


# -- --workers: the children write files, the supervisor serves them ---------------------

SAMPLE_INTERVAL = 1.0
"""Seconds between a --workers child's samples of its pool and streams into the shared files."""


class _Sampler:
    """A --workers child's pool and stream figures, written to prometheus_client's
    multiprocess files every SAMPLE_INTERVAL: in that mode no collector of the child runs
    at scrape time (the supervisor reads the files), and these figures live in the child."""

    def __init__(self, registry: CollectorRegistry, pool_stats: Figures, streams: Figures) -> None:
        self._pool_stats = pool_stats
        self._streams_by_queue = streams
        self._pool: dict[str, Any] = {
            name: (Gauge(name, help, multiprocess_mode="livesum", registry=registry) if kind == "gauge"
                   else Counter(name, help, registry=registry))
            for name, (kind, help, _, _) in POOL_FIGURES.items()
        }
        self._streams = Gauge("spanq_receive_streams_open", STREAMS_HELP, ["queue"], multiprocess_mode="livesum",
                              registry=registry)
        self._counted: dict[str, float] = {}
        """Each pool counter's last sample: the files' counters grow by the difference."""
        self._queues: set[str] = set()

    def sample(self) -> None:
        stats = self._pool_stats()
        for name, (kind, _, stat, scale) in POOL_FIGURES.items():
            figure = stats.get(stat, 0) / scale
            if kind == "gauge":
                self._pool[name].set(figure)
            else:
                self._pool[name].inc(max(0.0, figure - self._counted.get(name, 0.0)))
                self._counted[name] = figure
        streams = self._streams_by_queue()
        for queue in self._queues - set(streams):
            self._streams.labels(queue).set(0)
        for queue, n in streams.items():
            self._streams.labels(queue).set(n)
        self._queues |= set(streams)

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_INTERVAL)


class _Gathered(_OnLoop):
    """The --workers supervisor's collector: its children's metrics, summed from
    prometheus_client's multiprocess files (a dead child's counters included, so that
    the sums never go down), and the queue gauges, computed here once for all."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue_gauges: QueueGaugesRead, clock: "Clock", path: str) -> None:
        super().__init__(loop, queue_gauges, clock)
        self._files = MultiProcessCollector(None, path)

    async def _snapshot(self) -> list[QueueGauges] | None:
        return await self._queue_gauges()

    def _families(self, queues: list[QueueGauges] | None) -> Iterable[Metric]:
        known = None if queues is None else {q.queue for q in queues}
        if queues is not None:
            yield from _queue_families(queues)
        streams: Metric | None = None
        for family in self._files.collect():
            if known is not None:  # the files keep a dropped queue's series: leave them out
                family.samples = [s for s in family.samples if s.labels.get("queue", "") in known
                                  or "queue" not in s.labels]
            if family.name == "spanq_receive_streams_open":
                streams = family
            else:
                yield family
        # Every queue has a streams series, 0 where no child has a stream open (as for one server).
        if streams is None:
            streams = GaugeMetricFamily("spanq_receive_streams_open", STREAMS_HELP, labels=["queue"])
        present = {s.labels["queue"] for s in streams.samples}
        for name in sorted((known or set()) - present):
            streams.add_sample("spanq_receive_streams_open", {"queue": name}, 0)
        yield streams


def sample_to_files(registry: CollectorRegistry, pool_stats: Figures, streams: Figures) -> "asyncio.Task[None]":
    """In a --workers child: keeps its pool and stream figures in the multiprocess files
    (its counters and histogram go there by themselves). Cancel the task to stop."""
    return asyncio.create_task(_Sampler(registry, pool_stats, streams).run(), name="metrics-sampler")


def serve_files(listen: str, *, interval: float, queue_gauges: QueueGaugesRead, clock: "Clock",
                path: str) -> Endpoint | None:
    """In the --workers supervisor: serves every child's metrics and the queue gauges at
    /metrics on listen (None when listen disables metrics). The endpoint's port is
    ``endpoint.port``."""
    address = parse_listen(listen)
    if address is None:
        return None
    registry = CollectorRegistry()
    registry.register(_Gathered(asyncio.get_running_loop(), queue_gauges, clock, path))
    return _endpoint(registry, listen, address, interval)


def _endpoint(registry: CollectorRegistry, listen: str, address: tuple[str, int], interval: float) -> Endpoint:
    """The started endpoint; a bind that fails is a ConfigError that says what to do."""
    endpoint = Endpoint(registry, interval)
    try:
        endpoint.start(*address)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {listen}: {exc.strerror or exc}; give --metrics-listen "
                          "another HOST:PORT, or 'off'") from exc
    return endpoint
