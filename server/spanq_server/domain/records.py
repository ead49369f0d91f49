"""What a front-end records beside the queues, in the same database, so that every
server answers alike and after a restart: the Spanner front-end's instances and
databases (each a serialized protobuf, by kind and resource name), which database's
DDL made each queue, how that DDL spelled the queue's names (spanner/handlers/admin.py,
spanner/query/names.py), each database's roles (grants.py) and proto bundle (protos.py).
The domain's door to the store's Spanner records: the front-end calls this, never the
store (its tables take the store as ``spanner.port.TableStore``, handed to it by
server.py)."""

from collections.abc import Callable
from typing import Any, Literal

from ..store import Store
from ..store.spanner import RoleGrants

__all__ = ["Kind", "Records", "RoleGrants"]

Kind = Literal["instance", "database"]


class Records:
    def __init__(self, store: Store) -> None:
        self._store = store

    # -- instances and databases ---------------------------------------------------

    async def put(self, kind: Kind, name: str, record: bytes, instance: str | None = None) -> bool:
        """Records an instance or a database (of ``instance``); False when one of the name exists."""
        return await self._store.spanner_record_put(kind, name, record, instance=instance)

    async def get(self, kind: Kind, name: str) -> bytes | None:
        return await self._store.spanner_record_get(kind, name)

    async def listed(self, kind: Kind, parent: str) -> list[bytes]:
        """The instances of a project, or the databases of an instance."""
        return await self._store.spanner_record_list(kind, parent)

    async def delete(self, kind: Kind, name: str) -> bool:
        return await self._store.spanner_record_delete(kind, name)

    async def namespace(self, database: str) -> tuple[str, bytes] | None:
        """A database's namespace (the prefix of its queues) and its record; None for a
        database no CreateDatabase made."""
        return await self._store.spanner_database_namespace(database)

    # -- the queues a database's DDL made ------------------------------------------

    async def database_queues(self, database: str) -> list[str]:
        return await self._store.spanner_database_queues(database)

    async def spelling(self, queue: str) -> dict[str, Any] | None:
        """How the DDL that made ``queue`` spelled its names (None: not made by DDL)."""
        return await self._store.spanner_names_get(queue)

    async def record_spelling(self, queue: str, database: str | None, spelled: dict[str, Any]) -> None:
        """Records the database whose DDL made ``queue`` (None: the default namespace) and its spelling."""
        await self._store.spanner_names_put(queue, database, spelled)

    # -- proto bundles (spanner/query/protos.py) -------------------------------------

    async def proto_bundle(self, database: str) -> tuple[list[str], bytes] | None:
        """A database's proto bundle: its types (full names) and descriptors (a serialized
        FileDescriptorSet); None when it has none."""
        return await self._store.spanner_proto_bundle_get(database)

    async def put_proto_bundle(self, database: str, types: list[str], descriptors: bytes,
                               previous: tuple[list[str], bytes] | None) -> bool:
        """Makes ``database``'s proto bundle (``previous`` None), or replaces ``previous`` with it;
        False when it has one, or one other than ``previous`` (another change came first)."""
        return await self._store.spanner_proto_bundle_put(database, types, descriptors, previous)

    async def drop_proto_bundle(self, database: str) -> bool:
        return await self._store.spanner_proto_bundle_delete(database)

    # -- database roles (Spanner's fine-grained access control) ---------------------

    async def role_put(self, database: str, name: str, spelled: str) -> bool:
        """Creates a role of ``database``; False when it has one of the name."""
        return await self._store.spanner_role_put(database, name, spelled)

    async def role_delete(self, database: str, name: str) -> bool:
        return await self._store.spanner_role_delete(database, name)

    async def roles(self, database: str) -> list[tuple[str, str, dict[str, list[str]]]]:
        """(name, as written, privileges by object) of each role, oldest first."""
        return await self._store.spanner_roles_list(database)

    async def roles_change(self, database: str, names: list[str],
                           change: Callable[[RoleGrants], RoleGrants]) -> None:
        """Applies ``change`` to the privileges of roles ``names``, all or nothing."""
        await self._store.spanner_roles_change(database, names, change)
