"""The soak (issue 15): many client processes (soak_worker.py) over every carrier against one real
daemon, mixing creates, reads checked against a model, kernels, views, releases, syncs, usage
queries and profiles, while some of them are killed with SIGKILL and replaced. At the end every
byte and allocation is back (the killed clients' sessions too) and the daemon's RSS grew by a
bounded amount (not checked under AddressSanitizer, whose quarantine keeps freed memory); read
latency under load is printed.

Bounded: CUBED_SOAK_SECONDS (default 20) with CUBED_SOAK_CLIENTS (default 6) processes. By hand,
as issue 15 asks: CUBED_SOAK_SECONDS=600 CUBED_SOAK_CLIENTS=16.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import grpc
import pytest

import cubed_client
from cubed_client._proto import compute_pb2, compute_pb2_grpc

from conftest import Daemon

HERE = os.path.dirname(os.path.abspath(__file__))
SECONDS = float(os.environ.get("CUBED_SOAK_SECONDS", "20"))
CLIENTS = int(os.environ.get("CUBED_SOAK_CLIENTS", "6"))
# RSS may grow while pools and caches warm up (measured from half the run on: on a loaded 2-core
# machine the warm-up outlasted the first quarter of a 20 s run, 21 -> 49 MB, while a 60 s run
# measured from 15 s grew 41 -> 58 MB and an unloaded 20 s run 49 -> 59 MB) by this much of the
# daemon's RSS then, plus a fixed slack for the allocator's arenas.
RSS_GROWTH = 0.25
RSS_SLACK_KB = 16 << 10


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def rss_profile(samples: list, rss_end: int) -> str:
    """The daemon's RSS at a few points of the run, and its growth over each half: a leak grows in
    the second half as in the first, warm-up (allocator arenas, gRPC's pools) does not."""
    if not samples:
        return "soak: no RSS samples"
    total = samples[-1][0]

    def at(fraction: float) -> int:
        return next(kb for t, kb in samples if t >= fraction * total)

    first, mid = samples[0][1], at(0.5)
    points = ", ".join(f"{f * total:.0f} s {at(f)}" for f in (0.1, 0.25, 0.5, 0.75))
    return (f"soak: RSS kB: {samples[0][0]:.0f} s {first}, {points}, end {rss_end}, max "
            f"{max(kb for _, kb in samples)}; growth first half {100 * (mid / first - 1):+.1f} %, "
            f"second half {100 * (rss_end / mid - 1):+.1f} %")


def open_sessions(d: Daemon) -> int:
    with grpc.insecure_channel(d.address) as channel:
        s = compute_pb2_grpc.ComputeStub(channel).GetStats(compute_pb2.GetStatsRequest(),
                                                           timeout=30)
    return sum(x.sessions for x in s.devices)


def sanitized(pid: int) -> bool:
    """Whether the daemon runs with AddressSanitizer, whose quarantine of freed memory (256 MiB by
    default) grows RSS by design."""
    with open(f"/proc/{pid}/maps") as f:
        return any("libasan" in line or "clang_rt.asan" in line for line in f)


def test_soak(request: pytest.FixtureRequest) -> None:
    d = Daemon(request.config.getoption("--cubed"), "--memory_limit=256MiB")
    rng = random.Random(int(os.environ.get("CUBED_SOAK_SEED", "20261202")))
    carriers = ["ring", "grpc", "unary"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    workers = []  # (process, carrier, killed)
    started = kills = 0

    def spawn(seconds: float) -> None:
        nonlocal started
        carrier = carriers[started % len(carriers)]
        started += 1
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "soak_worker.py"), d.address,
                              carrier, str(rng.randrange(1 << 30)), str(seconds)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        workers.append([p, carrier, False])

    try:
        for _ in range(CLIENTS):
            spawn(SECONDS)
        # The run starts when every first worker has its session: on a loaded 2-core machine
        # their start (Python, numpy, gRPC, the client core) took 5-10 s, and an RSS taken at
        # half the run from their spawn was the idle daemon's, before any warm-up.
        until = time.monotonic() + 60
        while open_sessions(d) < CLIENTS:
            exited = [p.returncode for p, _, _ in workers if p.poll() is not None]
            assert not exited, f"a worker exited before the run started: {exited}"
            assert time.monotonic() < until, "the workers did not all connect within 60 s"
            time.sleep(0.05)
        start = time.monotonic()
        end = start + SECONDS
        rss_warm = None
        rss_samples = []  # (seconds into the run, kB): the growth's shape, printed at the end.
        while time.monotonic() < end - 1:
            time.sleep(rng.uniform(0.3, 1.5))
            rss_samples.append((time.monotonic() - start, rss_kb(d.proc.pid)))
            if rss_warm is None and time.monotonic() - start > SECONDS / 2:
                rss_warm = rss_samples[-1][1]
            running = [w for w in workers if w[0].poll() is None and not w[2]]
            if running and time.monotonic() < end - 3:
                victim = rng.choice(running)
                victim[0].send_signal(signal.SIGKILL)
                victim[2] = True
                kills += 1
                spawn(max(1.0, end - time.monotonic()))
        results, failures = [], []
        for p, carrier, killed in workers:
            out, _ = p.communicate(timeout=120)
            if killed:
                continue
            if p.returncode != 0:
                failures.append(f"{carrier} worker exited {p.returncode}: {out.strip()[-2000:]}")
            else:
                results.append((carrier, json.loads(out.strip().splitlines()[-1])))
        assert not failures, "\n".join(failures)
        assert d.proc.poll() is None, f"the daemon died:\n{d.log()}"

        # Every session is gone (the killed unary clients' at their 2 s lease), and with them
        # every allocation.
        deadline = time.monotonic() + 30
        with cubed_client.connect(d.address, transport="unary") as c:
            while True:
                usage = c.memory_usage()
                if usage.number_allocs == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        assert usage.number_allocs == 0 and usage.bytes_in_use == 0, usage
        rss_end = rss_kb(d.proc.pid)
        reads = sum(r["reads"] for _, r in results)
        ops = sum(sum(r["counts"].values()) for _, r in results)
        print(f"\nsoak: {SECONDS:.0f} s, {CLIENTS} clients at a time, {started} started, {kills} "
              f"killed, {ops} operations, {reads} reads checked, 0 wrong; RSS {rss_warm} -> "
              f"{rss_end} kB after warm-up")
        for carrier, r in results:
            print(f"  {carrier}: p50 read {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us, "
                  f"{r['counts']}")
        print(rss_profile(rss_samples, rss_end))
        pooled = sorted(x for _, r in results for x in r["latencies_us"])
        if pooled:
            print(f"soak: reads of the {len(results)} workers that ran to the end, pooled: "
                  f"{len(pooled)}, p50 {pooled[len(pooled) // 2] / 1e3:.1f} ms, p99 "
                  f"{pooled[min(len(pooled) - 1, len(pooled) * 99 // 100)] / 1e3:.1f} ms")
        assert rss_warm is not None
        if not sanitized(d.proc.pid):
            assert rss_end <= rss_warm * (1 + RSS_GROWTH) + RSS_SLACK_KB, (
                f"daemon RSS grew from {rss_warm} to {rss_end} kB")
    finally:
        for p, _, _ in workers:
            if p.poll() is None:
                p.kill()
                p.wait()
        code = d.close()
        assert code == 0, f"cubed exited with {code} after SIGTERM"
