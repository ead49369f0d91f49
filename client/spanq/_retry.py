"""Retries: which codes are retried, backoff with jitter, a total deadline,
and the replay rule for mutations (one request_id per intent, replayed on
every retry; an unresolved unknown outcome is CommitOutcomeUnknown).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import grpc

from ._connect import CONNECT_TIMEOUT
from ._errors import UNKNOWN_COMMIT, CommitOutcomeUnknown, SpanqError, Unavailable, from_rpc_error

logger = logging.getLogger(__name__)

R = TypeVar("R")

_RETRYABLE_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
"""Retried on every call; a mutation replays its request_id. (UNKNOWN is retried only with reason
UNKNOWN_COMMIT: a bare UNKNOWN is a server bug, not an unknown outcome.)"""

_SAFE_UNAVAILABLE_REASONS = frozenset({"DATABASE_UNAVAILABLE", CONNECT_TIMEOUT})
"""UNAVAILABLE reasons by which the server (or the SDK: CONNECT_TIMEOUT, the call was never sent) says nothing
was committed. Any other UNAVAILABLE (a dropped connection, a stopping server) may have come after the commit,
so it leaves the outcome unknown."""

STREAM_RETRYABLE_CODES = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
)
"""A Receive stream that fails with these is reopened after a backoff."""

STREAM_TERMINAL_CODES = (
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.ALREADY_EXISTS,
)
"""A Receive stream that fails with these ends its subscription with the error."""


@dataclasses.dataclass(frozen=True)
class Retry:
    """How calls are retried: exponential backoff with jitter, within a total deadline.

    Mutations (send, ack, renew, nack, commit) are retried on UNAVAILABLE, DEADLINE_EXCEEDED and
    UNKNOWN_COMMIT by replaying the same request_id, so a retry never duplicates; reads on UNAVAILABLE and
    DEADLINE_EXCEEDED. A mutation whose outcome is still unknown at the deadline raises
    CommitOutcomeUnknown.
    """

    initial_backoff: float = 0.05
    """Seconds before the first retry."""
    max_backoff: float = 2.0
    """Seconds: the longest wait between attempts."""
    multiplier: float = 2.0
    """Each wait is this many times the previous one (before jitter)."""
    deadline: float = 60.0
    """Seconds for all attempts together."""
    attempt_timeout: float = 20.0
    """Seconds for one attempt."""

    def backoffs(self) -> Iterator[float]:
        """Jittered waits: each uniform in [cap/2, cap], the cap growing to max_backoff."""
        cap = self.initial_backoff
        while True:
            yield random.uniform(cap / 2, cap)
            cap = min(self.max_backoff, cap * self.multiplier)


Retry.__module__ = "spanq"

DEFAULT_RETRY = Retry()


def _outcome_unknown(error: SpanqError) -> bool:
    """Whether a failed mutation attempt may nevertheless have committed."""
    if error.reason == UNKNOWN_COMMIT:
        return True
    if error.code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return True
    return error.code == grpc.StatusCode.UNAVAILABLE and error.reason not in _SAFE_UNAVAILABLE_REASONS


def _unknown(what: str, request_id: str | None, attempts: int, since: float,
             error: SpanqError) -> CommitOutcomeUnknown:
    return CommitOutcomeUnknown(
        f"{what}: the outcome of request {request_id} is unknown after {attempts} attempt(s) in "
        f"{time.monotonic() - since:.1f}s (last: {error.code.name if error.code else '?'} {error.message}); "
        "replay it with the same request_id to learn whether it committed",
        request_id=request_id or "",
        code=error.code,
        reason=error.reason,
        metadata=error.metadata,
    )


def _retryable(error: SpanqError) -> bool:
    return error.reason == UNKNOWN_COMMIT or error.code in _RETRYABLE_CODES


class Attempts:
    """The retry rule of one call, without I/O: the sync and aio clients' one core. A driver asks
    ``next_timeout()`` before each attempt and, when an attempt fails, hands the error to
    ``failed()``, which returns the seconds to wait before the next one or raises what the call
    raises (see ``call``)."""

    __slots__ = ("_policy", "_what", "_request_id", "_patient", "_started", "_give_up_at", "_backoffs",
                 "_unknown", "_attempts")

    def __init__(self, policy: Retry, *, what: str, request_id: str | None = None, patient: bool = False) -> None:
        self._policy = policy
        self._what = what
        self._request_id = request_id
        self._patient = patient
        self._started = time.monotonic()
        self._give_up_at = self._started + policy.deadline
        self._backoffs = policy.backoffs()
        self._unknown = False
        self._attempts = 0

    def next_timeout(self) -> float:
        """The timeout of the next attempt: the policy's, within what is left of the deadline."""
        self._attempts += 1
        remaining = self._give_up_at - time.monotonic()
        return max(0.001, min(self._policy.attempt_timeout, remaining))

    def failed(self, exc: BaseException) -> float:
        """Seconds to wait before the next attempt after ``exc`` (a grpc.RpcError, or the SDK's own
        Unavailable); raises instead when the call ends with it."""
        if isinstance(exc, Unavailable):
            if exc.reason != CONNECT_TIMEOUT:
                raise exc
            error: SpanqError = exc  # not sent, so it leaves no outcome unknown
            if not self._patient:
                if self._unknown:
                    raise self._unknown_error(error) from exc
                raise exc
        elif isinstance(exc, grpc.RpcError):
            error = from_rpc_error(exc)
        else:
            raise exc
        if self._request_id is not None and _outcome_unknown(error):
            self._unknown = True
        if not _retryable(error):
            raise error from exc
        wait = next(self._backoffs)
        if time.monotonic() + wait >= self._give_up_at:
            if self._unknown:
                raise self._unknown_error(error) from exc
            raise error from exc
        logger.debug("%s: %s (%s), retrying in %.3fs%s", self._what, error.code, error.message, wait,
                     f" with request_id {self._request_id}" if self._request_id else "")
        return wait

    def _unknown_error(self, error: SpanqError) -> CommitOutcomeUnknown:
        return _unknown(self._what, self._request_id, self._attempts, self._started, error)


async def call(
    attempt: Callable[[float], Awaitable[R]],
    policy: Retry,
    *,
    what: str,
    request_id: str | None = None,
    patient: bool = False,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> R:
    """Runs ``attempt(timeout)`` until it succeeds, fails for good, or the deadline passes.

    With a request_id the call is a mutation: every attempt must carry that same request_id, and an
    outcome that stays unknown raises CommitOutcomeUnknown instead of the last error. An attempt that could
    not connect within connect_timeout ends the call, unless ``patient`` (a subscriber's own acks and
    renewals): then it is retried like UNAVAILABLE, within the deadline. ``sleep`` waits between
    attempts: the blocking client's does not suspend (spanq._client runs these coroutines on its
    caller's thread, without an event loop).
    """
    attempts = Attempts(policy, what=what, request_id=request_id, patient=patient)
    while True:
        try:
            return await attempt(attempts.next_timeout())
        except (grpc.RpcError, Unavailable) as exc:
            wait = attempts.failed(exc)
        await sleep(wait)
