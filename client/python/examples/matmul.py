#!/usr/bin/env python3
"""Multiplies two large random matrices through a cubed daemon; prints the times and the memory
usage, and checks the product against numpy.

    python3 examples/matmul.py                         # the default socket (deploy/run.sh)
    python3 examples/matmul.py --address=unix:/tmp/cubed.sock --n=4096 --dtype=float64
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import cubed_client


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default=None, help="daemon address (default: its socket)")
    ap.add_argument("--n", type=int, default=2048, help="matrix size n x n (default 2048)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--transport", default="auto", choices=["auto", "stream", "unary"])
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.n, args.n)).astype(args.dtype)
    b = rng.standard_normal((args.n, args.n)).astype(args.dtype)

    with cubed_client.connect(args.address, transport=args.transport) as client:
        info = client.info()
        print(f"daemon {info.version}: {info.backend} device '{info.name}', "
              f"transport {client.transport}")
        before = client.memory_usage()

        t0 = time.perf_counter()
        ta, tb = client.create(a), client.create(b)
        client.sync()
        t1 = time.perf_counter()
        with client.profile() as p:
            tc = ta @ tb
        t2 = time.perf_counter()
        c = client.read(tc)
        t3 = time.perf_counter()

        usage = client.memory_usage()
        flops = 2.0 * args.n ** 3
        print(f"upload   {t1 - t0:8.3f} s  ({mib(a.nbytes + b.nbytes)})")
        print(f"matmul   {t2 - t1:8.3f} s  wall, {p.duration:.3f} s device "
              f"({flops / p.duration / 1e9:.1f} GFLOP/s)" if p.duration else "")
        print(f"download {t3 - t2:8.3f} s  ({mib(c.nbytes)})")
        print(f"memory   {usage.number_allocs - before.number_allocs} allocations, "
              f"{mib(usage.bytes_in_use)} in use, {mib(usage.bytes_reserved)} reserved")
        want = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.max(np.abs(c - want)) / np.max(np.abs(want)))
        print(f"max relative error vs numpy (float64): {err:.2e}")


if __name__ == "__main__":
    main()
