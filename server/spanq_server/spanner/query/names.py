"""Names as a Spanner DDL declared them.

spanq folds every name to lower case (``statements.fold``): that is how the
catalog, ``spanq.v1`` and ``psql`` know a queue. Spanner looks names up
case-insensitively too, but shows them as declared: a queue created with
``Id INT64`` and ``Payload STRING(MAX)`` has result columns ``Id`` and
``Payload``, and clients look them up so (Java's ``getLong("Id")``, Go's
``ColumnByName("Id")`` are case-sensitive). The spelling of each queue made
by ``CREATE QUEUE`` here is stored beside the catalog (the store's
``spanner_names``) and read through a cache; a queue created another way
shows its folded names, with Spanner's ``Payload`` and ``DeliverTime``.
"""

import dataclasses
import re
from datetime import datetime
from typing import Any

from ...domain.queues import Catalog
from ...domain.records import Records
from ...ground import errors
from ...ground.model import QueueDef
from . import ast
from .lexing import fold

STANDARD = {"payload": "Payload", "delivertime": "DeliverTime"}
"""Spanner's spelling of a queue's own columns, when no DDL here declared them."""
PG_STANDARD = {"payload": "payload", "delivertime": "deliver_time"}
"""The same in Spanner's PostgreSQL dialect, whose system columns are snake_case."""
SYSTEM = ("SpannerLeaseExpirationTimestamp", "SpannerLeaseToken", "SpannerLastBatchMessage", "SpannerOldLeaseToken",
          "SpannerNewLeaseToken")
PG_SYSTEM = {re.sub(r"(?<!^)([A-Z])", r"_\1", n).lower(): fold(n) for n in SYSTEM} | {"deliver_time": "delivertime"}
"""PostgreSQL's names of RECEIVE's and RENEWLEASE's columns -> GoogleSQL's (folded):
spanner_lease_token -> spannerleasetoken."""


@dataclasses.dataclass(frozen=True)
class Spelling:
    queue: str
    columns: dict[str, str]
    """Folded column name -> as declared."""
    pg: bool = False
    """Declared in Spanner's PostgreSQL dialect: its results name the system columns so."""
    ddl: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What else the DDL declared that GetDatabaseDdl lists and the catalog does not hold:
    ``types`` (folded column -> its type as written), ``hidden`` (columns), ``descending`` (the
    key columns declared DESC), ``nullable`` (generated columns declared without NOT NULL),
    ``interleave_in`` (a table, without PARENT), ``locality_group``, ``receive_mode`` (written),
    ``proto`` (the Payload's proto message type, protos.py)."""

    def hidden(self, name: str) -> bool:
        return name in self.ddl.get("hidden", ())

    def descending(self, name: str) -> bool:
        """Whether a key column was declared DESC: the queue's rows are in that order by key."""
        return name in self.ddl.get("descending", ())

    @property
    def proto(self) -> str | None:
        """The full name of the Payload's proto message type; None for a BYTES, STRING or JSON one."""
        found = self.ddl.get("proto")
        return str(found) if found else None

    def column(self, name: str) -> str:
        return self.columns.get(name) or (PG_STANDARD if self.pg else STANDARD).get(name, name)

    def system(self, name: str) -> str:
        """RECEIVE's and RENEWLEASE's own columns (given in GoogleSQL's spelling) in this dialect."""
        if not self.pg:
            return name
        return next(pg for pg, folded in PG_SYSTEM.items() if folded == fold(name))

    @staticmethod
    def folded(queue: QueueDef) -> "Spelling":
        return Spelling(queue.name, {})

    @staticmethod
    def of_ddl(statement: ast.CreateQueue, pg: bool = False) -> "Spelling":
        spelled = dict(statement.spelled)
        columns = {name: spelled.get(name, name) for name, _ in statement.columns}
        ddl: dict[str, Any] = {"types": dict(statement.declared), "hidden": list(statement.hidden),
                               "descending": list(statement.descending),
                               "nullable": list(statement.nullable),
                               "interleave_in": statement.interleave_in,
                               "locality_group": statement.options.locality_group,
                               "receive_mode": statement.options.receive_mode, "proto": statement.payload_proto}
        return Spelling(spelled.get(statement.name, statement.name), columns, pg,
                        {k: v for k, v in ddl.items() if v})

    def as_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "columns": self.columns, "pg": self.pg, "ddl": self.ddl}


class Names:
    """The declared spellings, cached per queue (by name and creation time, so a queue
    dropped and created anew elsewhere is never shown with its predecessor's names)."""

    def __init__(self, records: Records, catalog: Catalog) -> None:
        self._records = records
        self._cache: dict[str, tuple[datetime | None, Spelling]] = {}
        catalog.on_gone(self.forget)

    def forget(self, queue: str) -> None:
        self._cache.pop(queue, None)

    async def of(self, queue: QueueDef) -> Spelling:
        cached = self._cache.get(queue.name)
        if cached is not None and cached[0] == queue.create_time:
            return cached[1]
        found = await self._records.spelling(queue.name)
        spelling = Spelling.folded(queue)
        if found:
            spelling = Spelling(str(found.get("queue") or queue.name), dict(found.get("columns") or {}),
                                bool(found.get("pg")), dict(found.get("ddl") or {}))
            if not queue.name.endswith(fold(spelling.queue)):  # never show another queue's name
                spelling = Spelling(queue.name, spelling.columns, spelling.pg, spelling.ddl)
        self._cache[queue.name] = (queue.create_time, spelling)
        return spelling

    async def shown_in(self, error: errors.QueueError, queue: QueueDef) -> None:
        """Rewrites the domain's name of the queue in an error (``'d1_myqueue'``, its table) to the
        name its DDL declared (``'MyQueue'``)."""
        shown = repr((await self.of(queue)).queue)
        if repr(queue.name) != shown and repr(queue.name) in error.message:
            error.args = (error.message.replace(repr(queue.name), shown),)

    async def record(self, queue: str, database: str | None, spelling: Spelling) -> None:
        """Records the spelling of a queue just created, and the Spanner database that created it."""
        self.forget(queue)
        await self._records.record_spelling(queue, database, spelling.as_json())
