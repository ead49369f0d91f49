"""The client's target: checked when the client is made, so that one that cannot be
a server fails at once, not after a minute of retries."""

from __future__ import annotations

import re

from ._errors import InvalidArgument

GRPC_SCHEMES = ("dns", "ipv4", "ipv6", "unix", "unix-abstract", "vsock")
"""Name-resolver schemes gRPC itself understands (``dns:///host:port``, ``unix:/path``): passed as given."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.%\w]+\]|[^\s:/\[\]]+):([0-9]+)$")


def check_target(target: str) -> str:
    """``target`` if it can name a server (``host:port``, ``[v6]:port``, or a gRPC scheme such as
    ``dns:///host:port``), else InvalidArgument saying what to give instead."""
    scheme = _SCHEME.match(target)
    if scheme and scheme.group(1).lower() in GRPC_SCHEMES:
        return target
    if scheme and "://" in target:
        rest = target.split("://", 1)[1].rstrip("/")
        hint = f" (e.g. {rest!r})" if _HOST_PORT.match(rest) else ""
        raise InvalidArgument(
            f"target {target!r} is a URL; a spanq client connects to host:port{hint}, and uses TLS when given "
            "credentials, not an https:// scheme"
        )
    found = _HOST_PORT.match(target)
    if found is None:
        raise InvalidArgument(
            f"target {target!r} is not host:port (e.g. 'localhost:50051', '[::1]:50051', 'dns:///spanq.internal:443')"
        )
    port = int(found.group(2))
    if not 0 < port < 65536:
        raise InvalidArgument(f"target {target!r} has port {port}: a port is between 1 and 65535")
    return target
