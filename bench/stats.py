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


CPU_KINDS = ("client", "server", "postgres")


@dataclasses.dataclass
class CpuFigures:
    """CPU microseconds per message by process kind (bench/cpu.py), over several runs."""

    client: Figure = dataclasses.field(default_factory=Figure)
    server: Figure = dataclasses.field(default_factory=Figure)
    postgres: Figure = dataclasses.field(default_factory=Figure)

    def add(self, us: dict[str, float]) -> None:
        for kind in CPU_KINDS:
            getattr(self, kind).add(us[kind])

    @property
    def total(self) -> float:
        return sum(getattr(self, kind).median for kind in CPU_KINDS)

    def text(self, server: bool = True) -> str:
        """Medians as client/server/postgres (client/postgres for plain SQL), and their sum."""
        kinds = CPU_KINDS if server else ("client", "postgres")
        if not self.client.runs:
            return "-"
        parts = "/".join(_us(getattr(self, kind).median) for kind in kinds)
        return f"{parts} ={_us(sum(getattr(self, kind).median for kind in kinds))}"

    def as_dict(self) -> dict[str, object]:
        return {kind: getattr(self, kind).as_dict() for kind in CPU_KINDS}


def _us(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"
