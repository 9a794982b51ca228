"""connect(): opens a Client, choosing the transport (session stream or unary calls) and what
carries the stream (the command ring or gRPC) from the address and the daemon's answers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple, Union

import grpc

from ._address import channel_options, default_address, ring_socket_path, target_of
from ._client import Client
from ._errors import UnimplementedError
from ._transport import StreamTransport, UnaryTransport
from . import _native

PathOrBytes = Union[str, os.PathLike, bytes]


def _pem(value: Optional[PathOrBytes]) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def connect(address: Optional[str] = None, *, timeout: float = 60.0, device: int = 0,
            lease: Optional[float] = None, transport: str = "auto", token: Optional[str] = None,
            tls: Optional[bool] = None, root_certificates: Optional[PathOrBytes] = None,
            certificate_chain: Optional[PathOrBytes] = None,
            private_key: Optional[PathOrBytes] = None, server_name: Optional[str] = None,
            max_message_bytes: int = 1 << 30, session: int = 0,
            region_threshold: int = 1 << 20, carrier: str = "auto",
            spin: Optional[float] = None,
            resume_timeout: Optional[float] = None, core: str = "auto") -> "Client":
    """Connects to a cubed daemon and opens a session on ``device``.

    Args:
        address: ``"unix:/path/cubed.sock"``, a socket path starting with ``/``,
            ``"host:port"`` (TCP), or any gRPC target, e.g. one name for several daemons
            (``"ipv4:10.0.0.1:50051,10.0.0.2:50051"``, ``"dns:///cubed-headless:50051"``):
            the client then connects to one of them, picked at random, and every call of its
            session goes there (docs/operations.md, "A fleet"). Default: default_address().
        timeout: deadline of each call and of each answer on the stream, seconds.
        device: device index to open the session on.
        lease: session lease in seconds (None: the daemon's --session_lease). The daemon frees
            the session when this long passes without a command.
        transport: ``"stream"`` (the pipelined session stream), ``"unary"`` (one RPC per call),
            or ``"auto"``: the stream, falling back to unary calls when the daemon has no stream
            (UNIMPLEMENTED). The environment variable CUBED_CLIENT_TRANSPORT overrides it.
        token: sent as ``authorization: Bearer <token>`` metadata on every call.
        tls: use TLS; implied by any of the three certificate arguments.
        root_certificates: PEM (bytes or a file path) of the CA that signed the daemon's
            certificate; None: the system's roots.
        certificate_chain, private_key: PEM of a client certificate and its key (mutual TLS).
        server_name: the name to check the daemon's certificate against, when it differs from
            the address's host.
        max_message_bytes: largest message sent or received.
        session: join this existing session (e.g. from ``cubectl session open``) instead of
            opening one; uses unary calls and does not close the session on close().
        region_threshold: on the stream over a Unix socket (a daemon on this host), create()
            and read() of this many bytes or more move them through a shared-memory region the
            client registers with its session (docs/api.md, "Shared-memory regions"): one
            memcpy on this side, none through gRPC. 0: never. Falls back to the stream when the
            daemon has no region socket.
        carrier: what carries the stream: ``"auto"`` (the daemon's command ring in shared
            memory for a daemon on this host, docs/api.md "The command ring"; gRPC otherwise),
            ``"ring"`` (the ring, or UnavailableError; for a ``unix:`` address, else as auto) or
            ``"grpc"``. The environment variable CUBED_CLIENT_CARRIER overrides it.
        spin: over the command ring, how long (seconds) a thread waiting for an answer polls
            the shared memory for it before it sleeps (an answer found so costs no thread
            wake-up). None: four times what the daemon suggests when it opens the ring (its
            --ring_spin_us: 50 µs on hosts with 8 cores or more, 0 on smaller ones, where
            polling would take the CPU the daemon answers with), at most 1 ms. The environment
            variable CUBED_CLIENT_SPIN (seconds) overrides it.
        resume_timeout: on the session stream, when the daemon ends the stream UNAVAILABLE (it
            drained with a checkpoint: ``cubectl drain --checkpoint``, or SIGTERM with
            --checkpoint_dir), keep trying this long (seconds) to take the session back on the
            daemon that restores it (--restore) on the same address; the client then carries
            on with the same session and tensors. Commands awaiting an answer then raise
            UnavailableError saying whether they ran, the next sync raises UnavailableError
            naming the commands that did not run, and commands sent meanwhile go out once the
            session is back (over the command ring the sender waits for it). Unary calls
            made while the daemon is unreachable wait for it (up to ``timeout``). Turns
            ``region_threshold`` off (regions were the old daemon's mappings). None or 0:
            the stream's end loses the session (UnavailableError "session N lost"). See
            Note [Resume in Python] in _resume.py and docs/reliability.md.
        core: what speaks the session stream: ``"auto"`` (the default: native when the
            library loads and the options are ones it serves, the Python core otherwise,
            silently), ``"native"`` (the C++ SDK through libcubed_client_c.so: Note [One
            client core] in client/c_api/cubed_client_c.h; FailedPreconditionError when the
            library is not found, see client/python/README.md, "The native core") or
            ``"python"`` (this package's own implementation). Both give the same API and
            exceptions; native is about twice as fast on small commands. What only the
            Python core serves, whichever core is asked for: unary calls
            (``transport="unary"``, a joined ``session``) and TLS without
            ``root_certificates``. What ``"auto"`` leaves to the Python core: ``resume_timeout``
            with the command ring possible (a ``unix:`` address and ``carrier`` not
            ``"grpc"``): the C++ SDK resumes a gRPC stream only (Note [Stream resume] in
            client/stream_transport.h). The environment variable CUBED_CLIENT_CORE overrides it.

    Raises:
        UnavailableError: the daemon cannot be reached.
        CubedError: the daemon refused the session (e.g. NotFoundError for an unknown device).
    """
    spin_env = os.environ.get("CUBED_CLIENT_SPIN", "").strip()
    if spin_env:
        try:
            spin = float(spin_env)
        except ValueError:
            raise ValueError(f"CUBED_CLIENT_SPIN must be a number of seconds, got {spin_env!r}")
    if spin is not None and not 0.0 <= spin <= 1.0:
        raise ValueError(f"spin must be between 0 and 1 second, got {spin!r}")
    if resume_timeout is not None and not 0.0 <= resume_timeout <= 7 * 86400:
        raise ValueError(f"resume_timeout must be between 0 and 7 days, got {resume_timeout!r}")
    resume = float(resume_timeout or 0.0)
    target = target_of(address or default_address())
    # Note [One connection per session] in _address.py.
    options = [("grpc.max_send_message_length", max_message_bytes),
               ("grpc.max_receive_message_length", max_message_bytes),
               *channel_options(target, join=bool(session))]
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    if resume:
        # Note [Resume in Python]: unary calls find the restarted daemon sooner than after
        # gRPC's default backoff (1 s growing to 120 s).
        options += [("grpc.initial_reconnect_backoff_ms", 50),
                    ("grpc.max_reconnect_backoff_ms", 250)]
        region_threshold = 0  # Regions do not survive a restart.
    creds = None
    if tls or root_certificates or certificate_chain or private_key:
        creds = grpc.ssl_channel_credentials(root_certificates=_pem(root_certificates),
                                             private_key=_pem(private_key),
                                             certificate_chain=_pem(certificate_chain))

    def make_channel(extra: Sequence[Tuple[str, Any]] = ()) -> grpc.Channel:
        if creds is not None:
            return grpc.secure_channel(target, creds, options=[*options, *extra])
        return grpc.insecure_channel(target, options=[*options, *extra])

    channel = make_channel()
    # Each resume attempt on a fresh channel with subchannels of its own, so that it connects
    # at once instead of answering from the old channel's reconnect backoff (as in C++).
    reconnect = (lambda: make_channel([("grpc.use_local_subchannel_pool", 1)])) if resume else None
    metadata = [("authorization", f"Bearer {token}")] if token else []
    lease_ms = 0 if lease is None else max(1, int(lease * 1000))
    mode = os.environ.get("CUBED_CLIENT_TRANSPORT", "").strip().lower() or transport
    if mode not in ("auto", "stream", "unary"):
        raise ValueError(f"transport must be 'auto', 'stream' or 'unary', got {mode!r}")
    carrier = os.environ.get("CUBED_CLIENT_CARRIER", "").strip().lower() or carrier
    if carrier not in ("auto", "ring", "grpc"):
        raise ValueError(f"carrier must be 'auto', 'ring' or 'grpc', got {carrier!r}")
    ring = ring_socket_path(target) if carrier != "grpc" else None
    core = os.environ.get("CUBED_CLIENT_CORE", "").strip().lower() or core
    if core not in ("python", "native", "auto"):
        raise ValueError(f"core must be 'python', 'native' or 'auto', got {core!r}")
    # The Python core serves what the native one does not: unary calls (below), and TLS with
    # the system's root certificates (the C++ SDK reads a CA file only). "auto" also leaves it
    # a resume that may run over the command ring: the C++ SDK resumes gRPC streams only (Note
    # [Stream resume] in client/stream_transport.h), and "auto" must not lose what the option
    # promises; an explicit "native" gets the C++ SDK's behaviour.
    if core == "auto":
        core = "python" if resume and ring is not None else \
            "native" if _native.available() else "python"
    native = core == "native" and not (tls and not root_certificates)
    t: Any
    try:
        if native and not session and mode != "unary":
            try:
                t = _native.NativeTransport(
                    target, timeout, device, lease_ms, carrier, token=token,
                    root_certificates=root_certificates, certificate_chain=certificate_chain,
                    private_key=private_key, server_name=server_name,
                    max_message_bytes=max_message_bytes, resume_timeout=resume, spin=spin)
                # Unary calls on the C++ SDK's channel: the daemon of the session.
                channel.close()
                channel = t.channel()
            except UnimplementedError:
                if mode == "stream":
                    raise
                t = UnaryTransport(channel, metadata, timeout, device, lease_ms,
                                   wait_for_ready=bool(resume))
        elif session or mode == "unary":
            t = UnaryTransport(channel, metadata, timeout, device, lease_ms, session,
                                    wait_for_ready=bool(resume))
        else:
            try:
                t = StreamTransport(channel, metadata, timeout, device, lease_ms, ring,
                                    require_ring=carrier == "ring" and ring is not None,
                                    spin=spin, reconnect=reconnect, resume_timeout=resume)
            except UnimplementedError:
                if mode == "stream":
                    raise
                t = UnaryTransport(channel, metadata, timeout, device, lease_ms,
                                   wait_for_ready=bool(resume))
    except BaseException:
        channel.close()
        raise
    return Client(channel, t, metadata, timeout, device, target, region_threshold)
