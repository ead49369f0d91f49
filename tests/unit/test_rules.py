"""Fast tests of the rules the domain decides on facts from the store: which error an
ack earns, what a new or dropped queue must agree with, where commit faults strike,
what makes two requests the same (tests/store/test_arrays.py reads the store's array
literals back through PostgreSQL)."""

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from spanq_server.ground import errors
from spanq_server.domain import queues
from spanq_server.domain.exactly_once import Request
from spanq_server.domain.faults import FaultInjector
from spanq_server.ground.model import (AckFound, AckItem, AckResult, CatalogFacts, ColumnType, KeyColumn, QueueDef,
                                QueueDependents)
from spanq_server.domain.mutations import ack_results

KEYS = (KeyColumn("id", ColumnType.STRING),)


def queue(name: str = "tasks", **kwargs: object) -> QueueDef:
    fields: dict[str, object] = dict(name=name, key_columns=KEYS, payload_type=ColumnType.STRING,
                                     key_generated=False, parent_table=None, lease_duration=timedelta(seconds=10),
                                     initial_backoff=timedelta(seconds=1), max_backoff=timedelta(hours=1),
                                     max_delivery_attempts=None, dead_letter_queue=None)
    fields.update(kwargs)
    return QueueDef(**fields)  # type: ignore[arg-type]


def facts(**kwargs: object) -> CatalogFacts:
    fields: dict[str, object] = dict(queues=0, name_taken=False, index_name_taken=None, parent_key_width=None,
                                     dead_letter_queue=None)
    fields.update(kwargs)
    return CatalogFacts(**fields)  # type: ignore[arg-type]


def test_an_ack_tells_a_moved_lease_from_a_gone_message():
    items = [AckItem(("a",), "t1"), AckItem(("b",), "t2")]
    assert ack_results(queue(), items, [AckFound.ACKED, AckFound.ACKED], ignore_not_found=False) == [
        AckResult(("a",), True), AckResult(("b",), True)]
    with pytest.raises(errors.LeaseNotHeld, match="lease token 't2' is no longer current") as held:
        ack_results(queue(), items, [AckFound.ACKED, AckFound.LEASE_MOVED], ignore_not_found=True)
    assert held.value.metadata["key"] == '["b"]'
    with pytest.raises(errors.MessageNotFound, match="the message is gone"):
        ack_results(queue(), items, [AckFound.GONE, AckFound.ACKED], ignore_not_found=False)
    assert ack_results(queue(), items, [AckFound.GONE, AckFound.ACKED], ignore_not_found=True) == [
        AckResult(("a",), False), AckResult(("b",), True)]
    # The first message that cannot be acked decides, in the request's order.
    with pytest.raises(errors.MessageNotFound):
        ack_results(queue(), items, [AckFound.GONE, AckFound.LEASE_MOVED], ignore_not_found=False)


def test_a_new_queue_must_agree_with_the_catalog_as_found():
    queues.check_creatable(queue(), facts(queues=9), max_queues=10)
    with pytest.raises(errors.LimitExceeded, match="has 10 queues"):
        queues.check_creatable(queue(), facts(queues=10, name_taken=True), max_queues=10)  # the limit first
    with pytest.raises(errors.QueueAlreadyExists, match="named 'tasks' already exists"):
        queues.check_creatable(queue(), facts(name_taken=True), max_queues=10)
    with pytest.raises(errors.QueueAlreadyExists, match="'spanq_dt_tasks' already exists"):
        queues.check_creatable(queue(), facts(index_name_taken="spanq_dt_tasks"), max_queues=10)
    child = queue(parent_table="users")
    with pytest.raises(errors.InvalidArgument, match="does not exist in schema public"):
        queues.check_creatable(child, facts(), max_queues=10)
    with pytest.raises(errors.InvalidArgument, match="has 2 primary-key columns"):
        queues.check_creatable(child, facts(parent_key_width=2), max_queues=10)
    queues.check_creatable(child, facts(parent_key_width=1), max_queues=10)
    dead = queue(max_delivery_attempts=3, dead_letter_queue="graveyard")
    with pytest.raises(errors.InvalidArgument, match="dead-letter queue 'graveyard' does not exist"):
        queues.check_creatable(dead, facts(), max_queues=10)
    with pytest.raises(errors.InvalidArgument, match="same key columns and payload type"):
        queues.check_creatable(dead, facts(dead_letter_queue=queue("graveyard", payload_type=ColumnType.BYTES)),
                               max_queues=10)
    queues.check_creatable(dead, facts(dead_letter_queue=queue("graveyard")), max_queues=10)


def test_a_queue_others_depend_on_is_not_dropped():
    queues.check_droppable("tasks", QueueDependents([], []))
    with pytest.raises(errors.FailedPrecondition, match=r"parent table of queue\(s\) 'a', 'b'") as parent:
        queues.check_droppable("tasks", QueueDependents(["a", "b"], ["c"]))
    assert parent.value.metadata == {"queue": "tasks", "child": "a"}
    with pytest.raises(errors.FailedPrecondition, match=r"dead-letter queue of queue\(s\) 'c'"):
        queues.check_droppable("tasks", QueueDependents([], ["c"]))


class FakeTransaction:
    """Records how a transaction ended, as the store's would end it."""

    def __init__(self) -> None:
        self.ended: str | None = None

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[str]:
        try:
            yield "handle"
        except BaseException:
            self.ended = "rollback"
            raise
        self.ended = "commit"


@pytest.mark.parametrize("fault, ended, error", [
    (None, "commit", None),
    ("unknown_commit_before", "rollback", errors.CommitOutcomeUnknown),
    ("unavailable_before", "rollback", errors.StoreUnavailable),
    ("unknown_commit_after", "commit", errors.CommitOutcomeUnknown),
])
async def test_a_commit_fault_strikes_before_the_commit_or_loses_its_answer(fault, ended, error):
    faults = FaultInjector({fault: 1.0} if fault else {})
    transaction = FakeTransaction()
    with pytest.raises(error) if error else contextlib.nullcontext():
        async with faults.committing(transaction()) as handle:
            assert handle == "handle"
    assert transaction.ended == ended
    assert sum(faults.injected.values()) == (1 if fault else 0)


async def test_no_fault_is_drawn_for_a_transaction_that_fails_by_itself():
    faults = FaultInjector({"unknown_commit_after": 1.0})
    transaction = FakeTransaction()
    with pytest.raises(errors.LeaseNotHeld):
        async with faults.committing(transaction()):
            raise errors.LeaseNotHeld("x")
    assert transaction.ended == "rollback" and faults.injected["unknown_commit_after"] == 0
    with pytest.raises(errors.CommitOutcomeUnknown):
        faults.after_commit(faults.before_commit(), wrote=True)
    faults.after_commit(faults.before_commit(), wrote=False)  # nothing written: no answer to lose
    assert faults.injected["unknown_commit_after"] == 1


def test_two_requests_are_the_same_whatever_their_request_ids():
    first, retry = Request.of("r1", "Send", b"fields"), Request.of("r2", "Send", b"fields")
    assert first.fingerprint == retry.fingerprint and not first.fresh
    assert Request.of("r1", "Ack", b"fields").fingerprint != first.fingerprint
    made_up = Request.of("", "Send", b"fields")
    assert made_up.fresh and len(made_up.request_id) == 36
    with pytest.raises(errors.InvalidArgument, match="1 to 128 printable characters"):
        Request.of("x" * 129, "Send", b"fields")
    with pytest.raises(errors.InvalidArgument):
        Request.of("bad\nid", "Send", b"fields")
