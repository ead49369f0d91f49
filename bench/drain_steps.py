"""``python -m bench.drain_steps [--batch B] [--rounds R] [--only STEP]``

The server's own Python steps of one drained batch, timed alone in this process
(CPU time, no database, no sockets): each step run over the same ``--batch``
messages ``--rounds`` times, and its median microseconds per message printed.
Deterministic enough to compare under `valgrind --tool=callgrind` (``--only``
one step), where a loaded machine makes the wall clock useless (issue 22, item 3).
The steps are the server's functions on the drain path, in order: rows to
LeasedMessages, the holding's bookkeeping, the Receive response (built and
serialized, as gRPC does), then the Ack: parsed from bytes, fingerprinted for the
ledger, its keys read, its statement's arrays, its response (built and
serialized), and the holding told.
"""

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from spanq_proto.v1 import queue_pb2
from spanq_server.domain import queues
from spanq_server.domain.exactly_once import Request
from spanq_server.domain.receive.held import Holdings
from spanq_server.ground.model import AckResult, ColumnType, LeasedMessage, QueueDef
from spanq_server.store.messages import _leased, _queue_sql
from spanq_server.v1 import service

PAYLOAD = "x" * 64


def fixture(batch: int) -> tuple[QueueDef, list[tuple[Any, ...]], str]:
    queue = QueueDef(name="steps", key_columns=queues.default_key_columns(), payload_type=ColumnType.STRING,
                     lease_duration=timedelta(seconds=30), initial_backoff=timedelta(seconds=1),
                     max_backoff=timedelta(seconds=60), key_generated=True)
    now = datetime.now(timezone.utc)
    prefix = "0123456789abcdef"
    end = now + timedelta(seconds=30)
    rows = []
    for i in range(batch):
        key = str(uuid.uuid4())
        rows.append((key, PAYLOAD, now - timedelta(microseconds=batch - i), f"{prefix}.{int(end.timestamp() * 1e6)}.{key}~{uuid.uuid4().hex[:12]}",
                     end, 1, now, i == batch - 1, None, 0))
    return queue, rows, prefix


def steps(batch: int) -> dict[str, Callable[[], Any]]:
    queue, rows, prefix = fixture(batch)
    leased = _leased(queue, rows)
    holdings = Holdings()
    response = service.receive_responses(queue, leased, 4 << 20).responses[0][0]
    wire = response.SerializeToString()
    received = queue_pb2.ReceiveResponse.FromString(wire).messages
    ack_wire = queue_pb2.AckRequest(queue=queue.name, request_id=str(uuid.uuid4()), acks=[
        queue_pb2.AckMessage(key=m.key, lease_token=m.lease_token) for m in received]).SerializeToString()
    ack_request = queue_pb2.AckRequest.FromString(ack_wire)
    catalog = _Catalog(queue)
    svc = service.QueueService(catalog, None, None, None, None)  # type: ignore[arg-type]
    statements = _queue_sql(queue)

    def ack_op() -> Any:
        coro = svc._ack_op(ack_request)
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        raise AssertionError("the catalog answered without waiting")

    op = ack_op()
    results = [AckResult(i.key, True) for i in op.items]

    def fingerprint() -> Any:
        unkeyed = type(ack_request)()
        unkeyed.CopyFrom(ack_request)
        unkeyed.request_id = ""
        return Request.of(ack_request.request_id, "Ack", unkeyed.SerializeToString(deterministic=True))

    def holding() -> None:
        h = holdings.open(queue.name, prefix)
        h.leased(leased)
        h.handed(leased)
        holdings.acked(queue.name, [i.lease_token for i in op.items])
        holdings.close(queue.name, prefix)

    return {
        "rows": lambda: _leased(queue, rows),
        "receive": lambda: service.receive_responses(queue, leased, 4 << 20).responses[0][0].SerializeToString(),
        "ack_parse": lambda: queue_pb2.AckRequest.FromString(ack_wire),
        "ack_fingerprint": fingerprint,
        "ack_op": ack_op,
        "ack_arrays": lambda: statements.ack_params(op.items),
        "ack_response": lambda: service.ACK.encode([op], [results]),
        "holding": holding,
    }


class _Catalog:
    def __init__(self, queue: QueueDef) -> None:
        self._queue = queue

    async def get(self, name: str, fresh: bool = False) -> QueueDef:
        return self._queue


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_steps", description=__doc__)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--only", help="one step (for callgrind)")
    args = parser.parse_args()
    found = steps(args.batch)
    chosen = {args.only: found[args.only]} if args.only else found
    total = 0.0
    for name, step in chosen.items():
        samples = []
        for _ in range(max(3, args.rounds // 100)):
            started = time.process_time()
            for _ in range(100):
                step()
            samples.append((time.process_time() - started) / 100 / args.batch * 1e6)
        median = statistics.median(samples)
        total += median
        print(f"{name:16} {median:6.2f} us/msg  [{min(samples):.2f}-{max(samples):.2f}]")
    print(f"{'total':16} {total:6.2f} us/msg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
