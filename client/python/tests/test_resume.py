"""The Python SDK across a daemon restart with checkpoint and restore (issue 15, "Upgrades and
restarts without losing work"; Note [Resume in Python] in cubed_client/_resume.py): a client
connected with resume_timeout carries on with the same session, handles and bytes on the daemon
that restored them on the same socket, over the command ring, gRPC and unary calls; commands
sent while the daemon was down run once it is back, commands the restart cut are reported, and
without resume_timeout (or without the session on the new daemon) the client says the session
was lost."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Iterator, Optional

import grpc
import numpy as np
import pytest

import cubed_client
from cubed_client._proto import compute_pb2, compute_pb2_grpc

from conftest import Daemon

CARRIERS = ["ring", "grpc"]


@pytest.fixture(autouse=True, params=["default", "python"])
def core(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test on connect()'s default core (over the ring that is the Python core, which
    alone resumes there: connect()'s "auto"; over gRPC the C++ SDK's where its library loads)
    and pinned to the Python core (Note [Resume in Python]), through CUBED_CLIENT_CORE."""
    if request.param == "python":
        monkeypatch.setenv("CUBED_CLIENT_CORE", "python")
    return request.param


class Restart:
    """A daemon with --checkpoint_dir (``old``) and, after drain() and restore(), the one that
    restored its checkpoint on the same socket (``new``)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="cubed-pysdk-ckpt-")
        self.checkpoint = os.path.join(self.dir, "checkpoint")
        self.old = Daemon(binary, f"--checkpoint_dir={self.checkpoint}")
        self.new: Optional[Daemon] = None

    @property
    def address(self) -> str:
        return self.old.address

    def drain(self, how: str = "rpc") -> None:
        """Stops the old daemon with a checkpoint: the Drain RPC, ``cubectl drain
        --checkpoint`` or SIGTERM (with --checkpoint_dir, SIGTERM writes one too)."""
        if how == "rpc":
            with grpc.insecure_channel(self.address) as channel:
                r = compute_pb2_grpc.ComputeStub(channel).Drain(
                    compute_pb2.DrainRequest(checkpoint=True), timeout=60)
            assert r.directory == self.checkpoint
        elif how == "cubectl":
            cubectl = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
                self.binary))), "client", "cubectl", "cubectl")
            if not os.access(cubectl, os.X_OK):
                pytest.skip(f"no cubectl at {cubectl}")
            out = subprocess.run([cubectl, f"--address={self.address}", "drain", "--checkpoint"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stdout + out.stderr
        else:
            self.old.proc.send_signal(signal.SIGTERM)
        assert self.old.proc.wait(timeout=60) == 0, self.old.log()

    def restore(self, restore: bool = True) -> None:
        """Starts the new daemon on the old one's socket, with --restore (or without)."""
        flags = [f"--restore={self.checkpoint}"] if restore else []
        self.new = Daemon(self.binary, *flags, socket=self.old.socket)

    def close(self) -> None:
        if self.new is not None:
            log = self.new.log()
            assert self.new.close() == 0, log
        self.old.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def restart(request: pytest.FixtureRequest) -> Iterator[Restart]:
    r = Restart(request.config.getoption("--cubed"))
    try:
        yield r
    finally:
        r.close()


def wait_until_resuming(c: cubed_client.Client) -> None:
    """Waits until the client has seen its stream end (so that the test's next commands are
    sent after that, not into the old stream: those would be reported lost, see
    test_commands_cut_by_the_restart_are_reported_not_lost)."""
    deadline = time.monotonic() + 10
    while not c._transport._resuming:
        assert time.monotonic() < deadline, "the client did not see the stream end"
        time.sleep(0.005)


@pytest.mark.parametrize("how", ["rpc", "cubectl", "sigterm"])
@pytest.mark.parametrize("carrier", CARRIERS)
def test_a_session_carries_on_across_a_checkpointed_restart(restart: Restart, carrier: str,
                                                            how: str) -> None:
    c = cubed_client.connect(restart.address, carrier=carrier, resume_timeout=20, timeout=30)
    assert c.carrier == carrier
    session = c.session
    rng = np.random.default_rng(15)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 32)).astype(np.float32)
    ints = np.arange(1000, dtype=np.int32) * 7
    fortran = np.asfortranarray(rng.standard_normal((7, 5)))
    ta, tb, ti, tf = c.create(a), c.create(b), c.create(ints), c.create(fortran)
    tab = c.matmul(ta, tb)
    ab = c.read(tab)
    usage = c.memory_usage()
    restart.drain(how)
    restart.restore()
    # The same client object reads the same bytes under the same handles ...
    np.testing.assert_array_equal(c.read(ta), a)
    np.testing.assert_array_equal(c.read(tb), b)
    np.testing.assert_array_equal(c.read(ti), ints)
    np.testing.assert_array_equal(c.read(tf), fortran)
    np.testing.assert_array_equal(c.read(tab), ab)
    assert c.session == session
    assert c.memory_usage().bytes_in_use == usage.bytes_in_use
    # ... and runs new kernels on them.
    np.testing.assert_array_equal(c.read(c.matmul(ta, tb)), ab)
    np.testing.assert_array_equal(c.read(c.add(ti, ti)), ints + ints)
    np.testing.assert_array_equal(c.read(tf * 2.0), fortran * 2.0)
    c.sync()
    assert c._transport.resumes == 1
    assert "restored 1 sessions" in restart.new.log()
    c.close()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_commands_sent_while_the_daemon_is_down_run_once_it_is_back(restart: Restart,
                                                                    carrier: str) -> None:
    c = cubed_client.connect(restart.address, carrier=carrier, resume_timeout=20, timeout=30)
    x = np.arange(256, dtype=np.float32)
    tx = c.create(x)
    c.sync()
    restart.drain()
    wait_until_resuming(c)
    starter = threading.Timer(0.5, restart.restore)  # Comes up while the commands wait.
    starter.start()
    try:
        start = time.monotonic()
        # Over the ring the sender waits for the resume; over gRPC the commands are queued.
        ty = c.add(tx, 1.0)
        tz = c.mul(ty, 2.0)
        future = c.read_async(tz)
        np.testing.assert_array_equal(future.result(timeout=30), (x + 1) * 2)
        assert time.monotonic() - start < 15
    finally:
        starter.join()
    c.sync()  # Nothing was lost.
    np.testing.assert_array_equal(c.read(tx), x)
    assert c._transport.resumes == 1
    c.close()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_a_loop_of_kernels_across_a_restart_ends_as_without_one(restart: Restart,
                                                                carrier: str) -> None:
    # The test: a loop of kernels with a daemon upgrade halfway (SIGTERM, --restore)
    # ends with the same bytes as the same loop without one. The loop goes on while the daemon
    # is down; its tensors' releases (collected temporaries) go out as they come.
    c = cubed_client.connect(restart.address, carrier=carrier, resume_timeout=20, timeout=30)
    x0 = np.linspace(-1, 1, 4096, dtype=np.float32)
    x, one = c.create(x0), c.create(np.full(4096, 0.25, np.float32))
    want = x0.copy()
    starter: Optional[threading.Timer] = None
    for step in range(40):
        if step == 20:
            c.sync()  # What was sent before the drain ran; nothing is cut.
            restart.drain("sigterm")
            wait_until_resuming(c)
            starter = threading.Timer(0.3, restart.restore)
            starter.start()
        x = c.add(c.mul(x, 0.5), one)
        want = want * np.float32(0.5) + np.float32(0.25)
    got = c.read(x)
    c.sync()
    assert starter is not None
    starter.join()
    np.testing.assert_array_equal(got, want)
    # The same loop on the new daemon, without a restart.
    with cubed_client.connect(restart.new.address, carrier=carrier) as fresh:
        y = fresh.create(x0)
        yone = fresh.create(np.full(4096, 0.25, np.float32))
        for _ in range(40):
            y = fresh.add(fresh.mul(y, 0.5), yone)
        np.testing.assert_array_equal(fresh.read(y), got)
    c.close()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_commands_cut_by_the_restart_are_reported_not_lost(restart: Restart,
                                                           carrier: str) -> None:
    # 3000 adds of 1 Mi floats, ping-pong between two tensors, sent without waiting; the daemon
    # drains in the middle of them. Whatever ran is in the checkpoint, whatever was written
    # after it did not run, and then (and only then) the next sync says so; what was sent after
    # the resume ran on the new daemon. So the result is exactly that of the adds the sync does
    # not name: none vanished unreported, none ran twice.
    n, adds = 1 << 20, 3000
    c = cubed_client.connect(restart.address, carrier=carrier, resume_timeout=30, timeout=60)
    x = c.create(np.zeros(n, np.float32))
    y = c.create(np.zeros(n, np.float32))
    one = c.create(np.ones(n, np.float32))
    c.sync()
    failures = []

    def stop_and_restore() -> None:
        try:
            time.sleep(0.3)
            restart.drain()
            restart.restore()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failures.append(e)

    stopper = threading.Thread(target=stop_and_restore)
    stopper.start()
    add = cubed_client.BuiltinKernel("add", np.float32)
    seqs, reads = [], []
    for i in range(adds):
        src, dst = (x, y) if i % 2 == 0 else (y, x)
        seqs.append(c._transport._next_seq)  # The seq this add goes out with.
        c.execute(add, bindings=[src, one, dst])
        if i % 100 == 99:  # Reads in flight across the restart: each answers or says why not.
            reads.append(c.read_async(one))
    stopper.join()
    assert not failures, failures
    synced: Optional[cubed_client.CubedError] = None
    try:
        c.sync()
    except cubed_client.UnavailableError as e:
        synced = e
    lost = range(0)
    if synced is not None:
        m = re.match(r"commands (\d+) \.\. (\d+) of session \d+ did not run", synced.message)
        assert m, synced.message
        lost = range(int(m.group(1)), int(m.group(2)) + 1)
    want = [0.0, 0.0]  # x, y
    for i in range(adds):
        if seqs[i] not in lost:
            want[(i + 1) % 2] = want[i % 2] + 1
    outcomes = {"read": 0, "ran": 0, "did not run": 0, "refused": 0}
    for f in reads:
        try:
            np.testing.assert_array_equal(f.result(timeout=60), np.ones(n, np.float32))
            outcomes["read"] += 1
        except cubed_client.UnavailableError as e:
            if re.fullmatch(r"command \d+ ran, but the daemon restarted before its reply",
                            e.message):
                outcomes["ran"] += 1
            elif re.fullmatch(r"command \d+ did not run: the daemon restarted before it",
                              e.message):
                outcomes["did not run"] += 1
            else:  # The old daemon refused it: it came after the freeze.
                assert "the daemon is draining" in e.message, e.message
                outcomes["refused"] += 1
    got = [c.read(x)[0], c.read(y)[0]]
    assert got == want, (synced, got, want)
    c.sync()  # Reported once.
    print(f"adds not run: {len(lost)} of {adds}; x, y = {got}; reads: {outcomes}; "
          f"sync: {synced}")
    c.close()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_a_new_daemon_without_the_session_fails_clearly(restart: Restart, carrier: str) -> None:
    c = cubed_client.connect(restart.address, carrier=carrier, resume_timeout=20, timeout=30)
    session = c.session
    t = c.create(np.ones(16, np.float32))
    c.sync()
    restart.drain()
    restart.restore(restore=False)
    start = time.monotonic()
    with pytest.raises(cubed_client.UnavailableError) as e:
        c.read(t)
    # Refused (NOT_FOUND) at once, not retried until resume_timeout.
    assert time.monotonic() - start < 10
    assert f"session {session} lost" in e.value.message
    assert "resuming the session for 20 s failed" in e.value.message
    with pytest.raises(cubed_client.UnavailableError):
        c.sync()
    c.close()


@pytest.mark.parametrize("carrier", CARRIERS)
def test_without_resume_timeout_the_session_is_lost(restart: Restart, carrier: str) -> None:
    c = cubed_client.connect(restart.address, carrier=carrier, timeout=30)
    session = c.session
    x = np.arange(64, dtype=np.float32)
    t = c.create(x)
    c.sync()
    restart.drain()
    restart.restore()
    with pytest.raises(cubed_client.UnavailableError) as e:
        for _ in range(100):  # Until the reader has seen the end.
            c.read(t)
            time.sleep(0.05)
    assert f"session {session} lost" in e.value.message
    c.close()
    # The daemon did restore it: a client joining the session by id (unary) reads the bytes.
    with cubed_client.connect(restart.new.address, session=session) as joined:
        np.testing.assert_array_equal(joined.read(joined.adopt(t.id, x.nbytes, x.shape,
                                                               np.float32)), x)


def test_unary_calls_carry_on_with_the_restored_session(restart: Restart) -> None:
    c = cubed_client.connect(restart.address, transport="unary", resume_timeout=20, timeout=30)
    session = c.session
    x = np.arange(100, dtype=np.float32)
    t = c.create(x)
    u = c.add(t, 1.0)
    restart.drain()
    starter = threading.Timer(0.5, restart.restore)
    starter.start()
    try:
        # Sent while no daemon listens: the call waits for the new one (nothing ran yet).
        v = c.mul(u, 3.0)
        np.testing.assert_array_equal(c.read(v), (x + 1) * 3)
    finally:
        starter.join()
    np.testing.assert_array_equal(c.read(t), x)
    assert c.session == session
    c.close()
