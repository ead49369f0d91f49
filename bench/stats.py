"""Medians, ranges and percentiles of repeated runs."""

import dataclasses
import math
import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) by linear interpolation between order statistics."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclasses.dataclass
class Figure:
    """One measured quantity over several runs: printed as median [min-max]."""

    runs: list[float] = dataclasses.field(default_factory=list)

    def add(self, value: float) -> None:
        self.runs.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else math.nan

    @property
    def low(self) -> float:
        return min(self.runs) if self.runs else math.nan

    @property
    def high(self) -> float:
        return max(self.runs) if self.runs else math.nan

    def as_dict(self) -> dict[str, object]:
        return {"median": self.median, "min": self.low, "max": self.high, "runs": self.runs}


def ratio(a: float, b: float) -> float:
    if not b or math.isnan(a) or math.isnan(b):
        return math.nan
    return a / b
