"""One client process of the soak (test_soak.py): random operations against a real daemon,
every result checked against a numpy model of what the session holds.

    python3 soak_worker.py ADDRESS CARRIER SEED SECONDS

CARRIER is ring, grpc or unary. Runs until SECONDS pass (or it is killed: the soak kills some
workers with SIGKILL on purpose), then prints one JSON line of counts and read latencies and exits
0. A wrong result prints "WRONG ..." and exits 3; an error other than the shared memory limit's
RESOURCE_EXHAUSTED exits 4 with its message.
"""

from __future__ import annotations

import json
import random
import sys
import time

import numpy as np

import cubed_client
from cubed_client import CubedError, ResourceExhaustedError

DTYPES = [np.float32, np.int32, np.float64, np.uint8, np.int64]
MAX_LIVE = 16            # Tensors a worker holds at once.
MAX_ELEMENTS = 1 << 14   # Per tensor: at most 128 KiB (float64, int64).
REGION_ELEMENTS = 1 << 18  # Now and then a 1-2 MiB tensor, which moves through a region.


def main() -> int:
    address, carrier, seed, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    kw = ({"transport": "unary", "lease": 2.0} if carrier == "unary" else
          {"transport": "stream", "carrier": carrier})
    counts = {"create": 0, "read": 0, "add": 0, "view_read": 0, "release": 0, "sync": 0,
              "usage": 0, "profile": 0, "exhausted": 0}
    latencies = []
    deadline = time.monotonic() + seconds
    with cubed_client.connect(address, timeout=30, **kw) as c:
        live = []  # (tensor, the array it must hold)

        def create() -> None:
            dt = rng.choice(DTYPES)
            n = REGION_ELEMENTS if rng.random() < 0.02 else rng.randint(1, MAX_ELEMENTS)
            shape = (n,) if rng.random() < 0.5 else (max(1, n // 16), 16 if n >= 16 else n)
            if np.dtype(dt).kind == "f":
                a = nrng.standard_normal(shape).astype(dt)
            else:
                a = nrng.integers(0, 100, shape).astype(dt)
            live.append((c.create(a), a))
            counts["create"] += 1

        while time.monotonic() < deadline:
            op = rng.random()
            try:
                if not live or (op < 0.25 and len(live) < MAX_LIVE):
                    create()
                elif op < 0.45:
                    t, a = rng.choice(live)
                    t0 = time.perf_counter()
                    got = t.read()
                    latencies.append(time.perf_counter() - t0)
                    if not np.array_equal(got, a):
                        print(f"WRONG read of {a.dtype}{a.shape}", flush=True)
                        return 3
                    counts["read"] += 1
                elif op < 0.60:
                    t, a = rng.choice(live)
                    # Integers wrap like numpy's; floats round the same (one IEEE add).
                    s = c.add(t, t)
                    with np.errstate(over="ignore"):
                        want = (a + a).astype(a.dtype)
                    if len(live) < MAX_LIVE:
                        live.append((s, want))
                    elif not np.array_equal(s.read(), want):
                        print(f"WRONG add of {a.dtype}{a.shape}", flush=True)
                        return 3
                    counts["add"] += 1
                elif op < 0.68:
                    t, a = rng.choice(live)
                    lo = rng.randrange(a.shape[0])
                    view = t[lo:]
                    if not np.array_equal(view.read(), a[lo:]):
                        print(f"WRONG view read of {a.dtype}{a.shape}[{lo}:]", flush=True)
                        return 3
                    counts["view_read"] += 1
                elif op < 0.85:
                    t, _ = live.pop(rng.randrange(len(live)))
                    t.close()
                    counts["release"] += 1
                elif op < 0.92:
                    c.sync()
                    counts["sync"] += 1
                elif op < 0.97:
                    c.memory_usage()
                    counts["usage"] += 1
                else:
                    with c.profile():
                        c.add(live[0][0], live[0][0])
                    counts["profile"] += 1
            except ResourceExhaustedError:
                # The daemon's memory limit is shared by every worker: a create or an output past
                # it fails (and, on the stream, poisons what depended on it). Start over clean.
                counts["exhausted"] += 1
                for t, _ in live:
                    t.close()
                live.clear()
                try:
                    c.sync()
                except CubedError:
                    pass
            except CubedError as e:
                print(f"ERROR {type(e).__name__}: {e}", flush=True)
                return 4
    latencies.sort()
    n = len(latencies)
    print(json.dumps({"counts": counts, "reads": n,
                      "p50_us": latencies[n // 2] * 1e6 if n else None,
                      "p99_us": latencies[min(n - 1, n * 99 // 100)] * 1e6 if n else None,
                      "latencies_us": [round(x * 1e6) for x in latencies]}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
