"""Sends, acks and lease renewals: validated, then applied in a transaction.

Each unary RPC is a commit of one mutation; Commit applies several in order.
This module is the domain both front-ends share: it takes domain values and
knows nothing of protobuf. How a commit is made once, whatever the retries
(the commit ledger), is exactly_once.py's: it calls ``prepare``, ``apply_in``
and ``committed`` here.
"""

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast
from datetime import datetime, timedelta, timezone

from ..ground import errors
from ..ground.clock import Clock
from ..ground.config import Limits
from ..ground.jsonfit import check_json
from ..ground.model import AckFound, AckItem, AckResult, ColumnType, Key, OutgoingMessage, QueueDef, RenewResult
from ..metrics.counters import Counters
from ..store import Handle, HeldTransaction, Store
from .ack_lease import AckLeases
from .faults import FaultInjector
from .group_commit import ACKS, SENDS, GroupCommitter
from .queues import MAX_LEASE
from .receive.held import Holdings
from .receive.wakeups import Wakeups

MAX_SCHEDULE_AHEAD = timedelta(days=366)
MAX_HEADERS = 32
MAX_HEADER_VALUE_BYTES = 1024
HEADER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}")
"""A header's key; the same limits as spanq.headers_ok, which holds SQL's INSERTs to them."""
MAX_PRIORITY = 9
MAX_ORDERING_KEY_BYTES = 1024
"""Pub/Sub's limit for an ordering key (SQS allows 128 characters for a MessageGroupId)."""


@dataclasses.dataclass(frozen=True)
class SendOp:
    queue: QueueDef
    messages: Sequence[OutgoingMessage]


@dataclasses.dataclass(frozen=True)
class AckOp:
    queue: QueueDef
    items: Sequence[AckItem]
    ignore_not_found: bool = False


@dataclasses.dataclass(frozen=True)
class RenewOp:
    queue: QueueDef
    lease_tokens: Sequence[str]
    lease_duration: timedelta
    """Zero releases the leases (a nack)."""
    reason: str | None = None
    """A nack's reason, kept for the dead-letter history."""


@dataclasses.dataclass(frozen=True)
class TableOp:
    """A statement on a Spanner table (spanner/tables.py builds it), applied in the
    commit's transaction beside the queue mutations: ``run`` takes the transaction's
    transaction and returns the statement's rows and row count (Store.table_run_in)."""

    table: str
    run: Callable[[Handle], Awaitable[tuple[list[Any], int]]]
    rows: int = 1
    """What it counts toward a Commit's limit."""


Mutation = SendOp | AckOp | RenewOp | TableOp
Result = list[Key] | list[AckResult] | list[RenewResult] | tuple[list[Any], int]


def new_uuids(n: int) -> list[str]:
    """n random (version 4) UUIDs as strings: the keys of messages sent without one.
    One urandom call for all: uuid.uuid4() per message was 20% of a 100-message Send."""
    raw = bytearray(os.urandom(16 * n))
    for at in range(0, 16 * n, 16):
        raw[at + 6] = raw[at + 6] & 0x0F | 0x40  # version 4
        raw[at + 8] = raw[at + 8] & 0x3F | 0x80  # RFC 4122 variant
    h = raw.hex()
    return [f"{h[j:j + 8]}-{h[j + 8:j + 12]}-{h[j + 12:j + 16]}-{h[j + 16:j + 20]}-{h[j + 20:j + 32]}"
            for j in range(0, 32 * n, 32)]


def ack_results(queue: QueueDef, items: Sequence[AckItem], found: Sequence[AckFound], *,
                ignore_not_found: bool) -> list[AckResult]:
    """What an ack comes to, from what its DELETE found of each message; raises (and the
    caller rolls back) if one cannot be acked: LEASE_NOT_HELD for a message still there
    under another lease token, MESSAGE_NOT_FOUND for one gone (unless ignore_not_found)."""
    for item, state in zip(items, found):
        if state is AckFound.LEASE_MOVED:
            raise errors.LeaseNotHeld(
                f"cannot ack {list(item.key)!r} in queue {queue.name!r}: lease token {item.lease_token!r} is no "
                "longer current (the lease was renewed, released or granted to another receiver); nothing "
                "was acked",
                key=json.dumps(list(item.key), default=str),
            )
        if state is AckFound.GONE and not ignore_not_found:
            raise errors.MessageNotFound(
                f"cannot ack {list(item.key)!r} in queue {queue.name!r}: the message is gone (already "
                "acknowledged or deleted); nothing was acked. Set ignore_not_found to accept that",
                key=json.dumps(list(item.key), default=str),
            )
    return [AckResult(item.key, state is AckFound.ACKED) for item, state in zip(items, found)]


def ordering_disabled(queue: str, i: int) -> str:
    """Why a keyed message is refused by a queue without ordering, and how to enable it."""
    return (f"message {i}: queue {queue!r} does not have message ordering enabled, so a message cannot have an "
            "ordering key there; enable it with UpdateQueue (enable_message_ordering: true; `spanq queue update "
            f"{queue} --ordering`, the SDK's update_queue(..., enable_message_ordering=True)), or send without one")


def _check_ordering_key(key: str, i: int) -> None:
    """1 to MAX_ORDERING_KEY_BYTES bytes of text PostgreSQL holds (the limit queue_ordering_create
    holds an INSERT from psql to, checked first here for a message that says which)."""
    if not key or "\0" in key or len(key.encode()) > MAX_ORDERING_KEY_BYTES:
        raise errors.InvalidArgument(
            f"message {i}: ordering_key must be 1 to {MAX_ORDERING_KEY_BYTES} bytes of UTF-8 without NUL "
            f"(empty: none), got {len(key.encode())} bytes")


def _headers_size(headers: dict[str, str], i: int) -> int:
    """The bytes a message's headers take (keys and values), once they are within the limits."""
    if len(headers) > MAX_HEADERS:
        raise errors.InvalidArgument(f"message {i}: {len(headers)} headers, over the limit of {MAX_HEADERS}")
    size = 0
    for key, value in headers.items():
        if not HEADER_KEY.fullmatch(key):
            raise errors.InvalidArgument(
                f"message {i}: header key {key[:40]!r} must be 1 to 128 letters, digits and '-_.:/', "
                "starting with a letter or digit")
        length = len(value.encode())
        if length > MAX_HEADER_VALUE_BYTES:
            raise errors.InvalidArgument(f"message {i}: header {key!r} is {length} bytes, over the limit of "
                                         f"{MAX_HEADER_VALUE_BYTES} bytes")
        size += len(key) + length
    return size


def _check_token(token: str) -> None:
    """A lease token as the server makes them could be: anything else is bad input, never a
    look-up (PostgreSQL text cannot even hold a NUL)."""
    if not token or len(token) > 200 or "\x00" in token:
        raise errors.InvalidArgument(f"lease token {token[:40]!r} is not a lease token")


class Mutator:
    """Validates and applies mutations; wakes this server's streams after sends and nacks."""

    def __init__(self, store: Store, limits: Limits, clock: Clock, wakeups: Wakeups, *,
                 commit_groups_in_flight: int = 2, metrics: Counters,
                 holdings: Holdings | None = None, faults: FaultInjector | None = None) -> None:
        self._store = store
        self.faults = faults or FaultInjector()
        """The faults injected into commits (off by default; see faults.py)."""
        self._holdings = holdings or Holdings()
        self._metrics = metrics
        self._limits = limits
        self._clock = clock
        self._wakeups = wakeups
        self.sends = GroupCommitter(store, clock, SENDS, in_flight=commit_groups_in_flight, faults=self.faults)
        """Group commit of Send requests (see group_commit.py)."""
        self.ack_leases = AckLeases(self._holdings, store)
        """Leases that acks carry for the streams they free room for (ack_lease.py)."""
        self.acks = GroupCommitter(store, clock, ACKS, in_flight=commit_groups_in_flight, faults=self.faults,
                                   rider=self.ack_leases)
        """Group commit of Ack requests (see group_commit.py)."""

    def prepare(self, mutation: Mutation) -> Mutation:
        """Checks a mutation before any database work; fills in generated keys."""
        if isinstance(mutation, TableOp):
            return mutation
        if isinstance(mutation, SendOp):
            return self._prepare_send(mutation)
        if isinstance(mutation, AckOp):
            self._check_count(len(mutation.items), "acks")
            keys = [item.key for item in mutation.items]
            if len(set(keys)) != len(keys):
                raise errors.InvalidArgument("the same key is acked twice in one request")
            for item in mutation.items:
                if item.lease_token:  # optional: an ack by key alone carries none
                    _check_token(item.lease_token)
            return mutation
        self._check_count(len(mutation.lease_tokens), "lease tokens")
        if not timedelta(0) <= mutation.lease_duration <= MAX_LEASE:
            raise errors.InvalidArgument("lease_duration must be between 0 (release) and 12h")
        for token in mutation.lease_tokens:
            _check_token(token)
        return mutation

    def _prepare_send(self, op: SendOp) -> SendOp:
        if op.queue.disable_send:
            raise errors.FailedPrecondition(
                f"queue {op.queue.name!r} has sending disabled (disable_send): nothing was sent; resume it "
                "with UpdateQueue (spanq queue resume --send) and send again", queue=op.queue.name)
        self._check_count(len(op.messages), "messages")
        limit = self._limits.max_payload_bytes
        # The injected clock when there is one (tests advance it); else this host's, which
        # only bounds how far ahead a message may be scheduled.
        horizon = (self._clock.now() or datetime.now(timezone.utc)) + MAX_SCHEDULE_AHEAD
        keyless = 0
        json_payloads = op.queue.payload_type is ColumnType.JSON
        for i, message in enumerate(op.messages):
            payload = message.payload
            if json_payloads:
                check_json(payload, f"message {i}: payload")
            headers = _headers_size(message.headers, i) if message.headers else 0
            if not 0 <= message.priority <= MAX_PRIORITY:
                raise errors.InvalidArgument(f"message {i}: priority must be between 0 and {MAX_PRIORITY}, "
                                             f"got {message.priority}")
            if message.ordering_key is not None:
                _check_ordering_key(message.ordering_key, i)
                if not op.queue.enable_message_ordering:
                    raise errors.FailedPrecondition(ordering_disabled(op.queue.name, i), queue=op.queue.name)
            # A string of n characters takes at most 4n bytes: most need no encoding to be measured.
            size = headers + (len(payload) if isinstance(payload, str) and 4 * len(payload) <= limit - headers
                              else message.payload_size())
            if size > limit:
                with_headers = f" with its headers' {headers} bytes" if headers else ""
                raise errors.LimitExceeded(
                    f"message {i}: payload{with_headers} is {size} bytes, over the {limit}-byte limit; keep large "
                    "data out of band and send a reference"
                )
            if message.delay is not None and not timedelta(0) <= message.delay <= MAX_SCHEDULE_AHEAD:
                raise errors.InvalidArgument(f"message {i}: delay must be between 0 and 366 days")
            if message.deliver_time is not None and message.deliver_time > horizon:
                raise errors.InvalidArgument(f"message {i}: deliver_time must be at most 366 days ahead")
            if message.key == ():
                if not op.queue.key_generated:
                    raise errors.InvalidArgument(
                        f"message {i}: queue {op.queue.name!r} needs a key "
                        f"({', '.join(c.name for c in op.queue.key_columns)})"
                    )
                keyless += 1
        if not keyless:
            return op
        keys = iter(new_uuids(keyless))
        return dataclasses.replace(op, messages=[
            m._replace(key=(next(keys),)) if m.key == () else m
            for m in op.messages
        ])

    @property
    def limits(self) -> Limits:
        return self._limits

    def check_commit_size(self, mutations: Sequence[Mutation]) -> None:
        """A Commit's limit is counted over all its mutations, not each one: its
        messages, acks and lease tokens together, at most max_messages_per_request."""
        limit = self._limits.max_messages_per_request
        total = sum(len(m.messages) if isinstance(m, SendOp) else len(m.items) if isinstance(m, AckOp)
                    else m.rows if isinstance(m, TableOp) else len(m.lease_tokens) for m in mutations)
        if total > limit:
            raise errors.InvalidArgument(
                f"a Commit takes at most {limit} messages, acks and lease tokens in all its mutations, got "
                f"{total}; split it into several commits"
            )

    def check_response_size(self, response: bytes) -> None:
        """Refuses, before it commits, a commit whose response a client could not receive."""
        limit = self._limits.max_response_bytes
        if len(response) > limit:
            raise errors.LimitExceeded(
                f"the response would be {len(response)} bytes, over the {limit}-byte limit (what a default gRPC "
                "client receives); nothing was committed: split the request"
            )

    def _check_count(self, n: int, what: str) -> None:
        limit = self._limits.max_messages_per_request
        if n == 0:
            raise errors.InvalidArgument(f"a request needs at least one of its {what}")
        if n > limit:
            raise errors.InvalidArgument(f"a request takes at most {limit} {what}, got {n}; split it")

    async def begin(self, *, lock_timeout: timedelta) -> "OpenTransaction":
        """A transaction held open across calls, for statements one at a time."""
        return OpenTransaction(self, await self._store.hold(lock_timeout=lock_timeout))

    async def apply_in(self, conn: Handle, mutations: Sequence[Mutation], request_id: str | None = None
                       ) -> list[Result]:
        """Applies prepared mutations on a transaction the caller commits (for the request
        ``request_id``, which an archive records of its acks). With several mutations, an
        error carries the index of the one that failed."""
        results: list[Result] = []
        now = self._clock.now()
        for index, mutation in enumerate(mutations):
            try:
                results.append(await self._apply_one(conn, mutation, now, request_id))
            except errors.QueueError as exc:
                if len(mutations) > 1:
                    exc.metadata.setdefault("mutation_index", str(index))
                raise
        return results

    async def _apply_one(self, conn: Handle, mutation: Mutation, now: datetime | None,
                         request_id: str | None) -> Result:
        if isinstance(mutation, TableOp):
            return await mutation.run(conn)
        if isinstance(mutation, SendOp):
            # A queue with generated key columns: PostgreSQL computed part of each key.
            whole = await self._store.messages_insert(conn, mutation.queue, mutation.messages, now)
            return whole if whole is not None else [m.key for m in mutation.messages]
        if isinstance(mutation, AckOp):
            found = await self._store.messages_ack(conn, mutation.queue, mutation.items, request_id, now)
            return ack_results(mutation.queue, mutation.items, found, ignore_not_found=mutation.ignore_not_found)
        renewed = await self._store.leases_renew(conn, mutation.queue, mutation.lease_tokens,
                                                 mutation.lease_duration, now, mutation.reason)
        if mutation.lease_duration == timedelta(0):
            # A nack makes messages deliverable without an INSERT: tell every server.
            await self._store.notify(conn, mutation.queue.name)
        return renewed

    def committed(self, mutations: Sequence[Mutation], results: Sequence[Result]) -> None:
        """After a commit (not a replay): wakes this server's streams and counts for metrics."""
        metrics = self._metrics
        for mutation, result in zip(mutations, results):
            if isinstance(mutation, TableOp):
                continue  # a table's rows: no stream to wake
            name = mutation.queue.name
            if isinstance(mutation, SendOp):
                self._wakeups.wake(name)
                metrics.sent(name, len(mutation.messages))
                continue
            if isinstance(mutation, AckOp):
                # Without ignore_not_found an ack commits only when all its messages were acked.
                acks = cast(list[AckResult], result)
                metrics.acked(name, sum(1 for r in acks if r.acked) if mutation.ignore_not_found else len(acks))
                self._holdings.acked(name, (i.lease_token for i, r in zip(mutation.items, acks) if r.acked))
                if mutation.queue.max_in_flight_per_key is not None:
                    self._wakeups.wake(name)  # its keys' messages held by the limit may go now
            else:
                renewals = cast(list[RenewResult], result)
                self._holdings.renewed(name, ((r.old_lease_token, r.new_lease_token, r.lease_expiration_time)
                                              for r in renewals if r.known))
                if not mutation.lease_duration:  # a nack
                    self._wakeups.wake(name)
                    metrics.nacked(name, len(mutation.lease_tokens))
            # Acks and nacks free room under some stream's max_outstanding.
            self._wakeups.signal(name).room.wake()


class OpenTransaction:
    """Statements applied one at a time across calls in one PostgreSQL transaction
    (Spanner's read-write transactions), then committed once through the commit
    ledger (``ExactlyOnce.commit_held``), or rolled back.

    Each ``apply`` / ``select`` is one statement: if it fails, only its own effects
    are undone and the transaction stays usable (Spanner's statement-level errors,
    such as ASSERT_ROWS_MODIFIED's OUT_OF_RANGE). The caller serialises calls on
    one transaction.
    """

    def __init__(self, mutator: Mutator, held: HeldTransaction) -> None:
        self._mutator = mutator
        self._held = held
        self._applied: list[Mutation] = []
        self._results: list[Result] = []

    @property
    def active(self) -> bool:
        return self._held.active

    async def apply(self, mutations: Sequence[Mutation],
                    check: Callable[[list[Result]], None] | None = None) -> list[Result]:
        """One statement; ``check`` may raise to undo it (ASSERT_ROWS_MODIFIED)."""
        prepared = [self._mutator.prepare(m) for m in mutations]
        async with self._held.statement() as conn:
            results = await self._mutator.apply_in(conn, prepared)
            if check is not None:
                check(results)
        self._applied.extend(prepared)
        self._results.extend(results)
        return results

    async def select(self, queue: QueueDef, **query: Any) -> list[tuple[Key, Any, datetime]]:
        """A plain read inside the transaction (it sees the transaction's own writes);
        the keywords are ``Store.messages_select``'s."""
        async with self._held.statement(queue.name) as conn:
            return await self._mutator._store.messages_select(conn, queue, now=self._mutator._clock.now(), **query)

    @property
    def applied(self) -> tuple[list[Mutation], list[Result]]:
        """The mutations its statements applied so far, and their results."""
        return self._applied, self._results

    def statement(self) -> contextlib.AbstractAsyncContextManager[Handle]:
        """One statement of its own (exactly_once.py's commit: the ledger entry)."""
        return self._held.statement()

    async def commit(self) -> None:
        """COMMIT, and the connection back to the pool (see exactly_once.commit_held)."""
        await self._held.commit()

    async def rollback(self) -> None:
        await self._held.rollback()
