"""The SDK's leaser alone: no server, a recording renew function, leases of a fraction of a
second so that renewals come due within the test (each wait is bounded by a signal: the renew
function or on_lost records, and the test awaits that record)."""

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest

from spanq import _leaser
from spanq._errors import Unavailable
from spanq._leaser import Leaser
from spanq._types import Message, RenewedLease

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


def message(key: int, token: str | None = None) -> Message:
    return Message(queue="q", key=(key,), payload=b"", lease_token=token or f"t{key}",
                   lease_expiration_time=EPOCH, deliver_time=EPOCH, enqueue_time=EPOCH, delivery_attempt=1)


class Renewals:
    """A renew function that records each call and answers with new tokens (or none, or an error)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], timedelta]] = []
        self.refuse: set[str] = set()  # tokens answered with no new token (the lease is gone)
        self.failures = 0  # calls to fail with Unavailable first
        self.called = asyncio.Event()

    async def __call__(self, messages: Sequence[Message], duration: timedelta) -> list[RenewedLease]:
        tokens = [m.lease_token for m in messages]
        self.calls.append((tokens, duration))
        self.called.set()
        if self.failures:
            self.failures -= 1
            raise Unavailable("the server went away")
        return [RenewedLease(t, None if t in self.refuse else f"{t}+", EPOCH + duration) for t in tokens]

    async def call(self, n: int, timeout: float = 5) -> tuple[list[str], timedelta]:
        """The n-th call (from 0), once it was made."""
        while len(self.calls) <= n:
            self.called.clear()
            await asyncio.wait_for(self.called.wait(), timeout)
        return self.calls[n]


class Lost(list[tuple[Message, str]]):
    """on_lost's record: (message, why) each time, and an event to await the next."""

    def __init__(self) -> None:
        super().__init__()
        self.event = asyncio.Event()

    def __call__(self, message: Message, why: str) -> None:
        self.append((message, why))
        self.event.set()

    async def first(self, timeout: float = 5) -> tuple[Message, str]:
        await asyncio.wait_for(self.event.wait(), timeout)
        return self[0]


def leaser(renew: Renewals, lost: Lost, *, lease: float = 0.2, extension: float | None = None,
           max_lease: float = 60) -> Leaser:
    return Leaser(name="q", renew=renew, lock=asyncio.Lock(), lease_duration=timedelta(seconds=lease),
                  extension=timedelta(seconds=extension or lease), max_lease_duration=timedelta(seconds=max_lease),
                  on_lost=lost)


async def test_leases_due_together_are_renewed_in_one_batch_and_carry_their_new_tokens():
    renew, lost = Renewals(), Lost()
    keeper = leaser(renew, lost, lease=0.4)
    a, b = message(1), message(2)
    keeper.add(a)
    keeper.add(b)
    keeper.start()
    try:
        tokens, duration = await renew.call(0)
        assert sorted(tokens) == ["t1", "t2"] and duration == timedelta(seconds=0.4)  # one RenewLease for both
        assert (a.lease_token, b.lease_token) == ("t1+", "t2+")  # the renewed token supersedes the old one
        assert len(keeper) == 2 and lost == []
        tokens, _ = await renew.call(1)  # and again, from the new tokens
        assert sorted(tokens) == ["t1+", "t2+"]
    finally:
        await keeper.stop()


async def test_a_renewal_comes_about_halfway_through_the_lease():
    renew, lost = Renewals(), Lost()
    keeper = leaser(renew, lost, lease=1.0)
    keeper.add(message(1))
    loop = asyncio.get_running_loop()
    started = loop.time()
    keeper.start()
    try:
        await renew.call(0)
        # RENEW_AT of the lease, less the COALESCE horizon; never at once, never after the lease.
        waited = loop.time() - started
        assert (_leaser.RENEW_AT[0] - _leaser.COALESCE) - 0.05 <= waited < 1.0, waited
    finally:
        await keeper.stop()


async def test_a_lease_the_server_would_not_renew_is_lost_and_no_longer_renewed():
    renew, lost = Renewals(), Lost()
    renew.refuse = {"t1"}
    keeper = leaser(renew, lost)
    gone, kept = message(1), message(2)
    keeper.add(gone)
    keeper.add(kept)
    keeper.start()
    try:
        await renew.call(0)
        assert [(m, "could not be renewed" in why) for m, why in lost] == [(gone, True)]
        assert gone not in keeper and kept in keeper
        tokens, _ = await renew.call(1)
        assert tokens == ["t2+"]
    finally:
        await keeper.stop()


async def test_a_message_held_past_max_lease_duration_is_dropped():
    renew, lost = Renewals(), Lost()
    keeper = leaser(renew, lost, lease=0.2, max_lease=0.5)
    held = message(1)
    loop = asyncio.get_running_loop()
    added = loop.time()
    keeper.add(held)
    keeper.start()
    try:
        gone, why = await lost.first()
        assert gone is held and "max_lease_duration" in why
        assert loop.time() - added >= 0.5
        assert renew.calls, "renewed while under max_lease_duration"
        assert held not in keeper
    finally:
        await keeper.stop()


async def test_a_failed_renewal_is_retried_soon_and_loses_nothing():
    renew, lost = Renewals(), Lost()
    renew.failures = 1
    keeper = leaser(renew, lost, lease=2.0)
    held = message(1)
    keeper.add(held)
    keeper.start()
    loop = asyncio.get_running_loop()
    try:
        await renew.call(0)  # fails
        failed_at = loop.time()
        tokens, _ = await renew.call(1)
        # Retried within RETRY_SOON of the lease (0.2 s), not at the next half (0.9 s or later).
        assert loop.time() - failed_at < 0.7
        assert tokens == ["t1"] and held.lease_token == "t1+" and lost == []
    finally:
        await keeper.stop()


async def test_a_removed_message_is_not_renewed():
    renew, lost = Renewals(), Lost()
    keeper = leaser(renew, lost)
    acked, held = message(1), message(2)
    keeper.add(acked)
    keeper.add(held)
    keeper.remove(acked)
    keeper.remove(acked)  # twice: nothing happens
    keeper.start()
    try:
        tokens, _ = await renew.call(0)
        assert tokens == ["t2"] and acked.lease_token == "t1"
    finally:
        await keeper.stop()


async def test_a_renewal_made_elsewhere_pushes_the_next_one_back():
    renew, lost = Renewals(), Lost()
    keeper = leaser(renew, lost, lease=0.2)
    held = message(1)
    keeper.add(held)
    loop = asyncio.get_running_loop()
    keeper.extended(held, timedelta(seconds=2), loop.time())  # Message.renew(2) just now
    keeper.start()
    try:
        with pytest.raises(asyncio.TimeoutError):
            await renew.call(0, timeout=0.5)  # the 0.2 s lease would have been renewed by now
    finally:
        await keeper.stop()


async def test_stop_is_idempotent_and_ends_renewals():
    renew, lost = Renewals(), Lost()
    keeper = leaser(renew, lost)
    keeper.add(message(1))
    keeper.start()
    keeper.start()  # one task
    await keeper.stop()
    await keeper.stop()
    with pytest.raises(asyncio.TimeoutError):
        await renew.call(0, timeout=0.3)
