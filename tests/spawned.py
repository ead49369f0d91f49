"""A spanq server in its own process, for tests that need a separate GIL,
a process to kill, or a synchronous client."""

import asyncio
import atexit
import os
import socket
import subprocess
import sys
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .helpers import until_sync

_spawned: list[subprocess.Popen[bytes]] = []
"""Every server spawn_server started: those still running when the session ends are killed
(a test that failed before its own cleanup must not leave a server on the machine)."""


@atexit.register
def _kill_survivors() -> None:
    for process in _spawned:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_server(database_url: str, port: int, *extra: str, **popen: Any) -> subprocess.Popen[bytes]:
    """``spanq serve`` on 127.0.0.1:port; extra flags come last (so they may override these)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "spanq_server", "serve", "--database-url", database_url,
         "--listen", f"127.0.0.1:{port}", "--metrics-listen", "off", "--ui-listen", "off", "--log-level", "WARNING", *extra],
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, **popen,
    )
    _spawned.append(process)
    return process


def wait_serving_sync(target: str, timeout_s: float = 30) -> None:
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)

        def serving() -> bool:
            try:
                health.Check(health_pb2.HealthCheckRequest(), timeout=1, wait_for_ready=True)
            except grpc.RpcError:
                return False
            return True

        until_sync(serving, f"a server to serve on {target}", timeout_s, 0.1)


# -- spanq serve --workers N: which process serves which connection ----------------------


def children(pid: int) -> list[int]:
    """The direct children of a process (a --workers supervisor's workers)."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(child) for child in f.read().split()]


def wait_children(pid: int, n: int, timeout_s: float = 30, *, other_than: set[int] = frozenset()) -> list[int]:
    """Polls until the process has n children, none of them in other_than."""
    def found() -> list[int]:
        now = children(pid)
        return now if len(now) == n and not set(now) & other_than else []

    return until_sync(found, f"pid {pid} to have {n} children other than {sorted(other_than)}", timeout_s, 0.05)


def tcp_sockets(pid: int | str = "self") -> list[tuple[int, int, str]]:
    """(local port, remote port, state) of the process's TCP sockets (Linux /proc; state
    "0A" is LISTEN, "01" ESTABLISHED)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    found.append((int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16),
                                  fields[3]))
    return found


def listens_on(pid: int, port: int) -> bool:
    return any(local == port and state == "0A" for local, _, state in tcp_sockets(pid))


def serving_pid(pids: list[int], port: int, client_port: int) -> int | None:
    """Which of pids holds the server side of this process's connection from client_port."""
    for pid in pids:
        if any((local, remote, state) == (port, client_port, "01") for local, remote, state in tcp_sockets(pid)):
            return pid
    return None


def _client_ports(port: int) -> set[int]:
    return {local for local, remote, state in tcp_sockets() if remote == port and state == "01"}


async def channels_on_each(target: str, pids: list[int], *, tries: int = 64) -> dict[int, grpc.aio.Channel]:
    """One channel to target served by each of pids (opening more until each has one;
    the kernel picks a worker per connection). Each channel has its own connection."""
    port = int(target.rsplit(":", 1)[1])
    found: dict[int, grpc.aio.Channel] = {}
    for _ in range(tries):
        before = _client_ports(port)
        # A local subchannel pool: else channels to one target share one connection.
        channel = grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        await asyncio.wait_for(channel.channel_ready(), 30)
        new = _client_ports(port) - before
        pid = serving_pid(pids, port, next(iter(new))) if len(new) == 1 else None
        if pid is None or pid in found:
            await channel.close()
            continue
        found[pid] = channel
        if len(found) == len(pids):
            return found
    raise AssertionError(f"{tries} connections did not reach every one of {pids}: {sorted(found)}")
