"""Failing fast: a target that cannot be a server is refused when the client is
made, and a call waits at most ``connect_timeout`` for the channel to connect.

grpcio alone retries a target such as ``http://localhost:50051`` (an unknown
resolver scheme, read as a host name) for the whole retry deadline, and a
call to a stopped server fails only at that deadline with "failed to connect
to all addresses". Waiting for the channel before a call is sent bounds the
wait and lets the error name the target; a call that was never sent cannot
have committed, so no outcome is left unknown by it.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time

import grpc

from ._errors import InvalidArgument, Unavailable

CONNECT_TIMEOUT = "CONNECT_TIMEOUT"
"""The reason of the Unavailable raised when the channel did not connect within ``connect_timeout``."""

DEFAULT_CONNECT_TIMEOUT = 5.0
"""Seconds a call waits for the channel to connect before it fails with Unavailable."""

_GRPC_SCHEMES = frozenset({"dns", "unix", "unix-abstract", "ipv4", "ipv6", "vsock", "xds", "google-c2p"})
"""gRPC's own name-resolver schemes: such targets are gRPC's to parse."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.%\w]+\]|[^:\[\]]+)(?::(?P<port>[^:]*))?$")


def check_target(target: str) -> str:
    """``target`` if it can name a gRPC server; InvalidArgument (a ValueError) saying why not otherwise."""
    example = "give host:port, as in 'localhost:50051'"
    if not isinstance(target, str) or not target.strip() or target != target.strip():
        raise InvalidArgument(f"the target {target!r} is empty or has surrounding spaces: {example}")
    scheme = _SCHEME.match(target)
    if scheme:
        if scheme.group(1).lower() in _GRPC_SCHEMES:
            return target
        rest = target[scheme.end():].split("/", 1)[0]
        instead = f"give {rest!r}" if ":" in rest and _HOST_PORT.match(rest) else example
        raise InvalidArgument(
            f"the target {target!r} is a URL, not a gRPC target: {instead}, without {scheme.group(1)}:// "
            "(for TLS pass credentials=grpc.ssl_channel_credentials())"
        )
    if target.split(":", 1)[0].lower() in _GRPC_SCHEMES:
        return target  # dns:host:port, unix:path, ipv4:addr:port
    found = _HOST_PORT.match(target)
    if found is None:
        if target.count(":") > 1 and "[" not in target:
            return target  # a bare IPv6 address: gRPC's to parse
        raise InvalidArgument(f"the target {target!r} is not host:port: {example}")
    port = found.group("port")
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise InvalidArgument(
            f"the target {target!r} has no valid port ({port!r}): a port is a number from 1 to 65535; {example}"
        )
    return target


async def wait_connected(channel: grpc.aio.Channel, target: str, timeout: float) -> None:
    """Returns once ``channel`` is connected (at once if it is); Unavailable naming the target after
    ``timeout`` seconds otherwise. Cancellable."""
    state = channel.get_state(try_to_connect=True)
    if state == grpc.ChannelConnectivity.READY:
        return
    try:
        async with asyncio.timeout(timeout):
            await channel.channel_ready()
    except TimeoutError:
        raise not_connected(target, timeout, channel.get_state()) from None


class Connectivity:
    """A blocking channel's state, as its connectivity callbacks last said: ``wait`` is the blocking
    client's ``wait_connected``, and costs a look at one attribute while the channel is READY."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.state = grpc.ChannelConnectivity.IDLE
        self._channel = channel
        self._ready = threading.Event()
        channel.subscribe(self._changed, try_to_connect=True)

    def _changed(self, state: grpc.ChannelConnectivity) -> None:  # on a gRPC thread
        self.state = state
        if state == grpc.ChannelConnectivity.READY:
            self._ready.set()
        else:
            self._ready.clear()

    def wait(self, target: str, timeout: float) -> None:
        if self.state == grpc.ChannelConnectivity.READY:
            return
        # A channel whose connection dropped (the server restarted) goes IDLE and stays so until
        # asked to connect: grpcio's poller honours try_to_connect once per subscribe, so ask again.
        self._channel.subscribe(_ignore, try_to_connect=True)
        self._channel.unsubscribe(_ignore)
        if self._ready.wait(timeout):
            return
        raise not_connected(target, timeout, self.state)


    def close(self, grace: float = 1.0) -> None:
        """Closes the channel once its connectivity poller has stopped. grpcio's poller thread
        calls the channel between two looks at its subscribers; a close in that gap makes it
        print "Exception in thread ... Channel closed!" to stderr (as `spanq receive` did at
        exit). So: unsubscribe, wait (bounded) for the poller to see it and stop, then close."""
        self._channel.unsubscribe(self._changed)
        state = getattr(self._channel, "_connectivity_state", None)  # grpcio's; if it moves, only the wait goes
        give_up = time.monotonic() + grace
        while state is not None and state.polling and time.monotonic() < give_up:
            time.sleep(0.01)
        self._channel.close()


def _ignore(state: grpc.ChannelConnectivity) -> None:
    """A connectivity callback that only asks the channel to connect (Connectivity.wait)."""


def not_connected(target: str, timeout: float, state: grpc.ChannelConnectivity) -> Unavailable:
    return Unavailable(
        f"cannot connect to {target} within {timeout:g}s (connect_timeout; the channel is "
        f"{state.name}): check that a spanq server is serving there and that the target, and TLS "
        "credentials if any, are right; nothing was sent",
        code=grpc.StatusCode.UNAVAILABLE, reason=CONNECT_TIMEOUT, metadata={"target": target},
    )
