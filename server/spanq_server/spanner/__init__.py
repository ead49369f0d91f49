"""Spanner's own gRPC API, beside spanq.v1: enough of google.spanner.v1 (and its
instance, database and operations admin services) that the official
google-cloud-spanner client, pointed at spanq with SPANNER_EMULATOR_HOST, runs
queue code unchanged. See docs/spanner-compat.md.

Two folders, as Google's emulator keeps ``frontend/handlers`` apart from ``backend/query``:

- ``handlers/``: the gRPC side: servicers, sessions, transactions, admin (instances,
  databases, operations), status codes, and ``access`` (what each method and each
  parsed statement needs of a token);
- ``query/``: the query engine: lexer, the two grammars and their one entry point
  (``parser.parse(text, dialect)``), the PostgreSQL generator, executor, tables,
  schema, ranges and the one Value codec. It never imports ``handlers/``;
- ``port``: what the front-end needs of the store (``TableStore``).

The message classes come from google-cloud-spanner. Without it installed the
front-end is simply not served (``create`` returns None). The seam with the rest
of the server is this module: ``create`` takes the domain's objects and, for its
tables, the store as the narrow port it declares (``port.TableStore``: server.py hands
it the store, which spanner/ never imports); ``access_rules`` says what each method
needs of a token.
"""

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..domain.exactly_once import ExactlyOnce
    from ..domain.mutations import Mutator
    from ..domain.operator import Operator
    from ..domain.queues import Catalog
    from ..domain.receive.stream import Receiver
    from ..domain.records import Records
    from ..edge.auth import Rule
    from ..ground.clock import Clock
    from .handlers.servicers import SpannerFrontEnd
    from .port import TableStore

logger = logging.getLogger(__name__)

SPANNER = "google.spanner.v1.Spanner"
INSTANCE_ADMIN = "google.spanner.admin.instance.v1.InstanceAdmin"
DATABASE_ADMIN = "google.spanner.admin.database.v1.DatabaseAdmin"
OPERATIONS = "google.longrunning.Operations"
SERVICE_NAMES = (SPANNER, INSTANCE_ADMIN, DATABASE_ADMIN, OPERATIONS)
"""The services this front-end serves (their methods' rules: access.py)."""


def create(catalog: "Catalog", mutator: "Mutator", receiver: "Receiver", exactly_once: "ExactlyOnce",
           operator: "Operator", records: "Records", tables: "TableStore", clock: "Clock", *, pool_max_size: int,
           idle_timeout: timedelta, max_lifetime: timedelta) -> "SpannerFrontEnd | None":
    """The Spanner front-end, or None when google-cloud-spanner is not installed."""
    try:
        from .handlers.servicers import SpannerFrontEnd
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("google"):
            raise
        logger.info("Spanner front-end not served: %s (make run-spanner installs it, or pip install "
                    "'spanq[spanner]')", exc)
        return None
    # Each open read-write transaction holds a pooled connection: leave the
    # other half of the pool to receive streams and single-use commits.
    return SpannerFrontEnd(catalog, mutator, receiver, exactly_once, operator, records, tables, clock,
                           max_open_transactions=max(1, pool_max_size // 2), idle_timeout=idle_timeout,
                           max_lifetime=max_lifetime)


def access_rules() -> "dict[str, Rule]":
    """What each method of this front-end needs of a token (served or not: without
    google-cloud-spanner the rules stay unused)."""
    from .handlers.access import RULES

    return RULES
