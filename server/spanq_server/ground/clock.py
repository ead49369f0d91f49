"""Where "now" comes from. By default the database's clock (None is passed
to SQL, which uses statement_timestamp()), so every replica agrees. Tests pin
or advance a ManualClock instead of sleeping."""

from collections.abc import Callable
from datetime import datetime, timedelta, timezone


class Clock:
    """The database's clock."""

    def now(self) -> datetime | None:
        return None

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Register a callback for when time jumps (never, for the real clock)."""


class ManualClock(Clock):
    """Real time shifted by an offset that tests advance; waiters are woken on each jump."""

    def __init__(self) -> None:
        self.offset = timedelta(0)
        self._callbacks: list[Callable[[], None]] = []

    def now(self) -> datetime:
        return datetime.now(timezone.utc) + self.offset

    def on_advance(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def advance(self, delta: timedelta) -> None:
        self.offset += delta
        for callback in self._callbacks:
            callback()
