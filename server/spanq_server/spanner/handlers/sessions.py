"""Resource names and sessions.

Every ``projects/P/instances/I/databases/D`` reaches the one PostgreSQL
database the server uses, in the database's namespace (admin.scope): the
names are checked for form, never for existence, on the data plane (a name
no CreateDatabase made reaches the default namespace). Sessions hold no state in spanq (transactions
are tracked by their own ids), so a session is just a name: any well-formed
session name is accepted, which keeps clients working across server
restarts and replicas. Multiplexed and regular sessions behave the same.

A session made with a ``creator_role`` (the client's ``database_role``) carries it
in its name (``.../sessions/<id>-role-<role>``), so every server knows it without a
record; a name that carries no role is a session without one. Naming a role in a
made-up session name gains nothing: a role only narrows what the call may do
(grants.py), never widens it.
"""

import re
import secrets
from datetime import datetime, timezone
from typing import Any

from google.cloud.spanner_v1.types import spanner as spanner_types

from ...ground.errors import InvalidArgument

SessionPb = spanner_types.Session.pb()

PROJECT = r"projects/(?P<project>[a-z0-9][a-z0-9._:-]*)"
INSTANCE = PROJECT + r"/instances/(?P<instance>[a-z][a-z0-9-]*)"
DATABASE = INSTANCE + r"/databases/(?P<database>[A-Za-z][A-Za-z0-9_-]*)"
SESSION = DATABASE + r"/sessions/(?P<session>[A-Za-z0-9_-]+)"
MAX_BATCH_SESSIONS = 100


def check(name: str, pattern: str, what: str) -> re.Match[str]:
    match = re.fullmatch(pattern, name)
    if match is None:
        example = {"project": "projects/my-project", "instance": "projects/my-project/instances/my-instance",
                   "database": "projects/my-project/instances/my-instance/databases/my-database",
                   "session": "projects/p/instances/i/databases/d/sessions/<id>"}[what]
        raise InvalidArgument(f"{what} name {name[:200]!r} is not of the form {example}")
    return match


def check_database(name: str) -> str:
    check(name, DATABASE, "database")
    return name


def database_of(session: str) -> str:
    """The database a session name belongs to (INVALID_ARGUMENT for a malformed name)."""
    match = check(session, SESSION, "session")
    return session[: match.end("database")]


ROLE_MARK = "-role-"
"""Between a session's id and the (folded) role it was made with."""


def role_of(session: str) -> str | None:
    """The database role a session was made with (None: none)."""
    match = check(session, SESSION, "session")
    _, mark, role = match["session"].rpartition(ROLE_MARK)
    return role if mark and role else None


def new_session(database: str, template: Any | None = None, role: str | None = None) -> Any:
    """A session of ``database``; with ``role`` (folded, checked by the caller), one of that role."""
    check_database(database)
    session = SessionPb()
    if template is not None:
        session.CopyFrom(template)
    session.name = f"{database}/sessions/{secrets.token_hex(16)}" + (f"{ROLE_MARK}{role}" if role else "")
    session.create_time.FromDatetime(datetime.now(timezone.utc))
    session.approximate_last_use_time.CopyFrom(session.create_time)
    return session


def existing_session(name: str) -> Any:
    database_of(name)
    return SessionPb(name=name, creator_role=role_of(name) or "")
