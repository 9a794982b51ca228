"""Fixtures: the REAL cubed daemon (64 MiB memory limit, as the bad-input table assumes) on a
temporary Unix socket, and clients of it over each transport.

The daemon binary is $CUBED_BINARY, or --cubed=PATH on the pytest command line; its backend is
cpu, or $CUBED_TEST_BACKEND, or --backend=cpu|cuda (tests of backend-specific behaviour read
BACKEND and skip elsewhere)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Iterator, Optional

import pytest

import cubed_client


BACKEND = "cpu"
"""The backend every Daemon of this run starts (pytest_configure sets it from --backend)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cubed", default=os.environ.get("CUBED_BINARY"),
                     help="path of the cubed daemon binary")
    parser.addoption("--backend", default=os.environ.get("CUBED_TEST_BACKEND", "cpu"),
                     choices=["cpu", "cuda"], help="the daemons' --backend (default cpu)")


def pytest_configure(config: pytest.Config) -> None:
    global BACKEND
    BACKEND = config.getoption("--backend")


class Daemon:
    """cubed on a temporary Unix socket (and TCP, given --tcp=...), or on ``socket`` (a restart
    on another daemon's socket: close this one before that one, whose folder holds it); stopped
    with SIGTERM by close()."""

    def __init__(self, binary: str, *flags: str, socket: Optional[str] = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="cubed-pysdk-")
        self.socket = socket or os.path.join(self.dir, "cubed.sock")
        self.address = f"unix:{self.socket}"
        self.tcp_address: Optional[str] = None
        """HOST:PORT of the TCP listener (given --tcp=...), from the ready file; else None."""
        ready = os.path.join(self.dir, "ready")
        self.log_path = os.path.join(self.dir, "log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, f"--listen={self.socket}", f"--ready_file={ready}", f"--backend={BACKEND}",
                 "--memory_limit=64MiB", *flags], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cubed exited ({self.proc.returncode}):\n{self.log()}")
            if os.path.exists(ready) and open(ready).read().endswith("\n"):
                for line in open(ready).read().splitlines():
                    if line.startswith("tcp="):
                        self.tcp_address = line[len("tcp="):]
                return
            time.sleep(0.02)
        self.close()
        raise RuntimeError(f"cubed did not become ready within 60 s:\n{self.log()}")

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def close(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode


@contextlib.contextmanager
def running(request: pytest.FixtureRequest, *flags: str) -> Iterator[Daemon]:
    """A Daemon of the run's binary with `flags`, for a fixture; afterwards asserts that it
    exited cleanly on SIGTERM."""
    binary = request.config.getoption("--cubed")
    if not binary:
        pytest.fail("no daemon binary: set CUBED_BINARY or pass --cubed=PATH")
    d = Daemon(binary, *flags)
    try:
        yield d
    finally:
        log = d.log()
        code = d.close()
        assert code == 0, f"cubed exited with {code} after SIGTERM:\n{log}"


@pytest.fixture(scope="session")
def daemon(request: pytest.FixtureRequest) -> Iterator[Daemon]:
    with running(request) as d:
        yield d


@pytest.fixture(params=["ring", "grpc", "unary"])
def client(daemon: Daemon, request: pytest.FixtureRequest) -> Iterator[cubed_client.Client]:
    """Every test once per transport: the stream over the command ring (the default for a local
    daemon), the stream over gRPC, and unary calls."""
    transport = "unary" if request.param == "unary" else "stream"
    carrier = "ring" if request.param == "ring" else "grpc"
    with cubed_client.connect(daemon.address, transport=transport, carrier=carrier,
                              timeout=30) as c:
        assert c.transport == transport
        assert c.carrier == carrier
        yield c


@pytest.fixture
def stream_client(daemon: Daemon) -> Iterator[cubed_client.Client]:
    with cubed_client.connect(daemon.address, transport="stream", timeout=30) as c:
        yield c
