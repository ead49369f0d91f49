"""The test signals themselves: free when nobody listens, heard by each listener from any
thread, waited on with a bound."""

import asyncio
import threading

import pytest

from spanq_server.domain.testsignals import Signal


async def test_with_no_listener_emit_builds_nothing():
    built = []
    signal = Signal("probe", lambda *fields: built.append(fields))
    signal.emit("q", 1)
    assert built == []
    with signal.listen() as heard:
        signal.emit("q", 2)
    signal.emit("q", 3)  # the listener has left
    assert built == [("q", 2)] and len(heard.values) == 1


async def test_a_listener_waits_for_matching_values_and_clear_forgets_the_past():
    signal: Signal[str] = Signal("probe", str)
    with signal.listen() as heard:
        signal.emit("a")
        signal.emit("b")
        assert await heard.wait(match=lambda v: v == "b") == ["b"]
        heard.clear()
        later = asyncio.get_running_loop().call_later(0.01, signal.emit, "b")
        assert await heard.wait(match=lambda v: v == "b", timeout=5) == ["b"]
        later.cancel()
        with pytest.raises(AssertionError, match="timed out after 0.05s waiting for two more"):
            await heard.wait(3, timeout=0.05, what="two more")


async def test_a_value_emitted_on_another_thread_wakes_the_waiter():
    signal: Signal[str] = Signal("probe", str)
    with signal.listen() as heard:
        thread = threading.Thread(target=signal.emit, args=("from a thread",))
        waiting = asyncio.ensure_future(heard.wait(timeout=5))
        thread.start()
        assert await waiting == ["from a thread"]
        thread.join()


async def test_every_listener_hears_every_value():
    signal: Signal[int] = Signal("probe", int)
    with signal.listen() as one, signal.listen() as two:
        signal.emit(7)
    assert one.values == two.values == [7]
