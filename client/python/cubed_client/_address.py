"""Where a daemon is: its gRPC target, and the sockets beside a Unix one (the region socket,
docs/api.md "Shared-memory regions"; the ring socket, "The command ring")."""

import os
from typing import Optional


def default_address() -> str:
    """$CUBED_ADDRESS, else the daemon's default socket: unix:$XDG_RUNTIME_DIR/cubed.sock, or
    unix:/tmp/cubed-$UID/cubed.sock when XDG_RUNTIME_DIR is unset (as deploy/run.sh)."""
    if os.environ.get("CUBED_ADDRESS"):
        return os.environ["CUBED_ADDRESS"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return f"unix:{runtime}/cubed.sock"
    return f"unix:/tmp/cubed-{os.getuid()}/cubed.sock"


def target_of(address: str) -> str:
    """The gRPC target of ``address``: a socket path starting with ``/`` gets ``unix:``."""
    if address.startswith("/"):
        return f"unix:{address}"
    return address


def region_socket_path(target: str) -> Optional[str]:
    """The region socket of a daemon reached at gRPC target ``target``, or None for TCP."""
    if target.startswith("unix:"):
        return target[len("unix:"):] + ".regions"
    return None


def ring_socket_path(target: str) -> Optional[str]:
    """The ring socket of a daemon reached at gRPC target ``target``, or None for TCP."""
    if target.startswith("unix:"):
        return target[len("unix:"):] + ".ring"
    return None
