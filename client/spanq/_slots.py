"""Call slots: at most so many unary calls in flight on one channel; the rest
wait here, in order, instead of in grpcio.

grpcio (1.85) started 5,000 unary calls at once on one channel and failed a
share of them (1-45% in our runs) with CANCELLED before the server saw them.
Calls past the bound wait for a slot in the SDK, which costs nothing on the
wire: the server commits the calls in flight in groups anyway, so more of
them at once adds no throughput (measured in docs/sdk.md, "Many calls at
once"). Receive streams are long-lived and take no slot. Before it takes a
slot a call waits for the channel to connect, within the client's
connect_timeout (_connect.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from spanq_proto.v1 import queue_pb2

DEFAULT_MAX_CONCURRENT_CALLS = 100
"""Unary calls in flight on one client's channel. 100 is HTTP/2's customary stream limit (grpc-go's and
Envoy's default MAX_CONCURRENT_STREAMS). A burst of 5,000 sends took the same time with 32 to 1,000 slots
(3-4 s here, within the machine's noise) and lost a third of its calls again with 2,000: the server commits
what is in flight in groups, so more at once buys nothing (docs/sdk.md, "Many calls at once")."""

UNARY_METHODS = tuple(m.name for m in queue_pb2.DESCRIPTOR.services_by_name["QueueService"].methods
                      if not m.client_streaming and not m.server_streaming)
"""The spanq.v1 unary methods, read from the service's descriptor so that a new RPC is never
missed: each call takes a slot. (Receive and Redrive, streams, take none.)"""


class Slotted:
    """A unary stub method that waits for one of its channel's slots, and holds it until the call ends."""

    __slots__ = ("_method", "_slots", "_connected")

    def __init__(self, method: Callable[..., Awaitable[Any]], slots: asyncio.Semaphore,
                 connected: Callable[[], Awaitable[None]]) -> None:
        self._method = method
        self._slots = slots
        self._connected = connected

    async def __call__(self, request: Any, **kwargs: Any) -> Any:
        await self._connected()
        async with self._slots:
            return await self._method(request, **kwargs)


def bound(stub: Any, max_calls: int, connected: Callable[[], Awaitable[None]]) -> Any:
    """``stub`` with its unary methods sharing ``max_calls`` slots (on the running loop), each call
    awaiting ``connected()`` first."""
    slots = asyncio.Semaphore(max_calls)
    for name in UNARY_METHODS:
        setattr(stub, name, Slotted(getattr(stub, name), slots, connected))
    return stub
