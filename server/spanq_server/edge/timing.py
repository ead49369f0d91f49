"""The gRPC interceptor that times every RPC: spanq_rpc_duration_seconds, by method
and final status code. Outermost in server.py, so that refused calls are timed too."""

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Histogram

from .interceptors import Handler, HandlerWrapper, behaviour_of

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                   60.0, 300.0, 3600.0)
"""Seconds. Unary RPCs take milliseconds; the long ones are Receive streams (up to an hour)."""


class RpcTiming(HandlerWrapper):
    """Observes each RPC's duration and final status code in ``histogram``
    (spanq_rpc_duration_seconds, in the server's registry). The timed handler is built
    once per method, and the histogram child once per (method, code): per call, two dict
    lookups and one observation."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()
        self.histogram = Histogram("spanq_rpc_duration_seconds", "Time from an RPC's start to its status, by "
                                   "method and status code; for a server stream, its whole life.",
                                   ["method", "code"], buckets=LATENCY_BUCKETS, registry=registry)
        self._children: dict[tuple[str, grpc.StatusCode], Any] = {}

    @contextlib.contextmanager
    def _timed(self, method: str, context: grpc.aio.ServicerContext) -> Iterator[None]:
        """Observes the call's duration under its final status code."""
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            yield
        except (asyncio.CancelledError, GeneratorExit):  # the client went away
            code = grpc.StatusCode.CANCELLED
            raise
        except BaseException:
            code = _failed(context)
            raise
        else:
            code = _code(context)
        finally:
            child = self._children.get((method, code))
            if child is None:
                child = self._children[(method, code)] = self.histogram.labels(method, code.name)
            child.observe(time.perf_counter() - started)

    def wrap(self, method: str, handler: Handler) -> Handler:
        found = behaviour_of(handler)
        if found is None:
            return handler
        kind, behaviour = found
        timed = self._timed
        if inspect.isasyncgenfunction(behaviour):
            async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                responses = behaviour(request, context)
                try:
                    with timed(method, context):
                        async for response in responses:
                            yield response
                finally:
                    await responses.aclose()  # at once, not when collected: its own finally runs now

            return handler._replace(**{kind: streaming})  # type: ignore[attr-defined, no-any-return]
        if inspect.iscoroutinefunction(behaviour):
            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                with timed(method, context):
                    return await behaviour(request, context)

            return handler._replace(**{kind: unary})  # type: ignore[attr-defined, no-any-return]
        return handler  # a synchronous handler (none of spanq's): not timed


def _code(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """The status of a handler that returned: OK unless it set another."""
    return _status_code(context) or grpc.StatusCode.OK


def _failed(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """The status of a handler that raised: the one it aborted with, else UNKNOWN (gRPC's answer)."""
    return _status_code(context) or grpc.StatusCode.UNKNOWN


def _status_code(context: grpc.aio.ServicerContext) -> grpc.StatusCode | None:
    code: Any = context.code()
    if code is None or isinstance(code, grpc.StatusCode):
        return code
    for member in grpc.StatusCode:  # some grpcio versions answer the numeric code
        if member.value[0] == code:
            return member
    return None
