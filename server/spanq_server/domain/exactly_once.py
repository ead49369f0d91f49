"""Exactly once: a mutating request takes effect once, however often it is sent.

Both front-ends (spanq.v1 in service.py, Spanner's API in spanner/) hand their
mutating requests to this module, and this module alone decides, from the commit
ledger (spanq.commit_ledger), what each attempt of a request comes to. The rules:

1. Every mutating request has a ``request_id``, the same on every retry of one
   intent (``Request``). A request that brings none gets a fresh one (``fresh``):
   no earlier attempt can hold it, and only an UNKNOWN_COMMIT error's metadata
   tells the caller which id to replay. Its ``fingerprint`` is what makes two
   requests "the same": the RPC and its fields, but the request_id.
2. First run: one commit claims the request_id in the ledger, applies the
   mutations and records the response, all or nothing. The front-end gives an
   encoder (``Reply.encode``): results -> the response's bytes, recorded before
   COMMIT. The encoder is pure; this module may call it again when the results it
   had to guess in advance (an Ack's: all acked) turn out otherwise, and answers
   with the reply of the last call.
3. Replay: if a committed transaction holds the request_id, nothing changes now;
   the answer is the recorded response, decoded by the front-end
   (``Reply.replay``), with ``replayed`` set.
4. Mismatch: a request_id recorded with another fingerprint is INVALID_ARGUMENT
   (a new intent needs a new request_id; a retry, the same request).
5. Unknown outcome: a connection lost while COMMIT was in flight (or an injected
   fault, faults.py) is CommitOutcomeUnknown (UNKNOWN_COMMIT), never a guess; the
   error carries the request_id to replay. StoreUnavailable means nothing
   committed: retry.
6. A request that fails now may be the replay of one that committed before (its
   message since acked, its queue since dropped): ``run`` answers such a failure
   from the ledger when the request_id is recorded there, and lets it through
   otherwise. Errors of the attempt itself (unknown outcome, unavailable,
   aborted) are never answered so.
7. Sealing: a request whose attempt may still be in flight elsewhere, and that no
   one can redo here (a Spanner transaction this server no longer holds, or a
   commit the server makes on its own), is settled (``settle``): its recorded
   response if it committed; otherwise it is recorded as given up (``SEALED``), so
   that no late attempt of it can commit any more, and a replay of it is ABORTED.
8. A recorded entry is kept for the retention window (ledger.py prunes it). An
   entry pruned between a claim that found it and the look-up is UNKNOWN_COMMIT.

How a first run commits depends on its mutations, never its outcome: a lone Send
or a lone Ack goes through group commit (group_commit.py: one statement claims,
records and applies many requests), anything else through one transaction; a
Spanner read-write transaction held across calls commits through ``commit_held``.
"""

import dataclasses
import hashlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

from ..ground import errors
from ..ground.clock import Clock
from ..ground.model import AckFound, AckResult, Claim, LedgeredAck, LedgeredSend
from ..store import Store
from .mutations import AckOp, Mutation, Mutator, OpenTransaction, Result, SendOp, ack_results

MAX_REQUEST_ID = 128
SEALED = b"\xffspanq:sealed"
"""The ledger response of a request_id given up by ``settle`` (never a valid protobuf)."""

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


def request_id_or_new(request_id: str) -> str:
    """The caller's request_id, checked; a fresh one when empty (rule 1)."""
    if not request_id:
        return str(uuid.uuid4())
    if len(request_id) > MAX_REQUEST_ID or not request_id.isprintable():
        raise errors.InvalidArgument(
            f"request_id must be 1 to {MAX_REQUEST_ID} printable characters (a UUID is recommended)"
        )
    return request_id


def fingerprint(kind: str, content: bytes) -> bytes:
    """What makes two requests "the same": the RPC and its fields but request_id."""
    return hashlib.sha256(kind.encode() + b"\0" + content).digest()


@dataclasses.dataclass(frozen=True)
class Request:
    """One mutating request, as the ledger knows it."""

    request_id: str
    fingerprint: bytes
    fresh: bool = False
    """The request_id was made up here: no earlier attempt can hold it."""

    @classmethod
    def of(cls, request_id: str, kind: str, content: bytes) -> "Request":
        """``content``: the request's serialised fields, but its request_id."""
        return cls(request_id_or_new(request_id), fingerprint(kind, content), fresh=not request_id)


class Reply(Protocol[T_co]):
    """How a front-end turns a request's results into its response, and back."""

    def encode(self, mutations: Sequence[Mutation], results: Sequence[Result]) -> tuple[T_co, bytes]:
        """The response and its bytes for the ledger; pure (it may be called twice, rule 2)."""
        ...

    def replay(self, recorded: bytes) -> T_co:
        """The response of a replay, from the bytes a first run recorded."""
        ...


@dataclasses.dataclass(frozen=True)
class Answer(Generic[T]):
    reply: T
    replayed: bool
    """True when an earlier commit of the same request_id produced it: nothing changed now."""


class _RollBack(Exception):
    """Ends a transaction of this module in ROLLBACK: its claim found the request_id taken."""


class _Encoding(Generic[T]):
    """A first run's response: encoded for the ledger (checked against the response
    limit, before anything commits), and kept to answer with."""

    def __init__(self, reply: Reply[T], mutations: Sequence[Mutation], mutator: Mutator) -> None:
        self._reply = reply
        self._mutations = mutations
        self._check = mutator.check_response_size
        self.last: T | None = None

    def __call__(self, results: Sequence[Result]) -> bytes:
        self.last, data = self._reply.encode(self._mutations, results)
        self._check(data)
        return data

    @property
    def reply(self) -> T:
        assert self.last is not None, "a first run encodes its response before it commits"
        return self.last


class ExactlyOnce:
    """The commit ledger's protocol; the one entry point of every mutating request."""

    def __init__(self, store: Store, mutator: Mutator, clock: Clock) -> None:
        self._store = store
        self._mutator = mutator
        self._clock = clock
        self._faults = mutator.faults

    # -- what the front-ends call ------------------------------------------------

    async def run(self, request: Request, reply: Reply[T], attempt: Callable[[], Awaitable[Answer[T]]]
                  ) -> Answer[T]:
        """One attempt of a request: ``attempt`` is the front-end's (it builds the mutations
        and commits them through ``commit``, ``commit_held`` or ``settle``); a failure of
        it is answered from the ledger when the request committed before (rule 6)."""
        try:
            return await attempt()
        except (errors.CommitOutcomeUnknown, errors.StoreUnavailable, errors.TransactionAborted):
            raise
        except errors.QueueError:
            if request.fresh:
                raise
            recorded = await self._recorded(request)
            if recorded is None or recorded == SEALED:
                raise
            return Answer(reply.replay(recorded), replayed=True)

    async def commit(self, request: Request, mutations: Sequence[Mutation], reply: Reply[T]) -> Answer[T]:
        """Applies the mutations in order, in one commit with the request's ledger entry:
        all or none, once (rules 2, 3 and 5)."""
        prepared = [self._mutator.prepare(m) for m in mutations]
        encoding = _Encoding(reply, prepared, self._mutator)
        try:
            results = await self._first_run(request, prepared, encoding)
        except (errors.CommitOutcomeUnknown, errors.StoreUnavailable) as exc:
            exc.metadata["request_id"] = request.request_id
            raise
        if results is None:
            return await self._replay(request, reply)
        self._mutator.committed(prepared, results)
        return Answer(encoding.reply, replayed=False)

    async def commit_held(self, request: Request, held: OpenTransaction, mutations: Sequence[Mutation],
                          reply: Reply[T]) -> Answer[T]:
        """``commit`` for a transaction held open across calls (Spanner's read-write
        transactions): its last mutations, the ledger entry and COMMIT. Any failure
        ends it, rolled back (or of unknown outcome)."""
        try:
            prepared = [self._mutator.prepare(m) for m in mutations]
            encoding = _Encoding(reply, prepared, self._mutator)
            async with held.statement() as handle:
                claimed = await self._store.ledger_claim(handle, request.request_id, request.fingerprint,
                                                         self._clock.now())
                if claimed:
                    results = await self._mutator.apply_in(handle, prepared, request.request_id)
                    await self._store.ledger_record(handle, request.request_id, encoding(results))
            if claimed:
                fault = self._faults.before_commit()
                await held.commit()
                self._faults.after_commit(fault)
        except (errors.CommitOutcomeUnknown, errors.StoreUnavailable) as exc:
            await held.rollback()
            exc.metadata["request_id"] = request.request_id
            raise
        except BaseException:
            await held.rollback()
            raise
        if not claimed:
            await held.rollback()
            return await self._replay(request, reply)
        applied, earlier = held.applied
        self._mutator.committed([*applied, *prepared], [*earlier, *results])
        return Answer(encoding.reply, replayed=False)

    async def settle(self, request: Request, reply: Reply[T]) -> Answer[T] | None:
        """Settles a request whose commit may still be in flight elsewhere, and which
        cannot be redone here (rule 7): its recorded answer if it committed; otherwise
        None, after sealing it, so that no late attempt of it can commit any more."""
        try:
            async with self._store.transaction() as handle:
                if not await self._store.ledger_claim(handle, request.request_id, request.fingerprint,
                                                      self._clock.now()):
                    raise _RollBack
                await self._store.ledger_record(handle, request.request_id, SEALED)
        except _RollBack:
            recorded = await self._recorded(request)
            if recorded is None:
                raise errors.CommitOutcomeUnknown(request_id=request.request_id) from None
            return None if recorded == SEALED else Answer(reply.replay(recorded), replayed=True)
        return None

    async def commit_unattended(self, kind: str, content: bytes, mutations: Sequence[Mutation], reply: Reply[T],
                                *, id_prefix: str, attempts: int, gave_up: str) -> Answer[T]:
        """A commit the server makes on its own, which no client will replay (Spanner's
        RENEWLEASE under a read-only transaction): an unknown outcome is settled at once,
        and one that did not commit (now never will) runs again under a new request_id,
        up to ``attempts`` times; then StoreUnavailable (``gave_up``)."""
        same = fingerprint(kind, content)
        for _ in range(attempts):
            request = Request(f"{id_prefix}:{uuid.uuid4()}", same, fresh=True)
            try:
                return await self.commit(request, mutations, reply)
            except errors.CommitOutcomeUnknown:
                settled = await self.settle(request, reply)
                if settled is not None:
                    return settled
        raise errors.StoreUnavailable(gave_up)

    # -- first runs ------------------------------------------------------------------

    async def _first_run(self, request: Request, prepared: Sequence[Mutation], encoding: _Encoding[T]
                         ) -> list[Result] | None:
        """Claims the request_id and applies the mutations, recording the response, in
        one commit: their results; None when a committed transaction holds the request_id."""
        if len(prepared) == 1 and isinstance(prepared[0], SendOp) and not prepared[0].queue.has_generated_keys:
            # A queue with generated key columns learns its keys from the insert: the
            # response is recorded after it, in the transaction below.
            return await self._send_grouped(request, prepared[0], encoding)
        if len(prepared) == 1 and isinstance(prepared[0], AckOp):
            return await self._ack_grouped(request, prepared[0], encoding)
        try:
            async with self._faults.committing(self._store.transaction()) as handle:
                if not await self._store.ledger_claim(handle, request.request_id, request.fingerprint,
                                                      self._clock.now()):
                    raise _RollBack
                results = await self._mutator.apply_in(handle, prepared, request.request_id)
                await self._store.ledger_record(handle, request.request_id, encoding(results))
        except _RollBack:
            return None
        return results

    async def _send_grouped(self, request: Request, send: SendOp, encoding: _Encoding[T]) -> list[Result] | None:
        """A send's response (its keys) is known before it runs: it is claimed, recorded
        and stored in one statement, grouped with others."""
        results: list[Result] = [[m.key for m in send.messages]]
        claim = await self._mutator.sends.commit(send.queue, LedgeredSend(
            request.request_id, request.fingerprint, encoding(results), send.messages))
        return results if claim is Claim.CLAIMED else None

    async def _ack_grouped(self, request: Request, op: AckOp, encoding: _Encoding[T]) -> list[Result] | None:
        """An Ack through the Ack group commit: when every message is there under the
        token given (the common case), the claim, the response of every message acked
        and the DELETE are part of one group statement that commits by itself.
        Otherwise (a message gone, or its lease moved on) the group leaves the request
        alone (Claim.LEFT_ALONE) and it runs in its own transaction."""
        guess = [AckResult(i.key, True) for i in op.items]
        response = encoding([guess])
        claim = await self._mutator.acks.commit(op.queue, LedgeredAck(
            request.request_id, request.fingerprint, response, op.items))
        if claim is Claim.CLAIMED:
            return [guess]
        if claim is Claim.COMMITTED_BEFORE:
            return None
        return await self._ack_alone(request, op, encoding, response, guess)

    async def _ack_alone(self, request: Request, op: AckOp, encoding: _Encoding[T], response: bytes,
                         guess: list[AckResult]) -> list[Result] | None:
        """An Ack in its own transaction, two round trips besides BEGIN and COMMIT: the
        claim (recording ``response``, that of every message acked) and the DELETE are
        one statement; the response is recorded again when ignore_not_found left some
        messages unacked, and an error (LEASE_NOT_HELD, MESSAGE_NOT_FOUND) rolls
        everything back."""
        try:
            async with self._faults.committing(self._store.transaction()) as handle:
                found = await self._store.messages_ack_claimed(
                    handle, op.queue, op.items, request_id=request.request_id, fingerprint=request.fingerprint,
                    response=response, now=self._clock.now())
                if found is None:
                    raise _RollBack
                results = guess
                if found.count(AckFound.ACKED) != len(found):
                    results = ack_results(op.queue, op.items, found, ignore_not_found=op.ignore_not_found)
                    if results != guess:
                        await self._store.ledger_record(handle, request.request_id, encoding([results]))
        except _RollBack:
            return None
        return [results]

    # -- replays -----------------------------------------------------------------------

    async def _replay(self, request: Request, reply: Reply[T]) -> Answer[T]:
        """The answer to a request whose request_id a committed transaction holds (rules 3, 7, 8)."""
        recorded = await self._recorded(request)
        if recorded is None:  # committed, then pruned within this instant: vanishingly rare
            raise errors.CommitOutcomeUnknown(request_id=request.request_id) from None
        if recorded == SEALED:
            raise errors.TransactionAborted(
                f"request {request.request_id!r} was given up before it committed (its transaction was lost, "
                "rolled back or reaped); nothing of it was committed: run the transaction again",
                request_id=request.request_id,
            ) from None
        return Answer(reply.replay(recorded), replayed=True)

    async def _recorded(self, request: Request) -> bytes | None:
        """The recorded response of a committed request_id, or None; INVALID_ARGUMENT
        when the id was committed with a different request (rule 4)."""
        found = await self._store.ledger_lookup(request.request_id)
        if found is None:
            return None
        recorded_fingerprint, response = found
        if recorded_fingerprint != request.fingerprint:
            raise errors.InvalidArgument(
                f"request_id {request.request_id!r} was already used for a different request; use a new "
                "request_id for a new intent, and the same request for a retry",
                request_id=request.request_id,
            )
        return response
