"""Fault injection (off by default): makes the unknown-commit cases reproducible.

SPEC is comma-separated ``name=probability``:

- ``unknown_commit_after``: commit, then report UNKNOWN_COMMIT (the answer was "lost");
- ``unknown_commit_before``: roll back, then report UNKNOWN_COMMIT;
- ``unavailable_before``: roll back, then report UNAVAILABLE.

Only mutating commits (Send, Ack, RenewLease, Commit) are subject to it, and this
module is the one place that injects them: the domain's commits go through
``committing`` (a transaction) or ``before_commit`` / ``after_commit`` (a statement
that commits by itself, or a held transaction's COMMIT).
"""

import contextlib
import random
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from ..ground.errors import CommitOutcomeUnknown, QueueError, StoreUnavailable

FAULTS = ("unknown_commit_after", "unknown_commit_before", "unavailable_before")
BEFORE = ("unknown_commit_before", "unavailable_before")
"""The faults that strike before the COMMIT is sent: nothing was committed."""

T = TypeVar("T")


class FaultInjector:
    def __init__(self, probabilities: dict[str, float] | None = None, *, seed: int | None = None) -> None:
        self.probabilities = dict(probabilities or {})
        self._random = random.Random(seed)
        self.injected: dict[str, int] = dict.fromkeys(FAULTS, 0)
        """How many of each fault were injected (``error`` called), for tests and metrics."""

    @classmethod
    def parse(cls, spec: str) -> "FaultInjector":
        probabilities: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, sep, value = part.partition("=")
            name = name.strip()
            if name not in FAULTS or not sep:
                raise ValueError(f"fault {part!r}: use name=probability with name one of {', '.join(FAULTS)}")
            try:
                probability = float(value)
            except ValueError:
                raise ValueError(f"fault {part!r}: probability must be a number from 0 to 1") from None
            if not 0 <= probability <= 1:
                raise ValueError(f"fault {part!r}: probability must be from 0 to 1")
            probabilities[name] = probability
        if sum(probabilities.values()) > 1:
            raise ValueError("fault probabilities add up to more than 1")
        return cls(probabilities)

    @property
    def enabled(self) -> bool:
        return any(self.probabilities.values())

    def draw(self) -> str | None:
        """The fault to inject into this commit, if any."""
        if not self.enabled:
            return None
        roll = self._random.random()
        for name in FAULTS:
            roll -= self.probabilities.get(name, 0.0)
            if roll < 0:
                return name
        return None

    def before_commit(self) -> str | None:
        """Draws the fault of a commit about to be sent, and raises it if it strikes
        before the COMMIT (the caller rolls back); else returns it for after_commit."""
        fault = self.draw()
        if fault in BEFORE:
            raise self.error(fault)
        return fault

    def after_commit(self, fault: str | None, *, wrote: bool = True) -> None:
        """Raises the drawn fault if it loses a commit's answer: only a commit that wrote
        anything can lose it."""
        if fault == "unknown_commit_after" and wrote:
            raise self.error(fault)

    @contextlib.asynccontextmanager
    async def committing(self, transaction: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
        """``transaction`` (the store's) with a fault drawn at its COMMIT: one that strikes
        before is raised inside it, so it rolls back; one that loses the answer after."""
        async with transaction as handle:
            yield handle
            fault = self.before_commit()
        self.after_commit(fault)

    def error(self, fault: str) -> QueueError:
        """The error to raise for a drawn fault, counted as injected."""
        self.injected[fault] += 1
        if fault == "unavailable_before":
            return StoreUnavailable("injected fault: rolled back before COMMIT; retry")
        return CommitOutcomeUnknown(
            "injected fault: the commit may or may not have happened; replay the same request_id to learn which"
        )
