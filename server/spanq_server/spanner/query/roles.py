"""The grammar of Spanner's fine-grained access control (DDL of UpdateDatabaseDdl and
CreateDatabase, both dialects), read on the one parser's cursor (``parser.Parser``):

    CREATE ROLE r
    DROP ROLE r
    GRANT { SELECT | INSERT | DELETE } [, ...] ON QUEUE q [, ...] TO ROLE r [, ...]
    GRANT { SELECT | INSERT | UPDATE | DELETE } [, ...] ON TABLE t [, ...] TO ROLE r [, ...]
    GRANT EXECUTE ON TABLE FUNCTION { RECEIVE_q | RENEWLEASE_q } [, ...] TO ROLE r [, ...]
    REVOKE ... FROM ROLE r [, ...]
    GRANT ROLE p [, ...] TO ROLE r [, ...]       (r inherits p's privileges)
    REVOKE ROLE p [, ...] FROM ROLE r [, ...]

In PostgreSQL ``ROLE`` after TO / FROM is left out, a role is granted as ``GRANT p TO r``
and a function is ``FUNCTION spanner.receive_q``. Role names fold like every name;
``public`` is the role every role is a member of, and ``spanner_*`` are Spanner's system
roles (neither can be made or dropped; a system role is granted to no role, and public is
granted to none). Column privileges (``SELECT(c)``) are refused (docs/spanner-compat.md).
"""

import re
from typing import Protocol

from ...ground.errors import InvalidArgument
from .ast import CreateRole, DropRole, Grant, GrantRole
from .lexing import Token

PUBLIC = "public"
"""The role every role is a member of: what is granted to it, every role has."""
SYSTEM_ROLES = ("public", "spanner_info_reader", "spanner_sys_reader")
"""Spanner's system roles (ListDatabaseRoles lists them in every database)."""
ROLE_NAME = re.compile(r"[a-z][a-z0-9_]{0,127}")
FUNCTIONS = ("receive_", "renewlease_")
"""The prefixes of a queue's table functions (PostgreSQL also spells renew_lease_)."""
PRIVILEGES = {"queue": ("select", "insert", "delete"), "table": ("select", "insert", "update", "delete"),
              "function": ("execute",)}
"""The privileges each kind of object takes (Spanner's; a queue has no UPDATE)."""


class _Cursor(Protocol):
    pg: bool

    @property
    def peek(self) -> Token: ...

    def ahead(self, n: int = 1) -> Token: ...

    def next(self) -> Token: ...

    def word(self, *words: str) -> str: ...

    def accept_word(self, *words: str) -> bool: ...

    def punct(self, *marks: str) -> str: ...

    def accept_punct(self, mark: str) -> bool: ...

    def end(self) -> None: ...

    def error(self, expected: str) -> InvalidArgument: ...

    def loose_spelled(self, what: str) -> tuple[str, str]: ...


def is_access_ddl(tokens: list[Token]) -> bool:
    """Whether a DDL statement's first words are CREATE / DROP ROLE, GRANT or REVOKE."""
    first, second = tokens[0], tokens[min(1, len(tokens) - 1)]
    return first.is_word("grant", "revoke") or (first.is_word("create", "drop") and second.is_word("role"))


def statement(p: _Cursor) -> CreateRole | DropRole | Grant | GrantRole:
    if p.accept_word("create"):
        p.word("role")
        name, spelled = role_name(p, made=True)
        p.end()
        return CreateRole(name, spelled)
    if p.accept_word("drop"):
        p.word("role")
        name, _ = role_name(p, made=True)
        p.end()
        return DropRole(name)
    revoke = p.word("grant", "revoke") == "revoke"
    if p.accept_word("role") or (p.pg and not p.peek.is_word(*_PRIVILEGE_WORDS)):  # PostgreSQL: GRANT p TO r
        return _grant_role(p, revoke)
    privileges = [privilege(p)]
    while p.accept_punct(","):
        privileges.append(privilege(p))
    p.word("on")
    on = _object_kind(p)
    names: list[str] = []
    written: list[tuple[str, str]] = []
    while True:
        name, as_written = _object_name(p, on)
        names.append(name)
        written.append((name, as_written))
        if not p.accept_punct(","):
            break
    for one in privileges:
        if one not in PRIVILEGES[on]:
            raise InvalidArgument(f"{one.upper()} cannot be granted on a {_KIND_WORDS[on]}; it takes "
                                  f"{', '.join(w.upper() for w in PRIVILEGES[on])}")
    p.word("from" if revoke else "to")
    if not p.accept_word("role") and not p.pg:  # PostgreSQL leaves ROLE out
        raise p.error("ROLE")
    roles = [role_name(p, made=False)[0]]
    while p.accept_punct(","):
        roles.append(role_name(p, made=False)[0])
    p.end()
    return Grant(tuple(dict.fromkeys(privileges)), on, tuple(names), tuple(dict.fromkeys(roles)), revoke,
                 tuple(written))


_KIND_WORDS = {"queue": "queue", "table": "table", "function": "table function"}
_PRIVILEGE_WORDS = ("select", "insert", "update", "delete", "execute")


def _grant_role(p: _Cursor, revoke: bool) -> GrantRole:
    """After GRANT [ROLE] / REVOKE [ROLE]: p [, ...] {TO | FROM} [ROLE] r [, ...]."""
    granted = [_granted_role(p)]
    while p.accept_punct(","):
        granted.append(_granted_role(p))
    p.word("from" if revoke else "to")
    if not p.accept_word("role") and not p.pg:
        raise p.error("ROLE")
    roles = [_grantee(p)]
    while p.accept_punct(","):
        roles.append(_grantee(p))
    p.end()
    return GrantRole(tuple(dict.fromkeys(granted)), tuple(dict.fromkeys(roles)), revoke)


def _granted_role(p: _Cursor) -> str:
    name, _ = role_name(p, made=False)
    if name == PUBLIC:  # Spanner's rule: every role is public's member already
        raise InvalidArgument("role public cannot be granted to a role: every role inherits its privileges already")
    return name


def _grantee(p: _Cursor) -> str:
    name, spelled = role_name(p, made=False)
    if name in SYSTEM_ROLES or name.startswith("spanner_"):  # Spanner's rule: a system role is no role's member
        raise InvalidArgument(f"role {spelled!r} is a system role of Spanner's: no role can be granted to it")
    return name


def privilege(p: _Cursor) -> str:
    word = p.word("select", "insert", "update", "delete", "execute")
    if p.peek.kind == "punct" and p.peek.value == "(":
        raise InvalidArgument(f"column privileges ({word.upper()}(column, ...)) are not supported by spanq: grant "
                              "on the whole table (Spanner has none on queues either)")
    return word


def _object_kind(p: _Cursor) -> str:
    if p.accept_word("queue"):
        return "queue"
    if p.accept_word("function"):
        return "function"
    p.word("table")
    if p.accept_word("function"):
        return "function"
    return "table"


def _object_name(p: _Cursor, on: str) -> tuple[str, str]:
    name, spelled = p.loose_spelled(f"a {_KIND_WORDS[on]} name")
    if on != "function":
        return name, spelled
    if name == "spanner" and p.accept_punct("."):  # PostgreSQL: spanner.receive_q
        name, spelled = p.loose_spelled("a table function name")
    if name.startswith("renew_lease_"):
        name, spelled = "renewlease_" + name[len("renew_lease_"):], "RENEWLEASE_" + spelled[len("renew_lease_"):]
    if not name.startswith(FUNCTIONS) or name in FUNCTIONS:
        raise InvalidArgument(f"table function {spelled!r} is not one of a queue's: EXECUTE is granted on "
                              "RECEIVE_<queue> and RENEWLEASE_<queue>")
    return name, spelled


def role_name(p: _Cursor, made: bool) -> tuple[str, str]:
    """A role's name, folded and as written; ``made``: of CREATE or DROP ROLE, which cannot
    name a system role."""
    name, spelled = p.loose_spelled("a role name")
    if not ROLE_NAME.fullmatch(name):
        raise InvalidArgument(f"role name {spelled[:140]!r} is not a role name: a letter, then letters, digits or _ "
                              "(at most 128)")
    if made and (name in SYSTEM_ROLES or name.startswith("spanner_")):
        raise InvalidArgument(f"role {spelled!r} is a system role of Spanner's: it cannot be created or dropped")
    return name, spelled
