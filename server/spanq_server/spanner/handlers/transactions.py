"""Spanner transactions on spanq: ids, open read-write transactions, the reaper.

- Read-only transactions (single-use, or begun) read the latest committed data
  statement by statement; their ids carry no state (``ro`` + random bytes).
- A read-write transaction gets an id (``rw`` + random bytes) at
  BeginTransaction or at a statement's inline begin. It holds a PostgreSQL
  transaction (one pooled connection, ``Mutator.begin``) from its first
  statement to Commit or Rollback; a transaction with only mutations never
  holds one and commits like a single-use one. Statements on one transaction
  run one at a time.
- A transaction idle longer than ``idle_timeout`` (default 10 s, as in Spanner), or
  open longer than ``max_lifetime`` (default 60 s) however busy, is rolled back (by the
  reaper, or at its next use); using or committing it afterwards is ABORTED, so
  the client runs it again. So is a transaction whose database connection
  failed or whose statement hit a lock conflict. The lifetime bounds how long a
  transaction holds its locks: a reader that keeps one busy cannot hold off
  DDL (or other writers) for ever.
- With authentication on, a read-write transaction belongs to the token that
  began it: another token's statements, Commit or Rollback on it are
  PERMISSION_DENIED (its id alone is not a credential).
- Commit goes through the commit ledger with the client's request id
  (exactly_once.py): a replay of a committed Commit answers the recorded
  response, and a replay of one that cannot have committed is given up for good
  (``ExactlyOnce.settle``) and answered ABORTED.
"""

import asyncio
import collections
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from ...domain.exactly_once import Answer, ExactlyOnce, Reply, Request
from ...domain.mutations import Mutation, Mutator, OpenTransaction
from ...edge.interceptors import CALLER
from ...ground import errors
from ...ground.tasks import BackgroundTask

logger = logging.getLogger(__name__)

READ_ONLY, READ_WRITE, PARTITIONED = b"ro", b"rw", b"pd"
REMEMBER_ENDED = 10_000
"""How many ended transaction ids are remembered, to say why they ended."""

T = TypeVar("T")


@dataclasses.dataclass(eq=False)
class ReadWrite:
    id: bytes
    session: str
    last_used: float
    began: float
    owner: str | None
    """The token that began it (None without authentication)."""
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    open: OpenTransaction | None = None
    statements: dict[int, tuple[bytes, Any]] = dataclasses.field(default_factory=dict)
    """seqno -> (request fingerprint, response or error): a retried statement is answered, not re-run."""


@dataclasses.dataclass
class Use:
    """What a statement runs in: a read-write transaction (``txn``) or a strong read."""

    txn: ReadWrite | None
    began: bytes | None
    """The id of a transaction begun inline by this statement, for the response metadata."""
    hold: Callable[[], Any]
    """Coroutine function: the transaction's OpenTransaction, begun on first use."""
    partitioned: bool = False
    """Partitioned DML: each statement commits on its own (query/tables.py)."""

    @property
    def read_only(self) -> bool:
        return self.txn is None


class Transactions:
    def __init__(self, mutator: Mutator, exactly_once: ExactlyOnce, *, max_open: int, idle_timeout: timedelta,
                 max_lifetime: timedelta, lock_timeout: timedelta = timedelta(seconds=5)) -> None:
        self._mutator = mutator
        self._once = exactly_once
        self.idle_timeout = idle_timeout
        self.max_lifetime = max_lifetime
        self.lock_timeout = lock_timeout
        self._live: dict[bytes, ReadWrite] = {}
        self._ended: collections.OrderedDict[bytes, str] = collections.OrderedDict()
        self._slots = asyncio.Semaphore(max_open)
        self.max_open = max_open
        self._reaper = BackgroundTask("spanner-transaction-reaper", self._reap_forever)
        self.reaped = 0

    # -- ids ----------------------------------------------------------------

    @staticmethod
    def read_only_id() -> bytes:
        return READ_ONLY + secrets.token_bytes(14)

    @staticmethod
    def is_read_only(transaction_id: bytes) -> bool:
        return transaction_id.startswith(READ_ONLY)

    @staticmethod
    def partitioned_id() -> bytes:
        """A partitioned-DML transaction's id: it holds nothing (each statement commits alone)."""
        return PARTITIONED + secrets.token_bytes(14)

    def begin(self, session: str) -> ReadWrite:
        now = time.monotonic()
        txn = ReadWrite(READ_WRITE + secrets.token_bytes(14), session, now, now, CALLER.get())
        self._live[txn.id] = txn
        return txn

    def open_count(self) -> int:
        return sum(1 for t in self._live.values() if t.open is not None)

    def _gone(self, transaction_id: bytes) -> errors.TransactionAborted:
        why = self._ended.get(transaction_id)
        if why is None:
            return errors.TransactionAborted(
                "transaction not found on this server (it ended, was reaped, or the server restarted); "
                "run the transaction again"
            )
        return errors.TransactionAborted(f"the transaction {why}; run it again")

    def get(self, transaction_id: bytes, session: str) -> ReadWrite:
        txn = self._live.get(transaction_id)
        if txn is None:
            raise self._gone(transaction_id)
        self._check_owner(txn)
        return txn

    @staticmethod
    def _check_owner(txn: ReadWrite) -> None:
        caller = CALLER.get()
        if txn.owner != caller:
            raise errors.PermissionDenied(
                f"this read-write transaction was begun by another token; only the token that began a transaction "
                f"may run statements in it, commit it or roll it back (this call's token: {caller or 'none'!r})",
                token=caller or "",
            )

    def _expiry(self, txn: ReadWrite, now: float) -> str | None:
        """Why the transaction is over its limits, or None."""
        if now - txn.began > self.max_lifetime.total_seconds():
            return (f"was open longer than {self.max_lifetime.total_seconds():g}s, the most a read-write "
                    "transaction lives on this server, and was rolled back")
        if now - txn.last_used > self.idle_timeout.total_seconds():
            return f"was idle longer than {self.idle_timeout.total_seconds():g}s and was rolled back"
        return None

    async def _end_if_expired(self, txn: ReadWrite) -> None:
        """Ends a transaction over its limits at its next use (the reaper may not have run yet)."""
        why = self._expiry(txn, time.monotonic())
        if why is not None:
            self.reaped += 1
            await self.end(txn, why)

    # -- statements ------------------------------------------------------------

    async def _hold(self, txn: ReadWrite) -> OpenTransaction:
        if txn.open is None:
            try:
                await asyncio.wait_for(self._slots.acquire(), self.lock_timeout.total_seconds())
            except TimeoutError:
                raise errors.TransactionAborted(
                    f"{self.max_open} read-write transactions are open on this server, the most it holds at once "
                    "(each holds a database connection); run the transaction again"
                ) from None
            try:
                txn.open = await self._mutator.begin(lock_timeout=self.lock_timeout)
            except BaseException:
                self._slots.release()
                raise
        return txn.open

    @contextlib.asynccontextmanager
    async def use(self, session: str, selector: Any) -> AsyncIterator[Use]:
        """The transaction a statement's TransactionSelector names. A statement
        that begins a transaction inline and fails ends it (no id was returned);
        a failed statement in an existing transaction leaves it usable, unless
        the failure aborted it."""
        kind = selector.WhichOneof("selector") if selector is not None else None
        if kind is None or kind == "single_use":
            options = selector.single_use if kind else None
            if options is not None and options.WhichOneof("mode") != "read_only":
                raise errors.InvalidArgument(
                    "statements run in a read-only single-use transaction, or in a read-write transaction begun "
                    "with BeginTransaction or an inline begin; a single-use read-write transaction is a Commit"
                )
            if options is not None:
                check_read_only(options.read_only)
            yield Use(None, None, _no_hold)
            return
        if kind == "begin":
            mode = selector.begin.WhichOneof("mode")
            if mode == "read_only":
                check_read_only(selector.begin.read_only)
                yield Use(None, self.read_only_id(), _no_hold)
                return
            if mode != "read_write":
                raise errors.InvalidArgument("partitioned DML is not supported by spanq; use a read-write transaction")
            txn = self.begin(session)
            try:
                async with txn.lock:
                    yield Use(txn, txn.id, lambda: self._hold(txn))
            except BaseException:
                await self.end(txn, "failed in its first statement")
                raise
            finally:
                txn.last_used = time.monotonic()
            return
        transaction_id = selector.id
        if self.is_read_only(transaction_id):
            yield Use(None, None, _no_hold)
            return
        if transaction_id.startswith(PARTITIONED):
            yield Use(None, None, _no_hold, partitioned=True)
            return
        txn = self.get(transaction_id, session)
        async with txn.lock:
            await self._end_if_expired(txn)
            if txn.id not in self._live:
                raise self._gone(txn.id)
            try:
                yield Use(txn, None, lambda: self._hold(txn))
            except (errors.TransactionAborted, errors.StoreUnavailable) as exc:
                await self.end(txn, f"was aborted: {exc.message}")
                if isinstance(exc, errors.StoreUnavailable):
                    raise errors.TransactionAborted(
                        f"the transaction lost its database connection ({exc.message}); run it again"
                    ) from exc
                raise
            finally:
                txn.last_used = time.monotonic()

    # -- commit and rollback -------------------------------------------------------

    async def commit(self, session: str, transaction_id: bytes, mutations: Sequence[Mutation], request: Request,
                     reply: Reply[T]) -> Answer[T]:
        if self.is_read_only(transaction_id):
            raise errors.FailedPrecondition("a read-only transaction has nothing to commit")
        txn = self._live.get(transaction_id)
        if txn is not None:
            self._check_owner(txn)
            async with txn.lock:
                await self._end_if_expired(txn)
                if txn.id in self._live:
                    try:
                        if txn.open is None:
                            return await self._once.commit(request, mutations, reply)
                        return await self._once.commit_held(request, txn.open, mutations, reply)
                    finally:
                        await self.end(txn, "was committed (or its commit failed)")
        # Not held here: a retry of a commit that ended, or a transaction that was
        # reaped or lost. Answer a committed one from the ledger; make sure any
        # other can never commit, and have the client run it again.
        settled = await self._once.settle(request, reply)
        if settled is None:
            raise self._gone(transaction_id)
        return settled

    async def rollback(self, transaction_id: bytes) -> None:
        txn = self._live.get(transaction_id)
        if txn is None:
            return
        self._check_owner(txn)
        async with txn.lock:
            await self.end(txn, "was rolled back")

    async def end(self, txn: ReadWrite, why: str) -> None:
        """Forgets the transaction and rolls back what it still holds."""
        if self._live.pop(txn.id, None) is None:
            return
        self._ended[txn.id] = why
        while len(self._ended) > REMEMBER_ENDED:
            self._ended.popitem(last=False)
        if txn.open is not None:
            opened, txn.open = txn.open, None
            try:
                await opened.rollback()
            finally:
                self._slots.release()

    # -- the reaper -------------------------------------------------------------------

    def start(self) -> None:
        self._reaper.start()

    async def stop(self) -> None:
        await self._reaper.stop()
        for txn in list(self._live.values()):
            with contextlib.suppress(Exception):
                await self.end(txn, "was rolled back at server shutdown")

    async def reap(self) -> int:
        """Rolls back transactions idle longer than idle_timeout or open longer than
        max_lifetime (but those running a statement now); returns how many."""
        now = time.monotonic()
        over = []
        for txn in list(self._live.values()):
            why = self._expiry(txn, now)
            if why is not None and not txn.lock.locked():
                over.append((txn, why))
        for txn, why in over:
            # Counted before the rollback's await: end() forgets the transaction first, and a
            # reader that sees it gone must see it counted.
            self.reaped += 1
            await self.end(txn, why)
        return len(over)

    async def _reap_forever(self) -> None:
        while True:
            shortest = min(self.idle_timeout, self.max_lifetime).total_seconds()
            await asyncio.sleep(max(0.05, min(1.0, shortest / 4)))
            try:
                reaped = await self.reap()
                if reaped:
                    logger.info("rolled back %d abandoned Spanner read-write transaction(s)", reaped)
            except Exception:
                logger.exception("reaping idle Spanner transactions failed; will retry")


async def _no_hold() -> OpenTransaction:
    raise errors.InvalidArgument(
        "DML and RENEWLEASE within a transaction need a read-write transaction; this statement runs in a "
        "read-only one"
    )


STALE_READ_RETENTION = timedelta(hours=1)
"""How far back a stale read may ask: Spanner's default version_retention_period. An older
read_timestamp Spanner refuses (its versions are gone); spanq has none to keep, see below."""
FUTURE_READ_SLACK = timedelta(seconds=1)


def check_read_only(options: Any, receive: bool = False) -> None:
    """A read-only transaction's timestamp bound. spanq keeps no past versions of rows, so every
    bound it takes is answered with the latest committed data (a strong read): what a stale read
    of ``exact_staleness``, ``read_timestamp``, ``max_staleness`` or ``min_read_timestamp`` asks
    for, and every commit since. A read_timestamp older than Spanner's retention is
    FAILED_PRECONDITION, one in the future INVALID_ARGUMENT (Spanner would wait for it), and a
    RECEIVE takes a strong read only, as Spanner says ("Spanner rejects stale reads")."""
    bound = options.WhichOneof("timestamp_bound")
    if receive and bound not in (None, "strong"):
        raise errors.InvalidArgument(
            f"RECEIVE needs a strong read: Spanner rejects stale reads for it, and this one asks {bound}; run it "
            "in database.snapshot() without a staleness"
        )
    if bound == "exact_staleness" and options.exact_staleness.ToTimedelta() < timedelta(0):
        raise errors.InvalidArgument("exact_staleness cannot be negative")
    if bound in ("read_timestamp", "min_read_timestamp"):
        asked = getattr(options, bound).ToDatetime(tzinfo=timezone.utc)
        now = datetime.now(timezone.utc)
        if asked > now + FUTURE_READ_SLACK:
            raise errors.InvalidArgument(
                f"{bound} {asked.isoformat()} is in the future: spanq answers stale reads with the latest data and "
                "does not wait for a timestamp to come (Spanner would); read strongly"
            )
        if bound == "read_timestamp" and asked < now - STALE_READ_RETENTION:
            raise errors.FailedPrecondition(
                f"read_timestamp {asked.isoformat()} is older than the version retention period "
                f"({STALE_READ_RETENTION}, Spanner's default): there is nothing to read at it"
            )
