"""The Spanner front-end's records: instances, databases, how each queue's names
were spelled, database roles and proto bundles (spanner/handlers/admin.py, spanner/query/names.py)."""

from collections.abc import Callable
from typing import Any

from psycopg.types.json import Jsonb

from ..sql.compose import query
from .database import Database, _scalar, wrap_errors


RoleGrants = dict[str, dict[str, list[str]]]
"""Roles' privileges: role -> object ("queue:q") -> privileges."""


class SpannerRecords(Database):
    """spanq.spanner_instances, spanq.spanner_databases, spanq.spanner_names, spanq.spanner_roles,
    spanq.spanner_proto_bundles."""

    async def spanner_names_put(self, queue: str, database: str | None, spelled: dict[str, Any]) -> None:
        async with self._transaction(queue) as conn:
            await conn.execute(query("spanner_names_put"),
                               {"queue": queue, "database": database, "spelled": Jsonb(spelled)})

    async def spanner_names_get(self, queue: str) -> dict[str, Any] | None:
        async with self._read(queue) as conn:
            return await _scalar(conn, "spanner_names_get", queue=queue)  # type: ignore[no-any-return]

    async def spanner_database_queues(self, database: str) -> list[str]:
        async with self._read() as conn:
            cur = await conn.execute(query("spanner_database_queues"), {"database": database})
            return [row[0] for row in await cur.fetchall()]

    async def spanner_record_put(self, kind: str, name: str, message: bytes, instance: str | None = None) -> bool:
        """Records an instance or database (``kind``); False when one of the name exists."""
        async with self._transaction() as conn:
            with wrap_errors():
                return bool(await _scalar(conn, f"spanner_{kind}_put", name=name, instance=instance,
                                          record=message))

    async def spanner_record_get(self, kind: str, name: str) -> bytes | None:
        async with self._read() as conn:
            found = await _scalar(conn, f"spanner_{kind}_get", name=name)
        return bytes(found) if found is not None else None

    async def spanner_record_list(self, kind: str, parent: str) -> list[bytes]:
        params = {"prefix": parent + "/"} if kind == "instance" else {"instance": parent}
        async with self._read() as conn:
            cur = await conn.execute(query(f"spanner_{kind}_list"), params)
            return [bytes(row[0]) for row in await cur.fetchall()]

    async def spanner_database_namespace(self, name: str) -> tuple[str, bytes] | None:
        """A Spanner database's namespace and record."""
        async with self._read() as conn:
            cur = await conn.execute(query("spanner_database_namespace"), {"name": name})
            row = await cur.fetchone()
        return (row[0], bytes(row[1])) if row else None

    async def spanner_record_delete(self, kind: str, name: str) -> bool:
        async with self._transaction() as conn:
            return bool(await _scalar(conn, f"spanner_{kind}_delete", name=name))

    # -- proto bundles (spanq.spanner_proto_bundles) ---------------------------------

    async def spanner_proto_bundle_get(self, database: str) -> tuple[list[str], bytes] | None:
        """A database's proto bundle: its types and its descriptors (a FileDescriptorSet)."""
        async with self._read() as conn:
            cur = await conn.execute(query("spanner_proto_bundle_get"), {"database": database})
            row = await cur.fetchone()
        return (list(row[0]), bytes(row[1])) if row else None

    async def spanner_proto_bundle_put(self, database: str, types: list[str], descriptors: bytes,
                                       previous: tuple[list[str], bytes] | None) -> bool:
        """Makes a database's bundle (``previous`` None) or replaces ``previous`` with it; False
        when the database has one already, or one other than ``previous``."""
        params: dict[str, object] = {"database": database, "types": types, "descriptors": descriptors}
        if previous is not None:
            params |= {"previous_types": previous[0], "previous": previous[1]}
        async with self._transaction() as conn:
            with wrap_errors():
                return bool(await _scalar(conn, "spanner_proto_bundle_create" if previous is None
                                          else "spanner_proto_bundle_replace", **params))

    async def spanner_proto_bundle_delete(self, database: str) -> bool:
        async with self._transaction() as conn:
            return bool(await _scalar(conn, "spanner_proto_bundle_delete", database=database))

    # -- database roles (spanq.spanner_roles) --------------------------------------

    async def spanner_role_put(self, database: str, name: str, spelled: str) -> bool:
        """Creates a role; False when the database has one of the name."""
        async with self._transaction() as conn:
            with wrap_errors():
                return bool(await _scalar(conn, "spanner_role_put", database=database, name=name, spelled=spelled))

    async def spanner_role_delete(self, database: str, name: str) -> bool:
        async with self._transaction() as conn:
            return bool(await _scalar(conn, "spanner_role_delete", database=database, name=name))

    async def spanner_roles_list(self, database: str) -> list[tuple[str, str, dict[str, list[str]]]]:
        """(name, as written, privileges by object) of each role of a database, oldest first."""
        async with self._read() as conn:
            cur = await conn.execute(query("spanner_roles_list"), {"database": database})
            return [(row[0], row[1], dict(row[2])) for row in await cur.fetchall()]

    async def spanner_roles_change(self, database: str, names: list[str],
                                   change: Callable[[RoleGrants], RoleGrants]) -> None:
        """Replaces the privileges of roles ``names`` by ``change`` of them (role -> privileges by
        object; a role missing from what it is given does not exist), in one transaction that
        holds the roles' rows: all of the change or, when ``change`` raises, none."""
        async with self._transaction() as conn:
            cur = await conn.execute(query("spanner_roles_lock"), {"database": database, "names": names})
            current = {row[0]: dict(row[1]) for row in await cur.fetchall()}
            for name, grants in change(current).items():
                await conn.execute(query("spanner_role_grants_set"),
                                   {"database": database, "name": name, "grants": Jsonb(grants)})
