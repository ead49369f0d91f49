"""CPU time by process while a workload runs (issue 22, item 5): the bench's own
process (the client), the spanq server's processes, and the PostgreSQL backends
of the bench's scratch database, so that a cell's messages/s on this machine can
be turned into what a host with more cores would do.

A sampler thread reads the CPU time (/proc/<pid>/schedstat: nanoseconds, where
/proc/<pid>/stat counts 10 ms ticks) of every backend that
pg_stat_activity shows on the scratch database, every SAMPLE seconds, and keeps
the last reading of each: a backend that exits mid-run keeps what it had used
up to its last reading (at most SAMPLE seconds of its work is lost). Its own CPU
is taken out of the client's. PostgreSQL's shared processes (WAL writer,
checkpointer) serve every database on the server and are left out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator

import psycopg

from .env import cpu_of, with_db

SAMPLE = 0.02
"""Seconds between readings of the backends' /proc/<pid>/stat."""
DISCOVER = 0.1
"""Seconds between looks at pg_stat_activity for backends that came since."""
METER_APP_NAME = "spanq-bench-meter"


@dataclasses.dataclass
class CpuUse:
    """CPU seconds over a window, by process kind."""

    client: float = 0.0
    server: float = 0.0
    postgres: float = 0.0

    def per_message_us(self, messages: float) -> dict[str, float]:
        n = max(messages, 1.0)
        return {"client": self.client / n * 1e6, "server": self.server / n * 1e6,
                "postgres": self.postgres / n * 1e6}


def task_cpu(pid: int) -> float:
    """CPU seconds of a process's live threads, to the nanosecond (0 once it is gone)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    return total / 1e9 if total else cpu_of(pid)


def process_cpu() -> float:
    """CPU seconds of this process, every thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Meter:
    """Samples the scratch database's backends in a thread for as long as it runs;
    ``window()`` measures one workload."""

    def __init__(self, db_url: str) -> None:
        self._db_url = with_db(db_url, str(psycopg.conninfo.conninfo_to_dict(db_url).get("dbname") or "postgres"),
                               application_name=METER_APP_NAME)
        self._lock = threading.Lock()
        self._seen: dict[int, float] = {}
        """pid -> its CPU seconds at the last reading."""
        self._own = 0.0
        """The sampler thread's own CPU seconds so far."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[tuple[int]] | None = None

    def start(self) -> None:
        self._conn = psycopg.connect(self._db_url, autocommit=True)
        self._discover()
        self._thread = threading.Thread(target=self._run, name="bench-cpu-meter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._conn is not None:
            self._conn.close()

    def _discover(self) -> None:
        assert self._conn is not None
        rows = self._conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        with self._lock:
            for (pid,) in rows:
                self._seen.setdefault(pid, 0.0)

    def _read(self) -> None:
        with self._lock:
            pids = list(self._seen)
        readings = {pid: task_cpu(pid) for pid in pids}
        with self._lock:
            for pid, cpu in readings.items():
                if cpu > self._seen.get(pid, 0.0):  # 0 once gone: keep the last reading
                    self._seen[pid] = cpu

    def _run(self) -> None:
        last_look = 0.0
        while not self._stop.is_set():
            t0 = time.thread_time()
            now = time.monotonic()
            if now - last_look >= DISCOVER:
                with contextlib.suppress(psycopg.Error):
                    self._discover()
                last_look = now
            self._read()
            with self._lock:
                self._own += time.thread_time() - t0
            self._stop.wait(SAMPLE)

    def _snapshot(self) -> tuple[float, float, dict[int, float]]:
        self._discover()
        self._read()
        with self._lock:
            return process_cpu(), self._own, dict(self._seen)

    @contextlib.contextmanager
    def window(self, server_cpu: Callable[[], float]) -> Iterator[CpuUse]:
        """The CPU used inside the ``with`` block, filled in when it ends."""
        use = CpuUse()
        client0, own0, backends0 = self._snapshot()
        server0 = server_cpu()
        yield use
        server1 = server_cpu()
        client1, own1, backends1 = self._snapshot()
        use.client = (client1 - client0) - (own1 - own0)
        use.server = server1 - server0
        use.postgres = sum(cpu - backends0.get(pid, 0.0) for pid, cpu in backends1.items())


def server_cpu_of(server: object) -> Callable[[], float]:
    """The server's CPU seconds so far (every process of it); 0 for an in-process server."""
    pids = getattr(server, "pids", None)
    if pids is None:
        return nothing
    return lambda: sum(task_cpu(pid) for pid in pids())


def nothing() -> float:
    """The server's CPU for a plain-SQL run: none of its work."""
    return 0.0
