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
when Prometheus scrapes: prometheus_client serves /metrics from a thread, and the
collector runs its query on the server's event loop, through the server's own
pool (so it counts against --max-connections), with a timeout.
"""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .config import ConfigError
from .interceptors import Handler, HandlerWrapper, behaviour_of
from .model import LeasedMessage, QueueGauges

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


def parse_listen(listen: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` too) -> (host, port); None for "" or "off" (disabled)."""
    text = listen.strip()
    if text.lower() in ("", "off"):
        return None
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"metrics address {listen!r} is not HOST:PORT (or 'off' to disable metrics)")
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
        self.rpc_duration = Histogram("spanq_rpc_duration_seconds", "Time from an RPC's start to its status, by "
                                      "method and status code; for a server stream, its whole life.",
                                      ["method", "code"], buckets=LATENCY_BUCKETS, registry=r)
        self._listening = Gauge("spanq_wakeup_listener_listening", "1 while this server's wake-up listener has "
                                "proved (by hearing its own probe notification) that it hears sends made elsewhere; "
                                "0 while it cannot, as behind a transaction-mode pooler: streams then poll every "
                                "--deaf-poll-interval.", registry=r)
        self._queue_counters = (self._sent, self._acked, self._nacked, self._delivered, self._redelivered)
        self._children: dict[tuple[Counter, str], Any] = {}
        self._http: WSGIServer | None = None
        self._http_thread: threading.Thread | None = None

    # -- hooks (hot path: one dict lookup and one increment) -----------------------

    def _child(self, counter: Counter, queue: str) -> Any:
        child = self._children.get((counter, queue))
        if child is None:
            child = self._children[(counter, queue)] = counter.labels(queue)
        return child

    def sent(self, queue: str, n: int) -> None:
        self._child(self._sent, queue).inc(n)

    def acked(self, queue: str, n: int) -> None:
        if n:
            self._child(self._acked, queue).inc(n)

    def nacked(self, queue: str, n: int) -> None:
        self._child(self._nacked, queue).inc(n)

    def delivered(self, queue: str, batch: Sequence[LeasedMessage]) -> None:
        self._child(self._delivered, queue).inc(len(batch))
        again = sum(1 for m in batch if m.delivery_attempt > 1)
        if again:
            self._child(self._redelivered, queue).inc(again)

    def listener_listening(self, listening: bool) -> None:
        self._listening.set(1 if listening else 0)

    def forget_queue(self, queue: str) -> None:
        """Removes a queue's series from every per-queue counter (it was dropped): they
        leave the scrape, and a queue created again under the name counts from zero."""
        for counter in self._queue_counters:
            self._children.pop((counter, queue), None)
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

    def serve(self, listen: str, *, store: "Store", receiver: "Receiver", clock: "Clock") -> int | None:
        """Registers the scrape-time collector and serves /metrics on listen (from the
        running event loop, which the collector's queries then run on). Returns the
        bound port (listen may ask for port 0), or None when listen disables metrics."""
        address = parse_listen(listen)
        if address is None:
            return None
        self.registry.register(_Collector(asyncio.get_running_loop(), store, receiver, clock, self))
        # The collector first: it drops the counters of queues it finds gone before they are read.
        for counter in self._queue_counters:
            self.registry.unregister(counter)
            self.registry.register(counter)
        try:
            self._http, self._http_thread = start_http_server(address[1], address[0], registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {listen}: {exc.strerror or exc}; give --metrics-listen "
                              "another HOST:PORT, or 'off'") from exc
        return int(self._http.server_port)

    async def stop(self) -> None:
        """Stops the endpoint (idempotent). shutdown() waits for the serving thread's next
        poll (up to half a second), so it runs off the event loop."""
        http, self._http = self._http, None
        if http is None:
            return
        await asyncio.to_thread(http.shutdown)
        http.server_close()


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


class _Collector(Collector):
    """Builds the gauges at scrape time, in prometheus_client's HTTP thread: the
    snapshot is taken on the server's event loop (the pool and the stream counts
    belong to it, and the query runs through the pool)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, store: "Store", receiver: "Receiver", clock: "Clock",
                 metrics: Metrics) -> None:
        self._loop = loop
        self._metrics = metrics
        self._store = store
        self._receiver = receiver
        self._clock = clock
        self._errors = 0
        """Scrapes that answered without the queue gauges (reported by this collector, so
        that a scrape counts its own failure)."""
        self._lock = threading.Lock()  # scrapes may run at once, each in its own thread

    def _count_failure(self) -> None:
        with self._lock:
            self._errors += 1

    def describe(self) -> Iterable[Metric]:
        return []  # do not run collect() (a query) at registration

    async def _snapshot(self) -> _Snapshot:
        snapshot = _Snapshot(self._store.pool_stats(), self._receiver.streams_by_queue())
        counted = self._metrics.counted_queues()  # before the catalog is read: see below
        try:
            snapshot.queues = await asyncio.wait_for(
                self._store.queue_gauges(now=self._clock.now(), cap=COUNT_CAP, timeout=QUERY_TIMEOUT),
                QUERY_TIMEOUT + 1,  # the statement's own timeout ends it first, cleanly
            )
        except Exception as exc:  # the scrape still answers: counters, pool, streams
            logger.warning("metrics: no queue gauges in this scrape: %s: %s", type(exc).__name__, exc)
            self._count_failure()
            return snapshot
        # Queues dropped by another server, which this one has not touched since: their
        # counters go now. Only those counted before the catalog was read: a queue created
        # after the read is missing from it, but is not gone.
        for gone in counted - {q.queue for q in snapshot.queues}:
            self._metrics.forget_queue(gone)
        return snapshot

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
            families = list(_families(future.result(QUERY_TIMEOUT + 2)))
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):  # the loop is stuck or stopping
            future.cancel()
            self._count_failure()
            families = []
        return families + self._errors_family()

    def _errors_family(self) -> list[Metric]:
        return [CounterMetricFamily("spanq_metrics_queue_gauges_errors", "Scrapes that answered without the "
                                    "per-queue gauges (database slow or unavailable, or a queue dropped meanwhile).",
                                    value=self._errors)]


def _families(snapshot: _Snapshot) -> Iterable[Metric]:
    if snapshot.queues is not None:
        ready = GaugeMetricFamily("spanq_queue_buffered_ready_messages", "Messages ready to be delivered (due and "
                                  f"not leased), counted up to {COUNT_CAP}; Spanner's buffered_ready_messages.",
                                  labels=["queue"])
        stored = GaugeMetricFamily("spanq_queue_unacked_messages", "Messages not yet acknowledged (ready, scheduled "
                                   f"or leased), counted up to {COUNT_CAP}.", labels=["queue"])
        oldest = GaugeMetricFamily("spanq_queue_oldest_unacked_message_age_seconds", "Seconds since the oldest "
                                   "unacknowledged message was sent (0: the queue is empty); a lower bound past "
                                   f"{COUNT_CAP} messages. Spanner's oldest_unacked_message_age.", labels=["queue"])
        for q in snapshot.queues:
            ready.add_metric([q.queue], q.ready)
            stored.add_metric([q.queue], q.stored)
            oldest.add_metric([q.queue], q.oldest_age)
        yield from (ready, stored, oldest)
    streams = GaugeMetricFamily("spanq_receive_streams_open", "Receive streams open on this server.",
                                labels=["queue"])
    names = {q.queue for q in snapshot.queues or []} | set(snapshot.streams)
    for name in sorted(names):
        streams.add_metric([name], snapshot.streams.get(name, 0))
    yield streams
    pool = snapshot.pool
    yield GaugeMetricFamily("spanq_db_pool_max_connections", "The database pool's maximum size "
                            "(--max-connections less the wake-up listener's one).", value=pool.get("pool_max", 0))
    yield GaugeMetricFamily("spanq_db_pool_connections", "Connections the pool holds open, in use or idle.",
                            value=pool.get("pool_size", 0))
    yield GaugeMetricFamily("spanq_db_pool_connections_idle", "Pool connections idle, ready to be handed out.",
                            value=pool.get("pool_available", 0))
    yield GaugeMetricFamily("spanq_db_pool_requests_waiting", "Requests waiting for a pool connection now.",
                            value=pool.get("requests_waiting", 0))
    yield CounterMetricFamily("spanq_db_pool_requests", "Requests for a pool connection.",
                              value=pool.get("requests_num", 0))
    yield CounterMetricFamily("spanq_db_pool_requests_queued", "Requests that had to wait for a pool connection.",
                              value=pool.get("requests_queued", 0))
    yield CounterMetricFamily("spanq_db_pool_wait_seconds", "Time requests spent waiting for a pool connection.",
                              value=pool.get("requests_wait_ms", 0) / 1000)
    yield CounterMetricFamily("spanq_db_pool_request_errors", "Requests for a pool connection that failed "
                              "(timed out or cancelled).", value=pool.get("requests_errors", 0))
