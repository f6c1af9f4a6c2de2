"""The plots on docs/benchmarks.md, from the recorded results in benchmarks/results/.

    pip install -e ".[bench]"
    python benchmarks/plot.py [--out FOLDER] [NAME ...]

Reads resume.json, optimizer_to.json, dispatch_native.json and step.json (written by each benchmark with --save) and
writes docs/benchmarks/<name>.png, or FOLDER/<name>.png. Error bars run from the lowest to the highest run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no window
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PLOTS = [ROOT / "docs" / "benchmarks"]  # where save() writes; --out replaces it


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())


def errorbar(ax: Any, xs: list[float], medians: list[float], spreads: list[list[float]], label: str) -> None:
    low = [m - s[0] for m, s in zip(medians, spreads)]
    high = [s[1] - m for m, s in zip(medians, spreads)]
    ax.errorbar(xs, medians, yerr=[low, high], marker="o", capsize=3, label=label)


def resume() -> Path:
    sizes = load("resume")["sizes"]
    xs = [row["checkpoint_mib"] for row in sizes]
    fig, (device, host) = plt.subplots(1, 2, figsize=(11, 4))
    for pattern in ("helper", "map_device", "map_cpu", "map_cpu_mmap"):
        for ax, key in ((device, "device_ratio"), (host, "host_peak_mib")):
            errorbar(ax, xs, [r[f"{pattern}.{key}"] for r in sizes], [r[f"{pattern}.{key}_spread"] for r in sizes],
                     pattern)
    device.axhline(1.02, color="grey", linestyle="--", label="goal for helper (1.02x)")
    device.set(xscale="log", xlabel="checkpoint (MiB)", ylabel="device peak / final state",
               title="Device peak during the resume")
    host.set(xscale="log", xlabel="checkpoint (MiB)", ylabel="MiB over the baseline",
             title="Host anonymous memory peak")
    device.legend(fontsize=8)
    host.legend(fontsize=8)
    return save(fig, "resume")


def optimizer_to() -> Path:
    result = load("optimizer_to")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, direction in zip(axes, ("to_emulated", "to_cpu")):
        rows = result[direction]
        labels = [f"{row['mib']:g} MiB\n{row['tensors']}" for row in rows]
        xs = list(range(len(rows)))
        for mover in ("helper", "article", "trainer"):
            errorbar(ax, xs, [r[f"{mover}_ratio"] for r in rows], [r[f"{mover}_ratio_spread"] for r in rows], mover)
        ax.axhline(1.0, color="black", linewidth=0.8, label="floor (plain .to loop)")
        ax.axhline(1.1, color="grey", linestyle="--", label="goal for helper (1.1x)")
        ax.set_xticks(xs, labels, fontsize=7)
        ax.set_ylim(0.5, 2.0)  # a stalled run on a shared machine stretches a bar far beyond: cut it
        ax.set(xlabel="moment bytes / moment tensors", title=f"state {direction.replace('_', ' ')}")
    axes[0].set_ylabel("time / floor's time")
    axes[0].legend(fontsize=8)
    return save(fig, "optimizer_to")


def dispatch() -> Path:
    """The native core's figures (dispatch_native.json) against CPU, beside what a trivial Python subclass pays."""
    result = load("dispatch_native")
    fig, ax = plt.subplots(figsize=(9, 4))
    names = ["small op\nvs CPU's", "tiny Adam step\nvs CPU", "the step's own cost\n(no engine hand-off)",
             "same step, trivial\nwrapper vs CPU"]
    medians = [result["op_cpu_ratio"], result["tiny_step_ratio"], result["tiny_step_own_ratio"],
               result["tiny_step_floor_ratio"]]
    spreads = [result["op_cpu_ratio_spread"], result["tiny_step_ratio_spread"], result["tiny_step_own_ratio_spread"],
               result["tiny_step_floor_ratio_spread"]]
    low = [m - s[0] for m, s in zip(medians, spreads)]
    high = [s[1] - m for m, s in zip(medians, spreads)]
    ax.bar(names, medians, yerr=[low, high], capsize=4, color=["tab:blue", "tab:orange", "tab:green", "tab:grey"])
    for x, goal in enumerate((2.0, 1.5, 1.5)):
        ax.hlines(goal, x - 0.4, x + 0.4, colors="grey", linestyles="--")
        ax.annotate(f"goal {goal}x", (x, goal), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
    ax.set(ylabel="time / CPU's time", title="Emulator overhead (native core)")
    return save(fig, "dispatch")


def step() -> Path:
    sizes = load("step")["sizes"]
    xs = [row["parameters"] for row in sizes]
    fig, (ratio, times) = plt.subplots(1, 2, figsize=(11, 4))
    errorbar(ratio, xs, [r["ratio"] for r in sizes], [r["ratio_spread"] for r in sizes], "emulated / CPU")
    ratio.axhline(1.0, color="black", linewidth=0.8, label="CPU")
    ratio.axhline(1.5, color="grey", linestyle="--", label="target for the ~1M model (1.5x)")
    ratio.set(xscale="log", xlabel="parameters", ylabel="emulated step time / CPU step time",
              title="One Adam step: emulated against CPU")
    ratio.set_ylim(bottom=0)
    ratio.legend(fontsize=8)
    for device in ("cpu", "emulated"):
        times.plot(xs, [r[f"{device}_ms"] for r in sizes], marker="o", label=device)
    times.set(xscale="log", yscale="log", xlabel="parameters", ylabel="ms per step (median)",
              title="Step time")
    times.legend(fontsize=8)
    return save(fig, "step")


def save(fig: Any, name: str) -> Path:
    PLOTS[0].mkdir(parents=True, exist_ok=True)
    out = PLOTS[0] / f"{name}.png"
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"written to {out}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the plots here instead of docs/benchmarks/")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"some of {', '.join(PLOTTERS)} (default: all)")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(PLOTTERS))
    if unknown:
        parser.error(f"no plot named {', '.join(unknown)}; the plots are {', '.join(PLOTTERS)}")
    if args.out:
        PLOTS[0] = args.out
    for name in args.names or PLOTTERS:
        PLOTTERS[name]()


PLOTTERS = {"resume": resume, "optimizer_to": optimizer_to, "dispatch": dispatch, "step": step}

if __name__ == "__main__":
    main()
