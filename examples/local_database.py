"""The database a local spanq server uses, for the examples that also read the application's tables.

``$DATABASE_URL`` when set, else the embedded PostgreSQL that a plain ``make run`` started (found as
``spanq psql --print-url`` finds it: in ./.spanq, or ``$SPANQ_DATA_DIR``).
"""

import os
import subprocess
import sys


def local_database_url() -> str | None:
    """The URL, or None when there is neither."""
    if "DATABASE_URL" in os.environ:
        return os.environ["DATABASE_URL"]
    found = subprocess.run([sys.executable, "-m", "spanq_server", "psql", "--print-url"], capture_output=True,
                           text=True)
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else None
