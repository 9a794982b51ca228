"""Copies between devices (issue 17; docs/api.md, "Several devices"): ``tensor.to(client)`` and
``Client.copy_to_device`` copy a tensor of one session into another session of the same daemon,
on another device (``--cpu_devices=3``; on cuda ``--devices=0,0``, one GPU as two devices) or
on the same one (two sessions of device 0: one cuMemcpyDtoDAsync on CUDA). Bytes are checked,
every error leaves memory and handle tables as they were, and memory returns to zero.

A lost device (Note [Lost devices], server/daemon/daemon.cc; CPU devices are lost through the
test-only CUBED_TEST_LOSE_DEVICE_FILE) turns only its own health name NOT_SERVING and its
cubed_device_up to 0; sessions on the other devices carry on.
"""

from __future__ import annotations

import os
import time
import urllib.request
from typing import Iterator, List

import grpc
import numpy as np
import pytest

import cubed_client
from cubed_client._proto import compute_pb2, compute_pb2_grpc, types_pb2
import conftest
from conftest import Daemon

TIMEOUT = 30
SERVING, NOT_SERVING = 1, 2  # grpc.health.v1.HealthCheckResponse.ServingStatus.


def health_check(channel: grpc.Channel, service: str) -> int:
    """grpc.health.v1.Health/Check of `service`, hand-encoded (the venv has no grpcio-health):
    the request is field 1 (string), the answer field 1 (enum)."""
    name = service.encode()
    assert len(name) < 128
    reply = channel.unary_unary("/grpc.health.v1.Health/Check")(
        b"\x0a" + bytes([len(name)]) + name if name else b"", timeout=TIMEOUT)
    return reply[1] if reply[:1] == b"\x08" else 0


@pytest.fixture(scope="module")
def daemon(request: pytest.FixtureRequest) -> Iterator[Daemon]:
    if conftest.BACKEND == "cpu":
        with conftest.running(request, "--cpu_devices=3") as d:
            yield d
        return
    # One GPU serves as two devices (Note [Repeated test devices], config.cc), so that the
    # copies between two CUDA devices run on a host with one GPU; only the daemon reads it.
    os.environ["CUBED_TEST_REPEAT_DEVICES"] = "1"
    try:
        with conftest.running(request, "--devices=0,0") as d:
            del os.environ["CUBED_TEST_REPEAT_DEVICES"]
            yield d
    finally:
        os.environ.pop("CUBED_TEST_REPEAT_DEVICES", None)


def devices(d: Daemon) -> int:
    with cubed_client.connect(d.address, transport="unary", timeout=TIMEOUT) as c:
        return c.info().devices


def other_device(d: Daemon) -> int:
    """A second device when there is one (CPU: 1), else 0 (one GPU: a second session there)."""
    return 1 if devices(d) > 1 else 0


def gauges(d: Daemon) -> List[tuple]:
    with grpc.insecure_channel(d.address) as channel:
        s = compute_pb2_grpc.ComputeStub(channel).GetStats(compute_pb2.GetStatsRequest(),
                                                           timeout=TIMEOUT)
    return [(x.sessions, x.handles, x.memory.bytes_in_use) for x in s.devices]


@pytest.mark.parametrize("transport", ["stream", "unary"])
def test_to_copies_the_bytes_onto_the_other_device(daemon: Daemon, transport: str) -> None:
    before = gauges(daemon)
    a = cubed_client.connect(daemon.address, device=0, transport=transport, timeout=TIMEOUT)
    b = cubed_client.connect(daemon.address, device=other_device(daemon), transport=transport,
                             timeout=TIMEOUT)
    try:
        x = np.arange(3 * 1000, dtype=np.float32).reshape(3, 1000)
        t = a.create(x)
        u = a.add(t, t)  # Queued on the stream: the copy runs after it.
        v = u.to(b)
        assert (v.client, v.shape, v.dtype) == (b, (3, 1000), np.float32)
        # Work sent after the copy: on the source it does not change what was copied; on the
        # target it sees the copied bytes.
        a.create(np.zeros((3, 1000), np.float32)).to(a, u)
        w = b.add(v, v)
        np.testing.assert_array_equal(b.read(v), x * 2)
        np.testing.assert_array_equal(b.read(w), x * 4)
        np.testing.assert_array_equal(a.read(u), np.zeros((3, 1000), np.float32))
        # A view: its own bytes only (a row of a 2-D tensor, and a strided column).
        np.testing.assert_array_equal(b.read(t[1].to(b)), x[1])
        np.testing.assert_array_equal(b.read(t[:, 5].to(b)), x[:, 5])
        # Back again, into a tensor that exists: `out`.
        out = a.empty((3, 1000), np.float32)
        assert b.copy_to_device(w, a, out) is out
        np.testing.assert_array_equal(a.read(out), x * 4)
        # Bytes of every width survive unchanged.
        raw = np.frombuffer(bytes(range(256)) * 3, dtype=np.uint8)
        np.testing.assert_array_equal(b.read(a.create(raw).to(b)), raw)
        # Another session of the source's own device: one copy on that device.
        a2 = cubed_client.connect(daemon.address, device=0, transport=transport,
                                  timeout=TIMEOUT)
        try:
            np.testing.assert_array_equal(a2.read(t.to(a2)), x)
            np.testing.assert_array_equal(a2.read(t[2].to(a2)), x[2])
        finally:
            a2.close()
    finally:
        a.close()
        b.close()
    assert gauges(daemon) == before


def test_a_copy_of_several_pieces_keeps_every_byte(daemon: Daemon) -> None:
    """Between two devices the bytes move in 16 MiB pieces (Note [Copies between devices])."""
    before = gauges(daemon)
    with cubed_client.connect(daemon.address, device=0, timeout=TIMEOUT) as a, \
            cubed_client.connect(daemon.address, device=other_device(daemon),
                                 timeout=TIMEOUT) as b:
        data = np.random.default_rng(3).integers(0, 256, (33 << 20) + 7, dtype=np.uint8)
        u = a.create(data).to(b)
        np.testing.assert_array_equal(b.read(u), data)
        del u
    assert gauges(daemon) == before


def test_copy_into_a_range_of_a_handle_with_raw_calls(daemon: Daemon) -> None:
    target_device = other_device(daemon)
    with grpc.insecure_channel(daemon.address) as channel:
        stub = compute_pb2_grpc.ComputeStub(channel)
        s0 = stub.OpenSession(compute_pb2.OpenSessionRequest(device=0), timeout=TIMEOUT).session
        s1 = stub.OpenSession(compute_pb2.OpenSessionRequest(device=target_device),
                              timeout=TIMEOUT).session
        try:
            src = stub.Create(compute_pb2.CreateRequest(session=s0, data=bytes(range(200))),
                              timeout=TIMEOUT).handle
            dst = stub.Create(compute_pb2.CreateRequest(session=s1, data=b"\xff" * 64),
                              timeout=TIMEOUT).handle
            r = stub.CopyToDevice(compute_pb2.CopyToDeviceRequest(
                session=s0, source=types_pb2.Binding(handle=src, offset_start=10, offset_end=170),
                target_session=s1, target_handle=dst, target_offset=30), timeout=TIMEOUT)
            assert (r.handle, r.size) == (dst, 20)
            data = stub.Read(compute_pb2.ReadRequest(
                session=s1, bindings=[types_pb2.Binding(handle=dst)]), timeout=TIMEOUT).data[0]
            assert data == b"\xff" * 30 + bytes(range(10, 30)) + b"\xff" * 14
        finally:
            stub.CloseSession(compute_pb2.CloseSessionRequest(session=s0), timeout=TIMEOUT)
            stub.CloseSession(compute_pb2.CloseSessionRequest(session=s1), timeout=TIMEOUT)


def test_every_bad_copy_is_named_and_leaves_nothing_behind(daemon: Daemon) -> None:
    target_device = other_device(daemon)
    with grpc.insecure_channel(daemon.address) as channel:
        stub = compute_pb2_grpc.ComputeStub(channel)
        s0 = stub.OpenSession(compute_pb2.OpenSessionRequest(device=0), timeout=TIMEOUT).session
        s1 = stub.OpenSession(compute_pb2.OpenSessionRequest(device=target_device),
                              timeout=TIMEOUT).session
        try:
            src = stub.Create(compute_pb2.CreateRequest(session=s0, data=bytes(range(64))),
                              timeout=TIMEOUT).handle
            dst = stub.Create(compute_pb2.CreateRequest(session=s1, data=bytes(16)),
                              timeout=TIMEOUT).handle
            before = gauges(daemon)
            # Over the target's 64 MiB memory limit: 40 MiB there already, and a 40 MiB source
            # (two devices only: on one, the source would not fit either).
            two = target_device != 0
            if two:
                big = stub.Empty(compute_pb2.EmptyRequest(session=s0, size=40 << 20),
                                 timeout=TIMEOUT).handle
                filler = stub.Empty(compute_pb2.EmptyRequest(session=s1, size=40 << 20),
                                    timeout=TIMEOUT).handle
            full = gauges(daemon)
            cases = [
                (dict(session=s0, source=types_pb2.Binding(handle=12345), target_session=s1),
                 grpc.StatusCode.NOT_FOUND, "source: handle 12345 is not a handle"),
                (dict(session=s0, source=types_pb2.Binding(handle=src),
                      target_session=(s1 & ~0xFF) | 0x0F),
                 grpc.StatusCode.NOT_FOUND, "is not open"),
                (dict(session=s0, source=types_pb2.Binding(handle=src),
                      target_session=s1 + 0x100),
                 grpc.StatusCode.NOT_FOUND, "is not open"),
                (dict(session=s0, source=types_pb2.Binding(handle=src, offset_start=65),
                      target_session=s1),
                 grpc.StatusCode.INVALID_ARGUMENT, "offset_start 65 is past the end"),
                (dict(session=s0, source=types_pb2.Binding(handle=src, offset_start=64),
                      target_session=s1),
                 grpc.StatusCode.INVALID_ARGUMENT, "the binding is empty"),
                (dict(session=s0, source=types_pb2.Binding(handle=src), target_session=s1,
                      target_handle=dst),
                 grpc.StatusCode.INVALID_ARGUMENT, "exceed the 16 bytes of handle"),
                (dict(session=s0, source=types_pb2.Binding(handle=src, offset_end=56),
                      target_session=s1, target_handle=dst, target_offset=9),
                 grpc.StatusCode.INVALID_ARGUMENT, "bytes [9, +8) exceed the 16 bytes"),
                (dict(session=s0, source=types_pb2.Binding(handle=src), target_session=s1,
                      target_handle=777),
                 grpc.StatusCode.NOT_FOUND, "target_handle: handle 777 is not a handle"),
                (dict(session=s0, source=types_pb2.Binding(handle=src), target_session=s1,
                      target_offset=4),
                 grpc.StatusCode.INVALID_ARGUMENT, "target_offset 4 without a target_handle"),
                # The source over itself, overlapping.
                (dict(session=s0, source=types_pb2.Binding(handle=src, offset_end=32),
                      target_session=s0, target_handle=src, target_offset=16),
                 grpc.StatusCode.INVALID_ARGUMENT, "overlap the source"),
            ]
            if two:
                cases.append((dict(session=s0, source=types_pb2.Binding(handle=big),
                                   target_session=s1),
                              grpc.StatusCode.RESOURCE_EXHAUSTED, "limit"))
            for fields, code, text in cases:
                with pytest.raises(grpc.RpcError) as e:
                    stub.CopyToDevice(compute_pb2.CopyToDeviceRequest(**fields), timeout=TIMEOUT)
                assert e.value.code() == code, (fields, e.value.details())
                assert text in e.value.details(), (fields, e.value.details())
                assert gauges(daemon) == full, (fields, e.value.details())
            if two:
                stub.Release(compute_pb2.ReleaseRequest(session=s0, handles=[big]),
                             timeout=TIMEOUT)
                stub.Release(compute_pb2.ReleaseRequest(session=s1, handles=[filler]),
                             timeout=TIMEOUT)
            assert gauges(daemon) == before
            # The source is unchanged by the refused copy over itself.
            data = stub.Read(compute_pb2.ReadRequest(
                session=s0, bindings=[types_pb2.Binding(handle=src)]), timeout=TIMEOUT).data[0]
            assert data == bytes(range(64))
        finally:
            stub.CloseSession(compute_pb2.CloseSessionRequest(session=s0), timeout=TIMEOUT)
            stub.CloseSession(compute_pb2.CloseSessionRequest(session=s1), timeout=TIMEOUT)


def test_copy_to_device_refuses_tensors_and_clients_that_do_not_fit(daemon: Daemon) -> None:
    a = cubed_client.connect(daemon.address, device=0, timeout=TIMEOUT)
    b = cubed_client.connect(daemon.address, device=other_device(daemon), timeout=TIMEOUT)
    try:
        t = a.create(np.ones(8, dtype=np.float32))
        with pytest.raises(ValueError, match="belongs to another client"):
            b.copy_to_device(t, a)
        with pytest.raises(TypeError, match="target must be a Client"):
            t.to("cuda:1")  # type: ignore[arg-type]
        with pytest.raises(cubed_client.InvalidArgumentError, match="hold 32 bytes"):
            t.to(b, b.empty(4, np.float32))
        with pytest.raises(ValueError, match="belongs to another client"):
            t.to(b, a.empty(8, np.float32))
        b.close()
        with pytest.raises(cubed_client.CubedError, match="target client is closed"):
            t.to(b)
    finally:
        a.close()
        b.close()


def test_a_lost_device_is_not_serving_alone(request: pytest.FixtureRequest,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if conftest.BACKEND != "cpu":
        pytest.skip("CPU devices are lost through CUBED_TEST_LOSE_DEVICE_FILE")
    binary = request.config.getoption("--cubed")
    lost = os.path.join(os.path.dirname(os.path.abspath(__file__)), f".lost-{os.getpid()}")
    monkeypatch.setenv("CUBED_TEST_LOSE_DEVICE_FILE", lost)
    d = Daemon(binary, "--cpu_devices=2", "--metrics_listen=127.0.0.1:0")
    try:
        metrics = [line.split("=", 1)[1] for line in
                   open(os.path.join(d.dir, "ready")).read().splitlines()
                   if line.startswith("metrics=")][0]
        a = cubed_client.connect(d.address, device=0, timeout=TIMEOUT)
        b = cubed_client.connect(d.address, device=1, timeout=TIMEOUT)
        x = a.create(np.arange(4, dtype=np.float32))
        y = b.create(np.arange(4, dtype=np.float32))
        open(lost + ".1", "w").close()
        with pytest.raises(cubed_client.UnavailableError, match="device lost"):
            b.read(b.add(y, y))
        with pytest.raises(cubed_client.UnavailableError, match="device lost"):
            b.read(y)
        with pytest.raises(cubed_client.UnavailableError, match="device lost"):
            x.to(b)
        with grpc.insecure_channel(d.address) as channel:
            assert health_check(channel, "") == SERVING
            assert health_check(channel, "cubed.v1.Compute") == SERVING
            assert health_check(channel, "device/0") == SERVING
            assert health_check(channel, "device/1") == NOT_SERVING
            with pytest.raises(grpc.RpcError) as e:
                health_check(channel, "device/2")
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert '"device/0" .. "device/1"' in e.value.details()
            stats = compute_pb2_grpc.ComputeStub(channel).GetStats(
                compute_pb2.GetStatsRequest(), timeout=TIMEOUT)
            assert [s.lost for s in stats.devices] == [False, True]
        text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=TIMEOUT).read().decode()
        assert 'cubed_device_up{device="0"} 1' in text
        assert 'cubed_device_up{device="1"} 0' in text
        # Device 0 carries on.
        np.testing.assert_array_equal(a.read(a.add(x, x)), np.arange(4, dtype=np.float32) * 2)
        with pytest.raises(cubed_client.UnavailableError, match="device lost"):
            cubed_client.connect(d.address, device=1, transport="unary", timeout=TIMEOUT)
        a.close()
        # The last device lost: the daemon exits non-zero (its supervisor restarts it).
        c = cubed_client.connect(d.address, device=0, transport="unary", timeout=TIMEOUT)
        z = c.create(np.ones(2, dtype=np.float32))
        open(lost + ".0", "w").close()
        with pytest.raises(cubed_client.UnavailableError, match="device lost"):
            c.add(z, z)
        deadline = time.monotonic() + 20
        while d.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert d.proc.poll() == 3, d.log()
        assert "device 1 lost" in d.log()
    finally:
        d.close()
        for suffix in (".0", ".1"):
            if os.path.exists(lost + suffix):
                os.remove(lost + suffix)


def test_bad_device_lists_stop_the_daemon_naming_the_fault(request: pytest.FixtureRequest) -> None:
    binary = request.config.getoption("--cubed")
    sixteen = ",".join(str(i) for i in range(17))
    cases = [(["--backend=cuda", "--devices=0,0"], "--devices=0,0: device 0 is listed twice"),
             (["--backend=cuda", f"--devices={sixteen}"], "more than 16 devices"),
             (["--backend=cuda", "--devices=0,x"], "'x' is not a device ordinal"),
             (["--backend=cuda", "--devices=0,"], "an empty entry"),
             (["--backend=cuda", "--devices=1", "--device=1"], "choose one"),
             (["--backend=cuda", "--devices=all", "--cpu_devices=2"], "needs --backend=cpu"),
             (["--backend=cpu", "--devices=0"], "the cpu backend takes --cpu_devices=N"),
             (["--backend=cpu", "--device=1"], "the cpu backend has no device ordinals")]
    if conftest.BACKEND == "cuda":  # A GPU here: an ordinal past the last one.
        cases.append((["--backend=cuda", "--devices=0,63"],
                      "device 1 (ordinal 63): --backend=cuda: --device=63: this machine has"))
    else:
        cases.append((["--backend=cuda", "--devices=all"], "--devices=all: "))
    for flags, text in cases:
        with pytest.raises(RuntimeError) as e:
            Daemon(binary, *flags)
        assert text in str(e.value), (flags, str(e.value))


def test_both_sessions_must_be_the_callers(request: pytest.FixtureRequest,
                                           tmp_path: "os.PathLike[str]") -> None:
    binary = request.config.getoption("--cubed")
    tokens = os.path.join(tmp_path, "tokens")
    with open(tokens, "w") as f:
        f.write("bob bob-token-0123456789abcdef\nalice alice-token-0123456789abcdef\n")
    os.chmod(tokens, 0o600)
    config = os.path.join(tmp_path, "auth.textproto")
    with open(config, "w") as f:
        f.write('token_file: "tokens"\n'
                'principal { name: "bob" permissions { all_rpcs: true } }\n'
                'principal { name: "alice" permissions { all_rpcs: true } }\n')
    if conftest.BACKEND == "cpu":
        flags = ["--cpu_devices=2"]
    else:
        os.environ["CUBED_TEST_REPEAT_DEVICES"] = "1"
        flags = ["--devices=0,0"]
    try:
        d = Daemon(binary, *flags, "--tcp=127.0.0.1:0", "--insecure_tcp",
                   f"--auth_config={config}")
    finally:
        os.environ.pop("CUBED_TEST_REPEAT_DEVICES", None)
    try:
        assert d.tcp_address is not None
        bob = [("authorization", "Bearer bob-token-0123456789abcdef")]
        alice = [("authorization", "Bearer alice-token-0123456789abcdef")]
        with grpc.insecure_channel(d.tcp_address) as channel:
            stub = compute_pb2_grpc.ComputeStub(channel)

            def call(method: str, who: list, **fields: object) -> object:
                request_type = getattr(compute_pb2, f"{method}Request")
                return getattr(stub, method)(request_type(**fields), timeout=TIMEOUT,
                                             metadata=who)

            b0 = call("OpenSession", bob, device=0).session
            b1 = call("OpenSession", bob, device=1).session
            a1 = call("OpenSession", alice, device=1).session
            src = call("Create", bob, session=b0, data=b"bob's bytes").handle
            theirs = call("Create", alice, session=a1, data=b"alice's bytes").handle

            def in_use() -> List[tuple]:
                s = call("GetStats", bob)
                return [(x.sessions, x.handles, x.memory.bytes_in_use) for x in s.devices]

            before = in_use()
            for who, fields in (
                    (bob, dict(session=b0, source=types_pb2.Binding(handle=src),
                               target_session=a1)),
                    (bob, dict(session=b0, source=types_pb2.Binding(handle=src),
                               target_session=a1, target_handle=theirs)),
                    (alice, dict(session=b0, source=types_pb2.Binding(handle=src),
                                 target_session=a1))):
                with pytest.raises(grpc.RpcError) as e:
                    call("CopyToDevice", who, **fields)
                assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value.details()
                assert "is not open" in e.value.details()
                assert in_use() == before
            assert call("Read", alice, session=a1, bindings=[
                types_pb2.Binding(handle=theirs)]).data[0] == b"alice's bytes"
            # Bob's own two sessions: allowed.
            mine = call("CopyToDevice", bob, session=b0, source=types_pb2.Binding(handle=src),
                        target_session=b1).handle
            assert call("Read", bob, session=b1, bindings=[
                types_pb2.Binding(handle=mine)]).data[0] == b"bob's bytes"
    finally:
        d.close()
