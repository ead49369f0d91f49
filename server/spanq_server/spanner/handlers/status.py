"""The domain's errors as Spanner's clients expect their status: spanq.v1's table
(..status) with the few codes and words Spanner answers otherwise, and the errors
only this front-end raises. Its servicers, its long-running operations and its
ExecuteBatchDml's per-statement status all answer through ``SPANNER_ERRORS``."""

from datetime import timedelta

import grpc

from ...edge import status
from ...ground import errors
from ..query.executor import RowCountMismatch

ABORT_RETRY_DELAY = timedelta(milliseconds=50)
"""The RetryInfo delay sent with ABORTED (without one, the Python client waits 2 s and more)."""
MESSAGE_NOT_FOUND = "Message not found"
"""Spanner's words for an Ack of a missing message, which Google's own tests assert on."""


class NotFound(errors.QueueError):
    """No such resource."""


class AlreadyExists(errors.QueueError):
    """The resource exists already."""


def code_and_reason(error: errors.QueueError) -> tuple[grpc.StatusCode, str]:
    """The status a Spanner client expects: an Ack mutation of a missing message is
    NOT_FOUND (not spanq.v1's OUT_OF_RANGE), ASSERT_ROWS_MODIFIED is OUT_OF_RANGE,
    and an unknown commit outcome that the client's own retry can resolve from the
    commit ledger (it resends the same x-goog-spanner-request-id) is UNAVAILABLE;
    the rest as in spanq.v1 (..status)."""
    if isinstance(error, errors.MessageNotFound):
        return grpc.StatusCode.NOT_FOUND, "MESSAGE_NOT_FOUND"
    if isinstance(error, NotFound):
        return grpc.StatusCode.NOT_FOUND, "NOT_FOUND"
    if isinstance(error, AlreadyExists):
        return grpc.StatusCode.ALREADY_EXISTS, "ALREADY_EXISTS"
    if isinstance(error, RowCountMismatch):
        return grpc.StatusCode.OUT_OF_RANGE, "ASSERT_ROWS_MODIFIED"
    if isinstance(error, errors.CommitOutcomeUnknown) and "replay" in error.metadata:
        return grpc.StatusCode.UNAVAILABLE, "UNKNOWN_COMMIT"
    return status.code_and_reason(error)


def message_of(error: errors.QueueError) -> str:
    """The status message: Spanner's exact words where its clients' tests compare them
    (Java's ITQueueTest looks for "NOT_FOUND: Message not found"); spanq's own
    explanation goes to the ErrorInfo (``metadata_of``)."""
    if isinstance(error, errors.MessageNotFound):
        return MESSAGE_NOT_FOUND
    return error.message


def metadata_of(error: errors.QueueError) -> dict[str, str]:
    """The ErrorInfo's metadata: the error's own, and under ``detail`` spanq's message
    where Spanner's words replaced it (which key of which queue, what to do)."""
    if isinstance(error, errors.MessageNotFound) and error.message != MESSAGE_NOT_FOUND:
        return {**error.metadata, "detail": error.message}
    return error.metadata


SPANNER_ERRORS = status.Translation(codes=code_and_reason, message=message_of, metadata=metadata_of,
                                    retry_delay=ABORT_RETRY_DELAY)
