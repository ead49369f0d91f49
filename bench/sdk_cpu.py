"""``python -m bench.sdk_cpu [--seconds S] [--runs R] [--against DIR]``

Client CPU per blocking call of ``spanq.Client`` (``send`` of one message, and
``get_queue``), and grpcio's generated blocking stub's Send as the floor, each in a fresh subprocess so that one client's threads do not
count against another's. With ``--against DIR`` the same calls through another
checkout's SDK (DIR, e.g. an export of main) too, runs interleaved: the before and
after of issue 22, item 4.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys

from . import env
from .spanq_side import SpanqQueue

CHILD = r"""
import json, sys, time, resource, uuid
target, queue, seconds, what = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
if what == "stub":
    import grpc
    from spanq_proto.v1 import queue_pb2, queue_pb2_grpc
    channel = grpc.insecure_channel(target)
    stub = queue_pb2_grpc.QueueServiceStub(channel)
    def request():
        out = queue_pb2.SendRequest(queue=queue, request_id=str(uuid.uuid4()))
        out.messages.add().payload.string_value = "x" * 64
        return out
    call = lambda: stub.Send(request())
else:
    import spanq
    client = spanq.Client(target)
    import atexit
    atexit.register(client.close)
    call = (lambda: client.send(queue, "x" * 64)) if what == "send" else (lambda: client.get_queue(queue))
call()
n, c0, t0 = 0, cpu(), time.perf_counter()
while time.perf_counter() - t0 < seconds:
    call()
    n += 1
print(json.dumps({"us_per_call": (cpu() - c0) / n * 1e6, "calls_per_s": n / (time.perf_counter() - t0)}))
"""


def child(target: str, queue: str, seconds: float, what: str, code: str | None) -> dict[str, float]:
    environment = dict(os.environ)
    if code is not None:
        environment["PYTHONPATH"] = os.pathsep.join([f"{code}/client", f"{code}/server"])
    out = subprocess.run([sys.executable, "-c", CHILD, target, queue, str(seconds), what], env=environment,
                         capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode:
        raise RuntimeError(f"{what} ({code or 'this tree'}) failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


async def run(args: argparse.Namespace) -> None:
    print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.runs} runs of {args.seconds:g}s each",
          flush=True)
    sides = {"this": None, **({"before": args.against} if args.against else {})}
    with env.scratch_database(env.pg_server_url()) as db_url:
        async with env.spanq_server(db_url) as server:
            queue = SpanqQueue(server.target, db_url, "bq_sdk_cpu")
            await queue.create()
            results: dict[tuple[str, str], list[dict[str, float]]] = {}
            try:
                for _ in range(args.runs):
                    for what in ("send", "get_queue", "stub"):
                        for side, code in sides.items():
                            if what == "stub" and side != "this":
                                continue
                            got = await asyncio.to_thread(child, server.target, queue.name, args.seconds, what, code)
                            results.setdefault((what, side), []).append(got)
            finally:
                await queue.drop()
                await queue.close()
    for (what, side), runs in results.items():
        us = [r["us_per_call"] for r in runs]
        rate = [r["calls_per_s"] for r in runs]
        print(f"{what:9} {side:6}: client CPU {statistics.median(us):6.0f} us/call [{min(us):.0f}-{max(us):.0f}]  "
              f"{statistics.median(rate):6,.0f} calls/s")
    print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sdk_cpu", description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", metavar="DIR", help="also measure DIR's SDK (a checkout or export)")
    args = parser.parse_args()
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
