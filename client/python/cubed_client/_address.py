"""Where a daemon is: its gRPC target, and the sockets beside a Unix one (the region socket,
docs/api.md "Shared-memory regions"; the ring socket, "The command ring")."""

import json
import os
from typing import Any, List, Optional, Tuple


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


# Note [One connection per session]: a session lives on the daemon that opened it, and a name may
# stand for several daemons (a target with several addresses, a headless Kubernetes Service's
# DNS name; docs/operations.md, "A fleet"). gRPC's round_robin policy would send each call of a
# channel to the next daemon, and every unary call of the session (the unary transport; a
# trace's StartProfile and EndProfile on the stream transport) that lands elsewhere answers
# NOT_FOUND. So a client's channel is always pick_first, one connection at a time, and no name's
# resolver may switch it to another policy. A client that opens a session over the network
# shuffles the addresses first (gRFC A62's shuffleAddressList, in grpcio 1.57 and later; older
# ones ignore it) and has a connection of its own (not one shared with the process's other
# channels to the same name, which pick_first would take whatever the order), so that clients
# spread over the daemons as a Service's virtual IP spreads them. Joining a session keeps the
# name's order; a Unix socket is one daemon, and its clients share the connection as before.
def channel_options(target: str, join: bool) -> List[Tuple[str, Any]]:
    """gRPC channel arguments that keep a client on one connection (Note [One connection per
    session]); ``join``: the client joins an existing session."""
    spread = not join and not target.startswith("unix:")
    policy = {"pick_first": {"shuffleAddressList": True} if spread else {}}
    options: List[Tuple[str, Any]] = [
        ("grpc.service_config", json.dumps({"loadBalancingConfig": [policy]})),
        ("grpc.service_config_disable_resolution", 1)]
    if spread:
        options.append(("grpc.use_local_subchannel_pool", 1))
    return options
