"""The name rule: a queue's, a key column's, a table's name becomes a PostgreSQL identifier.
Plain Python, for every layer that checks a name (the catalog, the token file, Spanner's DDL)."""

import re

from .errors import InvalidArgument

IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*\Z")
MAX_QUEUE_NAME = 48
"""So that receive_<name>, renewlease_<name> and spanq_dt_<name> fit PostgreSQL's 63-byte identifiers."""
MAX_COLUMN_NAME = 63


def shown(name: str) -> str:
    """A name for a message: quoted, cut at 80 characters, and with its escaped form when it
    is not ASCII, so a look-alike of an ASCII letter (KELVIN SIGN for k) shows as what it is."""
    cut = name if len(name) <= 80 else name[:80] + "..."
    return repr(cut) if cut.isascii() else f"{cut!r} ({ascii(cut)})"


def check_name(name: str, what: str, max_length: int) -> str:
    if not IDENTIFIER.match(name) or len(name) > max_length:
        raise InvalidArgument(
            f"{what} {shown(name)} is not valid: use lowercase letters (ASCII a-z), digits and underscores, "
            f"starting with a letter, at most {max_length} characters (it becomes a PostgreSQL identifier)"
        )
    return name


def check_queue_name(name: str) -> str:
    return check_name(name, "queue name", MAX_QUEUE_NAME)
