"""Spanner's fine-grained access control on spanq: a database's roles (CREATE / DROP
ROLE), the privileges granted to each (GRANT / REVOKE on queues, tables and a queue's
table functions), and what each statement, mutation and read needs of the role a
session was made with (``creator_role``; docs/spanner-compat.md, "Access control").

A role is held to Spanner's privileges: ``INSERT`` on a queue sends, ``DELETE`` acks
(DML, ``Ack`` and ``Delete`` mutations), ``SELECT`` reads it (SQL and ``Read``),
``EXECUTE`` on ``RECEIVE_q`` receives and on ``RENEWLEASE_q`` renews; on a table,
``SELECT``, ``INSERT``, ``UPDATE`` and ``DELETE`` as their statements and mutations.
Every role has what is granted to ``public``, and what is granted to each role granted
to it (``GRANT ROLE p TO ROLE r``), transitively; a grant that would make a cycle is
refused. Roles bound a session and never widen
it: a server with a token file checks the token first (handlers/access.py), so a
session has what both its token and its role allow.
"""

import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable

from ...domain.records import Records, RoleGrants
from ...ground import errors
from . import ast
from .roles import PUBLIC, SYSTEM_ROLES

MAX_ROLES = 100
"""Roles per database (Spanner's limit)."""
CACHE_SECONDS = 1.0
"""How long a server keeps a role's privileges: a GRANT or REVOKE through it applies at once,
through another server within this."""
MAX_CACHED = 1024
"""Roles kept at most (the oldest read goes first): session names choose them, so any number
of made-up names must not grow the cache."""

Object = tuple[str, str]
"""(kind, folded name): ("queue", "orders"), ("table", "users"), ("function", "receive_orders")."""

_SHOWN_KIND = {"queue": "queue", "table": "table", "function": "table function"}
MEMBER = "member"
"""A role's membership in another: ``role:p`` -> [MEMBER] among its privileges by object (the
table's grants), so a role's row holds all it was granted, a role included."""


def key(kind: str, name: str) -> str:
    return f"{kind}:{name}"


@dataclasses.dataclass(frozen=True)
class Role:
    """A role as a session holds it: its privileges and public's."""

    name: str
    grants: dict[str, frozenset[str]]

    def allows(self, kinds: Iterable[str], name: str, privilege: str) -> bool:
        return any(privilege in self.grants.get(key(kind, name), ()) for kind in kinds)

    def require(self, kinds: tuple[str, ...], name: str, privilege: str, where: str = "") -> None:
        if not self.allows(kinds, name, privilege):
            shown = "RECEIVE_" + name[len("receive_"):] if name.startswith("receive_") else (
                "RENEWLEASE_" + name[len("renewlease_"):] if name.startswith("renewlease_") else name)
            kind = _SHOWN_KIND[kinds[0]]
            grant = f"GRANT {privilege.upper()} ON {kind.upper()} {shown} TO ROLE {self.name}"
            # Spanner's words (its clients' tests look for them); what to do is in the detail.
            raise errors.PermissionDenied(
                f"{where}Role {self.name} does not have required privileges on {kind} {shown}", role=self.name,
                privilege=privilege.upper(), detail=f"grant it with {grant} (UpdateDatabaseDdl), or use a "
                "session of a role that has it")


def statement_needs(statement: ast.Statement,
                    table_needs: Callable[[ast.TableSubset], "list[tuple[str, str]] | None"]
                    ) -> list[tuple[tuple[str, ...], str, str]] | None:
    """What a statement needs of a role: (kinds of object, name, privilege) each; None for a
    kind of statement that has no rule (refused). ``table_needs`` gives the table subset's
    needs in spanq's privileges (handlers/access.statement_needs)."""
    if isinstance(statement, ast.Receive):
        return [(("function",), "receive_" + statement.queue, "execute")]
    if isinstance(statement, ast.RenewLease):
        return [(("function",), "renewlease_" + statement.queue, "execute")]
    if isinstance(statement, ast.QueueInsert):
        return [(("queue",), statement.queue, "insert")]
    if isinstance(statement, ast.QueueDelete):
        return [(("queue",), statement.queue, "delete")]
    if isinstance(statement, ast.QueueSelect):
        return [(("queue",), statement.queue, "select")]
    if isinstance(statement, (ast.Select, ast.Insert, ast.Update, ast.Delete)):
        needs = table_needs(statement)
        if needs is None:
            return None
        return [(("table", "queue"), name, SPANNER_PRIVILEGE[privilege]) for privilege, name in needs]
    return None


SPANNER_PRIVILEGE = {"select": "select", "send": "insert", "update": "update", "ack": "delete"}
"""spanq's privilege of a table statement or mutation (handlers/access.py) -> Spanner's."""


class Roles:
    """A database's roles and their privileges, recorded beside its queues (records), cached
    per role for CACHE_SECONDS."""

    def __init__(self, records: Records) -> None:
        self._records = records
        self._cache: dict[tuple[str, str], tuple[float, Role | None]] = {}

    async def role(self, database: str, name: str) -> Role:
        """The role a session of ``database`` was made with; PERMISSION_DENIED "Role not found"
        (Spanner's words) when the database has none of the name."""
        cached = self._cache.get((database, name))
        if cached is None or time.monotonic() - cached[0] >= CACHE_SECONDS:
            found = {n: g for n, _, g in await self._records.roles(database)}
            role = None
            if name in found or name in SYSTEM_ROLES:  # a system role has public's privileges
                grants: dict[str, set[str]] = {}
                for one in {name, PUBLIC} | inherited(found, name):
                    for obj, privileges in found.get(one, {}).items():
                        if not obj.startswith("role:"):
                            grants.setdefault(obj, set()).update(privileges)
                role = Role(name, {k: frozenset(v) for k, v in grants.items()})
            cached = (time.monotonic(), role)
            self._cache.pop((database, name), None)
            self._cache[(database, name)] = cached
            while len(self._cache) > MAX_CACHED:
                del self._cache[next(iter(self._cache))]
        if cached[1] is None:
            raise errors.PermissionDenied(f"Role not found: {name}", role=name)
        return cached[1]

    def _changed(self, database: str) -> None:
        for cached in [k for k in self._cache if k[0] == database]:
            del self._cache[cached]

    async def listed(self, database: str) -> list[str]:
        """The database's roles (ListDatabaseRoles): Spanner's system roles, then its own."""
        return list(SYSTEM_ROLES) + [name for name, _, _ in await self._records.roles(database) if name != PUBLIC]

    async def ddl_of(self, database: str, shown: Callable[[str, str], Awaitable[str]]) -> list[str]:
        """CREATE ROLE and GRANT statements for GetDatabaseDdl, as Spanner lists them: each role,
        then each role's privileges, one GRANT per object (``shown``: an object's name as
        declared, by kind and folded name)."""
        roles = await self._records.roles(database)
        found = [f"CREATE ROLE {spelled}" for name, spelled, _ in roles if name != PUBLIC]
        written = {name: spelled for name, spelled, _ in roles}
        for name, spelled, grants in roles:  # memberships next: a role's grants may name roles made after it
            found += [f"GRANT ROLE {written.get(p, p)} TO ROLE {spelled}" for p in _members_of(grants)]
        for name, spelled, grants in roles:
            for obj, privileges in sorted(grants.items()):
                kind, _, object_name = obj.partition(":")
                if kind == "role":
                    continue
                words = ", ".join(p.upper() for p in sorted(privileges))
                found.append(f"GRANT {words} ON {_SHOWN_KIND[kind].upper()} {await shown(kind, object_name)} "
                             f"TO ROLE {spelled}")
        return found

    async def ddl(self, statement: ast.AccessDdl, database: str | None,
                  exists: Callable[[str, str], Awaitable[bool]]) -> None:
        """Applies CREATE / DROP ROLE, GRANT or REVOKE to ``database``'s roles; ``exists`` says
        whether an object (kind, folded name) is one of the database's."""
        if database is None:
            raise errors.FailedPrecondition(
                "database roles belong to a database made by CreateDatabase; this name reaches spanq's default "
                "namespace, which has none")
        self._changed(database)
        if isinstance(statement, ast.CreateRole):
            if len([r for r in await self._records.roles(database) if r[0] != PUBLIC]) >= MAX_ROLES:
                raise errors.LimitExceeded(f"a database has at most {MAX_ROLES} roles (Spanner's limit)")
            if not await self._records.role_put(database, statement.name, statement.spelled):
                raise errors.QueueAlreadyExists(f"Role already exists: {statement.spelled}", role=statement.name)
            return
        if isinstance(statement, ast.DropRole):
            held = {n: g for n, _, g in await self._records.roles(database)}
            if statement.name not in held:
                raise errors.QueueNotFound(f"Role not found: {statement.name}", role=statement.name)
            if any(held[statement.name].values()):
                raise errors.FailedPrecondition(
                    f"role {statement.name} holds privileges; REVOKE them before DROP ROLE", role=statement.name)
            members = [n for n, g in held.items() if statement.name in _members_of(g)]
            if members:
                raise errors.FailedPrecondition(
                    f"role {statement.name} is granted to role {members[0]}; REVOKE ROLE {statement.name} FROM ROLE "
                    f"{members[0]} before DROP ROLE", role=statement.name)
            await self._records.role_delete(database, statement.name)
            return
        if isinstance(statement, ast.GrantRole):
            await self._grant_role(statement, database)
            return
        await self._grant(statement, database, exists)

    async def _grant_role(self, s: ast.GrantRole, database: str) -> None:
        """GRANT / REVOKE ROLE: a role's memberships, changed with every role of the database held
        (two GRANTs at once cannot make a cycle between them)."""
        everyone = [n for n, _, _ in await self._records.roles(database)]

        def change(current: RoleGrants) -> RoleGrants:
            for role in s.granted + s.roles:
                if role not in current and not (role in SYSTEM_ROLES and role in s.granted):
                    raise errors.QueueNotFound(f"Role not found: {role}", role=role)
            out = {role: {k: list(v) for k, v in current[role].items()} for role in s.roles}
            for role in s.roles:
                for granted in s.granted:
                    if s.revoke:
                        out[role].pop(key("role", granted), None)
                        continue
                    if role == granted or role in inherited(current, granted):
                        raise errors.FailedPrecondition(
                            f"GRANT ROLE {granted} TO ROLE {role} would make a cycle: role {granted} "
                            + ("is that role" if role == granted else f"inherits role {role} already"), role=role)
                    out[role][key("role", granted)] = [MEMBER]
                    current = {**current, role: out[role]}  # the next grant of the statement sees this one
            return out

        await self._records.roles_change(database, everyone, change)

    async def _grant(self, s: ast.Grant, database: str, exists: Callable[[str, str], Awaitable[bool]]) -> None:
        spelled = dict(s.spelled)
        for name in s.names:
            target = ("queue", name.split("_", 1)[1]) if s.on == "function" else (s.on, name)
            if not await exists(*target):
                what = "Table-valued function" if s.on == "function" else s.on.capitalize()
                raise errors.QueueNotFound(f"{what} not found: {spelled.get(name, name)}")
        named = [r for r in s.roles if r != PUBLIC]

        def change(current: RoleGrants) -> RoleGrants:
            missing = [r for r in named if r not in current]
            if missing:
                raise errors.QueueNotFound(f"Role not found: {missing[0]}", role=missing[0])
            out = {}
            for role, grants in current.items():
                changed = {k: set(v) for k, v in grants.items()}
                for name in s.names:
                    held = changed.setdefault(key(s.on, name), set())
                    held.difference_update(s.privileges) if s.revoke else held.update(s.privileges)
                out[role] = {k: sorted(v) for k, v in changed.items() if v}
            return out

        if PUBLIC in s.roles:
            await self._public(database, s, change)
        if named:
            await self._records.roles_change(database, named, change)

    async def _public(self, database: str, s: ast.Grant, change: Callable[[RoleGrants], RoleGrants]) -> None:
        """public is a role of every database without a CREATE ROLE: its privileges are kept in a
        row of its own, made on its first GRANT (and listed as no role of the database's)."""
        await self._records.role_put(database, PUBLIC, PUBLIC)
        await self._records.roles_change(database, [PUBLIC], change)

    async def forget(self, database: str | None, kind: str, name: str) -> None:
        """Revokes every privilege on an object that was dropped (a queue with its table
        functions), so that one made again under its name starts with none, as a new object."""
        if database is None:
            return
        self._changed(database)
        objects = {key(kind, name)} | ({key("function", "receive_" + name), key("function", "renewlease_" + name)}
                                       if kind == "queue" else set())
        holders = [n for n, _, g in await self._records.roles(database) if objects & set(g)]
        if holders:
            await self._records.roles_change(
                database, holders, lambda current: {r: {k: v for k, v in g.items() if k not in objects}
                                                    for r, g in current.items()})


def _members_of(grants: dict[str, list[str]]) -> list[str]:
    """The roles a role's grants make it a member of."""
    return sorted(obj.partition(":")[2] for obj in grants if obj.startswith("role:"))


def inherited(roles: dict[str, dict[str, list[str]]], name: str) -> set[str]:
    """The roles ``name`` inherits from, transitively (``roles``: each role's grants)."""
    found: set[str] = set()
    todo = [name]
    while todo:
        for parent in _members_of(roles.get(todo.pop(), {})):
            if parent not in found:
                found.add(parent)
                todo.append(parent)
    return found
