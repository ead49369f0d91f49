"""The ``spanq`` command: ``spanq serve``, and ``spanq token`` to mint a bearer token.
Every other command (queues, stats, peek, send, ...) is a client of a server:
admin_cli.py."""

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from datetime import timedelta

from .config import Config, ConfigError, Limits


UI_LISTEN = "localhost:9465"
"""`spanq serve` serves the dashboard here unless told otherwise (Config's own default is off)."""
LOG_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"


def parse_config(argv: list[str], environ: dict[str, str]) -> Config:
    from . import server_extra  # noqa: F401, PLC0415  # first: says what to install without the server extra
    from . import auth  # noqa: PLC0415  # the server's, not the client commands'
    from .metrics.endpoint import parse_listen  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="spanq", description="Spanner's queues on PostgreSQL, over gRPC.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the spanq.v1 gRPC API")
    default = Config()
    limits = Limits()
    serve.add_argument("--database-url", default=environ.get("DATABASE_URL"),
                       help="PostgreSQL URL (env DATABASE_URL); without it, an embedded PostgreSQL in --data-dir")
    serve.add_argument("--listen", default=environ.get("SPANQ_LISTEN", default.listen),
                       help=f"host:port to serve on (env SPANQ_LISTEN; default {default.listen})")
    serve.add_argument("--data-dir", default=environ.get("SPANQ_DATA_DIR", default.data_dir),
                       help=f"embedded PostgreSQL's data folder (env SPANQ_DATA_DIR; default {default.data_dir})")
    serve.add_argument("--tls-cert", default=environ.get("SPANQ_TLS_CERT"), help="PEM certificate chain")
    serve.add_argument("--tls-key", default=environ.get("SPANQ_TLS_KEY"), help="PEM private key")
    serve.add_argument("--insecure", action="store_true", help="allow plaintext on a non-loopback address")
    serve.add_argument("--auth-file", default=environ.get("SPANQ_AUTH_FILE") or None,
                       help="TOML token file: every call then needs 'authorization: Bearer <token>' with the "
                            "privilege it uses (env SPANQ_AUTH_FILE; default: no authentication; see "
                            "docs/operations.md)")
    serve.add_argument("--metrics-listen", default=environ.get("SPANQ_METRICS_LISTEN"),
                       help=f"host:port serving Prometheus metrics at /metrics, or 'off' (env SPANQ_METRICS_LISTEN; "
                            f"default {default.metrics_listen})")
    serve.add_argument("--ui-listen", default=environ.get("SPANQ_UI_LISTEN"),
                       help=f"host:port serving the web dashboard, or 'off' (env SPANQ_UI_LISTEN; default {UI_LISTEN}; "
                            "TLS and tokens as for gRPC)")
    serve.add_argument("--ui-allowed-hosts", default=environ.get("SPANQ_UI_ALLOWED_HOSTS", ""), metavar="NAMES",
                       help="comma-separated host names or IP addresses the dashboard also answers for, beside "
                            "its listen address and localhost: other Host headers are refused against DNS "
                            "rebinding (env SPANQ_UI_ALLOWED_HOSTS)")
    serve.add_argument("--metrics-interval", type=float, default=default.metrics_interval.total_seconds(),
                       help=f"seconds: /metrics is computed at most once per interval, scrapes in between get "
                            f"that copy (default {default.metrics_interval.total_seconds():g})")
    serve.add_argument("--max-queues", type=int, default=limits.max_queues,
                       help=f"queues in the database; CreateQueue past it is RESOURCE_EXHAUSTED "
                            f"(default {limits.max_queues})")
    serve.add_argument("--max-streams-per-queue", type=int, default=limits.max_streams_per_queue,
                       help=f"open Receive streams on one queue, counted per server; one more is "
                            f"RESOURCE_EXHAUSTED (default {limits.max_streams_per_queue})")
    serve.add_argument("--max-payload-bytes", type=int, default=limits.max_payload_bytes,
                       help=f"largest payload of one message; a Send with a larger one is RESOURCE_EXHAUSTED "
                            f"and stores nothing (default {limits.max_payload_bytes})")
    serve.add_argument("--max-response-bytes", type=int, default=limits.max_response_bytes,
                       help=f"largest response: a leased batch is split over Receive responses of at most this, "
                            f"a mutating RPC whose response would be larger is refused before it commits "
                            f"(default {limits.max_response_bytes})")
    serve.add_argument("--max-connections", type=int, default=default.max_connections,
                       help=f"database connections in all: one listens for wake-ups, the rest are a pool "
                            f"(default {default.max_connections}, at least 2)")
    serve.add_argument("--workers", type=int, default=environ.get("SPANQ_WORKERS", str(default.workers)),
                       help=f"server processes on the one port, each with its share of --max-connections "
                            f"(env SPANQ_WORKERS; default {default.workers}); see docs/operations.md")
    serve.add_argument("--poll-interval", type=float, default=default.poll_interval.total_seconds(),
                       help="seconds between an idle stream's fallback polls, which cover lost wake-ups "
                            f"(default {default.poll_interval.total_seconds():g})")
    serve.add_argument("--deaf-poll-interval", type=float, default=default.deaf_poll_interval.total_seconds(),
                       help="seconds between polls of each queue with waiting streams while the wake-up listener "
                            "cannot hear notifications, as behind a transaction-mode pooler (default "
                            f"{default.deaf_poll_interval.total_seconds():g})")
    serve.add_argument("--reconnect-max-delay", type=float, default=default.reconnect_max_delay.total_seconds(),
                       help="seconds: the longest wait between attempts to replace a lost database connection "
                            f"(default {default.reconnect_max_delay.total_seconds():g}); see docs/operations.md, "
                            "High availability")
    serve.add_argument("--pooler", choices=("auto", "session", "transaction"),
                       default=environ.get("SPANQ_POOLER", default.pooler),
                       help="the connection pooler between spanq and PostgreSQL, if any (env SPANQ_POOLER; default "
                            "auto: one found is taken for transaction mode, without server-side prepared statements)")
    serve.add_argument("--listener-url", default=environ.get("SPANQ_LISTENER_URL") or None,
                       help="PostgreSQL URL for the wake-up listener alone (env SPANQ_LISTENER_URL; default "
                            "--database-url): behind a transaction-mode pooler, a direct URL lets it LISTEN")
    serve.add_argument("--spanner-transaction-idle-timeout", type=float,
                       default=default.spanner_transaction_idle_timeout.total_seconds(),
                       help="seconds a Spanner front-end read-write transaction may sit idle before it is rolled "
                            "back (its next use is ABORTED)")
    serve.add_argument("--spanner-transaction-max-lifetime", type=float,
                       default=default.spanner_transaction_max_lifetime.total_seconds(),
                       help="seconds a Spanner front-end read-write transaction may stay open, however busy, "
                            "before it is rolled back (its next use is ABORTED)")
    serve.add_argument("--ddl-lock-timeout", type=float, default=default.ddl_lock_timeout.total_seconds(),
                       help="seconds queue DDL waits at most for a table another open transaction holds, then "
                            f"fails ABORTED (default {default.ddl_lock_timeout.total_seconds():g})")
    serve.add_argument("--inject-faults", default=environ.get("SPANQ_INJECT_FAULTS", ""),
                       help="fault injection SPEC name=probability,... (env SPANQ_INJECT_FAULTS); off by default")
    serve.add_argument("--log-level", default=environ.get("SPANQ_LOG_LEVEL", "INFO"),
                       help="DEBUG, INFO, WARNING or ERROR (env SPANQ_LOG_LEVEL; default INFO)")
    token = commands.add_parser("token", help="print a fresh random bearer token and its entry for --auth-file")
    token.add_argument("name", nargs="?", default="NAME", help="the token's name in the file (default NAME)")
    args = parser.parse_args(argv)
    if args.command == "token":
        print(auth.mint(args.name), end="")
        parser.exit()
    # Not given (flag or environment): the default, whose port may be taken without stopping the server.
    default_listens = frozenset(name for name, value in (("metrics", args.metrics_listen), ("ui", args.ui_listen))
                                if value is None)
    args.metrics_listen = default.metrics_listen if args.metrics_listen is None else args.metrics_listen
    args.ui_listen = UI_LISTEN if args.ui_listen is None else args.ui_listen
    if args.auth_file:
        try:
            auth.load(args.auth_file)
        except auth.AuthFileError as exc:
            parser.error(str(exc))
    try:
        parse_listen(args.metrics_listen)
        parse_listen(args.ui_listen, "dashboard")
    except ValueError as exc:
        parser.error(str(exc))
    from .dashboard.http import split_host  # noqa: PLC0415  # serve's alone, not every client command's

    allowed_hosts = []
    for entry in filter(None, (e.strip() for e in args.ui_allowed_hosts.split(","))):
        host = split_host(entry)
        if host is None or host[1] is not None:
            parser.error(f"--ui-allowed-hosts: {entry!r} is not a host name or IP address (give names without a port)")
        allowed_hosts.append(host[0])
    if min(args.spanner_transaction_idle_timeout, args.spanner_transaction_max_lifetime) <= 0:
        parser.error("--spanner-transaction-idle-timeout and --spanner-transaction-max-lifetime must be positive")
    if args.ddl_lock_timeout <= 0:
        parser.error("--ddl-lock-timeout must be more than 0 seconds")
    if args.metrics_interval < 0:
        parser.error("--metrics-interval must be 0 or more seconds")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if min(args.deaf_poll_interval, args.reconnect_max_delay) <= 0:
        parser.error("--deaf-poll-interval and --reconnect-max-delay must be positive")
    if args.max_connections < 2:
        parser.error("--max-connections must be at least 2: one to listen for wake-ups, one for the pool")
    try:
        limits = Limits(
            max_queues=args.max_queues,
            max_streams_per_queue=args.max_streams_per_queue,
            max_payload_bytes=args.max_payload_bytes,
            max_response_bytes=args.max_response_bytes,
        )
    except ConfigError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    config = dataclasses.replace(
        default,
        database_url=args.database_url or None,
        listen=args.listen,
        data_dir=args.data_dir,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        insecure=args.insecure,
        auth_file=args.auth_file,
        metrics_listen=args.metrics_listen,
        ui_listen=args.ui_listen,
        ui_allowed_hosts=tuple(allowed_hosts),
        default_listens=default_listens,
        metrics_interval=timedelta(seconds=args.metrics_interval),
        limits=limits,
        max_connections=args.max_connections,
        poll_interval=timedelta(seconds=args.poll_interval),
        deaf_poll_interval=timedelta(seconds=args.deaf_poll_interval),
        reconnect_max_delay=timedelta(seconds=args.reconnect_max_delay),
        pooler=args.pooler,
        listener_url=args.listener_url,
        spanner_transaction_idle_timeout=timedelta(seconds=args.spanner_transaction_idle_timeout),
        spanner_transaction_max_lifetime=timedelta(seconds=args.spanner_transaction_max_lifetime),
        ddl_lock_timeout=timedelta(seconds=args.ddl_lock_timeout),
        inject_faults=args.inject_faults,
        workers=args.workers,
    )
    if config.workers > 1:
        from .workers import connections_per_worker, supervisor_connections

        if min(connections_per_worker(config)) < 2:
            parser.error(f"--max-connections {config.max_connections} is too few for --workers {config.workers}: "
                         f"each worker needs 2 (a wake-up listener and a pool of one), and the supervisor "
                         f"{supervisor_connections(config)} for the queue gauges; give at least "
                         f"{2 * config.workers + supervisor_connections(config)}")
    return config


SERVER_COMMANDS = ("serve", "token")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in SERVER_COMMANDS:
        from .admin_cli import run  # noqa: PLC0415  # the client commands (click), and `spanq --help`

        run(argv)
    try:
        config = parse_config(argv, dict(os.environ))
    except ModuleNotFoundError as exc:  # `pip install spanq` alone: the client commands work, serve does not
        sys.exit(f"spanq: `spanq {argv[0]}` needs the server: {exc}")
    if config.database_url is None:
        from .embedded import start_embedded

        config = dataclasses.replace(config, database_url=start_embedded(config.data_dir))
    from .server import serve
    from .workers import supervise

    try:
        if config.workers > 1:
            sys.exit(asyncio.run(supervise(config)))
        asyncio.run(serve(config))
    except KeyboardInterrupt:
        pass
    except ConfigError as exc:
        sys.exit(f"spanq: {exc}")


if __name__ == "__main__":
    main()
