"""A 4-byte read through the Python SDK (native core, command ring) against torch's .item() in the
same process, medians of 3000, twice (issue 12: the read round trip <= 2x .item()):

  python3 small_read_vs_item.py CUBED_BINARY DIR_OF_KERNELS_VS_TORCH
"""
import sys, time, statistics
import numpy as np, torch
sys.path.insert(0, sys.argv[2])
import cubed_client
from kernels_vs_torch import start_daemon
def med(f, n=3000):
    for _ in range(300): f()
    xs = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); xs.append(time.perf_counter() - t0)
    return statistics.median(xs) * 1e6
x = torch.ones(1, device="cuda")
daemon, sock = start_daemon(sys.argv[1], "cuda")
try:
    with cubed_client.connect(f"unix:{sock}", core="native") as c:
        t = c.create(np.ones(1, np.float32))
        for r in range(2):
            a = med(lambda: c.read(t)); b = med(lambda: x.item())
            print(f"{sys.argv[1].split('/')[-1]}: read {a:.2f} us, .item() {b:.2f} us, {a / b:.2f}x")
finally:
    daemon.terminate(); daemon.wait()
