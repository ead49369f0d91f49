"""What the dashboard has seen of each queue: its counts sampled at each read (every 2 s
while a page is open), kept for the charts' last HISTORY seconds, and the marks a queue
earns from them (stalled, dead-lettering), each with the sentence that explains it.

Sampled when read, not in the background: a count reads the whole queue table, which
a server should not do every few seconds for every queue when nobody looks. The
chart shows a gap where nobody did.
"""

import collections
import dataclasses
import time
from typing import Any

from ..ground.clock import Clock
from ..ground.model import QueueCounts
from ..metrics.rates import HISTORY

WINDOW = 60.0
"""Seconds a mark looks back over."""
SLACK = 2.0
"""Seconds two clocks (this process's, the database's) may disagree by within a window."""


@dataclasses.dataclass(frozen=True)
class Sample:
    at: float
    ready: int
    scheduled: int
    leased: int
    dead: int
    oldest_ready_age: float


class Watch:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._samples: dict[str, collections.deque[Sample]] = {}

    def _now(self) -> float:
        now = self._clock.now()  # a test's ManualClock; the real one is the database's (None)
        return now.timestamp() if now is not None else time.time()

    def record(self, name: str, counts: QueueCounts) -> None:
        now = self._now()
        samples = self._samples.setdefault(name, collections.deque())
        if samples and now - samples[-1].at < 1.0:
            samples.pop()  # two tabs open: one sample a second is plenty
        samples.append(Sample(now, counts.ready, counts.scheduled, counts.leased, counts.dead_lettered,
                              counts.oldest_ready_age))
        while samples and samples[0].at < now - HISTORY - WINDOW:
            samples.popleft()

    def forget_missing(self, names: set[str]) -> None:
        for name in [n for n in self._samples if n not in names]:
            del self._samples[name]

    def series(self, name: str, step: int) -> dict[str, list[float | None]]:
        """The last sample in each ``step`` seconds of the last HISTORY, oldest first (None: not
        read then), and the dead-letter rate: the rise of the dead-letter count per second
        since the sample before (a redrive's fall counts 0)."""
        slots = HISTORY // step
        now = self._now()
        last: list[Sample | None] = [None] * slots
        before: list[Sample | None] = [None] * slots
        previous: Sample | None = None
        for s in self._samples.get(name, ()):
            i = slots - 1 - int((now - s.at) // step)
            if 0 <= i < slots:
                if last[i] is None:
                    before[i] = previous
                last[i] = s
            previous = s
        out: dict[str, list[float | None]] = {k: [] for k in ("ready", "scheduled", "leased", "dead_rate")}
        for sample, b in zip(last, before):
            out["ready"].append(sample.ready if sample else None)
            out["scheduled"].append(sample.scheduled if sample else None)
            out["leased"].append(sample.leased if sample else None)
            out["dead_rate"].append(max(0, sample.dead - b.dead) / max(1.0, sample.at - b.at) if sample and b else None)
        return out

    def marks(self, name: str, counts: QueueCounts, dead_letter_queue: bool) -> list[dict[str, Any]]:
        """Why the queue needs a look, if it does: each mark's kind and the sentence that says why."""
        now = self._now()
        window = [s for s in self._samples.get(name, ()) if s.at >= now - WINDOW - SLACK]
        marks = []
        if window and counts.dead_lettered > min(s.dead for s in window):
            rise = counts.dead_lettered - min(s.dead for s in window)
            marks.append({"kind": "dead-lettering", "text": f"{rise} message(s) went to its dead-letter queue "
                                                            "in the last minute"})
        # The same message oldest ready for the whole minute: nobody took it. A backlog being
        # worked through changes its oldest message, and a dead-letter queue's messages wait
        # for an operator by design.
        then = next((s for s in reversed(self._samples.get(name, ())) if s.at <= now - WINDOW), None)
        if (not dead_letter_queue and then is not None and counts.ready and then.oldest_ready_age > 0
                and counts.oldest_ready_age - then.oldest_ready_age >= now - then.at - SLACK):
            marks.append({"kind": "stalled", "text": f"its oldest ready message has waited "
                                                     f"{counts.oldest_ready_age:.0f} s and nobody took it "
                                                     f"in the last {now - then.at:.0f} s"})
        return marks
