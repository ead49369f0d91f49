"""Debian's PgBouncer in front of the test's PostgreSQL, started by a test and
stopped when it ends. ``ensure_installed`` installs the package (quietly, once)
when it is missing and this process may: CI runs as root."""

import os
import pathlib
import shutil
import subprocess

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .clusters import SYSTEM_USER, owned_folder
from .helpers import until_sync
from .spawned import free_port

PGBOUNCER = pathlib.Path("/usr/sbin/pgbouncer")


def ensure_installed() -> str | None:
    """None when PgBouncer is there (installed now if need be), else why it is not."""
    if PGBOUNCER.exists():
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{PGBOUNCER} is missing and this user cannot apt-get it: install Debian's pgbouncer"
    # Quiet and idempotent; waits for another suite's apt-get rather than failing on its lock.
    result = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=300", "pgbouncer"],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, capture_output=True, timeout=600)
    if not PGBOUNCER.exists():
        raise RuntimeError(f"apt-get install pgbouncer failed: {result.stdout.decode()} {result.stderr.decode()}")
    return None


class PgBouncer:
    """PgBouncer in ``mode`` pooling in front of the PostgreSQL of ``upstream_url``."""

    def __init__(self, upstream_url: str, mode: str = "transaction") -> None:
        params = conninfo_to_dict(upstream_url)
        self.upstream_url = upstream_url
        self.port = free_port()
        self.folder = owned_folder("spanq-pgbouncer-")
        (self.folder / "users.txt").write_text(f'"{params.get("user") or "postgres"}" ""\n')
        (self.folder / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={params.get('host') or '127.0.0.1'} port={params.get('port') or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.folder / 'users.txt'}\n"
            f"pool_mode = {mode}\ndefault_pool_size = 20\nmax_client_conn = 200\n")
        self.log = open(self.folder / "log", "wb")
        user = ["-u", SYSTEM_USER] if SYSTEM_USER else []
        self.process = subprocess.Popen([str(PGBOUNCER), *user, str(self.folder / "pgbouncer.ini")],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self._wait_listening()
        except BaseException:
            self.stop()  # nobody else will: the caller never got this object
            raise

    @property
    def url(self) -> str:
        """The upstream URL, through PgBouncer."""
        return make_conninfo(self.upstream_url, host="127.0.0.1", port=str(self.port))

    def _wait_listening(self, timeout_s: float = 10) -> None:
        import socket

        def listening() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {(self.folder / 'log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            return True

        until_sync(listening, f"pgbouncer to listen on {self.port}", timeout_s, 0.05)

    def log_text(self) -> str:
        return (self.folder / "log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)
