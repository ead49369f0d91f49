"""The bench's surroundings: the PostgreSQL server, a scratch database per run,
the spanq server (a subprocess by default, so that it has its own GIL), and
the facts about the machine that the figures depend on."""

import asyncio
import contextlib
import os
import pathlib
import platform
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg.conninfo import make_conninfo

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / ".spanq" / "bench"
APP_NAME = "spanq-bench"
"""application_name of every connection the bench opens itself (baseline, admin)."""
SERVER_APP_NAME = "spanq-server"
"""application_name of the server's connections (PGAPPNAME in its environment)."""


def pg_server_url() -> str:
    """DATABASE_URL when set, else the embedded PostgreSQL in .spanq/bench (stopped when the bench exits)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    from spanq_server.embedded import start_embedded

    return start_embedded(BENCH_DIR)


def with_db(url: str, dbname: str, **extra: Any) -> str:
    return make_conninfo(url, dbname=dbname, **extra)


@contextlib.contextmanager
def scratch_database(server_url: str) -> Iterator[str]:
    """A fresh database for this run, dropped afterwards (even on failure)."""
    name = f"spanq_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_db(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bench_conninfo(db_url: str) -> str:
    return make_conninfo(db_url, application_name=APP_NAME)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``spanq serve`` on a free loopback port, in its own process."""

    def __init__(self, db_url: str, *, log_name: str = "server.log", extra_args: list[str] | None = None,
                 app_name: str = SERVER_APP_NAME, workers: int = 1, code: str | None = None,
                 module: str | None = None, environ: dict[str, str] | None = None) -> None:
        self.db_url = db_url
        self.workers = workers
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        BENCH_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = BENCH_DIR / log_name
        script = pathlib.Path(sys.executable).parent / "spanq"
        command = [str(script)] if script.exists() and module is None else [sys.executable, "-m",
                                                                              module or "spanq_server"]
        command += ["serve", "--database-url", db_url, "--listen", self.target, "--metrics-listen", "off",
                    "--ui-listen", "off", "--log-level", "WARNING"]
        command += extra_args or []
        if workers > 1:
            command += ["--workers", str(workers)]
        env = dict(os.environ, PGAPPNAME=app_name, **(environ or {}))
        if code is not None:  # another checkout's server (bench.drain_cpu --against): its packages first
            env["PYTHONPATH"] = os.pathsep.join([f"{code}/server", f"{code}/client"])
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log, env=env, cwd=ROOT)
        self.pid = self.process.pid

    async def ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        async with grpc.aio.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"spanq serve exited with {self.process.returncode}; see {self.log_path}")
                try:
                    reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    # With --workers, health answers once one worker serves: wait for them all.
                    if reply.status == health_pb2.HealthCheckResponse.SERVING and self._all_listen():
                        return
                except grpc.aio.AioRpcError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"spanq serve did not become ready in {timeout}s; see {self.log_path}")
                await asyncio.sleep(0.1)

    def pids(self) -> list[int]:
        """The server's processes: with --workers, the supervisor and its workers."""
        return [self.pid, *children_of(self.pid)]

    def _all_listen(self) -> bool:
        if self.workers == 1:
            return True
        workers = children_of(self.pid)
        return len(workers) == self.workers and all(listens_on(pid, self.port) for pid in workers)

    def cpu_seconds(self) -> float:
        """CPU time of every process of the server so far."""
        return sum(cpu_of(pid) for pid in self.pids())

    def rss_bytes(self) -> int:
        return rss_of(self.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class InProcessServer:
    """The server in the bench's own event loop (``--in-process``: for debugging, not for figures)."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.pid = os.getpid()
        self.running: Any = None
        self.target = ""

    async def ready(self, timeout: float = 60) -> None:
        from spanq_server.ground.config import Config
        from spanq_server.server import start

        self.running = await start(Config(database_url=self.db_url, listen="127.0.0.1:0", metrics_listen=""))
        self.target = self.running.target

    def rss_bytes(self) -> int:
        return rss_of(self.pid)

    async def astop(self) -> None:
        if self.running is not None:
            await self.running.stop(0)


@contextlib.asynccontextmanager
async def spanq_server(db_url: str, *, in_process: bool = False, log_name: str = "server.log",
                       extra_args: list[str] | None = None, app_name: str = SERVER_APP_NAME,
                       workers: int = 1, code: str | None = None, module: str | None = None,
                       environ: dict[str, str] | None = None) -> AsyncIterator[Any]:
    if in_process:
        server = InProcessServer(db_url)
        await server.ready()
        try:
            yield server
        finally:
            await server.astop()
        return
    process = ServerProcess(db_url, log_name=log_name, extra_args=extra_args, app_name=app_name, workers=workers,
                            code=code, module=module, environ=environ)
    try:
        await process.ready()
        yield process
    finally:
        process.stop()


@contextlib.asynccontextmanager
async def noop_server() -> AsyncIterator[str]:
    """bench.noop_server in its own process; yields its target."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "bench.noop_server", str(port)], cwd=ROOT)
    target = f"127.0.0.1:{port}"
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
        yield target
    finally:
        process.terminate()
        process.wait(10)


def children_of(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(child) for child in f.read().split()]
    return []


def listens_on(pid: int, port: int) -> bool:
    """Whether the process has a TCP socket listening on port (Linux /proc)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def machine_facts(server_url: str) -> dict[str, Any]:
    with psycopg.connect(server_url) as conn:
        version = conn.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("shared_buffers", "synchronous_commit", "fsync", "max_connections")
        }
    memory = 0
    with contextlib.suppress(OSError):
        with open("/proc/meminfo") as meminfo:
            memory = int(meminfo.readline().split()[1]) * 1024
    cpu = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(memory / 2**30, 1),
        "postgresql": version.split(",")[0],
        "pg_settings": settings,
        "database": "DATABASE_URL" if os.environ.get("DATABASE_URL") else "embedded (.spanq/bench)",
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "psycopg": psycopg.__version__,
        "load_at_start": os.getloadavg(),
    }
