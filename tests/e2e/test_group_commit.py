"""Group commit: Sends that wait while another commits share one transaction,
and each still gets its own answer."""

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import grpc
import psycopg
import pytest

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.domain.group_commit import GroupCommitter
from spanq_server.server import Running, start

from spanq_server.domain.testsignals import commits_draining

from ..helpers import create_queue, error_of, lock_waiters, outcome, send, text_message, until


@pytest.fixture
async def one_group(server_config, clock) -> AsyncIterator[Running]:
    """A server that commits one group at a time, so that Sends arriving meanwhile must wait."""
    running = await start(dataclasses.replace(server_config, commit_groups_in_flight=1), clock=clock)
    yield running
    await running.stop(0)


@pytest.fixture
async def group_stub(one_group: Running) -> AsyncIterator[queue_pb2_grpc.QueueServiceStub]:
    async with grpc.aio.insecure_channel(one_group.target) as channel:
        yield queue_pb2_grpc.QueueServiceStub(channel)


async def held_group(database_url: str, stub, queue: str) -> tuple[psycopg.AsyncConnection, asyncio.Future]:
    """Starts a group that cannot finish: its request_id is held by an open transaction
    here, so its ledger claim waits. Release it with ``blocker.rollback()``."""
    blocker = await psycopg.AsyncConnection.connect(database_url)
    await blocker.execute(
        "INSERT INTO spanq.commit_ledger (request_id, fingerprint, response) VALUES ('blocker', '', '')"
    )
    first = asyncio.ensure_future(send(stub, queue, text_message("first", "first"), request_id="blocker"))
    return blocker, first


async def until_waiting(committer: GroupCommitter, n: int) -> None:
    """Until n requests wait behind the groups the committer is running."""
    await until(lambda: committer.waiting >= n, f"{n} requests waiting for a group", 10, 0.01)


def xmins(sql, queue: str) -> dict[str, int]:
    """Each message's inserting transaction."""
    return {k: int(x) for k, x in sql.execute(f"SELECT id, xmin::text FROM {queue}").fetchall()}


async def test_sends_waiting_behind_a_commit_share_one_transaction(group_stub, one_group, sql, database_url):
    await create_queue(group_stub, "q", payload_type=queue_pb2.STRING)
    blocker, first = await held_group(database_url, group_stub, "q")
    waiting = [asyncio.ensure_future(send(group_stub, "q", text_message(f"m{i}", f"p{i}"), request_id=f"r{i}"))
               for i in range(12)]
    await asyncio.wait_for(until_waiting(one_group.mutator.sends, 12), 10)
    assert not first.done()
    await blocker.rollback()
    await blocker.close()
    answers = await asyncio.gather(first, *waiting)
    assert [a.replayed for a in answers] == [False] * 13
    stored = xmins(sql, "q")
    assert sorted(stored) == sorted(["first"] + [f"m{i}" for i in range(12)])
    assert len({stored[f"m{i}"] for i in range(12)}) == 1, "the twelve waiting sends committed together"
    assert stored["first"] != stored["m0"]


async def test_a_duplicate_key_in_a_group_fails_only_its_own_request(group_stub, one_group, sql, database_url):
    await create_queue(group_stub, "q", payload_type=queue_pb2.STRING)
    await send(group_stub, "q", text_message("taken", "old"))
    blocker, first = await held_group(database_url, group_stub, "q")
    fine = [asyncio.ensure_future(send(group_stub, "q", text_message(f"m{i}", "new"))) for i in range(5)]
    clash = asyncio.ensure_future(error_of(send(group_stub, "q", text_message("taken", "new"))))
    twice = [asyncio.ensure_future(outcome(send(group_stub, "q", text_message("twin", f"copy {i}"))))
             for i in range(2)]
    await asyncio.wait_for(until_waiting(one_group.mutator.sends, 8), 10)
    await blocker.rollback()
    await blocker.close()
    await first
    await asyncio.gather(*fine)
    code, message, _ = await clash
    assert code == grpc.StatusCode.ALREADY_EXISTS and "taken" in message
    # Two sends of one new key in one group: one stores it, the other is told it exists.
    outcomes = [await t for t in twice]
    assert sorted(map(str, outcomes)) == ["ALREADY_EXISTS", "OK"]
    payloads = dict(sql.execute("SELECT id, payload FROM q").fetchall())
    assert payloads["taken"] == "old" and payloads["twin"] == f"copy {outcomes.index('OK')}"
    assert all(payloads[f"m{i}"] == "new" for i in range(5))


async def test_a_replay_waiting_beside_its_original_applies_once(group_stub, one_group, sql, database_url):
    """Two calls with one request_id wait for the same group: they go in two groups
    one after the other, and the second answers from the ledger."""
    await create_queue(group_stub, "q", payload_type=queue_pb2.STRING)
    blocker, first = await held_group(database_url, group_stub, "q")
    calls = [asyncio.ensure_future(send(group_stub, "q", text_message(None, "once"), request_id="same"))
             for _ in range(2)]
    await asyncio.wait_for(until_waiting(one_group.mutator.sends, 2), 10)
    await blocker.rollback()
    await blocker.close()
    await first
    answers = await asyncio.gather(*calls)
    assert sorted(a.replayed for a in answers) == [False, True]
    assert list(answers[0].keys) == list(answers[1].keys)
    assert sql.execute("SELECT count(*) FROM q WHERE payload = 'once'").fetchone()[0] == 1


async def test_sends_to_several_queues_in_one_group(group_stub, one_group, sql, database_url):
    for name in ("a", "b"):
        await create_queue(group_stub, name, payload_type=queue_pb2.STRING)
    blocker, first = await held_group(database_url, group_stub, "a")
    calls = [asyncio.ensure_future(send(group_stub, name, text_message(f"{name}{i}", "x")))
             for i in range(3) for name in ("a", "b")]
    await asyncio.wait_for(until_waiting(one_group.mutator.sends, 6), 10)
    await blocker.rollback()
    await blocker.close()
    await asyncio.gather(first, *calls)
    together = set(xmins(sql, "b").values()) | {x for k, x in xmins(sql, "a").items() if k != "first"}
    assert len(together) == 1


async def test_shutdown_finishes_a_group_already_committing(server_config, clock, sql, database_url):
    running = await start(dataclasses.replace(server_config, commit_groups_in_flight=1), clock=clock)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "q", payload_type=queue_pb2.STRING)
            blocker, first = await held_group(database_url, stub, "q")
            await until(lambda: lock_waiters(sql), "the group to wait on the held request_id")
            with commits_draining.listen() as draining:
                stopping = asyncio.ensure_future(running.stop(0))  # no grace for calls: the caller is cut off
                await draining.wait(match=lambda kind: kind == "send", what="stop to wait for the send groups")
            assert not stopping.done(), "stop waits for the committing group"
            await blocker.rollback()
            await blocker.close()
            await stopping
            first.cancel()
    finally:
        await running.stop(0)
    assert sql.execute("SELECT id FROM q").fetchall() == [("first",)]
