"""Group commit of Ack: acks that wait while another commits share one statement,
and each still gets its own answer, its own ledger entry and its own effect:
an Ack request is all-or-nothing, whatever the others in its group do."""

import asyncio

import grpc
import psycopg

from spanq_proto.v1 import queue_pb2

from ..helpers import create_queue, error_of, lock_waiters, outcome, receive_some, renew, send, text_message, until
from .test_group_commit import group_stub, one_group, until_waiting  # noqa: F401  (fixtures)


def ack_request(*messages: queue_pb2.ReceivedMessage, request_id: str, token: dict[str, str] | None = None,
                **fields) -> queue_pb2.AckRequest:
    """An Ack of messages by key and lease token (``token`` overrides a message's, by key)."""
    token = token or {}
    return queue_pb2.AckRequest(queue="q", request_id=request_id, **fields, acks=[
        queue_pb2.AckMessage(key=m.key, lease_token=token.get(m.key.values[0].string_value, m.lease_token))
        for m in messages])


async def leased(stub, *keys: str) -> dict[str, queue_pb2.ReceivedMessage]:
    """Sends a message per key and receives them all: their leases, by key."""
    await send(stub, "q", *(text_message(k, f"payload {k}") for k in keys))
    got = await receive_some(stub, "q", len(keys), max_batch_size=len(keys))
    assert len(got) == len(keys)
    return {m.key.values[0].string_value: m for m in got}


async def held_ack(database_url: str, stub, message: queue_pb2.ReceivedMessage
                   ) -> tuple[psycopg.AsyncConnection, asyncio.Future]:
    """Starts an ack group that cannot finish: its request_id is held by an open
    transaction here, so its ledger claim waits. Release it with ``blocker.rollback()``."""
    blocker = await psycopg.AsyncConnection.connect(database_url)
    await blocker.execute(
        "INSERT INTO spanq.commit_ledger (request_id, fingerprint, response) VALUES ('blocker', '', '')"
    )
    first = asyncio.ensure_future(stub.Ack(ack_request(message, request_id="blocker")))
    return blocker, first


async def until_blocked(sql) -> None:
    """Until the held group's statement waits on the held request_id."""
    await until(lambda: lock_waiters(sql), "the group to wait on the held request_id")


def keys_left(sql) -> list[str]:
    return [k for (k,) in sql.execute("SELECT id FROM q ORDER BY id").fetchall()]


def ledger(sql) -> dict[str, int]:
    """Committed request_ids and the transaction that wrote each."""
    return {r: int(x) for r, x in sql.execute("SELECT request_id, xmin::text FROM spanq.commit_ledger").fetchall()}


async def test_acks_waiting_behind_a_commit_share_one_statement(group_stub, one_group, sql, database_url):
    await create_queue(group_stub, "q", payload_type=queue_pb2.STRING)
    messages = await leased(group_stub, "first", *(f"m{i}" for i in range(12)))
    blocker, first = await held_ack(database_url, group_stub, messages["first"])
    await asyncio.wait_for(until_blocked(sql), 10)
    before = (one_group.mutator.acks.statements, one_group.mutator.acks.requests)
    waiting = [asyncio.ensure_future(group_stub.Ack(ack_request(messages[f"m{i}"], request_id=f"r{i}")))
               for i in range(12)]
    await asyncio.wait_for(until_waiting(one_group.mutator.acks, 12), 10)
    assert not first.done()
    await blocker.rollback()
    await blocker.close()
    answers = await asyncio.gather(first, *waiting)
    assert [(a.replayed, [r.acked for r in a.results]) for a in answers] == [(False, [True])] * 13
    assert keys_left(sql) == []
    committed = ledger(sql)
    assert {"blocker", *(f"r{i}" for i in range(12))} <= committed.keys()
    assert len({committed[f"r{i}"] for i in range(12)}) == 1, "the twelve waiting acks committed together"
    assert committed["blocker"] != committed["r0"]
    statements, requests = one_group.mutator.acks.statements, one_group.mutator.acks.requests
    assert (statements - before[0], requests - before[1]) == (1, 12)


async def test_a_rejected_ack_in_a_group_fails_alone_and_deletes_nothing(group_stub, one_group, sql, database_url):
    """Each kind of rejection beside acks that succeed, in one group: the stale token's
    request is FAILED_PRECONDITION, the gone message's OUT_OF_RANGE, and a request that
    acks a good message with a stale one deletes neither (all-or-nothing)."""
    await create_queue(group_stub, "q", payload_type=queue_pb2.STRING)
    messages = await leased(group_stub, "first", "fine1", "fine2", "stale", "good", "stale2", "kept", "partial")
    stale_tokens = {k: messages[k].lease_token for k in ("stale", "stale2")}
    renewed = await renew(group_stub, "q", *stale_tokens.values(), seconds=30)
    assert all(r.new_lease_token for r in renewed.leases)  # the old tokens are stale now
    await send(group_stub, "q", text_message("gone", "x"))
    [gone] = await receive_some(group_stub, "q", 1)
    await group_stub.Ack(ack_request(gone, request_id="gone-first"))
    blocker, first = await held_ack(database_url, group_stub, messages["first"])
    await asyncio.wait_for(until_blocked(sql), 10)
    calls = {
        "fine1": group_stub.Ack(ack_request(messages["fine1"], request_id="fine1")),
        "stale": group_stub.Ack(ack_request(messages["stale"], request_id="stale", token=stale_tokens)),
        "gone": group_stub.Ack(ack_request(gone, request_id="gone")),
        "mixed": group_stub.Ack(ack_request(messages["good"], messages["stale2"], request_id="mixed",
                                            token=stale_tokens)),
        "partial": group_stub.Ack(ack_request(messages["partial"], gone, request_id="partial",
                                              ignore_not_found=True)),
        "fine2": group_stub.Ack(ack_request(messages["fine2"], request_id="fine2")),
    }
    tasks = {name: asyncio.ensure_future(outcome(call)) for name, call in calls.items()}
    await asyncio.wait_for(until_waiting(one_group.mutator.acks, len(calls)), 10)
    await blocker.rollback()
    await blocker.close()
    await first
    outcomes = {name: await task for name, task in tasks.items()}
    assert outcomes == {"fine1": "OK", "stale": "FAILED_PRECONDITION", "gone": "OUT_OF_RANGE",
                        "mixed": "FAILED_PRECONDITION", "partial": "OK", "fine2": "OK"}
    partial = await calls["partial"]
    assert [r.acked for r in partial.results] == [True, False] and not partial.replayed
    assert keys_left(sql) == ["good", "kept", "stale", "stale2"]
    committed = ledger(sql).keys()
    assert {"blocker", "fine1", "fine2", "gone-first", "partial"} <= committed
    assert not {"stale", "gone", "mixed"} & committed, "a rejected request leaves no ledger entry: its retry runs again"
    code, message, info = await error_of(group_stub.Ack(ack_request(messages["stale"], request_id="stale",
                                                                    token=stale_tokens)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "stale" in message


async def test_grouped_acks_replay_their_recorded_responses(group_stub, one_group, sql, database_url):
    """Two calls with one request_id wait for the same group: they go in two groups one
    after the other, and the second answers from the ledger; so do later replays; the
    same request_id with another request is INVALID_ARGUMENT."""
    await create_queue(group_stub, "q", payload_type=queue_pb2.STRING)
    messages = await leased(group_stub, "first", "a", "b", "c")
    blocker, first = await held_ack(database_url, group_stub, messages["first"])
    await asyncio.wait_for(until_blocked(sql), 10)
    twice = [asyncio.ensure_future(group_stub.Ack(ack_request(messages["a"], messages["b"], request_id="same")))
             for _ in range(2)]
    other = asyncio.ensure_future(group_stub.Ack(ack_request(messages["c"], request_id="other")))
    await asyncio.wait_for(until_waiting(one_group.mutator.acks, 3), 10)
    await blocker.rollback()
    await blocker.close()
    await first
    answers = await asyncio.gather(*twice, other)
    assert sorted(a.replayed for a in answers[:2]) == [False, True]
    assert answers[0].results == answers[1].results and all(r.acked for r in answers[0].results)
    assert keys_left(sql) == []
    again = await group_stub.Ack(ack_request(messages["c"], request_id="other"))
    assert again.replayed and [r.acked for r in again.results] == [True]
    code, _, _ = await error_of(group_stub.Ack(ack_request(messages["a"], request_id="other")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_acks_of_one_message_in_one_group_ack_it_once(group_stub, one_group, sql, database_url):
    """Two requests that ack the same message never share a statement: one acks it, the
    other finds it gone (OUT_OF_RANGE), as two acks committed one after the other."""
    await create_queue(group_stub, "q", payload_type=queue_pb2.STRING)
    messages = await leased(group_stub, "first", "twin")
    blocker, first = await held_ack(database_url, group_stub, messages["first"])
    await asyncio.wait_for(until_blocked(sql), 10)
    calls = [asyncio.ensure_future(outcome(group_stub.Ack(ack_request(messages["twin"], request_id=f"t{i}"))))
             for i in range(2)]
    await asyncio.wait_for(until_waiting(one_group.mutator.acks, 2), 10)
    await blocker.rollback()
    await blocker.close()
    await first
    assert sorted([await c for c in calls]) == ["OK", "OUT_OF_RANGE"]
    assert keys_left(sql) == []


async def test_an_unknown_commit_cuts_a_group_per_request(group_stub, one_group, sql, database_url):
    """A group whose commit's outcome is lost (an injected fault): the requests it wrote
    get UNKNOWN_COMMIT, each with its own request_id, and their replays find them
    committed; the requests it did not write (a stale token, a replay) get their own
    answers, unaffected."""
    await create_queue(group_stub, "q", payload_type=queue_pb2.STRING)
    messages = await leased(group_stub, "first", "a", "b", "stale", "done")
    stale_token = messages["stale"].lease_token
    await renew(group_stub, "q", stale_token, seconds=30)
    await group_stub.Ack(ack_request(messages["done"], request_id="done"))
    blocker, first = await held_ack(database_url, group_stub, messages["first"])
    await asyncio.wait_for(until_blocked(sql), 10)
    requests = {
        "a": ack_request(messages["a"], request_id="ra"),
        "b": ack_request(messages["b"], request_id="rb"),
        "stale": ack_request(messages["stale"], request_id="rstale"),
        "done": ack_request(messages["done"], request_id="done"),
    }
    calls = {name: asyncio.ensure_future(error_of(group_stub.Ack(r))) if name in ("a", "b", "stale")
             else asyncio.ensure_future(group_stub.Ack(r)) for name, r in requests.items()}
    await asyncio.wait_for(until_waiting(one_group.mutator.acks, 4), 10)
    faults = one_group.mutator.faults
    injected = faults.injected["unknown_commit_after"]
    faults.probabilities["unknown_commit_after"] = 1.0
    await blocker.rollback()
    await blocker.close()
    await first  # its group had drawn no fault before it waited
    for name in ("a", "b"):
        code, _, info = await calls[name]
        assert code == grpc.StatusCode.UNKNOWN
        assert info["reason"] == "UNKNOWN_COMMIT" and info["request_id"] == f"r{name}"
    code, _, _ = await calls["stale"]
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert (await calls["done"]).replayed
    assert faults.injected["unknown_commit_after"] == injected + 1, "one group, one fault"
    faults.probabilities.clear()
    assert keys_left(sql) == ["stale"]
    for name in ("a", "b"):
        replay = await group_stub.Ack(requests[name])
        assert replay.replayed and [r.acked for r in replay.results] == [True]


async def test_acks_to_several_queues_in_one_group(group_stub, one_group, sql, database_url):
    """A group that spans queues is one transaction: one statement per queue."""
    await create_queue(group_stub, "q", payload_type=queue_pb2.STRING)
    await create_queue(group_stub, "p", payload_type=queue_pb2.STRING)
    messages = await leased(group_stub, "first", "q1", "q2")
    await send(group_stub, "p", text_message("p1", "x"), text_message("p2", "x"))
    in_p = await receive_some(group_stub, "p", 2, max_batch_size=2)
    blocker, first = await held_ack(database_url, group_stub, messages["first"])
    await asyncio.wait_for(until_blocked(sql), 10)
    calls = [group_stub.Ack(ack_request(messages[k], request_id=f"r-{k}")) for k in ("q1", "q2")]
    calls += [group_stub.Ack(queue_pb2.AckRequest(queue="p", request_id=f"r-p{i}", acks=[
        queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token)])) for i, m in enumerate(in_p)]
    tasks = [asyncio.ensure_future(c) for c in calls]
    await asyncio.wait_for(until_waiting(one_group.mutator.acks, 4), 10)
    await blocker.rollback()
    await blocker.close()
    await first
    assert [a.replayed for a in await asyncio.gather(*tasks)] == [False] * 4
    assert keys_left(sql) == [] and sql.execute("SELECT count(*) FROM p").fetchone()[0] == 0
    committed = ledger(sql)
    assert len({committed[r] for r in ("r-q1", "r-q2", "r-p0", "r-p1")}) == 1
