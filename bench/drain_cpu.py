"""``python -m bench.drain_cpu [--messages N] [--runs R] [--batch B] [--against DIR] [--py-spy OUT [--native] [--gil]]``

The drain cell's workload alone (one Receive stream of ``--batch`` per response,
acked as it reads, against ``--messages`` preloaded messages) beside the
plain-SQL baseline's drain, runs interleaved, the first of each a warm-up:
messages/s and CPU microseconds per message by process (bench/cpu.py). With
``--against DIR`` a second server runs another checkout's code (DIR, e.g. an
export of main) on its own queue, its runs interleaved with this tree's: a
before/after of the server's CPU per message that the machine's load hurts alike
(issue 22, item 3). With ``--py-spy OUT.svg`` (or OUT.txt: collapsed stacks)
py-spy (``pip install py-spy``) records this tree's server over its runs.
"""

import argparse
import asyncio
import contextlib
import os
import pathlib
import subprocess
import sys
from typing import Any

from . import env
from .baseline import SqlQueue
from .cpu import Meter, nothing, server_cpu_of
from .spanq_side import SpanqQueue
from .stats import CpuFigures, Figure


async def run(args: argparse.Namespace) -> None:
    server_url = env.pg_server_url()
    print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.runs} runs of {args.messages:,} messages, "
          f"{args.batch} per batch", flush=True)
    with env.scratch_database(server_url) as db_url, contextlib.ExitStack() as stack:
        meter = Meter(db_url)
        meter.start()
        stack.callback(meter.stop)
        async with contextlib.AsyncExitStack() as servers:
            sides: dict[str, tuple[Any, Any]] = {}
            if args.against:
                before = await servers.enter_async_context(
                    env.spanq_server(db_url, log_name="server-before.log", code=args.against))
                sides["before"] = (SpanqQueue(before.target, db_url, "bq_drain_before"), before)
            this = await servers.enter_async_context(env.spanq_server(db_url))
            sides["spanq"] = (SpanqQueue(this.target, db_url, "bq_drain_cpu"), this)
            sides["sql"] = (SqlQueue(db_url, "bt_drain_cpu"), None)
            for queue, _ in sides.values():
                await queue.create()
            rates = {side: Figure() for side in sides}
            cpu = {side: CpuFigures() for side in sides}
            spy = None
            try:
                for i in range(args.runs + 1):
                    if i == 1 and args.py_spy:
                        spy = subprocess.Popen(
                            [str(pathlib.Path(sys.executable).parent / "py-spy"), "record", "--pid", str(this.pid),
                             "--rate", "250", "--output", args.py_spy,
                             "--format", "raw" if args.py_spy.endswith(".txt") else "flamegraph",
                             # C frames need the process paused for each sample
                             *(["--native"] if args.native else ["--nonblocking"]), *(["--gil"] if args.gil else [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    for side, (queue, server) in sides.items():
                        await queue.truncate()
                        await queue.preload(args.messages)
                        await queue.vacuum()
                        with meter.window(nothing if server is None else server_cpu_of(server)) as use:
                            rate = await queue.drain(args.messages, 1, args.batch)
                        if i:
                            rates[side].add(rate)
                            cpu[side].add(use.per_message_us(args.messages))
            finally:
                if spy is not None:
                    spy.send_signal(2)
                    spy.wait(30)
                for queue, server in sides.values():
                    await queue.drop()
                    if server is not None:
                        await queue.close()
    for side in sides:
        c = cpu[side]
        print(f"{side:6}: {rates[side].median:8,.0f} msgs/s [{rates[side].low:,.0f}-{rates[side].high:,.0f}]  "
              f"CPU us/msg client {c.client.median:.1f} server {c.server.median:.1f} postgres {c.postgres.median:.1f}"
              f" (server runs: {', '.join(f'{x:.1f}' for x in c.server.runs)})")
    sql = cpu["sql"].total
    for side in (s for s in sides if s != "sql"):
        print(f"{side}/SQL: msgs/s {rates[side].median / rates['sql'].median:.2f}, CPU per message "
              f"{cpu[side].total / sql:.2f}")
    print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if spy is not None:
        print(f"py-spy: {args.py_spy}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_cpu", description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--against", metavar="DIR", help="also run DIR's server (a checkout or export) as 'before'")
    parser.add_argument("--py-spy", metavar="OUT", help="record this tree's server with py-spy (OUT.txt: raw stacks)")
    parser.add_argument("--native", action="store_true", help="py-spy also samples C frames (gRPC's, psycopg's)")
    parser.add_argument("--gil", action="store_true", help="py-spy samples only the thread holding the GIL")
    args = parser.parse_args()
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
