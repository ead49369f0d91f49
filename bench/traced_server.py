"""``python -m bench.traced_server serve ...``: ``spanq serve`` with timestamps at the
steps of a message's way through the server, for the latency budget (bench/budget.py).

A bench-only hook: this module wraps a few of the server's methods before it starts
(the Send and Ack handlers, the statements that commit a send and an ack, the
wake-up, the lease, the encoding and the write of a Receive response) so that each
records CLOCK_MONOTONIC nanoseconds, the clock the bench reads too; at exit it writes
them to the JSON file named by SPANQ_BENCH_TRACE. ``spanq serve`` itself has no such
hooks: nothing of this costs the server anything when it is not the bench's.
"""

import atexit
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

EVENTS: list[tuple[str, int, int, int]] = []
"""(step, start ns, end ns, rows): rows is the lease's message count, else 0."""


def _timed(owner: Any, name: str, step: str, rows: Callable[[Any], int] | None = None) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic_ns()
        result = await original(*args, **kwargs)
        EVENTS.append((step, start, time.monotonic_ns(), rows(result) if rows else 0))
        return result

    setattr(owner, name, timed)


def _instant(owner: Any, name: str, step: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def marked(*args: Any, **kwargs: Any) -> Any:
        now = time.monotonic_ns()
        EVENTS.append((step, now, now, 0))
        return original(*args, **kwargs)

    setattr(owner, name, marked)


def install() -> None:
    from spanq_server.store import messages

    # First: group_commit.py takes Store.messages_ack_claimed_group when it is imported.
    assert "spanq_server.domain.group_commit" not in sys.modules
    _timed(messages.MessageTables, "messages_insert_claimed", "send_commit")
    _timed(messages.MessageTables, "messages_ack_claimed_group", "ack_commit")
    _timed(messages.MessageTables, "messages_ack_claimed", "ack_commit")
    _timed(messages.MessageTables, "messages_lease", "lease", rows=len)
    from spanq_server.domain.receive import stream as receive, wakeups
    from spanq_server.v1 import service

    _timed(service.QueueService, "Send", "send_rpc")
    _timed(service.QueueService, "Ack", "ack_rpc")
    _instant(wakeups.Wakeups, "wake", "wake")

    encode = service.receive_responses

    @functools.wraps(encode)
    def encoded(*args: Any, **kwargs: Any) -> Any:
        start = time.monotonic_ns()
        out = encode(*args, **kwargs)
        EVENTS.append(("encode", start, time.monotonic_ns(), 0))
        return out

    service.receive_responses = encoded  # Receive binds it per stream (functools.partial)
    serve = receive.Receiver.serve

    @functools.wraps(serve)
    async def serving(self: Any, queue: Any, options: Any, encode: Any, write: Any) -> Any:
        async def timed_write(response: Any) -> Any:
            start = time.monotonic_ns()
            out = await write(response)
            EVENTS.append(("write", start, time.monotonic_ns(), 0))
            return out

        return await serve(self, queue, options, encode, timed_write)

    receive.Receiver.serve = serving  # type: ignore[method-assign]


def _dump() -> None:
    path = os.environ.get("SPANQ_BENCH_TRACE")
    if path:
        with open(path, "w") as out:
            json.dump(EVENTS, out)


def main() -> None:
    install()
    atexit.register(_dump)
    from spanq_server.cli import main as serve

    serve(sys.argv[1:])


if __name__ == "__main__":
    main()
