"""``spanq serve`` and ``spanq token``: the server's commands.

Every option's default is Config's (config.py, the one place), and the options named so read
an environment variable as before. Nothing of the server is imported until one of these
commands runs: `pip install spanq` alone runs the client commands, and these say what to
install (ServerCommand). ``serve`` parses its options into a Config and returns it; the
entry point (cli/__init__.py) starts the server with it (``run``), so that parse_config
can read a command line without starting anything."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
import types
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

import click

from ..ground.config import LOG_FORMAT, LOG_LEVEL, SERVE_UI_LISTEN, Config, ConfigError, Limits

F = TypeVar("F", bound=Callable[..., Any])


class NeedsServer(click.ClickException):
    """`pip install spanq` alone: one line, ``spanq: `spanq serve` needs the server: ...``, exit 1."""

    def show(self, file: Any = None) -> None:
        click.echo(f"spanq: {self.format_message()}", err=True)


class ServerCommand(click.Command):
    """A command of the server's: the server extra is checked before its options are read, so
    that ``spanq serve --help`` says what to install too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            from .. import server_extra  # noqa: F401, PLC0415  # says what to install without the server extra
        except ModuleNotFoundError as exc:
            raise NeedsServer(f"`spanq {ctx.info_name}` needs the server: {exc}") from None
        return super().parse_args(ctx, args)


class Environment(dict[str, str]):
    """The environment the options read (the context's obj): os.environ's copy, or parse_config's."""


class ServeOption(click.Option):
    """Reads its environment variable from the context's Environment, an empty value as given (as
    'off' does, SPANQ_METRICS_LISTEN= turns metrics off), where click's own would skip it."""

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        environ = ctx.find_object(Environment)
        if not isinstance(self.envvar, str):
            return None
        return (os.environ if environ is None else environ).get(self.envvar)


def option(flag: str, env: str | None = None, **kwargs: Any) -> Callable[[F], F]:
    """A serve option, named in its help as argparse named it (``--max-queues MAX_QUEUES``)."""
    if not kwargs.get("is_flag") and not isinstance(kwargs.get("type"), click.Choice):
        kwargs.setdefault("metavar", flag[2:].upper().replace("-", "_"))
    return click.option(flag, cls=ServeOption, envvar=env, **kwargs)


default = Config()
limits = Limits()


@click.command("serve", cls=ServerCommand, short_help="serve the spanq.v1 gRPC API",
               help="Serve the spanq.v1 gRPC API.")
@option("--database-url", "DATABASE_URL",
        help="PostgreSQL URL (env DATABASE_URL); without it, an embedded PostgreSQL in --data-dir")
@option("--listen", "SPANQ_LISTEN", default=default.listen,
        help=f"host:port to serve on (env SPANQ_LISTEN; default {default.listen})")
@option("--data-dir", "SPANQ_DATA_DIR", default=default.data_dir,
        help=f"embedded PostgreSQL's data folder (env SPANQ_DATA_DIR; default {default.data_dir})")
@option("--tls-cert", "SPANQ_TLS_CERT", help="PEM certificate chain")
@option("--tls-key", "SPANQ_TLS_KEY", help="PEM private key")
@option("--insecure", is_flag=True, help="allow plaintext on a non-loopback address")
@option("--auth-file", "SPANQ_AUTH_FILE",
        help="TOML token file: every call then needs 'authorization: Bearer <token>' with the "
             "privilege it uses (env SPANQ_AUTH_FILE; default: no authentication; see "
             "docs/operations.md)")
@option("--metrics-listen", "SPANQ_METRICS_LISTEN",
        help=f"host:port serving Prometheus metrics at /metrics, or 'off' (env SPANQ_METRICS_LISTEN; "
             f"default {default.metrics_listen})")
@option("--ui-listen", "SPANQ_UI_LISTEN",
        help=f"host:port serving the web dashboard, or 'off' (env SPANQ_UI_LISTEN; default {SERVE_UI_LISTEN}; "
             "TLS and tokens as for gRPC)")
@option("--ui-allowed-hosts", "SPANQ_UI_ALLOWED_HOSTS", default="", metavar="NAMES",
        help="comma-separated host names or IP addresses the dashboard also answers for, beside "
             "its listen address and localhost: other Host headers are refused against DNS "
             "rebinding (env SPANQ_UI_ALLOWED_HOSTS)")
@option("--metrics-interval", type=float, default=default.metrics_interval.total_seconds(),
        help=f"seconds: /metrics is computed at most once per interval, scrapes in between get "
             f"that copy (default {default.metrics_interval.total_seconds():g})")
@option("--max-queues", type=int, default=limits.max_queues,
        help=f"queues in the database; CreateQueue past it is RESOURCE_EXHAUSTED "
             f"(default {limits.max_queues})")
@option("--max-streams-per-queue", type=int, default=limits.max_streams_per_queue,
        help=f"open Receive streams on one queue, counted per server; one more is "
             f"RESOURCE_EXHAUSTED (default {limits.max_streams_per_queue})")
@option("--max-payload-bytes", type=int, default=limits.max_payload_bytes,
        help=f"largest payload of one message; a Send with a larger one is RESOURCE_EXHAUSTED "
             f"and stores nothing (default {limits.max_payload_bytes})")
@option("--max-response-bytes", type=int, default=limits.max_response_bytes,
        help=f"largest response: a leased batch is split over Receive responses of at most this, "
             f"a mutating RPC whose response would be larger is refused before it commits "
             f"(default {limits.max_response_bytes})")
@option("--max-connections", type=int, default=default.max_connections,
        help=f"database connections in all: one listens for wake-ups, the rest are a pool "
             f"(default {default.max_connections}, at least 2)")
@option("--workers", "SPANQ_WORKERS", type=int, default=default.workers,
        help=f"server processes on the one port, each with its share of --max-connections "
             f"(env SPANQ_WORKERS; default {default.workers}); see docs/operations.md")
@option("--poll-interval", type=float, default=default.poll_interval.total_seconds(),
        help="seconds between an idle stream's fallback polls, which cover lost wake-ups "
             f"(default {default.poll_interval.total_seconds():g})")
@option("--deaf-poll-interval", type=float, default=default.deaf_poll_interval.total_seconds(),
        help="seconds between polls of each queue with waiting streams while the wake-up listener "
             "cannot hear notifications, as behind a transaction-mode pooler (default "
             f"{default.deaf_poll_interval.total_seconds():g})")
@option("--reconnect-max-delay", type=float, default=default.reconnect_max_delay.total_seconds(),
        help="seconds: the longest wait between attempts to replace a lost database connection "
             f"(default {default.reconnect_max_delay.total_seconds():g}); see docs/operations.md, "
             "High availability")
@option("--pooler", "SPANQ_POOLER", type=click.Choice(("auto", "session", "transaction")), default=default.pooler,
        help="the connection pooler between spanq and PostgreSQL, if any (env SPANQ_POOLER; default "
             "auto: one found is taken for transaction mode, without server-side prepared statements)")
@option("--listener-url", "SPANQ_LISTENER_URL",
        help="PostgreSQL URL for the wake-up listener alone (env SPANQ_LISTENER_URL; default "
             "--database-url): behind a transaction-mode pooler, a direct URL lets it LISTEN")
@option("--spanner-transaction-idle-timeout", type=float,
        default=default.spanner_transaction_idle_timeout.total_seconds(),
        help="seconds a Spanner front-end read-write transaction may sit idle before it is rolled "
             "back (its next use is ABORTED)")
@option("--spanner-transaction-max-lifetime", type=float,
        default=default.spanner_transaction_max_lifetime.total_seconds(),
        help="seconds a Spanner front-end read-write transaction may stay open, however busy, "
             "before it is rolled back (its next use is ABORTED)")
@option("--ddl-lock-timeout", type=float, default=default.ddl_lock_timeout.total_seconds(),
        help="seconds queue DDL waits at most for a table another open transaction holds, then "
             f"fails ABORTED (default {default.ddl_lock_timeout.total_seconds():g})")
@option("--inject-faults", "SPANQ_INJECT_FAULTS", default=default.inject_faults,
        help="fault injection SPEC name=probability,... (env SPANQ_INJECT_FAULTS); off by default")
@option("--log-level", "SPANQ_LOG_LEVEL", default=LOG_LEVEL,
        help=f"DEBUG, INFO, WARNING or ERROR (env SPANQ_LOG_LEVEL; default {LOG_LEVEL})")
def serve(**options: Any) -> Config:
    from ..edge import auth  # noqa: PLC0415  # the server's, not the client commands'
    from ..scrape.endpoint import parse_listen  # noqa: PLC0415

    args = types.SimpleNamespace(**options)
    # Not given (flag or environment): the default, whose port may be taken without stopping the server.
    default_listens = frozenset(name for name, value in (("metrics", args.metrics_listen), ("ui", args.ui_listen))
                                if value is None)
    args.metrics_listen = default.metrics_listen if args.metrics_listen is None else args.metrics_listen
    args.ui_listen = SERVE_UI_LISTEN if args.ui_listen is None else args.ui_listen
    args.auth_file = args.auth_file or None
    args.listener_url = args.listener_url or None
    if args.auth_file:
        try:
            auth.load(args.auth_file)
        except auth.AuthFileError as exc:
            raise click.UsageError(str(exc)) from None
    try:
        parse_listen(args.metrics_listen)
        parse_listen(args.ui_listen, "dashboard")
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    from ..dashboard.http import split_host  # noqa: PLC0415  # serve's alone, not every client command's

    allowed_hosts = []
    for entry in filter(None, (e.strip() for e in args.ui_allowed_hosts.split(","))):
        host = split_host(entry)
        if host is None or host[1] is not None:
            raise click.UsageError(f"--ui-allowed-hosts: {entry!r} is not a host name or IP address "
                                   "(give names without a port)")
        allowed_hosts.append(host[0])
    if min(args.spanner_transaction_idle_timeout, args.spanner_transaction_max_lifetime) <= 0:
        raise click.UsageError("--spanner-transaction-idle-timeout and --spanner-transaction-max-lifetime "
                               "must be positive")
    if args.ddl_lock_timeout <= 0:
        raise click.UsageError("--ddl-lock-timeout must be more than 0 seconds")
    if args.metrics_interval < 0:
        raise click.UsageError("--metrics-interval must be 0 or more seconds")
    if args.workers < 1:
        raise click.UsageError("--workers must be at least 1")
    if min(args.deaf_poll_interval, args.reconnect_max_delay) <= 0:
        raise click.UsageError("--deaf-poll-interval and --reconnect-max-delay must be positive")
    if args.max_connections < 2:
        raise click.UsageError("--max-connections must be at least 2: one to listen for wake-ups, one for the pool")
    try:
        given_limits = Limits(
            max_queues=args.max_queues,
            max_streams_per_queue=args.max_streams_per_queue,
            max_payload_bytes=args.max_payload_bytes,
            max_response_bytes=args.max_response_bytes,
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
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
        limits=given_limits,
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
        from ..workers import connections_per_worker, supervisor_connections  # noqa: PLC0415

        if min(connections_per_worker(config)) < 2:
            raise click.UsageError(
                f"--max-connections {config.max_connections} is too few for --workers {config.workers}: "
                f"each worker needs 2 (a wake-up listener and a pool of one), and the supervisor "
                f"{supervisor_connections(config)} for the queue gauges; give at least "
                f"{2 * config.workers + supervisor_connections(config)}")
    return config


@click.command("token", cls=ServerCommand, short_help="print a fresh random bearer token and its entry for --auth-file",
               help="Print a fresh random bearer token and its entry for --auth-file; NAME is the token's name in "
                    "the file (default NAME).")
@click.argument("name", default="NAME")
def token(name: str) -> None:
    from ..edge import auth  # noqa: PLC0415  # the server's, not the client commands'

    click.echo(auth.mint(name), nl=False)


def run(config: Config) -> None:
    """Starts the server ``serve`` parsed (the embedded PostgreSQL first, without a database URL)
    and returns once it has stopped."""
    if config.database_url is None:
        from ..embedded import start_embedded  # noqa: PLC0415

        config = dataclasses.replace(config, database_url=start_embedded(config.data_dir))
    from ..server import serve as serve_config  # noqa: PLC0415
    from ..workers import supervise  # noqa: PLC0415

    try:
        if config.workers > 1:
            sys.exit(asyncio.run(supervise(config)))
        asyncio.run(serve_config(config))
    except KeyboardInterrupt:
        pass
    except ConfigError as exc:
        sys.exit(f"spanq: {exc}")
