"""Shared-memory regions from Python (docs/api.md, "Shared-memory regions"): create() and read()
of large arrays go through a memfd region registered with the session when the daemon is on this
host, and fall back to the stream when it has no region socket."""

from __future__ import annotations

import numpy as np
import pytest

import cubed_client
from conftest import Daemon


def region_mappings(pid: int) -> int:
    with open(f"/proc/{pid}/maps") as f:
        return sum("memfd:cubed-region" in line for line in f)


def test_large_arrays_round_trip_through_a_region(daemon: Daemon) -> None:
    with cubed_client.connect(daemon.address, transport="stream") as c:
        a = np.arange(3 << 19, dtype=np.float32).reshape(3, 1 << 19)  # 6 MiB.
        t = c.create(a)
        assert region_mappings(daemon.proc.pid) == 1, "the daemon maps the staging region"
        np.testing.assert_array_equal(c.read(t), a)
        # A strided view (not contiguous on the daemon) is packed into the region too.
        np.testing.assert_array_equal(c.read(t.T), a.T)
        # A larger array grows the staging region; the old one is released.
        b = np.full((5 << 19,), 7, dtype=np.int32)  # 10 MiB.
        np.testing.assert_array_equal(c.read(c.create(b)), b)
        c.sync()
        assert region_mappings(daemon.proc.pid) == 1
        # Small arrays stay on the stream.
        np.testing.assert_array_equal(c.read(c.create(np.ones(10))), np.ones(10))
    assert region_mappings(daemon.proc.pid) == 0, "the session's end unmapped the region"


def test_errors_still_name_the_command(daemon: Daemon) -> None:
    with cubed_client.connect(daemon.address, transport="stream") as c:
        t = c.create(np.zeros(1 << 20, dtype=np.float32))
        c.sync()
        del t
        with pytest.raises(cubed_client.ResourceExhaustedError):
            c.create(np.zeros(80 << 20, dtype=np.uint8))  # Over the 64 MiB memory limit.
            c.sync()


def test_threshold_zero_never_uses_a_region(daemon: Daemon) -> None:
    with cubed_client.connect(daemon.address, transport="stream", region_threshold=0) as c:
        a = np.arange(1 << 20, dtype=np.float64)
        np.testing.assert_array_equal(c.read(c.create(a)), a)
        assert region_mappings(daemon.proc.pid) == 0


def test_a_daemon_without_regions_falls_back_to_the_stream(request: pytest.FixtureRequest) -> None:
    d = Daemon(request.config.getoption("--cubed"), "--max_region_bytes=0")
    try:
        with cubed_client.connect(d.address, transport="stream") as c:
            a = np.arange(1 << 20, dtype=np.int64)
            np.testing.assert_array_equal(c.read(c.create(a)), a)
            assert region_mappings(d.proc.pid) == 0
    finally:
        assert d.close() == 0
