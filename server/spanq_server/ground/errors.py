"""The domain's errors: one rooted hierarchy, mapped to gRPC codes in status.py.

Each error's message says what was wrong and what to do; the docstring is
the default message.
"""


class QueueError(Exception):
    """The queue service could not do what was asked."""

    def __init__(self, message: str | None = None, **metadata: str) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        self.metadata = metadata

    @property
    def message(self) -> str:
        return str(self.args[0])


class InvalidArgument(QueueError):
    """The request is malformed; correct it before retrying."""


class QueueNotFound(QueueError):
    """No such queue; create it first, or check the name."""


class QueueAlreadyExists(QueueError):
    """A queue or table with that name exists already."""


class MessageAlreadyExists(QueueError):
    """A message with that key is in the queue already; nothing of the request was stored."""


class ParentRowNotFound(QueueError):
    """The parent row that would own this message does not exist."""


class RowAlreadyExists(QueueError):
    """A row with that key is in the table already (a Spanner table's Insert); nothing was stored."""


class RowNotFound(QueueError):
    """No row with that key (a Spanner table's Update), or no such table."""


class MessageNotFound(QueueError):
    """The message is gone (already acknowledged or deleted); set ignore_not_found to accept that."""


class LeaseNotHeld(QueueError):
    """The lease token is no longer the message's current lease: it was renewed, released or given to another receiver."""


class FailedPrecondition(QueueError):
    """The system is not in a state the request needs."""


class LimitExceeded(QueueError):
    """A configured limit would be exceeded; nothing was stored."""


class StoreUnavailable(QueueError):
    """The database is unreachable; nothing was committed, so retrying is safe."""


class DatabaseReadOnly(StoreUnavailable):
    """The database refused to write: it is a standby (or read-only); nothing was committed, so retrying is safe."""


class CommitOutcomeUnknown(QueueError):
    """The database connection failed while COMMIT was in flight: the write may or may not have
    happened. Replay the same request_id to learn the outcome."""


class ClientNotReading(QueueError):
    """The stream's client did not read its responses in time; the stream ended and gave its
    unwritten messages back. Read the stream steadily, or ask for smaller batches."""


class TransactionAborted(QueueError):
    """The transaction conflicted with another one, or was lost or reaped; nothing of it was committed: run it again."""


class Unauthenticated(QueueError):
    """The call carries no valid credentials: send 'authorization: Bearer <token>' call metadata
    with a token from the server's token file."""


class PermissionDenied(QueueError):
    """The token does not grant the privilege this call needs on this queue; ask the operator to grant it
    in the server's token file."""


class Unimplemented(QueueError):
    """This is not implemented yet."""
