"""Server configuration: one frozen dataclass, from flags and environment."""

import dataclasses
from datetime import timedelta


class ConfigError(ValueError):
    """A setting the server cannot start with; the CLI prints it, without a traceback."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Spanner's limits, configurable. Over a limit: RESOURCE_EXHAUSTED, nothing stored."""

    max_streams_per_queue: int = 1000
    """Concurrent Receive streams on one queue, per server."""
    max_queues: int = 100
    """Queues per database."""
    max_payload_bytes: int = 1024 * 1024
    """Largest payload of one message."""
    max_messages_per_request: int = 1000
    """Messages in one Send, acks in one Ack, tokens in one RenewLease; and all of
    them together in one Commit."""
    max_response_bytes: int = 4 * 1024 * 1024 - 64 * 1024
    """Largest response: a leased batch goes out in as many Receive responses as it
    needs, and a mutating RPC whose response would be larger is refused before it
    commits, never sent after. Below gRPC's default 4 MiB receive limit, which every
    default client keeps."""

    def __post_init__(self) -> None:
        # A message that fits no response is never delivered: a payload at the limit must fit
        # one, in base64 (BYTES) with its key, lease token and timestamps.
        least = self.max_payload_bytes * 4 // 3 + RESPONSE_HEADROOM
        if self.max_response_bytes < least:
            raise ConfigError(
                f"--max-response-bytes {self.max_response_bytes} cannot carry a payload of --max-payload-bytes "
                f"{self.max_payload_bytes}: give at least {least}, or lower --max-payload-bytes"
            )


RESPONSE_HEADROOM = 4096
"""Bytes of a Receive response beyond a message's base64 payload: its key, lease token, timestamps."""

SERVE_UI_LISTEN = "localhost:9465"
"""``spanq serve`` serves the dashboard here unless told otherwise (Config's own default is off)."""
LOG_LEVEL = "INFO"
"""``spanq serve``'s logging level unless told otherwise (--log-level, SPANQ_LOG_LEVEL)."""
LOG_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"
"""How ``spanq serve`` logs to stderr (each worker adds ``worker=N``)."""


@dataclasses.dataclass(frozen=True)
class Config:
    database_url: str | None = None
    """PostgreSQL to use; None starts the embedded PostgreSQL in data_dir."""
    listen: str = "localhost:50051"
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure: bool = False
    """Allow plaintext on a non-loopback address (the gRPC port's and the metrics')."""
    auth_file: str | None = None
    """TOML token file (docs/operations.md): with one, every call needs a bearer token
    with the privilege it uses on its queue; None: no authentication."""
    metrics_listen: str = "localhost:9464"
    """host:port serving Prometheus metrics at /metrics (port 0: any free port);
    "" or "off": no metrics endpoint."""
    metrics_interval: timedelta = timedelta(seconds=5)
    """/metrics is rendered (the queue gauges' statement run) at most once per interval;
    scrapes in between get that copy. 0: at every scrape."""
    ui_listen: str = "off"
    """host:port serving the web dashboard (spanq_server.dashboard; port 0: any free port);
    "" or "off": none. ``spanq serve`` defaults to SERVE_UI_LISTEN."""
    default_listens: frozenset[str] = frozenset()
    """Which of "metrics" and "ui" are at ``spanq serve``'s default address, not asked for: a port
    another process holds there costs that endpoint alone, with a warning. An address given
    (flag, environment) that cannot bind stops the server."""
    ui_allowed_hosts: tuple[str, ...] = ()
    """Host names (or IP addresses) the dashboard answers for beside its listen address,
    localhost, 127.0.0.1 and ::1; a request naming another Host is refused (421), so that a
    DNS-rebinding page cannot reach it."""
    data_dir: str = ".spanq"
    """Where the embedded PostgreSQL keeps its data (kept across restarts)."""
    limits: Limits = dataclasses.field(default_factory=Limits)
    pool_min_size: int = 2
    max_connections: int = 10
    """Database connections in all: the one wake-up listener and a pool of the rest.
    Receive streams hold none while they wait, so 1,000 streams fit in 10."""
    poll_interval: timedelta = timedelta(seconds=5)
    """How often an idle stream checks its queue when no wake-up arrives: the
    fallback for lost notifications, and the only wake-up where LISTEN is unavailable."""
    deaf_poll_interval: timedelta = timedelta(seconds=0.25)
    """How often one waiting stream of each queue looks for messages while the wake-up
    listener cannot hear notifications (a transaction-mode pooler): the longest a message
    sent through another server, or by SQL, then waits for a stream already waiting."""
    reconnect_max_delay: timedelta = timedelta(seconds=0.5)
    """The longest wait between attempts to replace a lost database connection (the pool's and
    the listener's): after an outage of any length, spanq serves again within about this
    long of the database accepting writes."""
    listener_url: str | None = None
    """A PostgreSQL URL for the one wake-up listener alone (None: database_url): behind a
    transaction-mode pooler, a direct URL lets it LISTEN, so streams need not poll."""
    pooler: str = "auto"
    """What sits between spanq and PostgreSQL: "auto" (a pooler found is taken for a
    transaction-mode one: no server-side prepared statements), "session", or "transaction"."""
    shutdown_grace: timedelta = timedelta(seconds=5)
    ddl_lock_timeout: timedelta = timedelta(seconds=5)
    """The longest queue DDL (CreateQueue, DropQueue, CREATE/DROP QUEUE) waits for the
    locks it needs, in all: a table held by another open transaction past it fails
    the DDL with ABORTED, and nothing changes (docs/operations.md)."""
    ledger_retention: timedelta = timedelta(hours=24)
    """How long the commit ledger remembers a request_id."""
    commit_groups_in_flight: int = 2
    """Sends committed at once, each group one transaction; Sends that arrive while
    these commit wait and share the next group (group commit)."""
    spanner_transaction_idle_timeout: timedelta = timedelta(seconds=10)
    """A Spanner front-end read-write transaction idle this long is rolled back
    (Spanner aborts idle transactions after about 10 s); its next use is ABORTED."""
    spanner_transaction_max_lifetime: timedelta = timedelta(seconds=60)
    """A Spanner front-end read-write transaction open this long is rolled back however
    busy it is, so that no caller holds its locks (and DDL on its queues) for ever."""
    workers: int = 1
    """Server processes on one port (``spanq serve --workers N``, workers.py); above 1 a
    supervisor starts them and max_connections is split among them."""
    worker: bool = False
    """This process is one of those: it shares its port (SO_REUSEPORT) and writes its
    metrics to prometheus_client's multiprocess files, which the supervisor serves."""
    inject_faults: str = ""
    """Fault injection SPEC (name=probability,...); empty: off."""

    @property
    def pool_max_size(self) -> int:
        """The pool's share of max_connections: all but the wake-up listener's one."""
        return max(1, self.max_connections - 1)
