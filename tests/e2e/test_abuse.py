"""Abusive clients: the server stays responsive to everyone else and stores
nothing it should not. Deadlines here guard against hangs; they time nothing."""

import asyncio
import base64
import time

import grpc

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc

from ..helpers import (
    ack, create_queue, duration, error_of, key, open_stream, plain, receive_some, send, text_message, until, value,
)


async def responsive(stub) -> None:  # type: ignore[no-untyped-def]
    """A well-behaved client's round trip completes (generous deadline: no hang)."""
    reply = await stub.Send(queue_pb2.SendRequest(queue="probe", messages=[text_message(None, "ping")]), timeout=10)
    assert len(reply.keys) == 1
    got = await receive_some(stub, "probe", 1, timeout=10)
    assert got, "a send to an idle queue is delivered"
    await stub.Ack(queue_pb2.AckRequest(queue="probe", acks=[queue_pb2.AckMessage(key=got[0].key)]), timeout=10)


async def test_streams_that_never_read_do_not_starve_other_clients(server, stub, sql):
    await create_queue(stub, "probe", payload_type=queue_pb2.STRING)
    await create_queue(stub, "flood", payload_type=queue_pb2.BYTES)
    blob = base64.b64encode(b"x" * 50_000).decode()
    for _ in range(4):
        await stub.Send(queue_pb2.SendRequest(queue="flood", messages=[
            queue_pb2.SendMessage(payload=value(blob)) for _ in range(100)]))
    # Forty streams that lease messages and never read their responses.
    async with grpc.aio.insecure_channel(server.target) as rude_channel:
        rude = queue_pb2_grpc.QueueServiceStub(rude_channel)
        calls = [rude.Receive(queue_pb2.ReceiveRequest(queue="flood", max_batch_size=10)) for _ in range(40)]
        # Every message leased to them, responses they will not read.
        await until(lambda: sql.execute("SELECT count(*) FROM flood WHERE spanq_lease_expiration_timestamp > now()"
                                        ).fetchone()[0] == 400, "the forty streams to lease the flood")
        await responsive(stub)
        for call in calls:
            call.cancel()
    await responsive(stub)


async def test_a_burst_of_tiny_rpcs_does_not_starve_other_clients(server, stub):
    await create_queue(stub, "probe", payload_type=queue_pb2.STRING)
    async with grpc.aio.insecure_channel(server.target) as noisy_channel:
        noisy = queue_pb2_grpc.QueueServiceStub(noisy_channel)
        stop = time.monotonic() + 2.0
        sent = 0

        async def hammer() -> None:
            nonlocal sent
            while time.monotonic() < stop:
                await noisy.GetQueue(queue_pb2.GetQueueRequest(name="probe"))
                sent += 1

        burst = asyncio.gather(*(hammer() for _ in range(64)))
        await until(lambda: sent >= 100, "the burst under way")
        await responsive(stub)  # answered in the middle of the burst
        await burst
    assert sent > 1000
    await responsive(stub)


async def test_oversized_messages_are_refused_and_nothing_is_stored(stub, sql):
    await create_queue(stub, "big", payload_type=queue_pb2.BYTES)
    over_limit = base64.b64encode(b"x" * (4 * 1024 * 1024 + 1)).decode()  # 4 MiB+, over the 1 MiB payload limit
    code, message, _ = await error_of(stub.Send(queue_pb2.SendRequest(queue="big", messages=[
        queue_pb2.SendMessage(key=key("k"), payload=value(over_limit))])))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "limit" in message
    over_grpc = base64.b64encode(b"x" * (17 * 1024 * 1024)).decode()  # past the server's 16 MiB message cap
    code, _, _ = await error_of(stub.Send(queue_pb2.SendRequest(queue="big", messages=[
        queue_pb2.SendMessage(key=key("k"), payload=value(over_grpc))])))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert sql.execute("SELECT count(*) FROM big").fetchone() == (0,)


async def test_a_request_id_reused_on_another_queue_is_refused(stub, sql):
    await create_queue(stub, "first", payload_type=queue_pb2.STRING)
    await create_queue(stub, "second", payload_type=queue_pb2.STRING)
    await send(stub, "first", text_message("k", "x"), request_id="shared")
    code, message, _ = await error_of(send(stub, "second", text_message("k", "x"), request_id="shared"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "already used" in message
    assert sql.execute("SELECT count(*) FROM second").fetchone() == (0,)
    assert sql.execute("SELECT count(*) FROM first").fetchone() == (1,)


async def test_streams_that_never_read_neither_starve_a_reader_nor_dead_letter_its_messages(server, stub, sql):
    await create_queue(stub, "work_dead", payload_type=queue_pb2.STRING)
    await create_queue(stub, "work", payload_type=queue_pb2.STRING, lease_duration=duration(2),
                       max_delivery_attempts=4, dead_letter_queue="work_dead")
    async with grpc.aio.insecure_channel(server.target) as rude_channel:
        rude = queue_pb2_grpc.QueueServiceStub(rude_channel)
        stuck = [rude.Receive(queue_pb2.ReceiveRequest(queue="work")) for _ in range(50)]
        await until(lambda: server.receiver.streams_by_queue().get("work", 0) == 50, "50 open streams")
        for batch in range(30):
            await stub.Send(queue_pb2.SendRequest(queue="work", messages=[
                text_message(f"m{batch * 100 + i:04}", "x") for i in range(100)]))
        got: set[str] = set()
        async with open_stream(stub, "work") as reader:
            started = time.monotonic()
            while len(got) < 3000 and time.monotonic() - started < 30:
                try:
                    batch_ = [await reader.next(timeout=1)] + reader.drain()
                except AssertionError:
                    continue  # nothing this second
                got.update(plain(m.key)[0] for m in batch_)
                await ack(stub, "work", *batch_)
        for call in stuck:
            call.cancel()
    assert len(got) == 3000, f"the reader got {len(got)} of 3000 messages in 30 s"
    assert sql.execute("SELECT count(*) FROM work_dead").fetchone() == (0,)


async def test_messages_leased_to_streams_that_never_read_keep_their_attempts(server, stub, sql):
    # Issue 21's case, scaled: 2 KiB messages that every stream's transport takes unread, leases
    # that lapse again and again, and two attempts before the dead-letter queue.
    await create_queue(stub, "unread_dead", payload_type=queue_pb2.STRING)
    await create_queue(stub, "unread", payload_type=queue_pb2.STRING, lease_duration=duration(2),
                       max_delivery_attempts=2, dead_letter_queue="unread_dead")
    registry = server.metrics.registry

    def counted(name: str) -> float:
        return registry.get_sample_value(name, {"queue": "unread"}) or 0

    async with grpc.aio.insecure_channel(server.target) as rude_channel:
        rude = queue_pb2_grpc.QueueServiceStub(rude_channel)
        stuck = [rude.Receive(queue_pb2.ReceiveRequest(queue="unread")) for _ in range(20)]
        await until(lambda: server.receiver.streams_by_queue().get("unread", 0) == 20, "20 open streams")
        for batch in range(10):
            await stub.Send(queue_pb2.SendRequest(queue="unread", messages=[
                text_message(f"m{batch * 100 + i:04}", "x" * 2048) for i in range(100)]))
        # Three rounds of leases nobody read: without their attempts back, the third would move
        # them to the dead-letter queue instead.
        def dead() -> int:
            return int(sql.execute("SELECT count(*) FROM unread_dead").fetchone()[0])

        await until(lambda: counted("spanq_queue_messages_delivered_total") >= 3000 or dead(),
                    "three rounds of unread leases", timeout=30)
        assert dead() == 0, "messages nobody read were dead-lettered"
        attempts: dict[str, int] = {}
        async with open_stream(stub, "unread") as reader:
            async def drained() -> bool:
                try:
                    got = [await reader.next(timeout=1)] + reader.drain()
                except AssertionError:
                    return False  # nothing this second
                attempts.update((plain(m.key)[0], m.delivery_attempt) for m in got)
                await ack(stub, "unread", *got)
                return len(attempts) == 1000

            await until(drained, "the reader to get every message", timeout=30, interval=0)
        for call in stuck:
            call.cancel()
    assert dead() == 0
    assert set(attempts.values()) == {1}, "an attempt the reader saw counts a lease nobody read"
    assert counted("spanq_queue_attempts_refunded_total") >= 2000


async def test_a_stream_whose_client_stops_reading_ends_and_gives_back_what_it_had_not_written(server, stub, sql):
    # Ten 1 MiB messages in one batch: four responses, more than a client's HTTP/2 window takes unread.
    await create_queue(stub, "blobs", payload_type=queue_pb2.BYTES, lease_duration=duration(2))
    blob = base64.b64encode(b"x" * (1024 * 1024)).decode()
    await stub.Send(queue_pb2.SendRequest(queue="blobs", messages=[
        queue_pb2.SendMessage(key=key(f"b{i}"), payload=value(blob)) for i in range(10)]))
    async with grpc.aio.insecure_channel(server.target) as rude_channel:
        rude = queue_pb2_grpc.QueueServiceStub(rude_channel)
        call = rude.Receive(queue_pb2.ReceiveRequest(queue="blobs", max_batch_size=10))
        await until(lambda: server.receiver.streams_by_queue().get("blobs", 0) == 1, "the stream open")
        # Its write stays blocked for half the lease (1 s): the stream ends.
        await until(lambda: "blobs" not in server.receiver.streams_by_queue(), "the stream ended")
        rows = sql.execute("SELECT id, spanq_delivery_attempt, spanq_lease_token IS NULL FROM blobs").fetchall()
        given_back = {r[0] for r in rows if r[1:] == (0, True)}
        leased = {r[0] for r in rows if r[1:] == (0, False)}  # the leases stay, their attempts came back
        assert given_back and leased and len(given_back | leased) == 10, rows
        # Reading now, the client gets what was written (the blocked response too), and then the end.
        read: list[str] = []
        code, message, info = await error_of(_read_all(call, read))
    assert code == grpc.StatusCode.ABORTED and info["reason"] == "CLIENT_NOT_READING", message
    assert set(read) == leased  # nothing given back reached the client
    got = await receive_some(stub, "blobs", len(given_back), max_batch_size=2)
    assert {plain(m.key)[0] for m in got} == given_back and {m.delivery_attempt for m in got} == {1}


async def _read_all(call, into: list[str]) -> None:  # type: ignore[no-untyped-def]
    async for response in call:
        into.extend(plain(m.key)[0] for m in response.messages)
