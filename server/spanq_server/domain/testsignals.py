"""Signals the server raises for tests at the points they wait for (River's testsignal).

A test that needs "the stream is now open and idle" listens, acts, and waits for the signal,
instead of sleeping and hoping the server got there. With nobody listening, ``emit`` is one
truth test on an empty list (the value is built only for a listener): the server pays nothing
for them in production.

    with testsignals.stream_waiting.listen() as waiting:
        open the stream ...
        await waiting.wait(match=lambda v: v.queue == "tasks")

Signals are process-wide: a test sees those of every server it runs in its own process. A
server in a subprocess cannot be heard; tests wait on what it shows instead (a metric, a log
line) through tests/helpers.py's ``until``.
"""

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Listener(Generic[T]):
    """What one ``listen()`` has heard: every value since it began (or since ``clear()``)."""

    def __init__(self) -> None:
        self.values: list[T] = []
        self._lock = threading.Lock()
        self._wakers: list[Callable[[], None]] = []

    def _heard(self, value: T) -> None:
        with self._lock:
            self.values.append(value)
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def clear(self) -> None:
        """Forgets what was heard: the next ``wait`` counts only what comes after."""
        with self._lock:
            self.values.clear()

    def count(self, match: Callable[[T], bool] | None = None) -> int:
        with self._lock:
            return sum(1 for v in self.values if match is None or match(v))

    async def wait(self, n: int = 1, *, match: Callable[[T], bool] | None = None,
                   timeout: float = 10, what: str = "") -> list[T]:
        """Until ``n`` values (that ``match``) were heard; those values. Fails the test
        (AssertionError) after ``timeout`` seconds."""
        def enough(values: list[T]) -> bool:
            return sum(1 for v in values if match is None or match(v)) >= n

        heard = await self.until(enough, timeout=timeout, what=what or f"{n} signals")
        return [v for v in heard if match is None or match(v)]

    async def until(self, condition: Callable[[list[T]], bool], *, timeout: float = 10,
                    what: str = "a signal") -> list[T]:
        """Until ``condition(values heard)`` holds, checked at each emission; the values.
        Fails the test (AssertionError) after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        heard = asyncio.Event()

        def wake() -> None:  # from whichever thread emitted
            loop.call_soon_threadsafe(heard.set)

        with self._lock:
            self._wakers.append(wake)
        try:
            deadline = loop.time() + timeout
            while True:
                heard.clear()
                with self._lock:
                    values = list(self.values)
                if condition(values):
                    return values
                left = deadline - loop.time()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
                try:
                    await asyncio.wait_for(heard.wait(), left)
                except asyncio.TimeoutError:
                    pass
        finally:
            with self._lock:
                self._wakers.remove(wake)


class Signal(Generic[T]):
    """One named point in the server's code that tests can wait for; ``make`` builds the value
    listeners hear from what ``emit`` is given."""

    def __init__(self, name: str, make: Callable[..., T]) -> None:
        self.name = name
        self._make = make
        self._listeners: list[Listener[T]] = []

    def emit(self, *fields: Any) -> None:
        if self._listeners:  # the whole cost when no test listens
            value = self._make(*fields)
            for listener in list(self._listeners):
                listener._heard(value)

    @contextmanager
    def listen(self) -> Iterator[Listener[T]]:
        listener: Listener[T] = Listener()
        self._listeners.append(listener)
        try:
            yield listener
        finally:
            self._listeners.remove(listener)


class StreamState(NamedTuple):
    queue: str
    stream: str
    """The stream's lease-token prefix: one per stream."""
    full: bool
    """It waits for room under its max_outstanding, not for messages."""


commits_draining: Signal[str] = Signal("commits_draining", str)
"""A group committer (its kind's name: "send", "ack") was asked to close: shutdown now waits
for the groups it runs (group_commit.py)."""

stream_waiting: Signal[StreamState] = Signal("stream_waiting", StreamState)
"""A Receive stream found nothing to deliver (or, ``full``, no room under its max_outstanding)
and now waits for a wake-up, a timer or its end (receive.py). Raised at each wait."""
