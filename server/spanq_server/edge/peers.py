"""A client's address as people read it: gRPC's peer string percent-encodes an IPv6
address's brackets ("ipv6:%5B::1%5D:5934", a `localhost` client on most machines),
which the consumers list and the refusal log show as "ipv6:[::1]:5934"."""

from typing import Any
from urllib.parse import unquote


def peer_of(context: Any) -> str:
    """``context.peer()`` of a gRPC call, decoded ("" when gRPC knows none)."""
    return unquote(context.peer() or "")
