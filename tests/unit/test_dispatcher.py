"""The SDK's dispatcher alone: no server, recording ack and renew functions that a test can
hold (an asyncio.Event) to pile work up behind a batch in flight."""

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from spanq._dispatcher import Dispatcher, Request, _unique_key_groups
from spanq._errors import Closed, LeaseLost, Unavailable
from spanq._requests import MAX_ITEMS_PER_REQUEST
from spanq._types import Message, RenewedLease

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


def message(key: Any) -> Message:
    return Message(queue="q", key=(key,), payload=b"", lease_token=f"t{key}", lease_expiration_time=EPOCH,
                   deliver_time=EPOCH, enqueue_time=EPOCH, delivery_attempt=1)


class Server:
    """Ack and RenewLease as the dispatcher calls them: each call recorded; ``gate`` holds them."""

    def __init__(self) -> None:
        self.acks: list[list[Any]] = []
        self.renewals: list[tuple[list[Any], timedelta, str | None]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_flight = asyncio.Event()
        self.fail_when: Any = None  # keys -> an exception to raise, or None

    async def ack(self, messages: Sequence[Message]) -> list[bool]:
        keys = [m.key[0] for m in messages]
        self.acks.append(keys)
        self.in_flight.set()
        await self.gate.wait()
        error = self.fail_when(keys) if self.fail_when else None
        if error is not None:
            raise error
        return [True] * len(messages)

    async def renew(self, messages: Sequence[Message], duration: timedelta, reason: str | None) -> list[RenewedLease]:
        self.renewals.append(([m.key[0] for m in messages], duration, reason))
        await self.gate.wait()
        return [RenewedLease(m.lease_token, f"{m.lease_token}+" if duration else None, None) for m in messages]


class Outcomes(dict[Any, tuple[str, Any]]):
    """on_done's record by key: ("ok", result) or ("error", exception)."""

    def __call__(self, request: Request, error: BaseException | None, result: Any) -> None:
        self[request.message.key[0]] = ("error", error) if error is not None else ("ok", result)


@pytest.fixture
async def setup() -> Any:
    server, outcomes = Server(), Outcomes()
    dispatcher = Dispatcher(name="q", loop=asyncio.get_running_loop(), lock=asyncio.Lock(), ack=server.ack,
                            renew=server.renew, on_done=outcomes)
    dispatcher.start()
    yield dispatcher, server, outcomes
    server.gate.set()
    await dispatcher.stop()


async def test_acks_that_pile_up_behind_a_batch_in_flight_go_out_as_one(setup):
    dispatcher, server, outcomes = setup
    server.gate.clear()
    dispatcher.put_nowait(Request("ack", message(0), None))
    await server.in_flight.wait()  # the first Ack is in flight, held
    for key in range(1, 6):
        dispatcher.put_nowait(Request("ack", message(key), None))
    server.gate.set()
    await dispatcher.flush()
    assert server.acks == [[0], [1, 2, 3, 4, 5]]
    assert outcomes == {k: ("ok", True) for k in range(6)}


async def test_nacks_go_out_per_reason_as_zero_length_renewals_and_renewals_per_duration(setup):
    dispatcher, server, outcomes = setup
    server.gate.clear()
    dispatcher.put_nowait(Request("ack", message("held"), None))
    await server.in_flight.wait()
    dispatcher.put_nowait(Request("nack", message(1), None, reason="boom"))
    dispatcher.put_nowait(Request("nack", message(2), None, reason="boom"))
    dispatcher.put_nowait(Request("nack", message(3), None, reason=None))
    dispatcher.put_nowait(Request("renew", message(4), None, timedelta(seconds=30)))
    dispatcher.put_nowait(Request("renew", message(5), None, timedelta(seconds=60)))
    server.gate.set()
    await dispatcher.flush()
    assert sorted(server.renewals, key=repr) == sorted([
        ([1, 2], timedelta(0), "boom"), ([3], timedelta(0), None),
        ([4], timedelta(seconds=30), None), ([5], timedelta(seconds=60), None)], key=repr)
    assert outcomes[4][1].new_lease_token == "t4+" and outcomes[1][1].new_lease_token is None


async def ack_1_2_3_behind_one_in_flight(dispatcher, server) -> None:
    """Acks 1, 2 and 3 while an ack of "first" is in flight, so that they go as one batch; then flushes."""
    server.gate.clear()
    dispatcher.put_nowait(Request("ack", message("first"), None))
    await server.in_flight.wait()
    for key in (1, 2, 3):
        dispatcher.put_nowait(Request("ack", message(key), None))
    server.gate.set()
    await dispatcher.flush()

async def test_a_batch_that_fails_for_one_message_is_retried_message_by_message(setup):
    dispatcher, server, outcomes = setup
    server.fail_when = lambda keys: LeaseLost("not held") if 2 in keys else None
    await ack_1_2_3_behind_one_in_flight(dispatcher, server)
    assert server.acks == [["first"], [1, 2, 3], [1], [2], [3]]
    assert outcomes[1] == ("ok", True) and outcomes[3] == ("ok", True)
    assert outcomes[2][0] == "error" and isinstance(outcomes[2][1], LeaseLost)


async def test_a_batch_wide_error_is_not_retried_message_by_message(setup):
    dispatcher, server, outcomes = setup
    server.fail_when = lambda keys: Unavailable("the server went away")
    await ack_1_2_3_behind_one_in_flight(dispatcher, server)
    assert server.acks == [["first"], [1, 2, 3]]  # one message cannot be to blame
    assert all(kind == "error" and isinstance(e, Unavailable) for kind, e in outcomes.values())


async def test_stop_fails_what_is_queued_and_refuses_more_with_closed(setup):
    dispatcher, server, outcomes = setup
    server.gate.clear()
    dispatcher.put_nowait(Request("ack", message(0), None))
    await server.in_flight.wait()
    dispatcher.put_nowait(Request("ack", message(1), None))
    await dispatcher.stop()
    await dispatcher.stop()  # idempotent
    dispatcher.put_nowait(Request("ack", message(2), None))
    assert set(outcomes) == {0, 1, 2}
    assert all(kind == "error" and isinstance(e, Closed) for kind, e in outcomes.values())


def test_acks_of_one_key_never_share_a_request_and_requests_stay_under_the_item_limit():
    requests = [Request("ack", message(k), None) for k in ["a", "b", "a", "c", "a"]]
    groups = [[r.message.key[0] for r in g] for g in _unique_key_groups(requests)]
    assert groups == [["a", "b", "c"], ["a"], ["a"]]
    many = [Request("ack", message(k), None) for k in range(MAX_ITEMS_PER_REQUEST + 1)]
    assert [len(g) for g in _unique_key_groups(many)] == [MAX_ITEMS_PER_REQUEST, 1]
