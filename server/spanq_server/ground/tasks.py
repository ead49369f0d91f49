"""Named, stoppable background tasks: start() and stop() are idempotent."""

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


class BackgroundTask:
    """One named asyncio task running ``run()`` until stopped."""

    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.name = name
        self._run = run
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancels the task and waits for it to end."""
        task, self._task = self._task, None
        if task is None:
            return
        # On Python 3.11 asyncio.wait_for can swallow a cancellation that races with its
        # inner call finishing (CPython gh-86296): cancel again until the task has ended,
        # or stop() would wait for ever on a task that carries on.
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1)
        with contextlib.suppress(asyncio.CancelledError):
            await task
