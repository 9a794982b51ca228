"""A torch producer process killed while the daemon maps the memory it shared through
client.from_dlpack (docs/operations.md, "Shared tensors"). CUDA documents freeing exported memory
before the importer closed it as undefined, and a producer's death frees it: what the daemon
promises is that it serves on with its device not lost, that the session that holds the import
and new sessions keep working, and that the release (or the session's end) closes the mapping and
drops the import gauges; the daemon then exits 0 on SIGTERM. What reading the dead producer's
memory gives on the GPU's driver is printed (run with -s) for the operations guide. CUDA backend
with torch only; the CPU form is tests/import/import_test.cc."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Iterator

import numpy as np
import pytest

import conftest
import cubed_client
from cubed_client._proto import compute_pb2

# Joins the session named on its command line, imports a torch tensor (3 * arange) into it,
# prints the handle's id and size, waits for a line on stdin, then dies by SIGKILL: no release,
# no cleanup, its CUDA context torn down by the driver.
PRODUCER = textwrap.dedent("""
    import os, signal, sys
    import torch
    import cubed_client
    c = cubed_client.connect(sys.argv[1], session=int(sys.argv[2]), timeout=30)
    x = torch.arange(1 << 16, dtype=torch.float32, device="cuda") * 3
    t = c.from_dlpack(x)
    print(t._handle.id, t._handle.nbytes, flush=True)
    sys.stdin.readline()
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.fixture
def cuda_daemon(request: pytest.FixtureRequest) -> Iterator[conftest.Daemon]:
    """A daemon of this test alone (a lost device must not spoil other tests); asserts its clean
    exit after SIGTERM."""
    if conftest.BACKEND != "cuda":
        pytest.skip("CUDA backend only (--backend=cuda)")
    pytest.importorskip("torch")
    with conftest.running(request) as d:
        yield d


def imported(c: cubed_client.Client) -> tuple:
    r = c._rpc("MemoryUsage", compute_pb2.MemoryUsageRequest())
    return r.imported_bytes, r.imported_buffers


def start_producer(address: str, session: int) -> tuple:
    p = subprocess.Popen([sys.executable, "-c", PRODUCER, address, str(session)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    if not line:
        p.kill()
        pytest.fail(f"the producer failed: {p.stderr.read()}")
    handle_id, nbytes = map(int, line.split())
    return p, handle_id, nbytes


def kill_producer(p: subprocess.Popen) -> None:
    p.stdin.write("die\n")
    p.stdin.flush()
    assert p.wait(timeout=60) == -9, p.stderr.read()


@pytest.mark.parametrize("end", ["release", "close"])
def test_a_torch_producer_killed_while_the_daemon_maps_its_memory(cuda_daemon, end):
    owner = cubed_client.connect(cuda_daemon.address, transport="unary", lease=120, timeout=30)
    p, handle_id, nbytes = start_producer(cuda_daemon.address, owner.session)
    want = np.arange(1 << 16, dtype=np.float32) * 3
    t = owner.adopt(handle_id, nbytes, (1 << 16,), np.float32)
    np.testing.assert_array_equal(owner.read(t), want)  # The import, read by the daemon.
    assert imported(owner) == (nbytes, 1)

    kill_producer(p)
    try:
        got = owner.read(t)
        same = bool(np.array_equal(got, want))
        print(f"\nafter the producer's death the import reads its last bytes: {same}")
        assert same, "a read of a dead producer's memory gave other bytes"
    except cubed_client.CubedError as e:
        print(f"\nafter the producer's death the import's read fails: {e!r}")
        assert not isinstance(e, cubed_client.UnavailableError), "the device was lost"
    u = owner.empty((1024,), np.float32)  # The session goes on: new work on its device.
    np.testing.assert_array_equal(owner.read(owner.create(np.ones(8, np.float32))), np.ones(8))
    del u

    with cubed_client.connect(cuda_daemon.address, timeout=30) as other:
        if end == "release":
            del t
            owner.sync()  # Sends the release and waits for the daemon to run it.
        else:
            owner.close()  # The session's end closes the mapping.
        assert imported(other) == (0, 0)
        np.testing.assert_array_equal(other.read(other.create(np.arange(5.0))), np.arange(5.0))
    if end == "release":
        owner.close()
    assert "device lost" not in cuda_daemon.log()
