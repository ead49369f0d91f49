"""The core path end to end: create, send, receive, ack, over a real socket and PostgreSQL."""

import grpc

from spanq_proto.v1 import queue_pb2

from ..helpers import create_queue, error_of, plain, receive_some, send, text_message


async def test_send_receive_ack(stub):
    await create_queue(stub, "tasks", payload_type=queue_pb2.STRING)
    sent = await send(stub, "tasks", text_message("a", "hello"), text_message(None, "generated key"))
    assert plain(sent.keys[0]) == ["a"]
    generated = plain(sent.keys[1])[0]
    assert len(generated) == 36  # a UUID

    got = await receive_some(stub, "tasks", 2)
    assert sorted(plain(m.payload) for m in got) == ["generated key", "hello"]
    assert all(m.delivery_attempt == 1 and m.lease_token for m in got)

    acked = await stub.Ack(queue_pb2.AckRequest(
        queue="tasks", acks=[queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token) for m in got]))
    assert [r.acked for r in acked.results] == [True, True]

    code, _, info = await error_of(stub.Ack(queue_pb2.AckRequest(queue="tasks", acks=[queue_pb2.AckMessage(key=got[0].key)])))
    assert code == grpc.StatusCode.OUT_OF_RANGE and info["reason"] == "MESSAGE_NOT_FOUND"
