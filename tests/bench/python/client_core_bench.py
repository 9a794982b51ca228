"""The Python SDK on its two cores against the C++ SDK, on one daemon, in the same run (issue 13,
"One client core": Python >= 0.9x the C++ SDK on P2 and P3, a 4-byte read within 1.2x):

  L1  a 4-byte read, waited for, one at a time: median microseconds (lower is better);
  P2  pipelined Execute fill(1 x f32), N launches then a sync per sample: median cmd/s;
  P2+ the same with ``a + b`` (a new output each time: empty + execute + release), ops/s;
  P3  create + read of 256 MiB through each SDK's defaults, 2 x bytes / wall: median GB/s.

The C++ figures come from cubed_sdk_bench (tests/bench/sdk_core_bench.cc), run against the same
daemon; the Python ones from connect(core="native") (libcubed_client_c.so) and
connect(core="python") in this process, one after the other; "py ctypes" is the native core with
its compiled launch turned off (where it is built), the baseline of that extension.

  python3 client_core_bench.py CUBED_BINARY [--sdk-bench=PATH] [--library=PATH] [--tcp]
                               [--backend=cpu] [--reads=2000] [--executes=20000]
                               [--bytes=268435456] [--repeats=5] [--rounds=3] [--json=PATH]

Defaults find cubed_sdk_bench and the library in the build tree of CUBED_BINARY
(build/server/cubed -> build/tests/bench/cubed_sdk_bench, build/client/c_api/...); the library
also through $CUBED_CLIENT_LIBRARY. --tcp runs every client over TCP loopback instead of the
Unix socket (the C++ SDK then moves P3 through Upload / Download, the Python SDK inline).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import cubed_client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels_vs_torch import start_daemon  # noqa: E402


def start(binary, backend, tcp):
    """The daemon under test and the address to reach it: its socket, or its TCP port."""
    flags = ["--tcp=127.0.0.1:0", "--insecure_tcp"] if tcp else []
    daemon, sock = start_daemon(binary, backend, flags)
    address = f"unix:{sock}"
    if tcp:
        with open(os.path.join(os.path.dirname(sock), "ready")) as f:
            for line in f.read().splitlines():
                if line.startswith("tcp="):
                    address = line[len("tcp="):]
    return daemon, address


def measure_python(address, core, args):
    """L1, P2, P2+ and P3 of the Python SDK on ``core``."""
    out = {}
    with cubed_client.connect(address, core="native" if core == "ctypes" else core) as c:
        out["carrier"] = c.carrier
        if core == "ctypes":  # The native core without its compiled launch: the baseline of it.
            c._transport._target = None
        t = c.create(np.array([1.5], np.float32))
        samples = []
        for r in range(-100, args.reads):
            t0 = time.perf_counter()
            v = c.read(t)
            us = (time.perf_counter() - t0) * 1e6
            if v[0] != 1.5:
                raise RuntimeError("the 4-byte read returned a wrong value")
            if r >= 0:
                samples.append(us)
        out["read_us"] = statistics.median(samples)

        one = [cubed_client.Scalars(np.float32, [1.0])]
        for _ in range(200):
            c._launch("fill", [], t, scalars=one)  # One execute, no allocation: as the C++ side.
        c.sync()
        rates = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _ in range(args.executes):
                c._launch("fill", [], t, scalars=one)
            c.sync()
            rates.append(args.executes / (time.perf_counter() - t0))
        out["execute_per_s"] = statistics.median(rates)

        a = c.create(np.ones(1, np.float32))
        b = c.create(np.ones(1, np.float32))
        ops = max(1000, args.executes // 4)
        rates = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _ in range(ops):
                x = a + b
            c.sync()
            rates.append(ops / (time.perf_counter() - t0))
        del x
        out["add_per_s"] = statistics.median(rates)

        data = (np.arange(args.bytes, dtype=np.uint64) * 131 + 7).astype(np.uint8)
        gbps = []
        for r in range(-1, args.repeats):
            t0 = time.perf_counter()
            h = c.create(data)
            got = c.read(h)
            s = time.perf_counter() - t0
            if not np.array_equal(got, data):
                raise RuntimeError("read returned different bytes than create stored")
            del h, got
            if r >= 0:
                gbps.append(2.0 * args.bytes / s / 1e9)
        out["transfer_gbps"] = statistics.median(gbps)
    return out


def medians(rounds):
    """Per measurement, the median over rounds of each round's median."""
    out = {"carrier": rounds[0]["carrier"]}
    for key in ("read_us", "execute_per_s", "add_per_s", "transfer_gbps"):
        values = [r[key] for r in rounds if key in r]
        if values:
            out[key] = statistics.median(values)
    return out


def fmt(v):
    return f"{v:12.0f}" if v >= 1000 else f"{v:12.2f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("binary")
    p.add_argument("--sdk-bench", default=None)
    p.add_argument("--library", default=None)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--tcp", action="store_true")
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--executes", type=int, default=20000)
    p.add_argument("--bytes", type=int, default=256 << 20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.binary)))
    sdk_bench = args.sdk_bench or os.path.join(build, "tests", "bench", "cubed_sdk_bench")
    library = (args.library or os.environ.get("CUBED_CLIENT_LIBRARY") or
               os.path.join(build, "client", "c_api", "libcubed_client_c.so"))
    os.environ["CUBED_CLIENT_LIBRARY"] = library

    daemon, address = start(args.binary, args.backend, args.tcp)
    # "ctypes": the native core with its compiled launch off (Note [Compiled launch] in
    # cubed_client/_native.py), measured only where the extension is there to turn off.
    compiled = cubed_client._native.COMPILED_LAUNCH
    runs = {"cpp": [], "native": [], "ctypes": [], "python": []}
    try:
        for _ in range(args.rounds):  # Interleaved: a busy machine slows all three alike.
            cc = subprocess.run([sdk_bench, f"--address={address}", f"--reads={args.reads}",
                                 f"--executes={args.executes}", f"--bytes={args.bytes}",
                                 f"--repeats={args.repeats}"], capture_output=True, text=True,
                                timeout=1800)
            if cc.returncode != 0:
                raise RuntimeError(f"cubed_sdk_bench failed: {cc.stderr}")
            runs["cpp"].append(json.loads(cc.stdout))
            runs["native"].append(measure_python(address, "native", args))
            if compiled:
                runs["ctypes"].append(measure_python(address, "ctypes", args))
            runs["python"].append(measure_python(address, "python", args))
    finally:
        daemon.terminate()
        daemon.wait()
    cpp, native, pure = (medians(runs[k]) for k in ("cpp", "native", "python"))
    plain = medians(runs["ctypes"]) if compiled else None

    rows = [("L1", "4-byte read, median us", "read_us", "<= 1.2x C++ (lower is better)"),
            ("P2", "pipelined fill(1 x f32), cmd/s", "execute_per_s", ">= 0.9x C++"),
            ("P2+", "a + b (new output each), ops/s", "add_per_s", "report"),
            ("P3", f"create + read {args.bytes >> 20} MiB, GB/s", "transfer_gbps",
             ">= 0.9x C++")]
    link = "TCP loopback" if args.tcp else "Unix socket"
    print(f"Python SDK cores vs the C++ SDK, {args.backend} backend, {link}; carriers: "
          f"C++ {cpp['carrier']}, native {native['carrier']}, python {pure['carrier']}; medians "
          f"of {args.rounds} interleaved rounds; native's compiled launch: "
          f"{'on (ctypes: the same core with it off)' if compiled else 'not built'}")
    head = (f"{'id':4} {'measurement':34} {'C++ SDK':>12} {'py native':>12} {'py ctypes':>12} "
            f"{'py pure':>12} {'native/C++':>11} {'pure/C++':>9}  goal")
    print(head)
    print("-" * len(head))
    for rid, name, key, goal in rows:
        base = cpp.get(key)
        n, q = native[key], pure[key]
        cell = fmt(base) if base is not None else f"{'-':>12}"
        mid = fmt(plain[key]) if plain else f"{'-':>12}"
        rn = f"{n / base:10.2f}x" if base else f"{'-':>11}"
        rq = f"{q / base:8.2f}x" if base else f"{'-':>9}"
        print(f"{rid:4} {name:34} {cell} {fmt(n)} {mid} {fmt(q)} {rn} {rq}  {goal}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": runs, "tcp": args.tcp, "backend": args.backend}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
