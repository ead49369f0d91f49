"""Every SQL statement spanq runs, loaded once from queries.sql, and the migrations.

A block in queries.sql starts with a ``-- name --`` line; the ``-- `` lines
right after it describe it; the rest up to the next block is the statement.

A migration that changes what queries.sql composes into each queue's SQL
functions cannot write them out itself (their text depends on each queue's
columns and settings), so it says ``-- spanq: recreate queue functions`` on a
line of its own, and the store re-creates every existing queue's functions
from the current definitions after applying it. One that adds columns to every
queue table says ``-- spanq: add queue history columns``: the store runs
queue_history_columns_add on each existing queue (before re-creating functions). One
that says ``-- spanq: add queue archives`` has the store create each existing queue's
archive table (queue_archive_create).
"""

import importlib.resources
import re
from typing import NamedTuple

_BLOCK_START = re.compile(r"^-- ([a-z_]+) --$", re.M)
_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_RECREATE_QUEUE_FUNCTIONS = re.compile(r"^-- spanq: recreate queue functions$", re.M)
_ADD_HISTORY_COLUMNS = re.compile(r"^-- spanq: add queue history columns$", re.M)
_ADD_ARCHIVES = re.compile(r"^-- spanq: add queue archives$", re.M)


def parse_queries(text: str) -> dict[str, str]:
    """Split queries.sql into {name: statement}; descriptions are dropped."""
    parts = _BLOCK_START.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        lines = body.strip("\n").splitlines()
        while lines and lines[0].startswith("--"):
            lines.pop(0)
        statement = "\n".join(lines).strip()
        if not statement:
            raise ValueError(f"query {name!r} is empty")
        queries[name] = statement
    return queries


class Migration(NamedTuple):
    version: int
    name: str
    sql: str
    recreates_queue_functions: bool = False
    adds_history_columns: bool = False
    adds_archives: bool = False


def load_migrations() -> list[Migration]:
    """The versioned migrations, in order; versions are unique, from 1."""
    folder = importlib.resources.files(__name__) / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            text = entry.read_text()
            found.append(Migration(int(match[1]), match[2], text, bool(_RECREATE_QUEUE_FUNCTIONS.search(text)),
                                   bool(_ADD_HISTORY_COLUMNS.search(text)), bool(_ADD_ARCHIVES.search(text))))
    found.sort()
    versions = [m.version for m in found]
    # Unique and from 1; a gap is allowed, so that two branches can number their migrations
    # apart (each is applied once, in version order, wherever it is missing).
    if len(set(versions)) != len(versions) or (versions and versions[0] != 1):
        raise ValueError(f"migrations must be numbered from 1 with no version twice: {versions}")
    return found


QUERIES: dict[str, str] = parse_queries((importlib.resources.files(__name__) / "queries.sql").read_text())
MIGRATIONS: list[Migration] = load_migrations()
