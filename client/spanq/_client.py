"""The blocking client: ``spanq.Client``, a thin layer over ``spanq.aio.Client``.

Unary calls (queue admin, send, ack, renew, nack, commit) run the async
client's own methods on the calling thread, on grpcio's blocking stubs
(``_Direct``): their coroutines never suspend, so they run to the end without
an event loop, and the retry rule is the aio client's (_retry.Attempts). That
saves the hop to a loop thread and back on every call. Streams (receive,
redrive, subscribe), the publisher, and acks of messages a subscription holds
run the async client on a private event-loop thread, started on first use. No
logic is duplicated here. Thread-safe: any number of threads may share one
Client.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc
from spanq_proto.v1 import queue_pb2_grpc

from . import aio
from ._connect import DEFAULT_CONNECT_TIMEOUT, Connectivity
from ._errors import Closed
from ._loop import LoopThread, on_own_loop, run_here
from ._codec import as_timedelta
from ._retry import DEFAULT_RETRY, Retry
from ._slots import DEFAULT_MAX_CONCURRENT_CALLS, UNARY_METHODS
from ._transaction import SendOp, Transaction
from ._types import BatchSettings, Future, Key, KeyValue, Message, OutgoingMessage, PublishFlowControl

__all__ = ["Client", "Subscription"]

P = ParamSpec("P")
R = TypeVar("R")


async def _sleep(seconds: float) -> None:
    """The direct calls' wait between retries: on the calling thread, never suspending."""
    time.sleep(seconds)


class _Slotted:
    """A blocking unary stub method as the aio client awaits one: waits for the channel (connect_timeout)
    and one of the client's call slots, then calls on the calling thread."""

    __slots__ = ("_method", "_slots", "_connected")

    def __init__(self, method: Callable[..., Any], slots: threading.BoundedSemaphore,
                 connected: Callable[[], None]) -> None:
        self._method = method
        self._slots = slots
        self._connected = connected

    async def __call__(self, request: Any, **kwargs: Any) -> Any:
        self._connected()
        with self._slots:
            return self._method(request, **kwargs)


class _Direct(aio.Client):
    """The aio client's methods on a blocking channel, for ``run_here``: every call its stub makes is
    grpcio's blocking one, and its retries sleep on the calling thread. Shares the queue definitions
    it caches with the Client's loop-thread aio client."""

    _sleep = staticmethod(_sleep)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._blocking_channel: grpc.Channel | None = None
        self._blocking_stub: Any = None
        self._connectivity: Connectivity | None = None

    def _stub(self) -> Any:
        if self._closed:
            raise Closed(f"the client for {self.target} is closed")
        if self._blocking_stub is None:
            with self._lock:
                if self._blocking_stub is None:
                    if self._credentials is not None:
                        channel = grpc.secure_channel(self.target, self._credentials, options=self._options)
                    else:
                        channel = grpc.insecure_channel(self.target, options=self._options)
                    self._connectivity = Connectivity(channel)
                    stub = queue_pb2_grpc.QueueServiceStub(channel)  # type: ignore[no-untyped-call]
                    slots = threading.BoundedSemaphore(self._max_calls)
                    for name in UNARY_METHODS:
                        setattr(stub, name, _Slotted(getattr(stub, name), slots, self._wait_connected))
                    self._blocking_channel = channel
                    self._blocking_stub = stub
                    # An open channel with a connectivity watch keeps the interpreter from exiting
                    # (grpcio waits for its polling thread): close it at exit if nobody did.
                    weakref.finalize(self, self._connectivity.close)
        return self._blocking_stub

    def _wait_connected(self) -> None:
        assert self._connectivity is not None
        self._connectivity.wait(self.target, self.connect_timeout)

    async def _connected(self) -> None:
        self._stub()
        self._wait_connected()

    async def aclose(self, timeout: float | None = None) -> None:
        self._closed = True
        if self._blocking_channel is not None:
            assert self._connectivity is not None
            self._connectivity.close()


def _owned(targets: Iterable[Any]) -> bool:
    """Whether any target is a message a subscription holds: its ack or renewal must take the
    subscription's lock and tell it, on the loop thread."""
    return any(isinstance(t, Message) and t._owner is not None for t in targets)


def _direct(method: Callable[Concatenate[aio.Client, P], Coroutine[Any, Any, R]],
            on_loop: Callable[..., bool] | None = None) -> Callable[Concatenate[Client, P], R]:
    """The blocking twin of an ``aio.Client`` coroutine method (same signature and docstring), run on the
    calling thread by the Client's ``_Direct``; on the loop thread instead when ``on_loop(*args,
    **kwargs)`` says so."""

    def call(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if on_loop is not None and on_loop(*args, **kwargs):
            return self._thread.run(method(self._aio, *args, **kwargs))
        if self._loop_thread is not None and self._loop_thread.is_current():
            raise on_own_loop()
        return run_here(method(self._direct, *args, **kwargs))

    call.__name__ = method.__name__
    call.__qualname__ = f"Client.{method.__name__}"
    call.__doc__ = method.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]  # inspect.signature() shows the real parameters
    return call


def _settles_owned(queue: str, *targets: Any, **kwargs: Any) -> bool:
    return _owned(targets)


def _commits_owned(transaction: Transaction, **kwargs: Any) -> bool:
    return _owned(t for op in transaction.mutations if not isinstance(op, SendOp) for t in op.targets)


def _blocking(method: Callable[Concatenate[aio.Client, P], Coroutine[Any, Any, R]]) -> Callable[Concatenate[Client, P], R]:
    """The blocking twin of an ``aio.Client`` coroutine method (same signature and docstring), run on the
    loop thread."""

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

    Its unary calls run an ``aio.Client``'s on the calling thread over grpcio's blocking stubs; streams,
    the publisher and subscriptions run one on a private event-loop thread (started on first use). Use
    ``with spanq.Client(target) as client:``
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
        settings = dict(credentials=credentials, token=token, retry=retry, options=options,
                        max_concurrent_calls=max_concurrent_calls, batch_settings=batch_settings,
                        publish_flow_control=publish_flow_control, connect_timeout=connect_timeout)
        self._aio = aio.Client(target, **settings)  # type: ignore[arg-type]
        self._direct = _Direct(target, **settings)
        self._direct._schemas = self._aio._schemas
        self._loop_thread: LoopThread | None = None
        self._thread_lock = threading.Lock()
        self.target = target
        self._closed = False

    @property
    def _thread(self) -> LoopThread:
        """The private event-loop thread, started on first use."""
        if self._loop_thread is None:
            with self._thread_lock:
                if self._closed:
                    raise Closed("the client is closed")
                if self._loop_thread is None:
                    self._loop_thread = LoopThread(f"spanq-client-{self.target}")
        return self._loop_thread

    create_queue = _direct(aio.Client.create_queue)
    get_queue = _direct(aio.Client.get_queue)
    update_queue = _direct(aio.Client.update_queue)
    list_queues = _direct(aio.Client.list_queues)
    drop_queue = _direct(aio.Client.drop_queue)
    send = _direct(aio.Client.send)
    send_many = _direct(aio.Client.send_many)
    receive = _blocking(aio.Client.receive)
    ack = _direct(aio.Client.ack, _settles_owned)
    renew_lease = _direct(aio.Client.renew_lease, _settles_owned)
    nack = _direct(aio.Client.nack, _settles_owned)
    commit = _direct(aio.Client.commit, _commits_owned)
    stats = _direct(aio.Client.stats)
    peek = _direct(aio.Client.peek)
    purge = _direct(aio.Client.purge)
    redrive = _blocking(aio.Client.redrive)
    replay = _blocking(aio.Client.replay)
    open = _direct(aio.Client.open)

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
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        ordering_key: str | None = None,
    ) -> Future[Key]:
        """Publishes one message through the batching publisher and returns its Future at once
        (``future.result()`` is the key, or raises this message's own error).

        As ``spanq.aio.Client.publish``, except that at the flow-control limit it blocks the calling thread
        (or raises ResourceExhausted, per ``publish_flow_control.limit_exceeded``). Thread-safe: messages of
        one thread to one queue are stored in the order published. ``flush()`` sends at once; ``close()``
        flushes. A failed message of an ``ordering_key`` pauses that key until ``resume_publish``.
        """
        message = OutgoingMessage(payload, key, deliver_time, as_timedelta(delay), headers, priority, ordering_key)
        return self.publish_many(queue, [message])[0]

    def resume_publish(self, queue: str, ordering_key: str) -> None:
        """As ``spanq.aio.Client.resume_publish``. Thread-safe."""
        self._aio.resume_publish(queue, ordering_key)

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
        with self._thread_lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._loop_thread is not None:
                try:
                    self._loop_thread.run(self._aio.aclose(timeout))
                finally:
                    self._loop_thread.stop()
        finally:
            run_here(self._direct.aclose(timeout))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<spanq.Client {self.target}{' closed' if self._closed else ''}>"


for _cls in (Client, Subscription):
    _cls.__module__ = "spanq"
