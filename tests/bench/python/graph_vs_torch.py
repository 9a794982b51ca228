"""Recorded graphs from the Python SDK against PyTorch's CUDA graphs on the same GPU (issue 13,
P11), same run:

  * A graph of 1000 1-element `a + b` (each add's output feeding the next) recorded once with
    client.record() and replayed REPLAYS times then synced, adds/s, against torch.cuda.graph of
    the same 1000 adds replayed the same way. Goal: faster than PyTorch's replay.
  * The same 1000 adds sent one launch at a time (client) and run eagerly (torch), for what a
    replay saves.
  * A replay with new bindings each time (two sets of inputs, alternating), which on CUDA keeps
    one captured CUDA graph per set.

  python3 graph_vs_torch.py CUBED_BINARY [--backend=cuda] [--repeats=7] [--replays=100]

Starts the daemon itself on a temporary Unix socket; prints a table with medians [min..max]. On
the CPU backend (no torch GPU) only cubed's rows are printed.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import cubed_client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels_vs_torch import start_daemon  # noqa: E402

NODES = 1000


def summary(xs):
    return f"{statistics.median(xs):.4g} [{min(xs):.4g}..{max(xs):.4g}]"


def timed(repeats, fn):
    fn()  # Warm-up.
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cubed")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--replays", type=int, default=100)
    args = ap.parse_args()
    daemon, sock = start_daemon(args.cubed, args.backend)
    rows = []
    try:
        with cubed_client.connect(f"unix:{sock}") as c:
            a = c.create(np.ones(1, np.float32))
            b = c.create(np.full(1, 0.5, np.float32))
            with c.record(a, b) as g:
                x = a
                for _ in range(NODES):
                    x = x + b
            out = x
            assert g.steps == NODES, g.steps

            def replays():
                for _ in range(args.replays):
                    g.replay(a, b)
                c.sync()

            secs = timed(args.repeats, replays)
            rows.append(("cubed replay of 1000 adds", [NODES * args.replays / s for s in secs]))
            got = float(c.read(out)[0])
            assert got == 1.0 + 0.5 * NODES, got

            a2 = c.create(np.full(1, 2.0, np.float32))
            b2 = c.create(np.full(1, 0.25, np.float32))

            def alternating():
                for i in range(args.replays):
                    if i % 2:
                        g.replay(a2, b2)
                    else:
                        g.replay(a, b)
                c.sync()

            secs = timed(args.repeats, alternating)
            rows.append(("cubed replay, two binding sets alternating",
                         [NODES * args.replays / s for s in secs]))

            def eager():
                y = a
                for _ in range(NODES):
                    y = y + b
                c.sync()

            secs = timed(args.repeats, eager)
            rows.append(("cubed 1000 adds one launch each", [NODES / s for s in secs]))
            g.close()

        if args.backend == "cuda":
            import torch
            ta = torch.ones(1, device="cuda")
            tb = torch.full((1,), 0.5, device="cuda")
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):  # Warm-up before capture, as PyTorch's docs ask.
                for _ in range(3):
                    y = ta
                    for _ in range(NODES):
                        y = y + tb
            torch.cuda.current_stream().wait_stream(s)
            tg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(tg):
                y = ta
                for _ in range(NODES):
                    y = y + tb
            tout = y

            def torch_replays():
                for _ in range(args.replays):
                    tg.replay()
                torch.cuda.synchronize()

            secs = timed(args.repeats, torch_replays)
            rows.append(("torch CUDA graph replay of 1000 adds",
                         [NODES * args.replays / s for s in secs]))
            assert float(tout.item()) == 1.0 + 0.5 * NODES

            def torch_eager():
                y = ta
                for _ in range(NODES):
                    y = y + tb
                torch.cuda.synchronize()

            secs = timed(args.repeats, torch_eager)
            rows.append(("torch eager 1000 adds", [NODES / s for s in secs]))
    finally:
        daemon.terminate()
        daemon.wait()

    print(f"graph_vs_torch.py, backend {args.backend}, {NODES} adds a graph, "
          f"{args.replays} replays a sample, {args.repeats} samples")
    for name, xs in rows:
        print(f"  {name:45s} {summary(xs)} adds/s")
    by = {name: statistics.median(xs) for name, xs in rows}
    if "torch CUDA graph replay of 1000 adds" in by:
        ratio = by["cubed replay of 1000 adds"] / by["torch CUDA graph replay of 1000 adds"]
        print(f"  replay vs torch CUDA graph: {ratio:.3f}x (goal: > 1.0x)")
        ratio = by["cubed 1000 adds one launch each"] / by["torch eager 1000 adds"]
        print(f"  one launch each vs torch eager: {ratio:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
