"""Instances, databases and long-running operations, as bookkeeping.

spanq serves ONE PostgreSQL database. Spanner's project, instance and
database names are recorded here, in this server's memory, so that the
admin calls a client makes (create, get, list) answer as Spanner would; they
are forgotten when the server restarts. Every database name reaches the
same PostgreSQL database, so queues are shared by all of them. A database's
DDL (CREATE QUEUE / DROP QUEUE) runs on that PostgreSQL database; dropping a
database (or its instance) drops the queues that were created through it.

Every operation is finished when it is returned; ``GetOperation`` answers
for the operations this server made.
"""

import collections
import secrets
from datetime import datetime, timezone
from typing import Any

from google.cloud.spanner_admin_database_v1.types import common as dba_common
from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as dba
from google.cloud.spanner_admin_instance_v1.types import spanner_instance_admin as ia
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, timestamp_pb2
from google.rpc import status_pb2

from .. import errors
from . import sessions

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


class Admin:
    def __init__(self) -> None:
        self.instances: dict[str, Any] = {}
        self.databases: dict[str, Any] = {}
        self.queues_of: dict[str, set[str]] = {}
        """Database name -> the queues created through it (dropped with it)."""
        self._operations: collections.OrderedDict[str, operations_pb2.Operation] = collections.OrderedDict()

    # -- operations ----------------------------------------------------------------

    def operation(self, resource: str, metadata: Any, response: Any | None = None,
                  error: errors.QueueError | None = None) -> operations_pb2.Operation:
        op = operations_pb2.Operation(name=f"{resource}/operations/{secrets.token_hex(8)}", done=True)
        op.metadata.CopyFrom(packed(metadata))
        if error is not None:
            op.error.CopyFrom(spanner_status(error))
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

    def create_instance(self, parent: str, instance_id: str, instance: Any) -> Any:
        sessions.check(parent, sessions.PROJECT, "project")
        name = f"{parent}/instances/{instance_id}"
        sessions.check(name, sessions.INSTANCE, "instance")
        if name in self.instances:
            raise AlreadyExists(f"instance {name!r} already exists")
        created = InstancePb()
        created.CopyFrom(instance)
        created.name = name
        created.state = InstancePb.State.READY
        created.create_time.CopyFrom(now_pb())
        created.update_time.CopyFrom(created.create_time)
        if not created.node_count and not created.processing_units:
            created.node_count = 1
        if created.node_count and not created.processing_units:
            created.processing_units = created.node_count * 1000
        self.instances[name] = created
        return created

    def get_instance(self, name: str) -> Any:
        sessions.check(name, sessions.INSTANCE, "instance")
        if name not in self.instances:
            raise NotFound(f"instance {name!r} was not created on this server (spanq keeps instance names in "
                           "memory); create it with CreateInstance")
        return self.instances[name]

    def ensure_instance(self, name: str) -> None:
        """Databases may be created in an instance this server has not seen (created before a restart)."""
        if name not in self.instances:
            parent, _, instance_id = name.rpartition("/instances/")
            self.create_instance(parent, instance_id, InstancePb(config=f"{parent}/instanceConfigs/{EMULATOR_CONFIG}",
                                                                 display_name=instance_id))

    def list_instances(self, parent: str) -> list[Any]:
        sessions.check(parent, sessions.PROJECT, "project")
        return [i for n, i in sorted(self.instances.items()) if n.startswith(parent + "/")]

    def delete_instance(self, name: str) -> list[str]:
        """Forgets the instance and its databases; returns the queues to drop."""
        self.get_instance(name)
        del self.instances[name]
        dropped: list[str] = []
        for database in [d for d in self.databases if d.startswith(name + "/databases/")]:
            dropped += self.drop_database(database)
        return dropped

    # -- databases ---------------------------------------------------------------------

    def create_database(self, parent: str, database_id: str) -> Any:
        name = f"{parent}/databases/{database_id}"
        sessions.check_database(name)
        self.ensure_instance(parent)
        if name in self.databases:
            raise AlreadyExists(f"database {name!r} already exists")
        database = DatabasePb(name=name, state=DatabasePb.State.READY,
                              database_dialect=dba_common.DatabaseDialect.GOOGLE_STANDARD_SQL)
        database.create_time.CopyFrom(now_pb())
        self.databases[name] = database
        self.queues_of[name] = set()
        return database

    def ensure_database(self, name: str) -> None:
        if name not in self.databases:
            parent, _, database_id = name.rpartition("/databases/")
            self.create_database(parent, database_id)

    def get_database(self, name: str) -> Any:
        sessions.check_database(name)
        if name not in self.databases:
            raise NotFound(f"database {name!r} was not created on this server (spanq keeps database names in "
                           "memory; every name reaches the same PostgreSQL database)")
        return self.databases[name]

    def list_databases(self, instance: str) -> list[Any]:
        sessions.check(instance, sessions.INSTANCE, "instance")
        return [d for n, d in sorted(self.databases.items()) if n.startswith(instance + "/databases/")]

    def drop_database(self, name: str) -> list[str]:
        self.get_database(name)
        del self.databases[name]
        return sorted(self.queues_of.pop(name, set()))


class NotFound(errors.QueueError):
    """No such resource."""


class AlreadyExists(errors.QueueError):
    """The resource exists already."""


def spanner_status(error: errors.QueueError) -> status_pb2.Status:
    """The google.rpc.Status of a failed operation."""
    from .servicers import to_status  # the one status table of this front-end

    return to_status(error)
