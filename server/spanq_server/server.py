"""Assembles the service: store, domain, gRPC server with reflection and
health; starts it and stops it gracefully."""

from . import server_extra  # noqa: F401  # first: says what to install when the server extra is missing

import asyncio
import gc
import dataclasses
import ipaddress
import logging
import os
import signal
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from spanq_proto.v1 import queue_pb2_grpc

from . import spanner as spanner_front_end
from .dashboard import Dashboard
from .domain.exactly_once import ExactlyOnce
from .domain.faults import FaultInjector
from .domain.ledger import Ledger
from .domain.mutations import Mutator
from .domain.operator import Expiry, Operator
from .domain.queues import Catalog
from .domain.receive.held import Holdings
from .domain.receive.stream import Receiver
from .domain.receive.wakeups import Wakeups
from .domain.records import Records
from .edge import auth, codec
from .edge.decoding import DecodeGuard
from .edge.timing import RpcTiming
from .ground.clock import Clock
from .ground.config import Config, ConfigError
from .metrics.counters import Counters
from .scrape import endpoint as metrics_endpoint
from .scrape.endpoint import parse_listen
from .scrape.exposition import Endpoint
from .store import Store
from .v1 import access
from .v1.service import QueueService

if TYPE_CHECKING:
    from .spanner.handlers.servicers import SpannerFrontEnd

logger = logging.getLogger(__name__)

SERVICE_NAME = access.QUEUE_SERVICE


@dataclasses.dataclass
class Running:
    """A started server. ``stop()`` is idempotent."""

    config: Config
    server: grpc.aio.Server
    port: int
    store: Store
    wakeups: Wakeups
    receiver: Receiver
    ledger: Ledger
    health: health.aio.HealthServicer
    mutator: Mutator
    metrics: Counters
    """The domain's counters; ``metrics.registry`` is this server's registry, timing included."""
    rpc_timing: RpcTiming
    metrics_endpoint: Endpoint | None
    metrics_port: int | None
    """Where /metrics is served (None: metrics_listen turned it off)."""
    spanner: "SpannerFrontEnd | None" = None
    """The Spanner front-end, or None (without google-cloud-spanner)."""
    sampler: "asyncio.Task[None] | None" = None
    """A --workers child's metrics sampler (metrics.endpoint.sample_to_files), or None."""
    dashboard: Dashboard | None = None
    ui_port: int | None = None
    """Where the dashboard is served (None: ui_listen turned it off)."""
    expiry: Expiry | None = None
    """Deletes messages past their queue's message_retention_duration (admin.Expiry)."""
    _stopped: bool = False

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, end streams with UNAVAILABLE, finish in-flight commits, close the pool."""
        if self._stopped:
            return
        self._stopped = True
        if self.sampler is not None:
            self.sampler.cancel()
        await _stop_endpoint(self.metrics_endpoint)
        if self.dashboard is not None:
            await self.dashboard.stop()
        await self.health.enter_graceful_shutdown()
        self.receiver.close()
        await self.server.stop(self.config.shutdown_grace.total_seconds() if grace is None else grace)
        await asyncio.gather(self.mutator.sends.close(self.config.shutdown_grace.total_seconds()),
                             self.mutator.acks.close(self.config.shutdown_grace.total_seconds()))
        await self.receiver.given_back(self.config.shutdown_grace.total_seconds())
        await self.wakeups.stop()
        if self.spanner is not None:
            await self.spanner.stop()  # rolls back open Spanner transactions
        await self.ledger.stop()
        if self.expiry is not None:
            await self.expiry.stop()
        await self.store.close()


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check(config: Config) -> None:
    """Refuses (ConfigError) what start() would refuse before touching anything: plaintext
    off loopback, metrics off loopback. The --workers supervisor checks before its children start."""
    if not (config.tls_cert and config.tls_key) and not is_loopback(config.listen) and not config.insecure:
        raise ConfigError(
            f"refusing to serve plaintext on {config.listen}: give --tls-cert and --tls-key, "
            "or --insecure to accept that"
        )
    metrics_on = parse_listen(config.metrics_listen) is not None
    if metrics_on and not is_loopback(config.metrics_listen) and not config.insecure:
        raise ConfigError(
            f"refusing to serve metrics (plain HTTP) on {config.metrics_listen}: serve them on a loopback "
            "address, or give --insecure to accept that"
        )
    try:
        ui_on = parse_listen(config.ui_listen, "dashboard") is not None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if ui_on and not (config.tls_cert and config.tls_key) and not is_loopback(config.ui_listen) and not config.insecure:
        raise ConfigError(
            f"refusing to serve the dashboard (plain HTTP, bearer tokens in the clear) on {config.ui_listen}: "
            "give --tls-cert and --tls-key, serve it on a loopback address, or give --insecure to accept that"
        )


async def start(config: Config, *, clock: Clock | None = None) -> Running:
    """Opens the store, applies migrations, and serves on config.listen (port 0: any free port)."""
    if config.database_url is None:
        raise ValueError("start() needs a database_url; the CLI starts the embedded PostgreSQL")
    check(config)
    tokens = auth.load(config.auth_file) if config.auth_file else None
    clock = clock or Clock()
    registry = CollectorRegistry()  # this server's, not prometheus_client's global one
    metrics = Counters(registry)
    rpc_timing = RpcTiming(registry)
    store = Store(config.database_url, min_size=config.pool_min_size, max_size=config.pool_max_size,
                  reconnect_max_delay=config.reconnect_max_delay.total_seconds(), pooler=config.pooler,
                  listen_dsn=config.listener_url)
    wakeups = Wakeups(store, deaf_poll_interval=config.deaf_poll_interval.total_seconds(),
                      on_listening=metrics.listener_listening)
    ledger = Ledger(store, clock, config.ledger_retention)
    spanner = None
    sampler: asyncio.Task[None] | None = None
    endpoint: Endpoint | None = None
    dashboard: Dashboard | None = None
    ui_port: int | None = None
    expiry: Expiry | None = None
    await store.open()
    try:
        applied = await store.migrate()
        if applied:
            logger.info("applied migrations %s", applied)
        limits = config.limits
        wakeups.start()
        catalog = Catalog(store, limits, ddl_lock_timeout=config.ddl_lock_timeout)
        holdings = Holdings()  # which stream's leases an ack or renewal through this server settled
        receiver = Receiver(store, wakeups, clock, limits, config.poll_interval, metrics, holdings)
        # Whichever front-end (or server) drops a queue: end its streams here at once, and
        # forget its counters, so that a queue created again under its name starts at zero.
        catalog.on_gone(receiver.queue_dropped)
        catalog.on_gone(metrics.forget_queue)
        catalog.on_changed(wakeups.wake_streams)  # a paused stream finds nothing; a resumed one leases now
        ledger.start()
        mutator = Mutator(store, limits, clock, wakeups,
                          commit_groups_in_flight=config.commit_groups_in_flight, metrics=metrics,
                          holdings=holdings, faults=FaultInjector.parse(config.inject_faults))

        # Timing outermost, so refused calls are timed too; without a token file no
        # authorization interceptor at all (nothing to pay for).
        # Then the decode guard, so an undecodable request is refused before authorization sees it.
        interceptors = [rpc_timing, DecodeGuard()]
        if tokens is not None:
            interceptors.append(auth.Authorizer(tokens, authorization_rules(), clock))
        # SO_REUSEPORT (gRPC's default) only for --workers children, which share their port: a
        # plain server refuses a port another process listens on instead of silently sharing it.
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 16 * 1024 * 1024),
                                          ("grpc.so_reuseport", 1 if config.worker else 0)],
                                 interceptors=interceptors)
        operator = Operator(catalog, store, clock, metrics.rates, codec.key_from_json)
        expiry = Expiry(catalog, store, clock, metrics)
        expiry.start()
        exactly_once = ExactlyOnce(store, mutator, clock)
        queue_pb2_grpc.add_QueueServiceServicer_to_server(QueueService(
            catalog, mutator, receiver, exactly_once, operator), server)
        # -- Spanner's own API (google.spanner.v1 and its admin services) on the same port: the
        # second front-end, see docs/spanner-compat.md. None without google-cloud-spanner.
        spanner = spanner_front_end.create(catalog, mutator, receiver, exactly_once, operator, Records(store),
                                           store, clock,
                                           pool_max_size=config.pool_max_size,
                                           idle_timeout=config.spanner_transaction_idle_timeout,
                                           max_lifetime=config.spanner_transaction_max_lifetime)
        if spanner is not None:
            spanner.add_to(server)
            spanner.start()
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            [SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
            server,
        )
        try:
            if config.tls_cert and config.tls_key:
                with open(config.tls_key, "rb") as key, open(config.tls_cert, "rb") as cert:
                    credentials = grpc.ssl_server_credentials([(key.read(), cert.read())])
                port = server.add_secure_port(config.listen, credentials)
            else:
                port = server.add_insecure_port(config.listen)
        except RuntimeError as exc:  # grpc's "Failed to bind": in use, or not an address of this host
            raise ConfigError(f"cannot serve on {config.listen}: {exc}; give --listen another HOST:PORT") from exc
        try:
            endpoint = metrics_endpoint.serve(config.metrics_listen, interval=config.metrics_interval.total_seconds(),
                                              counters=metrics,
                                              queue_gauges=lambda **kw: store.queue_gauges(**kw),  # read at each scrape
                                              pool_stats=store.pool_stats, streams=receiver.streams_by_queue,
                                              clock=clock)
        except ConfigError as exc:
            if "metrics" not in config.default_listens:
                raise
            logger.warning("%s; serving without metrics", exc)  # the default port, taken: gRPC goes on
        if config.worker:
            sampler = metrics_endpoint.sample_to_files(registry, store.pool_stats, receiver.streams_by_queue)
        ui_address = parse_listen(config.ui_listen, "dashboard")
        if ui_address is not None:
            dashboard = Dashboard(catalog, operator, receiver, metrics.rates, tokens, access.rule, clock,
                                  config.ui_allowed_hosts, exactly_once=exactly_once,
                                  server=f"{config.listen.rsplit(':', 1)[0]}:{port} (pid {os.getpid()})")
            try:
                ui_port = await dashboard.start(*ui_address, _tls_context(config))
            except OSError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)  # asyncio's repeats the address
                problem = (f"cannot serve the dashboard on {config.ui_listen}: {reason}; "
                           "give --ui-listen another HOST:PORT, or off")
                if "ui" not in config.default_listens:
                    raise ConfigError(problem) from exc
                logger.warning("%s; serving without the dashboard", problem)  # the default port, taken
                dashboard = None
        await server.start()
    except BaseException:  # undo what started, in reverse, so nothing runs on a closed pool
        if dashboard is not None:
            await dashboard.stop()
        if sampler is not None:
            sampler.cancel()
        await _stop_endpoint(endpoint)
        if spanner is not None:
            await spanner.stop()
        await ledger.stop()
        if expiry is not None:
            await expiry.stop()
        await wakeups.stop()
        await store.close()
        raise
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    logger.info("spanq serving on %s (port %d)", config.listen, port)
    if tokens is not None:
        logger.info("authentication on: %d token(s) from %s", len(tokens.by_digest), config.auth_file)
    metrics_port = None if endpoint is None else endpoint.port
    if metrics_port is not None:
        logger.info("metrics at http://%s/metrics (port %d)", config.metrics_listen, metrics_port)
    if ui_port is not None:
        logger.info("dashboard at %s://%s/ (port %d)", "https" if config.tls_cert and config.tls_key else "http",
                    config.ui_listen, ui_port)
    return Running(config, server, port, store, wakeups, receiver, ledger, health_servicer, mutator, metrics,
                   rpc_timing, endpoint, metrics_port, spanner=spanner, sampler=sampler, dashboard=dashboard,
                   ui_port=ui_port, expiry=expiry)


async def _stop_endpoint(endpoint: Endpoint | None) -> None:
    """Stops the /metrics endpoint off the event loop: it waits for the serving thread,
    which may be waiting for the loop (a scrape's queries)."""
    if endpoint is not None:
        await asyncio.to_thread(endpoint.stop)


def authorization_rules() -> dict[str, auth.Rule | auth.StreamRule]:
    """What each method of both front-ends needs of a token (health and reflection are open)."""
    return {**access.RULES, **spanner_front_end.access_rules()}


def _tls_context(config: Config) -> ssl.SSLContext | None:
    """The gRPC port's certificate and key, for the dashboard too (None: plaintext)."""
    if not (config.tls_cert and config.tls_key):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config.tls_cert, config.tls_key)
    return context


async def serve(config: Config, *, stop: asyncio.Event | None = None,
                started: Callable[[Running], None] | None = None) -> None:
    """Serves until SIGINT or SIGTERM (or ``stop`` is set), then shuts down gracefully.
    ``started`` is called once serving."""
    running = await start(config)
    if started is not None:
        started(running)
    # What start() built lives as long as the process: keep it out of the cyclic GC's
    # full collections, which otherwise scan it every ~15 s under load, for 15-40 ms
    # (the largest stalls of the 500 msgs/s latency bench; its max fell from ~40 to ~20 ms).
    gc.freeze()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logger.info("shutting down")
    await running.stop()
