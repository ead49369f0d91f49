"""Group commit: Send and Ack requests that arrive while earlier ones commit
share one statement.

A request on its own costs a statement and a COMMIT with its WAL flush, and
most of the server's CPU for it goes into driving those round trips (an Ack as
its own transaction was BEGIN, a statement and COMMIT: three). A request that
finds fewer than ``in_flight`` groups of its kind committing starts its own at
once (no added wait on an idle server); the ones that arrive meanwhile wait and
go together in the next group: per queue, one statement claims all their
request_ids in the commit ledger, each with its response, and applies the
requests it claimed. A group on one queue is that statement alone, committed by
itself (autocommit: no BEGIN or COMMIT round trips); several queues share one
transaction. Each request keeps its own ledger entry, so replays and
UNKNOWN_COMMIT resolve per request exactly as for a request committed alone.

A group statement answers per request (``Claim``): CLAIMED, claimed and applied
(committed with the statement); COMMITTED_BEFORE, its request_id was committed
before (nothing done now: answer from the ledger); LEFT_ALONE, not applied and
not claimed, because the statement only takes requests whose outcome it knows in
advance (an Ack whose messages are all there under the tokens given: see
message_ack_claimed_group in queries.sql). The caller then runs a LEFT_ALONE
request on its own, in a transaction that finds its exact outcome or error. The two
kinds are ``SENDS`` and ``ACKS``.

A failure that belongs to one request (a key already stored, a missing parent
row, a deadlock between groups) fails the group's statement for all: the
group is then retried one request per statement, so that every request gets its
own answer and none fails for another's sake. A failure of the database itself
(unavailable, commit outcome unknown) is every member's that the statement may
have written, each with its own request_id.
"""

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from ..ground import errors
from ..ground.clock import Clock
from ..ground.model import Claim, LedgeredAck, LedgeredSend, QueueDef
from ..store import Handle, Store
from .faults import FaultInjector
from .testsignals import commits_draining

MAX_GROUP_ITEMS = 2000
"""Messages (sent or acked) in one group at most (a single request may bring 1,000)."""


class _Ledgered(Protocol):
    @property
    def request_id(self) -> str: ...


R = TypeVar("R", bound=_Ledgered)
R_contra = TypeVar("R_contra", bound=_Ledgered, contravariant=True)


@dataclasses.dataclass(frozen=True)
class GroupKind(Generic[R]):
    """What a group commits: how one queue's requests become one statement."""

    name: str
    statement: Callable[[Store, Handle | None, QueueDef, Sequence[R], datetime | None],
                        Awaitable[dict[str, Claim]]]
    """Runs one queue's requests as one statement, in the handle's transaction or
    (handle None) autocommitted; the Claim of every request_id."""
    size: Callable[[R], int]
    """Messages a request brings, for MAX_GROUP_ITEMS."""
    exclusive: Callable[[QueueDef, R], Iterable[Hashable]]
    """What no two requests of one group may share besides their request_id (an Ack's
    keys: two acks of one message in one statement would both seem to delete it)."""


async def _insert(store: Store, handle: Handle | None, queue: QueueDef, sends: Sequence[LedgeredSend],
                  now: datetime | None) -> dict[str, Claim]:
    claimed = await store.messages_insert_claimed(handle, queue, sends, now)
    return {send.request_id: Claim.CLAIMED if send.request_id in claimed else Claim.COMMITTED_BEFORE
            for send in sends}


SENDS: GroupKind[LedgeredSend] = GroupKind(
    "send", _insert, lambda send: len(send.messages), lambda queue, send: ())
ACKS: GroupKind[LedgeredAck] = GroupKind(
    "ack", Store.messages_ack_claimed_group, lambda ack: len(ack.items),
    lambda queue, ack: ((queue.name, item.key) for item in ack.items))


class Ride(Protocol[R_contra]):
    """What a group carries besides its requests, in the same commit (ack_lease.py)."""

    async def run(self, store: Store, queue: QueueDef, requests: Sequence[R_contra], now: datetime | None
                  ) -> dict[str, Claim]:
        """The group's statement with what it carries: the Claim of every request_id."""
        ...

    def deliver(self, claims: dict[str, Claim]) -> None:
        """After the commit."""

    def abandon(self) -> None:
        """The group failed, or its commit's outcome is unknown."""


class Rider(Protocol[R_contra]):
    def plan(self, queue: QueueDef, requests: Sequence[R_contra]) -> Ride[R_contra] | None: ...


@dataclasses.dataclass(frozen=True)
class _Job(Generic[R]):
    queue: QueueDef
    request: R
    done: "asyncio.Future[Claim]"


class GroupCommitter(Generic[R]):
    """Commits requests of one kind, grouping those that wait while ``in_flight`` groups commit."""

    def __init__(self, store: Store, clock: Clock, kind: GroupKind[R], *, in_flight: int,
                 faults: FaultInjector, rider: Rider[R] | None = None) -> None:
        self._store = store
        self._rider = rider
        self._faults = faults
        self._clock = clock
        self._kind = kind
        self._in_flight = max(1, in_flight)
        self._running = 0
        self._waiting: list[_Job[R]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.statements = 0
        """Group statements run (a group retried one request at a time counts each)."""
        self.requests = 0
        """Requests those statements carried: requests / statements is the mean group size."""

    @property
    def waiting(self) -> int:
        """Requests waiting for a group to start."""
        return len(self._waiting)

    async def commit(self, queue: QueueDef, request: R) -> Claim:
        """Commits the request with its commit-ledger entry (its response): its Claim."""
        job = _Job(queue, request, asyncio.get_running_loop().create_future())
        self._waiting.append(job)
        self._start_groups()
        # A cancelled caller (the client went away) does not cancel the group's commit:
        # the other members need it, and a retry of this request finds it in the ledger.
        try:
            return await asyncio.shield(job.done)
        except asyncio.CancelledError:
            job.done.add_done_callback(_forget)
            raise

    async def close(self, timeout: float) -> None:
        """Lets the groups started or waiting finish (shutdown finishes in-flight commits),
        then cancels what still runs after timeout seconds (a claim stuck on a lock)."""
        commits_draining.emit(self._kind.name)
        deadline = asyncio.get_running_loop().time() + timeout
        while self._tasks:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                for task in list(self._tasks):
                    task.cancel()
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
                return
            await asyncio.wait(list(self._tasks), timeout=left)

    def _start_groups(self) -> None:
        while self._waiting and self._running < self._in_flight:
            group = self._take_group()
            self._running += 1
            task = asyncio.create_task(self._run(group), name=f"spanq-group-commit-{self._kind.name}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take_group(self) -> list[_Job[R]]:
        """The oldest waiting jobs, up to MAX_GROUP_ITEMS. A request_id (or an exclusive
        value) already in the group waits for the next one: a replay racing its original
        must see the original's outcome, not collide with it inside one statement."""
        group: list[_Job[R]] = []
        taken: set[Hashable] = set()
        items = 0
        rest: list[_Job[R]] = []
        for job in self._waiting:
            size = self._kind.size(job.request)
            if group and items + size > MAX_GROUP_ITEMS:
                rest.append(job)
                continue
            own = {("request_id", job.request.request_id), *self._kind.exclusive(job.queue, job.request)}
            if not taken.isdisjoint(own):
                rest.append(job)
                continue
            group.append(job)
            taken |= own
            items += size
        self._waiting = rest
        return group

    async def _run(self, group: list[_Job[R]]) -> None:
        try:
            await self._commit_group(group)
        except (errors.StoreUnavailable, errors.CommitOutcomeUnknown) as exc:
            for job in group:
                _fail(job, exc)
        except errors.QueueError as exc:
            if len(group) == 1:
                _fail(group[0], exc)
            else:
                await asyncio.gather(*(self._run_alone(job) for job in group))
        except BaseException as exc:
            for job in group:
                _fail(job, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._running -= 1
            self._start_groups()

    async def _run_alone(self, job: _Job[R]) -> None:
        try:
            await self._commit_group([job])
        except BaseException as exc:
            _fail(job, exc)
            if not isinstance(exc, Exception):
                raise

    async def _commit_group(self, group: Sequence[_Job[R]]) -> None:
        self.statements += 1
        self.requests += len(group)
        by_queue: dict[QueueDef, list[R]] = {}
        for job in group:
            by_queue.setdefault(job.queue, []).append(job.request)
        if len(by_queue) == 1:
            [(queue, requests)] = by_queue.items()
            claims = await self._commit_one_queue(group, queue, requests)
        else:
            claims = await self._commit_queues(group, by_queue)
        _settle(group, claims, lambda claim: True)
        for job in group:
            if not job.done.done():  # a statement that does not answer for every request: a bug
                _fail(job, errors.QueueError("internal error: the group commit left a request unanswered"))

    async def _commit_one_queue(self, group: Sequence[_Job[R]], queue: QueueDef, requests: list[R]
                                ) -> dict[str, Claim]:
        """One statement is a transaction by itself: no BEGIN or COMMIT round trips. The
        configured faults apply to it as to a COMMIT."""
        fault = self._faults.before_commit()  # one that strikes before: nothing sent, nothing committed
        ride = None if self._rider is None else self._rider.plan(queue, requests)
        try:
            if ride is None:
                claims = await self._kind.statement(self._store, None, queue, requests, self._clock.now())
            else:
                claims = await ride.run(self._store, queue, requests, self._clock.now())
            try:
                self._faults.after_commit(fault, wrote=_wrote(claims))
            except errors.CommitOutcomeUnknown:
                _settle(group, claims, _not_claimed)  # their answers are known whatever was lost
                raise
        except BaseException:
            if ride is not None:
                ride.abandon()
            raise
        if ride is not None:
            ride.deliver(claims)
        return claims

    async def _commit_queues(self, group: Sequence[_Job[R]], by_queue: dict[QueueDef, list[R]]
                             ) -> dict[str, Claim]:
        """Several queues' statements in one transaction."""
        now = self._clock.now()
        claims: dict[str, Claim] = {}
        try:
            async with self._faults.committing(self._store.transaction()) as handle:
                for queue, requests in by_queue.items():
                    claims.update(await self._kind.statement(self._store, handle, queue, requests, now))
                if not _wrote(claims):
                    raise _NothingToCommit  # nothing written: roll back, so no COMMIT can fail them
        except _NothingToCommit:
            pass
        except (errors.StoreUnavailable, errors.CommitOutcomeUnknown):
            # The requests that a completed statement did not write are settled whatever
            # becomes of this transaction; the others share its fate.
            _settle(group, claims, _not_claimed)
            raise
        return claims


class _NothingToCommit(Exception):
    """No request of the group was written (replays, or left to run alone)."""


def _wrote(claims: dict[str, Claim]) -> bool:
    return any(claim is Claim.CLAIMED for claim in claims.values())


def _not_claimed(claim: Claim) -> bool:
    return claim is not Claim.CLAIMED


def _settle(group: Sequence[_Job[R]], claims: dict[str, Claim], which: Callable[[Claim], bool]) -> None:
    for job in group:
        request_id = job.request.request_id
        if request_id in claims and which(claims[request_id]) and not job.done.done():
            job.done.set_result(claims[request_id])


def _forget(done: "asyncio.Future[Claim]") -> None:
    """Retrieves the outcome nobody waits for any more, so asyncio does not log it as lost."""
    if not done.cancelled():
        done.exception()


def _fail(job: _Job[R], exc: BaseException) -> None:
    """Each member gets its own copy of a shared error: callers add their request_id to it."""
    if job.done.done():
        return
    if not isinstance(exc, Exception):  # cancelled, or the loop is going down
        job.done.cancel()
        return
    if isinstance(exc, errors.QueueError):
        own = type(exc)(exc.message, **exc.metadata)
        own.__cause__ = exc.__cause__
        exc = own
    job.done.set_exception(exc)
