"""The command ring from Python (docs/api.md, "The command ring"): a local client's stream goes
through shared memory by default, messages larger than the ring travel in chunks, the session and
the ring's mapping end with the client, and a daemon without a ring socket means gRPC."""

from __future__ import annotations

import time

import numpy as np
import pytest

import cubed_client
from conftest import Daemon


def ring_lines(pid: int) -> list:
    """The lines of the process's /proc/PID/maps that map a command ring."""
    with open(f"/proc/{pid}/maps") as f:
        return [line.strip() for line in f if "memfd:cubed-ring" in line]


def ring_mappings(pid: int) -> int:
    """How many rings the process maps: distinct memfds (by inode), since one ring may take
    several lines (a CUDA daemon's /proc/PID/maps showed one client's ring as two lines: GPU runs
    71 and 72)."""
    return len({line.split()[4] for line in ring_lines(pid)})


def wait_for(predicate, timeout: float = 10.0) -> bool:  # noqa: ANN001
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_a_local_client_uses_the_ring_by_default(daemon: Daemon) -> None:
    with cubed_client.connect(daemon.address) as c:
        assert c.transport == "stream"
        assert c.carrier == "ring"
        assert ring_mappings(daemon.proc.pid) == 1, ring_lines(daemon.proc.pid)
        a = np.arange(1000, dtype=np.float32)
        np.testing.assert_array_equal(c.read(c.add(c.create(a), 1.0)), a + 1)
    assert wait_for(lambda: ring_mappings(daemon.proc.pid) == 0), "the ring outlived the client"


def test_messages_larger_than_the_ring_travel_in_chunks(daemon: Daemon) -> None:
    # No staging region: 12 MiB go inline in one SessionRequest, three times the 4 MiB ring.
    with cubed_client.connect(daemon.address, region_threshold=0) as c:
        assert c.carrier == "ring"
        a = np.random.default_rng(7).integers(0, 255, size=12 << 20, dtype=np.uint8)
        np.testing.assert_array_equal(c.read(c.create(a)), a)


def test_errors_end_as_on_grpc(daemon: Daemon) -> None:
    with cubed_client.connect(daemon.address) as c:
        with pytest.raises(cubed_client.ResourceExhaustedError):
            c.create(np.zeros(80 << 20, dtype=np.uint8))  # Over the 64 MiB memory limit.
            c.sync()
        np.testing.assert_array_equal(c.read(c.create(np.ones(3))), np.ones(3))


def test_the_ring_is_required_only_when_asked(request: pytest.FixtureRequest) -> None:
    d = Daemon(request.config.getoption("--cubed"), "--command_ring=false")
    try:
        with cubed_client.connect(d.address) as c:
            assert c.carrier == "grpc"
            np.testing.assert_array_equal(c.read(c.create(np.ones(4))), np.ones(4))
        with pytest.raises(cubed_client.UnavailableError):
            cubed_client.connect(d.address, carrier="ring")
    finally:
        assert d.close() == 0


@pytest.mark.parametrize("carrier", ["ring", "grpc"])
def test_a_killed_daemon_is_a_lost_session(request: pytest.FixtureRequest, carrier: str) -> None:
    # Note [Session lost]: the stream's end that the client did not ask for says so, naming the
    # session; the next call fails at once instead of waiting.
    d = Daemon(request.config.getoption("--cubed"))
    try:
        c = cubed_client.connect(d.address, carrier=carrier, timeout=30)
        t = c.create(np.arange(4, dtype=np.float32))
        np.testing.assert_array_equal(c.read(t), np.arange(4, dtype=np.float32))
        d.proc.kill()
        d.proc.wait()
        start = time.monotonic()
        with pytest.raises(cubed_client.UnavailableError) as e:
            for _ in range(100):  # Until the reader has seen the end.
                c.read(t)
                time.sleep(0.05)
        assert time.monotonic() - start < 15
        assert f"session {c.session} lost" in e.value.message
        c.close()
    finally:
        d.close()


# "python" pins the Python core, whose reply-ring reader and waiters (Note [Waiter reads] in
# _ring.py) this tests; "auto" is the default core (the C++ SDK's where its library loads).
@pytest.mark.parametrize("core", ["python", "auto"])
@pytest.mark.parametrize("spin", [0.0, 0.002])
def test_waiting_threads_read_answers_in_order(daemon: Daemon, spin: float, core: str) -> None:
    # A thread waiting for an answer polls the reply ring itself (spin > 0; Note [Waiter reads])
    # while others wait and the reader thread sleeps; every answer still reaches its own Future,
    # in order, once: concurrent reads from four threads, futures nobody waits on, and a
    # callback run by whichever thread read the reply.
    import threading

    with cubed_client.connect(daemon.address, spin=spin, core=core) as c:
        assert c.carrier == "ring"
        tensors = [c.create(np.full(64, i, dtype=np.int32)) for i in range(8)]
        unwaited = [c.read_async(t) for t in tensors]
        called = []
        unwaited[0].add_done_callback(lambda f: called.append(f.result()[0]))
        errors = []

        def reader(k: int) -> None:
            try:
                for n in range(200):
                    i = (k + n) % len(tensors)
                    got = c.read(tensors[i])
                    assert got.shape == (64,) and (got == i).all(), (i, got[:4])
                    if n % 50 == 0:
                        c.sync()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors[0]
        for i, f in enumerate(unwaited):
            assert (f.result(timeout=10) == i).all()
        assert called == [0]
        # A Future nobody waits on still completes: the reader thread reads when no one polls.
        late = c.read_async(tensors[3])
        assert (late.result(timeout=10) == 3).all()
        # A failure answered while a waiter polls raises in that waiter.
        with pytest.raises(cubed_client.NotFoundError):
            c.read(c.adopt(2**63 + 12345, 4))


def test_spin_is_checked(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBED_CLIENT_SPIN", raising=False)
    with pytest.raises(ValueError, match="spin"):
        cubed_client.connect(daemon.address, spin=5.0)


@pytest.mark.parametrize("core", ["python", "auto"])
def test_the_waiting_thread_polls_as_long_as_the_daemon_suggests(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, core: str) -> None:
    monkeypatch.delenv("CUBED_CLIENT_SPIN", raising=False)
    d = Daemon(request.config.getoption("--cubed"), "--ring_spin_us=100")
    try:
        with cubed_client.connect(d.address, core=core) as c:
            assert c.carrier == "ring"
            assert c._transport.spin == pytest.approx(400e-6)  # Four times the suggestion.
            np.testing.assert_array_equal(c.read(c.create(np.arange(5))), np.arange(5))
        with cubed_client.connect(d.address, spin=0, core=core) as c:
            assert c._transport.spin == 0
    finally:
        d.close()
