"""Prometheus metrics: the metric objects, the hooks the rest of the server calls,
the scrape-time collector and the /metrics HTTP endpoint.

Named after Spanner's queue metrics (``spanner.googleapis.com/queue/*``): sends,
acks, buffered ready messages, oldest unacknowledged message age, lease
expirations (here: redeliveries). Plus RPC latency, open Receive streams and the
database pool. docs/operations.md describes each one.

Every running server has its own registry (not prometheus_client's global one),
so several servers in one process do not clash. The hooks are cheap: a counter
increment on a child looked up once per queue; nothing on the hot path touches
the database. What needs the database (ready messages, oldest age) is computed
when the endpoint renders: at most once per --metrics-interval, whatever the
number of scrapes (exposition.py serves the copy in between). The endpoint's
thread hands the query to the server's event loop, which runs it through the
server's own pool (so it counts against --max-connections), with a timeout.
"""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import inspect
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from .config import ConfigError
from .exposition import Endpoint
from .interceptors import Handler, HandlerWrapper, behaviour_of
from .model import LeasedMessage, QueueGauges
from .rates import Rates

if TYPE_CHECKING:
    from .clock import Clock
    from .receive import Receiver
    from .store import Store

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
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                   60.0, 300.0, 3600.0)
"""Seconds. Unary RPCs take milliseconds; the long ones are Receive streams (up to an hour)."""


IN_FILES = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
"""prometheus_client keeps this process's metrics in multiprocess files (a --workers
child's); it decides so at import, from the same variable."""


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


class Metrics:
    """One server's metrics. The hook methods (sent, acked, nacked, delivered) are
    called by the domain after the fact; ``serve`` starts the HTTP endpoint."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._sent = Counter("spanq_queue_messages_sent", "Messages sent (stored by a committed request) "
                             "through this server; Spanner's message_send_count.", ["queue"], registry=r)
        self._acked = Counter("spanq_queue_messages_acked", "Messages acknowledged (deleted by a committed "
                              "request) through this server; Spanner's message_ack_count.", ["queue"], registry=r)
        self._nacked = Counter("spanq_queue_nacks", "Lease tokens named in committed releases (RenewLease with "
                               "lease_duration 0) through this server, whether or not the lease was still held.",
                               ["queue"], registry=r)
        self._delivered = Counter("spanq_queue_messages_delivered", "Messages leased to this server's Receive "
                                  "streams (every delivery attempt).", ["queue"], registry=r)
        self._redelivered = Counter("spanq_queue_messages_redelivered", "Messages leased to this server's Receive "
                                    "streams with delivery_attempt > 1: their previous lease expired or was "
                                    "released (nacked). Stands in for Spanner's lease_expiration_count.",
                                    ["queue"], registry=r)
        self._undeliverable = Counter("spanq_queue_messages_undeliverable", "Messages leased to this server's "
                                      "Receive streams that no client can receive (a value written by SQL that "
                                      "spanq.v1 cannot encode): moved to the dead-letter queue, or, without one, "
                                      "left in the queue (counted once per message and server).",
                                      ["queue"], registry=r)
        self.rpc_duration = Histogram("spanq_rpc_duration_seconds", "Time from an RPC's start to its status, by "
                                      "method and status code; for a server stream, its whole life.",
                                      ["method", "code"], buckets=LATENCY_BUCKETS, registry=r)
        self._listening = Gauge("spanq_wakeup_listener_listening", "1 while this server's wake-up listener has "
                                "proved (by hearing its own probe notification) that it hears sends made elsewhere; "
                                "0 while it cannot, as behind a transaction-mode pooler: streams then poll every "
                                "--deaf-poll-interval. With --workers, the lowest of the live workers'.",
                                multiprocess_mode="livemin", registry=r)
        self._queue_counters = (self._sent, self._acked, self._nacked, self._delivered, self._redelivered)
        self._children: dict[tuple[Counter, str], Any] = {}
        self._endpoint: Endpoint | None = None
        self.rates = Rates()
        """Send and ack rates over the last minute, fed by the same hooks (GetQueueStats)."""

    # -- hooks (hot path: one dict lookup and one increment) -----------------------

    def _child(self, counter: Counter, queue: str) -> Any:
        child = self._children.get((counter, queue))
        if child is None:
            child = self._children[(counter, queue)] = counter.labels(queue)
        return child

    def sent(self, queue: str, n: int) -> None:
        self._child(self._sent, queue).inc(n)
        self.rates.add(queue, "sent", n)

    def acked(self, queue: str, n: int) -> None:
        if n:
            self._child(self._acked, queue).inc(n)
            self.rates.add(queue, "acked", n)

    def nacked(self, queue: str, n: int) -> None:
        self._child(self._nacked, queue).inc(n)

    def delivered(self, queue: str, batch: Sequence[LeasedMessage]) -> None:
        self._child(self._delivered, queue).inc(len(batch))
        again = sum(1 for m in batch if m.delivery_attempt > 1)
        if again:
            self._child(self._redelivered, queue).inc(again)

    def undeliverable(self, queue: str, n: int) -> None:
        self._child(self._undeliverable, queue).inc(n)

    def listener_listening(self, listening: bool) -> None:
        self._listening.set(1 if listening else 0)

    def forget_queue(self, queue: str) -> None:
        """Removes a queue's series from every per-queue counter (it was dropped): they
        leave the scrape, and a queue created again under the name counts from zero.
        In a --workers child the files keep them (prometheus_client cannot remove a series
        there): the supervisor leaves out the series of queues not in the catalog."""
        self.rates.forget(queue)
        for counter in self._queue_counters:
            self._children.pop((counter, queue), None)
            if IN_FILES:
                continue
            try:
                counter.remove(queue)
            except KeyError:
                pass  # nothing counted for it

    def counted_queues(self) -> set[str]:
        """The queues some per-queue counter has a series for."""
        return {queue for _, queue in self._children}

    def interceptor(self) -> grpc.aio.ServerInterceptor:
        """Times every RPC of the server it is given to (rpc_duration)."""
        return _Timing(self.rpc_duration)

    # -- the endpoint ----------------------------------------------------------------

    def serve(self, listen: str, *, interval: float, store: "Store", receiver: "Receiver", clock: "Clock"
              ) -> int | None:
        """Registers the scrape-time collector and serves /metrics on listen (from the
        running event loop, which the collector's queries then run on), rendered at most
        once per interval (seconds). Returns the bound port (listen may ask for port 0),
        or None when listen disables metrics."""
        address = parse_listen(listen)
        if address is None:
            return None
        self.registry.register(_Collector(asyncio.get_running_loop(), store, receiver, clock, self))
        # The collector first: it drops the counters of queues it finds gone before they are read.
        for counter in self._queue_counters:
            self.registry.unregister(counter)
            self.registry.register(counter)
        self._endpoint = _endpoint(self.registry, listen, address, interval)
        return self._endpoint.port

    async def stop(self) -> None:
        """Stops the endpoint (idempotent), off the event loop: it waits for the serving
        thread, which may be waiting for the loop (a scrape's queries)."""
        endpoint, self._endpoint = self._endpoint, None
        if endpoint is not None:
            await asyncio.to_thread(endpoint.stop)


# -- RPC latency ---------------------------------------------------------------------


class _Timing(HandlerWrapper):
    """Observes each RPC's duration and final status code. The timed handler is built once
    per method, and the histogram child once per (method, code): per call, two dict
    lookups and one observation."""

    def __init__(self, histogram: Histogram) -> None:
        super().__init__()
        self._histogram = histogram
        self._children: dict[tuple[str, grpc.StatusCode], Any] = {}

    @contextlib.contextmanager
    def _timed(self, method: str, context: grpc.aio.ServicerContext) -> Iterator[None]:
        """Observes the call's duration under its final status code."""
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            yield
        except (asyncio.CancelledError, GeneratorExit):  # the client went away
            code = grpc.StatusCode.CANCELLED
            raise
        except BaseException:
            code = _failed(context)
            raise
        else:
            code = _code(context)
        finally:
            child = self._children.get((method, code))
            if child is None:
                child = self._children[(method, code)] = self._histogram.labels(method, code.name)
            child.observe(time.perf_counter() - started)

    def wrap(self, method: str, handler: Handler) -> Handler:
        found = behaviour_of(handler)
        if found is None:
            return handler
        kind, behaviour = found
        timed = self._timed
        if inspect.isasyncgenfunction(behaviour):
            async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                responses = behaviour(request, context)
                try:
                    with timed(method, context):
                        async for response in responses:
                            yield response
                finally:
                    await responses.aclose()  # at once, not when collected: its own finally runs now

            return handler._replace(**{kind: streaming})  # type: ignore[attr-defined, no-any-return]
        if inspect.iscoroutinefunction(behaviour):
            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                with timed(method, context):
                    return await behaviour(request, context)

            return handler._replace(**{kind: unary})  # type: ignore[attr-defined, no-any-return]
        return handler  # a synchronous handler (none of spanq's): not timed


def _code(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """The status of a handler that returned: OK unless it set another."""
    return _status_code(context) or grpc.StatusCode.OK


def _failed(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """The status of a handler that raised: the one it aborted with, else UNKNOWN (gRPC's answer)."""
    return _status_code(context) or grpc.StatusCode.UNKNOWN


def _status_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode | None:
    code: Any = context.code()
    if code is None or isinstance(code, grpc.StatusCode):
        return code
    for member in grpc.StatusCode:  # some grpcio versions answer the numeric code
        if member.value[0] == code:
            return member
    return None


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

    def __init__(self, loop: asyncio.AbstractEventLoop, store: "Store", clock: "Clock") -> None:
        self._loop = loop
        self._store = store
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
                self._store.queue_gauges(now=self._clock.now(), cap=COUNT_CAP, timeout=QUERY_TIMEOUT),
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

    def __init__(self, loop: asyncio.AbstractEventLoop, store: "Store", receiver: "Receiver", clock: "Clock",
                 metrics: Metrics) -> None:
        super().__init__(loop, store, clock)
        self._metrics = metrics
        self._receiver = receiver

    async def _snapshot(self) -> _Snapshot:
        snapshot = _Snapshot(self._store.pool_stats(), self._receiver.streams_by_queue())
        counted = self._metrics.counted_queues()  # before the catalog is read: see below
        snapshot.queues = await self._queue_gauges()
        if snapshot.queues is None:
            return snapshot
        # Queues dropped by another server, which this one has not touched since: their
        # counters go now. Only those counted before the catalog was read: a queue created
        # after the read is missing from it, but is not gone.
        for gone in counted - {q.queue for q in snapshot.queues}:
            self._metrics.forget_queue(gone)
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
    for q in queues:
        ready.add_metric([q.queue], q.ready)
        stored.add_metric([q.queue], q.stored)
        oldest.add_metric([q.queue], q.oldest_age)
        dead.add_metric([q.queue], q.dead_lettered)
    yield from (ready, stored, oldest, dead)


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

    def __init__(self, registry: CollectorRegistry, store: "Store", receiver: "Receiver") -> None:
        self._store = store
        self._receiver = receiver
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
        stats = self._store.pool_stats()
        for name, (kind, _, stat, scale) in POOL_FIGURES.items():
            figure = stats.get(stat, 0) / scale
            if kind == "gauge":
                self._pool[name].set(figure)
            else:
                self._pool[name].inc(max(0.0, figure - self._counted.get(name, 0.0)))
                self._counted[name] = figure
        streams = self._receiver.streams_by_queue()
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

    def __init__(self, loop: asyncio.AbstractEventLoop, store: "Store", clock: "Clock", path: str) -> None:
        super().__init__(loop, store, clock)
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


def sample_to_files(metrics: Metrics, store: "Store", receiver: "Receiver") -> "asyncio.Task[None]":
    """In a --workers child: keeps its pool and stream figures in the multiprocess files
    (its counters and histogram go there by themselves). Cancel the task to stop."""
    return asyncio.create_task(_Sampler(metrics.registry, store, receiver).run(), name="metrics-sampler")


def serve_files(listen: str, *, interval: float, store: "Store", clock: "Clock", path: str) -> Endpoint | None:
    """In the --workers supervisor: serves every child's metrics and the queue gauges at
    /metrics on listen (None when listen disables metrics). The endpoint's port is
    ``endpoint.port``."""
    address = parse_listen(listen)
    if address is None:
        return None
    registry = CollectorRegistry()
    registry.register(_Gathered(asyncio.get_running_loop(), store, clock, path))
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
