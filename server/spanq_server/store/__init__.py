"""The store: the only code that runs SQL. A psycopg pool, the named queries of
sql/queries.sql, and the translation of psycopg errors into domain errors. It
decides nothing: the rules (queue limits, which error an ack earns, exactly-once)
are the domain's, which gets facts from the store and gives it values.

Every method takes and returns domain values (model.py), never rows. Methods
that mutate take the transaction's ``Handle``, so that one transaction can hold
several mutations and the commit-ledger entry (see ``Database.transaction``).

One module per group of tables, each a part of ``Store``:

- database.py: the pool, transactions (``Handle``, ``HeldTransaction``), psycopg
  errors -> domain errors, the wake-up listener's connection;
- catalog.py: migrations and the queue catalog (queue DDL);
- messages.py: each queue's table: send, lease, ack, renew, dead-letter, select;
- ledger.py: the commit ledger's table;
- operator.py: stats, gauges, peek, purge, redrive;
- roster.py: every server's open streams, for a consumers list across servers;
- spanner.py: the Spanner front-end's records;
- tables.py: the Spanner front-end's tables (their DDL, registry and statements);
- arrays.py: array parameters as literals (why: see there).
"""

from .catalog import DDL_LOCK_SLICE, DDL_LOCK_TIMEOUT, CatalogTables
from .database import Handle, HeldTransaction, Listener, _Backoff, refused_as_read_only, url_warnings
from .ledger import LedgerTable
from .messages import MessageTables
from .operator import ALL_SOURCES, OperatorQueries, PeekFilter, RedriveSource
from .roster import RosterTable
from .spanner import SpannerRecords
from .tables import SpannerTables

__all__ = [
    "ALL_SOURCES", "DDL_LOCK_SLICE", "DDL_LOCK_TIMEOUT", "Handle", "HeldTransaction", "Listener", "PeekFilter", "RedriveSource",
    "Store", "_Backoff", "refused_as_read_only", "url_warnings",
]


class Store(CatalogTables, MessageTables, LedgerTable, OperatorQueries, RosterTable, SpannerRecords, SpannerTables):
    """The database gateway: every table module's statements on one pool. Created
    closed; ``open()`` and ``close()`` are idempotent."""

    async def __aenter__(self) -> "Store":
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
