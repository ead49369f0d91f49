"""A spanq server in its own process, for tests that need a separate GIL,
a process to kill, or a synchronous client."""

import os
import socket
import subprocess
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_server(database_url: str, port: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "spanq_server", "serve", "--database-url", database_url,
         "--listen", f"127.0.0.1:{port}", "--metrics-listen", "off", "--log-level", "WARNING", *extra],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_serving_sync(target: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                health.Check(health_pb2.HealthCheckRequest(), timeout=1, wait_for_ready=True)
                return
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
