"""The Ack's fast paths: its response written as bytes (codec.ack_results_bytes) is the
generated serializer's output byte for byte, or is left to the generated code; its keys
read inline (codec.ack_items) are key_reader's, or are left to it."""

from datetime import timedelta

from spanq_proto.v1 import queue_pb2
from spanq_server.domain import queues
from spanq_server.domain.mutations import AckOp
from spanq_server.edge import codec
from spanq_server.ground.model import AckItem, AckResult, ColumnType, KeyColumn, QueueDef
from spanq_server.v1 import service

DEFAULT = queues.default_key_columns()


def generated(results: list[AckResult]) -> bytes:
    out = queue_pb2.AckResponse()
    for key, acked in results:
        r = out.results.add(acked=acked)
        r.key.values.add(string_value=key[0])
    return out.SerializeToString()


def test_ack_bytes_are_the_generated_serializers_for_every_short_key():
    keys = ["", "a", "0b1c2d3e-uuid-like-4f5a-6b7c8d9e0f10", "é€😀", "x" * 119, "quote\"back\\slash\n"]
    results = [AckResult((k,), acked) for k in keys for acked in (True, False)]
    data = codec.ack_results_bytes(DEFAULT, results)
    assert data == generated(results)
    assert queue_pb2.AckResponse.FromString(data) == queue_pb2.AckResponse.FromString(generated(results))
    assert codec.ack_results_bytes(DEFAULT, []) == b""


def test_long_keys_other_key_columns_and_lone_surrogates_are_left_to_the_generated_code():
    assert codec.ack_results_bytes(DEFAULT, [AckResult(("x" * 120,), True)]) is None
    assert codec.ack_results_bytes(DEFAULT, [AckResult(("é" * 60,), True)]) is None  # 120 bytes
    assert codec.ack_results_bytes(DEFAULT, [AckResult(("\ud800",), True)]) is None
    two = (KeyColumn("a", ColumnType.STRING), KeyColumn("b", ColumnType.INT64))
    assert codec.ack_results_bytes(two, [AckResult(("a", 1), True)]) is None
    assert codec.ack_results_bytes((KeyColumn("n", ColumnType.INT64),), [AckResult((1,), True)]) is None


def test_the_ack_reply_and_its_ledger_bytes_agree_either_way():
    for columns, key in ((DEFAULT, ("k",)), (DEFAULT, ("y" * 200,)), ((KeyColumn("n", ColumnType.INT64),), (7,))):
        queue = _queue(columns)
        op = AckOp(queue=queue, items=[AckItem(key, "t")], ignore_not_found=True)
        results = [AckResult(key, True), AckResult(key, False)]
        reply, data = service.ACK.encode([op], [results])
        assert data == reply.SerializeToString() == service.ack_response(queue, results).SerializeToString()


def test_ack_items_reads_well_formed_default_keys_and_leaves_the_rest_to_the_full_decoder():
    acks = [queue_pb2.AckMessage(key=codec.key_to_proto(_queue(DEFAULT), (k,)), lease_token=t)
            for k, t in (("a", "t1"), ("é€", ""), ("", "t3"))]
    assert codec.ack_items(DEFAULT, acks) == [AckItem(("a",), "t1"), AckItem(("é€",), None), AckItem(("",), "t3")]
    assert all(type(i) is AckItem for i in codec.ack_items(DEFAULT, acks) or [])
    bad = [queue_pb2.AckMessage(), queue_pb2.AckMessage()]
    bad[0].key.values.add(number_value=1)
    bad[1].key.values.add(string_value="a\x00b")
    two = queue_pb2.AckMessage()
    two.key.values.add(string_value="a")
    two.key.values.add(string_value="b")
    for malformed in (bad[0], bad[1], two, queue_pb2.AckMessage()):
        assert codec.ack_items(DEFAULT, [acks[0], malformed]) is None
    assert codec.ack_items((KeyColumn("n", ColumnType.INT64),), []) is None


def _queue(columns: tuple[KeyColumn, ...]) -> QueueDef:
    return QueueDef(name="q", key_columns=columns, payload_type=ColumnType.BYTES,
                    lease_duration=timedelta(seconds=30), initial_backoff=timedelta(seconds=1),
                    max_backoff=timedelta(seconds=60))
