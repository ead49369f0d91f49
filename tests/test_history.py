"""Concurrent producers and consumers over raw gRPC stubs with every injected
fault on; the history checker proves exactly-once effects afterwards."""

import asyncio
import dataclasses
import json
import uuid
from datetime import timedelta

import grpc

from spanq._proto.spanq.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.server import start

from .helpers import create_queue, duration, plain, value
from .history import Delivery, History

RETRYABLE = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
PRODUCERS, PER_PRODUCER, CONSUMERS = 4, 150, 4
LEASE_S = 5


async def replay_until_known(history: History, call):
    """Replays one request (same request_id) until its outcome is known."""
    for _ in range(100):
        history.operations += 1
        try:
            return await call()
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in RETRYABLE:
                raise
            history.faults_seen += 1
            await asyncio.sleep(0.001)
    raise AssertionError("outcome never learned")


async def produce(stub, history: History, producer: int) -> None:
    for n in range(PER_PRODUCER):
        message_id = f"p{producer}-{n}"
        request = queue_pb2.SendRequest(
            queue="work", request_id=str(uuid.uuid4()),
            messages=[queue_pb2.SendMessage(payload=value({"id": message_id}))])
        reply = await replay_until_known(history, lambda: stub.Send(request))
        history.send_confirmed(message_id, plain(reply.keys[0])[0])


async def consume(stub, history: History, name: str, done: asyncio.Event) -> None:
    call = stub.Receive(queue_pb2.ReceiveRequest(queue="work", max_batch_size=20,
                                                 lease_duration=duration(LEASE_S)))
    try:
        async for response in call:
            for m in response.messages:
                k = plain(m.key)[0]
                expiry = m.lease_expiration_time.ToDatetime()
                history.delivered(Delivery(plain(m.payload)["id"], k, m.lease_token,
                                           expiry - timedelta(seconds=LEASE_S), expiry, name))
                request = queue_pb2.AckRequest(queue="work", request_id=str(uuid.uuid4()),
                                               acks=[queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token)])
                try:
                    reply = await replay_until_known(history, lambda: stub.Ack(request))
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                        continue  # the lease moved on; the message comes back
                    raise
                history.ack_confirmed(k, reply.replayed)
            if done.is_set():
                return
    finally:
        call.cancel()


async def test_exactly_once_under_injected_faults(server_config, clock, sql):
    faults = "unknown_commit_after=0.1,unknown_commit_before=0.08,unavailable_before=0.07"
    running = await start(dataclasses.replace(server_config, inject_faults=faults), clock=clock)
    history = History()
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            stub = queue_pb2_grpc.QueueServiceStub(channel)
            await create_queue(stub, "work", payload_type=queue_pb2.JSON)
            done = asyncio.Event()
            consumers = [asyncio.create_task(consume(stub, history, f"c{i}", done)) for i in range(CONSUMERS)]
            await asyncio.gather(*(produce(stub, history, p) for p in range(PRODUCERS)))
            total = PRODUCERS * PER_PRODUCER
            async with asyncio.timeout(60):
                while len(history.acked) < total:
                    await asyncio.sleep(0.05)
            done.set()
            for task in consumers:
                task.cancel()
            await asyncio.gather(*consumers, return_exceptions=True)
    finally:
        await running.stop(0)
    remaining = [(r[0], json.loads(json.dumps(r[1]))["id"]) for r in sql.execute("SELECT id, payload FROM work")]
    report = history.check(remaining, LEASE_S)
    print(report.summary(), running.store.faults.injected)
    assert sum(running.store.faults.injected.values()) >= 100  # the faults really happened
    assert report.confirmed_sends == PRODUCERS * PER_PRODUCER
    assert report.ok, report
    assert remaining == []
