"""Queue definitions: validation of names and settings, and the catalog with a short cache."""

import base64
import binascii
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..ground import errors
from ..ground.config import Limits
from ..ground.identifiers import IDENTIFIER, MAX_COLUMN_NAME, MAX_QUEUE_NAME, check_name, check_queue_name, shown  # noqa: F401
from ..ground.model import KEY_TYPES, PAYLOAD_TYPES, CatalogFacts, ColumnType, KeyColumn, QueueDef, QueueDependents
from ..store import DDL_LOCK_TIMEOUT, Store

MAX_KEY_COLUMNS = 16
RESERVED_COLUMNS = frozenset({"payload", "deliver_time"})
SYSTEM_COLUMNS = frozenset({"ctid", "xmin", "xmax", "cmin", "cmax", "tableoid"})
"""PostgreSQL's own columns of every table: no other column may take their names."""

DEFAULT_LEASE = timedelta(seconds=10)
MIN_LEASE = timedelta(seconds=1)
MAX_LEASE = timedelta(hours=12)
DEFAULT_INITIAL_BACKOFF = timedelta(seconds=1)
DEFAULT_MAX_BACKOFF = timedelta(hours=1)
MAX_BACKOFF = timedelta(hours=24)
MAX_DELIVERY_ATTEMPTS = 1000
MIN_RETENTION = timedelta(seconds=1)
MAX_RETENTION = timedelta(days=366)
"""As far ahead as a message may be scheduled: a longer retention would never delete one unsent."""
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
CACHE_SECONDS = 2.0
"""How long a queue definition is trusted before it is read again (another
server may drop and re-create a queue, or update it: the bound of UpdateQueue
for what servers read from their cache)."""
MAX_IN_FLIGHT_PER_KEY = 100_000
MIN_RATE_LIMIT = 0.001
"""Leases per second: the slowest rate (one a quarter of an hour), below which a limit is a pause."""
MAX_RATE_LIMIT = 1_000_000.0
MAX_RATE_LIMIT_BURST = 1_000_000
UPDATABLE = ("lease_duration", "initial_backoff", "max_backoff", "max_delivery_attempts", "dead_letter_queue",
             "disable_send", "disable_delivery", "message_retention_duration", "archive_duration",
             "max_in_flight_per_key", "concurrency_key", "rate_limit", "rate_limit_burst", "enable_message_ordering")
"""The settings UpdateQueue may change (QueueDef's fields; spanq.v1 Queue's alike)."""
FIXED = ("name", "key_columns", "payload_type", "parent_table", "parent_on_delete_cascade", "create_time")
"""What UpdateQueue cannot change: the table's shape (drop and re-create the queue)."""

logger = logging.getLogger(__name__)


def validate(queue: QueueDef) -> QueueDef:
    """Checks a definition to be created; raises InvalidArgument with what to change."""
    check_queue_name(queue.name)
    if len(queue.key_columns) > MAX_KEY_COLUMNS:
        raise errors.InvalidArgument(f"a queue has at most {MAX_KEY_COLUMNS} key columns, got {len(queue.key_columns)}")
    seen = set()
    for column in queue.key_columns:
        check_name(column.name, "key column name", MAX_COLUMN_NAME)
        if column.name in RESERVED_COLUMNS or column.name.startswith("spanq_"):
            raise errors.InvalidArgument(
                f"key column name {column.name!r} is reserved: payload, deliver_time and spanq_* are the queue's own"
            )
        if column.name in SYSTEM_COLUMNS:
            raise errors.InvalidArgument(
                f"key column name {column.name!r} is reserved: PostgreSQL names a system column of every table so "
                f"({', '.join(sorted(SYSTEM_COLUMNS))}); choose another name"
            )
        if column.name in seen:
            raise errors.InvalidArgument(f"key column {column.name!r} appears twice")
        seen.add(column.name)
        if column.type not in KEY_TYPES:
            raise errors.InvalidArgument(
                f"key column {column.name!r} cannot be {column.type.value}; use BOOL, INT64, STRING, BYTES or TIMESTAMP"
            )
        if (column.generated_as is None) != (column.generated_sql is None):
            raise errors.InvalidArgument(f"key column {column.name!r}: a generated key column needs its expression "
                                         "as declared and as PostgreSQL computes it")
    if queue.key_columns and not queue.sent_key_columns:
        raise errors.InvalidArgument("a queue needs a key column that is not generated: a generated one is computed "
                                     "from the others, which sends give")
    if queue.payload_type not in PAYLOAD_TYPES:
        raise errors.InvalidArgument(f"payload_type cannot be {queue.payload_type.value}; use BYTES, STRING or JSON")
    if queue.parent_table is not None:
        check_name(queue.parent_table, "parent_table", MAX_COLUMN_NAME)
        if queue.key_generated:
            raise errors.InvalidArgument("a queue with a parent_table needs key columns that start with the parent's key")
    if not MIN_LEASE <= queue.lease_duration <= MAX_LEASE:
        raise errors.InvalidArgument("lease_duration must be between 1s and 12h")
    if not timedelta(0) <= queue.initial_backoff <= queue.max_backoff <= MAX_BACKOFF:
        raise errors.InvalidArgument("backoff must satisfy 0 <= initial_backoff <= max_backoff <= 24h")
    if (queue.max_delivery_attempts is None) != (queue.dead_letter_queue is None):
        raise errors.InvalidArgument("max_delivery_attempts and dead_letter_queue go together: set both or neither")
    if queue.max_delivery_attempts is not None and not 1 <= queue.max_delivery_attempts <= MAX_DELIVERY_ATTEMPTS:
        raise errors.InvalidArgument(f"max_delivery_attempts must be between 1 and {MAX_DELIVERY_ATTEMPTS}")
    for what, retention in (("message_retention_duration", queue.message_retention_duration),
                            ("archive_duration", queue.archive_duration)):
        if retention is not None and not MIN_RETENTION <= retention <= MAX_RETENTION:
            raise errors.InvalidArgument(f"{what} must be between 1s and 366 days (0: none)")
    if queue.dead_letter_queue is not None:
        check_name(queue.dead_letter_queue, "dead_letter_queue", MAX_QUEUE_NAME)
        if queue.dead_letter_queue == queue.name:
            raise errors.InvalidArgument("a queue cannot be its own dead-letter queue")
    return check_limits(queue)


def check_limits(queue: QueueDef) -> QueueDef:
    """The per-key concurrency and rate limit settings, with their defaults filled in: a
    max_in_flight_per_key without a concurrency_key counts by the first key column."""
    limit = queue.max_in_flight_per_key
    if limit is not None and not 1 <= limit <= MAX_IN_FLIGHT_PER_KEY:
        raise errors.InvalidArgument(
            f"max_in_flight_per_key must be between 1 and {MAX_IN_FLIGHT_PER_KEY} (0: no limit), got {limit}")
    if queue.concurrency_key is not None:
        if limit is None:
            raise errors.InvalidArgument("concurrency_key needs max_in_flight_per_key: set both, or neither")
        names = [c.name for c in queue.key_columns]
        if queue.concurrency_key not in names:
            raise errors.InvalidArgument(
                f"concurrency_key {queue.concurrency_key!r} is not a key column of queue {queue.name!r}; "
                f"name one of {', '.join(names)}")
    elif limit is not None:
        queue = dataclasses.replace(queue, concurrency_key=queue.key_columns[0].name)
    rate = queue.rate_limit
    if rate is not None and not (math.isfinite(rate) and MIN_RATE_LIMIT <= rate <= MAX_RATE_LIMIT):
        raise errors.InvalidArgument(
            f"rate_limit must be between {MIN_RATE_LIMIT:g} and {MAX_RATE_LIMIT:g} messages per second "
            f"(0: no limit), got {rate:g}")
    burst = queue.rate_limit_burst
    if burst is not None:
        if rate is None:
            raise errors.InvalidArgument("rate_limit_burst needs rate_limit: set both, or leave the burst unset")
        if not 1 <= burst <= MAX_RATE_LIMIT_BURST:
            raise errors.InvalidArgument(
                f"rate_limit_burst must be between 1 and {MAX_RATE_LIMIT_BURST} (0: a second's worth of "
                f"rate_limit), got {burst}")
    return queue


def with_changes(current: QueueDef, changes: dict[str, Any]) -> QueueDef:
    """``current`` with UpdateQueue's ``changes``: a limit removed takes its companion
    setting with it unless the update names that too (which check_limits then refuses)."""
    queue = dataclasses.replace(current, **changes)
    if queue.max_in_flight_per_key is None and "concurrency_key" not in changes:
        queue = dataclasses.replace(queue, concurrency_key=None)
    if queue.rate_limit is None and "rate_limit_burst" not in changes:
        queue = dataclasses.replace(queue, rate_limit_burst=None)
    return queue


def check_creatable(queue: QueueDef, facts: CatalogFacts, max_queues: int) -> None:
    """Checks a validated definition against the catalog as it is (the facts are read
    under the catalog lock, in the transaction that creates the queue)."""
    if facts.queues >= max_queues:
        raise errors.LimitExceeded(
            f"the database has {facts.queues} queues, the configured maximum; drop one or raise --max-queues"
        )
    if facts.name_taken:
        raise errors.QueueAlreadyExists(f"a queue, table or type named {queue.name!r} already exists")
    if facts.index_name_taken is not None:
        raise errors.QueueAlreadyExists(
            f"a table or index named {facts.index_name_taken!r} already exists, and queue {queue.name!r} needs "
            "that name for an index of its own; rename or drop that relation, or choose another queue name"
        )
    if queue.parent_table:
        width = facts.parent_key_width
        if width is None:
            raise errors.InvalidArgument(
                f"parent table {queue.parent_table!r} does not exist in schema public or has no primary key"
            )
        if width > len(queue.key_columns):
            raise errors.InvalidArgument(
                f"parent table {queue.parent_table!r} has {width} primary-key columns; the queue's key "
                f"must start with as many columns matching them, but it has {len(queue.key_columns)}"
            )
    check_dead_letter_queue(queue, facts.dead_letter_queue)


def check_dead_letter_queue(queue: QueueDef, target: QueueDef | None) -> None:
    """The queue's dead_letter_queue, if it names one, is ``target`` as the catalog holds it."""
    if queue.dead_letter_queue:
        if target is None:
            raise errors.InvalidArgument(f"dead-letter queue {queue.dead_letter_queue!r} does not exist")
        if target.key_columns != queue.key_columns or target.payload_type != queue.payload_type:
            raise errors.InvalidArgument(
                f"dead-letter queue {queue.dead_letter_queue!r} must have the same key columns and payload "
                "type as the queue (a generated key column generated alike: create it with the same CREATE QUEUE)"
            )


def check_changes(changes: dict[str, Any]) -> None:
    """UpdateQueue's field names: at least one, each one that may change."""
    if not changes:
        raise errors.InvalidArgument(f"update_mask names no field; name one or more of {', '.join(UPDATABLE)}")
    for field in changes:
        if field in FIXED:
            raise errors.InvalidArgument(
                f"{field} cannot change on a live queue (it is the table's shape); the settings that can are "
                f"{', '.join(UPDATABLE)}. Create another queue for a new {field}")
        if field not in UPDATABLE:
            raise errors.InvalidArgument(f"update_mask names {field!r}, not a setting of a queue; use "
                                         f"{', '.join(UPDATABLE)}")


def check_droppable(name: str, dependents: QueueDependents) -> None:
    """FailedPrecondition, naming them, while queues name this one as their parent or dead-letter queue."""
    if dependents.children:
        raise errors.FailedPrecondition(
            f"queue {name!r} is the parent table of queue(s) {', '.join(map(repr, dependents.children))} (their "
            "messages belong to its rows); drop those queues first",
            queue=name, child=dependents.children[0],
        )
    if dependents.dead_letter_of:
        raise errors.FailedPrecondition(
            f"queue {name!r} is the dead-letter queue of queue(s) {', '.join(map(repr, dependents.dead_letter_of))}; "
            "drop those queues first",
            queue=name,
        )


def default_key_columns() -> tuple[KeyColumn, ...]:
    """A queue created without key columns gets one STRING key, filled with a UUID when omitted."""
    return (KeyColumn("id", ColumnType.STRING),)


class Catalog:
    """Queue definitions, read through a short cache."""

    def __init__(self, store: Store, limits: Limits, *, ddl_lock_timeout: timedelta = DDL_LOCK_TIMEOUT) -> None:
        self._store = store
        self._limits = limits
        self._ddl_lock_timeout = ddl_lock_timeout
        self._cache: dict[str, tuple[float, QueueDef]] = {}
        self._on_gone: list[Callable[[str], None]] = []
        self._on_changed: list[Callable[[str], None]] = []

    def on_gone(self, callback: Callable[[str], None]) -> None:
        """Calls ``callback(name)`` whenever a queue of that name is gone: dropped through
        this server, found dropped (or dropped and re-created) by another one when its
        cached definition is read again, or created here (whatever this server kept
        under the name belonged to an earlier queue)."""
        self._on_gone.append(callback)

    def on_changed(self, callback: Callable[[str], None]) -> None:
        """Calls ``callback(name)`` after an UpdateQueue through this server committed."""
        self._on_changed.append(callback)

    def _gone(self, name: str, listeners: list[Callable[[str], None]] | None = None) -> None:
        for callback in self._on_gone if listeners is None else listeners:
            try:
                callback(name)
            except Exception:  # a listener's failure must not fail the DDL that committed
                logger.exception("a listener failed on queue %s being gone or changed", name)

    async def create(self, queue: QueueDef) -> QueueDef:
        max_queues = self._limits.max_queues
        created = await self._store.queue_create(validate(queue),
                                                 lambda facts: check_creatable(queue, facts, max_queues),
                                                 lock_timeout=self._ddl_lock_timeout)
        self._cache[created.name] = (time.monotonic(), created)
        self._gone(created.name)
        return created

    async def update(self, name: str, changes: dict[str, Any]) -> QueueDef:
        """Sets the settings ``changes`` names (UPDATABLE) on a live queue, with CreateQueue's
        checks, merged under the catalog lock with what the catalog holds then. This server
        sees the result at once; others within CACHE_SECONDS (what the SQL functions hold,
        at once everywhere)."""
        check_queue_name(name)
        check_changes(changes)

        def check(queue: QueueDef, target: QueueDef | None) -> None:
            validate(queue)
            check_dead_letter_queue(queue, target)

        updated = await self._store.queue_update(
            name, lambda current: check_limits(with_changes(current, changes)), check,
            dead_letter_queue=changes.get("dead_letter_queue"), ordering="enable_message_ordering" in changes,
            lock_timeout=self._ddl_lock_timeout)
        self._cache[name] = (time.monotonic(), updated)
        logger.info("updated queue %s: %s", name, ", ".join(f"{k}={v}" for k, v in changes.items()))
        self._gone(name, self._on_changed)
        return updated

    async def get(self, name: str, *, fresh: bool = False) -> QueueDef:
        """The queue's definition, cached for CACHE_SECONDS; ``fresh`` reads it from the catalog
        whatever the cache holds. A Receive stream opens on a fresh one: it checks, at every
        lease, that the queue is still the one it opened, so a cached definition of a queue
        another server dropped and created again would end it NOT_FOUND at once."""
        check_queue_name(name)
        cached = self._cache.get(name)
        if cached and not fresh and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        queue = await self._store.queue_get(name)
        if cached and (queue is None or queue.create_time != cached[1].create_time):
            self._gone(name)  # another server dropped it (and may have created it anew)
        if queue is None:
            self._cache.pop(name, None)
            raise errors.QueueNotFound(f"queue {name!r} does not exist; create it with CreateQueue")
        self._cache[name] = (time.monotonic(), queue)
        return queue

    async def exists(self, name: str) -> bool:
        try:
            await self.get(name)
        except errors.QueueNotFound:
            return False
        return True

    def forget(self, name: str) -> None:
        self._cache.pop(name, None)

    async def list(self, page_size: int, page_token: str) -> tuple[list[QueueDef], str]:
        if page_size < 0 or page_size > MAX_PAGE_SIZE:
            raise errors.InvalidArgument(f"page_size must be between 0 and {MAX_PAGE_SIZE}, got {page_size}")
        size = page_size or DEFAULT_PAGE_SIZE
        after = _decode_page_token(page_token)
        queues = await self._store.queue_list(after, size + 1)
        more = len(queues) > size
        queues = queues[:size]
        return queues, (_encode_page_token(queues[-1].name) if more else "")

    async def drop(self, name: str) -> None:
        queue = await self.get(name)
        self.forget(name)
        await self._store.queue_drop(queue, lambda dependents: check_droppable(name, dependents),
                                     lock_timeout=self._ddl_lock_timeout)
        self._gone(name)


def _encode_page_token(after: str) -> str:
    return base64.urlsafe_b64encode(after.encode()).decode()


def _decode_page_token(token: str) -> str:
    if not token:
        return ""
    try:
        after = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        after = None
    if after is None or not IDENTIFIER.match(after):
        raise errors.InvalidArgument("page_token is not one this server returned; start again with an empty token")
    return after
