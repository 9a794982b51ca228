"""A daemon restart that keeps the sessions (issue 15, "Upgrades and restarts without losing
work"; goal: sessions restored in < 1 s + the time to move their bytes), timed from a Python
client's side, against the bound of moving the same bytes through the same filesystem, same run.

Each cycle: a daemon with --checkpoint_dir; one client (connect(resume_timeout=...), the command
ring) creates GIB gibibytes of tensors over HANDLES handles and syncs; then

  drain     the Drain RPC with checkpoint, until it answered (every handle read back, the
            checkpoint written, fsynced and renamed: docs/reliability.md)
  exit      ... until the old daemon's process ended
  restore   a new daemon with --restore on the same socket, from its start until its ready file
            (the checkpoint read, verified and every handle recreated before it serves)
  resume    ... until the same client object's next read answered (the SDK resumed the session)
  total     drain + exit + restore + resume: the client's work was unavailable this long

and, on the same filesystem, the baseline: the same bytes written to one file, fsynced, and read
back (write+fsync+read; the mean of one run just before the drain and one after the cycle, after
a first pass not counted), plus the same with SHA-256 of the bytes at both ends (what the
checkpoint adds to verify them). An empty start (a daemon with nothing to restore, until ready) is the fixed
part. Every handle's bytes are checked after the first cycle of each configuration. The files
are freshly written, so reads come from the page cache in both the checkpoint and the baseline.

  python3 tests/bench/python/restart_checkpoint.py CUBED_BINARY [--gib=1]
      [--handles=1024,16384] [--repeats=3] [--dir=DIR] [--carrier=ring|grpc]

Prints medians [min..max] of the repeats, milliseconds.
"""

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

import grpc
import numpy as np

import cubed_client
from cubed_client._proto import compute_pb2, compute_pb2_grpc


class Daemon:
    """cubed on ``socket``, started and waited for (its ready file)."""

    def __init__(self, binary: str, socket: str, folder: str, *flags: str) -> None:
        os.makedirs(folder, exist_ok=True)
        self.ready = os.path.join(folder, "ready")
        self.log = os.path.join(folder, "log")
        self.start = time.perf_counter()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, f"--listen={socket}", f"--ready_file={self.ready}", "--backend=cpu",
                 *flags], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while not (os.path.exists(self.ready) and open(self.ready).read().endswith("\n")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"cubed did not start:\n{open(self.log).read()[-3000:]}")
            time.sleep(0.001)
        self.ready_s = time.perf_counter() - self.start

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


def pattern(i: int, size: int) -> np.ndarray:
    """Handle ``i``'s bytes: distinct per handle and per position."""
    words = (np.arange(size // 4, dtype=np.uint32) * np.uint32(2 * i + 1) + np.uint32(i))
    return words.view(np.uint8)


def baseline(folder: str, chunks: List[np.ndarray], digest: bool) -> float:
    """Seconds to write ``chunks`` to one file in ``folder``, fsync it and the folder, and read
    it back (with SHA-256 of every chunk at both ends when ``digest``)."""
    path = os.path.join(folder, "baseline")
    total = sum(c.nbytes for c in chunks)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for c in chunks:
            if digest:
                hashlib.sha256(c).digest()
            f.write(c)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(folder, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    back = bytearray(total)
    with open(path, "rb", buffering=0) as f:
        view, at = memoryview(back), 0
        while at < total:
            n = f.readinto(view[at:])
            if not n:
                raise RuntimeError("short read")
            at += n
    if digest:
        at = 0
        for c in chunks:
            hashlib.sha256(view[at:at + c.nbytes]).digest()
            at += c.nbytes
    dt = time.perf_counter() - t0
    os.unlink(path)
    return dt


def cycle(args: argparse.Namespace, handles: int, verify: bool) -> Dict[str, float]:
    total = args.gib << 30
    size = total // handles
    top = tempfile.mkdtemp(prefix="cubed-restart-bench-", dir=args.dir)
    socket = os.path.join(top, "cubed.sock")
    checkpoint = os.path.join(top, "checkpoint")
    limit = f"--memory_limit={total + (total >> 2) + (64 << 20)}"
    out: Dict[str, float] = {}
    old = Daemon(args.cubed, socket, os.path.join(top, "old"), limit,
                 f"--checkpoint_dir={checkpoint}")
    new = None
    try:
        c = cubed_client.connect(f"unix:{socket}", carrier=args.carrier, resume_timeout=120,
                                 timeout=300)
        chunks = [pattern(i, size) for i in range(handles)]
        tensors = [c.create(x) for x in chunks]
        c.sync()
        # A first pass, not counted: on this VM, page-cache pages never used before cost ~3x
        # (9 s against 3 s for 1 GiB), and whichever wrote first would pay it. Then one pass
        # before the checkpoint and one after it.
        baseline(top, chunks, digest=False)
        before = baseline(top, chunks, digest=False)
        stub = compute_pb2_grpc.ComputeStub(grpc.insecure_channel(f"unix:{socket}"))
        t0 = time.perf_counter()
        r = stub.Drain(compute_pb2.DrainRequest(checkpoint=True), timeout=600)
        t1 = time.perf_counter()
        assert r.sessions == 1 and r.handles >= handles, r
        old.proc.wait(120)
        t2 = time.perf_counter()
        new = Daemon(args.cubed, socket, os.path.join(top, "new"), limit,
                     f"--restore={checkpoint}")
        t3 = time.perf_counter()
        first = c.read(tensors[0])
        t4 = time.perf_counter()
        assert c._transport.resumes == 1, "the client did not resume"
        assert np.array_equal(first, chunks[0]), "handle 0 came back different"
        out = {"drain": t1 - t0, "exit": t2 - t1, "restore": t3 - t2, "resume": t4 - t3,
               "total": t4 - t0, "checkpoint_bytes": float(r.bytes)}
        if verify:
            for i in range(0, handles, 64):  # 64 reads in flight at a time.
                group = tensors[i:i + 64]
                for j, got in enumerate(c.read_many(group)):
                    assert np.array_equal(got, chunks[i + j]), f"handle {i + j} differs"
        c.close()
        new.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
        after = baseline(top, chunks, digest=False)
        out["baseline"] = (before + after) / 2
        out["baseline_before"], out["baseline_after"] = before, after
        out["baseline_sha"] = baseline(top, chunks, digest=True)
        empty = Daemon(args.cubed, socket, os.path.join(top, "empty"), limit)
        out["empty_start"] = empty.ready_s
        empty.stop()
    finally:
        old.stop()
        if new is not None:
            new.stop()
        shutil.rmtree(top, ignore_errors=True)
    return out


def ms(xs: List[float]) -> str:
    return f"{1e3 * statistics.median(xs):,.0f} [{1e3 * min(xs):,.0f}..{1e3 * max(xs):,.0f}]"


def med(xs: List[float]) -> str:
    return f"{1e3 * statistics.median(xs):,.0f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cubed")
    ap.add_argument("--gib", type=int, default=1)
    ap.add_argument("--handles", default="1024,16384")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the checkpoint goes (default: $TMPDIR)")
    ap.add_argument("--carrier", default="ring", choices=["ring", "grpc"])
    args = ap.parse_args()
    rows: List[Tuple[int, Dict[str, List[float]]]] = []
    for handles in [int(h) for h in args.handles.split(",")]:
        runs: Dict[str, List[float]] = {}
        for r in range(args.repeats):
            for k, v in cycle(args, handles, verify=r == 0).items():
                runs.setdefault(k, []).append(v)
        rows.append((handles, runs))
        print(f"{handles} handles: " + ", ".join(f"{k} {ms(v)}" for k, v in runs.items()
                                                  if k != "checkpoint_bytes"), file=sys.stderr)
    print(f"{args.gib} GiB over N handles, CPU backend, carrier {args.carrier}, "
          f"medians [min..max] of {args.repeats}, ms")
    print("| handles | drain (checkpoint written) | old daemon exit | restore (start to ready) "
          "| client resumed | **total** | baseline write+fsync+read (before, after) "
          "| + SHA-256 both ends "
          "| empty start | total − baseline |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for handles, runs in rows:
        over = [t - b for t, b in zip(runs["total"], runs["baseline"])]
        print(f"| {handles:,} × {(args.gib << 30) // handles >> 10:,} KiB | {ms(runs['drain'])} "
              f"| {ms(runs['exit'])} | {ms(runs['restore'])} | {ms(runs['resume'])} "
              f"| **{ms(runs['total'])}** | {ms(runs['baseline'])} ({med(runs['baseline_before'])}, "
              f"{med(runs['baseline_after'])}) | {ms(runs['baseline_sha'])} "
              f"| {ms(runs['empty_start'])} | {ms(over)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
