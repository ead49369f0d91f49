"""The two error tables, alone: the server's (domain error -> gRPC code and ErrorInfo reason,
status.py) and the SDK's (code and reason -> SpanqError class, _errors.py), and the two read
together as a client meets them, through a real grpc-status-details-bin trailer."""

import inspect

import grpc
import pytest
from google.rpc import error_details_pb2

import spanq
from spanq._errors import _BY_CODE, from_rpc_error
from spanq_server.ground import errors
from spanq_server.edge import status

ROUND_TRIP: dict[type[errors.QueueError], type[spanq.SpanqError]] = {
    errors.InvalidArgument: spanq.InvalidArgument,
    errors.QueueNotFound: spanq.NotFound,
    errors.QueueAlreadyExists: spanq.AlreadyExists,
    errors.MessageAlreadyExists: spanq.AlreadyExists,
    errors.ParentRowNotFound: spanq.NotFound,
    errors.RowAlreadyExists: spanq.AlreadyExists,  # Spanner tables' errors: a spanq.v1 client never meets them,
    errors.RowNotFound: spanq.NotFound,  # but one would catch them by their codes
    errors.MessageNotFound: spanq.MessageGone,
    errors.LeaseNotHeld: spanq.LeaseLost,
    errors.FailedPrecondition: spanq.FailedPrecondition,
    errors.LimitExceeded: spanq.ResourceExhausted,
    errors.StoreUnavailable: spanq.Unavailable,
    errors.DatabaseReadOnly: spanq.Unavailable,
    errors.CommitOutcomeUnknown: spanq.CommitOutcomeUnknown,
    errors.ClientNotReading: spanq.Aborted,
    errors.TransactionAborted: spanq.Aborted,
    errors.Unauthenticated: spanq.Unauthenticated,
    errors.PermissionDenied: spanq.PermissionDenied,
    errors.Unimplemented: spanq.Unimplemented,
    errors.QueueError: spanq.InternalError,
}
"""Each domain error and the SDK class a client catches for it."""

DOMAIN_ERRORS = [cls for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, errors.QueueError)]


def as_call_error(error: errors.QueueError) -> grpc.aio.AioRpcError:
    """The failed call a client sees when the server aborts with ``error`` (what interceptors.abort sends)."""
    s = status.to_status(error)
    code = next(c for c in grpc.StatusCode if c.value[0] == s.code)
    trailer = grpc.aio.Metadata(("grpc-status-details-bin", s.SerializeToString()))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailer, s.message)


def test_every_domain_error_has_a_client_side_meaning():
    assert sorted(c.__name__ for c in DOMAIN_ERRORS) == sorted(c.__name__ for c in ROUND_TRIP)


@pytest.mark.parametrize("cls", DOMAIN_ERRORS, ids=lambda c: c.__name__)
def test_each_domain_error_reaches_the_sdk_as_its_own_class_with_message_and_metadata(cls):
    error = cls("what went wrong, and what to do", queue="q")
    got = from_rpc_error(as_call_error(error))
    assert type(got) is ROUND_TRIP[cls]
    assert got.message == "what went wrong, and what to do"
    assert got.metadata == {"queue": "q"}
    assert got.reason == status.code_and_reason(error)[1]


def test_only_the_root_is_internal_and_a_subclass_keeps_its_parents_code():
    internal = [c for c in DOMAIN_ERRORS if status.code_and_reason(c())[0] == grpc.StatusCode.INTERNAL]
    assert internal == [errors.QueueError]
    assert status.code_and_reason(errors.DatabaseReadOnly()) == status.code_and_reason(errors.StoreUnavailable())


def test_reasons_tell_apart_errors_that_share_a_code():
    reasons = [reason for _, reason in status.STATUS_TABLE.values()]
    assert len(reasons) == len(set(reasons))
    assert status.code_and_reason(errors.ClientNotReading())[0] == status.code_and_reason(
        errors.TransactionAborted())[0] == grpc.StatusCode.ABORTED


def test_the_status_carries_one_error_info_in_spanqs_domain():
    s = status.to_status(errors.LeaseNotHeld("gone", key='["k"]'))
    assert s.code == grpc.StatusCode.FAILED_PRECONDITION.value[0] and s.message == "gone"
    [detail] = s.details
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    assert (info.reason, info.domain, dict(info.metadata)) == ("LEASE_NOT_HELD", status.DOMAIN, {"key": '["k"]'})


def test_a_domain_errors_default_message_is_its_docstring():
    assert errors.LimitExceeded().message == "A configured limit would be exceeded; nothing was stored."


def test_an_unknown_commit_names_the_request_id_to_replay():
    got = from_rpc_error(as_call_error(errors.CommitOutcomeUnknown("lost", request_id="r-1")))
    assert isinstance(got, spanq.CommitOutcomeUnknown) and got.request_id == "r-1"


def test_without_error_info_the_code_alone_decides_and_an_unknown_code_is_internal():
    bare = grpc.aio.AioRpcError(grpc.StatusCode.FAILED_PRECONDITION, grpc.aio.Metadata(), grpc.aio.Metadata(), "")
    got = from_rpc_error(bare)
    assert type(got) is spanq.FailedPrecondition and got.reason is None  # not LeaseLost: no reason said so
    assert got.message.startswith("FAILED_PRECONDITION: ")  # the class's docstring stands in for details
    odd = grpc.aio.AioRpcError(grpc.StatusCode.DATA_LOSS, grpc.aio.Metadata(), grpc.aio.Metadata(), "bits")
    assert type(from_rpc_error(odd)) is spanq.InternalError


@pytest.mark.parametrize("code", list(_BY_CODE), ids=lambda c: c.name)
def test_each_code_in_the_sdk_table_gives_its_class(code):
    got = from_rpc_error(grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "x"))
    assert type(got) is _BY_CODE[code] and got.code == code
