"""Domain errors to gRPC status, once for the whole server: the one table, rich
ErrorInfo details, and the one way a call is ended with them. Both front-ends'
servicers and the interceptors (decoding.py, auth.py) answer through here; the
Spanner front-end with its own codes (spanner/status.py), as a ``Translation``.
"""

import dataclasses
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from ..ground import errors

logger = logging.getLogger(__name__)

DOMAIN = "spanq.dev"
STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""The trailing metadata key of the rich google.rpc.Status (grpc_status.rpc_status reads it)."""
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"

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


def _message(error: errors.QueueError) -> str:
    return error.message


def _metadata(error: errors.QueueError) -> dict[str, str]:
    return error.metadata


Method = TypeVar("Method", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class Translation:
    """How a front-end answers the domain's errors: which code and reason each gets, the
    status message, and whether ABORTED carries a RetryInfo (Spanner's clients wait 2 s
    and more without one). The default is spanq.v1's."""

    codes: Callable[[errors.QueueError], tuple[grpc.StatusCode, str]] = code_and_reason
    message: Callable[[errors.QueueError], str] = _message
    metadata: Callable[[errors.QueueError], dict[str, str]] = _metadata
    """The ErrorInfo's metadata (a front-end whose message is shorter keeps the rest here)."""
    retry_delay: timedelta | None = None
    """Sent as RetryInfo with ABORTED (None: no RetryInfo)."""

    def to_status(self, error: errors.QueueError) -> status_pb2.Status:
        """A google.rpc.Status carrying an ErrorInfo with the reason and metadata."""
        code, reason = self.codes(error)
        info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=self.metadata(error))
        detail = any_pb2.Any()
        detail.Pack(info)
        return status_pb2.Status(code=code.value[0], message=self.message(error), details=[detail])

    async def abort(self, context: grpc.aio.ServicerContext, error: errors.QueueError) -> NoReturn:
        """Ends the call with the error's status (the rich one in the trailing metadata)."""
        code = self.codes(error)[0]
        rich = self.to_status(error)
        trailing = []
        if self.retry_delay is not None and code is grpc.StatusCode.ABORTED:
            delay = duration_pb2.Duration()
            delay.FromTimedelta(self.retry_delay)
            retry = error_details_pb2.RetryInfo(retry_delay=delay)
            detail = any_pb2.Any()
            detail.Pack(retry)
            rich.details.append(detail)
            trailing.append((RETRY_INFO_KEY, retry.SerializeToString()))
        trailing.append((STATUS_DETAILS_KEY, rich.SerializeToString()))
        await context.abort(code, rich.message, tuple(trailing))

    async def _abort_unexpected(self, context: grpc.aio.ServicerContext, name: str) -> NoReturn:
        logger.exception("unexpected error in %s", name)
        await self.abort(context, errors.QueueError("internal error; the server logged it"))

    def translate_errors(self, method: Method) -> Method:
        """A servicer's coroutine method (bound or not: the context is its last argument)
        with domain errors answered as their status; anything unexpected is INTERNAL and
        logged."""

        @functools.wraps(method)
        async def unary(*args: Any) -> Any:
            try:
                return await method(*args)
            except errors.QueueError as exc:
                await self.abort(args[-1], exc)
            except Exception:
                await self._abort_unexpected(args[-1], method.__name__)

        return unary  # type: ignore[return-value]

    def translate_stream_errors(self, method: Callable[..., AsyncIterator[Any]]
                                ) -> Callable[..., AsyncIterator[Any]]:
        """The same for a server-streaming method (an async generator)."""

        @functools.wraps(method)
        async def streaming(*args: Any) -> AsyncIterator[Any]:
            responses = method(*args)
            try:
                async for response in responses:
                    yield response
            except errors.QueueError as exc:
                await self.abort(args[-1], exc)
            except Exception:
                await self._abort_unexpected(args[-1], method.__name__)
            finally:
                if isinstance(responses, AsyncGenerator):
                    await responses.aclose()

        return streaming


SPANQ = Translation()
"""spanq.v1's answers, and the interceptors' (for every method of both front-ends)."""
to_status = SPANQ.to_status
abort = SPANQ.abort
translate_errors = SPANQ.translate_errors
translate_stream_errors = SPANQ.translate_stream_errors


assert code_pb2.UNKNOWN == grpc.StatusCode.UNKNOWN.value[0]
