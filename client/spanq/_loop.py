"""Event-loop plumbing: thread-safe scheduling onto a loop, and the private
loop thread that the sync client runs the async one on."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


def on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], object]) -> None:
    """Runs ``fn`` on ``loop``: now when already there, else as soon as the loop gets to it (any thread)."""
    if on_loop_thread(loop):
        fn()
    else:
        loop.call_soon_threadsafe(fn)


def on_own_loop() -> RuntimeError:
    return RuntimeError(
        "a blocking spanq.Client method was called on the client's own event loop (from an async "
        "callback?); use spanq.aio.Client there, or await the Message's Future"
    )


def run_here(coro: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine that never suspends to its end on the calling thread, without an event loop
    (the blocking client's direct calls: grpcio's blocking stubs, retries that wait with time.sleep)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("spanq: a direct call awaited something that needs an event loop")


class LoopThread:
    """A private event loop on a daemon thread; ``run()`` blocks the calling thread on a coroutine."""

    def __init__(self, name: str = "spanq-client") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
            finally:
                self.loop.close()

    def is_current(self) -> bool:
        """Whether the calling thread is this loop's."""
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs ``coro`` on the loop thread and waits for it; Ctrl-C cancels it."""
        if self.is_current():
            coro.close()
            raise on_own_loop()
        if not self._thread.is_alive():
            coro.close()
            from ._errors import Closed

            raise Closed("the client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def stop(self) -> None:
        """Stops the loop and joins the thread; idempotent."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if threading.current_thread() is not self._thread:
                self._thread.join()
