"""Generated requests, well-formed and malformed, against a live server: it
never crashes or hangs, every answer is a status code from DESIGN.md, and
every rejected request leaves the stored data exactly as it was."""

import hashlib
import signal
from collections.abc import Callable
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
from spanq_server.edge.codec import value_from_json

from ..spawned import free_port, spawn_server, wait_serving_sync

ALLOWED = {
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
QUEUES = ["jobs", "events", "pairs"]


@pytest.fixture(scope="module")
def live(pg_url, template_db):
    """One spawned server on one database for every generated example."""
    import uuid

    from psycopg.conninfo import make_conninfo

    name = f"spanq_p_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    url = make_conninfo(pg_url, dbname=name)
    port = free_port()
    process = spawn_server(url, port, "--max-payload-bytes", "4096", "--max-queues", "10")
    target = f"127.0.0.1:{port}"
    wait_serving_sync(target)
    channel = grpc.insecure_channel(target)
    stub = queue_pb2_grpc.QueueServiceStub(channel)
    stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(name="jobs", payload_type=queue_pb2.STRING)))
    stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(name="events", payload_type=queue_pb2.JSON)))
    stub.CreateQueue(queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
        name="pairs", key_columns=[queue_pb2.KeyColumn(name="n", type=queue_pb2.INT64),
                                   queue_pb2.KeyColumn(name="b", type=queue_pb2.BYTES)])))
    with psycopg.connect(url, autocommit=True) as sql:
        yield stub, sql, channel
    channel.close()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def snapshot(sql) -> str:  # type: ignore[no-untyped-def]
    digest = hashlib.sha256()
    for table in ["spanq.queues", "spanq.commit_ledger", *QUEUES]:
        for row in sql.execute(f"SELECT * FROM {table} ORDER BY 1"):
            digest.update(repr(row).encode())
    names = sql.execute("SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables "
                        "WHERE schemaname = 'public'").fetchone()
    digest.update(repr(names).encode())
    return digest.hexdigest()


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2**70, 2**70)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


# Mostly real queue names and plausible values, so that requests reach the
# database as often as they fail validation.
names = st.one_of(st.sampled_from(QUEUES), st.sampled_from(QUEUES), st.sampled_from(QUEUES),
                  st.sampled_from(["", "nope", "Jobs", 'x"; DROP TABLE jobs; --', "ü", "a" * 300]),
                  st.text(max_size=60))
durations = st.one_of(
    st.builds(lambda s: duration_pb2.Duration(seconds=s), st.integers(0, 100)),
    st.builds(lambda s, n: duration_pb2.Duration(seconds=s, nanos=n),
              st.integers(-10**12, 10**12), st.integers(-10**9 + 1, 10**9 - 1)))
stamps = st.builds(lambda s: timestamp_pb2.Timestamp(seconds=s), st.integers(-62135596800, 253402300799))
plausible_keys = st.one_of(
    st.lists(st.text(max_size=8), min_size=1, max_size=1),
    st.tuples(st.integers(-2**63, 2**63 - 1).map(str), st.binary(max_size=8).map(
        lambda b: __import__("base64").b64encode(b).decode())).map(list),
)
keys = st.one_of(plausible_keys, plausible_keys, st.lists(json_values, max_size=3)).map(
    lambda vs: struct_pb2.ListValue(values=[value_from_json(v) for v in vs]))
payloads = st.text(max_size=30).map(value_from_json) | json_values.map(value_from_json) | st.binary(max_size=6000).map(
    lambda b: struct_pb2.Value(string_value=__import__("base64").b64encode(b).decode()))
request_ids = st.sampled_from(["", "", "same-id"]) | st.uuids().map(str) | st.text(max_size=140)


@st.composite
def send_messages(draw):  # type: ignore[no-untyped-def]
    message = queue_pb2.SendMessage(payload=draw(payloads))
    if draw(st.booleans()):
        message.key.CopyFrom(draw(keys))
    schedule = draw(st.sampled_from(["none", "delay", "time"]))
    if schedule == "delay":
        message.delay.CopyFrom(draw(durations))
    elif schedule == "time":
        message.deliver_time.CopyFrom(draw(stamps))
    return message


requests = st.one_of(
    st.builds(lambda q, ms, r: ("Send", queue_pb2.SendRequest(queue=q, messages=ms, request_id=r)),
              names, st.lists(send_messages(), max_size=4), request_ids),
    st.builds(lambda q, ks, ignore, tokens, r: ("Ack", queue_pb2.AckRequest(
        queue=q, acks=[queue_pb2.AckMessage(key=k, lease_token=t) for k, t in zip(ks, tokens)],
        ignore_not_found=ignore, request_id=r)),
        names, st.lists(keys, max_size=3), st.booleans(), st.lists(st.text(max_size=40), min_size=3, max_size=3),
        request_ids),
    st.builds(lambda q, tokens, d, r: ("RenewLease", queue_pb2.RenewLeaseRequest(
        queue=q, lease_tokens=tokens, lease_duration=d, request_id=r)),
        names, st.lists(st.text(max_size=80), max_size=3), durations, request_ids),
    st.builds(lambda q, cols, p, lease: ("CreateQueue", queue_pb2.CreateQueueRequest(queue=queue_pb2.Queue(
        name=q, key_columns=[queue_pb2.KeyColumn(name=n, type=t) for n, t in cols], payload_type=p,
        lease_duration=lease))),
        names, st.lists(st.tuples(st.text(max_size=10) | st.sampled_from(["id", "payload", "k", "ctid", "attempt", "old_token"]),
                                  st.integers(-1, 12)), max_size=3),
        st.integers(-1, 12), durations),
    st.builds(lambda q, size, token: ("ListQueues", queue_pb2.ListQueuesRequest(page_size=size, page_token=token)),
              names, st.integers(-5, 2000), st.text(max_size=20)),
)


def _called(sql: Any, method: str, request: Any, call: Callable[[], Any]) -> grpc.StatusCode:
    """Makes the call and checks its outcome: a code the design names, with a message when
    it is an error, and the stored data unchanged when the request was rejected."""
    before = snapshot(sql)
    try:
        call()
        code = grpc.StatusCode.OK
    except grpc.RpcError as exc:
        code = exc.code()
        assert exc.details(), "every error says what was wrong"
    event(f"{method} -> {code.name}")
    assert code in ALLOWED, (code, request)
    if code != grpc.StatusCode.OK:
        assert snapshot(sql) == before, "a rejected request changed stored data"
    return code


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(request=requests)
def test_generated_requests_get_a_design_status_and_rejections_change_nothing(live, request):
    stub, sql, _ = live
    method, message = request
    code = _called(sql, method, message, lambda: getattr(stub, method)(message, timeout=10))
    # Created queues stay few; drop generated ones so later examples can create more.
    if method == "CreateQueue" and code == grpc.StatusCode.OK:
        stub.DropQueue(queue_pb2.DropQueueRequest(name=message.queue.name), timeout=10)


@st.composite
def corrupted(draw):  # type: ignore[no-untyped-def]
    """A generated request's bytes, then damaged: bytes overwritten, cut off or inserted."""
    method, message = draw(requests)
    data = bytearray(message.SerializeToString())
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["overwrite", "cut", "insert"]))
        at = draw(st.integers(0, len(data)))
        if how == "overwrite" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
    return method, bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(request=corrupted())
def test_damaged_bytes_get_a_design_status_and_rejections_change_nothing(live, request):
    # Most do not decode (INVALID_ARGUMENT, never UNKNOWN); some decode into another request.
    _, sql, channel = live
    method, data = request
    call = channel.unary_unary(f"/spanq.v1.QueueService/{method}")
    code = _called(sql, method, data, lambda: call(data, timeout=10))
    if method == "CreateQueue" and code == grpc.StatusCode.OK:
        created = queue_pb2.CreateQueueRequest.FromString(data).queue.name
        queue_pb2_grpc.QueueServiceStub(channel).DropQueue(queue_pb2.DropQueueRequest(name=created), timeout=10)
