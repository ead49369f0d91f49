"""Instances, databases and long-running operations, as bookkeeping.

spanq serves ONE PostgreSQL database. Spanner's project, instance and
database names are recorded in it (records.py: the store's ``spanner_instances``
and ``spanner_databases``), so that the admin calls a client makes (create, get,
list, drop) answer as Spanner's emulator does, after a restart and on every
server alike. A database's DDL (CREATE QUEUE / DROP QUEUE) runs on that
PostgreSQL database; the queues it creates are recorded as its own (the
store's ``spanner_names``), listed by its GetDatabaseDdl and dropped with it.

Every operation is finished when it is returned; ``GetOperation`` answers
for the operations this server made (kept in memory: an operation is done
before the client can ask for it).
"""

import collections
import secrets
import time
from datetime import datetime, timezone
from typing import Any

from google.cloud.spanner_admin_database_v1.types import common as dba_common
from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as dba
from google.cloud.spanner_admin_instance_v1.types import spanner_instance_admin as ia
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, timestamp_pb2

from ...domain.records import Records
from ...ground import errors
from ..query.scope import DEFAULT_SCOPE, Scope
from . import sessions
from .status import SPANNER_ERRORS, AlreadyExists, NotFound

DatabasePb = dba.Database.pb()
InstancePb = ia.Instance.pb()
InstanceConfigPb = ia.InstanceConfig.pb()
EMULATOR_CONFIG = "emulator-config"
MAX_OPERATIONS = 10_000


def now_pb() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime.now(timezone.utc))
    return stamp


def packed(message: Any) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(message)
    return out


NAMESPACE_CACHE_SECONDS = 1.0
"""How long a database's namespace is reused before it is read again (another server may
have dropped and re-created the database meanwhile)."""


class Admin:
    def __init__(self, records: Records) -> None:
        self._records = records
        self._namespaces: dict[str, tuple[float, Scope]] = {}
        self._operations: collections.OrderedDict[str, operations_pb2.Operation] = collections.OrderedDict()

    # -- operations ----------------------------------------------------------------

    def operation(self, resource: str, metadata: Any, response: Any | None = None,
                  error: errors.QueueError | None = None) -> operations_pb2.Operation:
        op = operations_pb2.Operation(name=f"{resource}/operations/{secrets.token_hex(8)}", done=True)
        op.metadata.CopyFrom(packed(metadata))
        if error is not None:
            op.error.CopyFrom(SPANNER_ERRORS.to_status(error))
        elif response is not None:
            op.response.CopyFrom(packed(response))
        self._operations[op.name] = op
        while len(self._operations) > MAX_OPERATIONS:
            self._operations.popitem(last=False)
        return op

    def get_operation(self, name: str) -> operations_pb2.Operation:
        op = self._operations.get(name)
        if op is None:
            raise NotFound(f"operation {name!r} is not known to this server")
        return op

    def list_operations(self, name: str) -> list[operations_pb2.Operation]:
        return [op for key, op in self._operations.items() if key.startswith(name)]

    # -- instances -------------------------------------------------------------------

    def instance_config(self, name: str) -> Any:
        match = sessions.check(name, sessions.PROJECT + r"/instanceConfigs/(?P<config>[a-z0-9-]+)",
                               "instance config")
        return InstanceConfigPb(name=name, display_name=f"spanq ({match['config']})")

    def instance_configs(self, project: str) -> list[Any]:
        sessions.check(project, sessions.PROJECT, "project")
        return [self.instance_config(f"{project}/instanceConfigs/{EMULATOR_CONFIG}")]

    async def create_instance(self, parent: str, instance_id: str, instance: Any) -> Any:
        sessions.check(parent, sessions.PROJECT, "project")
        name = f"{parent}/instances/{instance_id}"
        sessions.check(name, sessions.INSTANCE, "instance")
        created = InstancePb()
        created.CopyFrom(instance)
        created.name = name
        created.state = InstancePb.State.READY
        created.create_time.CopyFrom(now_pb())
        created.update_time.CopyFrom(created.create_time)
        if not created.config:
            created.config = f"{parent}/instanceConfigs/{EMULATOR_CONFIG}"
        if not created.node_count and not created.processing_units:
            created.node_count = 1
        if created.node_count and not created.processing_units:
            created.processing_units = created.node_count * 1000
        if not await self._records.put("instance", name, created.SerializeToString()):
            raise AlreadyExists(f"Instance already exists: {name}")
        return created

    async def get_instance(self, name: str) -> Any:
        sessions.check(name, sessions.INSTANCE, "instance")
        found = await self._records.get("instance", name)
        if found is None:
            raise NotFound(f"Instance not found: {name} (create it with CreateInstance)")
        return InstancePb.FromString(found)

    async def ensure_instance(self, name: str) -> None:
        """A database may be created in an instance nobody created (the emulator's users often skip it)."""
        if await self._records.get("instance", name) is None:
            parent, _, instance_id = name.rpartition("/instances/")
            try:
                await self.create_instance(parent, instance_id, InstancePb(display_name=instance_id))
            except AlreadyExists:
                pass  # another request made it meanwhile

    async def list_instances(self, parent: str) -> list[Any]:
        sessions.check(parent, sessions.PROJECT, "project")
        return [InstancePb.FromString(i) for i in await self._records.listed("instance", parent)]

    async def instance_databases(self, name: str) -> list[str]:
        """The databases of an instance that exists (NOT_FOUND otherwise)."""
        await self.get_instance(name)
        return [d.name for d in await self.list_databases(name)]

    async def forget_instance(self, name: str) -> None:
        await self._records.delete("instance", name)

    # -- databases ---------------------------------------------------------------------

    async def create_database(self, parent: str, database_id: str, pg: bool = False) -> Any:
        name = f"{parent}/databases/{database_id}"
        sessions.check_database(name)
        await self.ensure_instance(parent)
        dialect = dba_common.DatabaseDialect.POSTGRESQL if pg else dba_common.DatabaseDialect.GOOGLE_STANDARD_SQL
        database = DatabasePb(name=name, state=DatabasePb.State.READY, database_dialect=dialect)
        database.create_time.CopyFrom(now_pb())
        if not await self._records.put("database", name, database.SerializeToString(), instance=parent):
            raise AlreadyExists(f"Database already exists: {name}")
        self._namespaces.pop(name, None)  # it was the default namespace until now
        return database

    async def get_database(self, name: str) -> Any:
        sessions.check_database(name)
        found = await self._records.get("database", name)
        if found is None:
            raise NotFound(f"Database not found: {name}")
        return DatabasePb.FromString(found)

    async def list_databases(self, instance: str) -> list[Any]:
        sessions.check(instance, sessions.INSTANCE, "instance")
        return [DatabasePb.FromString(d) for d in await self._records.listed("database", instance)]

    async def database_queues(self, name: str) -> list[str]:
        """The queues a database's DDL created."""
        return await self._records.database_queues(name)

    async def forget_database(self, name: str) -> None:
        self._namespaces.pop(name, None)
        await self._records.delete("database", name)

    async def scope(self, database: str) -> Scope:
        """The database's namespace and dialect: its own for a database CreateDatabase made, the
        default namespace ("", spanq.v1's queues) and GoogleSQL for any other well-formed name."""
        cached = self._namespaces.get(database)
        if cached is not None and time.monotonic() - cached[0] < NAMESPACE_CACHE_SECONDS:
            return cached[1]
        record = await self._records.namespace(database)
        found = DEFAULT_SCOPE
        if record is not None:
            pg = DatabasePb.FromString(record[1]).database_dialect == dba_common.DatabaseDialect.POSTGRESQL
            found = Scope(record[0], pg, database)
        self._namespaces[database] = (time.monotonic(), found)
        if len(self._namespaces) > MAX_OPERATIONS:
            self._namespaces.clear()
        return found
