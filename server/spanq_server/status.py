"""Domain errors to gRPC status: the one table, and rich ErrorInfo details."""

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from . import errors

DOMAIN = "spanq.dev"

# error class -> (gRPC code, ErrorInfo reason). Subclasses match their own
# entry first; QueueError is the catch-all.
STATUS_TABLE: dict[type[errors.QueueError], tuple[grpc.StatusCode, str]] = {
    errors.InvalidArgument: (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
    errors.QueueNotFound: (grpc.StatusCode.NOT_FOUND, "QUEUE_NOT_FOUND"),
    errors.QueueAlreadyExists: (grpc.StatusCode.ALREADY_EXISTS, "QUEUE_ALREADY_EXISTS"),
    errors.MessageAlreadyExists: (grpc.StatusCode.ALREADY_EXISTS, "MESSAGE_ALREADY_EXISTS"),
    errors.ParentRowNotFound: (grpc.StatusCode.NOT_FOUND, "PARENT_ROW_NOT_FOUND"),
    errors.MessageNotFound: (grpc.StatusCode.OUT_OF_RANGE, "MESSAGE_NOT_FOUND"),
    errors.RowAlreadyExists: (grpc.StatusCode.ALREADY_EXISTS, "ROW_ALREADY_EXISTS"),
    errors.RowNotFound: (grpc.StatusCode.NOT_FOUND, "ROW_NOT_FOUND"),
    errors.LeaseNotHeld: (grpc.StatusCode.FAILED_PRECONDITION, "LEASE_NOT_HELD"),
    errors.FailedPrecondition: (grpc.StatusCode.FAILED_PRECONDITION, "FAILED_PRECONDITION"),
    errors.LimitExceeded: (grpc.StatusCode.RESOURCE_EXHAUSTED, "LIMIT_EXCEEDED"),
    errors.StoreUnavailable: (grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE"),
    errors.CommitOutcomeUnknown: (grpc.StatusCode.UNKNOWN, "UNKNOWN_COMMIT"),
    errors.Unimplemented: (grpc.StatusCode.UNIMPLEMENTED, "UNIMPLEMENTED"),
    errors.TransactionAborted: (grpc.StatusCode.ABORTED, "ABORTED"),
    errors.ClientNotReading: (grpc.StatusCode.ABORTED, "CLIENT_NOT_READING"),
    errors.Unauthenticated: (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
    errors.PermissionDenied: (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"),
    errors.QueueError: (grpc.StatusCode.INTERNAL, "INTERNAL"),
}


def code_and_reason(error: errors.QueueError) -> tuple[grpc.StatusCode, str]:
    for cls in type(error).__mro__:
        if cls in STATUS_TABLE:
            return STATUS_TABLE[cls]
    raise AssertionError("QueueError is in the table")


def to_status(error: errors.QueueError) -> status_pb2.Status:
    """A google.rpc.Status carrying an ErrorInfo with the reason and metadata."""
    code, reason = code_and_reason(error)
    info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=error.metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    return status_pb2.Status(code=code.value[0], message=error.message, details=[detail])


assert code_pb2.UNKNOWN == grpc.StatusCode.UNKNOWN.value[0]
