"""Requests that do not decode (a corrupt protobuf, invalid UTF-8 in a string field,
messages nested past protobuf's depth limit) are INVALID_ARGUMENT, for every method
of both front-ends, logged once per method rather than with a traceback per request.

gRPC decodes a request with its handler's ``request_deserializer`` before any
interceptor or servicer sees it, and answers a deserializer's exception with
UNKNOWN: the code spanq keeps for an unknown commit outcome. So the guard
replaces each deserializer with one that hands an ``Undecodable`` on instead of
raising, and refuses it before the rest of the chain (authorization, the
servicer) runs: nothing is read or stored for it.
"""

import logging
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from ..ground import errors
from . import status
from .interceptors import Handler, HandlerWrapper, behaviour_of, guarded

logger = logging.getLogger(__name__)


class Undecodable:
    """What the guarded deserializer hands on for bytes that are not a request."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class DecodeGuard(HandlerWrapper):
    def __init__(self) -> None:
        super().__init__()
        self._logged: set[str] = set()

    def _refusal(self, method: str, request: Undecodable) -> errors.InvalidArgument:
        if method not in self._logged:
            self._logged.add(method)
            logger.warning("a %s request did not decode (%s); it and any more like it are answered "
                           "INVALID_ARGUMENT, not logged again", method, request.reason)
        return errors.InvalidArgument(
            f"the request does not decode as {method}'s request message ({request.reason}); send a well-formed "
            "protobuf: strings valid UTF-8, messages nested at most 100 levels (JSON values about 50)"
        )

    def wrap(self, method: str, handler: Handler) -> Handler:
        found = behaviour_of(handler)
        if found is None or handler.request_deserializer is None or not found[0].startswith("unary_"):
            return handler  # (a stream of requests is decoded one by one as it is read: spanq serves none)
        kind, behaviour = found
        decode: Callable[[bytes], Any] = handler.request_deserializer

        def deserialize(data: bytes) -> Any:
            try:
                return decode(data)
            except (DecodeError, RecursionError) as exc:
                return Undecodable(str(exc) or type(exc).__name__)

        refusal = self._refusal

        async def admit(request: Any, context: grpc.aio.ServicerContext) -> None:
            if isinstance(request, Undecodable):
                await status.abort(context, refusal(method, request))

        wrapped = guarded(behaviour, admit)
        if wrapped is None:
            return handler
        return handler._replace(**{kind: wrapped, "request_deserializer": deserialize})  # type: ignore[attr-defined, no-any-return]
