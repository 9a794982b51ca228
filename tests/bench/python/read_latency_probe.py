"""Where a 4-byte read's round trip goes (issue 12's read goal): each stage of cubed read() of a
1-element tensor, from the daemon's trace of the same reads, against torch's .item() in the
same run.

  python3 read_latency_probe.py CUBED_BINARY [--backend=cuda] [--reads=500] [--core=python|native]
      [--daemon_flags=--loop_spin_us=200,...]

Stages (medians over the reads, microseconds; the client's and the daemon's clocks are the
same host's realtime clock):
  to daemon:   the SDK's read() called -> the daemon's session stream receives the command
               (the SDK encoding, the ring or socket, the daemon's wire thread and decoding)
  queued:      received -> the device loop starts it (the hop to the loop)
  on loop:     the loop's own work (queueing the copy)
  back:        the loop done -> read() returns (the copy on the device, the completion, the reply
               through the wire and the SDK's decoding and wake-up)
"""

import argparse
import statistics
import sys
import time

import numpy as np

import cubed_client
from kernels_vs_torch import start_daemon


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cubed")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--reads", type=int, default=500)
    ap.add_argument("--core", default="python")
    ap.add_argument("--carrier", default="ring")
    ap.add_argument("--daemon_flags", default="")
    ap.add_argument("--wait", default="block",
                    help="native core: 'poll' has the waiting thread poll the reply for 200 us "
                         "before it blocks (an experiment: what the wake-up costs)")
    args = ap.parse_args()
    if args.wait == "poll":
        from cubed_client import _native
        blocking_claim = _native.NativeTransport._claim

        def polling_claim(self, future, timeout):
            entry = self._pending.get(future._cubed_tag)
            if entry is not None:
                until = time.perf_counter() + 2e-4
                while not self._lib.cubed_reply_done(entry[2]) and time.perf_counter() < until:
                    pass
            return blocking_claim(self, future, timeout)

        _native.NativeTransport._claim = polling_claim
    flags = [f for f in args.daemon_flags.split(",") if f]
    daemon, sock = start_daemon(args.cubed, args.backend, flags)
    try:
        with cubed_client.connect(f"unix:{sock}", core=args.core, carrier=args.carrier) as c:
            one = c.create(np.ones(1, np.float32))
            for _ in range(50):
                c.read(one)
            sent, got = [], []
            with c.trace(max_events=args.reads + 16) as t:
                for _ in range(args.reads):
                    t0 = time.time_ns()
                    c.read(one)
                    t1 = time.time_ns()
                    sent.append(t0)
                    got.append(t1)
            reads = [e for e in t.events if e.name == "read"]
            if len(reads) != args.reads:
                print(f"the trace holds {len(reads)} reads, not {args.reads}", file=sys.stderr)
                return 1
            stages = {"round trip": [], "to daemon": [], "queued": [], "on loop": [], "back": []}
            for t0, t1, e in zip(sent, got, reads):
                arrival = e.start_ns - e.queued_ns
                stages["round trip"].append((t1 - t0) / 1e3)
                stages["to daemon"].append((arrival - t0) / 1e3)
                stages["queued"].append(e.queued_ns / 1e3)
                stages["on loop"].append(e.duration_ns / 1e3)
                stages["back"].append((t1 - e.start_ns - e.duration_ns) / 1e3)
            # The same reads untraced, for the trace's own cost.
            plain = []
            for _ in range(args.reads):
                t0 = time.perf_counter()
                c.read(one)
                plain.append((time.perf_counter() - t0) * 1e6)
        item = []
        if args.backend == "cuda":
            import torch
            g = torch.ones(1, device="cuda")
            g.item()
            for _ in range(args.reads):
                t0 = time.perf_counter()
                g.item()
                item.append((time.perf_counter() - t0) * 1e6)
        print(f"4-byte read stages, core={args.core} carrier={args.carrier} wait={args.wait} "
              f"flags={flags or 'default'} ({args.reads} reads; us: median [p10..p90])")
        for name, xs in stages.items():
            q = statistics.quantiles(xs, n=10)
            print(f"  {name:<11} {statistics.median(xs):8.1f} [{q[0]:.1f}..{q[-1]:.1f}]")
        print(f"  untraced    {statistics.median(plain):8.1f}")
        if item:
            print(f"  torch .item() {statistics.median(item):6.1f}   ratio untraced/.item() "
                  f"{statistics.median(plain) / statistics.median(item):.2f}x (goal <= 2x)")
        return 0
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
