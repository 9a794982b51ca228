"""Several devices in one daemon (issue 17): ``--cpu_devices=3`` serves three CPU devices, each
with its own device loop, memory pool and sessions. A client picks one when it connects
(``connect(device=i)``); its session's id routes every later call to that device, on every
transport. Handles of one device's session are not reachable from another's; memory is counted
per device and returns to zero on each.
"""

from __future__ import annotations

from typing import Iterator

import grpc
import numpy as np
import pytest

import cubed_client
from cubed_client._proto import compute_pb2, compute_pb2_grpc, types_pb2
import conftest
from conftest import Daemon

TIMEOUT = 30
DEVICES = 3

@pytest.fixture(autouse=True)
def cpu_only() -> None:
    if conftest.BACKEND != "cpu":
        pytest.skip("--cpu_devices is the cpu backend's")


@pytest.fixture(scope="module")
def daemon(request: pytest.FixtureRequest) -> Iterator[Daemon]:
    if conftest.BACKEND != "cpu":
        pytest.skip("--cpu_devices is the cpu backend's")
    with conftest.running(request, f"--cpu_devices={DEVICES}") as d:
        yield d


def stats(d: Daemon) -> compute_pb2.GetStatsResponse:
    with grpc.insecure_channel(d.address) as channel:
        return compute_pb2_grpc.ComputeStub(channel).GetStats(compute_pb2.GetStatsRequest(),
                                                              timeout=TIMEOUT)


@pytest.mark.parametrize("transport", ["stream", "unary"])
def test_each_device_runs_its_own_sessions(daemon: Daemon, transport: str) -> None:
    clients = [cubed_client.connect(daemon.address, device=i, transport=transport,
                                    timeout=TIMEOUT) for i in range(DEVICES)]
    try:
        for i, c in enumerate(clients):
            info = c.info()
            assert (info.devices, info.device, info.backend) == (DEVICES, i, "cpu")
            assert info.memory_limit == 64 << 20  # --memory_limit applies to each device.
            assert c.session & 0xFF == i  # The id's low byte names the device.
            assert c.device == i
        xs = [c.create(np.arange(8, dtype=np.float32) * (i + 1)) for i, c in enumerate(clients)]
        outs = [c.add(x, x) for c, x in zip(clients, xs)]
        for i, (c, out) in enumerate(zip(clients, outs)):
            np.testing.assert_array_equal(c.read(out), np.arange(8, dtype=np.float32) * 2 * (i + 1))
        s = stats(daemon)
        assert [d.device for d in s.devices] == list(range(DEVICES))
        assert [d.sessions for d in s.devices] == [1] * DEVICES
        assert [d.handles for d in s.devices] == [2] * DEVICES
        assert all(d.memory.bytes_in_use > 0 for d in s.devices)
        assert [len(d.session_stats) for d in s.devices] == [1] * DEVICES
    finally:
        for c in clients:
            c.close()
    s = stats(daemon)
    assert [(d.sessions, d.handles, d.memory.bytes_in_use) for d in s.devices] == \
        [(0, 0, 0)] * DEVICES


def test_a_handle_is_only_reachable_on_its_own_device(daemon: Daemon) -> None:
    a = cubed_client.connect(daemon.address, device=0, transport="unary", timeout=TIMEOUT)
    b = cubed_client.connect(daemon.address, device=1, transport="unary", timeout=TIMEOUT)
    try:
        x = a.create(np.ones(4, dtype=np.float32))
        with grpc.insecure_channel(daemon.address) as channel:
            stub = compute_pb2_grpc.ComputeStub(channel)
            # Device 1's session naming device 0's handle: the handle is not in that session.
            with pytest.raises(grpc.RpcError) as e:
                stub.Read(compute_pb2.ReadRequest(
                    session=b.session,
                    bindings=[types_pb2.Binding(handle=x.id)]), timeout=TIMEOUT)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value.details()
            # A session id whose low byte names a device the daemon does not have.
            with pytest.raises(grpc.RpcError) as e:
                stub.Sync(compute_pb2.SyncRequest(
                    session=(a.session & ~0xFF) | DEVICES), timeout=TIMEOUT)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value.details()
        np.testing.assert_array_equal(a.read(x), np.ones(4, dtype=np.float32))
    finally:
        a.close()
        b.close()


def test_a_device_the_daemon_does_not_have_is_named(daemon: Daemon) -> None:
    with pytest.raises(cubed_client.CubedError) as e:
        cubed_client.connect(daemon.address, device=DEVICES, timeout=TIMEOUT)
    assert f"device {DEVICES} does not exist" in str(e.value), str(e.value)


def test_cpu_devices_out_of_range_or_on_cuda_is_refused(request: pytest.FixtureRequest) -> None:
    binary = request.config.getoption("--cubed")
    for flags, text in ((["--cpu_devices=0"], "expected 1 .. 16"),
                        (["--cpu_devices=17"], "expected 1 .. 16"),
                        (["--cpu_devices=2", "--backend=cuda"], "needs --backend=cpu")):
        with pytest.raises(RuntimeError) as e:
            Daemon(binary, *flags)
        assert text in str(e.value), str(e.value)
