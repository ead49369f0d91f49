"""Every SQL statement spanq runs, loaded once from queries.sql, and the migrations.

A block in queries.sql starts with a ``-- name --`` line; the ``-- `` lines
right after it describe it; the rest up to the next block is the statement.
"""

import importlib.resources
import re
from typing import NamedTuple

_BLOCK_START = re.compile(r"^-- ([a-z_]+) --$", re.M)
_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


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


def load_migrations() -> list[Migration]:
    """The versioned migrations, in order; versions must be 1, 2, 3, ..."""
    folder = importlib.resources.files(__name__) / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text()))
    found.sort()
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1..n without gaps: {[m.version for m in found]}")
    return found


QUERIES: dict[str, str] = parse_queries((importlib.resources.files(__name__) / "queries.sql").read_text())
MIGRATIONS: list[Migration] = load_migrations()
