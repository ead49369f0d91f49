"""The real `grpcurl` binary against the real server, through reflection, with
JSON typed as a human types it. The first test replays README.md's
"From grpcurl" session, so the README cannot rot silently."""

import asyncio
import json
import time

from spanq_proto.v1 import queue_pb2

from ..helpers import create_queue, until
from ..readme_session import GRPCURL, replay

SERVICE = "spanq.v1.QueueService"


async def grpcurl(target: str, *args: str, data: object = None) -> tuple[int, str]:
    """Runs grpcurl without blocking the event loop the server runs in; (exit status, stdout + stderr)."""
    argv = [str(GRPCURL), "-plaintext"]
    if data is not None:
        argv += ["-d", data if isinstance(data, str) else json.dumps(data)]
    proc = await asyncio.create_subprocess_exec(*argv, target, *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode()


async def test_readme_grpcurl_session(server, database_url, stub):
    session = await replay("From grpcurl", server.target, database_url)
    ran = "\n".join(session.ran)
    for what in [" list", f"describe {SERVICE}", "/CreateQueue", "/Send", "max_duration", "/Receive",
                 "/RenewLease", "/Ack"]:
        assert what in ran, f"the README's grpcurl session no longer shows {what.strip()}"
    # The session ran against this server: its queue is there, its message acked.
    listed = await stub.ListQueues(queue_pb2.ListQueuesRequest())
    assert [q.name for q in listed.queues] == ["tasks"]


async def test_reflection_lists_and_describes_the_service(server):
    status, out = await grpcurl(server.target, "list")
    assert status == 0 and SERVICE in out.split() and "grpc.health.v1.Health" in out.split()
    status, out = await grpcurl(server.target, "describe", SERVICE)
    assert status == 0
    for rpc in ["CreateQueue", "GetQueue", "ListQueues", "DropQueue", "Send", "Ack", "RenewLease", "Commit"]:
        assert f"rpc {rpc} (" in out
    assert "returns ( stream .spanq.v1.ReceiveResponse )" in out
    status, out = await grpcurl(server.target, "describe", "spanq.v1.SendMessage")
    assert status == 0 and ".google.protobuf.ListValue key = 1;" in out


async def test_receive_stream_pushes_a_send_at_once_and_ends_after_max_duration(server, stub):
    status, out = await grpcurl(server.target, f"{SERVICE}/CreateQueue", data={
        "queue": {"name": "jobs", "key_columns": [{"name": "n", "type": "INT64"}, {"name": "tag", "type": "STRING"}],
                  "payload_type": "JSON", "lease_duration": "30s"}})
    assert status == 0, out
    assert json.loads(out)["lease_duration"] == "30s"

    started = time.monotonic()
    receiver = await asyncio.create_subprocess_exec(
        str(GRPCURL), "-plaintext", "-d", '{"queue": "jobs", "max_duration": "2s"}', server.target,
        f"{SERVICE}/Receive", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        await until(lambda: server.receiver.open_streams() >= 1, "grpcurl's Receive stream to open", 5, 0.01)
        status, out = await grpcurl(server.target, f"{SERVICE}/Send", data=(
            '{"queue": "jobs", "messages": [{"key": [42, "a"], "payload": {"to": "ada", "n": 1}}]}'))
        assert status == 0, out
        assert json.loads(out)["keys"] == [["42", "a"]]  # INT64 comes back as a decimal string
        sent = time.monotonic()
        assert receiver.stdout is not None
        first = await asyncio.wait_for(receiver.stdout.readuntil(b"\n}\n"), 5)
        pushed = time.monotonic()
        rest, _ = await asyncio.wait_for(receiver.communicate(), 5)
    finally:
        if receiver.returncode is None:
            receiver.kill()
            await receiver.wait()
    ended = time.monotonic()
    assert receiver.returncode == 0, rest.decode()
    assert pushed - sent < 1.5, "the message was not pushed as soon as it was sent"
    assert 1.9 < ended - started < 8, "the stream did not end after max_duration"
    [message] = json.loads(first)["messages"]
    assert message["key"] == ["42", "a"] and message["payload"] == {"to": "ada", "n": 1}
    assert message["delivery_attempt"] == 1 and message["last_batch_message"] is True
    assert rest.strip() == b""

    status, out = await grpcurl(server.target, f"{SERVICE}/Ack", data={
        "queue": "jobs", "acks": [{"key": ["42", "a"], "lease_token": message["lease_token"]}]})
    assert status == 0 and json.loads(out)["results"] == [{"key": ["42", "a"], "acked": True}], out


async def test_errors_show_code_message_and_reason(server, stub):
    await create_queue(stub, "tasks")
    status, out = await grpcurl(server.target, f"{SERVICE}/GetQueue", data={"name": "nosuch"})
    assert status != 0
    assert "Code: NotFound" in out and "queue 'nosuch' does not exist" in out and '"reason":"QUEUE_NOT_FOUND"' in out
    status, out = await grpcurl(server.target, f"{SERVICE}/Receive", data={"queue": "tasks", "lease_duration": "-1s"})
    assert status != 0 and "Code: InvalidArgument" in out and "lease_duration cannot be negative" in out
    status, out = await grpcurl(server.target, f"{SERVICE}/Send", data={
        "queue": "tasks", "messages": [{"key": ["k1"], "payload": "not base64!"}]})
    assert status != 0 and "Code: InvalidArgument" in out and "base64" in out
    # Nothing was stored by the failed send.
    status, out = await grpcurl(server.target, f"{SERVICE}/Ack", data={
        "queue": "tasks", "acks": [{"key": ["k1"]}], "ignore_not_found": True})
    assert status == 0 and json.loads(out)["results"] == [{"key": ["k1"]}], out  # acked: false
