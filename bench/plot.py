"""Plots from a results file: ``python -m bench.plot RESULTS.json DIR`` writes
DIR/bench-latency.png (latency percentiles) and DIR/bench-depth.png
(throughput against depth). Needs matplotlib (not a dependency of spanq:
``.venv/bin/pip install matplotlib``)."""

import json
import pathlib
import sys
from typing import Any


def plot(results: dict[str, Any], directory: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = pathlib.Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    extra = results.get("extra", {})
    machine = results.get("machine", {})
    postgresql = str(machine.get("postgresql", "")).split(" on ")[0]
    subtitle = f"{machine.get('nproc')} cores, {postgresql} ({results.get('mode')} run)"
    written = []

    panels = [(key, title) for key, title in (
        ("latency", "end-to-end latency, send -> received"),
        ("lateness", "scheduled delivery lateness"),
    ) if key in extra]
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
        for ax, (key, title) in zip(axes[0], panels):
            data = extra[key]
            labels = list(data["spanq"].keys())
            xs = range(len(labels))
            rate = f" @{data['rate']:g}/s" if "rate" in data else ""
            low = f" @{data['low_rate']:g}/s" if "low_rate" in data else ""
            lines = [("spanq", f"spanq, raw Receive stream{rate}", "o", "C0", "-"),
                     ("sdk", f"spanq, SDK subscriber callback{rate}", "^", "C2", "-"),
                     ("baseline", f"plain SQL{rate}", "s", "C1", "-"),
                     ("spanq_low", f"spanq, raw Receive stream{low}", "o", "C0", "--"),
                     ("baseline_low", f"plain SQL{low}", "s", "C1", "--")]
            for side, name, marker, color, style in lines:
                if side not in data:
                    continue
                ys = [max(data[side][p], 0.01) for p in labels]
                ax.plot(xs, ys, marker=marker, color=color, linestyle=style, label=name)
            ax.set_xticks(list(xs))
            ax.set_xticklabels([("max" if p == "100" else f"p{p}") for p in labels])
            ax.set_yscale("log")
            ax.set_ylabel("ms (log)")
            target = 10 if key == "latency" else 50
            ax.axhline(target, color="grey", linestyle="--", linewidth=1)
            ax.text(0, target * 1.1, f"target p99 < {target} ms", color="grey", fontsize=8)
            ax.set_title(title, fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"spanq latency percentiles - {subtitle}", fontsize=10)
        fig.tight_layout()
        path = out / "bench-latency.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))

    if "depth" in extra:
        data = extra["depth"]
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for side, name, marker in (("spanq", "spanq (Receive stream + Ack)", "o"),
                                   ("baseline", "plain SQL (SKIP LOCKED + DELETE)", "s")):
            med = [f["median"] for f in data[side]]
            low = [f["median"] - f["min"] for f in data[side]]
            high = [f["max"] - f["median"] for f in data[side]]
            ax.errorbar(data["depths"], med, yerr=[low, high], marker=marker, capsize=3, label=name)
        ax.set_xscale("log")
        ax.set_xlabel("messages pending")
        ax.set_ylabel(f"receive + ack msgs/s (1 receiver, {data['drain']:,} drained)")
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(f"throughput against depth\n{subtitle}", fontsize=10)
        fig.tight_layout()
        path = out / "bench-depth.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m bench.plot RESULTS.json DIR")
    with open(sys.argv[1]) as f:
        for written in plot(json.load(f), sys.argv[2]):
            print(written)
