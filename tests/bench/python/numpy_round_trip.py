"""Python SDK against PyTorch in-process on the same GPU (issue 12's Python goals), same run:

  * 256 MiB from numpy to the device and back: cubed's create() + read() (on a local daemon the
    SDK stages the bytes in a shared-memory region) against torch.from_numpy(x).cuda() + .cpu()
    (pageable) and the same through pinned memory. Goal: >= 1.0x PyTorch's pageable path.
  * A 4-byte read round trip: cubed read() of a 1-element tensor against torch's .item().
    Goal: <= 2x. Over the command ring (the default: the waiting thread polls for what the
    daemon suggests), the ring without polling (connect(spin=0)) and with 200 us of it, and
    for comparison the gRPC stream.
  * A chain of 20,000 1-element a + b then sync against PyTorch eager on the same GPU.
    Goal: >= 0.5x. Over both carriers likewise.

  python3 numpy_round_trip.py CUBED_BINARY [--backend=cuda] [--repeats=7]

Starts the daemon itself on a temporary Unix socket; prints a table with medians [min..max].
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import cubed_client


def summary(xs):
    return f"{statistics.median(xs):.3g} [{min(xs):.3g}..{max(xs):.3g}]"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cubed")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--chain", type=int, default=20000)
    args = ap.parse_args()
    import torch  # Only the baselines need it.

    d = tempfile.mkdtemp(prefix="cubed-pybench-")
    sock, ready = os.path.join(d, "cubed.sock"), os.path.join(d, "ready")
    daemon = subprocess.Popen([args.cubed, f"--listen={sock}", f"--ready_file={ready}",
                               f"--backend={args.backend}"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(ready) and open(ready).read().endswith("\n")):
            if daemon.poll() is not None or time.monotonic() > deadline:
                print("the daemon did not start", file=sys.stderr)
                return 1
            time.sleep(0.02)
        n = args.mib << 20
        x = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8).view(np.float32)
        rows = []
        with cubed_client.connect(f"unix:{sock}") as c:
            ours = []
            for r in range(args.repeats + 1):
                t0 = time.perf_counter()
                t = c.create(x)
                back = c.read(t)
                dt = time.perf_counter() - t0
                if r == 0:
                    assert np.array_equal(back.view(np.uint8), x.view(np.uint8)), "different bytes"
                else:
                    ours.append(2 * n / dt / 1e9)
                del t, back
            pageable, pinned = [], []
            for r in range(args.repeats + 1):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                y = torch.from_numpy(x).cuda()
                z = y.cpu().numpy()
                dt = time.perf_counter() - t0
                if r > 0:
                    pageable.append(2 * n / dt / 1e9)
                del y, z
            host = torch.from_numpy(x).pin_memory()
            out = torch.empty_like(host).pin_memory()
            for r in range(args.repeats + 1):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                y = host.cuda(non_blocking=True)
                out.copy_(y, non_blocking=True)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                if r > 0:
                    pinned.append(2 * n / dt / 1e9)
                del y
            rows.append(("256 MiB numpy -> device -> numpy", "GB/s", ours, "torch pageable .cuda() + .cpu()",
                         pageable, ">= 1.0x", statistics.median(ours) / statistics.median(pageable) >= 1.0))
            rows.append(("  (same, against pinned)", "GB/s", ours, "torch pinned copies", pinned, "", None))

        g = torch.ones(1, device="cuda")
        g.item()
        tl = []
        for _ in range(200):
            t0 = time.perf_counter()
            g.item()
            tl.append((time.perf_counter() - t0) * 1e6)
        ga, gb = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")
        torch_chain = []
        for r in range(args.repeats + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.chain):
                gc = ga + gb
            torch.cuda.synchronize()
            if r > 0:
                torch_chain.append(args.chain / (time.perf_counter() - t0))
        del gc
        # The ring with the default polling (connect(spin=None)), without it, and gRPC.
        for carrier, spin, label in (("ring", None, "ring"), ("ring", 0.0, "ring, spin=0"),
                                     ("ring", 2e-4, "ring, spin=200us"), ("grpc", None, "grpc")):
            with cubed_client.connect(f"unix:{sock}", carrier=carrier, spin=spin) as c:
                assert c.carrier == carrier, c.carrier
                one = c.create(np.ones(1, np.float32))
                c.read(one)
                lat = []
                for _ in range(200):
                    t0 = time.perf_counter()
                    c.read(one)
                    lat.append((time.perf_counter() - t0) * 1e6)
                rows.append((f"4-byte read round trip ({label})", "us", lat, "torch .item()", tl,
                             "<= 2x" if label == "ring" else "",
                             statistics.median(lat) / statistics.median(tl) <= 2.0
                             if label == "ring" else None))
                if spin is not None:
                    continue
                a1, b1 = c.create(np.ones(1, np.float32)), c.create(np.ones(1, np.float32))
                c.sync()
                chain = []
                for r in range(args.repeats + 1):
                    t0 = time.perf_counter()
                    for _ in range(args.chain):
                        out = c.add(a1, b1)
                    c.sync()
                    if r > 0:
                        chain.append(args.chain / (time.perf_counter() - t0))
                    del out
                assert c.read(c.add(a1, b1))[0] == 2.0
                rows.append((f"1-element a + b, {args.chain} then sync ({carrier})", "ops/s",
                             chain, "torch eager a + b", torch_chain,
                             ">= 0.5x" if carrier == "ring" else "",
                             statistics.median(chain) / statistics.median(torch_chain) >= 0.5
                             if carrier == "ring" else None))
        print(f"numpy_round_trip.py, backend {args.backend}, {args.repeats} repeats, "
              f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        print("| figure | unit | cubed p50 [min..max] | baseline | baseline p50 [min..max] | ratio | goal | verdict |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, unit, a, bname, b, goal, met in rows:
            ratio = statistics.median(a) / statistics.median(b)
            verdict = "" if met is None else ("met" if met else "missed")
            print(f"| {name} | {unit} | {summary(a)} | {bname} | {summary(b)} | {ratio:.3f}x | {goal} | {verdict} |")
        return 0
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    sys.exit(main())
