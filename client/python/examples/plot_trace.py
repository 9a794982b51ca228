"""Draws a cubed trace (Chrome trace-event JSON from client.trace() or cubectl trace) as a
timeline PNG: one lane per category (kernel launches, their runs on the device where measured,
memory, transfer, sync), a bar per command, the longest kernels named. Needs matplotlib (pip install matplotlib); for docs and quick looks, where
Perfetto's UI (https://ui.perfetto.dev) is not at hand.

    python3 plot_trace.py trace.json -o trace.png [--title TEXT] [--until MS]
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LANES = ["kernel", "device", "memory", "transfer", "sync"]  # "device": kernels' runs (CUDA).
COLORS = {"kernel": "#4c72b0", "device": "#dd8452", "memory": "#55a868", "transfer": "#c44e52",
          "sync": "#8172b2"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--title", default=None)
    ap.add_argument("--until", type=float, default=None,
                    help="draw the first MS milliseconds only")
    args = ap.parse_args()
    with open(args.trace, encoding="utf-8") as f:
        doc = json.load(f)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    fig, ax = plt.subplots(figsize=(12, 3.2), dpi=120)
    for e in events:
        lane = LANES.index(e["cat"]) if e["cat"] in LANES else len(LANES) - 1
        ax.broken_barh([(e["ts"] / 1000.0, max(e["dur"] / 1000.0, 0.002))], (lane - 0.4, 0.8),
                       facecolors=COLORS.get(e["cat"], "grey"), linewidth=0)
    runs = [e for e in events if e["cat"] == "device"] or [e for e in events if e["cat"] == "kernel"]
    longest = sorted(runs, key=lambda e: -e["dur"])[:6]
    for e in longest:
        ax.annotate(e["name"], (e["ts"] / 1000.0, -0.55), fontsize=7, rotation=30,
                    ha="left", va="top")
    ax.set_yticks(range(len(LANES)))
    ax.set_yticklabels(LANES)
    ax.set_ylim(-1.4, len(LANES) - 0.4)
    if args.until is not None:
        ax.set_xlim(-0.01 * args.until, args.until)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first command (host clock; device runs placed on it)")
    other = doc.get("otherData", {})
    title = args.title or f"cubed trace: session {other.get('session', '?')}"
    commands = sum(1 for e in events if e["cat"] != "device")
    ax.set_title(f"{title} ({commands} commands)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output)


if __name__ == "__main__":
    main()
