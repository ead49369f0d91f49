"""The shape both of the server's interceptors take (metrics/timing.py's, auth.py's
guard): wrap each method's handler once, and hand gRPC the wrapped one per call."""

import contextvars
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = Any  # the class is generic only in its type stubs


CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("spanq_caller", default=None)
"""The name of the token a call authenticated with (auth.py sets it; None without a token
file). Each call runs in its own task, so one call's value never reaches another."""


class HandlerWrapper(grpc.aio.ServerInterceptor):
    """Builds ``wrap(method, handler)`` once per method and caches it: the servicers'
    handlers do not change, so a call costs one dict lookup here."""

    def __init__(self) -> None:
        self._handlers: dict[str, tuple[Handler, Handler]] = {}

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler  # an unknown method: gRPC answers UNIMPLEMENTED
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        cached = self._handlers.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._handlers[method] = (handler, self.wrap(method.lstrip("/"), handler))
        return cached[1]

    def wrap(self, method: str, handler: Handler) -> Handler:
        """The handler to serve ``method`` ("package.Service/Method") with."""
        raise NotImplementedError


def behaviour_of(handler: Handler) -> tuple[str, Any] | None:
    """(kind, function) of a method handler, kind as "unary_unary" etc.; None if it has none."""
    for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            return kind, behaviour
    return None


Admit = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Callable[[Any], None] | None]]
"""Runs before a call's behaviour: aborts the call to refuse it, or admits it, optionally
with a function to run on its (unary) response."""


def guarded(behaviour: Any, admit: Admit) -> Any | None:
    """``behaviour`` (an asyncio unary or server-streaming method) with ``admit`` run first;
    None for a behaviour of another kind (a synchronous one)."""
    if inspect.isasyncgenfunction(behaviour):
        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await admit(request, context)
            responses = behaviour(request, context)
            try:
                async for response in responses:
                    yield response
            finally:
                await responses.aclose()

        return streaming
    if inspect.iscoroutinefunction(behaviour):
        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            after = await admit(request, context)
            response = await behaviour(request, context)
            if after is not None and response is not None:
                after(response)
            return response

        return unary
    return None
