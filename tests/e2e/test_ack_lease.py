"""An Ack that frees a waiting stream's room leases the stream's next message in the
Ack's own commit (ack_lease.py): a one-at-a-time consumer costs one commit per message,
every message still arrives exactly once, and the lease-safety rule holds for a lease
that no stream took."""

import asyncio

import grpc
import psycopg

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start

from ..helpers import ack, create_queue, duration, error_of, open_stream, send, text_message, until
from .test_group_commit_ack import ack_request, held_ack, until_blocked


def xact_commits(database_url: str) -> int:
    """Transactions committed in the test's database, as the statistics collector counts
    them: read by a connection of its own (a backend's counts reach them when it exits)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return int(conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                                ).fetchone()[0])


async def quiet_database(sql) -> None:
    """Until no backend but ``sql``'s is connected to the test's database (so their counts are in)."""
    def others() -> bool:
        return not sql.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                               "AND pid <> pg_backend_pid()").fetchone()[0]
    await until(others, "the servers' connections to close")


async def consume_one_at_a_time(stub, n: int) -> list[queue_pb2.ReceivedMessage]:
    got = []
    async with open_stream(stub, "q", max_batch_size=1, max_outstanding=1, lease_duration=duration(30)) as s:
        for _ in range(n):
            m = await s.next(timeout=10)
            got.append(m)
            await ack(stub, "q", m)
        await s.quiet(0.2)
    return got


async def test_a_one_at_a_time_consumer_gets_each_message_once_at_one_commit_each(server, stub, sql, database_url,
                                                                                 server_config, clock):
    n = 200
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", *(text_message(f"m{i:03}", f"payload {i}") for i in range(n)))
    await server.stop(0)
    await quiet_database(sql)
    before = xact_commits(database_url)

    consumer = await start(server_config, clock=clock)
    try:
        async with grpc.aio.insecure_channel(consumer.target) as channel:
            got = await consume_one_at_a_time(queue_pb2_grpc.QueueServiceStub(channel), n)
        carried = consumer.mutator.ack_leases.carried
    finally:
        await consumer.stop(0)
    await quiet_database(sql)
    commits = xact_commits(database_url) - before - 1  # the first count's own connection

    keys = [m.key.values[0].string_value for m in got]
    assert sorted(keys) == [f"m{i:03}" for i in range(n)], "every message exactly once"
    assert {m.delivery_attempt for m in got} == {1}
    assert sql.execute("SELECT count(*) FROM q").fetchone()[0] == 0
    assert carried == n - 1, "each ack but the last leased the next message"
    # The server's start and the stream's opening cost a few commits of their own.
    print(f"{commits} commits for {n} messages")
    assert commits / n < 1.2, f"{commits} commits for {n} messages"


async def test_an_ack_whose_stream_ended_gives_the_piggybacked_lease_back(server, stub, sql, database_url,
                                                                         waiting):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", text_message("first", "1"), text_message("second", "2"))
    before = sql.execute("SELECT deliver_time, xmin::text FROM q WHERE id = 'second'").fetchone()
    async with open_stream(stub, "q", max_batch_size=1, max_outstanding=1, lease_duration=duration(30)) as s:
        first = await s.next()
        await waiting.wait(match=lambda state: state.queue == "q" and state.full)
        # The ack's group waits on the request_id an open transaction holds, with the lease
        # for the stream planned behind it in the same transaction.
        blocker, acking = await held_ack(database_url, stub, first)
        await asyncio.wait_for(until_blocked(sql), 10)
    await until(lambda: server.receiver.open_streams() == 0, "the stream to end")
    await blocker.rollback()
    await blocker.close()
    answer = await acking
    assert [r.acked for r in answer.results] == [True]
    assert server.mutator.ack_leases.carried == 1, "the ack leased the next message for the stream"

    def row():
        return sql.execute("SELECT spanq_lease_token, spanq_delivery_attempt, deliver_time, xmin::text FROM q "
                           "WHERE id = 'second'").fetchone()
    await until(lambda: row()[0] is None, "the lease leased for the ended stream to be given back")
    token, attempt, deliver_time, xmin = row()
    assert xmin != before[1], "the row was leased (and given back) since it was sent"
    assert (attempt, deliver_time) == (0, before[0]), "as it was before the lease: ready, attempt unchanged"
    async with open_stream(stub, "q", max_batch_size=1, max_outstanding=1) as again:
        second = await again.next()
    assert (second.key.values[0].string_value, second.delivery_attempt) == ("second", 1)


async def test_an_ack_of_unknown_outcome_hands_no_lease_over(server, stub, sql, waiting):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", text_message("first", "1"), text_message("second", "2"))
    async with open_stream(stub, "q", max_batch_size=1, max_outstanding=1, lease_duration=duration(30)) as s:
        first = await s.next()
        await waiting.wait(match=lambda state: state.queue == "q" and state.full)
        server.mutator.faults.probabilities = {"unknown_commit_after": 1.0}  # committed, answer "lost"
        code, _, _ = await error_of(stub.Ack(ack_request(first, request_id="lost")))
        server.mutator.faults.probabilities = {}
        assert code is grpc.StatusCode.UNKNOWN
        await s.quiet(0.5)
    token, attempt = sql.execute("SELECT spanq_lease_token, spanq_delivery_attempt FROM q WHERE id = 'second'"
                                 ).fetchone()
    assert token is not None and attempt == 1, "leased in the ack's commit, left to expire by itself"
    assert sql.execute("SELECT count(*) FROM q WHERE id = 'first'").fetchone()[0] == 0


async def test_a_lease_that_fails_does_not_fail_the_ack(server, stub, sql, waiting):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", text_message("first", "1"), text_message("second", "2"))
    # The queue's receive function fails its second call (the one in the ack's commit).
    (result,) = sql.execute("SELECT pg_get_function_result('spanq.receive_q'::regproc)").fetchone()
    sql.execute("CREATE SEQUENCE receive_calls")
    sql.execute("ALTER FUNCTION spanq.receive_q RENAME TO receive_q_real")
    sql.execute(f"""CREATE FUNCTION spanq.receive_q(a integer, b interval, c text, d timestamptz) RETURNS {result}
                    LANGUAGE plpgsql AS $$ BEGIN
                        IF nextval('receive_calls') = 2 THEN RAISE EXCEPTION 'an injected lease failure'; END IF;
                        RETURN QUERY SELECT * FROM spanq.receive_q_real(a, b, c, d);
                    END $$""")
    async with open_stream(stub, "q", max_batch_size=1, max_outstanding=1, lease_duration=duration(30)) as s:
        first = await s.next()
        await waiting.wait(match=lambda state: state.queue == "q" and state.full)
        answer = await ack(stub, "q", first)
        assert [r.acked for r in answer.results] == [True]
        second = await s.next()  # the stream's own lease, as without the piggyback
    assert (second.key.values[0].string_value, second.delivery_attempt) == ("second", 1)
    assert sql.execute("SELECT last_value FROM receive_calls").fetchone()[0] == 3
    assert server.mutator.ack_leases.carried == 0
