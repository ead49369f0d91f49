"""The blocking client: ``spanq.Client``, a thin layer over ``spanq.aio.Client``.

Every method runs the async client's method on a private event-loop thread
and waits for it; no logic is duplicated here. Thread-safe: any number of
threads may share one Client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc

from . import aio
from ._connect import DEFAULT_CONNECT_TIMEOUT
from ._loop import LoopThread
from ._codec import as_timedelta
from ._retry import DEFAULT_RETRY, Retry
from ._slots import DEFAULT_MAX_CONCURRENT_CALLS
from ._transaction import Transaction
from ._types import BatchSettings, Future, Key, KeyValue, OutgoingMessage, PublishFlowControl

__all__ = ["Client", "Subscription"]

P = ParamSpec("P")
R = TypeVar("R")


def _blocking(method: Callable[Concatenate[aio.Client, P], Coroutine[Any, Any, R]]) -> Callable[Concatenate[Client, P], R]:
    """The blocking twin of an ``aio.Client`` coroutine method (same signature and docstring)."""

    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._thread.run(method(self._aio, *args, **kwargs))

    call.__name__ = method.__name__
    call.__qualname__ = f"Client.{method.__name__}"
    call.__doc__ = method.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]  # inspect.signature() shows the real parameters
    return call


def _subscribing(method: Callable[Concatenate[aio.Client, P], aio.Subscription]) -> Callable[Concatenate[Client, P], Subscription]:
    """The blocking twin of ``aio.Client.subscribe`` (same signature, typed as such): starts it on the loop
    thread and returns a blocking Subscription."""

    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Subscription:
        async def start() -> aio.Subscription:
            return method(self._aio, *args, **kwargs)

        return Subscription(self._thread, self._thread.run(start()))

    call.__name__ = method.__name__
    call.__qualname__ = f"Client.{method.__name__}"
    call.__doc__ = (method.__doc__ or "").replace(
        "Must be\n        called on the running event loop.",
        "Returns at\n        once; the subscription runs on the client's loop thread.",
    )
    call.__wrapped__ = method  # type: ignore[attr-defined]  # inspect.signature() shows the real parameters
    return call


class Subscription:
    """A running subscription (blocking API): returned by ``spanq.Client.subscribe``.

    ``cancel()`` begins a graceful shutdown (receiving stops, running callbacks get ``shutdown_timeout``
    seconds, messages still in hand are nacked); ``result(timeout)`` blocks until the subscription ends and
    raises the error that ended it, if any. ``with`` cancels and waits on exit. Thread-safe.
    """

    def __init__(self, thread: LoopThread, inner: aio.Subscription) -> None:
        self._thread = thread
        self._inner = inner

    @property
    def queue(self) -> str:
        """The queue's name."""
        return self._inner.queue

    @property
    def in_hand(self) -> int:
        """Messages leased to this subscription and not yet acked, nacked or lost."""
        return self._inner.in_hand

    def cancel(self) -> None:
        """Begins a graceful shutdown; returns at once. Idempotent."""
        self._inner.cancel()

    def done(self) -> bool:
        """Whether the subscription has ended."""
        return self._inner.done()

    def result(self, timeout: float | None = None) -> None:
        """Blocks until the subscription ends (TimeoutError after ``timeout`` seconds); raises the error that
        ended it, if any."""
        self._thread.run(self._inner.result(), timeout)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.cancel()
        if exc_type is None:
            self.result()
        else:
            with contextlib.suppress(Exception):
                self.result()

    def __repr__(self) -> str:
        return f"<spanq.Subscription {self.queue!r} {'done' if self.done() else 'running'}>"


class Client:
    """A blocking, thread-safe spanq client with the same methods as ``spanq.aio.Client``.

    It runs an ``aio.Client`` on a private event-loop thread. Use ``with spanq.Client(target) as client:``
    or call ``close()``. Callbacks given to ``subscribe`` run on a thread pool (plain functions) or on the
    private loop (``async def``); never call a blocking Client method from an ``async def`` callback.
    """

    def __init__(
        self,
        target: str,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
        retry: Retry = DEFAULT_RETRY,
        options: Sequence[tuple[str, Any]] = (),
        max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
        batch_settings: BatchSettings = BatchSettings(),
        publish_flow_control: PublishFlowControl = PublishFlowControl(),
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        """Takes the arguments of ``spanq.aio.Client``."""
        self._aio = aio.Client(target, credentials=credentials, token=token, retry=retry, options=options,
                               max_concurrent_calls=max_concurrent_calls, batch_settings=batch_settings,
                               publish_flow_control=publish_flow_control, connect_timeout=connect_timeout)
        self._thread = LoopThread(f"spanq-client-{target}")
        self.target = target
        self._closed = False

    create_queue = _blocking(aio.Client.create_queue)
    get_queue = _blocking(aio.Client.get_queue)
    list_queues = _blocking(aio.Client.list_queues)
    drop_queue = _blocking(aio.Client.drop_queue)
    send = _blocking(aio.Client.send)
    send_many = _blocking(aio.Client.send_many)
    receive = _blocking(aio.Client.receive)
    ack = _blocking(aio.Client.ack)
    renew_lease = _blocking(aio.Client.renew_lease)
    nack = _blocking(aio.Client.nack)
    commit = _blocking(aio.Client.commit)
    stats = _blocking(aio.Client.stats)
    peek = _blocking(aio.Client.peek)
    purge = _blocking(aio.Client.purge)
    redrive = _blocking(aio.Client.redrive)
    open = _blocking(aio.Client.open)

    flush = _blocking(aio.Client.flush)
    subscribe = _subscribing(aio.Client.subscribe)

    def publish(
        self,
        queue: str,
        payload: Any,
        *,
        key: Key | KeyValue | None = None,
        deliver_time: datetime | None = None,
        delay: timedelta | float | None = None,
    ) -> Future[Key]:
        """Publishes one message through the batching publisher and returns its Future at once
        (``future.result()`` is the key, or raises this message's own error).

        As ``spanq.aio.Client.publish``, except that at the flow-control limit it blocks the calling thread
        (or raises ResourceExhausted, per ``publish_flow_control.limit_exceeded``). Thread-safe: messages of
        one thread to one queue are stored in the order published. ``flush()`` sends at once; ``close()``
        flushes.
        """
        return self.publish_many(queue, [OutgoingMessage(payload, key, deliver_time, as_timedelta(delay))])[0]

    def publish_many(self, queue: str, messages: Iterable[OutgoingMessage | Any]) -> list[Future[Key]]:
        """``publish`` for several messages, one Future each (not atomic: see ``send_many`` for that)."""
        publisher, schema = self._aio._publisher, self._aio._schemas.get(queue)
        if publisher is None or schema is None:  # first use: one trip to the loop thread
            publisher, schema = self._thread.run(self._aio._publishing(queue))
        return publisher.publish_blocking(schema, messages)

    @contextlib.contextmanager
    def transaction(self, *, request_id: str | None = None) -> Iterator[Transaction]:
        """``with client.transaction() as tx: tx.ack(...); tx.send(...)`` commits on a clean exit (nothing
        on an error, or when empty); ``tx.result`` then holds the CommitResult."""
        tx = Transaction()
        yield tx
        if len(tx):
            self.commit(tx, request_id=request_id)

    def close(self, timeout: float | None = None) -> None:
        """Shuts subscriptions down gracefully, sends what was published, closes the channel and stops the
        loop thread (as ``spanq.aio.Client.aclose``). Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.run(self._aio.aclose(timeout))
        finally:
            self._thread.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<spanq.Client {self.target}{' closed' if self._closed else ''}>"


for _cls in (Client, Subscription):
    _cls.__module__ = "spanq"
