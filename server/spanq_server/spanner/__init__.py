"""Spanner's own gRPC API, beside spanq.v1: enough of google.spanner.v1 (and its
instance, database and operations admin services) that the official
google-cloud-spanner client, pointed at spanq with SPANNER_EMULATOR_HOST, runs
queue code unchanged. See docs/spanner-compat.md.

Modules, one per concern:

- ``servicers``: the gRPC translation (protobuf <-> domain, errors -> status);
- ``statements``: the strict parser for the few statement shapes queue code sends
  (GoogleSQL, and Spanner's PostgreSQL dialect);
- ``executor``: runs parsed statements on the domain;
- ``transactions``: transaction ids, open read-write transactions, the reaper;
- ``sessions``: resource names and (stateless) sessions;
- ``admin``: instances, databases (each its own namespace) and long-running operations;
- ``scope``: a database's namespace and dialect;
- ``names``: names as the DDL declared them;
- ``values``: Spanner's value encoding.

The message classes come from google-cloud-spanner. Without it installed the
front-end is simply not served (``create`` returns None).
"""

import logging
from datetime import timedelta
from typing import Any

logger = logging.getLogger(__name__)


def create(catalog: Any, mutator: Any, receiver: Any, exactly_once: Any, store: Any, clock: Any, *,
           pool_max_size: int, idle_timeout: timedelta, max_lifetime: timedelta) -> Any:
    """The Spanner front-end (``servicers.SpannerFrontEnd``), or None when
    google-cloud-spanner is not installed."""
    try:
        from .servicers import SpannerFrontEnd
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("google"):
            raise
        logger.info("Spanner front-end not served: %s (pip install google-cloud-spanner)", exc)
        return None
    # Each open read-write transaction holds a pooled connection: leave the
    # other half of the pool to receive streams and single-use commits.
    return SpannerFrontEnd(catalog, mutator, receiver, exactly_once, store, clock,
                           max_open_transactions=max(1, pool_max_size // 2), idle_timeout=idle_timeout,
                           max_lifetime=max_lifetime)
