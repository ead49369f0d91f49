"""StreamingReceive: a Receive stream that carries its client's acks and renewals (issue 22).
Each ack commits as the unary Ack does (the ledger: once per request_id, replayed
after; the lease token checked), is answered on the stream by its request_id, and an
error is that request's answer while the stream goes on."""

import asyncio
import dataclasses
import uuid
from datetime import timedelta
from typing import Any

import grpc

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start

from ..helpers import create_queue, duration, error_of, key, send, text_message


class Streaming:
    """A StreamingReceive call read by a background task: messages and answers apart."""

    def __init__(self, stub: queue_pb2_grpc.QueueServiceStub, queue: str, metadata: Any = (), **fields: Any) -> None:
        self.call = stub.StreamingReceive(metadata=metadata)
        self.queue = queue
        self.fields = {"max_batch_size": 1, "max_outstanding": 1, "lease_duration": duration(30), **fields}
        self.messages: asyncio.Queue[queue_pb2.ReceivedMessage] = asyncio.Queue()
        self.answers: dict[str, list[queue_pb2.StreamAnswer]] = {}
        self._arrived = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None

    async def open(self) -> "Streaming":
        await self.call.write(queue_pb2.StreamingReceiveRequest(
            open=queue_pb2.ReceiveRequest(queue=self.queue, **self.fields)))
        self.task = asyncio.ensure_future(self._read())
        return self

    async def _read(self) -> None:
        async for response in self.call:
            for m in response.messages:
                self.messages.put_nowait(m)
            async with self._arrived:
                for a in response.answers:
                    self.answers.setdefault(a.request_id, []).append(a)
                self._arrived.notify_all()

    async def next(self, timeout: float = 10) -> queue_pb2.ReceivedMessage:
        return await asyncio.wait_for(self.messages.get(), timeout)

    async def ack(self, *messages: queue_pb2.ReceivedMessage, request_id: str | None = None, token: str | None = None,
                  **fields: Any) -> queue_pb2.StreamAnswer:
        """Acks on the stream; the answer (the first to this request_id not yet taken)."""
        request_id = request_id or str(uuid.uuid4())
        acks = [queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token if token is None else token)
                for m in messages]
        return await self.request(queue_pb2.StreamingReceiveRequest(
            ack=queue_pb2.AckRequest(request_id=request_id, acks=acks, **fields)), request_id)

    async def request(self, request: queue_pb2.StreamingReceiveRequest, request_id: str,
                      timeout: float = 10) -> queue_pb2.StreamAnswer:
        taken = len(self.answers.get(request_id, ()))
        await self.call.write(request)
        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(lambda: len(self.answers.get(request_id, ())) > taken),
                                   timeout)
        return self.answers[request_id][taken]

    async def close(self) -> None:
        self.call.cancel()
        if self.task is not None:
            try:
                await self.task
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                pass

    async def __aenter__(self) -> "Streaming":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def names(*messages: queue_pb2.ReceivedMessage) -> list[str]:
    return [m.key.values[0].string_value for m in messages]


def count(sql, table: str = "q") -> int:
    return sql.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


async def test_a_one_at_a_time_consumer_acks_on_its_stream_and_gets_each_message_once(server, stub, sql):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", *(text_message(f"m{i}", str(i)) for i in range(5)))
    got = []
    async with Streaming(stub, "q") as s:
        for _ in range(5):
            m = await s.next()
            got.append(m)
            answer = await s.ack(m)
            assert answer.WhichOneof("result") == "ack", answer
            assert [r.acked for r in answer.ack.results] == [True] and not answer.ack.replayed
        assert s.messages.empty()
    assert sorted(names(*got)) == [f"m{i}" for i in range(5)]
    assert count(sql) == 0
    carried = server.mutator.ack_leases.carried
    assert carried >= 4, f"each ack but the last leased the next message in its commit ({carried})"


async def test_a_streamed_ack_replayed_by_its_request_id_is_applied_once(server, stub, sql):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await send(stub, "q", text_message("a", "1"), text_message("b", "2"))
    async with Streaming(stub, "q", max_outstanding=2, max_batch_size=2) as s:
        a, b = await s.next(), await s.next()
        first = await s.ack(a, request_id="r-1")
        again = await s.ack(a, request_id="r-1")
        assert not first.ack.replayed and again.ack.replayed
        assert [r.acked for r in again.ack.results] == [True]
        # The unary Ack of the same request (its queue named) replays it too: one ledger entry.
        unary = await stub.Ack(queue_pb2.AckRequest(queue="q", request_id="r-1", acks=[
            queue_pb2.AckMessage(key=a.key, lease_token=a.lease_token)]))
        assert unary.replayed
        # Another request under the same id is refused, as on the unary call; the stream goes on.
        other = await s.ack(b, request_id="r-1")
        assert other.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0], other
        assert count(sql) == 1
        assert (await s.ack(b)).ack.results[0].acked
    assert count(sql) == 0


async def test_a_bad_ack_gets_its_own_error_and_the_stream_goes_on(server, stub, sql):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    await create_queue(stub, "other", payload_type=queue_pb2.STRING)
    await send(stub, "q", text_message("a", "1"), text_message("b", "2"))
    async with Streaming(stub, "q") as s:
        a = await s.next()
        stale = await s.ack(a, token="not-the-lease")
        assert stale.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0], stale
        assert stale.error.reason == "LEASE_NOT_HELD" and stale.error.message
        elsewhere = await s.ack(a, queue="other")
        assert elsewhere.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "'q'" in elsewhere.error.message
        nameless = await s.request(queue_pb2.StreamingReceiveRequest(ack=queue_pb2.AckRequest(
            acks=[queue_pb2.AckMessage(key=a.key)])), "")
        assert nameless.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "request_id" in nameless.error.message
        reopen = await s.request(queue_pb2.StreamingReceiveRequest(open=queue_pb2.ReceiveRequest(queue="q")), "")
        assert reopen.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert count(sql) == 2, "no refused ack deleted anything"
        assert (await s.ack(a)).ack.results[0].acked
        b = await s.next()
        gone = await s.ack(a)  # acked already
        assert gone.error.code == grpc.StatusCode.OUT_OF_RANGE.value[0] and gone.error.reason == "MESSAGE_NOT_FOUND"
        assert (await s.ack(b)).ack.results[0].acked
    assert count(sql) == 0


async def test_renewals_and_nacks_on_the_stream(server, stub, sql):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING, initial_backoff=duration(0))
    await send(stub, "q", text_message("a", "1"))
    async with Streaming(stub, "q") as s:
        a = await s.next()
        renewed = await s.request(queue_pb2.StreamingReceiveRequest(renew_lease=queue_pb2.RenewLeaseRequest(
            request_id="renew-1", lease_tokens=[a.lease_token], lease_duration=duration(60))), "renew-1")
        [lease] = renewed.renew_lease.leases
        assert lease.old_lease_token == a.lease_token and lease.new_lease_token
        stale = await s.ack(a)  # the old token was superseded
        assert stale.error.reason == "LEASE_NOT_HELD"
        released = await s.request(queue_pb2.StreamingReceiveRequest(renew_lease=queue_pb2.RenewLeaseRequest(
            request_id="nack-1", lease_tokens=[lease.new_lease_token], lease_duration=duration(0))), "nack-1")
        assert released.renew_lease.leases[0].old_lease_token == lease.new_lease_token
        again = await s.next()
        assert names(again) == ["a"] and again.delivery_attempt == 2
        assert (await s.ack(again)).ack.results[0].acked
    assert count(sql) == 0


async def test_the_first_request_must_open_the_stream(stub):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    call = stub.StreamingReceive()
    await call.write(queue_pb2.StreamingReceiveRequest(ack=queue_pb2.AckRequest(request_id="r", acks=[
        queue_pb2.AckMessage(key=key("a"))])))

    async def read() -> None:
        async for _ in call:
            pass

    code, message, info = await error_of(read())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "open" in message


async def test_an_unknown_commit_on_the_stream_is_its_answer_and_a_replay_learns_the_outcome(server_config, clock,
                                                                                           sql):
    running = await start(dataclasses.replace(server_config, inject_faults="unknown_commit_after=1",
                                       poll_interval=timedelta(seconds=0.5)), clock=clock)
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "q", payload_type=queue_pb2.STRING)
            running.mutator.faults.probabilities.clear()
            await send(stub, "q", text_message("a", "1"), text_message("b", "2"))
            async with Streaming(stub, "q") as s:
                a = await s.next()
                running.mutator.faults.probabilities["unknown_commit_after"] = 1
                unknown = await s.ack(a, request_id="r-unknown")
                assert unknown.error.code == grpc.StatusCode.UNKNOWN.value[0], unknown
                assert unknown.error.reason == "UNKNOWN_COMMIT"
                assert unknown.error.metadata["request_id"] == "r-unknown"
                running.mutator.faults.probabilities.clear()
                assert count(sql) == 1, "it did commit"
                replay = await s.ack(a, request_id="r-unknown")
                assert replay.ack.replayed and replay.ack.results[0].acked
                # The stream goes on. What the unknown commit leased for it (the next message,
                # in the ack's transaction: ack_lease.py) was never handed over: it comes once
                # that lease expires, as after a unary Ack's unknown commit.
                clock.advance(timedelta(seconds=31))
                b = await s.next()
                assert names(b) == ["b"] and b.delivery_attempt == 2
                assert (await s.ack(b)).ack.results[0].acked
            assert count(sql) == 0
    finally:
        await running.stop(0)


async def test_the_stream_ends_at_max_duration_and_a_half_close_ends_only_the_requests(server, stub):
    await create_queue(stub, "q", payload_type=queue_pb2.STRING)
    # The client's side stays open: the stream still ends at its max_duration, normally.
    s = await Streaming(stub, "q", max_duration=duration(0.3)).open()
    await asyncio.wait_for(s.task, 10)
    assert await s.call.code() == grpc.StatusCode.OK
    # The client half-closes after opening (grpcurl does): it goes on receiving.
    call = stub.StreamingReceive()
    await call.write(queue_pb2.StreamingReceiveRequest(open=queue_pb2.ReceiveRequest(queue="q")))
    await call.done_writing()
    await send(stub, "q", text_message("a", "1"))
    response = await asyncio.wait_for(call.read(), 10)
    assert names(*response.messages) == ["a"]
    call.cancel()
