"""The SDK's errors: one hierarchy rooted at SpanqError, and the one table
that maps gRPC status codes and ErrorInfo reasons onto it.

Each class's docstring is its default message.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

logger = logging.getLogger(__name__)

__all__ = [
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

UNKNOWN_COMMIT = "UNKNOWN_COMMIT"
"""The ErrorInfo reason of a commit whose outcome the server could not learn."""
LEASE_NOT_HELD = "LEASE_NOT_HELD"
"""The ErrorInfo reason of an ack or renew with a lease token that is no longer current."""


class SpanqError(Exception):
    """The spanq service could not do what was asked."""

    code: grpc.StatusCode | None
    """The gRPC status code, when the error came from the server."""
    reason: str | None
    """The ErrorInfo reason (e.g. ``LEASE_NOT_HELD``), when the server sent one."""
    metadata: dict[str, str]
    """The ErrorInfo metadata (e.g. ``request_id``, ``key``, ``mutation_index``)."""

    def __init__(
        self,
        message: str | None = None,
        *,
        code: grpc.StatusCode | None = None,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())
        self.code = code
        self.reason = reason
        self.metadata = dict(metadata or {})

    @property
    def message(self) -> str:
        """What went wrong and what to do about it."""
        return str(self.args[0]) if self.args else ""


class Closed(SpanqError):
    """The client or subscription is closed; open a new one."""


class NotFound(SpanqError):
    """No such queue (or parent row); create it first, or check the name."""


class AlreadyExists(SpanqError):
    """A queue with that name, or a message with that key, exists already."""


class MessageGone(SpanqError):
    """The message is gone: already acknowledged or deleted (OUT_OF_RANGE, Spanner's ASSERT_ROWS_MODIFIED)."""


class FailedPrecondition(SpanqError):
    """The system is not in the state the request needs."""


class LeaseLost(FailedPrecondition):
    """The lease token is no longer current: the lease was renewed, released, or expired and granted to
    another receiver."""


class OrderingKeyPaused(FailedPrecondition):
    """The publisher holds back this ordering key: an earlier publish of it failed, so sending later ones
    would store them out of order. Nothing was sent. Call ``resume_publish(queue, ordering_key)`` once the
    failure is dealt with (Pub/Sub's rule), then publish again."""

    queue: str
    ordering_key: str

    def __init__(self, message: str | None = None, *, queue: str = "", ordering_key: str = "",
                 **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.queue = queue
        self.ordering_key = ordering_key


class Aborted(SpanqError):
    """Another transaction held what the call needed, and the server stopped waiting for it (queue DDL
    behind an open transaction that used the table, past --ddl-lock-timeout); nothing changed. Retry when
    that transaction ends. Not retried by the SDK: the holder may stay open for as long as it likes."""


class InvalidArgument(SpanqError, ValueError):
    """The request is malformed; correct it before retrying."""


class ResourceExhausted(SpanqError):
    """A limit would be exceeded (streams per queue, queues per database, payload size); nothing was stored."""


class Unauthenticated(SpanqError):
    """Missing or invalid credentials."""


class PermissionDenied(SpanqError):
    """The credentials do not grant this privilege on the queue."""


class Unavailable(SpanqError):
    """The service or its database is unreachable; nothing was committed, so retrying is safe."""


class DeadlineExceeded(SpanqError):
    """The call did not finish in time."""


class Cancelled(SpanqError):
    """The call was cancelled."""


class Unimplemented(SpanqError):
    """The server does not implement this call."""


class InternalError(SpanqError):
    """The server failed unexpectedly; it logged the details."""


class CommitOutcomeUnknown(SpanqError):
    """The commit may or may not have happened, and replaying its request_id did not tell within the retry
    deadline. Replay the same request_id later (``request_id=``) to learn the outcome; never re-execute blindly."""

    request_id: str
    """The request id whose outcome is unknown: replay it to learn the outcome."""

    def __init__(self, message: str | None = None, *, request_id: str = "", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.request_id = request_id or self.metadata.get("request_id", "")


for _cls in [SpanqError] + [globals()[_name] for _name in __all__ if _name != "SpanqError"]:
    _cls.__module__ = "spanq"

_BY_CODE: dict[grpc.StatusCode, type[SpanqError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.OUT_OF_RANGE: MessageGone,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
}
"""Status code -> error class; anything else is InternalError."""

_BY_REASON: dict[str, type[SpanqError]] = {
    LEASE_NOT_HELD: LeaseLost,
    UNKNOWN_COMMIT: CommitOutcomeUnknown,
}
"""ErrorInfo reasons that refine the code's class."""


def error_info(exc: grpc.RpcError) -> tuple[str | None, dict[str, str]]:
    """The ErrorInfo reason and metadata of a failed call, if the server sent one."""
    try:
        status = rpc_status.from_call(exc)  # type: ignore[arg-type]  # AioRpcError quacks like a grpc.Call
    except ValueError:
        return None, {}
    if status is None:
        return None, {}
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info.reason, dict(info.metadata)
    return None, {}


def from_rpc_error(exc: grpc.RpcError) -> SpanqError:
    """The SpanqError for a failed gRPC call (raise it ``from exc``)."""
    code: grpc.StatusCode = exc.code()
    details: str = exc.details() or ""
    reason, metadata = error_info(exc)
    cls = _BY_REASON.get(reason or "") or _BY_CODE.get(code, InternalError)
    message = details or f"{code.name}: {(cls.__doc__ or '').strip()}"
    return cls(message, code=code, reason=reason, metadata=metadata)
