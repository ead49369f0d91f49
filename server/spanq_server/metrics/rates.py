"""Send and ack rates per queue over the last minute, for GetQueueStats.

Fed by the metrics hooks (metrics/counters.py: Counters.sent / Counters.acked)
after each commit, so they count what this server process committed: with
several servers (or ``--workers``), each answers for its own share. The database cannot tell: an
acked message is gone. One bucket per second, reused as the seconds go round:
a hook costs a dict lookup and an addition.
"""

import time
from collections.abc import Callable

WINDOW = 60
"""Seconds a rate averages over."""
HISTORY = 300
"""Seconds of per-second counts kept: the dashboard's chart of the last minutes."""


class _Window:
    __slots__ = ("stamps", "counts")

    def __init__(self) -> None:
        self.stamps = [-1] * HISTORY
        self.counts = [0] * HISTORY

    def add(self, second: int, n: int) -> None:
        i = second % HISTORY
        if self.stamps[i] != second:
            self.stamps[i] = second
            self.counts[i] = 0
        self.counts[i] += n

    def total(self, second: int) -> int:
        """Counted over the WINDOW seconds that end with ``second``."""
        return sum(c for s, c in zip(self.stamps, self.counts) if second - WINDOW < s <= second)

    def series(self, second: int, step: int) -> list[int]:
        """Counts per ``step`` seconds over the HISTORY seconds that end with ``second``, oldest first."""
        out = [0] * (HISTORY // step)
        for s, c in zip(self.stamps, self.counts):
            age = second - s
            if 0 <= age < HISTORY:
                out[len(out) - 1 - age // step] += c
        return out


class Rates:
    """Messages per second by queue and kind ("sent", "acked"), over the last WINDOW seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._windows: dict[tuple[str, str], _Window] = {}

    def add(self, queue: str, kind: str, n: int) -> None:
        window = self._windows.get((queue, kind))
        if window is None:
            window = self._windows[(queue, kind)] = _Window()
        window.add(int(self._clock()), n)

    def rate(self, queue: str, kind: str) -> float:
        window = self._windows.get((queue, kind))
        return window.total(int(self._clock())) / WINDOW if window is not None else 0.0

    def series(self, queue: str, kind: str, step: int = 10) -> list[float]:
        """Messages per second in each ``step`` of the last HISTORY seconds, oldest first."""
        window = self._windows.get((queue, kind))
        counts = window.series(int(self._clock()), step) if window is not None else [0] * (HISTORY // step)
        return [c / step for c in counts]

    def forget(self, queue: str) -> None:
        for key in [k for k in self._windows if k[0] == queue]:
            del self._windows[key]
