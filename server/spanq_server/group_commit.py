"""Group commit: Send requests that arrive while earlier ones commit share one
transaction.

A Send on its own costs a statement and a COMMIT with its WAL flush, and most
of the server's CPU for it goes into driving those round trips. A Send that
finds fewer than ``in_flight`` groups committing starts its own at once (no
added wait on an idle server); the ones that arrive meanwhile wait and go
together in the next group: per queue, one statement claims all their
request_ids in the commit ledger and inserts all their messages. A group on
one queue is that statement alone, committed by itself (autocommit: no BEGIN
or COMMIT round trips); several queues share one transaction. Each request
keeps its own ledger entry, so replays and UNKNOWN_COMMIT resolve per request
exactly as for a Send committed alone.

A failure that belongs to one request (a key already stored, a missing parent
row) fails the group's statement for all: the group is then retried one
request per transaction, so that every request gets its own answer and none
fails for another's sake. A failure of the database itself (unavailable,
commit outcome unknown) is every member's, each with its own request_id.
"""

import asyncio
import dataclasses
from collections.abc import Sequence

from . import errors
from .clock import Clock
from .model import LedgeredSend, QueueDef
from .store import Store

MAX_GROUP_MESSAGES = 2000
"""Messages in one group at most (a single Send may bring 1,000)."""


@dataclasses.dataclass(frozen=True)
class _Job:
    queue: QueueDef
    send: LedgeredSend
    done: "asyncio.Future[bool]"


class GroupCommitter:
    """Commits Sends, grouping those that wait while ``in_flight`` groups commit."""

    def __init__(self, store: Store, clock: Clock, *, in_flight: int) -> None:
        self._store = store
        self._clock = clock
        self._in_flight = max(1, in_flight)
        self._running = 0
        self._waiting: list[_Job] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def waiting(self) -> int:
        """Sends waiting for a group to start."""
        return len(self._waiting)

    async def commit(self, queue: QueueDef, send: LedgeredSend) -> bool:
        """Stores the send's messages with its commit-ledger entry (its response).
        True when committed now; False when its request_id had committed before
        (nothing stored now: answer from the ledger)."""
        job = _Job(queue, send, asyncio.get_running_loop().create_future())
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
            task = asyncio.create_task(self._run(group), name="spanq-group-commit")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take_group(self) -> list[_Job]:
        """The oldest waiting jobs, up to MAX_GROUP_MESSAGES. A request_id already in
        the group waits for the next one: a replay racing its original must see the
        original's outcome, not collide with it inside one statement."""
        group: list[_Job] = []
        ids: set[str] = set()
        messages = 0
        rest: list[_Job] = []
        for job in self._waiting:
            size = len(job.send.messages)
            if job.send.request_id in ids or (group and messages + size > MAX_GROUP_MESSAGES):
                rest.append(job)
                continue
            group.append(job)
            ids.add(job.send.request_id)
            messages += size
        self._waiting = rest
        return group

    async def _run(self, group: list[_Job]) -> None:
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

    async def _run_alone(self, job: _Job) -> None:
        try:
            await self._commit_group([job])
        except BaseException as exc:
            _fail(job, exc)
            if not isinstance(exc, Exception):
                raise

    async def _commit_group(self, group: Sequence[_Job]) -> None:
        by_queue: dict[QueueDef, list[LedgeredSend]] = {}
        for job in group:
            by_queue.setdefault(job.queue, []).append(job.send)
        if len(by_queue) == 1:
            # One statement is a transaction by itself: no BEGIN or COMMIT round trips.
            [(queue, sends)] = by_queue.items()
            claimed = await self._store.messages_insert_claimed(None, queue, sends, self._clock.now(),
                                                                inject_faults=True)
        else:
            claimed = await self._commit_queues(group, by_queue)
        for job in group:
            if not job.done.done():
                job.done.set_result(job.send.request_id in claimed)

    async def _commit_queues(self, group: Sequence[_Job], by_queue: dict[QueueDef, list[LedgeredSend]]) -> set[str]:
        """Several queues' statements in one transaction."""
        now = self._clock.now()
        claimed: set[str] = set()
        replays: set[str] = set()  # ids a completed statement found committed before
        try:
            async with self._store.transaction(inject_faults=True) as conn:
                for queue, sends in by_queue.items():
                    now_claimed = await self._store.messages_insert_claimed(conn, queue, sends, now)
                    claimed |= now_claimed
                    replays |= {send.request_id for send in sends} - now_claimed
                if not claimed:
                    raise _NothingToCommit  # all replays: roll back, so no COMMIT can fail them
        except _NothingToCommit:
            pass
        except (errors.StoreUnavailable, errors.CommitOutcomeUnknown):
            # The requests found committed before are settled whatever becomes of this
            # transaction; the others share its fate.
            for job in group:
                if job.send.request_id in replays and not job.done.done():
                    job.done.set_result(False)
            raise
        return claimed


class _NothingToCommit(Exception):
    """Every request of the group was committed before."""


def _forget(done: "asyncio.Future[bool]") -> None:
    """Retrieves the outcome nobody waits for any more, so asyncio does not log it as lost."""
    if not done.cancelled():
        done.exception()


def _fail(job: _Job, exc: BaseException) -> None:
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
