"""Exactly-once commits: request ids, the commit ledger, UNKNOWN_COMMIT and the Commit RPC."""

import asyncio
import dataclasses
import uuid
from datetime import timedelta

import grpc
import pytest

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start

from ..helpers import create_queue, error_of, key, lock_waiters, plain, receive_some, send, text_message, until
from ..pgproxy import GROUP_STATEMENT, PgProxy


def rows(sql, queue: str) -> list[tuple]:
    return sql.execute(f"SELECT id, payload FROM {queue} ORDER BY id").fetchall()


async def test_replay_after_commit_returns_the_recorded_response_and_changes_nothing(stub, sql):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    rid = str(uuid.uuid4())
    first = await send(stub, "q", text_message(None, "once"), request_id=rid)
    again = await send(stub, "q", text_message(None, "once"), request_id=rid)
    assert not first.replayed and again.replayed
    assert plain(again.keys[0]) == plain(first.keys[0])  # the generated key is the recorded one
    assert len(rows(sql, "q")) == 1


async def test_same_request_id_with_another_request_is_invalid_argument(stub, sql):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    rid = str(uuid.uuid4())
    await send(stub, "q", text_message("a", "one"), request_id=rid)
    code, message, info = await error_of(send(stub, "q", text_message("b", "two"), request_id=rid))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "different request" in message
    assert info["request_id"] == rid
    assert [r[0] for r in rows(sql, "q")] == ["a"]


async def test_ack_replay_after_success_is_not_an_error(stub, sql):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", text_message("a", "x"))
    request = queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=key("a"))], request_id="ack-1")
    first = await stub.Ack(request)
    second = await stub.Ack(request)  # the message is gone, but this is a replay: same answer
    assert first.results[0].acked and second.results[0].acked and second.replayed
    # A new intent on the gone message is an error.
    code, _, _ = await error_of(stub.Ack(queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=key("a"))])))
    assert code == grpc.StatusCode.OUT_OF_RANGE


async def test_ack_replay_returns_the_recorded_partial_results(stub, sql):
    # An ack with ignore_not_found commits with some messages not acked: its ledger entry
    # must hold those results, not those of every message acked.
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    for k in ("a", "b", "c"):
        await send(stub, "q", text_message(k, "x"))
    await stub.Ack(queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=key("b"))]))
    request = queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=key(k)) for k in ("a", "b", "c", "d")],
                                   ignore_not_found=True, request_id="ack-partial")
    first = await stub.Ack(request)
    second = await stub.Ack(request)
    assert [(plain(r.key), r.acked) for r in first.results] == [(["a"], True), (["b"], False), (["c"], True),
                                                                 (["d"], False)]
    assert not first.replayed and second.replayed
    assert list(second.results) == list(first.results)
    assert rows(sql, "q") == []
    # One message, already gone: not acked, and nothing else happens.
    alone = queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=key("a"))], ignore_not_found=True,
                                 request_id="ack-alone")
    assert [r.acked for r in (await stub.Ack(alone)).results] == [False]
    assert [r.acked for r in (await stub.Ack(alone)).results] == [False]


async def start_with_faults(config, clock, spec: str):
    return await start(dataclasses.replace(config, inject_faults=spec), clock=clock)


async def test_unknown_commit_after_committed_then_replay_answers(server_config, clock, sql):
    running = await start_with_faults(server_config, clock, "unknown_commit_after=1")
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "q", payload_type=queue_pb2.STRING)
            code, message, info = await error_of(send(stub, "q", text_message("a", "x"), request_id="r-1"))
            assert code == grpc.StatusCode.UNKNOWN
            assert info["reason"] == "UNKNOWN_COMMIT" and info["request_id"] == "r-1"
            assert "replay" in message.lower()
            assert len(rows(sql, "q")) == 1  # it did commit
            running.mutator.faults.probabilities.clear()
            replay = await send(stub, "q", text_message("a", "x"), request_id="r-1")
            assert replay.replayed and plain(replay.keys[0]) == ["a"]
            assert len(rows(sql, "q")) == 1
    finally:
        await running.stop(0)


@pytest.mark.parametrize("fault, code", [("unknown_commit_before", grpc.StatusCode.UNKNOWN),
                                         ("unavailable_before", grpc.StatusCode.UNAVAILABLE)])
async def test_rolled_back_commit_then_replay_executes_once(server_config, clock, sql, fault, code):
    running = await start_with_faults(server_config, clock, f"{fault}=1")
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "q", payload_type=queue_pb2.STRING)
            got, _, info = await error_of(send(stub, "q", text_message(None, "x"), request_id="r-2"))
            assert got == code and info["request_id"] == "r-2"
            assert rows(sql, "q") == []  # rolled back
            running.mutator.faults.probabilities.clear()
            replay = await send(stub, "q", text_message(None, "x"), request_id="r-2")
            assert not replay.replayed  # the first attempt never happened: this one does it
            again = await send(stub, "q", text_message(None, "x"), request_id="r-2")
            assert again.replayed and plain(again.keys[0]) == plain(replay.keys[0])
            assert len(rows(sql, "q")) == 1
    finally:
        await running.stop(0)


async def test_replay_racing_its_original_waits_on_the_ledger_and_applies_once(stub, sql, database_url, server):
    """Two concurrent calls with one request_id: the database's unique key, not an
    application check, makes one of them the effect and the other its replay."""
    import psycopg

    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    # Hold the ledger's unique key for the id in an open transaction, so both
    # calls are certainly in flight together and queue on it.
    blocker = await psycopg.AsyncConnection.connect(database_url)
    await blocker.execute(
        "INSERT INTO spanq.commit_ledger (request_id, fingerprint, response) VALUES ('race', '', '')"
    )
    calls = [asyncio.ensure_future(send(stub, "q", text_message(None, "raced"), request_id="race"))
             for _ in range(2)]
    # Both wait: each group's statement on the key (or the second behind the first, if the
    # server commits one group at a time).
    await until(lambda: lock_waiters(sql) + server.mutator.sends.waiting == 2, "both calls to wait on the key")
    assert not any(c.done() for c in calls)
    await blocker.rollback()
    await blocker.close()
    answers = await asyncio.gather(*calls)
    assert sorted(a.replayed for a in answers) == [False, True]
    assert plain(answers[0].keys[0]) == plain(answers[1].keys[0])
    assert len(rows(sql, "q")) == 1


async def test_ledger_entries_expire_after_the_retention_window(stub, sql, server, clock):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", text_message("a", "x"), request_id="old")
    await send(stub, "q", text_message("b", "y"), request_id="fresh")
    clock.advance(timedelta(hours=23))
    await send(stub, "q", text_message("c", "z"), request_id="newer")
    clock.advance(timedelta(hours=2))
    assert await server.ledger.prune() == 2  # "old" and "fresh" are past 24 h; "newer" is not
    ids = [r[0] for r in sql.execute("SELECT request_id FROM spanq.commit_ledger").fetchall()]
    assert ids == ["newer"]
    # After the window a replay is a new request: its key exists, so it is refused.
    code, _, _ = await error_of(send(stub, "q", text_message("a", "x"), request_id="old"))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    assert (await send(stub, "q", text_message("c", "z"), request_id="newer")).replayed


async def test_commit_applies_mutations_in_order_atomically(stub, sql):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", text_message("job", "step 1"))
    [leased] = await receive_some(stub, "q", 1)
    # Spanner's long-running-work pattern: ack now and send the follow-up, with the same key, in one commit.
    reply = await stub.Commit(queue_pb2.CommitRequest(request_id="c-1", mutations=[
        queue_pb2.Mutation(ack=queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=leased.key, lease_token=leased.lease_token)])),
        queue_pb2.Mutation(send=queue_pb2.SendRequest(queue="q", messages=[text_message("job", "step 2")])),
    ]))
    assert reply.results[0].ack.results[0].acked and plain(reply.results[1].send.keys[0]) == ["job"]
    assert rows(sql, "q") == [("job", "step 2")]
    replay = await stub.Commit(queue_pb2.CommitRequest(request_id="c-1", mutations=[
        queue_pb2.Mutation(ack=queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=leased.key, lease_token=leased.lease_token)])),
        queue_pb2.Mutation(send=queue_pb2.SendRequest(queue="q", messages=[text_message("job", "step 2")])),
    ]))
    assert replay.replayed and rows(sql, "q") == [("job", "step 2")]


async def test_a_failing_mutation_rejects_the_whole_commit_with_its_index(stub, sql):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", text_message("a", "x"))
    code, message, info = await error_of(stub.Commit(queue_pb2.CommitRequest(mutations=[
        queue_pb2.Mutation(send=queue_pb2.SendRequest(queue="q", messages=[text_message("b", "y")])),
        queue_pb2.Mutation(ack=queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=key("gone"))])),
        queue_pb2.Mutation(ack=queue_pb2.AckRequest(queue="q", acks=[queue_pb2.AckMessage(key=key("a"))])),
    ])))
    assert code == grpc.StatusCode.OUT_OF_RANGE and info["mutation_index"] == "1"
    assert rows(sql, "q") == [("a", "x")]  # the send of mutation 0 was not applied either
    code, message, info = await error_of(stub.Commit(queue_pb2.CommitRequest(mutations=[
        queue_pb2.Mutation(send=queue_pb2.SendRequest(queue="q", messages=[text_message("b", "y")])),
        queue_pb2.Mutation(send=queue_pb2.SendRequest(queue="nope", messages=[text_message("b", "y")])),
    ])))
    assert code == grpc.StatusCode.NOT_FOUND and info["mutation_index"] == "1" and message.startswith("mutation 1")


@pytest.mark.parametrize("mode", ["before", "after"])
@pytest.mark.parametrize("rpc", ["send", "ack"])
async def test_connection_cut_during_commit_is_unknown_commit_and_replay_resolves_it(
        database_url, server_config, clock, sql, mode, rpc):
    """A real fault: the server's connection to PostgreSQL dies while its commit is in
    flight: the one statement that claims and stores a Send, or claims and deletes an Ack."""
    proxy = PgProxy(database_url)
    await proxy.start()
    # The whole pool opened at start: a connection opened later would COMMIT its settings
    # and take the cut meant for the Ack.
    config = dataclasses.replace(server_config, database_url=proxy.url,
                                 pool_min_size=server_config.pool_max_size)
    running = await start(config, clock=clock)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "q", payload_type=queue_pb2.STRING)
            if rpc == "send":
                proxy.cut_at_commit(mode, GROUP_STATEMENT)
                call = lambda: send(stub, "q", text_message(None, "cut"), request_id="cut-1")  # noqa: E731
                committed = 1
            else:
                await send(stub, "q", text_message("m", "cut"))
                [message] = await receive_some(stub, "q", 1)
                proxy.cut_at_commit(mode, GROUP_STATEMENT)
                call = lambda: stub.Ack(queue_pb2.AckRequest(  # noqa: E731
                    queue="q", request_id="cut-1",
                    acks=[queue_pb2.AckMessage(key=message.key, lease_token=message.lease_token)]))
                committed = 0
            code, _, info = await error_of(call())
            assert proxy.commits_cut == 1
            assert code == grpc.StatusCode.UNKNOWN and info["reason"] == "UNKNOWN_COMMIT"
            assert len(rows(sql, "q")) == (committed if mode == "after" else 1 - committed)
            # The pool recovers by itself; the replay resolves the unknown to exactly one effect.
            replay = await call()
            assert replay.replayed == (mode == "after")
            assert len(rows(sql, "q")) == committed
    finally:
        await running.stop(0)
        await proxy.stop()


async def test_readme_unknown_commit_session(server_config, clock, database_url, sql):
    """The README's UNKNOWN_COMMIT session, replayed against a server that loses every commit's answer."""
    from ..readme_session import replay

    running = await start_with_faults(server_config, clock, "unknown_commit_after=1")
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            await create_queue(queue_pb2_grpc.QueueServiceStub(channel), "payments", payload_type=queue_pb2.JSON)
        await replay("Exactly once: request ids and UNKNOWN_COMMIT", running.target, database_url)
    finally:
        await running.stop(0)
    assert sql.execute("SELECT id, payload FROM payments").fetchall() == [("order-42", {"total": 99})]
