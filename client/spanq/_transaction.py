"""The transaction builder: sends, acks and lease renewals that a Commit
applies atomically, in order. Pure data: the clients encode and commit it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Union

from . import _codec
from ._requests import AckTarget, LeaseTarget, outgoing
from ._types import CommitResult, Key, KeyValue, OutgoingMessage

__all__ = ["Transaction"]


@dataclasses.dataclass(frozen=True)
class SendOp:
    queue: str
    messages: list[OutgoingMessage]


@dataclasses.dataclass(frozen=True)
class AckOp:
    queue: str
    targets: list[AckTarget]
    ignore_not_found: bool


@dataclasses.dataclass(frozen=True)
class RenewOp:
    queue: str
    targets: list[LeaseTarget]
    lease_duration: timedelta


Op = Union[SendOp, AckOp, RenewOp]


class Transaction:
    """Mutations to commit atomically and in order: all of them or none.

    Build one with ``client.transaction()`` (commits when the ``with`` block ends without an error) or
    ``spanq.Transaction()`` and ``client.commit(tx)``. Ack before send lets a message key be reused in one
    commit. Each method returns the transaction, so calls chain. ``result`` holds the CommitResult once
    committed. A Transaction is not thread-safe; build it on one thread.
    """

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self.result: CommitResult | None = None
        """The commit's outcome, once committed."""

    def send(
        self,
        queue: str,
        payload: Any,
        *,
        key: Key | KeyValue | None = None,
        deliver_time: datetime | None = None,
        delay: timedelta | float | None = None,
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        ordering_key: str | None = None,
    ) -> Transaction:
        """Adds a send of one message (see ``Client.send``)."""
        message = OutgoingMessage(payload, key, deliver_time, _codec.as_timedelta(delay), headers, priority,
                                  ordering_key)
        return self.send_many(queue, [message])

    def send_many(self, queue: str, messages: Iterable[OutgoingMessage | Any]) -> Transaction:
        """Adds a send of several messages, stored together."""
        self._ops.append(SendOp(queue, outgoing(messages)))
        return self

    def ack(self, queue: str, *targets: AckTarget, ignore_not_found: bool = False) -> Transaction:
        """Adds an ack of messages (checking their lease tokens) or keys."""
        self._ops.append(AckOp(queue, list(targets), ignore_not_found))
        return self

    def renew_lease(self, queue: str, *targets: LeaseTarget, lease_duration: timedelta | float) -> Transaction:
        """Adds a lease renewal (``lease_duration`` from the commit); a Message carries its new token forward."""
        duration = _codec.as_timedelta(lease_duration)
        assert duration is not None
        self._ops.append(RenewOp(queue, list(targets), duration))
        return self

    def nack(self, queue: str, *targets: LeaseTarget) -> Transaction:
        """Adds a release of leases: the messages are redelivered after the queue's backoff."""
        self._ops.append(RenewOp(queue, list(targets), timedelta(0)))
        return self

    @property
    def mutations(self) -> tuple[Op, ...]:
        """The mutations so far, in order."""
        return tuple(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __repr__(self) -> str:
        return f"Transaction({len(self._ops)} mutation(s))"


Transaction.__module__ = "spanq"
