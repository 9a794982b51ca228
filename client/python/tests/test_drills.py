"""Fault drills of issue 15 against the real daemon: calls and streams cut off in every phase
(before the request is sent, while it runs, while its answer is on the way) leave the daemon
serving and, once the sessions they belonged to are gone, no byte and no allocation behind."""

from __future__ import annotations

import random
import time

import grpc
import numpy as np
import pytest

import cubed_client
from cubed_client._proto import compute_pb2, compute_pb2_grpc, types_pb2

from conftest import Daemon

# Delays before the cancel: at once (often before the request left), within the call, after it.
DELAYS_S = [0.0, 0.0002, 0.001, 0.005]


def wait_for_no_allocations(address: str, seconds: float = 15.0) -> types_pb2.MemoryUsage:
    """The usage once every allocation is gone, or the last usage seen after ``seconds``."""
    stub = compute_pb2_grpc.ComputeStub(grpc.insecure_channel(address))
    deadline = time.monotonic() + seconds
    while True:
        usage = stub.MemoryUsage(compute_pb2.MemoryUsageRequest(), timeout=5).usage
        if usage.number_allocs == 0 or time.monotonic() > deadline:
            return usage
        time.sleep(0.1)


@pytest.fixture
def fresh_daemon(request: pytest.FixtureRequest):
    d = Daemon(request.config.getoption("--cubed"))
    yield d
    log = d.log()
    assert d.close() == 0, f"cubed did not exit cleanly:\n{log}"


def test_unary_calls_cut_off_in_any_phase_leave_nothing_behind(fresh_daemon: Daemon) -> None:
    rng = random.Random(15)
    channel = grpc.insecure_channel(fresh_daemon.address)
    stub = compute_pb2_grpc.ComputeStub(channel)
    # Sessions opened by a cancelled OpenSession are unknown to this client: their 1 s lease
    # frees them.
    session = stub.OpenSession(compute_pb2.OpenSessionRequest(lease_ms=60000), timeout=5).session
    big = bytes(range(256)) * 4096  # 1 MiB, read back in the drill's reads.
    small = big[:64 << 10]  # What the drill's creates store (they accumulate in the session).
    handle = stub.Create(compute_pb2.CreateRequest(session=session, data=big), timeout=5).handle
    n = len(big) // 4
    meta = types_pb2.BindingWithMeta(binding=types_pb2.Binding(handle=handle), shape=[n],
                                     strides=[1], elem_size=4)
    calls = {
        "OpenSession": lambda: (stub.OpenSession, compute_pb2.OpenSessionRequest(lease_ms=1000)),
        "Create": lambda: (stub.Create, compute_pb2.CreateRequest(session=session, data=small)),
        "CreateTensor": lambda: (stub.CreateTensor, compute_pb2.CreateTensorRequest(
            session=session, data=small, shape=[len(small) // 4], elem_size=4)),
        "Empty": lambda: (stub.Empty, compute_pb2.EmptyRequest(session=session, size=64 << 10)),
        "Read": lambda: (stub.Read, compute_pb2.ReadRequest(
            session=session, bindings=[types_pb2.Binding(handle=handle)])),
        "ReadTensor": lambda: (stub.ReadTensor, compute_pb2.ReadTensorRequest(
            session=session, bindings=[meta])),
        "Sync": lambda: (stub.Sync, compute_pb2.SyncRequest(session=session)),
        "Flush": lambda: (stub.Flush, compute_pb2.FlushRequest(session=session)),
        "MemoryUsage": lambda: (stub.MemoryUsage, compute_pb2.MemoryUsageRequest()),
        "MemoryCleanup": lambda: (stub.MemoryCleanup, compute_pb2.MemoryCleanupRequest()),
        "GetInfo": lambda: (stub.GetInfo, compute_pb2.GetInfoRequest()),
        "StartProfile": lambda: (stub.StartProfile, compute_pb2.StartProfileRequest(
            session=session)),
        "EndProfile": lambda: (stub.EndProfile, compute_pb2.EndProfileRequest(session=session)),
    }
    outcomes = {"ok": 0, "cancelled": 0, "deadline": 0, "other": 0}
    # At least 600 calls, and on until 100 were cut off (how many are depends on how fast the
    # daemon answers against the delays: a busy or a faster machine cuts off fewer), at most 3000.
    for i in range(3000):
        if i >= 600 and outcomes["cancelled"] + outcomes["deadline"] > 100:
            break
        name = rng.choice(sorted(calls))
        method, req = calls[name]()
        if rng.random() < 0.3:  # A deadline that ends it instead of a cancel.
            future = method.future(req, timeout=rng.choice([0.0001, 0.001, 0.003]))
        else:
            future = method.future(req, timeout=10)
            delay = rng.choice(DELAYS_S)
            if delay:
                time.sleep(delay)
            future.cancel()
        try:
            future.result()
            outcomes["ok"] += 1
        except grpc.FutureCancelledError:
            outcomes["cancelled"] += 1
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                outcomes["deadline"] += 1
            elif e.code() == grpc.StatusCode.CANCELLED:
                outcomes["cancelled"] += 1
            else:
                # A profile call out of order is FAILED_PRECONDITION; nothing else may fail.
                assert name in ("StartProfile", "EndProfile") and \
                    e.code() == grpc.StatusCode.FAILED_PRECONDITION, (name, e.code(), e.details())
                outcomes["other"] += 1
    assert outcomes["cancelled"] + outcomes["deadline"] > 100, outcomes
    assert outcomes["ok"] > 20, outcomes
    # Still serving, and the data it held is intact.
    got = stub.Read(compute_pb2.ReadRequest(session=session,
                                            bindings=[types_pb2.Binding(handle=handle)]),
                    timeout=10)
    assert got.data[0] == big
    stub.CloseSession(compute_pb2.CloseSessionRequest(session=session), timeout=10)
    usage = wait_for_no_allocations(fresh_daemon.address)
    assert usage.number_allocs == 0 and usage.bytes_in_use == 0, (usage, outcomes)
    channel.close()


@pytest.mark.parametrize("carrier", ["ring", "grpc"])
def test_streams_cut_off_in_any_phase_leave_nothing_behind(fresh_daemon: Daemon,
                                                           carrier: str) -> None:
    rng = random.Random(16)
    x = np.arange(1 << 18, dtype=np.float32)
    for i in range(40):
        c = cubed_client.connect(fresh_daemon.address, transport="stream", carrier=carrier,
                                 timeout=10)
        t = c.create(x)
        for _ in range(rng.randrange(1, 30)):
            t = c.add(t, t)
        future = c.read_async(t) if rng.random() < 0.5 else None
        time.sleep(rng.choice(DELAYS_S))
        c._transport._call.cancel()  # The stream ends from this side, mid-flight.
        if future is not None:
            try:
                future.result(timeout=10)
            except cubed_client.CubedError:
                pass
        c.close()
    # A client after them is served, and every cut-off session's memory is back.
    with cubed_client.connect(fresh_daemon.address, carrier=carrier) as c:
        np.testing.assert_array_equal(c.add(c.create(x), 1.0).read(), x + 1)
    usage = wait_for_no_allocations(fresh_daemon.address)
    assert usage.number_allocs == 0 and usage.bytes_in_use == 0, usage
