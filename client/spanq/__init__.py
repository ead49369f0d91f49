"""spanq: Spanner's queues on PostgreSQL. The Python SDK.

- ``spanq.Client(target)``: blocking and thread-safe; ``spanq.aio.Client(target)``: asyncio. Both offer
  queue admin, ``send``, ``ack``, ``renew_lease``, ``nack``, ``receive``, ``commit``/``transaction`` and
  ``subscribe``, with automatic request ids and idempotent replay, and a batching ``publish``.
- ``spanq.sql``: send and ack inside your own psycopg transaction (imported on first use: it needs
  psycopg, ``pip install 'spanq[sql]'``, which the rest of the SDK does not).
- Errors derive from ``spanq.SpanqError``.
"""

from typing import TYPE_CHECKING, Any

from . import aio
from ._client import Client, Subscription
from ._errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    Closed,
    CommitOutcomeUnknown,
    DeadlineExceeded,
    FailedPrecondition,
    InternalError,
    InvalidArgument,
    LeaseLost,
    MessageGone,
    OrderingKeyPaused,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    SpanqError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from ._admin import PeekedMessage, PeekPage, QueueStats, RedriveProgress, ReplayProgress
from ._retry import Retry
from ._transaction import Transaction
from ._types import (
    BatchSettings,
    DeadLetter,
    CommitResult,
    FlowControl,
    Future,
    Key,
    KeyColumn,
    KeyValue,
    Message,
    OutgoingMessage,
    PublishFlowControl,
    Queue,
    RenewedLease,
    TypeCode,
)

if TYPE_CHECKING:
    from . import sql


def __getattr__(name: str) -> Any:
    if name == "sql":  # psycopg is the application's: load it only for an application that uses spanq.sql
        import importlib  # noqa: PLC0415

        return importlib.import_module(".sql", __name__)
    raise AttributeError(f"module 'spanq' has no attribute {name!r}")


__all__ = [
    "aio",
    "sql",
    # clients
    "Client",
    "Subscription",
    "Transaction",
    "Retry",
    # values
    "Queue",
    "KeyColumn",
    "TypeCode",
    "Key",
    "KeyValue",
    "Message",
    "OutgoingMessage",
    "RenewedLease",
    "CommitResult",
    "FlowControl",
    "BatchSettings",
    "PublishFlowControl",
    "Future",
    "QueueStats",
    "DeadLetter",
    "PeekedMessage",
    "PeekPage",
    "RedriveProgress",
    "ReplayProgress",
    # errors
    "SpanqError",
    "Closed",
    "NotFound",
    "AlreadyExists",
    "MessageGone",
    "FailedPrecondition",
    "LeaseLost",
    "OrderingKeyPaused",
    "Aborted",
    "InvalidArgument",
    "ResourceExhausted",
    "Unauthenticated",
    "PermissionDenied",
    "Unavailable",
    "DeadlineExceeded",
    "Cancelled",
    "Unimplemented",
    "InternalError",
    "CommitOutcomeUnknown",
]
