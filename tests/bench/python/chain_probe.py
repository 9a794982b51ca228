"""The 1-element `a + b` chain (issue 12), 20,000 ops a round, four rounds: ops/s, for a profiler
run around it (GPU run 84: `perf record -a -- python3 chain_probe.py CUBED tests/bench/python`,
then the samples by thread and the loop's by symbol).

  python3 chain_probe.py CUBED_BINARY DIR_OF_KERNELS_VS_TORCH [BACKEND]   (default cuda)
"""
import sys, time
import numpy as np
sys.path.insert(0, sys.argv[2])
import cubed_client
from kernels_vs_torch import start_daemon
daemon, sock = start_daemon(sys.argv[1], sys.argv[3] if len(sys.argv) > 3 else "cuda")
try:
    with cubed_client.connect(f"unix:{sock}", core="native") as c:
        a = c.create(np.ones(1, np.float32)); b = c.create(np.ones(1, np.float32))
        for rep in range(4):
            x = a
            t0 = time.perf_counter()
            for _ in range(20000):
                x = x + b
            x.read()
            print(f"chain: {20000 / (time.perf_counter() - t0):,.0f} ops/s")
finally:
    daemon.terminate(); daemon.wait()
