"""Which client core connect() picks (its ``core`` argument; client/python/README.md, "The native
core"): by default the native core (the C++ SDK through libcubed_client_c.so) wherever the library
loads and the options are ones it serves, the Python core otherwise, silently; ``core="python"``
and CUBED_CLIENT_CORE pin one."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import cubed_client
from cubed_client import _native
from cubed_client._transport import StreamTransport, UnaryTransport
from conftest import Daemon

NATIVE = _native.available()


@pytest.fixture(autouse=True)
def no_core_override(monkeypatch: pytest.MonkeyPatch) -> None:
    # These tests name the core themselves: a run's CUBED_CLIENT_CORE would override them.
    monkeypatch.delenv("CUBED_CLIENT_CORE", raising=False)


def core_of(c: cubed_client.Client) -> str:
    t = c._transport
    if isinstance(t, (StreamTransport, UnaryTransport)):
        return "python"
    assert isinstance(t, _native.NativeTransport), type(t)
    return "native"


def roundtrip(c: cubed_client.Client) -> None:
    x = np.arange(1000, dtype=np.float32)
    assert (c.read(c.create(x)) == x).all()


@pytest.mark.parametrize("carrier", ["ring", "grpc"])
def test_the_default_core_is_native_where_the_library_loads(daemon: Daemon, carrier: str) -> None:
    with cubed_client.connect(daemon.address, carrier=carrier, timeout=30) as c:
        assert core_of(c) == ("native" if NATIVE else "python")
        assert c.carrier == carrier
        roundtrip(c)


def test_core_python_pins_the_python_core(daemon: Daemon) -> None:
    with cubed_client.connect(daemon.address, core="python", timeout=30) as c:
        assert core_of(c) == "python"
        assert c.carrier == "ring"
        roundtrip(c)


def test_auto_leaves_a_resume_over_the_ring_to_the_python_core(daemon: Daemon) -> None:
    # The C++ SDK resumes gRPC streams only (Note [Stream resume]): a resume_timeout that may
    # run over the ring goes to the Python core, which resumes both.
    with cubed_client.connect(daemon.address, resume_timeout=5, timeout=30) as c:
        assert core_of(c) == "python"
        assert c.carrier == "ring"
        roundtrip(c)
    with cubed_client.connect(daemon.address, carrier="grpc", resume_timeout=5, timeout=30) as c:
        assert core_of(c) == ("native" if NATIVE else "python")
        roundtrip(c)


def test_unary_calls_are_the_python_cores_whatever_the_core(daemon: Daemon) -> None:
    for core in ("auto", "native") if NATIVE else ("auto",):
        with cubed_client.connect(daemon.address, transport="unary", core=core,
                                  timeout=30) as c:
            assert core_of(c) == "python" and c.transport == "unary"
            roundtrip(c)


def test_the_environment_overrides_the_argument(daemon: Daemon,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBED_CLIENT_CORE", "python")
    with cubed_client.connect(daemon.address, core="native", timeout=30) as c:
        assert core_of(c) == "python"
    monkeypatch.setenv("CUBED_CLIENT_CORE", "fast")
    with pytest.raises(ValueError, match="core must be"):
        cubed_client.connect(daemon.address)
    monkeypatch.delenv("CUBED_CLIENT_CORE")
    with pytest.raises(ValueError, match="core must be"):
        cubed_client.connect(daemon.address, core="cpp")


def test_without_the_library_the_default_falls_back_silently(daemon: Daemon) -> None:
    # A fresh process (this one may have loaded the library already) whose library is missing:
    # the default core is the Python one, without a word; core="native" says what is missing.
    script = f"""
import numpy as np, cubed_client
from cubed_client._transport import StreamTransport
with cubed_client.connect({daemon.address!r}, timeout=30) as c:
    assert isinstance(c._transport, StreamTransport), type(c._transport)
    assert (c.read(c.create(np.arange(10))) == np.arange(10)).all()
try:
    cubed_client.connect({daemon.address!r}, core="native", timeout=30)
except cubed_client.FailedPreconditionError as e:
    assert "cannot be loaded" in str(e), e
    print("refused:", e)
else:
    raise SystemExit("core='native' connected without its library")
"""
    env = {k: v for k, v in os.environ.items() if k != "CUBED_CLIENT_CORE"}
    env["CUBED_CLIENT_LIBRARY"] = os.path.join(daemon.dir, "no-such-libcubed_client_c.so")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "refused:" in r.stdout and "no-such-libcubed_client_c.so" in r.stdout
    assert r.stderr == "", r.stderr
