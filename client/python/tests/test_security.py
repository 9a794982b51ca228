"""connect()'s security options against the REAL daemon (docs/security.md): TLS with a root
certificate and bearer tokens, mutual TLS with a client certificate, server_name, and the
per-principal client_kernels permission. Certificates are generated per run by
tests/auth/make_certs.sh (openssl), as the C++ auth tests do (tests/auth/auth_test.cc)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import grpc
import numpy as np
import pytest

import cubed_client
from cubed_client._proto import types_pb2
import conftest
from conftest import Daemon

BOB_TOKEN = "bob-token-0123456789abcdef"          # all RPCs, no client kernels
ALICE_TOKEN = "alice-token-0123456789abcdef"      # all RPCs and client kernels
WRONG_TOKEN = "wrong-token-0123456789abcdef"      # nobody's

MAKE_CERTS = Path(__file__).resolve().parents[3] / "tests" / "auth" / "make_certs.sh"
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def pki() -> Iterator[Path]:
    """A directory with certs/ (make_certs.sh), tokens (mode 0600) and auth.textproto."""
    if not MAKE_CERTS.exists():
        pytest.skip(f"{MAKE_CERTS} not found (not run from a cubed checkout)")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = Path(tempfile.mkdtemp(prefix="cubed-pysdk-tls-"))
    try:
        subprocess.run([str(MAKE_CERTS), str(d / "certs")], check=True, capture_output=True,
                       timeout=60)
        tokens = d / "tokens"
        tokens.write_text(f"# principal token\nbob {BOB_TOKEN}\nalice {ALICE_TOKEN}\n")
        tokens.chmod(0o600)
        (d / "auth.textproto").write_text("""
            token_file: "tokens"
            principal { name: "bob" permissions { all_rpcs: true } }
            principal { name: "alice" permissions { all_rpcs: true client_kernels: true } }
            principal { name: "ci" cert_common_names: "ci-client" permissions { all_rpcs: true } }
        """)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _start(request: pytest.FixtureRequest, pki: Path, mtls: bool) -> Iterator[Daemon]:
    binary = request.config.getoption("--cubed")
    if not binary:
        pytest.fail("no daemon binary: set CUBED_BINARY or pass --cubed=PATH")
    flags = ["--tcp=127.0.0.1:0", f"--auth_config={pki / 'auth.textproto'}",
             f"--tls_cert={pki / 'certs' / 'server.pem'}",
             f"--tls_key={pki / 'certs' / 'server.key'}"]
    if mtls:
        flags.append(f"--tls_client_ca={pki / 'certs' / 'ca.pem'}")
    d = Daemon(binary, *flags)
    assert d.tcp_address, f"no tcp= line in the ready file:\n{d.log()}"
    yield d
    log = d.log()
    code = d.close()
    assert code == 0, f"cubed exited with {code} after SIGTERM:\n{log}"
    # Tokens never reach the log, not even a wrong one.
    for token in (BOB_TOKEN, ALICE_TOKEN, WRONG_TOKEN):
        assert token not in log


@pytest.fixture(scope="module")
def tls_daemon(request: pytest.FixtureRequest, pki: Path) -> Iterator[Daemon]:
    """TLS on TCP (no client certificates asked for), tokens from the auth config."""
    yield from _start(request, pki, mtls=False)


@pytest.fixture(scope="module")
def mtls_daemon(request: pytest.FixtureRequest, pki: Path) -> Iterator[Daemon]:
    """Mutual TLS: the daemon requires a client certificate signed by the test CA."""
    yield from _start(request, pki, mtls=True)


def _connect(d: Daemon, pki: Path, **kwargs) -> cubed_client.Client:
    kwargs.setdefault("root_certificates", str(pki / "certs" / "ca.pem"))
    kwargs.setdefault("timeout", TIMEOUT)
    return cubed_client.connect(d.tcp_address, **kwargs)


TRANSPORTS = ["stream", "unary"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tls_token_round_trip(tls_daemon: Daemon, pki: Path, transport: str) -> None:
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    with _connect(tls_daemon, pki, token=BOB_TOKEN, transport=transport) as c:
        assert c.transport == transport
        t = c.create(x)
        np.testing.assert_array_equal(c.read(t), x)
        np.testing.assert_array_equal(c.read(t + t), 2 * x)
        assert c.info().devices == 1


def test_root_certificates_as_bytes(tls_daemon: Daemon, pki: Path) -> None:
    ca = (pki / "certs" / "ca.pem").read_bytes()
    with _connect(tls_daemon, pki, token=BOB_TOKEN, root_certificates=ca) as c:
        np.testing.assert_array_equal(c.read(c.create(np.ones(3, np.int32))), [1, 1, 1])


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("token", [None, WRONG_TOKEN], ids=["missing", "wrong"])
def test_bad_token_is_unauthenticated_and_allocates_nothing(
        tls_daemon: Daemon, pki: Path, transport: str, token: str) -> None:
    with _connect(tls_daemon, pki, token=BOB_TOKEN, transport="unary") as good:
        kept = good.create(np.ones(16, np.float32))  # Something in use, so "nothing" is visible.
        before = good.memory_usage()

        with pytest.raises(cubed_client.UnauthenticatedError) as e:
            _connect(tls_daemon, pki, token=token, transport=transport)
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert WRONG_TOKEN not in str(e.value)

        # Requests naming the good client's session (joined: no OpenSession) are refused before
        # they reach it.
        with _connect(tls_daemon, pki, token=token, session=good.session) as joined:
            with pytest.raises(cubed_client.UnauthenticatedError) as e:
                joined.create(np.ones(1 << 16, np.float32))
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert WRONG_TOKEN not in str(e.value)
            with pytest.raises(cubed_client.UnauthenticatedError):
                joined.empty((1 << 16,), np.float32)
            with pytest.raises(cubed_client.UnauthenticatedError):
                joined.memory_usage()
            with pytest.raises(cubed_client.UnauthenticatedError):
                joined.info()

        assert good.memory_usage() == before
        np.testing.assert_array_equal(good.read(kept), np.ones(16, np.float32))


def test_server_name(tls_daemon: Daemon, pki: Path) -> None:
    # The certificate names localhost and 127.0.0.1: checking it against another name fails.
    with _connect(tls_daemon, pki, token=BOB_TOKEN, server_name="localhost") as c:
        np.testing.assert_array_equal(c.read(c.create(np.ones(2, np.float32))), [1, 1])
    with pytest.raises(cubed_client.UnavailableError):
        _connect(tls_daemon, pki, token=BOB_TOKEN, server_name="not-the-daemon.example")


def test_plaintext_to_tls_port_fails(tls_daemon: Daemon, pki: Path) -> None:
    with pytest.raises(cubed_client.UnavailableError):
        cubed_client.connect(tls_daemon.tcp_address, token=BOB_TOKEN, timeout=TIMEOUT)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mtls_client_certificate(mtls_daemon: Daemon, pki: Path, transport: str) -> None:
    certs = pki / "certs"
    x = np.linspace(0, 1, 10, dtype=np.float32)
    with _connect(mtls_daemon, pki, certificate_chain=str(certs / "client.pem"),
                  private_key=str(certs / "client.key"), transport=transport) as c:
        np.testing.assert_array_equal(c.read(c.create(x)), x)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("cert", [None, "rogue"], ids=["no-cert", "other-ca"])
def test_mtls_without_client_certificate_fails(mtls_daemon: Daemon, pki: Path, transport: str,
                                               cert: str) -> None:
    # The handshake fails, even with a valid token: no client certificate, or one that another
    # CA signed (with a CN a principal names).
    kwargs = {}
    if cert:
        kwargs = {"certificate_chain": str(pki / "certs" / f"{cert}.pem"),
                  "private_key": str(pki / "certs" / f"{cert}.key")}
    with pytest.raises(cubed_client.UnavailableError):
        _connect(mtls_daemon, pki, token=BOB_TOKEN, transport=transport, **kwargs)


def test_mtls_certificate_no_principal_names(mtls_daemon: Daemon, pki: Path) -> None:
    certs = pki / "certs"
    with pytest.raises(cubed_client.UnauthenticatedError):
        _connect(mtls_daemon, pki, certificate_chain=str(certs / "stranger.pem"),
                 private_key=str(certs / "stranger.key"))


def _cuda_kernel() -> types_pb2.Kernel:
    return types_pb2.Kernel(cuda_source=types_pb2.CudaSourceKernel(
        # The ABI's parameters: each buffer's pointer, then the metadata's (docs/kernel-abi.md).
        source='extern "C" __global__ void k(float* x, const unsigned* meta) { x[0] = 1; }',
        entry_point="k",
        cube_dim=types_pb2.CubeDim(x=1, y=1, z=1)))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_client_kernel_needs_permission(tls_daemon: Daemon, pki: Path, transport: str) -> None:
    with _connect(tls_daemon, pki, token=BOB_TOKEN, transport=transport) as bob:
        t = bob.create(np.zeros(4, np.float32))
        with pytest.raises(cubed_client.PermissionDeniedError) as e:
            bob.execute(_cuda_kernel(), (1, 1, 1), [t], metadata=[])
            bob.sync()  # The stream reports a failed command at the next sync.
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert "client_kernels" in e.value.message
    # A principal granted client_kernels passes that check: the CUDA backend runs the kernel, the
    # CPU backend answers that it cannot.
    with _connect(tls_daemon, pki, token=ALICE_TOKEN, transport=transport) as alice:
        assert alice.info().backend == conftest.BACKEND
        t = alice.create(np.zeros(4, np.float32))
        if conftest.BACKEND == "cuda":
            alice.execute(_cuda_kernel(), (1, 1, 1), [t], metadata=[])
            assert alice.read(t).tolist() == [1, 0, 0, 0]
        else:
            with pytest.raises(cubed_client.UnimplementedError) as e:
                alice.execute(_cuda_kernel(), (1, 1, 1), [t], metadata=[])
                alice.sync()
            assert "cuda backend" in e.value.message
