"""``python -m bench [--quick] [--only 1,3] [--workers 1,2] [--plots DIR] [--json PATH] [--in-process]``"""

import argparse
import asyncio
import json
import math
import os
import sys
import time
from typing import Any

from . import env
from .cpu import Meter
from .cells import CELLS, FULL, OWN_SERVER, QUICK, Context, Row


def fmt(value: float, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("msgs/s",):
        return f"{value:,.0f}"
    if unit in ("conns",):
        return f"{value:.0f}"
    if unit in ("MiB",):
        return f"{value:,.0f}"
    if unit == "x":
        return f"{value:.2f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def fmt_figure(figure: Any, unit: str) -> str:
    if figure is None or not figure.runs:
        return "-"
    if len(figure.runs) == 1:
        return fmt(figure.median, unit)
    return f"{fmt(figure.median, unit)} [{fmt(figure.low, unit)}-{fmt(figure.high, unit)}]"


def table(rows: list[Row]) -> str:
    header = ("cell", "workload", "unit", "spanq median [min-max]", "plain SQL median [min-max]", "spanq/SQL",
              "target", "", "spanq CPU us/msg c/s/pg", "SQL CPU us/msg c/pg")
    lines = [header]
    for r in rows:
        verdict = "" if r.met is None else ("met" if r.met else "MISSED")
        lines.append((r.cell, r.label, r.unit, fmt_figure(r.spanq, r.unit), fmt_figure(r.baseline, r.unit),
                      "-" if math.isnan(r.ratio) else f"{r.ratio:.2f}", r.target, verdict,
                      r.cpu.text() if r.cpu else "", r.baseline_cpu.text(server=False) if r.baseline_cpu else ""))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for i, line in enumerate(lines):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    notes = [f"  {r.cell} {r.label}: {r.note}" for r in rows if r.note]
    if notes:
        out += ["", "notes:"] + notes
    if any(r.cpu for r in rows):
        out += ["", "CPU us/msg: medians over the runs of CPU microseconds per message of the client (this process), "
                    "the spanq server (all its processes) and the database's PostgreSQL backends, then their sum "
                    "(bench/cpu.py)"]
    return "\n".join(out)


async def run_cell(key: str, ctx: Context) -> list[Row]:
    t0 = time.monotonic()
    print(f"cell {key}: {CELLS[key].__name__.removeprefix('cell_')}", flush=True)
    rows = await CELLS[key](ctx)
    print(f"  ({time.monotonic() - t0:.1f}s)", flush=True)
    return rows


async def run(args: argparse.Namespace) -> int:
    sizes = QUICK if args.quick else FULL
    only = [c.strip() for c in args.only.split(",")] if args.only else list(CELLS)
    workers = tuple(int(n) for n in args.workers.split(","))
    started = time.monotonic()
    print(f"spanq bench ({'quick' if args.quick else 'full'}): cells {', '.join(only)}", flush=True)
    server_url = env.pg_server_url()
    facts = env.machine_facts(server_url)
    print(f"machine: {facts['nproc']} cores ({facts['cpu']}), {facts['memory_gib']} GiB; {facts['postgresql']} "
          f"({facts['database']}); load {facts['load_at_start'][0]:.2f}", flush=True)
    rows: list[Row] = []
    with env.scratch_database(server_url) as db_url:
        from spanq_server.server import start  # noqa: F401  (fail early if the server does not import)

        meter = Meter(db_url)
        meter.start()
        async with env.spanq_server(db_url, in_process=args.in_process) as server:
            ctx = Context(target=server.target, db_url=db_url, sizes=sizes, server=server,
                          in_process=args.in_process, log=lambda s: print(s, flush=True), workers=workers,
                          meter=meter)
            for key, cell in CELLS.items():
                if key not in only or key in OWN_SERVER:
                    continue
                rows += await run_cell(key, ctx)
        for key in OWN_SERVER:
            if key in only:
                rows += await run_cell(key, ctx)
        meter.stop()
    elapsed = time.monotonic() - started
    rows.sort(key=lambda r: r.cell.split()[0])
    print()
    print(table(rows))
    if "budget" in ctx.extra:
        print("\nlatency budget (cell budget), one message at a time:\n" + ctx.extra["budget"]["table"])
    print(f"\n{len(rows)} figures in {elapsed:.0f}s; load average now {os.getloadavg()[0]:.2f}")
    results = {"mode": "quick" if args.quick else "full", "elapsed_s": elapsed, "machine": facts,
               "load_at_end": os.getloadavg(), "rows": [r.as_dict() for r in rows], "extra": ctx.extra,
               "table": table(rows)}
    path = args.json or str(env.BENCH_DIR / f"results-{results['mode']}.json")
    with open(path, "w") as out:
        json.dump(results, out, indent=1, default=str)
    print(f"results: {path}")
    if args.plots:
        from .plot import plot

        for written in plot(results, args.plots):
            print(f"plot: {written}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the same table with small sizes (under a minute)")
    parser.add_argument("--only", help="comma-separated cell numbers, e.g. 1,3")
    parser.add_argument("--json", help="where to write the results (default .spanq/bench/results-<mode>.json)")
    parser.add_argument("--plots", metavar="DIR", help="also write bench-latency.png and bench-depth.png there "
                                                       "(needs matplotlib)")
    parser.add_argument("--workers", default="1,2", help="the spanq serve --workers counts cell 9 runs each "
                                                          "workload against, comma-separated (default 1,2)")
    parser.add_argument("--in-process", action="store_true",
                        help="run the server in the bench's event loop (debugging; figures are not comparable)")
    args = parser.parse_args(argv)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
